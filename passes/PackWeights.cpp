//===- PackWeights.cpp - fold weight concats, choose packed layouts -------===//
#include "dialects/XG/IR/XGOps.h"
#include "passes/PassUtils.h"
#include "passes/Passes.h"
#include "runtime/kernels/matmul.h"

#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;

namespace xcc {
#define GEN_PASS_DEF_XGPACKWEIGHTS
#include "passes/Passes.h.inc"
} // namespace xcc

namespace xcc::xg {

namespace {

Operation *firstOtherUser(WeightOp w) {
  for (OpOperand &use : w->getUses())
    if (!isLinearWeightUse(use) && !isEmbeddingTableUse(use))
      return use.getOwner();
  return nullptr;
}

struct PackWeightsPass : public impl::XGPackWeightsBase<PackWeightsPass> {
  using XGPackWeightsBase::XGPackWeightsBase;

  void runOnOperation() override {
    if (packNr <= 0) {
      getOperation().emitError() << "pack-nr must be positive, got " << packNr;
      return signalPassFailure();
    }
    IRRewriter rewriter(&getContext());

    // 1. concat(weight, weight, ...) along dim 0 -> one weight with `sources`
    // (parts of one storage format only: a fused weight has one format).
    SmallVector<ConcatOp> concats;
    getOperation().walk([&](ConcatOp op) { concats.push_back(op); });
    for (ConcatOp concat : concats) {
      if (concat.getAxis() != 0)
        continue;
      SmallVector<WeightOp> parts;
      for (Value in : concat.getInputs()) {
        auto w = in.getDefiningOp<WeightOp>();
        if (!w || w.getPackNr() ||
            (!parts.empty() && w.getFormatAttr() != parts[0].getFormatAttr()))
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
      auto fused = rewriter.create<WeightOp>(
          concat.getLoc(), concat.getType(), rewriter.getStringAttr(name),
          rewriter.getStrArrayAttr(sources),
          /*pack_nr=*/nullptr, parts[0].getFormatAttr());
      rewriter.replaceOp(concat, fused.getResult());
      for (WeightOp w : parts)
        if (w->use_empty())
          rewriter.eraseOp(w);
    }

    // 2. Weights read only as linear weights or embedding tables are packed in
    // place (the embedding lookup reads the packed layout, so a tied table is
    // stored once), if a linear reads them or their format is not f32. A
    // weight also read by other ops keeps its row-major f32 copy and the
    // linears get a packed one.
    IntegerAttr nrAttr = rewriter.getI64IntegerAttr(packNr);
    SmallVector<WeightOp> weights;
    getOperation().walk([&](WeightOp op) { weights.push_back(op); });
    for (WeightOp w : weights) {
      if (w.getPackNr())
        continue;
      bool linearUse = false, otherUse = false;
      for (OpOperand &use : w->getUses()) {
        if (isLinearWeightUse(use))
          linearUse = true;
        else if (!isEmbeddingTableUse(use))
          otherUse = true;
      }
      bool quantized = w.getWeightFormat() != xrt::WeightFormat::kF32;
      if (quantized && packNr != xrt::kPackNR) {
        w.emitError() << "a " << xrt::WeightFormatName(w.getWeightFormat())
                      << " weight needs pack-nr " << xrt::kPackNR << ", got "
                      << packNr;
        return signalPassFailure();
      }
      if (otherUse && quantized) {
        w.emitError() << "a " << xrt::WeightFormatName(w.getWeightFormat())
                      << " weight can only be read by linear and embedding "
                         "ops, not by "
                      << firstOtherUser(w)->getName();
        return signalPassFailure();
      }
      if (!otherUse && (linearUse || quantized)) {
        w.setPackNrAttr(nrAttr);
        continue;
      }
      if (!linearUse)
        continue;
      for (OpOperand &use : llvm::make_early_inc_range(w->getUses())) {
        if (!isLinearWeightUse(use))
          continue;
        rewriter.setInsertionPoint(use.getOwner());
        auto packed = rewriter.create<WeightOp>(
            w.getLoc(), w.getType(), w.getNameAttr(), w.getSourcesAttr(),
            nrAttr, w.getFormatAttr());
        use.set(packed);
      }
    }
    bool ok = true;
    getOperation().walk([&](LinearOp lin) {
      auto w = lin.getWeight().getDefiningOp<WeightOp>();
      if (!w || !w.getPackNr()) {
        lin.emitError() << "linear weight must be an xg.weight after fusion";
        ok = false;
      }
    });
    if (!ok)
      signalPassFailure();
  }
};

} // namespace

} // namespace xcc::xg
