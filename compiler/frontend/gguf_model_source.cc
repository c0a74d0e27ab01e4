#include "compiler/frontend/gguf_model_source.h"

#include <cmath>
#include <cstring>
#include <list>
#include <map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compiler/frontend/decoder_tensors.h"
#include "compiler/frontend/source_dtype.h"
#include "runtime/tokenizer/tokenizer_import.h"

namespace xcc {
namespace {

struct ArchInfo {
  const char* gguf_name;
  const char* hf_name;
  bool permuted_qk;  // converted with llama.cpp's rotary row permutation
};
constexpr ArchInfo kArchs[] = {
    {"llama", "LlamaForCausalLM", true},
    {"mistral", "MistralForCausalLM", true},
    {"qwen2", "Qwen2ForCausalLM", false},
};

const ArchInfo* FindArch(const std::string& name) {
  for (const ArchInfo& a : kArchs) {
    if (name == a.gguf_name) return &a;
  }
  return nullptr;
}

Expected<int64_t> PositiveKey(const GgufFile& f, const std::string& key) {
  XRT_ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
  if (v <= 0)
    return xrt::InvalidArgumentError("{}: key '{}': must be positive, got {}", f.path(), key, v);
  return v;
}

// Optional integer key; `def` when absent.
Expected<int64_t> IntKeyOr(const GgufFile& f, const std::string& key, int64_t def) {
  if (!f.Has(key)) return def;
  return f.GetInt(key);
}

Expected<int32_t> TokenIdKeyOr(const GgufFile& f, const std::string& key, int32_t def) {
  if (!f.Has(key)) return def;
  XRT_ASSIGN_OR_RETURN(int64_t v, f.GetInt(key));
  if (v < -1 || v > INT32_MAX) {
    return xrt::InvalidArgumentError("{}: key '{}': token id {} out of range", f.path(), key, v);
  }
  return static_cast<int32_t>(v);
}

Expected<bool> BoolKeyOr(const GgufFile& f, const std::string& key, bool def) {
  if (!f.Has(key)) return def;
  return f.GetBool(key);
}

Expected<double> FloatKeyOr(const GgufFile& f, const std::string& key, double def) {
  if (!f.Has(key)) return def;
  return f.GetFloat(key);
}

// llama.cpp's per-frequency rope divisors (Llama 3 rope scaling).
constexpr const char* kRopeFreqsTensor = "rope_freqs.weight";

bool HasTensor(const GgufFile& f, const std::string& name) {
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name == name) return true;
  }
  return false;
}

Expected<xrt::TokenizerSpec> TokenizerFromGguf(const GgufFile& f) {
  xrt::GgufTokenizerMetadata m;
  XRT_ASSIGN_OR_RETURN(m.model, f.GetString("tokenizer.ggml.model"));
  if (f.Has("tokenizer.ggml.pre")) {
    XRT_ASSIGN_OR_RETURN(m.pre, f.GetString("tokenizer.ggml.pre"));
  }
  XRT_ASSIGN_OR_RETURN(m.tokens, f.GetStringArray("tokenizer.ggml.tokens"));
  if (f.Has("tokenizer.ggml.token_type")) {
    XRT_ASSIGN_OR_RETURN(std::vector<int64_t> types, f.GetIntArray("tokenizer.ggml.token_type"));
    if (types.size() != m.tokens.size()) {
      return xrt::DataLossError("{}: key 'tokenizer.ggml.token_type': {} entries for {} tokens",
                                f.path(), types.size(), m.tokens.size());
    }
    m.token_types.assign(types.begin(), types.end());
  }
  if (f.Has("tokenizer.ggml.merges")) {
    XRT_ASSIGN_OR_RETURN(m.merges, f.GetStringArray("tokenizer.ggml.merges"));
  }
  XRT_ASSIGN_OR_RETURN(m.bos_id, TokenIdKeyOr(f, "tokenizer.ggml.bos_token_id", -1));
  XRT_ASSIGN_OR_RETURN(m.eos_id, TokenIdKeyOr(f, "tokenizer.ggml.eos_token_id", -1));
  XRT_ASSIGN_OR_RETURN(m.unk_id, TokenIdKeyOr(f, "tokenizer.ggml.unknown_token_id", -1));
  XRT_ASSIGN_OR_RETURN(m.pad_id, TokenIdKeyOr(f, "tokenizer.ggml.padding_token_id", -1));
  if (f.Has("tokenizer.ggml.add_bos_token")) {
    XRT_ASSIGN_OR_RETURN(m.add_bos, f.GetBool("tokenizer.ggml.add_bos_token"));
  }
  XRT_ASSIGN_OR_RETURN(m.add_eos, BoolKeyOr(f, "tokenizer.ggml.add_eos_token", false));
  XRT_ASSIGN_OR_RETURN(m.add_space_prefix, BoolKeyOr(f, "tokenizer.ggml.add_space_prefix", false));
  const int64_t n = static_cast<int64_t>(m.tokens.size());
  for (auto [key, id] : {std::pair<const char*, int32_t>{"bos_token_id", m.bos_id},
                         {"eos_token_id", m.eos_id},
                         {"unknown_token_id", m.unk_id},
                         {"padding_token_id", m.pad_id}}) {
    if (id >= n) {
      return xrt::DataLossError("{}: key 'tokenizer.ggml.{}': id {} beyond the {} tokens", f.path(),
                                key, id, n);
    }
  }
  Expected<xrt::TokenizerSpec> spec = xrt::TokenizerSpecFromGguf(m);
  if (!spec.ok()) return spec.status().WithContext(f.path());
  return spec;
}

class GgufModelSource final : public IndexedModelSource {
 public:
  std::vector<std::string> input_files() const override { return {file_.path()}; }

  Status Load(const std::string& path);

 private:
  Status AddTensor(const GgufTensorInfo& info, const ArchInfo& arch);

  GgufFile file_;
  std::list<SourceTensor> owned_tensors_;  // indexed by tensors_
  std::list<std::vector<uint8_t>> owned_;  // un-permuted q/k data
};

Status GgufModelSource::AddTensor(const GgufTensorInfo& info, const ArchInfo& arch) {
  SourceTensor t;
  t.name = GgufToHfTensorName(info.name);
  t.dtype = info.dtype;
  t.shape.assign(info.ne.rbegin(), info.ne.rend());
  t.data = info.data;
  t.nbytes = info.nbytes;
  t.file = file_.path();
  auto ends_with = [&](const char* suffix) {
    size_t n = std::strlen(suffix);
    return t.name.size() >= n && t.name.compare(t.name.size() - n, n, suffix) == 0;
  };
  int64_t n_head = 0;
  if (ends_with(".self_attn.q_proj.weight") || ends_with(".self_attn.q_proj.bias")) {
    n_head = config_.num_attention_heads;
  } else if (ends_with(".self_attn.k_proj.weight") || ends_with(".self_attn.k_proj.bias")) {
    n_head = config_.num_key_value_heads;
  }
  if (arch.permuted_qk && n_head > 0 && t.nbytes > 0) {
    const int64_t rows = t.shape[0];
    if (t.shape.size() == 1 && GetDTypeLayout(t.dtype).block_elems != 1) {
      return xrt::UnimplementedError("{}: tensor '{}': cannot un-permute a {} bias", file_.path(),
                                     info.name, SourceDTypeName(t.dtype));
    }
    const size_t row_bytes = t.nbytes / static_cast<size_t>(rows);
    std::vector<uint8_t>& buf = owned_.emplace_back(t.nbytes);
    XRT_RETURN_IF_ERROR(UnpermuteRotaryRows(t.data, row_bytes, rows, n_head, buf.data())
                            .WithContext(fmt::format("{}: tensor '{}'", file_.path(), info.name)));
    t.data = buf.data();
  }
  if (tensors_.count(t.name) != 0) {
    return xrt::DataLossError("{}: tensor '{}': maps to '{}', which another tensor also maps to",
                              file_.path(), info.name, t.name);
  }
  const SourceTensor& owned = owned_tensors_.emplace_back(std::move(t));
  tensors_.emplace(owned.name, &owned);
  return Status::Ok();
}

Status GgufModelSource::Load(const std::string& path) {
  XRT_ASSIGN_OR_RETURN(file_, GgufFile::Open(path));
  origin_ = file_.path();
  XRT_ASSIGN_OR_RETURN(config_, DecoderConfigFromGguf(file_));
  const ArchInfo* arch = FindArch(file_.GetString("general.architecture").value());
  for (const GgufTensorInfo& info : file_.tensors()) {
    if (info.name == kRopeFreqsTensor) continue;  // read into config_.rope_scaling
    XRT_RETURN_IF_ERROR(AddTensor(info, *arch));
  }

  XRT_ASSIGN_OR_RETURN(tokenizer_, TokenizerFromGguf(file_));
  if (file_.Has("tokenizer.chat_template")) {
    XRT_ASSIGN_OR_RETURN(chat_template_, file_.GetString("tokenizer.chat_template"));
  }
  XRT_ASSIGN_OR_RETURN(int32_t eos, TokenIdKeyOr(file_, "tokenizer.ggml.eos_token_id", -1));
  XRT_ASSIGN_OR_RETURN(int32_t eot, TokenIdKeyOr(file_, "tokenizer.ggml.eot_token_id", -1));
  if (eos >= 0) generation_.eos_token_ids.push_back(eos);
  if (eot >= 0 && eot != eos) generation_.eos_token_ids.push_back(eot);
  // Sampling defaults some converters record (general.sampling.*).
  XRT_ASSIGN_OR_RETURN(generation_.temperature, FloatKeyOr(file_, "general.sampling.temp", -1));
  XRT_ASSIGN_OR_RETURN(generation_.top_p, FloatKeyOr(file_, "general.sampling.top_p", -1));
  XRT_ASSIGN_OR_RETURN(generation_.top_k, IntKeyOr(file_, "general.sampling.top_k", -1));
  return ValidateDecoderTensors(*this).WithContext(path);
}

}  // namespace

std::string GgufToHfTensorName(const std::string& g) {
  if (g == "token_embd.weight") return "model.embed_tokens.weight";
  if (g == "output_norm.weight") return "model.norm.weight";
  if (g == "output.weight") return "lm_head.weight";
  static const std::map<std::string, std::string> kLayer = {
      {"attn_q", "self_attn.q_proj"},
      {"attn_k", "self_attn.k_proj"},
      {"attn_v", "self_attn.v_proj"},
      {"attn_output", "self_attn.o_proj"},
      {"ffn_gate", "mlp.gate_proj"},
      {"ffn_up", "mlp.up_proj"},
      {"ffn_down", "mlp.down_proj"},
      {"attn_norm", "input_layernorm"},
      {"ffn_norm", "post_attention_layernorm"},
  };
  // blk.<N>.<part>.<weight|bias>
  if (g.compare(0, 4, "blk.") != 0) return g;
  size_t p = 4, q = p;
  while (q < g.size() && g[q] >= '0' && g[q] <= '9') ++q;
  if (q == p || q >= g.size() || g[q] != '.') return g;
  size_t dot = g.rfind('.');
  if (dot <= q) return g;
  std::string part = g.substr(q + 1, dot - q - 1);
  std::string suffix = g.substr(dot + 1);
  auto it = kLayer.find(part);
  if (it == kLayer.end() || (suffix != "weight" && suffix != "bias")) return g;
  return "model.layers." + g.substr(p, q - p) + "." + it->second + "." + suffix;
}

Status UnpermuteRotaryRows(const uint8_t* in, size_t row_bytes, int64_t rows, int64_t n_head,
                           uint8_t* out) {
  if (n_head <= 0 || rows % (2 * n_head) != 0) {
    return xrt::InvalidArgumentError("{} rows cannot be split into {} heads of rotary pairs", rows,
                                     n_head);
  }
  const int64_t head_rows = rows / n_head, half = head_rows / 2;
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t gguf_row = h * head_rows + 2 * i + j;
        const int64_t hf_row = h * head_rows + j * half + i;
        std::memcpy(out + hf_row * row_bytes, in + gguf_row * row_bytes, row_bytes);
      }
    }
  }
  return Status::Ok();
}

Expected<DecoderConfig> DecoderConfigFromGguf(const GgufFile& f) {
  XRT_ASSIGN_OR_RETURN(std::string arch_name, f.GetString("general.architecture"));
  const ArchInfo* arch = FindArch(arch_name);
  if (!arch) {
    return xrt::UnimplementedError(
        "{}: key 'general.architecture': unsupported architecture '{}' (supported: llama, "
        "mistral, qwen2)",
        f.path(), arch_name);
  }
  const std::string p = arch_name + ".";
  DecoderConfig c;
  c.architecture = arch->hf_name;
  XRT_ASSIGN_OR_RETURN(c.hidden_size, PositiveKey(f, p + "embedding_length"));
  XRT_ASSIGN_OR_RETURN(c.num_hidden_layers, PositiveKey(f, p + "block_count"));
  XRT_ASSIGN_OR_RETURN(c.intermediate_size, PositiveKey(f, p + "feed_forward_length"));
  XRT_ASSIGN_OR_RETURN(c.num_attention_heads, PositiveKey(f, p + "attention.head_count"));
  if (f.Has(p + "attention.head_count_kv")) {
    XRT_ASSIGN_OR_RETURN(c.num_key_value_heads, PositiveKey(f, p + "attention.head_count_kv"));
  } else {
    c.num_key_value_heads = c.num_attention_heads;
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return xrt::InvalidArgumentError(
        "{}: key '{}attention.head_count_kv': {} does not divide attention.head_count {}", f.path(),
        p, c.num_key_value_heads, c.num_attention_heads);
  }
  if (f.Has(p + "attention.key_length")) {
    XRT_ASSIGN_OR_RETURN(c.head_dim, PositiveKey(f, p + "attention.key_length"));
    if (f.Has(p + "attention.value_length")) {
      XRT_ASSIGN_OR_RETURN(int64_t vl, PositiveKey(f, p + "attention.value_length"));
      if (vl != c.head_dim) {
        return xrt::UnimplementedError(
            "{}: key '{}attention.value_length': {} differs from key_length {}", f.path(), p, vl,
            c.head_dim);
      }
    }
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return xrt::InvalidArgumentError(
          "{}: key '{}attention.head_count': {} does not divide embedding_length {}", f.path(), p,
          c.num_attention_heads, c.hidden_size);
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim % 2 != 0) {
    return xrt::InvalidArgumentError("{}: head dimension {} is odd", f.path(), c.head_dim);
  }
  if (f.Has(p + "rope.dimension_count")) {
    XRT_ASSIGN_OR_RETURN(int64_t rd, PositiveKey(f, p + "rope.dimension_count"));
    if (rd != c.head_dim) {
      return xrt::UnimplementedError(
          "{}: key '{}rope.dimension_count': partial rotary ({} of {} dims) is not supported",
          f.path(), p, rd, c.head_dim);
    }
  }
  XRT_ASSIGN_OR_RETURN(c.max_position_embeddings, PositiveKey(f, p + "context_length"));
  XRT_ASSIGN_OR_RETURN(c.rms_norm_eps, f.GetFloat(p + "attention.layer_norm_rms_epsilon"));
  XRT_ASSIGN_OR_RETURN(c.rope_theta, FloatKeyOr(f, p + "rope.freq_base", 10000.0));
  if (!(c.rope_theta > 0) || !(c.rms_norm_eps > 0)) {
    return xrt::InvalidArgumentError("{}: rope.freq_base and layer_norm_rms_epsilon must be > 0",
                                     f.path());
  }

  std::string scaling = "none";
  if (f.Has(p + "rope.scaling.type")) {
    XRT_ASSIGN_OR_RETURN(scaling, f.GetString(p + "rope.scaling.type"));
  }
  if (scaling == "linear") {
    c.rope_scaling.type = "linear";
    XRT_ASSIGN_OR_RETURN(c.rope_scaling.factor, f.GetFloat(p + "rope.scaling.factor"));
  } else if (scaling == "none") {
    // Older files: rope.scale_linear.
    XRT_ASSIGN_OR_RETURN(double lin, FloatKeyOr(f, p + "rope.scale_linear", 1.0));
    if (lin != 1.0) {
      c.rope_scaling.type = "linear";
      c.rope_scaling.factor = lin;
    }
  } else {
    return xrt::UnimplementedError(
        "{}: key '{}rope.scaling.type': unsupported value '{}' (supported: none, linear)", f.path(),
        p, scaling);
  }
  if (!(c.rope_scaling.factor > 0)) {
    return xrt::InvalidArgumentError("{}: rope scaling factor {} must be > 0", f.path(),
                                     c.rope_scaling.factor);
  }
  for (const GgufTensorInfo& t : f.tensors()) {
    if (t.name != kRopeFreqsTensor) continue;
    // llama.cpp stores Llama 3 rope scaling as per-frequency divisors, computed at
    // conversion from the HF parameters (which the GGUF does not keep).
    const int64_t n = c.head_dim / 2;
    if (t.ne.size() != 1 || t.ne[0] != n) {
      return xrt::DataLossError("{}: tensor '{}': shape [{}], expected [{}] (head_dim / 2)",
                                f.path(), t.name, fmt::join(t.ne, ", "), n);
    }
    if (!c.rope_scaling.type.empty() && c.rope_scaling.type != "none") {
      return xrt::InvalidArgumentError(
          "{}: tensor '{}' and rope scaling type '{}' both scale the rope frequencies", f.path(),
          t.name, c.rope_scaling.type);
    }
    std::vector<float> factors(n);
    XRT_RETURN_IF_ERROR(ConvertToF32(t.dtype, t.data, t.nbytes, n, factors.data())
                            .WithContext(fmt::format("{}: tensor '{}'", f.path(), t.name)));
    for (int64_t i = 0; i < n; ++i) {
      if (!(factors[i] > 0) || !std::isfinite(factors[i])) {
        return xrt::DataLossError("{}: tensor '{}': factor {} is {}, not a positive number",
                                  f.path(), t.name, i, factors[i]);
      }
    }
    c.rope_scaling = RopeScaling();
    c.rope_scaling.type = "freq_factors";
    c.rope_scaling.freq_factors = std::move(factors);
  }

  if (f.Has(p + "vocab_size")) {
    XRT_ASSIGN_OR_RETURN(c.vocab_size, PositiveKey(f, p + "vocab_size"));
  } else if (f.Has("tokenizer.ggml.tokens")) {
    XRT_ASSIGN_OR_RETURN(const GgufValue* v, f.Get("tokenizer.ggml.tokens"));
    c.vocab_size = static_cast<int64_t>(v->strings.size());
    if (v->type != GgufValueType::kArray || c.vocab_size == 0) {
      return xrt::InvalidArgumentError(
          "{}: key 'tokenizer.ggml.tokens': expected a non-empty array", f.path());
    }
  } else {
    return xrt::NotFoundError("{}: key '{}vocab_size': missing (and no tokenizer.ggml.tokens)",
                              f.path(), p);
  }
  c.tie_word_embeddings = !HasTensor(f, "output.weight");
  c.attention_bias = HasTensor(f, "blk.0.attn_q.bias");
  if (arch_name == "qwen2" && !c.attention_bias) {
    return xrt::NotFoundError("{}: tensor 'blk.0.attn_q.bias': missing (qwen2 has q/k/v biases)",
                              f.path());
  }
  // llama.cpp loads an attn_output bias for llama (and so Mistral), never for
  // qwen2: there it is a tensor the graph does not consume.
  c.attention_output_bias = arch_name != "qwen2" && HasTensor(f, "blk.0.attn_output.bias");
  c.hidden_act = "silu";
  return c;
}

Expected<std::unique_ptr<ModelSource>> OpenGgufModel(const std::string& path) {
  auto src = std::make_unique<GgufModelSource>();
  XRT_RETURN_IF_ERROR(src->Load(path));
  return std::unique_ptr<ModelSource>(std::move(src));
}

}  // namespace xcc
