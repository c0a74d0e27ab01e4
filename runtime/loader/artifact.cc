#include "runtime/loader/artifact.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <set>
#include <tuple>

#include "runtime/kernels/matmul.h"
#include "runtime/loader/segment_checksum.h"
#include "runtime/loader/tokenizer_spec_reader.h"
#include "schemas/abi.h"
#include "schemas/artifact_generated.h"

namespace xrt {
namespace {

// Overflow-safe: [offset, offset + size) lies inside [0, limit).
bool RangeWithin(uint64_t offset, uint64_t size, uint64_t limit) {
  return offset <= limit && size <= limit - offset;
}

bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// "[a, b)" or, when a + b overflows, "[a, a+size)".
std::string RangeText(uint64_t offset, uint64_t size) {
  if (size > UINT64_MAX - offset) return fmt::format("[{}, {}+{})", offset, offset, size);
  return fmt::format("[{}, {})", offset, offset + size);
}

std::string_view View(const flatbuffers::String* s) {
  return s ? s->string_view() : std::string_view();
}
std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

template <typename T>
uint32_t Count(const flatbuffers::Vector<T>* v) {
  return v ? v->size() : 0;
}

// The Verifier checks a vector's length field but not that 8-byte elements are 8-byte
// aligned; a corrupt file could misalign them (the base of the buffer is page-aligned).
template <typename T>
bool ElementsAligned(const flatbuffers::Vector<T>* v) {
  return !v || reinterpret_cast<uintptr_t>(v->Data()) % alignof(T) == 0;
}

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}

// Byte size of a dense tensor: product of dims (each >= 1) times the element size.
// Returns an error text (empty on success).
std::string DenseBytes(const flatbuffers::Vector<int64_t>* shape, xpk::DType dtype, uint64_t* out) {
  uint64_t bytes = DTypeSize(dtype);
  if (bytes == 0) {
    const char* name = xpk::EnumNameDType(dtype);
    if (name && *name) return fmt::format("dtype {} is a packed format: only packed_panels", name);
    return fmt::format("unknown dtype {}", static_cast<int>(dtype));
  }
  if (shape) {
    for (uint32_t i = 0; i < shape->size(); ++i) {
      const int64_t d = shape->Get(i);
      if (d <= 0) return fmt::format("shape dim {} is {} (must be > 0)", i, d);
      if (MulOverflows(bytes, static_cast<uint64_t>(d), &bytes)) {
        return "byte size of the shape overflows 64 bits";
      }
    }
  }
  *out = bytes;
  return {};
}

std::string ShapeText(const flatbuffers::Vector<int64_t>* shape) {
  std::string s = "[";
  for (uint32_t i = 0; shape && i < shape->size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape->Get(i));
  }
  return s + "]";
}

// ---- layer 3: the manifest's contents -------------------------------------------------

Status ValidateConfig(const xpk::ModelConfig* c) {
  if (!c) return DataLossError("manifest has no model config");
  if (!c->architecture() || c->architecture()->size() == 0) {
    return DataLossError("config: architecture missing");
  }
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab_size", c->vocab_size()},
      {"hidden_size", c->hidden_size()},
      {"intermediate_size", c->intermediate_size()},
      {"num_hidden_layers", c->num_hidden_layers()},
      {"num_attention_heads", c->num_attention_heads()},
      {"num_key_value_heads", c->num_key_value_heads()},
      {"head_dim", c->head_dim()},
      {"max_position_embeddings", c->max_position_embeddings()},
  };
  for (const auto& [field, value] : positive) {
    if (value <= 0) return DataLossError("config: {} is {} (must be > 0)", field, value);
  }
  if (c->num_attention_heads() % c->num_key_value_heads() != 0) {
    return DataLossError(
        "config: num_attention_heads {} is not a multiple of num_key_value_heads {}",
        c->num_attention_heads(), c->num_key_value_heads());
  }
  if (!(c->rms_norm_eps() > 0)) {
    return DataLossError("config: rms_norm_eps is {} (must be > 0)", c->rms_norm_eps());
  }
  if (!(c->rope_theta() > 0)) {
    return DataLossError("config: rope_theta is {} (must be > 0)", c->rope_theta());
  }
  if (c->eos_token_ids()) {
    for (uint32_t i = 0; i < c->eos_token_ids()->size(); ++i) {
      const int32_t id = c->eos_token_ids()->Get(i);
      if (id < 0 || id >= c->vocab_size()) {
        return DataLossError("config: eos_token_ids[{}] = {} is outside [0, {})", i, id,
                             c->vocab_size());
      }
    }
  }
  return Status::Ok();
}

Status ValidateLimits(const xpk::ServingLimits* l) {
  if (!l) return DataLossError("manifest has no serving limits");
  const std::pair<const char*, int64_t> positive[] = {
      {"max_num_seqs", l->max_num_seqs()},
      {"max_num_batched_tokens", l->max_num_batched_tokens()},
      {"max_model_len", l->max_model_len()},
      {"block_size", l->block_size()},
  };
  for (const auto& [field, value] : positive) {
    if (value <= 0) return DataLossError("limits: {} is {} (must be > 0)", field, value);
  }
  const std::pair<const char*, int64_t> non_negative[] = {
      {"max_images", l->max_images()},
      {"max_loras", l->max_loras()},
      {"max_lora_rank", l->max_lora_rank()},
  };
  for (const auto& [field, value] : non_negative) {
    if (value < 0) return DataLossError("limits: {} is {} (must be >= 0)", field, value);
  }
  // Both positive, so no overflow.
  const int64_t blocks =
      l->max_model_len() / l->block_size() + (l->max_model_len() % l->block_size() != 0 ? 1 : 0);
  if (l->max_blocks_per_req() != blocks) {
    return DataLossError(
        "limits: max_blocks_per_req is {}, expected ceil(max_model_len {} / block_size {}) = {}",
        l->max_blocks_per_req(), l->max_model_len(), l->block_size(), blocks);
  }
  return Status::Ok();
}

Status ValidateSegments(const xpk::Manifest& m, const FileHeader& h) {
  const auto* segs = m.segments();
  const uint32_t n = Count(segs);
  const uint64_t manifest_end = h.manifest_offset + h.manifest_size;  // checked by the header
  for (uint32_t i = 0; i < n; ++i) {
    const xpk::Segment* s = segs->Get(i);
    const char* kind = xpk::EnumNameSegmentKind(s->kind());
    if (*kind == '\0') {
      return DataLossError("segment {}: unknown kind {}", i, static_cast<int>(s->kind()));
    }
    if (!IsPowerOfTwo(s->alignment()) || s->alignment() < kXpkSegmentAlignment) {
      return DataLossError("segment {} ({}): alignment {} is not a power of two >= {}", i, kind,
                           s->alignment(), kXpkSegmentAlignment);
    }
    if (s->kind() == xpk::SegmentKind::weights && s->alignment() < kXpkPageAlignment) {
      return DataLossError("segment {} (weights): alignment {} is below the page size {}", i,
                           s->alignment(), kXpkPageAlignment);
    }
    if (s->offset() % s->alignment() != 0) {
      return DataLossError("segment {} ({}): offset {} is not {}-byte aligned", i, kind,
                           s->offset(), s->alignment());
    }
    if (!RangeWithin(s->offset(), s->size(), h.file_size)) {
      return DataLossError("segment {} ({}): range {} exceeds file size {}", i, kind,
                           RangeText(s->offset(), s->size()), h.file_size);
    }
    if (s->size() > 0 && s->offset() < manifest_end) {
      return DataLossError("segment {} ({}): range {} overlaps the header and manifest [0, {})", i,
                           kind, RangeText(s->offset(), s->size()), manifest_end);
    }
    XRT_ASSIGN_OR_RETURN(bool has_checksum, SegmentHasChecksum(*s, i));
    if (!has_checksum && h.format_minor >= kXpkFirstMinorWithChecksums) {
      return DataLossError("segment {} ({}): no checksum, but format {}.{} requires one", i, kind,
                           h.format_major, h.format_minor);
    }
  }
  // No two segments share bytes.
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < n; ++i) {
    if (segs->Get(i)->size() > 0) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return std::make_pair(segs->Get(a)->offset(), a) < std::make_pair(segs->Get(b)->offset(), b);
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const xpk::Segment* prev = segs->Get(order[k - 1]);
    const xpk::Segment* cur = segs->Get(order[k]);
    if (prev->offset() + prev->size() > cur->offset()) {  // in the file: no overflow
      return DataLossError("segment {} range {} overlaps segment {} range {}", order[k],
                           RangeText(cur->offset(), cur->size()), order[k - 1],
                           RangeText(prev->offset(), prev->size()));
    }
  }
  return Status::Ok();
}

Status ValidateWeight(const xpk::Manifest& m, uint32_t i) {
  const xpk::Weight* w = m.weights()->Get(i);
  const std::string label = fmt::format("weight {} '{}'", i, View(w->name()));
  if (w->name()->size() == 0) return DataLossError("weight {}: empty name", i);
  if (w->segment() >= Count(m.segments())) {
    return DataLossError("{}: segment index {} out of range ({} segments)", label, w->segment(),
                         Count(m.segments()));
  }
  const xpk::Segment* seg = m.segments()->Get(w->segment());
  if (seg->kind() != xpk::SegmentKind::weights) {
    return DataLossError("{}: segment {} is a {} segment, not weights", label, w->segment(),
                         xpk::EnumNameSegmentKind(seg->kind()));
  }
  if (w->offset() % kXpkSegmentAlignment != 0) {
    return DataLossError("{}: offset {} is not {}-byte aligned", label, w->offset(),
                         kXpkSegmentAlignment);
  }
  if (!RangeWithin(w->offset(), w->size(), seg->size())) {
    return DataLossError("{}: range {} exceeds its segment {} of {} bytes", label,
                         RangeText(w->offset(), w->size()), w->segment(), seg->size());
  }
  if (!w->shape() || w->shape()->size() == 0) {
    return DataLossError("{}: shape missing", label);
  }
  if (!ElementsAligned(w->shape())) return DataLossError("{}: shape vector is misaligned", label);
  // Layouts of earlier formats, renumbered when they changed.
  struct Retired {
    xpk::DType dtype;
    const char* what;  // "<format> weight in the layout of artifact formats <versions> (...)"
  };
  static constexpr Retired kRetired[] = {
      {xpk::DType::q5_k_bit_planes,
       "q5_k weight in the layout of artifact formats 1.5-1.8 "
       "(high bits as bit planes)"},
      {xpk::DType::q6_k_bit_planes,
       "q6_k weight in the layout of artifact formats 1.5-1.7 "
       "(high bits as bit planes)"},
      {xpk::DType::q4_0_k_rows,
       "q4_0 weight in the layout of artifact formats 1.4-1.9 "
       "(quants by k-row, not quads)"},
      {xpk::DType::q4_1_k_rows,
       "q4_1 weight in the layout of artifact formats 1.4-1.9 "
       "(quants by k-row, not quads)"},
      {xpk::DType::q4_k_k_rows,
       "q4_k weight in the layout of artifact formats 1.5-1.10 "
       "(quants by k-row, not quads)"},
      {xpk::DType::q5_k_k_rows,
       "q5_k weight in the layout of artifact formats 1.9-1.10 "
       "(quants by k-row, not quads)"},
      {xpk::DType::q6_k_k_rows,
       "q6_k weight in the layout of artifact formats 1.8-1.10 "
       "(quants by k-row, not quads)"},
  };
  for (const Retired& r : kRetired) {
    if (w->dtype() == r.dtype) {
      return DataLossError(
          "{}: {}, which this runtime no longer reads: recompile the artifact with this xcc", label,
          r.what);
    }
  }
  uint64_t expected = 0;
  switch (w->layout()) {
    case xpk::WeightLayout::row_major: {
      std::string err = DenseBytes(w->shape(), w->dtype(), &expected);
      if (!err.empty()) return DataLossError("{}: {}", label, err);
      break;
    }
    case xpk::WeightLayout::packed_panels: {
      if (w->shape()->size() != 2) {
        return DataLossError("{}: packed_panels weight has shape {}, expected [N, K]", label,
                             ShapeText(w->shape()));
      }
      if (w->pack_nr() <= 0) {
        return DataLossError("{}: packed_panels weight has pack_nr {} (must be > 0)", label,
                             w->pack_nr());
      }
      const int64_t n = w->shape()->Get(0);
      const int64_t k = w->shape()->Get(1);
      if (n <= 0 || k <= 0) {
        return DataLossError("{}: shape {} has a dim <= 0", label, ShapeText(w->shape()));
      }
      WeightFormat format;
      if (!WeightFormatOf(w->dtype(), &format)) {
        return DataLossError("{}: dtype {} cannot be packed", label, DTypeName(w->dtype()));
      }
      const int block = WeightFormatBlockSize(format);
      if (k % block != 0) {
        return DataLossError("{}: {} weight has K = {}, not a multiple of its block size {}", label,
                             WeightFormatName(format), k, block);
      }
      if (format != WeightFormat::kF32 && w->pack_nr() != kPackNR) {
        return DataLossError("{}: {} weight has pack_nr {} (must be {})", label,
                             WeightFormatName(format), w->pack_nr(), kPackNR);
      }
      // Bounds that keep the byte size far from overflowing (a 2^62-byte weight
      // cannot be in a file anyway; the size check below rejects it).
      constexpr int64_t kMaxDim = int64_t{1} << 31;
      if (n > kMaxDim || k > kMaxDim) {
        return DataLossError("{}: shape {} is too large", label, ShapeText(w->shape()));
      }
      const uint64_t nr = static_cast<uint64_t>(w->pack_nr());
      const uint64_t panels =
          static_cast<uint64_t>(n) / nr + (static_cast<uint64_t>(n) % nr ? 1 : 0);
      if (format == WeightFormat::kF32) {
        expected = panels * nr * static_cast<uint64_t>(k) * 4;
      } else {
        expected = static_cast<uint64_t>(PackedWeightBytes(format, n, k));
      }
      break;
    }
    default:
      return DataLossError("{}: unknown layout {}", label, static_cast<int>(w->layout()));
  }
  if (w->size() != expected) {
    return DataLossError("{}: size {} does not match {} {} {} ({} bytes)", label, w->size(),
                         xpk::EnumNameDType(w->dtype()), ShapeText(w->shape()),
                         xpk::EnumNameWeightLayout(w->layout()), expected);
  }
  return Status::Ok();
}

Status ValidateCodeModule(const xpk::Manifest& m, uint32_t i) {
  const xpk::CodeModule* c = m.code()->Get(i);
  if (c->segment() >= Count(m.segments())) {
    return DataLossError("code module {}: segment index {} out of range ({} segments)", i,
                         c->segment(), Count(m.segments()));
  }
  const xpk::Segment* seg = m.segments()->Get(c->segment());
  if (seg->kind() != xpk::SegmentKind::code) {
    return DataLossError("code module {}: segment {} is a {} segment, not code", i, c->segment(),
                         xpk::EnumNameSegmentKind(seg->kind()));
  }
  if (seg->size() == 0)
    return DataLossError("code module {}: segment {} is empty", i, c->segment());
  if (Count(c->functions()) == 0) return DataLossError("code module {}: no functions", i);
  for (uint32_t f = 0; f < c->functions()->size(); ++f) {
    if (c->functions()->Get(f)->size() == 0) {
      return DataLossError("code module {}: function {} has an empty name", i, f);
    }
  }
  return Status::Ok();
}

Status ValidateTensorSpec(const xpk::TensorSpec* t, const std::string& label, uint64_t io_size) {
  if (!ElementsAligned(t->shape())) return DataLossError("{}: shape vector is misaligned", label);
  uint64_t expected = 0;
  std::string err = DenseBytes(t->shape(), t->dtype(), &expected);
  if (!err.empty()) return DataLossError("{}: {}", label, err);
  if (t->size() != expected) {
    return DataLossError("{}: size {} does not match {} {} ({} bytes)", label, t->size(),
                         xpk::EnumNameDType(t->dtype()), ShapeText(t->shape()), expected);
  }
  if (!RangeWithin(t->offset(), t->size(), io_size)) {
    return DataLossError("{}: range {} exceeds io size {}", label,
                         RangeText(t->offset(), t->size()), io_size);
  }
  return Status::Ok();
}

Status ValidateBinding(const xpk::Manifest& m, const xpk::Executable& e, const xpk::Binding* b,
                       const std::string& label) {
  switch (b->kind()) {
    case xpk::BindingKind::arena:
      if (!RangeWithin(b->offset(), b->size(), e.arena_size())) {
        return DataLossError("{}: arena range {} exceeds arena size {}", label,
                             RangeText(b->offset(), b->size()), e.arena_size());
      }
      return Status::Ok();
    case xpk::BindingKind::io:
      if (!RangeWithin(b->offset(), b->size(), e.io_size())) {
        return DataLossError("{}: io range {} exceeds io size {}", label,
                             RangeText(b->offset(), b->size()), e.io_size());
      }
      return Status::Ok();
    case xpk::BindingKind::weight:
      if (b->index() >= Count(m.weights())) {
        return DataLossError("{}: weight index {} out of range ({} weights)", label, b->index(),
                             Count(m.weights()));
      }
      return Status::Ok();
    case xpk::BindingKind::kv_key:
    case xpk::BindingKind::kv_value:
      if (static_cast<int64_t>(b->index()) >= m.config()->num_hidden_layers()) {
        return DataLossError("{}: {} layer {} out of range ({} layers)", label,
                             xpk::EnumNameBindingKind(b->kind()), b->index(),
                             m.config()->num_hidden_layers());
      }
      return Status::Ok();
    case xpk::BindingKind::encoder_cache: {
      const xpk::VisionConfig* vision = m.config()->vision();
      if (!vision || vision->encoder_cache_rows() <= 0)
        return DataLossError("{}: binds the encoder cache, but the model has no vision encoder",
                             label);
      if (b->index() != 0)
        return DataLossError("{}: encoder cache index {} (there is one, index 0)", label,
                             b->index());
      return Status::Ok();
    }
    case xpk::BindingKind::lora_a:
    case xpk::BindingKind::lora_b: {
      const xpk::LoraConfig* lora = m.lora();
      if (!lora || e.lora_mode() == xpk::LoraMode::none)
        return DataLossError(
            "{}: binds LoRA adapter slots, but {}", label,
            lora ? "the executable has no LoRA mode" : "the artifact has no LoRA config");
      if (b->index() >= Count(lora->targets()))
        return DataLossError("{}: LoRA target {} out of range ({} targets)", label, b->index(),
                             Count(lora->targets()));
      return Status::Ok();
    }
  }
  return DataLossError("{}: unknown binding kind {}", label, static_cast<int>(b->kind()));
}

// "takes 8 iparams, got 7 (missing ldacc)" when `got` differs from the
// `names.size()` roles expected.
std::string CountMismatch(const char* what, const std::vector<std::string>& names, uint32_t got) {
  const uint32_t want = static_cast<uint32_t>(names.size());
  std::string s = fmt::format("takes {} {}, got {}", want, what, got);
  if (got < want) {
    std::string missing;
    for (uint32_t i = got; i < want; ++i) missing += (i > got ? ", " : "") + names[i];
    s += fmt::format(" (missing {})", missing);
  } else if (want > 0) {
    s += fmt::format(" (nothing follows {})", names.back());
  }
  return s;
}

template <typename Role>
std::vector<std::string> NamesOf(xpk::abi::Roles<Role> roles) {
  std::vector<std::string> names;
  for (const Role& r : roles) names.push_back(r.name);
  return names;
}

// A ukernel command against its signature in schemas/abi.h: the number of
// params, their rules, and the bindings the flag params call for.
Status ValidateUkernel(const xpk::Command& c, const std::string& label) {
  const xpk::abi::UkernelSignature* sig = xpk::abi::SignatureOf(c.ukernel());
  if (!sig) return DataLossError("{}: unknown ukernel {}", label, static_cast<int>(c.ukernel()));
  const char* name = xpk::EnumNameUkernel(c.ukernel());
  const uint32_t nb = Count(c.bindings()), ni = Count(c.iparams()), nf = Count(c.fparams());
  // Whatever the flags say, the bindings lie between the required ones and all.
  int required = 0;
  for (const xpk::abi::BindingRole& b : sig->bindings)
    required += b.bound_if == xpk::abi::kAlwaysBound ? 1 : 0;
  if (required == sig->bindings.size && nb != static_cast<uint32_t>(required)) {
    return DataLossError("{}: ukernel {} {}", label, name,
                         CountMismatch("bindings", NamesOf(sig->bindings), nb));
  }
  if (nb < static_cast<uint32_t>(required) || nb > static_cast<uint32_t>(sig->bindings.size)) {
    std::string roles;
    for (const xpk::abi::BindingRole& b : sig->bindings) {
      const bool optional = b.bound_if != xpk::abi::kAlwaysBound;
      roles += fmt::format("{}{}{}{}", roles.empty() ? "" : ", ", optional ? "[" : "", b.name,
                           optional ? "]" : "");
    }
    return DataLossError("{}: ukernel {} takes {} to {} bindings, got {} ({})", label, name,
                         required, sig->bindings.size, nb, roles);
  }
  if (ni != static_cast<uint32_t>(sig->iparams.size)) {
    return DataLossError("{}: ukernel {} {}", label, name,
                         CountMismatch("iparams", NamesOf(sig->iparams), ni));
  }
  if (nf != static_cast<uint32_t>(sig->fparams.size)) {
    return DataLossError("{}: ukernel {} {}", label, name,
                         CountMismatch("fparams", NamesOf(sig->fparams), nf));
  }
  for (const xpk::abi::ParamRole& p : sig->iparams) {
    const int64_t v = c.iparams()->Get(p.index);
    if (p.rule == xpk::abi::ParamRule::kPositive && v < 1) {
      return DataLossError("{}: {} {} is {} (must be >= 1)", label, name, p.name, v);
    }
    if (p.rule == xpk::abi::ParamRule::kFlag && v != 0 && v != 1) {
      return DataLossError("{}: {} {} is {} (must be 0 or 1)", label, name, p.name, v);
    }
  }
  auto iparam = [&](int i) { return c.iparams()->Get(i); };
  std::vector<std::string> bound;
  std::string flags;
  for (const xpk::abi::BindingRole& b : sig->bindings) {
    if (xpk::abi::IsBound(*sig, b.index, iparam)) bound.push_back(b.name);
    if (b.bound_if != xpk::abi::kAlwaysBound) {
      flags += fmt::format("{}{} {}", flags.empty() ? " with " : " and ",
                           sig->iparams[b.bound_if].name, iparam(b.bound_if));
    }
  }
  if (nb != bound.size()) {
    return DataLossError("{}: {}{} {}", label, name, flags, CountMismatch("bindings", bound, nb));
  }
  return Status::Ok();
}

Status ValidateCommand(const xpk::Manifest& m, const xpk::Executable& e, uint32_t ci,
                       const std::string& exe_label) {
  const xpk::Command* c = e.commands()->Get(ci);
  const std::string label = fmt::format("{} command {}", exe_label, ci);
  if (!ElementsAligned(c->bindings()) || !ElementsAligned(c->iparams()) ||
      !ElementsAligned(c->fparams())) {
    return DataLossError("{}: bindings or params vector is misaligned", label);
  }
  switch (c->kind()) {
    case xpk::CommandKind::dispatch: {
      if (Count(m.code()) == 0) {
        return DataLossError("{}: dispatch but the artifact has no code module", label);
      }
      const uint32_t nfun = Count(m.code()->Get(0)->functions());
      if (c->function() >= nfun) {
        return DataLossError("{}: function index {} out of range (code module 0 has {} functions)",
                             label, c->function(), nfun);
      }
      if (c->workgroups() < 1) {
        return DataLossError("{}: workgroups is {} (must be >= 1)", label, c->workgroups());
      }
      break;
    }
    case xpk::CommandKind::ukernel:
      XRT_RETURN_IF_ERROR(ValidateUkernel(*c, label));
      break;
    default:
      return DataLossError("{}: unknown command kind {}", label, static_cast<int>(c->kind()));
  }
  if (c->dynamic_rows()) {
    // Row-wise over the bucket: a dispatch or a matmul / LoRA ukernel in lm_step or
    // lm_logits. (Running fewer rows than compiled is always in bounds.)
    const bool rowCommand =
        c->kind() == xpk::CommandKind::dispatch || c->ukernel() == xpk::Ukernel::matmul ||
        c->ukernel() == xpk::Ukernel::lora_shrink || c->ukernel() == xpk::Ukernel::lora_expand;
    const bool rowKind =
        e.kind() == xpk::ExecutableKind::lm_step || e.kind() == xpk::ExecutableKind::lm_logits;
    if (!rowCommand || !rowKind)
      return DataLossError(
          "{}: dynamic_rows on a {} command of a {} executable", label,
          c->kind() == xpk::CommandKind::dispatch ? "dispatch" : xpk::EnumNameUkernel(c->ukernel()),
          xpk::EnumNameExecutableKind(e.kind()));
  }
  if (c->compute() != xpk::ComputeType::f32) {
    if (c->compute() != xpk::ComputeType::bf16 && c->compute() != xpk::ComputeType::int8)
      return DataLossError("{}: unknown compute type {}", label, static_cast<int>(c->compute()));
    const bool ukernel = c->kind() == xpk::CommandKind::ukernel;
    const bool matmul = ukernel && c->ukernel() == xpk::Ukernel::matmul;
    const bool bf16_attention = ukernel &&
                                (c->ukernel() == xpk::Ukernel::attention ||
                                 c->ukernel() == xpk::Ukernel::paged_attention) &&
                                c->compute() == xpk::ComputeType::bf16;
    if (!matmul && !bf16_attention)
      return DataLossError(
          "{}: compute {} on a {} command (only a matmul, or an attention in bf16, has one)", label,
          xpk::EnumNameComputeType(c->compute()),
          c->kind() == xpk::CommandKind::dispatch ? "dispatch"
                                                  : xpk::EnumNameUkernel(c->ukernel()));
  }
  for (uint32_t bi = 0; bi < Count(c->bindings()); ++bi) {
    XRT_RETURN_IF_ERROR(
        ValidateBinding(m, e, c->bindings()->Get(bi), fmt::format("{} binding {}", label, bi)));
  }
  return Status::Ok();
}

Status ValidateExecutable(const xpk::Manifest& m, uint32_t i) {
  const xpk::Executable* e = m.executables()->Get(i);
  if (e->name()->size() == 0) return DataLossError("executable {}: empty name", i);
  const std::string label = fmt::format("executable '{}'", e->name()->string_view());
  if (*xpk::EnumNameExecutableKind(e->kind()) == '\0') {
    return DataLossError("{}: unknown kind {}", label, static_cast<int>(e->kind()));
  }
  if (*xpk::EnumNameLoraMode(e->lora_mode()) == '\0') {
    return DataLossError("{}: unknown lora mode {}", label, static_cast<int>(e->lora_mode()));
  }
  if (e->lora_mode() != xpk::LoraMode::none &&
      (!m.lora() || e->kind() != xpk::ExecutableKind::lm_step))
    return DataLossError("{}: lora mode {} needs an lm_step executable and a LoRA config", label,
                         xpk::EnumNameLoraMode(e->lora_mode()));
  if (ExecutableBucket(*e) < 1) {
    return DataLossError("{}: {} bucket parameter is {} (must be >= 1)", label,
                         xpk::EnumNameExecutableKind(e->kind()), ExecutableBucket(*e));
  }
  std::set<std::string_view> names;
  for (int io = 0; io < 2; ++io) {
    const auto* specs = io == 0 ? e->inputs() : e->outputs();
    for (uint32_t t = 0; t < Count(specs); ++t) {
      const xpk::TensorSpec* s = specs->Get(t);
      const std::string tl = fmt::format("{} {} {} '{}'", label, io == 0 ? "input" : "output", t,
                                         s->name()->string_view());
      if (s->name()->size() == 0) return DataLossError("{}: empty name", tl);
      if (!names.insert(s->name()->string_view()).second) {
        return DataLossError("{}: duplicate tensor name", tl);
      }
      XRT_RETURN_IF_ERROR(ValidateTensorSpec(s, tl, e->io_size()));
    }
  }
  for (uint32_t ci = 0; ci < Count(e->commands()); ++ci) {
    XRT_RETURN_IF_ERROR(ValidateCommand(m, *e, ci, label));
  }
  return Status::Ok();
}

// Multi-LoRA (format 1.3): the slot geometry, the targets and the packed adapters, each
// R*(in+out) floats per target in the adapters segment.
Status ValidateLora(const xpk::Manifest& m) {
  const xpk::LoraConfig* lora = m.lora();
  if (!lora) return Status::Ok();
  if (lora->max_loras() < 1 || lora->max_lora_rank() < 1)
    return DataLossError("lora: max_loras {} and max_lora_rank {} must be >= 1", lora->max_loras(),
                         lora->max_lora_rank());
  if (Count(lora->targets()) == 0) return DataLossError("lora: no targets");
  uint64_t floats = 0;
  std::set<std::string_view> names;
  for (uint32_t t = 0; t < Count(lora->targets()); ++t) {
    const xpk::LoraTarget* target = lora->targets()->Get(t);
    if (!target->name() || target->name()->size() == 0 ||
        !names.insert(target->name()->string_view()).second)
      return DataLossError("lora target {}: missing or duplicate name", t);
    if (target->in_features() < 1 || target->out_features() < 1)
      return DataLossError("lora target '{}': in_features {} / out_features {} must be >= 1",
                           target->name()->string_view(), target->in_features(),
                           target->out_features());
    floats += static_cast<uint64_t>(lora->max_lora_rank()) *
              static_cast<uint64_t>(target->in_features() + target->out_features());
  }
  if (Count(lora->adapters()) == 0) return Status::Ok();
  if (lora->adapters_segment() >= Count(m.segments()) ||
      m.segments()->Get(lora->adapters_segment())->kind() != xpk::SegmentKind::adapters)
    return DataLossError("lora: adapters segment {} is not a segment of kind adapters",
                         lora->adapters_segment());
  const uint64_t segment_size = m.segments()->Get(lora->adapters_segment())->size();
  std::set<std::string_view> adapter_names;
  for (uint32_t i = 0; i < Count(lora->adapters()); ++i) {
    const xpk::LoraAdapter* a = lora->adapters()->Get(i);
    if (!a->name() || a->name()->size() == 0 ||
        !adapter_names.insert(a->name()->string_view()).second)
      return DataLossError("lora adapter {}: missing or duplicate name", i);
    if (a->size() != floats * sizeof(float) || a->offset() % sizeof(float) != 0 ||
        !RangeWithin(a->offset(), a->size(), segment_size))
      return DataLossError(
          "lora adapter '{}': range {} is not {} floats inside the {}-byte adapters segment",
          a->name()->string_view(), RangeText(a->offset(), a->size()), floats, segment_size);
    if (a->rank() < 1 || a->rank() > lora->max_lora_rank())
      return DataLossError("lora adapter '{}': rank {} outside [1, {}]", a->name()->string_view(),
                           a->rank(), lora->max_lora_rank());
  }
  return Status::Ok();
}

Status ValidateManifest(const xpk::Manifest& m, const FileHeader& h) {
  if (m.format_major() != h.format_major) {
    return DataLossError("manifest format_major {} does not match the header's {}",
                         m.format_major(), h.format_major);
  }
  XRT_RETURN_IF_ERROR(ValidateConfig(m.config()));
  if (!m.tokenizer()) return DataLossError("manifest has no tokenizer");
  XRT_RETURN_IF_ERROR(ValidateManifestTokenizer(*m.tokenizer(), m.config()->vocab_size()));
  XRT_RETURN_IF_ERROR(ValidateLimits(m.limits()));
  XRT_RETURN_IF_ERROR(ValidateSegments(m, h));
  for (uint32_t i = 0; i < Count(m.weights()); ++i) XRT_RETURN_IF_ERROR(ValidateWeight(m, i));
  for (uint32_t i = 0; i < Count(m.code()); ++i) XRT_RETURN_IF_ERROR(ValidateCodeModule(m, i));
  XRT_RETURN_IF_ERROR(ValidateLora(m));
  std::set<std::tuple<uint8_t, uint8_t, int64_t>> buckets;
  for (uint32_t i = 0; i < Count(m.executables()); ++i) {
    XRT_RETURN_IF_ERROR(ValidateExecutable(m, i));
    const xpk::Executable* e = m.executables()->Get(i);
    if (!buckets
             .insert({static_cast<uint8_t>(e->kind()), static_cast<uint8_t>(e->lora_mode()),
                      ExecutableBucket(*e)})
             .second) {
      return DataLossError("executable '{}': a second {} executable for bucket {} (lora {})",
                           e->name()->string_view(), xpk::EnumNameExecutableKind(e->kind()),
                           ExecutableBucket(*e), xpk::EnumNameLoraMode(e->lora_mode()));
    }
  }
  return Status::Ok();
}

}  // namespace

uint64_t DTypeSize(xpk::DType dtype) {
  switch (dtype) {
    case xpk::DType::f32:
      return 4;
    case xpk::DType::f16:
      return 2;
    case xpk::DType::bf16:
      return 2;
    case xpk::DType::i32:
      return 4;
    case xpk::DType::i64:
      return 8;
    case xpk::DType::u8:
      return 1;
    case xpk::DType::q8_0:
    case xpk::DType::q4_0:
    case xpk::DType::q4_1:
    case xpk::DType::q5_0:
    case xpk::DType::q5_1:
    case xpk::DType::q3_k:
    case xpk::DType::iq4_nl:
    case xpk::DType::iq4_xs:
    case xpk::DType::q4_k:
    case xpk::DType::q5_k:
    case xpk::DType::q5_k_bit_planes:
    case xpk::DType::q6_k_bit_planes:
    case xpk::DType::q6_k:
    case xpk::DType::q4_0_k_rows:
    case xpk::DType::q4_1_k_rows:
    case xpk::DType::q4_k_k_rows:
    case xpk::DType::q5_k_k_rows:
    case xpk::DType::q6_k_k_rows:
    case xpk::DType::bf16_pairs:
    case xpk::DType::bf16_pairs_amx:
      return 0;
  }
  return 0;
}

std::string DTypeName(xpk::DType dtype) {
  const char* name = xpk::EnumNameDType(dtype);
  if (name && *name) return name;
  return fmt::format("dtype {}", static_cast<int>(dtype));
}

bool WeightFormatOf(xpk::DType dtype, WeightFormat* out) {
  switch (dtype) {
    case xpk::DType::f32:
      *out = WeightFormat::kF32;
      return true;
    case xpk::DType::f16:
      *out = WeightFormat::kF16;
      return true;
    case xpk::DType::bf16:
      *out = WeightFormat::kBF16;
      return true;
    case xpk::DType::q8_0:
      *out = WeightFormat::kQ8_0;
      return true;
    case xpk::DType::q4_0:
      *out = WeightFormat::kQ4_0;
      return true;
    case xpk::DType::q4_1:
      *out = WeightFormat::kQ4_1;
      return true;
    case xpk::DType::q5_0:
      *out = WeightFormat::kQ5_0;
      return true;
    case xpk::DType::q5_1:
      *out = WeightFormat::kQ5_1;
      return true;
    case xpk::DType::q3_k:
      *out = WeightFormat::kQ3_K;
      return true;
    case xpk::DType::iq4_nl:
      *out = WeightFormat::kIQ4_NL;
      return true;
    case xpk::DType::iq4_xs:
      *out = WeightFormat::kIQ4_XS;
      return true;
    case xpk::DType::q4_k:
      *out = WeightFormat::kQ4_K;
      return true;
    case xpk::DType::q5_k:
      *out = WeightFormat::kQ5_K;
      return true;
    case xpk::DType::q6_k:
      *out = WeightFormat::kQ6_K;
      return true;
    case xpk::DType::bf16_pairs:
      *out = WeightFormat::kBF16Pairs;
      return true;
    case xpk::DType::bf16_pairs_amx:
      *out = WeightFormat::kBF16PairsAmx;
      return true;
    case xpk::DType::q5_k_bit_planes:
    case xpk::DType::q6_k_bit_planes:
    case xpk::DType::q4_0_k_rows:
    case xpk::DType::q4_1_k_rows:
    case xpk::DType::q4_k_k_rows:
    case xpk::DType::q5_k_k_rows:
    case xpk::DType::q6_k_k_rows:
    case xpk::DType::i32:
    case xpk::DType::i64:
    case xpk::DType::u8:
      return false;
  }
  return false;
}

int64_t ExecutableBucket(const xpk::Executable& e) {
  switch (e.kind()) {
    case xpk::ExecutableKind::lm_step:
      return e.num_tokens();
    case xpk::ExecutableKind::lm_logits:
      return e.num_reqs();
    case xpk::ExecutableKind::vision_encode:
      return e.num_images();
  }
  return 0;
}

Artifact::~Artifact() { std::free(owned_); }

Expected<std::unique_ptr<Artifact>> Artifact::Open(const std::string& path, ArtifactLoad load) {
  XRT_ASSIGN_OR_RETURN(MappedFile file, load == ArtifactLoad::kRead ? MappedFile::Read(path)
                                                                    : MappedFile::Open(path));
  std::unique_ptr<Artifact> a(new Artifact());
  a->path_ = path;
  a->file_ = std::move(file);
  a->data_ = a->file_.data();
  a->size_ = a->file_.size();
  return Validate(std::move(a));
}

Expected<std::unique_ptr<Artifact>> Artifact::FromBytes(const std::string& name,
                                                        const uint8_t* data, size_t size) {
  std::unique_ptr<Artifact> a(new Artifact());
  a->path_ = name;
  if (size > 0) {
    const size_t rounded = (size + kXpkPageAlignment - 1) / kXpkPageAlignment * kXpkPageAlignment;
    a->owned_ = static_cast<uint8_t*>(std::aligned_alloc(kXpkPageAlignment, rounded));
    if (!a->owned_) {
      return ResourceExhaustedError("{}: cannot allocate {} bytes", name, rounded);
    }
    std::memcpy(a->owned_, data, size);
    std::memset(a->owned_ + size, 0, rounded - size);
    a->data_ = a->owned_;
    a->size_ = size;
  }
  return Validate(std::move(a));
}

Expected<std::unique_ptr<Artifact>> Artifact::Validate(std::unique_ptr<Artifact> a) {
  const std::string& what = a->path_;
  // Layer 1: the fixed header.
  XRT_ASSIGN_OR_RETURN(a->header_, DecodeFileHeader(a->data_, a->size_, what));
  const FileHeader& h = a->header_;

  // Layer 2: identifier, then the flatbuffers Verifier over exactly the manifest range.
  const uint8_t* buf = a->data_ + h.manifest_offset;
  if (h.manifest_size < 8) {
    return DataLossError("{}: manifest of {} bytes is too small to be a flatbuffer", what,
                         h.manifest_size);
  }
  if (!xpk::ManifestBufferHasIdentifier(buf)) {
    return DataLossError("{}: manifest file identifier is not \"{}\"", what,
                         xpk::ManifestIdentifier());
  }
  if (h.manifest_size >= FLATBUFFERS_MAX_BUFFER_SIZE) {
    return DataLossError("{}: manifest of {} bytes exceeds the flatbuffers limit", what,
                         h.manifest_size);
  }
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 64;
  // Every table takes at least 4 bytes; beyond that many tables the buffer shares tables
  // (a DAG), which a manifest never does and which would make verification blow up.
  opts.max_tables =
      static_cast<flatbuffers::uoffset_t>(std::max<uint64_t>(1000000, h.manifest_size / 4));
  opts.check_alignment = true;
  flatbuffers::Verifier verifier(buf, static_cast<size_t>(h.manifest_size), opts);
  if (!xpk::VerifyManifestBuffer(verifier)) {
    return DataLossError("{}: manifest verification failed; data may be truncated or corrupt",
                         what);
  }
  a->manifest_ = xpk::GetManifest(buf);

  // Layer 3: contents, offsets and cross references.
  Status s = ValidateManifest(*a->manifest_, h);
  if (!s.ok()) return s.WithContext(what);
  s = a->BuildIndexes();
  if (!s.ok()) return s.WithContext(what);

  // Layer 4: the checksum of every code segment, before anything can map it executable.
  // (Weights are verified on request: hashing them would read the whole file.) A format
  // 1.0 artifact has no checksums and loads unverified.
  for (uint32_t i = 0; i < a->num_segments(); ++i) {
    const xpk::Segment* seg = a->manifest_->segments()->Get(i);
    if (seg->kind() != xpk::SegmentKind::code) continue;
    if (seg->checksum_algorithm() == xpk::ChecksumAlgorithm::none) continue;  // 1.0
    XRT_RETURN_IF_ERROR(a->VerifySegment(i));
  }
  return a;
}

Status Artifact::BuildIndexes() {
  const xpk::Manifest& m = *manifest_;
  for (uint32_t i = 0; i < Count(m.weights()); ++i) {
    std::string_view name = m.weights()->Get(i)->name()->string_view();
    if (!weight_by_name_.emplace(name, i).second) {
      return DataLossError("weight {} '{}': duplicate name (also weight {})", i, name,
                           weight_by_name_[name]);
    }
  }
  for (uint32_t i = 0; i < Count(m.executables()); ++i) {
    std::string_view name = m.executables()->Get(i)->name()->string_view();
    if (!executable_by_name_.emplace(name, i).second) {
      return DataLossError("executable '{}': duplicate name (executables {} and {})", name,
                           executable_by_name_[name], i);
    }
  }
  return Status::Ok();
}

uint32_t Artifact::num_segments() const { return Count(manifest_->segments()); }

Expected<ByteSpan> Artifact::segment_data(uint32_t index) const {
  if (index >= num_segments()) {
    return OutOfRangeError("{}: segment index {} out of range ({} segments)", path_, index,
                           num_segments());
  }
  const xpk::Segment* s = manifest_->segments()->Get(index);
  return ByteSpan{data_ + s->offset(), s->size()};
}

Status Artifact::VerifySegment(uint32_t index) const {
  XRT_ASSIGN_OR_RETURN(ByteSpan bytes, segment_data(index));
  return VerifySegmentChecksum(*manifest_->segments()->Get(index), index, bytes.data, bytes.size)
      .WithContext(path_);
}

uint32_t Artifact::num_weights() const { return Count(manifest_->weights()); }

Expected<const xpk::Weight*> Artifact::weight(uint32_t index) const {
  if (index >= num_weights()) {
    return OutOfRangeError("{}: weight index {} out of range ({} weights)", path_, index,
                           num_weights());
  }
  return manifest_->weights()->Get(index);
}

Expected<ByteSpan> Artifact::weight_data(uint32_t index) const {
  XRT_ASSIGN_OR_RETURN(const xpk::Weight* w, weight(index));
  const xpk::Segment* s = manifest_->segments()->Get(w->segment());
  return ByteSpan{data_ + s->offset() + w->offset(), w->size()};
}

Expected<uint32_t> Artifact::FindWeight(std::string_view name) const {
  auto it = weight_by_name_.find(name);
  if (it == weight_by_name_.end()) {
    return NotFoundError("{}: no weight named '{}'", path_, name);
  }
  return it->second;
}

Expected<const xpk::Executable*> Artifact::FindExecutable(std::string_view name) const {
  auto it = executable_by_name_.find(name);
  if (it == executable_by_name_.end()) {
    return NotFoundError("{}: no executable named '{}'", path_, name);
  }
  return manifest_->executables()->Get(it->second);
}

Expected<const xpk::Executable*> Artifact::FindExecutable(xpk::ExecutableKind kind, int64_t bucket,
                                                          xpk::LoraMode lora_mode) const {
  for (const xpk::Executable* e : ExecutablesOfKind(kind, lora_mode)) {
    if (ExecutableBucket(*e) == bucket) return e;
  }
  return NotFoundError("{}: no {} executable for bucket {} (lora {})", path_,
                       xpk::EnumNameExecutableKind(kind), bucket, xpk::EnumNameLoraMode(lora_mode));
}

Expected<const xpk::Executable*> Artifact::FindCoveringExecutable(xpk::ExecutableKind kind,
                                                                  int64_t n,
                                                                  xpk::LoraMode lora_mode) const {
  std::vector<const xpk::Executable*> all = ExecutablesOfKind(kind, lora_mode);
  for (const xpk::Executable* e : all) {
    if (ExecutableBucket(*e) >= n) return e;
  }
  if (all.empty()) {
    return NotFoundError("{}: no {} executables (lora {})", path_,
                         xpk::EnumNameExecutableKind(kind), xpk::EnumNameLoraMode(lora_mode));
  }
  return NotFoundError("{}: no {} bucket holds {} (lora {}; largest compiled bucket is {})", path_,
                       xpk::EnumNameExecutableKind(kind), n, xpk::EnumNameLoraMode(lora_mode),
                       ExecutableBucket(*all.back()));
}

std::vector<const xpk::Executable*> Artifact::ExecutablesOfKind(xpk::ExecutableKind kind,
                                                                xpk::LoraMode lora_mode) const {
  std::vector<const xpk::Executable*> out;
  for (uint32_t i = 0; i < Count(manifest_->executables()); ++i) {
    const xpk::Executable* e = manifest_->executables()->Get(i);
    if (e->kind() == kind && e->lora_mode() == lora_mode) out.push_back(e);
  }
  std::sort(out.begin(), out.end(), [](const xpk::Executable* a, const xpk::Executable* b) {
    return ExecutableBucket(*a) < ExecutableBucket(*b);
  });
  return out;
}

Expected<TokenizerSpec> Artifact::tokenizer_spec() const {
  Expected<TokenizerSpec> spec =
      TokenizerSpecFromManifest(*manifest_->tokenizer(), manifest_->config()->vocab_size());
  if (!spec.ok()) return spec.status().WithContext(path_);
  return spec;
}

ArtifactProvenance Artifact::provenance() const {
  ArtifactProvenance out;
  const xpk::Provenance* p = manifest_->provenance();
  if (!p) return out;
  out.compiler_version = Str(p->compiler_version());
  out.llvm_version = Str(p->llvm_version());
  for (uint32_t i = 0; i < Count(p->options()); ++i) {
    const xpk::Option* o = p->options()->Get(i);
    out.options.emplace_back(Str(o->key()), Str(o->value()));
  }
  for (uint32_t i = 0; i < Count(p->inputs()); ++i) {
    const xpk::InputHash* in = p->inputs()->Get(i);
    out.inputs.push_back({Str(in->path()), Str(in->role()), in->size(), Str(in->sha256())});
  }
  return out;
}

}  // namespace xrt
