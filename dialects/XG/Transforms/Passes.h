// xg transformation passes (declared in Passes.td).
#pragma once

#include <memory>

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include "dialects/XG/IR/XGDialect.h"

namespace xcc::xg {

#define GEN_PASS_DECL
#include "dialects/XG/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "dialects/XG/Transforms/Passes.h.inc"

}  // namespace xcc::xg
