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

// Whether `use` reads a weight as a linear's weight, or as an embedding
// lookup's table: the uses that read the packed layout of the matmul kernels
// (so the weight may be stored in any runtime/kernels/weight_format.h format).
bool isLinearWeightUse(mlir::OpOperand &use);
bool isEmbeddingTableUse(mlir::OpOperand &use);

} // namespace xcc::xg
