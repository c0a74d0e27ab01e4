#include "compiler/frontend/decoder_tensors.h"

#include <set>

#include <fmt/ranges.h>

namespace xcc {

std::string ShapeToString(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::vector<DecoderTensorSpec> DecoderTensorSpecs(const DecoderConfig& c) {
  const int64_t D = c.hidden_size, V = c.vocab_size, F = c.intermediate_size;
  const int64_t q_rows = c.num_attention_heads * c.head_dim;
  const int64_t kv_rows = c.num_key_value_heads * c.head_dim;
  std::vector<DecoderTensorSpec> out;
  out.push_back({"model.embed_tokens.weight", {V, D}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    out.push_back({p + "input_layernorm.weight", {D}});
    out.push_back({p + "self_attn.q_proj.weight", {q_rows, D}});
    out.push_back({p + "self_attn.k_proj.weight", {kv_rows, D}});
    out.push_back({p + "self_attn.v_proj.weight", {kv_rows, D}});
    if (c.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q_rows}});
      out.push_back({p + "self_attn.k_proj.bias", {kv_rows}});
      out.push_back({p + "self_attn.v_proj.bias", {kv_rows}});
    }
    out.push_back({p + "self_attn.o_proj.weight", {D, q_rows}});
    if (c.attention_output_bias) out.push_back({p + "self_attn.o_proj.bias", {D}});
    out.push_back({p + "post_attention_layernorm.weight", {D}});
    out.push_back({p + "mlp.gate_proj.weight", {F, D}});
    out.push_back({p + "mlp.up_proj.weight", {F, D}});
    out.push_back({p + "mlp.down_proj.weight", {D, F}});
  }
  out.push_back({"model.norm.weight", {D}});
  out.push_back({"lm_head.weight", {V, D}, /*required=*/!c.tie_word_embeddings});
  return out;
}

std::vector<DecoderTensorSpec> VisionTensorSpecs(const VisionConfig& v, int64_t text_hidden) {
  const int64_t D = v.hidden_size, F = v.intermediate_size, C = v.num_channels, p = v.patch_size;
  const std::string e = "vision_tower.vision_model.embeddings.";
  std::vector<DecoderTensorSpec> out;
  if (v.has_class_token()) out.push_back({e + "class_embedding", {D}});
  out.push_back({e + "patch_embedding.weight", {D, C, p, p}});
  if (!v.has_class_token()) out.push_back({e + "patch_embedding.bias", {D}});
  out.push_back({e + "position_embedding.weight", {v.seq_len(), D}});
  if (v.has_class_token()) {
    out.push_back({"vision_tower.vision_model.pre_layrnorm.weight", {D}});
    out.push_back({"vision_tower.vision_model.pre_layrnorm.bias", {D}});
  }
  for (int64_t l = 0; l < v.layers_used(); ++l) {
    const std::string pre = fmt::format("vision_tower.vision_model.encoder.layers.{}.", l);
    for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
      out.push_back({pre + "self_attn." + proj + ".weight", {D, D}});
      out.push_back({pre + "self_attn." + proj + ".bias", {D}});
    }
    for (const char* ln : {"layer_norm1", "layer_norm2"}) {
      out.push_back({pre + ln + ".weight", {D}});
      out.push_back({pre + ln + ".bias", {D}});
    }
    out.push_back({pre + "mlp.fc1.weight", {F, D}});
    out.push_back({pre + "mlp.fc1.bias", {F}});
    out.push_back({pre + "mlp.fc2.weight", {D, F}});
    out.push_back({pre + "mlp.fc2.bias", {D}});
  }
  const int64_t in = D * static_cast<int64_t>(v.feature_layers.size());
  out.push_back({"multi_modal_projector.linear_1.weight", {text_hidden, in}});
  if (v.projector_bias) out.push_back({"multi_modal_projector.linear_1.bias", {text_hidden}});
  out.push_back({"multi_modal_projector.linear_2.weight", {text_hidden, text_hidden}});
  if (v.projector_bias) out.push_back({"multi_modal_projector.linear_2.bias", {text_hidden}});
  return out;
}

bool UnusedVisionTensor(const std::string& name) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  return starts("vision_tower.vision_model.encoder.layers.") ||
         starts("vision_tower.vision_model.post_layernorm.") ||
         starts("vision_tower.vision_model.head.");
}

Status ValidateDecoderTensors(const ModelSource& source, bool (*ignored)(const std::string& name)) {
  // Every layer has tensors of its own, so more layers than tensors is a corrupt count; it
  // is rejected before DecoderTensorSpecs builds a dozen specs per layer (a GGUF
  // block_count of 10^9 would exhaust memory first).
  const int64_t num_tensors = static_cast<int64_t>(source.tensor_names().size());
  if (source.config().num_hidden_layers > num_tensors) {
    return xrt::InvalidArgumentError("num_hidden_layers is {}, but the model has only {} tensors",
                                     source.config().num_hidden_layers, num_tensors);
  }
  std::vector<DecoderTensorSpec> specs = DecoderTensorSpecs(source.config());
  if (const VisionConfig* v = source.vision()) {
    for (DecoderTensorSpec& s : VisionTensorSpecs(*v, source.config().hidden_size))
      specs.push_back(std::move(s));
  }
  std::set<std::string> used;
  for (const DecoderTensorSpec& spec : specs) used.insert(spec.name);
  std::vector<std::string> unused;
  for (const std::string& name : source.tensor_names()) {
    if (used.count(name) == 0 && !(ignored && ignored(name)) &&
        !(source.vision() && UnusedVisionTensor(name)))
      unused.push_back(name);
  }
  if (!unused.empty()) {
    constexpr size_t k_named = 8;
    std::vector<std::string> named;
    for (size_t i = 0; i < unused.size() && i < k_named; ++i) {
      Expected<const SourceTensor*> t = source.tensor(unused[i]);
      named.push_back(fmt::format("'{}' ({})", unused[i], t.ok() ? (*t)->file : "?"));
    }
    return xrt::InvalidArgumentError(
        "{} tensor(s) the {} decoder graph does not use (attention_bias {}, "
        "tie_word_embeddings {}): {}{}",
        unused.size(), source.config().architecture, source.config().attention_bias,
        source.config().tie_word_embeddings, fmt::join(named, ", "),
        unused.size() > k_named ? ", ..." : "");
  }
  for (const DecoderTensorSpec& spec : specs) {
    Expected<const SourceTensor*> t = source.tensor(spec.name);
    if (!t.ok()) {
      if (!spec.required) continue;
      const char* hint = spec.name == "lm_head.weight" ? " (and tie_word_embeddings is false)" : "";
      return xrt::NotFoundError("tensor '{}': missing{}, expected shape {}", spec.name, hint,
                                ShapeToString(spec.shape));
    }
    if ((*t)->shape != spec.shape) {
      return xrt::InvalidArgumentError("tensor '{}' ({}): shape {}, expected {}", spec.name,
                                       (*t)->file, ShapeToString((*t)->shape),
                                       ShapeToString(spec.shape));
    }
  }
  return Status::Ok();
}

}  // namespace xcc
