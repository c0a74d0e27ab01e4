#include "runtime/executor/executor.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/base/thread_pool.h"
#include "runtime/kernels/attention.h"
#include "runtime/kernels/dense_attention.h"
#include "runtime/kernels/lora.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/matmul_int8.h"
#include "runtime/loader/artifact.h"
#include "schemas/abi.h"
#include "schemas/artifact_generated.h"

namespace xrt {

// Command.compute is read as the kernels' ComputeType.
static_assert(static_cast<int>(ComputeType::kF32) == static_cast<int>(xpk::ComputeType::f32));
static_assert(static_cast<int>(ComputeType::kBF16) == static_cast<int>(xpk::ComputeType::bf16));
static_assert(static_cast<int>(ComputeType::kInt8) == static_cast<int>(xpk::ComputeType::int8));

struct Executor::PreparedCommand {
  const xpk::Command* fb;
  DispatchFn fn = nullptr;
  std::vector<void*> ptrs;
  WeightFormat w_format = WeightFormat::kF32;  // matmul: the bound weight's format
  ComputeType compute = ComputeType::kF32;     // matmul: Command.compute
};

struct Executor::Prepared {
  using Command = PreparedCommand;
  std::vector<Command> commands;
  uint8_t* io = nullptr;
};

namespace {

uint8_t* AlignedAlloc(uint64_t bytes) {
  uint64_t size = (bytes + 63) / 64 * 64;
  if (size == 0) size = 64;
  void* p = std::aligned_alloc(64, size);
  if (p) std::memset(p, 0, size);
  return static_cast<uint8_t*>(p);
}

// A validated ukernel command's parameters and bound pointers, by role.
template <xpk::Ukernel U>
class UkernelCall {
 public:
  UkernelCall(const xpk::Command& c, const std::vector<void*>& ptrs) : view_(c), ptrs_(ptrs) {}

  template <typename Role>
  auto operator[](Role r) const {
    return view_[r];
  }
  // The pointer bound to role `r`, or nullptr when the optional role is unbound.
  template <typename T>
  T* Ptr(typename xpk::abi::UkernelView<U>::Binding r) const {
    const int slot = view_.Slot(r);
    return slot < 0 ? nullptr : static_cast<T*>(ptrs_[slot]);
  }

 private:
  xpk::abi::UkernelView<U> view_;
  const std::vector<void*>& ptrs_;
};

// `s`, failed in command `c` of `e`, with the executable and the command's label
// (or `kernel` for a command without one) in front of its message.
Status InCommand(Status s, const xpk::Executable& e, const xpk::Command& c, const char* kernel) {
  return s.WithContext(
      fmt::format("{} ({})", e.name()->str(), c.label() ? c.label()->str() : kernel));
}

// The format of the weight a matmul command reads, checked against the
// command: a packed_panels weight of shape [n, k] with the kernels' panel
// width (the loader checked its byte size).
Expected<WeightFormat> MatmulWeightFormat(const Artifact& a, const xpk::Executable& e,
                                          const xpk::Command& c) {
  using P = xpk::abi::MatmulParam;
  using B = xpk::abi::MatmulBinding;
  const xpk::abi::UkernelView<xpk::Ukernel::matmul> view(c);
  const xpk::Binding* b = c.bindings()->Get(view.Slot(B::kW));
  const std::string where = fmt::format("{}: executable '{}' matmul '{}'", a.path(),
                                        e.name()->str(), c.label() ? c.label()->str() : "");
  if (b->kind() != xpk::BindingKind::weight)
    return DataLossError("{}: its weight operand is not bound to a weight", where);
  const xpk::Weight* w = a.manifest().weights()->Get(b->index());
  WeightFormat format;
  std::vector<int64_t> shape(w->shape()->begin(), w->shape()->end());
  if (w->layout() != xpk::WeightLayout::packed_panels || !WeightFormatOf(w->dtype(), &format) ||
      w->pack_nr() != kPackNR || shape != std::vector<int64_t>{view[P::kN], view[P::kK]})
    return DataLossError(
        "{}: weight '{}' ({} [{}] {}, pack_nr {}) is not a [{}, {}] weight packed for the "
        "matmul kernels",
        where, w->name()->str(), DTypeName(w->dtype()), fmt::join(shape, ", "),
        xpk::EnumNameWeightLayout(w->layout()), w->pack_nr(), view[P::kN], view[P::kK]);
  return format;
}

}  // namespace

Expected<std::unique_ptr<Executor>> Executor::Create(const ExecutorParams& params) {
  if (!params.artifact || !params.pool)
    return InvalidArgumentError("Executor needs an artifact and a thread pool");
  std::unique_ptr<Executor> e(new Executor(params));
  XRT_RETURN_IF_ERROR(e->Prepare());
  return e;
}

Executor::Executor(const ExecutorParams& p) : p_(p) {}

Executor::~Executor() {
  std::free(arena_);
  for (auto& [kind, p] : io_) std::free(p);
}

Status Executor::Prepare() {
  const Artifact& a = *p_.artifact;
  const xpk::Manifest& m = a.manifest();
  const int64_t layers = m.config()->num_hidden_layers();
  if (static_cast<int64_t>(p_.kv.keys.size()) != layers ||
      static_cast<int64_t>(p_.kv.values.size()) != layers)
    return InvalidArgumentError("KV cache has {} key / {} value layers, the model has {}",
                                p_.kv.keys.size(), p_.kv.values.size(), layers);
  if (m.code() && m.code()->size() > 0) {
    XRT_ASSIGN_OR_RETURN(code_, CodeModule::Load(a, 0));
  }
  std::map<int, uint64_t> ioSize;
  for (const xpk::Executable* e : *m.executables()) {
    arena_size_ = std::max<uint64_t>(arena_size_, e->arena_size());
    uint64_t& s = ioSize[static_cast<int>(e->kind())];
    s = std::max<uint64_t>(s, e->io_size());
  }
  arena_ = AlignedAlloc(arena_size_);
  if (!arena_) return ResourceExhaustedError("cannot allocate a {}-byte arena", arena_size_);
  for (auto [kind, size] : ioSize) {
    io_[kind] = AlignedAlloc(size);
    if (!io_[kind]) return ResourceExhaustedError("cannot allocate a {}-byte io buffer", size);
  }

  for (const xpk::Executable* e : *m.executables()) {
    auto prep = std::make_unique<Prepared>();
    prep->io = io_[static_cast<int>(e->kind())];
    for (const xpk::Command* c : *e->commands()) {
      Prepared::Command pc;
      pc.fb = c;
      if (c->kind() == xpk::CommandKind::dispatch) {
        if (!code_ || c->function() >= code_->num_functions())
          return DataLossError("{}: executable '{}' uses dispatch {} but the code has {}", a.path(),
                               e->name()->str(), c->function(), code_ ? code_->num_functions() : 0);
        pc.fn = code_->function(c->function());
      }
      if (c->kind() == xpk::CommandKind::ukernel && c->ukernel() == xpk::Ukernel::matmul) {
        XRT_ASSIGN_OR_RETURN(pc.w_format, MatmulWeightFormat(a, *e, *c));
        // The loader accepted the value, and the enums agree (asserted above).
        pc.compute = static_cast<ComputeType>(c->compute());
        if (pc.compute == ComputeType::kInt8 && !Int8ComputeApplies(pc.w_format)) {
          pc.compute = ComputeType::kF32;  // int8 on a weight without integer quants is f32
        }
      }
      for (const xpk::Binding* b : *c->bindings()) {
        void* ptr = nullptr;
        switch (b->kind()) {
          case xpk::BindingKind::arena:
            ptr = arena_ + b->offset();
            break;
          case xpk::BindingKind::io:
            ptr = prep->io + b->offset();
            break;
          case xpk::BindingKind::weight: {
            XRT_ASSIGN_OR_RETURN(ByteSpan w, a.weight_data(b->index()));
            ptr = const_cast<uint8_t*>(w.data);
            break;
          }
          case xpk::BindingKind::kv_key:
            ptr = p_.kv.keys[b->index()];
            break;
          case xpk::BindingKind::kv_value:
            ptr = p_.kv.values[b->index()];
            break;
          case xpk::BindingKind::encoder_cache:
            if (!p_.encoder_cache)
              return InvalidArgumentError(
                  "{}: executable '{}' reads the encoder cache, but none "
                  "was given",
                  a.path(), e->name()->str());
            ptr = p_.encoder_cache;
            break;
          case xpk::BindingKind::lora_a:
          case xpk::BindingKind::lora_b: {
            const auto& slots = b->kind() == xpk::BindingKind::lora_a ? p_.lora_a : p_.lora_b;
            if (b->index() >= slots.size() || !slots[b->index()])
              return InvalidArgumentError(
                  "{}: executable '{}' reads the LoRA slots of target {}, but {} were given",
                  a.path(), e->name()->str(), b->index(), slots.size());
            ptr = slots[b->index()];
            break;
          }
          default:
            return DataLossError("{}: unknown binding kind {}", a.path(),
                                 static_cast<int>(b->kind()));
        }
        pc.ptrs.push_back(ptr);
      }
      prep->commands.push_back(std::move(pc));
    }
    prepared_[e] = std::move(prep);
  }
  return Status::Ok();
}

uint8_t* Executor::io(const xpk::Executable& e) { return io_[static_cast<int>(e.kind())]; }

Expected<uint8_t*> Executor::Tensor(const xpk::Executable& e, const std::string& name) {
  for (auto* list : {e.inputs(), e.outputs()}) {
    if (!list) continue;
    for (const xpk::TensorSpec* t : *list)
      if (t->name()->str() == name) return io(e) + t->offset();
  }
  return NotFoundError("executable '{}' has no tensor '{}'", e.name()->str(), name);
}

namespace {

// A dispatch's profile label: "dispatch" and the command's label without the
// layer it belongs to ("model.layers.3.rope_q" -> "dispatch rope_q"), so that
// the layers' like dispatches add up under one label.
std::string DispatchProfileLabel(const xpk::Command& c) {
  if (!c.label() || c.label()->size() == 0) return "dispatch";
  std::string_view name = c.label()->string_view();
  const size_t layers = name.rfind("layers.");
  if (layers != std::string_view::npos) {
    const size_t dot = name.find('.', layers + 7);
    if (dot != std::string_view::npos) name.remove_prefix(dot + 1);
  } else if (const size_t dot = name.find('.'); dot != std::string_view::npos) {
    name.remove_prefix(dot + 1);  // "model.norm.weight" -> "norm.weight"
  }
  // A norm is labelled by its weight: "input_layernorm.weight" -> "input_layernorm".
  constexpr std::string_view kWeight = ".weight";
  if (name.size() > kWeight.size() && name.substr(name.size() - kWeight.size()) == kWeight) {
    name.remove_suffix(kWeight.size());
  }
  return fmt::format("dispatch {}", name);
}

}  // namespace

Status Executor::Run(const xpk::Executable& e, int64_t active_rows) {
  auto it = prepared_.find(&e);
  if (it == prepared_.end()) return InvalidArgumentError("executable is not from this artifact");
  for (const PreparedCommand& pc : it->second->commands) {
    if (!profile_) {
      XRT_RETURN_IF_ERROR(RunCommand(pc, e, active_rows));
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    Status s = RunCommand(pc, e, active_rows);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const xpk::Command& c = *pc.fb;
    std::string label = c.kind() == xpk::CommandKind::dispatch
                            ? DispatchProfileLabel(c)
                            : std::string(xpk::EnumNameUkernel(c.ukernel()));
    int64_t weight_bytes = 0;
    if (c.kind() == xpk::CommandKind::ukernel && c.ukernel() == xpk::Ukernel::matmul) {
      // By shape too, so that a profile gives each weight's read rate.
      const UkernelCall<xpk::Ukernel::matmul> call(c, pc.ptrs);
      const int64_t n = call[xpk::abi::MatmulParam::kN], k = call[xpk::abi::MatmulParam::kK];
      weight_bytes = PackedWeightBytes(pc.w_format, n, k);
      label += fmt::format(" {} {}x{}{}", WeightFormatName(pc.w_format), n, k,
                           pc.compute == ComputeType::kF32
                               ? ""
                               : fmt::format(" ({} compute)", ComputeTypeName(pc.compute)));
    }
    CommandProfile::Entry& entry = profile_->by_label[label];
    ++entry.calls;
    entry.seconds += seconds;
    entry.weight_bytes += weight_bytes;
    XRT_RETURN_IF_ERROR(s);
  }
  return Status::Ok();
}

Status Executor::RunCommand(const PreparedCommand& pc, const xpk::Executable& e,
                            int64_t active_rows) {
  ThreadPool* pool = p_.pool;
  {
    const xpk::Command* c = pc.fb;
    // A row-wise command runs the step's real rows only (Command.dynamic_rows).
    auto rows = [&](int64_t all) {
      return c->dynamic_rows() && active_rows >= 0 ? std::min(all, active_rows) : all;
    };
    if (c->kind() == xpk::CommandKind::dispatch) {
      DispatchFn fn = pc.fn;
      void* const* ptrs = pc.ptrs.data();
      pool->ParallelFor(rows(c->workgroups()),
                        [&](int64_t b, int64_t end) { fn(ptrs, nullptr, b, end); });
      return Status::Ok();
    }
    switch (c->ukernel()) {
      case xpk::Ukernel::matmul: {
        using P = xpk::abi::MatmulParam;
        using B = xpk::abi::MatmulBinding;
        const UkernelCall<xpk::Ukernel::matmul> call(*c, pc.ptrs);
        MatmulArgs args;
        args.m = rows(call[P::kM]);
        args.n = call[P::kN];
        args.k = call[P::kK];
        args.lda = call[P::kLda];
        args.ldc = call[P::kLdc];
        args.a = call.Ptr<const float>(B::kA);
        args.packed_w = call.Ptr<const void>(B::kW);
        args.w_format = pc.w_format;
        args.compute = pc.compute;
        args.c = call.Ptr<float>(B::kC);
        args.bias = call.Ptr<const float>(B::kBias);
        if (const float* acc = call.Ptr<const float>(B::kAcc)) {
          const int64_t ldacc = call[P::kLdAcc];
          if (acc != args.c) {
            for (int64_t r = 0; r < args.m; ++r)
              std::memcpy(args.c + r * args.ldc, acc + r * ldacc, args.n * sizeof(float));
          }
          args.accumulate = true;
        }
        Matmul(args, pool);
        break;
      }
      case xpk::Ukernel::paged_attention: {
        using P = xpk::abi::PagedAttentionParam;
        using F = xpk::abi::PagedAttentionFParam;
        using B = xpk::abi::PagedAttentionBinding;
        const UkernelCall<xpk::Ukernel::paged_attention> call(*c, pc.ptrs);
        PagedAttentionArgs args;
        args.q = call.Ptr<const float>(B::kQ);
        args.k = call.Ptr<const float>(B::kK);
        args.v = call.Ptr<const float>(B::kV);
        args.out = call.Ptr<float>(B::kOut);
        args.k_cache = call.Ptr<void>(B::kKCache);
        args.v_cache = call.Ptr<void>(B::kVCache);
        args.kv_dtype = p_.kv.dtype;
        args.slot_mapping = call.Ptr<const int32_t>(B::kSlotMapping);
        args.block_tables = call.Ptr<const int32_t>(B::kBlockTables);
        args.seq_lens = call.Ptr<const int32_t>(B::kSeqLens);
        args.query_start_loc = call.Ptr<const int32_t>(B::kQueryStartLoc);
        args.num_tokens = call[P::kNumTokens];
        args.max_num_reqs = call[P::kMaxNumReqs];
        args.max_blocks_per_req = call[P::kMaxBlocksPerReq];
        args.num_heads = call[P::kNumHeads];
        args.num_kv_heads = call[P::kNumKvHeads];
        args.head_dim = call[P::kHeadDim];
        args.block_size = call[P::kBlockSize];
        args.q_stride = call[P::kQStride];
        args.k_stride = call[P::kKStride];
        args.v_stride = call[P::kVStride];
        args.out_stride = call[P::kOutStride];
        args.num_blocks = p_.kv.num_blocks;
        args.scale = call[F::kScale];
        args.compute = static_cast<ComputeType>(c->compute());
        Status s = PagedAttention(args, pool);
        if (!s.ok()) return InCommand(std::move(s), e, *c, "attention");
        break;
      }
      case xpk::Ukernel::attention: {
        using P = xpk::abi::AttentionParam;
        using F = xpk::abi::AttentionFParam;
        using B = xpk::abi::AttentionBinding;
        const UkernelCall<xpk::Ukernel::attention> call(*c, pc.ptrs);
        DenseAttentionArgs args;
        args.q = call.Ptr<const float>(B::kQ);
        args.k = call.Ptr<const float>(B::kK);
        args.v = call.Ptr<const float>(B::kV);
        args.out = call.Ptr<float>(B::kOut);
        args.num_tokens = call[P::kNumTokens];
        args.seq_len = call[P::kSeqLen];
        args.num_heads = call[P::kNumHeads];
        args.head_dim = call[P::kHeadDim];
        args.q_stride = call[P::kQStride];
        args.k_stride = call[P::kKStride];
        args.v_stride = call[P::kVStride];
        args.out_stride = call[P::kOutStride];
        args.scale = call[F::kScale];
        args.compute = static_cast<ComputeType>(c->compute());
        Status s = DenseAttention(args, pool);
        if (!s.ok()) return InCommand(std::move(s), e, *c, "attention");
        break;
      }
      case xpk::Ukernel::lora_shrink: {
        using P = xpk::abi::LoraShrinkParam;
        using B = xpk::abi::LoraShrinkBinding;
        const UkernelCall<xpk::Ukernel::lora_shrink> call(*c, pc.ptrs);
        LoraShrinkArgs args;
        args.x = call.Ptr<const float>(B::kX);
        args.a_slots = call.Ptr<const float>(B::kA);
        args.slots = call.Ptr<const int32_t>(B::kSlots);
        args.buf = call.Ptr<float>(B::kBuf);
        args.m = rows(call[P::kM]);
        args.k = call[P::kK];
        args.rank = call[P::kRank];
        args.num_slots = call[P::kNumSlots];
        args.mixed = call[P::kMixed] != 0;
        args.ldx = call[P::kLdx];
        args.ldbuf = call[P::kLdBuf];
        Status s = LoraShrink(args, pool);
        if (!s.ok()) return InCommand(std::move(s), e, *c, "lora_shrink");
        break;
      }
      case xpk::Ukernel::lora_expand: {
        using P = xpk::abi::LoraExpandParam;
        using B = xpk::abi::LoraExpandBinding;
        const UkernelCall<xpk::Ukernel::lora_expand> call(*c, pc.ptrs);
        LoraExpandArgs args;
        args.buf = call.Ptr<const float>(B::kBuf);
        args.bt_slots = call.Ptr<const float>(B::kBt);
        args.slots = call.Ptr<const int32_t>(B::kSlots);
        args.y = call.Ptr<float>(B::kY);
        args.m = rows(call[P::kM]);
        args.n = call[P::kN];
        args.rank = call[P::kRank];
        args.num_slots = call[P::kNumSlots];
        args.mixed = call[P::kMixed] != 0;
        args.ldbuf = call[P::kLdBuf];
        args.ldy = call[P::kLdy];
        Status s = LoraExpand(args, pool);
        if (!s.ok()) return InCommand(std::move(s), e, *c, "lora_expand");
        break;
      }
      default:
        return DataLossError("unknown ukernel {}", static_cast<int>(c->ukernel()));
    }
  }
  return Status::Ok();
}

}  // namespace xrt
