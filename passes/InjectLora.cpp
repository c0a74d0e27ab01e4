//===- InjectLora.cpp - single- and mixed-adapter variants of lm_step -----===//
#include "dialects/XG/IR/XGOps.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace xcc {
#define GEN_PASS_DEF_XGINJECTLORA
#include "passes/Passes.h.inc"
} // namespace xcc

namespace xcc::xg {

namespace {

// The decoder modules LoRA may target, by the short name PEFT uses.
constexpr StringLiteral kTargetModules[] = {"q_proj",   "k_proj",    "v_proj",
                                            "o_proj",   "gate_proj", "up_proj",
                                            "down_proj"};

// "model.layers.3.self_attn.q_proj.weight" ->
// ("model.layers.3.self_attn.q_proj", "q_proj"); anything else (a bias, the
// embedding, a vision tower weight) -> none.
std::optional<std::pair<StringRef, StringRef>> targetOf(StringRef source) {
  if (!source.starts_with("model.layers.") || !source.consume_back(".weight"))
    return std::nullopt;
  return std::pair(source, source.rsplit('.').second);
}

struct InjectLoraPass : public impl::XGInjectLoraBase<InjectLoraPass> {
  using XGInjectLoraBase::XGInjectLoraBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (numSlots <= 0 || rank <= 0) {
      module.emitError() << "inject-lora needs num-slots and rank >= 1, got "
                         << static_cast<int64_t>(numSlots) << " and "
                         << static_cast<int64_t>(rank);
      return signalPassFailure();
    }
    llvm::StringSet<> known;
    for (StringRef t : kTargetModules)
      known.insert(t);
    for (const std::string &t : targetModules)
      if (!known.contains(t)) {
        module.emitError() << "unknown LoRA target module '" << t
                           << "' (supported: q_proj, k_proj, v_proj, o_proj, "
                              "gate_proj, up_proj, down_proj)";
        return signalPassFailure();
      }
    if (targetModules.empty()) {
      module.emitError() << "inject-lora needs at least one target module";
      return signalPassFailure();
    }

    SmallVector<func::FuncOp> steps;
    for (auto fn : module.getOps<func::FuncOp>())
      if (fn->hasAttr(kEntryAttr) && fn->hasAttr(kBucketAttr) &&
          !fn->hasAttr(kLoraModeAttr) &&
          fn.getSymName().starts_with("lm_step_"))
        steps.push_back(fn);
    if (steps.empty()) {
      module.emitError() << "inject-lora found no bucketed lm_step entry";
      return signalPassFailure();
    }
    SymbolTable symbols(module);
    for (func::FuncOp fn : steps) {
      for (StringRef mode : {"single", "mixed"}) {
        func::FuncOp clone = fn.clone();
        clone.setSymName((fn.getSymName() + "_" + mode).str());
        clone->setAttr(kLoraModeAttr, StringAttr::get(&getContext(), mode));
        symbols.insert(clone, Block::iterator(fn));
        if (failed(inject(clone, mode == "mixed")))
          return signalPassFailure();
      }
    }
  }

  LogicalResult inject(func::FuncOp fn, bool mixed) {
    Value slots;
    for (unsigned i = 0; i < fn.getNumArguments(); ++i)
      if (auto name = fn.getArgAttrOfType<StringAttr>(i, kNameAttr);
          name && name.getValue() == "lora_slot")
        slots = fn.getArgument(i);
    if (!slots)
      return fn.emitError() << "lm_step has no 'lora_slot' argument";
    llvm::StringSet<> wanted;
    for (const std::string &t : targetModules)
      wanted.insert(t);
    llvm::StringSet<> matched;

    SmallVector<LinearOp> linears;
    fn.walk([&](LinearOp op) { linears.push_back(op); });
    OpBuilder b(&getContext());
    auto f32 = b.getF32Type();
    for (LinearOp lin : linears) {
      auto w = lin.getWeight().getDefiningOp<WeightOp>();
      if (!w)
        continue;
      SmallVector<StringRef> sources = w.getSourceNames();
      // The slices of the linear's output, one per source weight.
      SmallVector<Value> slices;
      Operation *after = lin;
      if (sources.size() == 1) {
        slices.push_back(lin.getResult());
      } else {
        auto split = lin->hasOneUse()
                         ? dyn_cast<SplitOp>(*lin->getUsers().begin())
                         : SplitOp();
        if (!split || split.getNumResults() != sources.size())
          continue; // a stacked weight not split per source: not a target
        llvm::append_range(slices, split.getResults());
        after = split;
      }
      b.setInsertionPointAfter(after);
      Value x = lin.getInput();
      const int64_t k = cast<RankedTensorType>(x.getType()).getDimSize(1);
      for (auto [source, y] : llvm::zip(sources, slices)) {
        std::optional<std::pair<StringRef, StringRef>> target =
            targetOf(source);
        if (!target || !wanted.contains(target->second))
          continue;
        matched.insert(target->second);
        auto yType = cast<RankedTensorType>(y.getType());
        const int64_t n = yType.getDimSize(1);
        Location loc = NameLoc::get(b.getStringAttr(target->first + ".lora"));
        auto slotsType = [&](int64_t features) {
          return RankedTensorType::get({numSlots, rank, features}, f32);
        };
        auto a = b.create<LoraSlotsOp>(loc, slotsType(k),
                                       b.getStringAttr(target->first),
                                       b.getStringAttr("a"));
        auto bt = b.create<LoraSlotsOp>(loc, slotsType(n),
                                        b.getStringAttr(target->first),
                                        b.getStringAttr("b"));
        auto shrunk = b.create<LoraShrinkOp>(
            loc, RankedTensorType::get({yType.getDimSize(0), rank}, f32), x, a,
            slots, mixed);
        auto expand =
            b.create<LoraExpandOp>(loc, yType, y, shrunk, bt, slots, mixed);
        y.replaceAllUsesExcept(expand.getResult(), expand);
      }
    }
    for (const std::string &t : targetModules)
      if (!matched.contains(t))
        return fn.emitError() << "LoRA target module '" << t
                              << "' matches no linear of " << fn.getSymName();
    return success();
  }
};

} // namespace

} // namespace xcc::xg
