//===- Fuse.cpp - horizontal linear fusion and epilogue fusion ------------===//
#include "dialects/XG/IR/XGOps.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

using namespace mlir;

namespace xcc {
#define GEN_PASS_DEF_XGFUSE
#include "passes/Passes.h.inc"
} // namespace xcc

namespace xcc::xg {

namespace {

bool isPlainLinear(LinearOp op) {
  return !op.getAccumulator() && op.getWeight().getDefiningOp<WeightOp>() &&
         (!op.getBias() || op.getBias().getDefiningOp<WeightOp>());
}

// The storage format of a plain linear's weight (a fused weight has one).
StringAttr weightFormat(LinearOp op) {
  return op.getWeight().getDefiningOp<WeightOp>().getFormatAttr();
}

// linear(x, Wa), linear(x, Wb), ... -> split(linear(x, concat(Wa, Wb, ...))),
// for weights of one storage format.
struct FuseSiblingLinears : public OpRewritePattern<LinearOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(LinearOp root,
                                PatternRewriter &rewriter) const override {
    if (!isPlainLinear(root))
      return failure();
    Block *block = root->getBlock();
    SmallVector<LinearOp> siblings;
    for (Operation *user : root.getInput().getUsers()) {
      auto lin = dyn_cast<LinearOp>(user);
      if (!lin || lin->getBlock() != block ||
          lin.getInput() != root.getInput() || !isPlainLinear(lin) ||
          static_cast<bool>(lin.getBias()) !=
              static_cast<bool>(root.getBias()) ||
          weightFormat(lin) != weightFormat(root))
        continue;
      siblings.push_back(lin);
    }
    if (siblings.size() < 2)
      return failure();
    llvm::sort(siblings,
               [](LinearOp a, LinearOp b) { return a->isBeforeInBlock(b); });
    // Only the earliest sibling rewrites, so the group is fused once.
    if (siblings.front() != root)
      return failure();

    // Weights have no operands: hoisting them above the group is always legal.
    for (LinearOp lin : siblings) {
      for (Value w : {lin.getWeight(), lin.getBias()}) {
        if (!w)
          continue;
        Operation *def = w.getDefiningOp();
        if (!def->isBeforeInBlock(root))
          rewriter.moveOpBefore(def, root);
      }
    }
    rewriter.setInsertionPoint(root);
    SmallVector<Value> weights, biases;
    SmallVector<int64_t> sizes;
    for (LinearOp lin : siblings) {
      weights.push_back(lin.getWeight());
      if (lin.getBias())
        biases.push_back(lin.getBias());
      sizes.push_back(lin.getWeight().getType().getDimSize(0));
    }
    Location loc = rewriter.getFusedLoc(llvm::to_vector(
        llvm::map_range(siblings, [](LinearOp l) { return l.getLoc(); })));
    Value weight =
        rewriter.create<ConcatOp>(loc, weights, rewriter.getI64IntegerAttr(0));
    Value bias =
        biases.empty()
            ? Value()
            : rewriter
                  .create<ConcatOp>(loc, biases, rewriter.getI64IntegerAttr(0))
                  .getResult();
    Value fused =
        rewriter.create<LinearOp>(loc, root.getInput(), weight, bias, Value());
    auto split = rewriter.create<SplitOp>(loc, fused,
                                          rewriter.getDenseI64ArrayAttr(sizes));
    for (auto [lin, part] : llvm::zip(siblings, split.getResults()))
      rewriter.replaceOp(lin, part);
    return success();
  }
};

// add(linear(x, W), r) -> linear(x, W) accumulate(r): the residual add becomes
// the matmul's epilogue.
struct FuseAddIntoLinear : public OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp add,
                                PatternRewriter &rewriter) const override {
    for (auto [mine, other] : {std::pair(add.getLhs(), add.getRhs()),
                               std::pair(add.getRhs(), add.getLhs())}) {
      auto lin = mine.getDefiningOp<LinearOp>();
      if (!lin || lin.getAccumulator() || !lin->hasOneUse() ||
          other.getType() != add.getType() || lin.getType() != add.getType())
        continue;
      rewriter.setInsertionPoint(add);
      auto fused = rewriter.create<LinearOp>(
          rewriter.getFusedLoc({lin.getLoc(), add.getLoc()}), lin.getInput(),
          lin.getWeight(), lin.getBias(), other);
      rewriter.replaceOp(add, fused.getResult());
      rewriter.eraseOp(lin);
      return success();
    }
    return failure();
  }
};

struct FusePass : public impl::XGFuseBase<FusePass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FuseSiblingLinears, FuseAddIntoLinear>(&getContext());
    if (failed(
            applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

} // namespace xcc::xg
