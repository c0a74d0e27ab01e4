// xg operations (generated from XGOps.td).
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/XG/IR/XGDialect.h"
#include "runtime/kernels/weight_format.h"

#define GET_OP_CLASSES
#include "dialects/XG/IR/XGOps.h.inc"
