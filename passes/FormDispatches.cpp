//===- FormDispatches.cpp - ukernel calls and outlined dispatch functions -===//
#include "dialects/XG/IR/XGOps.h"
#include "passes/DispatchBodies.h"
#include "passes/Passes.h"
#include "schemas/artifact_generated.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace xcc {

#define GEN_PASS_DEF_XGFORMDISPATCHES
#include "passes/Passes.h.inc"

namespace {

// Shape and row stride (elements) of a tensor as it sits in memory.
struct Layout {
  SmallVector<int64_t> shape;
  int64_t rowStride = 0;
  Type elementType;
};

FailureOr<Layout> layoutOf(Value v, int64_t rowStride) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape() || t.getRank() < 1 || t.getRank() > 2)
    return failure();
  Layout l;
  l.shape.assign(t.getShape().begin(), t.getShape().end());
  l.rowStride =
      t.getRank() == 2 ? (rowStride > 0 ? rowStride : t.getDimSize(1)) : 1;
  l.elementType = t.getElementType();
  return l;
}

// Row stride of an operand, from its plan (0: contiguous).
int64_t plannedRowStride(Value v) {
  xg::BufferAttr buffer = xg::getPlannedBuffer(v);
  return buffer ? buffer.getRowStride() : 0;
}

// Elements a flat binding must span to hold the (possibly strided) tensor.
int64_t flatElements(const Layout &l) {
  if (l.shape.size() == 1)
    return l.shape[0];
  return (l.shape[0] - 1) * l.rowStride + l.shape[1];
}

// A packed weight as the flat bytes the artifact stores
// (runtime/kernels/weight_format.h).
Layout packedBytesLayout(xg::WeightOp w) {
  auto t = w.getType();
  int64_t n = t.getDimSize(0), k = t.getDimSize(1), nr = *w.getPackNr();
  xrt::WeightFormat format = w.getWeightFormat();
  int64_t bytes = format == xrt::WeightFormat::kF32
                      ? (n + nr - 1) / nr * nr * k * 4
                      : xrt::PackedWeightBytes(format, n, k);
  Layout l;
  l.shape = {bytes};
  l.rowStride = 1;
  l.elementType = IntegerType::get(w.getContext(), 8);
  return l;
}

struct FormDispatchesPass
    : public impl::XGFormDispatchesBase<FormDispatchesPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    llvm::StringMap<func::FuncOp> byBody;
    llvm::StringMap<unsigned> counters;
    SymbolTable symbols(module);

    SmallVector<func::FuncOp> entries;
    for (auto f : module.getOps<func::FuncOp>())
      if (f->hasAttr(xg::kEntryAttr))
        entries.push_back(f);

    for (func::FuncOp entry : entries) {
      if (!entry->hasAttr(xg::kArenaSizeAttr)) {
        entry.emitError() << "form-dispatches needs a memory-planned function";
        return signalPassFailure();
      }
      for (Operation &op : entry.getBody().front()) {
        // Matmul-class work runs on runtime microkernels, named as the
        // artifact names them (xpk::Ukernel).
        std::optional<xpk::Ukernel> ukernel =
            TypeSwitch<Operation *, std::optional<xpk::Ukernel>>(&op)
                .Case([](xg::LinearOp) { return xpk::Ukernel::matmul; })
                .Case([](xg::PagedAttentionOp) {
                  return xpk::Ukernel::paged_attention;
                })
                .Case([](xg::AttentionOp) { return xpk::Ukernel::attention; })
                .Case(
                    [](xg::LoraShrinkOp) { return xpk::Ukernel::lora_shrink; })
                .Case(
                    [](xg::LoraExpandOp) { return xpk::Ukernel::lora_expand; })
                .Default([](Operation *) { return std::nullopt; });
        if (ukernel) {
          op.setAttr(xg::kUkernelAttr,
                     StringAttr::get(ctx, xpk::EnumNameUkernel(*ukernel)));
          continue;
        }
        if (isa<xg::WeightOp, xg::EncoderCacheOp, xg::LoraSlotsOp, xg::SplitOp,
                func::ReturnOp>(op))
          continue;
        if (!isGeneratedDispatchOp(&op)) {
          op.emitError() << "no code generation for this op";
          return signalPassFailure();
        }
        FailureOr<func::FuncOp> fn = outline(op);
        if (failed(fn))
          return signalPassFailure();

        std::string body;
        llvm::raw_string_ostream os(body);
        fn->print(os);
        os.flush();
        auto it = byBody.find(body);
        if (it != byBody.end()) {
          fn->erase();
          fn = it->second;
        } else {
          StringRef kind = op.getName().stripDialect();
          fn->setSymName((Twine(kind) + "_" + Twine(counters[kind]++)).str());
          symbols.insert(*fn);
          byBody[body] = *fn;
        }
        op.setAttr(xg::kDispatchAttr, FlatSymbolRefAttr::get(*fn));
        op.setAttr(xg::kWorkgroupsAttr,
                   IntegerAttr::get(IntegerType::get(ctx, 64),
                                    dispatchWorkgroups(&op)));
      }
    }
  }

  // Builds a detached dispatch function computing `op`.
  FailureOr<func::FuncOp> outline(Operation &op) {
    MLIRContext *ctx = &getContext();
    SmallVector<Layout> layouts;
    for (Value v : op.getOperands()) {
      if (auto w = v.getDefiningOp<xg::WeightOp>(); w && w.getPackNr()) {
        // Only the embedding lookup reads a packed table, as flat bytes.
        if (!isa<xg::EmbeddingOp>(op) || v != op.getOperand(0)) {
          op.emitError() << "generated code cannot read the packed weight '"
                         << w.getName() << "'";
          return failure();
        }
        layouts.push_back(packedBytesLayout(w));
        continue;
      }
      auto l = layoutOf(v, plannedRowStride(v));
      if (failed(l)) {
        op.emitError()
            << "dispatch operands must be static rank-1 or rank-2 tensors";
        return failure();
      }
      layouts.push_back(*l);
    }
    for (Value v : op.getResults()) {
      auto l = layoutOf(v, plannedRowStride(v));
      if (failed(l)) {
        op.emitError()
            << "dispatch results must be static rank-1 or rank-2 tensors";
        return failure();
      }
      layouts.push_back(*l);
    }

    SmallVector<Type> argTypes;
    for (const Layout &l : layouts)
      argTypes.push_back(MemRefType::get({flatElements(l)}, l.elementType));
    IndexType indexType = IndexType::get(ctx);
    argTypes.push_back(indexType);
    argTypes.push_back(indexType);

    OpBuilder b(ctx);
    auto fn = b.create<func::FuncOp>(op.getLoc(), "dispatch",
                                     FunctionType::get(ctx, argTypes, {}));
    fn->setAttr(xg::kDispatchFuncAttr, UnitAttr::get(ctx));
    Block *block = fn.addEntryBlock();
    b.setInsertionPointToStart(block);
    SmallVector<Value> views;
    for (auto [i, l] : llvm::enumerate(layouts)) {
      Value flat = block->getArgument(i);
      if (l.shape.size() == 1) {
        views.push_back(flat);
        continue;
      }
      auto viewType =
          MemRefType::get(l.shape, l.elementType,
                          StridedLayoutAttr::get(ctx, 0, {l.rowStride, 1}));
      views.push_back(b.create<memref::ReinterpretCastOp>(
          op.getLoc(), viewType, flat, 0, l.shape,
          ArrayRef<int64_t>{l.rowStride, 1}));
    }
    unsigned n = block->getNumArguments();
    if (failed(buildDispatchBody(b, &op, views, block->getArgument(n - 2),
                                 block->getArgument(n - 1)))) {
      fn.erase();
      return failure();
    }
    b.create<func::ReturnOp>(op.getLoc());
    return fn;
  }
};

} // namespace

} // namespace xcc
