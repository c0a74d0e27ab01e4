// The xg dialect: model-level graph ops of the xcc compiler.
#pragma once

#include "mlir/IR/Dialect.h"

#include "dialects/XG/IR/XGDialect.h.inc"
