// Loop nests for the ops that become generated dispatch code.
#pragma once

#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"

namespace xcc {

// Whether `op` is lowered to a generated dispatch (as opposed to a runtime
// microkernel call or no code at all).
bool isGeneratedDispatchOp(mlir::Operation *op);

// The number of workgroups of `op`'s dispatch: one per row of its result.
int64_t dispatchWorkgroups(mlir::Operation *op);

// Emits, at `b`'s insertion point, the computation of `op` for result rows
// [wgBegin, wgEnd). `views` holds one memref per operand, then one per result,
// shaped like the tensors (rank 2 views may be strided).
mlir::LogicalResult buildDispatchBody(mlir::OpBuilder &b, mlir::Operation *op,
                                      mlir::ArrayRef<mlir::Value> views,
                                      mlir::Value wgBegin, mlir::Value wgEnd);

} // namespace xcc
