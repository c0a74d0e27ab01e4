//===- PlanMemory.cpp - liveness-based static arena planning --------------===//
#include "dialects/XG/IR/XGOps.h"
#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace xcc {
#define GEN_PASS_DEF_XGPLANMEMORY
#include "passes/Passes.h.inc"
} // namespace xcc

namespace xcc::xg {

namespace {

FailureOr<int64_t> byteSize(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape())
    return failure();
  return t.getNumElements() *
         static_cast<int64_t>(t.getElementTypeBitWidth() / 8);
}

int64_t rowLength(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  return t.getRank() == 0 ? 1 : t.getShape().back();
}

// First-fit allocation over live ranges [offset, offset+size).
class ArenaAllocator {
public:
  explicit ArenaAllocator(int64_t alignment) : alignment_(alignment) {}

  int64_t allocate(int64_t size) {
    size = llvm::alignTo(size, alignment_);
    int64_t candidate = 0;
    for (auto [offset, len] : live_) { // sorted by offset
      if (candidate + size <= offset)
        break;
      candidate = std::max(candidate, offset + len);
    }
    live_.insert(std::lower_bound(live_.begin(), live_.end(),
                                  std::pair(candidate, size)),
                 {candidate, size});
    peak_ = std::max(peak_, candidate + size);
    return candidate;
  }

  void release(int64_t offset) {
    auto it = llvm::find_if(live_, [&](auto &r) { return r.first == offset; });
    assert(it != live_.end() && "releasing a range that is not live");
    live_.erase(it);
  }

  int64_t peak() const { return peak_; }

private:
  int64_t alignment_;
  SmallVector<std::pair<int64_t, int64_t>> live_;
  int64_t peak_ = 0;
};

struct PlanMemoryPass : public impl::XGPlanMemoryBase<PlanMemoryPass> {
  using XGPlanMemoryBase::XGPlanMemoryBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!func->hasAttr(kEntryAttr) || func.isExternal())
      return;
    if (alignment <= 0 || !llvm::isPowerOf2_64(alignment)) {
      func.emitError() << "alignment must be a power of two, got " << alignment;
      return signalPassFailure();
    }
    if (!func.getBody().hasOneBlock()) {
      func.emitError() << "memory planning needs a single-block function";
      return signalPassFailure();
    }
    Block &block = func.getBody().front();
    MLIRContext *ctx = &getContext();
    Builder b(ctx);
    // A buffer of its own for `v`: contiguous rows of its last dimension.
    auto ownBuffer = [&](Value v, BufferSpace space, int64_t offset) {
      return BufferAttr::get(ctx, space, offset, *byteSize(v), rowLength(v),
                             /*colOffset=*/0);
    };

    // 1. The io buffer: results, then arguments, in order. Results come first
    // so
    //    that an output feeding another executable (lm_step's hidden states
    //    read by lm_logits) sits at the same offset, 0, whatever the bucket.
    int64_t ioSize = 0;
    auto placeIo = [&](Value v) -> FailureOr<int64_t> {
      auto size = byteSize(v);
      if (failed(size))
        return failure();
      int64_t offset = ioSize;
      ioSize = llvm::alignTo(offset + *size, alignment);
      return offset;
    };
    DenseMap<Value, BufferAttr> buffers;
    Operation *terminator = block.getTerminator();
    for (auto [i, v] : llvm::enumerate(terminator->getOperands())) {
      Operation *def = v.getDefiningOp();
      if (!def || isa<SplitOp, WeightOp, EncoderCacheOp>(def) ||
          buffers.count(v)) {
        func.emitError()
            << "result " << i
            << " must be computed by an op of its own (not an argument, a "
               "weight, a view or another result)";
        return signalPassFailure();
      }
      auto offset = placeIo(v);
      if (failed(offset)) {
        func.emitError() << "result " << i << " needs a static shape, got "
                         << v.getType();
        return signalPassFailure();
      }
      buffers[v] = ownBuffer(v, BufferSpace::io, *offset);
      func.setResultAttr(i, kIoAttr, buffers[v]);
      // lora_expand updates its input in place: the tensor it updates is
      // computed into the result's io range directly.
      for (auto expand = v.getDefiningOp<LoraExpandOp>(); expand;
           expand = expand.getInput().getDefiningOp<LoraExpandOp>()) {
        Value in = expand.getInput();
        Operation *producer = in.getDefiningOp();
        if (!producer || isa<SplitOp, WeightOp, EncoderCacheOp>(producer) ||
            !in.hasOneUse()) {
          expand.emitError() << "cannot update a view, an argument or a "
                                "shared tensor in place as result "
                             << i;
          return signalPassFailure();
        }
        // (Read before inserting: the insertion may rehash `buffers`.)
        BufferAttr placed = buffers.lookup(v);
        buffers[in] = placed;
      }
    }

    for (BlockArgument arg : func.getArguments()) {
      auto offset = placeIo(arg);
      if (failed(offset)) {
        func.emitError() << "argument " << arg.getArgNumber()
                         << " needs a static shape for memory planning, got "
                         << arg.getType();
        return signalPassFailure();
      }
      func.setArgAttr(arg.getArgNumber(), kIoAttr,
                      ownBuffer(arg, BufferSpace::io, *offset));
    }

    // 2. Liveness: the index of the last op that reads each root buffer
    //    (a view's readers keep its root alive).
    DenseMap<Operation *, int64_t> index;
    for (auto [i, op] : llvm::enumerate(block))
      index[&op] = i;
    DenseMap<Value, Value> rootOf; // view -> the value that owns the storage
    auto root = [&](Value v) {
      auto it = rootOf.find(v);
      return it == rootOf.end() ? v : it->second;
    };
    DenseMap<Value, int64_t> lastUse;
    for (Operation &op : block) {
      if (auto split = dyn_cast<SplitOp>(op))
        for (Value r : split.getResults())
          rootOf[r] = root(split.getInput());
      if (auto expand = dyn_cast<LoraExpandOp>(op))
        rootOf[expand.getResult()] = root(expand.getInput());
      for (Value r : op.getResults())
        lastUse[root(r)] = std::max(lastUse[root(r)], index[&op]);
      for (Value in : op.getOperands())
        lastUse[root(in)] = std::max(lastUse[root(in)], index[&op]);
    }

    // 3. Walk in order: free what died before this op, then place its results.
    ArenaAllocator arena(alignment);
    SmallVector<std::pair<int64_t, int64_t>> pendingFree; // (last use, offset)
    for (Operation &op : block) {
      int64_t i = index[&op];
      llvm::erase_if(pendingFree, [&](auto &p) {
        if (p.first >= i)
          return false;
        arena.release(p.second);
        return true;
      });
      if (isa<WeightOp, EncoderCacheOp, LoraSlotsOp>(op) || &op == terminator)
        continue;
      SmallVector<Attribute> attrs;
      if (auto split = dyn_cast<SplitOp>(op)) {
        BufferAttr base = buffers.lookup(split.getInput());
        if (!base) {
          op.emitError() << "cannot plan a view of a value without a buffer";
          return signalPassFailure();
        }
        int64_t col = base.getColOffset();
        for (Value r : split.getResults()) {
          buffers[r] =
              BufferAttr::get(ctx, base.getSpace(), base.getOffset(),
                              base.getSize(), base.getRowStride(), col);
          col += rowLength(r);
        }
      } else if (auto expand = dyn_cast<LoraExpandOp>(op)) {
        // In place: the result is its input's storage (a view when the input
        // is one), so the input may have no other user.
        Value in = expand.getInput();
        if (!in.hasOneUse() || !buffers.count(in)) {
          op.emitError() << "lora_expand updates its input in place, so the "
                            "input must have a buffer and no other user";
          return signalPassFailure();
        }
        BufferAttr placed = buffers.lookup(in);
        buffers[expand.getResult()] = placed;
      } else {
        // A linear whose accumulator dies here writes its result in place.
        // The accumulator must own its whole buffer: not a split view (its
        // siblings share the storage), but possibly a chain of in-place
        // lora_expand updates of a tensor that does.
        if (auto lin = dyn_cast<LinearOp>(op)) {
          Value acc = lin.getAccumulator();
          Value r = lin.getResult();
          auto ownsBuffer = [&](Value v) {
            while (auto expand = v.getDefiningOp<LoraExpandOp>())
              v = expand.getInput();
            return root(v) == v;
          };
          if (acc && !buffers.count(r) && ownsBuffer(acc) &&
              buffers.count(acc) &&
              buffers[acc].getSpace() == BufferSpace::arena &&
              lastUse.lookup(root(acc)) == i && acc.getType() == r.getType()) {
            // Copied first: `buffers[r] = buffers[acc]` takes a reference to
            // acc's entry and then inserts r (C++17 evaluates the right side
            // first); the insertion may rehash and leave it dangling.
            BufferAttr placed = buffers.lookup(acc);
            buffers[r] = placed;
            for (auto &p : pendingFree)
              if (p.second == placed.getOffset())
                p.first = lastUse.lookup(r);
          }
        }
        for (Value r : op.getResults()) {
          if (buffers.count(r))
            continue; // an io result, or in place
          auto size = byteSize(r);
          if (failed(size)) {
            op.emitError()
                << "result needs a static shape for memory planning, got "
                << r.getType();
            return signalPassFailure();
          }
          int64_t offset = arena.allocate(*size);
          buffers[r] = ownBuffer(r, BufferSpace::arena, offset);
          pendingFree.push_back({lastUse.lookup(r), offset});
        }
      }
      for (Value r : op.getResults())
        attrs.push_back(buffers[r]);
      op.setAttr(kBuffersAttr, b.getArrayAttr(attrs));
    }
    func->setAttr(kArenaSizeAttr, b.getI64IntegerAttr(arena.peak()));
    func->setAttr(kIoSizeAttr, b.getI64IntegerAttr(ioSize));
  }
};

} // namespace

} // namespace xcc::xg
