// The contract between xcc (which emits an artifact) and xrt (which loads and
// runs it), beyond the manifest's schema (schemas/artifact.fbs): what both
// sides must agree on is written here once and included by both, never
// re-derived from positions or assembled strings.
//
//  - executable names                  ExecutableName
//  - the dispatch calling convention   DispatchFn, kDispatchAbiVersion
//  - each ukernel's parameters and     MatmulParam, MatmulBinding, ...;
//    binding roles                     UkernelCommand (the emitter writes),
//                                      UkernelView (the executor reads),
//                                      SignatureOf (the loader validates)
//
// Header-only, plain C++17; depends only on the generated schema header.
// Everything here is immutable and thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "schemas/artifact_generated.h"

namespace xpk::abi {

// Looks a schema enum up by the name flatc gives it ("lm_step", "matmul").
template <typename E, size_t N>
std::optional<E> EnumNamed(const E (&values)[N], const char* (*name_of)(E), std::string_view name) {
  for (E e : values)
    if (name == name_of(e)) return e;
  return std::nullopt;
}

inline std::optional<ExecutableKind> ExecutableKindNamed(std::string_view name) {
  return EnumNamed(EnumValuesExecutableKind(), EnumNameExecutableKind, name);
}

inline std::optional<Ukernel> UkernelNamed(std::string_view name) {
  return EnumNamed(EnumValuesUkernel(), EnumNameUkernel, name);
}

// ---------------------------------------------------------------------------
// Executables

// The name of an executable in the manifest, in metrics and in reports:
// "<kind>_<bucket letter><bucket>", e.g. "lm_step_t64" (num_tokens 64),
// "lm_logits_r16" (num_reqs 16), "vision_encode_i4" (num_images 4).
inline char BucketLetter(ExecutableKind kind) {
  switch (kind) {
    case ExecutableKind::lm_step:
      return 't';
    case ExecutableKind::lm_logits:
      return 'r';
    case ExecutableKind::vision_encode:
      return 'i';
  }
  return '?';
}

inline std::string ExecutableName(ExecutableKind kind, int64_t bucket) {
  return std::string(EnumNameExecutableKind(kind)) + "_" + BucketLetter(kind) +
         std::to_string(bucket);
}

// A LoRA variant of lm_step (format 1.3) appends its mode: "lm_step_t64_single",
// "lm_step_t64_mixed"; LoraMode::none keeps the plain name.
inline std::string ExecutableName(ExecutableKind kind, int64_t bucket, LoraMode lora) {
  std::string name = ExecutableName(kind, bucket);
  if (lora != LoraMode::none) name += std::string("_") + EnumNameLoraMode(lora);
  return name;
}

// ---------------------------------------------------------------------------
// Dispatch commands (CommandKind::dispatch)

// Every generated dispatch function (CodeModule.functions; the LLVM side is
// built by passes/LowerDispatchesToLLVM.cpp) has this signature: bindings[i] is
// the address of the command's binding i (the dispatch op's operands, then its
// results), `imports` is reserved (nullptr), and one call computes workgroups
// [wg_begin, wg_end) of the command's `workgroups`.
using DispatchFn = void (*)(void* const* bindings, const void* imports, int64_t wg_begin,
                            int64_t wg_end);

// CodeModule.abi_version of code that follows DispatchFn. Bump it with any
// change to the convention; the runtime refuses other versions.
inline constexpr uint32_t kDispatchAbiVersion = 1;

// ---------------------------------------------------------------------------
// Ukernel commands (CommandKind::ukernel)
//
// A ukernel command carries int64 `iparams`, float `fparams` and `bindings`,
// each in the order of the ukernel's role enums below. A binding role may be
// optional: it is bound iff a flag iparam (0/1) is 1, and an unbound role takes
// no slot (the bound roles keep role order). The emitter fills a
// UkernelCommand by role, the executor reads a UkernelView by role, and the
// loader checks every command against SignatureOf(ukernel): nobody indexes by
// literal position.

// matmul: C = A · Wᵀ (+ bias) (+ ACC), all f32.
//   a    [m][k], row stride lda
//   w    [n][k] packed for the microkernel (WeightLayout::packed_panels)
//   c    [m][n], row stride ldc
//   bias [n]; bound iff has_bias
//   acc  [m][n], row stride ldacc; bound iff accumulate; exactly c (in place)
//        or a range disjoint from it
enum class MatmulParam : int { kM, kN, kK, kLda, kLdc, kAccumulate, kHasBias, kLdAcc, kCount };
enum class MatmulFParam : int { kCount };
enum class MatmulBinding : int { kA, kW, kC, kBias, kAcc, kCount };

// paged_attention: attention of q over the paged KV cache after writing k, v
// into it at slot_mapping (runtime/kernels/attention.h has the layouts).
enum class PagedAttentionParam : int {
  kNumTokens,
  kMaxNumReqs,
  kMaxBlocksPerReq,
  kNumHeads,
  kNumKvHeads,
  kHeadDim,
  kBlockSize,
  kQStride,
  kKStride,
  kVStride,
  kOutStride,
  kCount
};
enum class PagedAttentionFParam : int { kScale, kCount };
enum class PagedAttentionBinding : int {
  kQ,
  kK,
  kV,
  kOut,
  kKCache,  // BindingKind::kv_key of the layer
  kVCache,  // BindingKind::kv_value of the layer
  kSlotMapping,
  kBlockTables,
  kSeqLens,
  kQueryStartLoc,
  kCount
};

// attention: bidirectional attention within consecutive sequences of seq_len
// rows (the vision encoder; runtime/kernels/attention.h).
//   q, k, v, out  [num_tokens][num_heads * head_dim], row strides q_stride, ...
enum class AttentionParam : int {
  kNumTokens,
  kSeqLen,
  kNumHeads,
  kHeadDim,
  kQStride,
  kKStride,
  kVStride,
  kOutStride,
  kCount
};
enum class AttentionFParam : int { kScale, kCount };
enum class AttentionBinding : int { kQ, kK, kV, kOut, kCount };

// lora_shrink: buf[i][r] = x[i] · a[slot(i)][r] for r < rank; rows whose slot is -1
// get 0 (runtime/kernels/lora.h).
//   x      [m][k], row stride ldx
//   a      BindingKind::lora_a of the target: [num_slots][rank][k]
//   slots  [m] int32 adapter slot per row (-1: none); with mixed = 0 only slots[0] is
//          read and holds for every row (the single-adapter executable)
//   buf    [m][rank] f32, row stride ldbuf
enum class LoraShrinkParam : int { kM, kK, kRank, kNumSlots, kMixed, kLdx, kLdBuf, kCount };
enum class LoraShrinkFParam : int { kCount };
enum class LoraShrinkBinding : int { kX, kA, kSlots, kBuf, kCount };

// lora_expand: y[i][:n] += buf[i] · bt[slot(i)] in place; rows whose slot is -1 are
// left as they are.
//   buf    [m][rank], row stride ldbuf (lora_shrink's output)
//   bt     BindingKind::lora_b of the target: [num_slots][rank][n]
//   slots  as for lora_shrink
//   y      [m][n], row stride ldy: read and written
enum class LoraExpandParam : int { kM, kN, kRank, kNumSlots, kMixed, kLdBuf, kLdy, kCount };
enum class LoraExpandFParam : int { kCount };
enum class LoraExpandBinding : int { kBuf, kBt, kSlots, kY, kCount };

template <typename Role>
constexpr int Index(Role r) {
  return static_cast<int>(r);
}

// What the loader requires of a parameter's value.
enum class ParamRule : uint8_t { kAny, kPositive, kFlag /* 0 or 1 */ };

struct ParamRole {
  int index;
  const char* name;
  ParamRule rule;
};

inline constexpr int kAlwaysBound = -1;

struct BindingRole {
  int index;
  const char* name;
  int bound_if;  // index of the flag iparam that says whether it is bound, or kAlwaysBound
};

// A constexpr view of a role table.
template <typename T>
struct Roles {
  const T* data = nullptr;
  int size = 0;
  constexpr Roles() = default;
  template <size_t N>
  constexpr Roles(const T (&a)[N]) : data(a), size(static_cast<int>(N)) {}
  constexpr const T& operator[](int i) const { return data[i]; }
  constexpr const T* begin() const { return data; }
  constexpr const T* end() const { return data + size; }
};

// Every role of one ukernel, each table indexed by its role enum.
struct UkernelSignature {
  Ukernel ukernel;
  Roles<ParamRole> iparams;
  Roles<ParamRole> fparams;
  Roles<BindingRole> bindings;
};

template <typename Role>
constexpr ParamRole Param(Role r, const char* name, ParamRule rule = ParamRule::kAny) {
  return {Index(r), name, rule};
}

// The role tables, in role order (checked below against the enums).
inline constexpr ParamRole kMatmulIParams[] = {
    Param(MatmulParam::kM, "m", ParamRule::kPositive),
    Param(MatmulParam::kN, "n", ParamRule::kPositive),
    Param(MatmulParam::kK, "k", ParamRule::kPositive),
    Param(MatmulParam::kLda, "lda"),
    Param(MatmulParam::kLdc, "ldc"),
    Param(MatmulParam::kAccumulate, "accumulate", ParamRule::kFlag),
    Param(MatmulParam::kHasBias, "has_bias", ParamRule::kFlag),
    Param(MatmulParam::kLdAcc, "ldacc"),
};
inline constexpr BindingRole kMatmulBindings[] = {
    {Index(MatmulBinding::kA), "a", kAlwaysBound},
    {Index(MatmulBinding::kW), "w", kAlwaysBound},
    {Index(MatmulBinding::kC), "c", kAlwaysBound},
    {Index(MatmulBinding::kBias), "bias", Index(MatmulParam::kHasBias)},
    {Index(MatmulBinding::kAcc), "acc", Index(MatmulParam::kAccumulate)},
};

inline constexpr ParamRole kPagedAttentionIParams[] = {
    Param(PagedAttentionParam::kNumTokens, "num_tokens"),
    Param(PagedAttentionParam::kMaxNumReqs, "max_num_reqs"),
    Param(PagedAttentionParam::kMaxBlocksPerReq, "max_blocks_per_req"),
    Param(PagedAttentionParam::kNumHeads, "num_heads"),
    Param(PagedAttentionParam::kNumKvHeads, "num_kv_heads"),
    Param(PagedAttentionParam::kHeadDim, "head_dim"),
    Param(PagedAttentionParam::kBlockSize, "block_size"),
    Param(PagedAttentionParam::kQStride, "q_stride"),
    Param(PagedAttentionParam::kKStride, "k_stride"),
    Param(PagedAttentionParam::kVStride, "v_stride"),
    Param(PagedAttentionParam::kOutStride, "out_stride"),
};
inline constexpr ParamRole kPagedAttentionFParams[] = {
    Param(PagedAttentionFParam::kScale, "scale"),
};
inline constexpr BindingRole kPagedAttentionBindings[] = {
    {Index(PagedAttentionBinding::kQ), "q", kAlwaysBound},
    {Index(PagedAttentionBinding::kK), "k", kAlwaysBound},
    {Index(PagedAttentionBinding::kV), "v", kAlwaysBound},
    {Index(PagedAttentionBinding::kOut), "out", kAlwaysBound},
    {Index(PagedAttentionBinding::kKCache), "k_cache", kAlwaysBound},
    {Index(PagedAttentionBinding::kVCache), "v_cache", kAlwaysBound},
    {Index(PagedAttentionBinding::kSlotMapping), "slot_mapping", kAlwaysBound},
    {Index(PagedAttentionBinding::kBlockTables), "block_tables", kAlwaysBound},
    {Index(PagedAttentionBinding::kSeqLens), "seq_lens", kAlwaysBound},
    {Index(PagedAttentionBinding::kQueryStartLoc), "query_start_loc", kAlwaysBound},
};

inline constexpr ParamRole kAttentionIParams[] = {
    Param(AttentionParam::kNumTokens, "num_tokens", ParamRule::kPositive),
    Param(AttentionParam::kSeqLen, "seq_len", ParamRule::kPositive),
    Param(AttentionParam::kNumHeads, "num_heads", ParamRule::kPositive),
    Param(AttentionParam::kHeadDim, "head_dim", ParamRule::kPositive),
    Param(AttentionParam::kQStride, "q_stride"),
    Param(AttentionParam::kKStride, "k_stride"),
    Param(AttentionParam::kVStride, "v_stride"),
    Param(AttentionParam::kOutStride, "out_stride"),
};
inline constexpr ParamRole kAttentionFParams[] = {
    Param(AttentionFParam::kScale, "scale"),
};
inline constexpr BindingRole kAttentionBindings[] = {
    {Index(AttentionBinding::kQ), "q", kAlwaysBound},
    {Index(AttentionBinding::kK), "k", kAlwaysBound},
    {Index(AttentionBinding::kV), "v", kAlwaysBound},
    {Index(AttentionBinding::kOut), "out", kAlwaysBound},
};

inline constexpr ParamRole kLoraShrinkIParams[] = {
    Param(LoraShrinkParam::kM, "m", ParamRule::kPositive),
    Param(LoraShrinkParam::kK, "k", ParamRule::kPositive),
    Param(LoraShrinkParam::kRank, "rank", ParamRule::kPositive),
    Param(LoraShrinkParam::kNumSlots, "num_slots", ParamRule::kPositive),
    Param(LoraShrinkParam::kMixed, "mixed", ParamRule::kFlag),
    Param(LoraShrinkParam::kLdx, "ldx"),
    Param(LoraShrinkParam::kLdBuf, "ldbuf"),
};
inline constexpr BindingRole kLoraShrinkBindings[] = {
    {Index(LoraShrinkBinding::kX), "x", kAlwaysBound},
    {Index(LoraShrinkBinding::kA), "a", kAlwaysBound},
    {Index(LoraShrinkBinding::kSlots), "slots", kAlwaysBound},
    {Index(LoraShrinkBinding::kBuf), "buf", kAlwaysBound},
};

inline constexpr ParamRole kLoraExpandIParams[] = {
    Param(LoraExpandParam::kM, "m", ParamRule::kPositive),
    Param(LoraExpandParam::kN, "n", ParamRule::kPositive),
    Param(LoraExpandParam::kRank, "rank", ParamRule::kPositive),
    Param(LoraExpandParam::kNumSlots, "num_slots", ParamRule::kPositive),
    Param(LoraExpandParam::kMixed, "mixed", ParamRule::kFlag),
    Param(LoraExpandParam::kLdBuf, "ldbuf"),
    Param(LoraExpandParam::kLdy, "ldy"),
};
inline constexpr BindingRole kLoraExpandBindings[] = {
    {Index(LoraExpandBinding::kBuf), "buf", kAlwaysBound},
    {Index(LoraExpandBinding::kBt), "bt", kAlwaysBound},
    {Index(LoraExpandBinding::kSlots), "slots", kAlwaysBound},
    {Index(LoraExpandBinding::kY), "y", kAlwaysBound},
};

// The role enums and tables of each ukernel.
template <Ukernel U>
struct UkernelTraits;

template <>
struct UkernelTraits<Ukernel::matmul> {
  using IParam = MatmulParam;
  using FParam = MatmulFParam;
  using Binding = MatmulBinding;
  static constexpr UkernelSignature kSignature{
      Ukernel::matmul, kMatmulIParams, {}, kMatmulBindings};
};

template <>
struct UkernelTraits<Ukernel::paged_attention> {
  using IParam = PagedAttentionParam;
  using FParam = PagedAttentionFParam;
  using Binding = PagedAttentionBinding;
  static constexpr UkernelSignature kSignature{Ukernel::paged_attention, kPagedAttentionIParams,
                                               kPagedAttentionFParams, kPagedAttentionBindings};
};

template <>
struct UkernelTraits<Ukernel::attention> {
  using IParam = AttentionParam;
  using FParam = AttentionFParam;
  using Binding = AttentionBinding;
  static constexpr UkernelSignature kSignature{Ukernel::attention, kAttentionIParams,
                                               kAttentionFParams, kAttentionBindings};
};

template <>
struct UkernelTraits<Ukernel::lora_shrink> {
  using IParam = LoraShrinkParam;
  using FParam = LoraShrinkFParam;
  using Binding = LoraShrinkBinding;
  static constexpr UkernelSignature kSignature{
      Ukernel::lora_shrink, kLoraShrinkIParams, {}, kLoraShrinkBindings};
};

template <>
struct UkernelTraits<Ukernel::lora_expand> {
  using IParam = LoraExpandParam;
  using FParam = LoraExpandFParam;
  using Binding = LoraExpandBinding;
  static constexpr UkernelSignature kSignature{
      Ukernel::lora_expand, kLoraExpandIParams, {}, kLoraExpandBindings};
};

// The signature of `u`, or nullptr for Ukernel::none and unknown values.
inline const UkernelSignature* SignatureOf(Ukernel u) {
  switch (u) {
    case Ukernel::matmul:
      return &UkernelTraits<Ukernel::matmul>::kSignature;
    case Ukernel::paged_attention:
      return &UkernelTraits<Ukernel::paged_attention>::kSignature;
    case Ukernel::attention:
      return &UkernelTraits<Ukernel::attention>::kSignature;
    case Ukernel::lora_shrink:
      return &UkernelTraits<Ukernel::lora_shrink>::kSignature;
    case Ukernel::lora_expand:
      return &UkernelTraits<Ukernel::lora_expand>::kSignature;
    default:
      return nullptr;
  }
}

// Whether binding role `role` is bound; `iparam(i)` reads the command's iparam i.
template <typename IParamFn>
constexpr bool IsBound(const UkernelSignature& s, int role, IParamFn iparam) {
  const int flag = s.bindings[role].bound_if;
  return flag == kAlwaysBound || iparam(flag) != 0;
}

// The slot of binding role `role` among the command's bindings (the number of
// bound roles before it); BindingSlot(s, s.bindings.size, iparam) is the number
// of bindings.
template <typename IParamFn>
constexpr int BindingSlot(const UkernelSignature& s, int role, IParamFn iparam) {
  int slot = 0;
  for (int r = 0; r < role; ++r) slot += IsBound(s, r, iparam) ? 1 : 0;
  return slot;
}

// The tables agree with the enums: one entry per role, in enum order, every
// optional binding hangs on a flag iparam, and only iparams have rules.
template <typename Table, typename Role>
constexpr bool InRoleOrder(Roles<Table> roles, Role count) {
  if (roles.size != Index(count)) return false;
  for (int i = 0; i < roles.size; ++i)
    if (roles[i].index != i) return false;
  return true;
}
template <Ukernel U>
constexpr bool SignatureMatchesEnums() {
  using T = UkernelTraits<U>;
  const UkernelSignature& s = T::kSignature;
  if (!InRoleOrder(s.iparams, T::IParam::kCount) || !InRoleOrder(s.fparams, T::FParam::kCount) ||
      !InRoleOrder(s.bindings, T::Binding::kCount))
    return false;
  for (const ParamRole& p : s.fparams)
    if (p.rule != ParamRule::kAny) return false;  // the loader checks rules on iparams only
  for (const BindingRole& b : s.bindings)
    if (b.bound_if != kAlwaysBound && (b.bound_if < 0 || b.bound_if >= s.iparams.size ||
                                       s.iparams[b.bound_if].rule != ParamRule::kFlag))
      return false;
  return true;
}
static_assert(SignatureMatchesEnums<Ukernel::matmul>());
static_assert(SignatureMatchesEnums<Ukernel::paged_attention>());
static_assert(SignatureMatchesEnums<Ukernel::attention>());
static_assert(SignatureMatchesEnums<Ukernel::lora_shrink>());
static_assert(SignatureMatchesEnums<Ukernel::lora_expand>());

// Writes one ukernel command by role (the emitter). `B` is the binding type
// (xpk::Binding in the compiler). The flag iparam of an optional binding is
// derived from whether that role was bound.
template <Ukernel U, typename B>
class UkernelCommand {
 public:
  using IParam = typename UkernelTraits<U>::IParam;
  using FParam = typename UkernelTraits<U>::FParam;
  using Binding = typename UkernelTraits<U>::Binding;

  void Set(IParam r, int64_t v) { iparams_[Index(r)] = v; }
  void Set(FParam r, float v) { fparams_[Index(r)] = v; }
  void Bind(Binding r, const B& b) { bindings_[Index(r)] = b; }

  // The command's arrays in role order. Returns "" or what is wrong, naming
  // the role: a parameter or a required binding left unset, or a flag set
  // against its binding.
  std::string Finish(std::vector<int64_t>* iparams, std::vector<float>* fparams,
                     std::vector<B>* bindings) const {
    const UkernelSignature& s = UkernelTraits<U>::kSignature;
    std::array<std::optional<int64_t>, kNumIParams> ip = iparams_;
    for (const BindingRole& b : s.bindings) {
      if (b.bound_if == kAlwaysBound) {
        if (!bindings_[b.index]) return Name() + " binding " + b.name + " is not bound";
        continue;
      }
      const int64_t bound = bindings_[b.index] ? 1 : 0;
      if (ip[b.bound_if] && *ip[b.bound_if] != bound)
        return Name() + " " + s.iparams[b.bound_if].name + " is " +
               std::to_string(*ip[b.bound_if]) + " but binding " + b.name + " is " +
               (bound ? "bound" : "not bound");
      ip[b.bound_if] = bound;
    }
    iparams->clear();
    for (const ParamRole& p : s.iparams) {
      if (!ip[p.index]) return Name() + " iparam " + p.name + " is not set";
      iparams->push_back(*ip[p.index]);
    }
    fparams->clear();
    for (const ParamRole& p : s.fparams) {
      if (!fparams_[p.index]) return Name() + " fparam " + p.name + " is not set";
      fparams->push_back(*fparams_[p.index]);
    }
    bindings->clear();
    for (const auto& b : bindings_)
      if (b) bindings->push_back(*b);
    return "";
  }

 private:
  static constexpr size_t kNumIParams = Index(IParam::kCount);
  static std::string Name() { return EnumNameUkernel(U); }

  std::array<std::optional<int64_t>, kNumIParams> iparams_;
  std::array<std::optional<float>, Index(FParam::kCount)> fparams_;
  std::array<std::optional<B>, Index(Binding::kCount)> bindings_;
};

// Reads one ukernel command by role (the executor). The command must have
// passed the loader's validation against SignatureOf(U).
template <Ukernel U>
class UkernelView {
 public:
  using IParam = typename UkernelTraits<U>::IParam;
  using FParam = typename UkernelTraits<U>::FParam;
  using Binding = typename UkernelTraits<U>::Binding;

  explicit UkernelView(const Command& c) : c_(c) {}

  int64_t operator[](IParam r) const { return c_.iparams()->Get(Index(r)); }
  float operator[](FParam r) const { return c_.fparams()->Get(Index(r)); }

  // The index of role `r` in the command's bindings, or -1 when the optional
  // role is not bound.
  int Slot(Binding r) const {
    const UkernelSignature& s = UkernelTraits<U>::kSignature;
    auto iparam = [this](int i) { return c_.iparams()->Get(i); };
    return IsBound(s, Index(r), iparam) ? BindingSlot(s, Index(r), iparam) : -1;
  }

 private:
  const Command& c_;
};

}  // namespace xpk::abi
