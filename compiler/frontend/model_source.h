// ModelSource: a model as read by a frontend (HF directory or GGUF file),
// normalized to one vocabulary of names, layouts and config fields so that the
// model builder never needs to know which format it came from.
//
// Tensor names follow Hugging Face transformers (model.layers.N.self_attn.q_proj.weight,
// model.embed_tokens.weight, model.norm.weight, lm_head.weight, ...), with HF's
// layout: a linear weight is [out_features, in_features] row-major. GGUF names are
// mapped to these, and llama.cpp's Q/K row permutation for rotary embeddings is undone,
// so q/k follow HF's rotate_half convention.
//
// Thread-compatible. Tensor data stays valid for the lifetime of the ModelSource
// (files are memory-mapped).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/tokenizer/tokenizer_spec.h"
#include "runtime/vision/image_preprocess.h"

namespace xcc {

using xrt::Expected;
using xrt::Status;

// Storage type of a tensor in its source file.
enum class SourceDType {
  kF32,
  kF16,
  kBF16,
  kF64,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kBool,
  // ggml block types
  kQ4_0,
  kQ4_1,
  kQ5_0,
  kQ5_1,
  kQ8_0,
  kQ8_1,
  kQ2_K,
  kQ3_K,
  kQ4_K,
  kQ5_K,
  kQ6_K,
  kQ8_K,
  kIQ4_NL,
  kIQ4_XS,
};
const char* SourceDTypeName(SourceDType t);

struct RopeScaling {
  std::string type = "none";  // "none" | "llama3" | "linear" | "freq_factors"
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  // type "freq_factors" (a GGUF's rope_freqs.weight, how llama.cpp stores Llama 3
  // rope scaling): head_dim / 2 divisors of the rope frequencies, as ggml's rope
  // applies them (inv_freq[i] / freq_factors[i]).
  std::vector<float> freq_factors;
};

// Decoder config, Llama family (Llama, Mistral, Qwen2).
struct DecoderConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"; GGUF llama -> "LlamaForCausalLM"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless given
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;         // q/k/v biases (Qwen2: true)
  bool attention_output_bias = false;  // o_proj bias (HF Llama's attention_bias gives both)
  std::string hidden_act = "silu";
  int64_t sliding_window = 0;  // 0: none (recorded; not yet supported if > 0 and < max len)
};

// A LLaVA-style model's vision tower (CLIP or SigLIP) and 2-layer MLP projector,
// normalized from HF's LlavaConfig.
struct VisionConfig {
  std::string tower;  // "clip" (class token, pre-layernorm) | "siglip" (patch bias, no class)
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;  // of the checkpoint; only up to the deepest feature layer run
  int64_t num_attention_heads = 0;
  int64_t image_size = 0;
  int64_t patch_size = 0;
  int64_t num_channels = 3;
  double layer_norm_eps = 1e-5;
  std::string hidden_act;  // "quick_gelu" | "gelu" | "gelu_pytorch_tanh" | "gelu_new"
  // hidden_states indices (0 = the embeddings, i = output of layer i), in order; a
  // negative vision_feature_layer l of the config is num_hidden_layers + l + 1.
  std::vector<int64_t> feature_layers;
  std::string select_strategy = "default";  // "default" (drop the class row) | "full"
  std::string projector_act = "gelu";
  bool projector_bias = true;
  int32_t image_token_id = -1;
  std::string image_token;  // the token's text, e.g. "<image>"
  // preprocessor_config.json / processor_config.json's image_processor.
  xrt::ImagePreprocessParams preprocess;

  bool has_class_token() const { return tower == "clip"; }
  int64_t grid() const { return image_size / patch_size; }
  // Rows of one image's sequence in the tower.
  int64_t seq_len() const { return grid() * grid() + (has_class_token() ? 1 : 0); }
  // Feature rows per image = placeholder tokens per image in the prompt.
  int64_t tokens_per_image() const { return seq_len() - (select_strategy == "default" ? 1 : 0); }
  // Layers that run: up to the deepest selected hidden state.
  int64_t layers_used() const {
    int64_t m = 0;
    for (int64_t l : feature_layers) m = l > m ? l : m;
    return m;
  }
};

struct GenerationDefaults {
  std::vector<int32_t> eos_token_ids;  // generation_config.json eos_token_id (int or list)
  double temperature = -1;             // < 0: not given
  double top_p = -1;
  int64_t top_k = -1;
  double repetition_penalty = -1;
};

struct SourceTensor {
  std::string name;  // HF name
  SourceDType dtype;
  std::vector<int64_t> shape;     // HF order, outermost first
  const uint8_t* data = nullptr;  // into a mapped file, or a buffer owned by the ModelSource
                                  // (GGUF q/k after un-permutation); valid while it lives
  size_t nbytes = 0;
  std::string file;  // which file it came from (for error messages)
};

class ModelSource {
 public:
  virtual ~ModelSource() = default;

  // Opens a HF model directory (config.json + safetensors) or a .gguf file.
  // Errors name the file and the field: "config.json: field 'hidden_size': missing".
  static Expected<std::unique_ptr<ModelSource>> Open(const std::string& path);

  virtual const DecoderConfig& config() const = 0;
  // The vision tower and projector of a LLaVA-style model; nullptr for text-only models.
  virtual const VisionConfig* vision() const { return nullptr; }
  virtual const xrt::TokenizerSpec& tokenizer() const = 0;
  virtual const GenerationDefaults& generation() const = 0;
  // Jinja chat template source, "" if the model has none.
  virtual const std::string& chat_template() const = 0;
  // Every file the model was read from (for provenance hashing), sorted.
  virtual std::vector<std::string> input_files() const = 0;

  // All tensor names, sorted.
  virtual std::vector<std::string> tensor_names() const = 0;
  // Tensor metadata and raw bytes; NotFound if absent.
  virtual Expected<const SourceTensor*> tensor(const std::string& name) const = 0;
  // Tensor converted (dequantized, permuted as documented above) to f32, row-major HF layout.
  Expected<std::vector<float>> ReadF32(const std::string& name) const;
};

// The part of a ModelSource every frontend implements the same way: the
// metadata, filled by the frontend while it loads, and its tensors indexed by
// HF name (the SourceTensors are owned by the frontend and live as long as it).
class IndexedModelSource : public ModelSource {
 public:
  const DecoderConfig& config() const override { return config_; }
  const VisionConfig* vision() const override { return vision_ ? &*vision_ : nullptr; }
  const xrt::TokenizerSpec& tokenizer() const override { return tokenizer_; }
  const GenerationDefaults& generation() const override { return generation_; }
  const std::string& chat_template() const override { return chat_template_; }
  std::vector<std::string> tensor_names() const override;
  // NotFound naming `origin_` if absent.
  Expected<const SourceTensor*> tensor(const std::string& name) const override;

 protected:
  IndexedModelSource() = default;

  std::string origin_;  // the directory or file, for messages
  DecoderConfig config_;
  std::optional<VisionConfig> vision_;
  xrt::TokenizerSpec tokenizer_;
  GenerationDefaults generation_;
  std::string chat_template_;
  std::map<std::string, const SourceTensor*> tensors_;
};

// Dequantizes/converts `n` elements of `src` (of type `t`) to f32. For block
// types `n` must be a multiple of the block size. Exposed for tests.
Status ConvertToF32(SourceDType t, const uint8_t* src, size_t nbytes, int64_t n, float* out);

}  // namespace xcc
