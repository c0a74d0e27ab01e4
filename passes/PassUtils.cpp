#include "passes/PassUtils.h"

#include "dialects/XG/IR/XGOps.h"

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

bool isLinearWeightUse(OpOperand &use) {
  auto lin = dyn_cast<LinearOp>(use.getOwner());
  return lin &&
         use.getOperandNumber() == lin.getWeightMutable().getOperandNumber();
}

bool isEmbeddingTableUse(OpOperand &use) {
  auto emb = dyn_cast<EmbeddingOp>(use.getOwner());
  return emb &&
         use.getOperandNumber() == emb.getTableMutable().getOperandNumber();
}

} // namespace xcc::xg
