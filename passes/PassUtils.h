// Small helpers shared by the xg passes (attribute names:
// dialects/XG/IR/XGDialect.h).
#pragma once

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LogicalResult.h"

namespace xcc::xg {

// Re-derives the result type of every op in `func`, in order, through
// InferTypeOpInterface, then updates the function type. Used after argument
// types change.
mlir::LogicalResult reinferResultTypes(mlir::func::FuncOp func);

} // namespace xcc::xg
