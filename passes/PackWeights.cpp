//===- PackWeights.cpp - fold weight concats, choose packed layouts -------===//
#include "dialects/XG/IR/XGOps.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;

namespace xcc {
#define GEN_PASS_DEF_XGPACKWEIGHTS
#include "passes/Passes.h.inc"
} // namespace xcc

namespace xcc::xg {

namespace {

struct PackWeightsPass : public impl::XGPackWeightsBase<PackWeightsPass> {
  using XGPackWeightsBase::XGPackWeightsBase;

  void runOnOperation() override {
    if (packNr <= 0) {
      getOperation().emitError() << "pack-nr must be positive, got " << packNr;
      return signalPassFailure();
    }
    IRRewriter rewriter(&getContext());

    // 1. concat(weight, weight, ...) along dim 0 -> one weight with `sources`.
    SmallVector<ConcatOp> concats;
    getOperation().walk([&](ConcatOp op) { concats.push_back(op); });
    for (ConcatOp concat : concats) {
      if (concat.getAxis() != 0)
        continue;
      SmallVector<WeightOp> parts;
      for (Value in : concat.getInputs()) {
        auto w = in.getDefiningOp<WeightOp>();
        if (!w || w.getPackNr())
          break;
        parts.push_back(w);
      }
      if (parts.size() != concat.getInputs().size())
        continue;
      SmallVector<StringRef> sources;
      for (WeightOp w : parts)
        llvm::append_range(sources, w.getSourceNames());
      std::string name = llvm::join(sources, "+");
      rewriter.setInsertionPoint(concat);
      auto fused = rewriter.create<WeightOp>(concat.getLoc(), concat.getType(),
                                             rewriter.getStringAttr(name),
                                             rewriter.getStrArrayAttr(sources),
                                             /*pack_nr=*/nullptr);
      rewriter.replaceOp(concat, fused.getResult());
      for (WeightOp w : parts)
        if (w->use_empty())
          rewriter.eraseOp(w);
    }

    // 2. Linear weights get the packed layout; other uses keep a row-major
    // copy.
    SmallVector<LinearOp> linears;
    getOperation().walk([&](LinearOp op) { linears.push_back(op); });
    IntegerAttr nrAttr = rewriter.getI64IntegerAttr(packNr);
    for (LinearOp lin : linears) {
      auto w = lin.getWeight().getDefiningOp<WeightOp>();
      if (!w) {
        lin.emitError() << "linear weight must be an xg.weight after fusion";
        return signalPassFailure();
      }
      if (w.getPackNrAttr() == nrAttr)
        continue;
      bool onlyLinearWeightUses =
          llvm::all_of(w->getUses(), [](OpOperand &use) {
            auto user = dyn_cast<LinearOp>(use.getOwner());
            return user && use.get() == user.getWeight() &&
                   use.getOperandNumber() ==
                       user.getWeightMutable().getOperandNumber();
          });
      if (onlyLinearWeightUses && !w.getPackNr()) {
        w.setPackNrAttr(nrAttr);
        continue;
      }
      rewriter.setInsertionPoint(lin);
      auto packed = rewriter.create<WeightOp>(
          w.getLoc(), w.getType(), w.getNameAttr(), w.getSourcesAttr(), nrAttr);
      lin.getWeightMutable().assign(packed);
    }
  }
};

} // namespace

} // namespace xcc::xg
