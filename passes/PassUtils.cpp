#include "passes/PassUtils.h"

#include "mlir/Interfaces/InferTypeOpInterface.h"

using namespace mlir;

namespace xcc::xg {

LogicalResult reinferResultTypes(func::FuncOp func) {
  WalkResult walk = func.walk([&](Operation *op) {
    auto infer = dyn_cast<InferTypeOpInterface>(op);
    if (!infer)
      return WalkResult::advance();
    SmallVector<Type> types;
    if (failed(infer.inferReturnTypes(
            op->getContext(), op->getLoc(), op->getOperands(),
            op->getAttrDictionary(), op->getPropertiesStorage(),
            op->getRegions(), types)))
      return WalkResult::interrupt();
    for (auto [result, type] : llvm::zip(op->getResults(), types))
      result.setType(type);
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  Operation *terminator = func.getBody().back().getTerminator();
  func.setFunctionType(FunctionType::get(func.getContext(),
                                         func.getBody().getArgumentTypes(),
                                         terminator->getOperandTypes()));
  return success();
}

} // namespace xcc::xg
