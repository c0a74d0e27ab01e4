//===- compile.cc - xcc compile: model -> bucketed .xpk artifact ---------===//
//
//  1. frontend: ModelSource (HF dir / GGUF)
//  2. graph: BuildDecoderModule -> RunGraphPipeline (buckets, fusion, packing,
//     memory plan, dispatch formation)
//  3. emission: executables (io specs, arena sizes, command lists) and the
//     weight table are read off the planned entry functions
//  4. codegen: dispatch functions -> LLVM dialect -> LLVM -> shared object
//  5. artifact: weights (materialized, concatenated, packed), code, manifest
//
//===----------------------------------------------------------------------===//
#include "compiler/compile.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "compiler/artifact/artifact_writer.h"
#include "compiler/artifact/sha256.h"
#include "compiler/artifact/tokenizer_spec_writer.h"
#include "compiler/codegen/llvm_codegen.h"
#include "compiler/frontend/model_source.h"
#include "compiler/frontend/source_dtype.h"
#include "compiler/model_builder.h"
#include "compiler/pipeline.h"
#include "dialects/XG/IR/XGOps.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "passes/PassUtils.h"
#include "passes/Passes.h"
#include "runtime/engine/bucket_table.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/weight_format.h"
#include "runtime/loader/file_header.h"
#include "runtime/lora/peft_adapter.h"
#include "schemas/abi.h"
#include "schemas/artifact_generated.h"

using namespace mlir;
using xrt::Expected;
using xrt::Status;

namespace xcc {
namespace {

constexpr int64_t kF32Bytes = 4;

// ---------------------------------------------------------------------------
// Plain descriptions of what goes into the manifest.

struct WeightDesc {
  std::string name;
  std::vector<std::string> sources;  // source tensors concatenated along dim 0
  std::vector<int64_t> shape;
  int64_t pack_nr = 0;
  xrt::WeightFormat format = xrt::WeightFormat::kF32;
  WeightPlacement placement;
};

struct TensorDesc {
  std::string name;
  xpk::DType dtype;
  std::vector<int64_t> shape;
  uint64_t offset = 0, size = 0;
};

struct CommandDesc {
  xpk::CommandKind kind = xpk::CommandKind::dispatch;
  uint32_t function = 0;
  xpk::Ukernel ukernel = xpk::Ukernel::none;
  int64_t workgroups = 0;
  std::vector<xpk::Binding> bindings;
  std::vector<int64_t> iparams;
  std::vector<float> fparams;
  std::string label;
  bool dynamic_rows = false;                         // Command.dynamic_rows
  xpk::ComputeType compute = xpk::ComputeType::f32;  // Command.compute (matmul, attention)
};

struct ExecutableDesc {
  std::string name;
  xpk::ExecutableKind kind;
  int64_t num_tokens = 0, num_reqs = 0, num_images = 0;
  xpk::LoraMode lora_mode = xpk::LoraMode::none;
  std::vector<TensorDesc> inputs, outputs;
  uint64_t io_size = 0, arena_size = 0;
  std::vector<CommandDesc> commands;
};

// Collects MLIR diagnostics so they can be returned in a Status.
class DiagnosticCollector {
 public:
  explicit DiagnosticCollector(MLIRContext* ctx)
      : handler_(ctx, [this](Diagnostic& d) {
          llvm::raw_string_ostream os(text_);
          os << d.getLocation() << ": " << d << "\n";
          return success();
        }) {}
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  ScopedDiagnosticHandler handler_;
};

xpk::DType DTypeOf(Type t) {
  if (t.isF32()) return xpk::DType::f32;
  if (t.isInteger(32)) return xpk::DType::i32;
  if (t.isInteger(64)) return xpk::DType::i64;
  if (t.isF16()) return xpk::DType::f16;
  if (t.isBF16()) return xpk::DType::bf16;
  return xpk::DType::u8;
}

std::string LabelOf(Operation* op) {
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc)) loc = fused.getLocations().front();
  if (auto name = dyn_cast<NameLoc>(loc)) return name.getName().str();
  return op->getName().getStringRef().str();
}

// ---------------------------------------------------------------------------
// Reading executables off the planned module.

class Emitter {
 public:
  // `loraTargets`: the LoRA target modules in Manifest.lora.targets order (the index
  // lora_a / lora_b bindings carry), with their in/out features. `matmulCompute`: the
  // compute type of every linear's matmul (--compute).
  Emitter(const CompileOptions& o, int64_t maxNumSeqs, int64_t maxBlocksPerReq, int64_t blockSize,
          const std::vector<xrt::LoraTarget>& loraTargets, xpk::ComputeType matmulCompute)
      : o_(o),
        maxNumSeqs_(maxNumSeqs),
        maxBlocksPerReq_(maxBlocksPerReq),
        blockSize_(blockSize),
        matmulCompute_(matmulCompute) {
    for (size_t i = 0; i < loraTargets.size(); ++i)
      loraTargetIndex_[loraTargets[i].name] = {static_cast<uint32_t>(i), &loraTargets[i]};
  }

  Status Run(ModuleOp module) {
    for (auto fn : module.getOps<func::FuncOp>())
      if (fn->hasAttr(xg::kDispatchFuncAttr)) {
        functionIndex_[fn.getSymName().str()] = static_cast<uint32_t>(functions_.size());
        functions_.push_back(fn.getSymName().str());
      }
    for (auto fn : module.getOps<func::FuncOp>()) {
      if (!fn->hasAttr(xg::kEntryAttr)) continue;
      XRT_ASSIGN_OR_RETURN(ExecutableDesc e, EmitExecutable(fn));
      executables_.push_back(std::move(e));
    }
    return Status::Ok();
  }

  std::vector<WeightDesc>& weights() { return weights_; }
  const std::vector<ExecutableDesc>& executables() const { return executables_; }
  const std::vector<std::string>& functions() const { return functions_; }

 private:
  Expected<uint32_t> WeightIndex(xg::WeightOp w) {
    std::string key = w.getName().str() + "#" + std::to_string(w.getPackNr().value_or(0)) + "#" +
                      xrt::WeightFormatName(w.getWeightFormat());
    auto it = weightIndex_.find(key);
    if (it != weightIndex_.end()) return it->second;
    WeightDesc d;
    d.name = w.getName().str();
    // A packed copy of a weight that is also used row-major (a tied embedding
    // table read by the lm_head matmul) gets a name of its own.
    if (w.getPackNr() && weightNames_.count(d.name))
      d.name += ".packed" + std::to_string(*w.getPackNr());
    weightNames_.insert(d.name);
    for (StringRef source : w.getSourceNames()) d.sources.push_back(source.str());
    auto shape = w.getType().getShape();
    d.shape.assign(shape.begin(), shape.end());
    d.pack_nr = w.getPackNr().value_or(0);
    d.format = w.getWeightFormat();
    uint32_t index = static_cast<uint32_t>(weights_.size());
    weights_.push_back(std::move(d));
    weightIndex_[key] = index;
    return index;
  }

  // Row stride (elements) of a value as planned; contiguous by default.
  static int64_t RowStride(Value v) {
    if (xg::BufferAttr b = xg::getPlannedBuffer(v)) return b.getRowStride();
    auto t = cast<RankedTensorType>(v.getType());
    return t.getRank() == 2 ? t.getDimSize(1) : 1;
  }

  Expected<xpk::Binding> BindingOf(Value v) {
    auto t = cast<RankedTensorType>(v.getType());
    if (v.getDefiningOp<xg::EncoderCacheOp>())
      return xpk::Binding(xpk::BindingKind::encoder_cache, 0, 0, 0);
    if (auto slots = v.getDefiningOp<xg::LoraSlotsOp>()) return LoraSlotsBinding(slots);
    if (auto w = v.getDefiningOp<xg::WeightOp>()) {
      XRT_ASSIGN_OR_RETURN(uint32_t index, WeightIndex(w));
      return xpk::Binding(xpk::BindingKind::weight, index, 0, 0);
    }
    xg::BufferAttr b = xg::getPlannedBuffer(v);
    if (!b) {
      if (auto arg = dyn_cast<BlockArgument>(v))
        return xrt::InternalError("argument {} has no io placement", arg.getArgNumber());
      return xrt::InternalError("'{}' has no planned buffer", LabelOf(v.getDefiningOp()));
    }
    const int64_t elem = t.getElementTypeBitWidth() / 8;
    auto kind =
        b.getSpace() == xg::BufferSpace::io ? xpk::BindingKind::io : xpk::BindingKind::arena;
    return xpk::Binding(kind, 0, static_cast<uint64_t>(b.getOffset() + b.getColOffset() * elem),
                        static_cast<uint64_t>(b.getSpannedElements(t) * elem));
  }

  // The runtime's adapter slots of a LoRA target: its index in Manifest.lora.targets,
  // checked against the shapes the compiled spec gives it.
  Expected<xpk::Binding> LoraSlotsBinding(xg::LoraSlotsOp op) {
    const std::string target = op.getTarget().str();
    auto it = loraTargetIndex_.find(target);
    if (it == loraTargetIndex_.end())
      return xrt::InternalError("LoRA target '{}' is not in the artifact's target list", target);
    const bool isA = op.getMatrix() == "a";
    auto shape = op.getType().getShape();
    const xrt::LoraTarget& t = *it->second.second;
    const int64_t features = isA ? t.in_features : t.out_features;
    if (shape[0] != o_.max_loras || shape[1] != o_.max_lora_rank || shape[2] != features)
      return xrt::InternalError("LoRA slots of '{}' are {}x{}x{}, expected {}x{}x{}", target,
                                shape[0], shape[1], shape[2], o_.max_loras, o_.max_lora_rank,
                                features);
    return xpk::Binding(isA ? xpk::BindingKind::lora_a : xpk::BindingKind::lora_b, it->second.first,
                        0, 0);
  }

  template <xpk::Ukernel U>
  using UkernelCommand = xpk::abi::UkernelCommand<U, xpk::Binding>;

  // Binds `v` (if any: optional roles are left unbound) to `role` of `u`.
  template <xpk::Ukernel U>
  Status Bind(UkernelCommand<U>& u, typename UkernelCommand<U>::Binding role, Value v) {
    if (!v) return Status::Ok();
    XRT_ASSIGN_OR_RETURN(xpk::Binding b, BindingOf(v));
    u.Bind(role, b);
    return Status::Ok();
  }

  // The command of ukernel `u`, labelled after `op`.
  template <xpk::Ukernel U>
  static Expected<CommandDesc> Finish(Operation* op, const UkernelCommand<U>& u) {
    CommandDesc c;
    c.kind = xpk::CommandKind::ukernel;
    c.ukernel = U;
    c.label = LabelOf(op);
    std::string error = u.Finish(&c.iparams, &c.fparams, &c.bindings);
    if (!error.empty()) return xrt::InternalError("'{}': {}", c.label, error);
    return c;
  }

  // Finish for an attention ukernel (paged, dense): --compute bf16 puts its two
  // products on the bf16 units too (attention.h's and dense_attention.h's
  // kBF16); int8 has no attention arithmetic of its own, so it stays f32.
  template <xpk::Ukernel U>
  Expected<CommandDesc> FinishAttention(Operation* op, const UkernelCommand<U>& u) const {
    XRT_ASSIGN_OR_RETURN(CommandDesc c, Finish(op, u));
    if (matmulCompute_ == xpk::ComputeType::bf16) c.compute = xpk::ComputeType::bf16;
    return c;
  }

  Expected<CommandDesc> EmitMatmul(xg::LinearOp op) {
    using P = xpk::abi::MatmulParam;
    using B = xpk::abi::MatmulBinding;
    auto w = op.getWeight().getType();
    UkernelCommand<xpk::Ukernel::matmul> u;
    u.Set(P::kM, op.getInput().getType().getDimSize(0));
    u.Set(P::kN, w.getDimSize(0));
    u.Set(P::kK, w.getDimSize(1));
    u.Set(P::kLda, RowStride(op.getInput()));
    u.Set(P::kLdc, RowStride(op.getResult()));
    u.Set(P::kLdAcc, op.getAccumulator() ? RowStride(op.getAccumulator()) : 0);
    // bias and acc are optional: Bind leaves them unbound when the op has none.
    for (auto [role, v] : {std::pair{B::kA, op.getInput()},
                           {B::kW, op.getWeight()},
                           {B::kC, op.getResult()},
                           {B::kBias, op.getBias()},
                           {B::kAcc, op.getAccumulator()}})
      XRT_RETURN_IF_ERROR(Bind(u, role, v));
    XRT_ASSIGN_OR_RETURN(CommandDesc c, Finish(op, u));
    c.compute = matmulCompute_;
    return c;
  }

  Expected<CommandDesc> EmitAttention(xg::PagedAttentionOp op) {
    using P = xpk::abi::PagedAttentionParam;
    using F = xpk::abi::PagedAttentionFParam;
    using B = xpk::abi::PagedAttentionBinding;
    UkernelCommand<xpk::Ukernel::paged_attention> u;
    for (auto [role, v] : {std::pair{B::kQ, op.getQ()},
                           {B::kK, op.getK()},
                           {B::kV, op.getV()},
                           {B::kOut, op.getResult()},
                           {B::kSlotMapping, op.getSlotMapping()},
                           {B::kBlockTables, op.getBlockTables()},
                           {B::kSeqLens, op.getSeqLens()},
                           {B::kQueryStartLoc, op.getQueryStartLoc()}})
      XRT_RETURN_IF_ERROR(Bind(u, role, v));
    const uint32_t layer = static_cast<uint32_t>(op.getLayerAttr().getInt());
    u.Bind(B::kKCache, xpk::Binding(xpk::BindingKind::kv_key, layer, 0, 0));
    u.Bind(B::kVCache, xpk::Binding(xpk::BindingKind::kv_value, layer, 0, 0));
    auto tables = op.getBlockTables().getType();
    u.Set(P::kNumTokens, op.getQ().getType().getDimSize(0));
    u.Set(P::kMaxNumReqs, tables.getDimSize(0));
    u.Set(P::kMaxBlocksPerReq, tables.getDimSize(1));
    u.Set(P::kNumHeads, op.getNumHeadsAttr().getInt());
    u.Set(P::kNumKvHeads, op.getNumKvHeadsAttr().getInt());
    u.Set(P::kHeadDim, op.getHeadDimAttr().getInt());
    u.Set(P::kBlockSize, blockSize_);
    u.Set(P::kQStride, RowStride(op.getQ()));
    u.Set(P::kKStride, RowStride(op.getK()));
    u.Set(P::kVStride, RowStride(op.getV()));
    u.Set(P::kOutStride, RowStride(op.getResult()));
    u.Set(F::kScale, op.getScale().convertToFloat());
    return FinishAttention(op, u);
  }

  Expected<CommandDesc> EmitDenseAttention(xg::AttentionOp op) {
    using P = xpk::abi::AttentionParam;
    using F = xpk::abi::AttentionFParam;
    using B = xpk::abi::AttentionBinding;
    UkernelCommand<xpk::Ukernel::attention> u;
    for (auto [role, v] : {std::pair{B::kQ, op.getQ()},
                           {B::kK, op.getK()},
                           {B::kV, op.getV()},
                           {B::kOut, op.getResult()}})
      XRT_RETURN_IF_ERROR(Bind(u, role, v));
    u.Set(P::kNumTokens, op.getQ().getType().getDimSize(0));
    u.Set(P::kSeqLen, op.getSeqLenAttr().getInt());
    u.Set(P::kNumHeads, op.getNumHeadsAttr().getInt());
    u.Set(P::kHeadDim, op.getHeadDimAttr().getInt());
    u.Set(P::kQStride, RowStride(op.getQ()));
    u.Set(P::kKStride, RowStride(op.getK()));
    u.Set(P::kVStride, RowStride(op.getV()));
    u.Set(P::kOutStride, RowStride(op.getResult()));
    u.Set(F::kScale, op.getScale().convertToFloat());
    return FinishAttention(op, u);
  }

  Expected<CommandDesc> EmitLoraShrink(xg::LoraShrinkOp op) {
    using P = xpk::abi::LoraShrinkParam;
    using B = xpk::abi::LoraShrinkBinding;
    UkernelCommand<xpk::Ukernel::lora_shrink> u;
    for (auto [role, v] : {std::pair{B::kX, op.getInput()},
                           {B::kA, op.getA()},
                           {B::kSlots, op.getSlots()},
                           {B::kBuf, op.getResult()}})
      XRT_RETURN_IF_ERROR(Bind(u, role, v));
    auto a = op.getA().getType().getShape();
    u.Set(P::kM, op.getInput().getType().getDimSize(0));
    u.Set(P::kK, a[2]);
    u.Set(P::kRank, a[1]);
    u.Set(P::kNumSlots, a[0]);
    u.Set(P::kMixed, op.getMixed() ? 1 : 0);
    u.Set(P::kLdx, RowStride(op.getInput()));
    u.Set(P::kLdBuf, RowStride(op.getResult()));
    return Finish(op, u);
  }

  Expected<CommandDesc> EmitLoraExpand(xg::LoraExpandOp op) {
    using P = xpk::abi::LoraExpandParam;
    using B = xpk::abi::LoraExpandBinding;
    UkernelCommand<xpk::Ukernel::lora_expand> u;
    // In place: the result's placement is the input's (memory planning).
    for (auto [role, v] : {std::pair{B::kBuf, op.getShrunk()},
                           {B::kBt, op.getBt()},
                           {B::kSlots, op.getSlots()},
                           {B::kY, op.getResult()}})
      XRT_RETURN_IF_ERROR(Bind(u, role, v));
    auto bt = op.getBt().getType().getShape();
    u.Set(P::kM, op.getInput().getType().getDimSize(0));
    u.Set(P::kN, bt[2]);
    u.Set(P::kRank, bt[1]);
    u.Set(P::kNumSlots, bt[0]);
    u.Set(P::kMixed, op.getMixed() ? 1 : 0);
    u.Set(P::kLdBuf, RowStride(op.getShrunk()));
    u.Set(P::kLdy, RowStride(op.getResult()));
    return Finish(op, u);
  }

  // An op FormDispatches marked `xg.ukernel`: the command of that ukernel.
  Expected<CommandDesc> EmitUkernel(Operation* op, StringAttr name) {
    std::optional<xpk::Ukernel> ukernel = xpk::abi::UkernelNamed(name.getValue());
    auto mismatch = [&](StringRef expected) {
      return xrt::InternalError("'{}' is marked ukernel '{}' but is not {}", LabelOf(op),
                                name.getValue().str(), expected.str());
    };
    switch (ukernel.value_or(xpk::Ukernel::none)) {
      case xpk::Ukernel::matmul:
        if (auto lin = dyn_cast<xg::LinearOp>(op)) return EmitMatmul(lin);
        return mismatch(xg::LinearOp::getOperationName());
      case xpk::Ukernel::paged_attention:
        if (auto att = dyn_cast<xg::PagedAttentionOp>(op)) return EmitAttention(att);
        return mismatch(xg::PagedAttentionOp::getOperationName());
      case xpk::Ukernel::attention:
        if (auto att = dyn_cast<xg::AttentionOp>(op)) return EmitDenseAttention(att);
        return mismatch(xg::AttentionOp::getOperationName());
      case xpk::Ukernel::lora_shrink:
        if (auto s = dyn_cast<xg::LoraShrinkOp>(op)) return EmitLoraShrink(s);
        return mismatch(xg::LoraShrinkOp::getOperationName());
      case xpk::Ukernel::lora_expand:
        if (auto x = dyn_cast<xg::LoraExpandOp>(op)) return EmitLoraExpand(x);
        return mismatch(xg::LoraExpandOp::getOperationName());
      default:
        return xrt::InternalError("'{}': unknown ukernel '{}'", LabelOf(op), name.getValue().str());
    }
  }

  Expected<CommandDesc> EmitDispatch(Operation* op) {
    CommandDesc c;
    c.kind = xpk::CommandKind::dispatch;
    c.label = LabelOf(op);
    auto sym = op->getAttrOfType<FlatSymbolRefAttr>(xg::kDispatchAttr);
    auto wg = op->getAttrOfType<IntegerAttr>(xg::kWorkgroupsAttr);
    if (!sym || !wg) return xrt::InternalError("'{}' was not formed into a dispatch", c.label);
    auto it = functionIndex_.find(sym.getValue().str());
    if (it == functionIndex_.end())
      return xrt::InternalError("dispatch function '{}' not found", sym.getValue().str());
    c.function = it->second;
    c.workgroups = wg.getInt();
    for (Value v : op->getOperands()) {
      XRT_ASSIGN_OR_RETURN(xpk::Binding b, BindingOf(v));
      c.bindings.push_back(b);
    }
    for (Value v : op->getResults()) {
      XRT_ASSIGN_OR_RETURN(xpk::Binding b, BindingOf(v));
      c.bindings.push_back(b);
    }
    return c;
  }

  // Whether `op`'s command is row-wise over the bucket of an lm_step (tokens) or
  // lm_logits (requests) executable: every generated dispatch computes row r of
  // its result from row r of its row inputs, and so do the matmul and LoRA
  // ukernels; in those two executables every op whose result has the bucket's
  // row count is on the bucket's rows (per-request metadata are inputs, not
  // ops). Attention keeps its full size: it finds the real tokens itself.
  static bool RowsFollowBucket(Operation& op, const CommandDesc& c, int64_t bucket,
                               xpk::ExecutableKind kind) {
    if (kind != xpk::ExecutableKind::lm_step && kind != xpk::ExecutableKind::lm_logits)
      return false;
    if (c.kind == xpk::CommandKind::ukernel && c.ukernel != xpk::Ukernel::matmul &&
        c.ukernel != xpk::Ukernel::lora_shrink && c.ukernel != xpk::Ukernel::lora_expand)
      return false;
    if (op.getNumResults() == 0) return false;
    auto t = dyn_cast<RankedTensorType>(op.getResult(0).getType());
    return t && t.getRank() >= 1 && t.getDimSize(0) == bucket;
  }

  Expected<ExecutableDesc> EmitExecutable(func::FuncOp fn) {
    ExecutableDesc e;
    auto bucket = fn->getAttrOfType<IntegerAttr>(xg::kBucketAttr);
    auto param = fn->getAttrOfType<StringAttr>(xg::kBucketParamAttr);
    if (!bucket || !param)
      return xrt::InternalError("entry '{}' is not specialized", fn.getSymName().str());
    // The model builder names each entry function after its executable kind;
    // bucket specialization appends "_<bucket>", LoRA injection "_<mode>".
    StringRef sym = fn.getSymName();
    if (auto mode = fn->getAttrOfType<StringAttr>(xg::kLoraModeAttr)) {
      std::optional<xpk::LoraMode> m =
          xpk::abi::EnumNamed(xpk::EnumValuesLoraMode(), xpk::EnumNameLoraMode, mode.getValue());
      if (!m || !sym.consume_back(("_" + mode.getValue()).str()))
        return xrt::InternalError("entry '{}' has LoRA mode '{}'", sym.str(),
                                  mode.getValue().str());
      e.lora_mode = *m;
    }
    StringRef base = sym.take_front(sym.rfind('_'));
    std::optional<xpk::ExecutableKind> kind = xpk::abi::ExecutableKindNamed(base);
    if (kind == xpk::ExecutableKind::lm_step) {
      e.num_tokens = bucket.getInt();
      e.num_reqs = maxNumSeqs_;
    } else if (kind == xpk::ExecutableKind::lm_logits) {
      e.num_reqs = bucket.getInt();
    } else if (kind == xpk::ExecutableKind::vision_encode) {
      e.num_images = bucket.getInt();
    } else {
      return xrt::InternalError("unknown entry function '{}'", fn.getSymName().str());
    }
    e.kind = *kind;
    e.name = xpk::abi::ExecutableName(e.kind, bucket.getInt(), e.lora_mode);
    e.io_size = fn->getAttrOfType<IntegerAttr>(xg::kIoSizeAttr).getInt();
    e.arena_size = fn->getAttrOfType<IntegerAttr>(xg::kArenaSizeAttr).getInt();
    auto tensor = [&](Type type, StringAttr name, xg::BufferAttr io) -> Expected<TensorDesc> {
      if (!io)
        return xrt::InternalError("'{}' has an input or output without io placement", e.name);
      auto t = cast<RankedTensorType>(type);
      TensorDesc d;
      d.name = name ? name.str() : "";
      d.dtype = DTypeOf(t.getElementType());
      d.shape.assign(t.getShape().begin(), t.getShape().end());
      d.offset = io.getOffset();
      d.size = io.getSize();
      return d;
    };
    for (unsigned i = 0; i < fn.getNumArguments(); ++i) {
      XRT_ASSIGN_OR_RETURN(
          TensorDesc d,
          tensor(fn.getArgument(i).getType(), fn.getArgAttrOfType<StringAttr>(i, xg::kNameAttr),
                 fn.getArgAttrOfType<xg::BufferAttr>(i, xg::kIoAttr)));
      e.inputs.push_back(std::move(d));
    }
    for (unsigned i = 0; i < fn.getNumResults(); ++i) {
      XRT_ASSIGN_OR_RETURN(
          TensorDesc d,
          tensor(fn.getResultTypes()[i], fn.getResultAttrOfType<StringAttr>(i, xg::kNameAttr),
                 fn.getResultAttrOfType<xg::BufferAttr>(i, xg::kIoAttr)));
      e.outputs.push_back(std::move(d));
    }
    for (Operation& op : fn.getBody().front()) {
      Expected<CommandDesc> c = xrt::InternalError("unreachable");
      if (auto ukernel = op.getAttrOfType<StringAttr>(xg::kUkernelAttr)) {
        c = EmitUkernel(&op, ukernel);
      } else if (op.hasAttr(xg::kDispatchAttr)) {
        c = EmitDispatch(&op);
      } else if (isa<xg::WeightOp, xg::EncoderCacheOp, xg::LoraSlotsOp, xg::SplitOp,
                     func::ReturnOp>(op)) {
        continue;
      } else {
        return xrt::InternalError("op '{}' has no command", LabelOf(&op));
      }
      if (!c.ok()) return c.status();
      c->dynamic_rows = RowsFollowBucket(op, *c, bucket.getInt(), e.kind);
      e.commands.push_back(std::move(*c));
    }
    return e;
  }

  const CompileOptions& o_;
  int64_t maxNumSeqs_, maxBlocksPerReq_, blockSize_;
  xpk::ComputeType matmulCompute_;
  std::vector<std::string> functions_;
  std::map<std::string, uint32_t> functionIndex_;
  std::vector<WeightDesc> weights_;
  std::map<std::string, uint32_t> weightIndex_;
  std::set<std::string> weightNames_;
  std::vector<ExecutableDesc> executables_;
  std::map<std::string, std::pair<uint32_t, const xrt::LoraTarget*>> loraTargetIndex_;
};

// ---------------------------------------------------------------------------
// Weights.

// The manifest stores a weight's format as its dtype.
static_assert(static_cast<int>(xrt::WeightFormat::kF32) == static_cast<int>(xpk::DType::f32));
static_assert(static_cast<int>(xrt::WeightFormat::kF16) == static_cast<int>(xpk::DType::f16));
static_assert(static_cast<int>(xrt::WeightFormat::kBF16) == static_cast<int>(xpk::DType::bf16));
static_assert(static_cast<int>(xrt::WeightFormat::kQ8_0) == static_cast<int>(xpk::DType::q8_0));
static_assert(static_cast<int>(xrt::WeightFormat::kQ4_0) == static_cast<int>(xpk::DType::q4_0));
static_assert(static_cast<int>(xrt::WeightFormat::kQ4_1) == static_cast<int>(xpk::DType::q4_1));
static_assert(static_cast<int>(xrt::WeightFormat::kQ5_0) == static_cast<int>(xpk::DType::q5_0));
static_assert(static_cast<int>(xrt::WeightFormat::kQ5_1) == static_cast<int>(xpk::DType::q5_1));
static_assert(static_cast<int>(xrt::WeightFormat::kQ3_K) == static_cast<int>(xpk::DType::q3_k));
static_assert(static_cast<int>(xrt::WeightFormat::kIQ4_NL) == static_cast<int>(xpk::DType::iq4_nl));
static_assert(static_cast<int>(xrt::WeightFormat::kIQ4_XS) == static_cast<int>(xpk::DType::iq4_xs));
static_assert(static_cast<int>(xrt::WeightFormat::kQ4_K) == static_cast<int>(xpk::DType::q4_k));
static_assert(static_cast<int>(xrt::WeightFormat::kQ5_K) == static_cast<int>(xpk::DType::q5_k));
static_assert(static_cast<int>(xrt::WeightFormat::kQ6_K) == static_cast<int>(xpk::DType::q6_k));
static_assert(static_cast<int>(xrt::WeightFormat::kBF16Pairs) ==
              static_cast<int>(xpk::DType::bf16_pairs));
static_assert(static_cast<int>(xrt::WeightFormat::kBF16PairsAmx) ==
              static_cast<int>(xpk::DType::bf16_pairs_amx));
// ... and a matmul's compute type as Command.compute.
static_assert(static_cast<int>(xrt::ComputeType::kF32) == static_cast<int>(xpk::ComputeType::f32));
static_assert(static_cast<int>(xrt::ComputeType::kBF16) ==
              static_cast<int>(xpk::ComputeType::bf16));
static_assert(static_cast<int>(xrt::ComputeType::kInt8) ==
              static_cast<int>(xpk::ComputeType::int8));

// The packed format that holds a source tensor's values exactly and has a
// kernel, if any: its own.
std::optional<xrt::WeightFormat> LosslessFormat(SourceDType t) {
  switch (t) {
    case SourceDType::kIQ4_NL:
      return xrt::WeightFormat::kIQ4_NL;
    case SourceDType::kIQ4_XS:
      return xrt::WeightFormat::kIQ4_XS;
    case SourceDType::kF32:
      return xrt::WeightFormat::kF32;
    case SourceDType::kF16:
      return xrt::WeightFormat::kF16;
    case SourceDType::kBF16:
      return xrt::WeightFormat::kBF16;
    case SourceDType::kQ8_0:
      return xrt::WeightFormat::kQ8_0;
    case SourceDType::kQ4_0:
      return xrt::WeightFormat::kQ4_0;
    case SourceDType::kQ4_1:
      return xrt::WeightFormat::kQ4_1;
    case SourceDType::kQ5_0:
      return xrt::WeightFormat::kQ5_0;
    case SourceDType::kQ5_1:
      return xrt::WeightFormat::kQ5_1;
    case SourceDType::kQ3_K:
      return xrt::WeightFormat::kQ3_K;
    case SourceDType::kQ4_K:
      return xrt::WeightFormat::kQ4_K;
    case SourceDType::kQ5_K:
      return xrt::WeightFormat::kQ5_K;
    case SourceDType::kQ6_K:
      return xrt::WeightFormat::kQ6_K;
    default:
      return std::nullopt;
  }
}

// Chooses the storage format of every weight read only by linears and
// embedding lookups (`policy` is CompileOptions::weight_dtype) and records it
// on the xg.weight; the others stay f32. `bf16Pairs` (given with --compute
// bf16: pairs for the target's bf16 unit) stores what linears alone read of a
// weight that would be bf16, or with policy auto f32 or f16: those linears
// multiply bf16 roundings of their weights, which pairs store (the same bits,
// half or the same bytes). Embedding tables keep their format (the lookup
// reads exact values); a tied f32 table's packed copy for the lm_head is
// paired. Notes say where the choice differs from the policy.
Status AssignWeightFormats(ModuleOp module, const ModelSource& source, const std::string& policy,
                           std::optional<xrt::WeightFormat> bf16Pairs,
                           std::vector<std::string>* notes) {
  std::optional<xrt::WeightFormat> forced;
  if (policy != "auto") {
    xrt::WeightFormat f;
    if (!xrt::WeightFormatFromName(policy, &f) || xrt::IsBf16PairsFormat(f))
      return xrt::InvalidArgumentError(
          "--weight-dtype: '{}' is not one of auto, f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1{}",
          policy,
          xrt::WeightFormatFromName(policy, &f)
              ? " (bf16 pairs are bf16 weights as --compute bf16 stores them: ask for bf16)"
              : "");
    if (xrt::IsKQuantFormat(f) || xrt::HasIQ4Table(f))
      return xrt::InvalidArgumentError(
          "--weight-dtype: quantizing to {} is not supported (no K-quant or IQ4 quantizer); "
          "--weight-dtype auto keeps a GGUF's Q3_K / Q4_K / Q5_K / Q6_K / IQ4_NL / IQ4_XS "
          "tensors as they are",
          policy);
    forced = f;
  }
  std::map<std::string, xrt::WeightFormat> chosen;  // by weight name
  std::set<std::string> noted;
  auto note = [&](const std::string& text) {
    if (noted.insert(text).second) notes->push_back(text);
  };
  // Weights some embedding lookup reads (a tied table is one weight).
  std::set<std::string> tables;
  module.walk([&](xg::WeightOp w) {
    if (llvm::any_of(w->getUses(), [](OpOperand& u) { return xg::isEmbeddingTableUse(u); }))
      tables.insert(w.getName().str());
  });
  Status status = Status::Ok();
  module.walk([&](xg::WeightOp w) {
    if (!status.ok() || w->use_empty() || !llvm::all_of(w->getUses(), [](OpOperand& u) {
          return xg::isLinearWeightUse(u) || xg::isEmbeddingTableUse(u);
        }))
      return;
    const std::string name = w.getName().str();
    auto it = chosen.find(name);
    if (it == chosen.end()) {
      Expected<const SourceTensor*> t = source.tensor(name);
      if (!t.ok()) {
        status = t.status();
        return;
      }
      const SourceDType dtype = (*t)->dtype;
      std::optional<xrt::WeightFormat> f = forced ? forced : LosslessFormat(dtype);
      if (!f) {
        f = xrt::WeightFormat::kF32;
        note(fmt::format("{} tensors are dequantized to f32 (no kernel for {} yet)",
                         SourceDTypeName(dtype), SourceDTypeName(dtype)));
      }
      const int64_t k = w.getType().getDimSize(w.getType().getRank() - 1);
      if (*f != xrt::WeightFormat::kF32 &&
          (w.getType().getRank() != 2 || k % xrt::WeightFormatBlockSize(*f) != 0)) {
        note(fmt::format("'{}' stays f32: {} needs K to be a multiple of {}, it is {}", name,
                         xrt::WeightFormatName(*f), xrt::WeightFormatBlockSize(*f), k));
        f = xrt::WeightFormat::kF32;
      }
      it = chosen.emplace(name, *f).first;
    }
    xrt::WeightFormat f = it->second;
    // Pairs for this op's linears. A table's own ops keep its format: a bf16 or
    // f16 table is stored once, packed, for the lookup and a tied lm_head; an
    // f32 one row-major for the lookup, and the lm_head's op packs a copy.
    const bool wide = f == xrt::WeightFormat::kF32 || f == xrt::WeightFormat::kF16;
    const bool linearsOnly =
        llvm::all_of(w->getUses(), [](OpOperand& u) { return xg::isLinearWeightUse(u); });
    if (bf16Pairs && linearsOnly &&
        (tables.count(name) ? f == xrt::WeightFormat::kF32 && !forced
                            : f == xrt::WeightFormat::kBF16 || (wide && !forced))) {
      if (wide)
        note(
            fmt::format("{} linear weights are stored as {}: --compute bf16 multiplies "
                        "their bf16 roundings (the same results)",
                        xrt::WeightFormatName(f), xrt::WeightFormatName(*bf16Pairs)));
      f = *bf16Pairs;
    }
    if (f != xrt::WeightFormat::kF32)
      w.setFormatAttr(StringAttr::get(w.getContext(), xrt::WeightFormatName(f)));
  });
  return status;
}

// A weight's bytes as the artifact stores them: row-major f32, or packed in
// its format (repacked losslessly from the source's own blocks when they are
// of that format, else converted from f32).
Expected<std::vector<uint8_t>> MaterializeWeight(const ModelSource& source, const WeightDesc& d) {
  int64_t numel = 1;
  for (int64_t s : d.shape) numel *= s;
  auto asBytes = [](const std::vector<float>& v) {
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    return std::vector<uint8_t>(p, p + v.size() * sizeof(float));
  };
  if (d.pack_nr != 0 &&
      (d.shape.size() != 2 || (d.format != xrt::WeightFormat::kF32 && d.pack_nr != xrt::kPackNR)))
    return xrt::InternalError("weight '{}': cannot pack with panel width {}", d.name, d.pack_nr);
  if (d.pack_nr == 0 && d.format != xrt::WeightFormat::kF32)
    return xrt::InternalError("weight '{}': a {} weight must be packed", d.name,
                              xrt::WeightFormatName(d.format));

  // Lossless repack: every source tensor is stored in the target format.
  bool sameFormat = d.format != xrt::WeightFormat::kF32 && !d.sources.empty();
  std::vector<const SourceTensor*> parts;
  for (const std::string& name : d.sources) {
    if (!sameFormat) break;
    XRT_ASSIGN_OR_RETURN(const SourceTensor* t, source.tensor(name));
    const std::optional<xrt::WeightFormat> lossless = LosslessFormat(t->dtype);
    sameFormat = lossless == d.format ||
                 (lossless == xrt::WeightFormat::kBF16 && xrt::IsBf16PairsFormat(d.format));
    parts.push_back(t);
  }
  if (sameFormat) {
    const int64_t n = d.shape[0], k = d.shape[1];
    // One part is packed straight from the (mapped) source; several are
    // concatenated.
    std::vector<uint8_t> rows;
    const uint8_t* rowData = parts.size() == 1 ? parts[0]->data : nullptr;
    uint64_t rowBytes = 0;
    int64_t rowCount = 0;
    for (const SourceTensor* t : parts) {
      // Row-major data: a tensor of any rank is numel / K rows of K values.
      int64_t elements = 1;
      for (int64_t s : t->shape) elements *= s;
      if (elements % k != 0)
        return xrt::InternalError("weight '{}': part '{}' does not hold rows of {}", d.name,
                                  t->name, k);
      if (!rowData) rows.insert(rows.end(), t->data, t->data + t->nbytes);
      rowBytes += t->nbytes;
      rowCount += elements / k;
    }
    if (!rowData) rowData = rows.data();
    if (rowCount != n || rowBytes % n != 0)
      return xrt::InternalError("weight '{}': {} source rows in {} bytes, expected {}", d.name,
                                rowCount, rowBytes, n);
    std::vector<uint8_t> packed(xrt::PackedWeightBytes(d.format, n, k));
    xrt::PackWeightsFromBlocks(d.format, rowData, n, k, rowBytes / n, packed.data());
    return packed;
  }

  std::vector<float> data;
  if (d.name == kRopeInvFreqWeight) {
    data = RopeInverseFrequencies(source.config());
  } else {
    for (const std::string& name : d.sources) {
      XRT_ASSIGN_OR_RETURN(std::vector<float> part, source.ReadF32(name));
      if (data.empty()) {
        data = std::move(part);
      } else {
        data.insert(data.end(), part.begin(), part.end());
      }
    }
  }
  if (static_cast<int64_t>(data.size()) != numel)
    return xrt::InternalError("weight '{}': {} elements, expected {}", d.name, data.size(), numel);
  if (d.pack_nr == 0) return asBytes(data);
  if (d.format == xrt::WeightFormat::kF32) {
    // Packed straight into the bytes returned (operator new's alignment suits floats).
    std::vector<uint8_t> packed(xrt::PackedWeightFloats(d.shape[0], d.shape[1]) * sizeof(float));
    xrt::PackWeights(data.data(), d.shape[0], d.shape[1], reinterpret_cast<float*>(packed.data()));
    return packed;
  }
  std::vector<uint8_t> packed(xrt::PackedWeightBytes(d.format, d.shape[0], d.shape[1]));
  xrt::PackWeightsFrom(d.format, data.data(), d.shape[0], d.shape[1], packed.data());
  return packed;
}

std::string InputRole(const std::string& path) {
  auto ends = [&](const char* s) {
    std::string suffix(s);
    return path.size() >= suffix.size() &&
           path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends("adapter_config.json") || ends("adapter_model.safetensors")) return "adapter";
  if (ends(".gguf")) return "gguf";
  if (ends(".safetensors")) return "weights";
  if (ends("tokenizer.json") || ends("tokenizer_config.json")) return "tokenizer";
  if (ends("generation_config.json")) return "generation_config";
  if (ends("preprocessor_config.json") || ends("processor_config.json")) return "image_processor";
  if (ends("chat_template.jinja") || ends("chat_template.json")) return "chat_template";
  if (ends("config.json") || ends(".index.json")) return "config";
  return "other";
}

flatbuffers::Offset<xpk::ImagePreprocess> BuildImagePreprocess(
    flatbuffers::FlatBufferBuilder& fbb, const xrt::ImagePreprocessParams& p) {
  const bool shortest = p.resize_rule == xrt::ResizeRule::kShortestEdge;
  return xpk::CreateImagePreprocess(fbb, fbb.CreateString(xrt::ImageProcessorKindName(p.processor)),
                                    p.do_convert_rgb, p.do_resize, shortest ? p.shortest_edge : 0,
                                    shortest ? 0 : p.resize_height, shortest ? 0 : p.resize_width,
                                    p.resample, p.do_center_crop, p.crop_height, p.crop_width,
                                    p.do_rescale, p.rescale_factor, p.do_normalize,
                                    fbb.CreateVector(p.image_mean.data(), p.image_mean.size()),
                                    fbb.CreateVector(p.image_std.data(), p.image_std.size()));
}

flatbuffers::Offset<xpk::VisionConfig> BuildVisionConfig(flatbuffers::FlatBufferBuilder& fbb,
                                                         const VisionConfig& v,
                                                         int64_t encoder_cache_rows) {
  return xpk::CreateVisionConfig(
      fbb, fbb.CreateString(v.tower), v.hidden_size, v.intermediate_size, v.layers_used(),
      v.num_attention_heads, v.image_size, v.patch_size, v.num_channels, v.layer_norm_eps,
      fbb.CreateString(v.hidden_act), fbb.CreateVector(v.feature_layers),
      fbb.CreateString(v.select_strategy), fbb.CreateString(v.projector_act), v.projector_bias,
      v.image_token_id, fbb.CreateString(v.image_token), v.tokens_per_image(), encoder_cache_rows,
      BuildImagePreprocess(fbb, v.preprocess));
}

std::string JoinInts(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s;
}

}  // namespace

Expected<CompileSummary> Compile(const CompileOptions& o) {
  auto start = std::chrono::steady_clock::now();
  auto progress = [&](const std::string& msg) {
    if (o.quiet) return;
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    llvm::errs() << fmt::format("[{:6.1f}s] ", t) << msg << "\n";
  };

  xrt::ComputeType compute;
  if (!xrt::ComputeTypeFromName(o.compute, &compute))
    return xrt::InvalidArgumentError("--compute: '{}' is not one of f32, bf16, int8", o.compute);
  progress("reading " + o.model_path);
  XRT_ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> source, ModelSource::Open(o.model_path));
  const DecoderConfig& cfg = source->config();

  // Serving limits and buckets.
  if (o.limits.max_num_seqs < 1)
    return xrt::InvalidArgumentError("--max-num-seqs must be >= 1, got {}", o.limits.max_num_seqs);
  if (o.limits.max_num_batched_tokens < 1)
    return xrt::InvalidArgumentError("--max-num-batched-tokens must be >= 1, got {}",
                                     o.limits.max_num_batched_tokens);
  if (o.limits.block_size < 1 || o.limits.block_size > 1024)
    return xrt::InvalidArgumentError("--block-size must be in [1, 1024], got {}",
                                     o.limits.block_size);
  int64_t maxModelLen =
      o.limits.max_model_len > 0
          ? o.limits.max_model_len
          : std::min<int64_t>(cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 4096,
                              4096);
  if (cfg.max_position_embeddings > 0 && maxModelLen > cfg.max_position_embeddings)
    return xrt::InvalidArgumentError(
        "--max-model-len {} exceeds the model's max_position_embeddings {}", maxModelLen,
        cfg.max_position_embeddings);
  if (cfg.sliding_window > 0 && cfg.sliding_window < maxModelLen)
    return xrt::UnimplementedError(
        "{}: sliding_window {} is shorter than max_model_len {}; sliding-window attention is "
        "not supported yet (pass --max-model-len <= {})",
        o.model_path, cfg.sliding_window, maxModelLen, cfg.sliding_window);
  const int64_t maxBlocksPerReq = (maxModelLen + o.limits.block_size - 1) / o.limits.block_size;
  std::vector<int64_t> tokenBuckets =
      o.token_buckets.empty()
          ? xrt::DefaultTokenBuckets(o.limits.max_num_batched_tokens, o.token_bucket_gap)
          : o.token_buckets;
  for (size_t i = 0; i < tokenBuckets.size(); ++i)
    if (tokenBuckets[i] < 1 || (i && tokenBuckets[i] <= tokenBuckets[i - 1]))
      return xrt::InvalidArgumentError("--token-buckets must be positive and increasing, got {}",
                                       JoinInts(tokenBuckets));
  std::vector<int64_t> reqBuckets = xrt::DefaultReqBuckets(o.limits.max_num_seqs);

  // Vision: the encoder budget fixes the vision_encode buckets and the cache lm_step reads.
  const VisionConfig* vision = source->vision();
  std::vector<int64_t> imageBuckets;
  xrt::EncoderBudget encoderBudget;
  if (vision) {
    XRT_ASSIGN_OR_RETURN(
        encoderBudget, xrt::ComputeEncoderBudget(o.limits.max_num_batched_tokens,
                                                 vision->tokens_per_image(), o.limits.max_num_seqs,
                                                 o.max_images_per_prompt, o.encoder_cache_rows));
    imageBuckets = o.image_buckets.empty() ? xrt::DefaultImageBuckets(encoderBudget.images_per_step)
                                           : o.image_buckets;
    for (size_t i = 0; i < imageBuckets.size(); ++i)
      if (imageBuckets[i] < 1 || (i && imageBuckets[i] <= imageBuckets[i - 1]))
        return xrt::InvalidArgumentError("--image-buckets must be positive and increasing, got {}",
                                         JoinInts(imageBuckets));
    if (imageBuckets.back() > encoderBudget.images_per_step)
      return xrt::InvalidArgumentError(
          "--image-buckets: bucket {} exceeds the {} images one step can encode (encoder budget "
          "{} rows, {} tokens per image; raise --max-num-batched-tokens)",
          imageBuckets.back(), encoderBudget.images_per_step, encoderBudget.compute_rows,
          vision->tokens_per_image());
  }

  // Multi-LoRA: the targets the variants have adapter slots for, and the adapters packed
  // into the artifact (validated against them).
  xrt::LoraSpec loraSpec;
  std::vector<xrt::PackedLora> packedLoras;
  if (o.enable_lora) {
    if (o.max_loras < 1)
      return xrt::InvalidArgumentError("--max-loras must be >= 1, got {}", o.max_loras);
    if (o.max_lora_rank < 1)
      return xrt::InvalidArgumentError("--max-lora-rank must be >= 1, got {}", o.max_lora_rank);
    std::vector<std::string> modules = o.lora_target_modules;
    if (modules.empty()) modules = xrt::AllLoraTargetModules();
    XRT_RETURN_IF_ERROR(
        xrt::ValidateLoraTargetModules(modules).WithContext("--lora-target-modules"));
    loraSpec = xrt::MakeLoraSpec(cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size,
                                 cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                                 o.max_lora_rank, modules);
    std::set<std::string> names;
    for (const auto& [name, path] : o.lora_modules) {
      if (!names.insert(name).second)
        return xrt::InvalidArgumentError("--lora-modules: adapter name '{}' is given twice", name);
      XRT_ASSIGN_OR_RETURN(xrt::PackedLora lora, xrt::LoadPeftAdapter(name, path, loraSpec));
      packedLoras.push_back(std::move(lora));
    }
  } else if (!o.lora_modules.empty() || !o.lora_target_modules.empty()) {
    return xrt::InvalidArgumentError("--lora-modules / --lora-target-modules need --enable-lora");
  }

  // Graph.
  MLIRContext ctx;
  LoadPipelineDialects(&ctx);
  DiagnosticCollector diags(&ctx);
  DecoderBuildOptions bo;
  bo.max_num_reqs = o.limits.max_num_seqs;
  bo.max_blocks_per_req = maxBlocksPerReq;
  bo.max_token_bucket = tokenBuckets.back();
  bo.vision = vision;
  bo.encoder_cache_rows = encoderBudget.cache_rows;
  progress(fmt::format("building the graph of {} ({} layers, hidden {}, vocab {})",
                       cfg.architecture, cfg.num_hidden_layers, cfg.hidden_size, cfg.vocab_size));
  OwningOpRef<ModuleOp> module = BuildDecoderModule(&ctx, cfg, bo);
  PipelineOptions po;
  po.token_buckets = tokenBuckets;
  po.req_buckets = reqBuckets;
  po.image_buckets = imageBuckets;
  po.pack_nr = xrt::kPackNR;
  if (o.enable_lora) {
    po.lora_slots = o.max_loras;
    po.lora_rank = o.max_lora_rank;
    po.lora_target_modules = loraSpec.target_modules;
  }
  po.dump_ir_after = o.dump_ir_after;
  progress(fmt::format("specializing {} token buckets ({}) and {} request buckets ({})",
                       tokenBuckets.size(), JoinInts(tokenBuckets), reqBuckets.size(),
                       JoinInts(reqBuckets)));
  std::vector<std::string> weightNotes;
  // --compute bf16 pairs bf16 weights at compile time, in the order of the
  // target's bf16 unit: AMX's where it has AMX-BF16, else vdpbf16ps's.
  std::optional<xrt::WeightFormat> bf16Pairs;
  if (compute == xrt::ComputeType::kBF16) {
    XRT_ASSIGN_OR_RETURN(bool amx, TargetHasFeature(o.target, "amx-bf16"));
    bf16Pairs = amx ? xrt::WeightFormat::kBF16PairsAmx : xrt::WeightFormat::kBF16Pairs;
  }
  XRT_RETURN_IF_ERROR(
      AssignWeightFormats(*module, *source, o.weight_dtype, bf16Pairs, &weightNotes));
  if (failed(RunGraphPipeline(*module, po)))
    return xrt::InternalError("graph pipeline failed:\n{}", diags.text());

  Emitter emitter(o, o.limits.max_num_seqs, maxBlocksPerReq, o.limits.block_size, loraSpec.targets,
                  static_cast<xpk::ComputeType>(compute));
  XRT_RETURN_IF_ERROR(emitter.Run(*module));

  // Code.
  progress(fmt::format("generating code for {} dispatch functions (target {})",
                       emitter.functions().size(), o.target));
  OwningOpRef<ModuleOp> code_module = cast<ModuleOp>((*module)->clone());
  if (failed(RunLoweringPipeline(*code_module, po)))
    return xrt::InternalError("lowering to LLVM failed:\n{}", diags.text());
  CodegenOptions co;
  co.target = o.target;
  XRT_ASSIGN_OR_RETURN(CodegenResult code, GenerateSharedObject(*code_module, co));

  // Artifact. The weights go to the output's temporary file as they are materialized,
  // one at a time (the source stays mapped), so memory holds one tensor, not the model.
  ArtifactWriter writer;
  XRT_RETURN_IF_ERROR(writer.StreamTo(o.output_path));
  uint64_t weightBytes = 0;
  progress(fmt::format("packing {} weights", emitter.weights().size()));
  std::map<std::string, CompileSummary::FormatUse> formatUse;
  for (WeightDesc& w : emitter.weights()) {
    XRT_ASSIGN_OR_RETURN(std::vector<uint8_t> data, MaterializeWeight(*source, w));
    w.placement = writer.AppendWeight(data.data(), data.size());
    XRT_RETURN_IF_ERROR(writer.stream_status());
    weightBytes += w.placement.size;
    CompileSummary::FormatUse& use = formatUse[xrt::WeightFormatName(w.format)];
    use.weights += 1;
    use.bytes += w.placement.size;
  }
  XRT_ASSIGN_OR_RETURN(
      uint32_t code_segment,
      writer.AddSegment(xpk::SegmentKind::code, std::vector<uint8_t>(code.shared_object.begin(),
                                                                     code.shared_object.end())));

  // Packed adapters: one segment, each adapter a contiguous range of it.
  std::vector<std::pair<uint64_t, uint64_t>> loraRanges;  // (offset, size) bytes
  uint32_t adapters_segment = 0;
  if (!packedLoras.empty()) {
    const int64_t floats = xrt::PackedLoraFloats(loraSpec);
    std::vector<uint8_t> bytes(packedLoras.size() * floats * sizeof(float));
    for (size_t i = 0; i < packedLoras.size(); ++i) {
      xrt::WritePackedLora(packedLoras[i], loraSpec,
                           reinterpret_cast<float*>(bytes.data()) + i * floats);
      loraRanges.push_back({i * floats * sizeof(float), floats * sizeof(float)});
    }
    XRT_ASSIGN_OR_RETURN(adapters_segment,
                         writer.AddSegment(xpk::SegmentKind::adapters, std::move(bytes)));
  }

  xrt::ArtifactProvenance prov;
  prov.compiler_version = kXccVersion;
  prov.llvm_version = LLVM_VERSION_STRING;
  prov.options = {
      {"max_num_seqs", std::to_string(o.limits.max_num_seqs)},
      {"max_num_batched_tokens", std::to_string(o.limits.max_num_batched_tokens)},
      {"max_model_len", std::to_string(maxModelLen)},
      {"block_size", std::to_string(o.limits.block_size)},
      {"token_buckets", JoinInts(tokenBuckets)},
      {"req_buckets", JoinInts(reqBuckets)},
      {"target", o.target},
      {"cpu", code.cpu},
      {"pack_nr", std::to_string(xrt::kPackNR)},
      {"weight_dtype", o.weight_dtype},
      {"compute", o.compute},
  };
  if (vision) {
    prov.options.push_back({"image_buckets", JoinInts(imageBuckets)});
    prov.options.push_back({"encoder_cache_rows", std::to_string(encoderBudget.cache_rows)});
    prov.options.push_back({"max_images_per_prompt", std::to_string(o.max_images_per_prompt)});
  }
  if (o.enable_lora) {
    prov.options.push_back({"max_loras", std::to_string(o.max_loras)});
    prov.options.push_back({"max_lora_rank", std::to_string(o.max_lora_rank)});
    std::string modules;
    for (const std::string& m : loraSpec.target_modules)
      modules += (modules.empty() ? "" : ",") + m;
    prov.options.push_back({"lora_target_modules", modules});
    std::string adapters;
    for (const auto& [name, path] : o.lora_modules)
      adapters += (adapters.empty() ? "" : ",") + name + "=" + path;
    prov.options.push_back({"lora_modules", adapters});
  }
  std::vector<std::string> inputFiles = source->input_files();
  for (const auto& [name, path] : o.lora_modules)
    for (const char* f : {"adapter_config.json", "adapter_model.safetensors"})
      inputFiles.push_back(path + "/" + f);
  for (const std::string& path : inputFiles) {
    XRT_ASSIGN_OR_RETURN(std::string sha, Sha256File(path));
    xrt::ArtifactProvenance::Input in;
    in.path = path;
    in.role = InputRole(path);
    in.sha256 = sha;
    if (auto f = xrt::MappedFile::Open(path); f.ok()) in.size = f->size();
    prov.inputs.push_back(std::move(in));
  }

  const auto& tok = source->tokenizer();
  const auto& gen = source->generation();
  ManifestBuildFn build =
      [&](flatbuffers::FlatBufferBuilder& fbb,
          SegmentTable segments) -> Expected<flatbuffers::Offset<xpk::Manifest>> {
    std::vector<int32_t> eos = gen.eos_token_ids;
    if (eos.empty() && tok.eos_id >= 0) eos.push_back(tok.eos_id);
    auto config = xpk::CreateModelConfig(
        fbb, fbb.CreateString(cfg.architecture), cfg.vocab_size, cfg.hidden_size,
        cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_attention_heads,
        cfg.num_key_value_heads, cfg.head_dim, cfg.max_position_embeddings, cfg.rms_norm_eps,
        cfg.rope_theta,
        xpk::CreateRopeScaling(fbb, fbb.CreateString(cfg.rope_scaling.type),
                               cfg.rope_scaling.factor, cfg.rope_scaling.low_freq_factor,
                               cfg.rope_scaling.high_freq_factor,
                               cfg.rope_scaling.original_max_position_embeddings),
        cfg.tie_word_embeddings, cfg.attention_bias, fbb.CreateString(source->chat_template()),
        fbb.CreateVector(eos), gen.temperature, gen.top_p, gen.top_k, gen.repetition_penalty,
        vision ? BuildVisionConfig(fbb, *vision, encoderBudget.cache_rows) : 0);
    auto tokenizer = BuildTokenizer(fbb, tok);
    auto limits = xpk::CreateServingLimits(
        fbb, o.limits.max_num_seqs, o.limits.max_num_batched_tokens, maxModelLen,
        o.limits.block_size, maxBlocksPerReq, vision ? o.max_images_per_prompt : 0,
        o.enable_lora ? o.max_loras : 0, o.enable_lora ? o.max_lora_rank : 0);
    std::vector<flatbuffers::Offset<xpk::Weight>> weights;
    for (const WeightDesc& w : emitter.weights())
      weights.push_back(xpk::CreateWeight(
          fbb, fbb.CreateString(w.name), static_cast<xpk::DType>(w.format),
          fbb.CreateVector(w.shape),
          w.pack_nr ? xpk::WeightLayout::packed_panels : xpk::WeightLayout::row_major,
          static_cast<int32_t>(w.pack_nr), w.placement.segment, w.placement.offset,
          w.placement.size));
    std::vector<flatbuffers::Offset<flatbuffers::String>> fns, req;
    for (const std::string& f : emitter.functions()) fns.push_back(fbb.CreateString(f));
    for (const std::string& f : code.required_features) req.push_back(fbb.CreateString(f));
    auto code_module_fb =
        xpk::CreateCodeModule(fbb, fbb.CreateString(code.triple), fbb.CreateString(code.cpu),
                              fbb.CreateString(code.features), fbb.CreateVector(req), code_segment,
                              fbb.CreateVector(fns), xpk::abi::kDispatchAbiVersion);
    std::vector<flatbuffers::Offset<xpk::Executable>> exes;
    for (const ExecutableDesc& e : emitter.executables()) {
      auto specs = [&](const std::vector<TensorDesc>& ts) {
        std::vector<flatbuffers::Offset<xpk::TensorSpec>> out;
        for (const TensorDesc& t : ts)
          out.push_back(xpk::CreateTensorSpec(fbb, fbb.CreateString(t.name), t.dtype,
                                              fbb.CreateVector(t.shape), t.offset, t.size));
        return fbb.CreateVector(out);
      };
      auto inputs = specs(e.inputs);
      auto outputs = specs(e.outputs);
      std::vector<flatbuffers::Offset<xpk::Command>> cmds;
      for (const CommandDesc& c : e.commands)
        // Empty vectors are left out: the manifest treats absent as empty.
        cmds.push_back(xpk::CreateCommand(fbb, c.kind, c.function, c.ukernel, c.workgroups,
                                          fbb.CreateVectorOfStructs(c.bindings),
                                          c.iparams.empty() ? 0 : fbb.CreateVector(c.iparams),
                                          c.fparams.empty() ? 0 : fbb.CreateVector(c.fparams),
                                          fbb.CreateString(c.label), c.dynamic_rows, c.compute));
      exes.push_back(xpk::CreateExecutable(fbb, fbb.CreateString(e.name), e.kind, e.num_tokens,
                                           e.num_reqs, e.num_images, e.lora_mode, inputs, outputs,
                                           e.io_size, e.arena_size, fbb.CreateVector(cmds)));
    }
    auto provenance = BuildProvenance(fbb, prov);
    flatbuffers::Offset<xpk::LoraConfig> lora = 0;
    if (o.enable_lora) {
      std::vector<flatbuffers::Offset<xpk::LoraTarget>> targets;
      for (const xrt::LoraTarget& t : loraSpec.targets)
        targets.push_back(
            xpk::CreateLoraTarget(fbb, fbb.CreateString(t.name), t.in_features, t.out_features));
      std::vector<flatbuffers::Offset<xpk::LoraAdapter>> adapters;
      for (size_t i = 0; i < packedLoras.size(); ++i) {
        const xrt::PackedLora& p = packedLoras[i];
        adapters.push_back(xpk::CreateLoraAdapter(
            fbb, fbb.CreateString(p.name), fbb.CreateString(p.path), p.rank,
            fbb.CreateVectorOfStrings(p.modules), fbb.CreateString(p.base_model_name_or_path),
            loraRanges[i].first, loraRanges[i].second));
      }
      lora = xpk::CreateLoraConfig(
          fbb, o.max_loras, o.max_lora_rank, fbb.CreateVectorOfStrings(loraSpec.target_modules),
          fbb.CreateVector(targets), fbb.CreateVector(adapters), adapters_segment);
    }
    return xpk::CreateManifest(fbb, xrt::kXpkFormatMajor, xrt::kXpkFormatMinor, config, tokenizer,
                               limits, segments, fbb.CreateVector(weights),
                               fbb.CreateVector(std::vector{code_module_fb}),
                               fbb.CreateVector(exes), provenance, lora);
  };
  progress("writing " + o.output_path);
  XRT_RETURN_IF_ERROR(writer.WriteToFile(o.output_path, build));

  CompileSummary s;
  s.num_executables = static_cast<int64_t>(emitter.executables().size());
  s.num_dispatch_functions = static_cast<int64_t>(emitter.functions().size());
  s.code_bytes = code.shared_object.size();
  s.weight_bytes = weightBytes;
  s.weight_formats = std::move(formatUse);
  s.weight_notes = std::move(weightNotes);
  for (const ExecutableDesc& e : emitter.executables())
    s.max_arena_bytes = std::max<uint64_t>(s.max_arena_bytes, e.arena_size);
  if (auto f = xrt::MappedFile::Open(o.output_path); f.ok()) s.file_bytes = f->size();
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (vision) {
    s.image_buckets = imageBuckets;
    s.tokens_per_image = vision->tokens_per_image();
    s.encoder_cache_rows = encoderBudget.cache_rows;
  }
  return s;
}

}  // namespace xcc
