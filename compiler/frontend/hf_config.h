// Parsing of the JSON files of a Hugging Face model directory: config.json,
// generation_config.json and the chat template (tokenizer_config.json,
// chat_template.jinja, chat_template.json).
//
// Errors name the file and the field:
//   "<dir>/config.json: field 'hidden_size': missing"
//   "<dir>/config.json: field 'architectures': unsupported architecture 'X' (supported: ...)"
// Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "compiler/frontend/model_source.h"

namespace xcc {

struct HfConfig {
  DecoderConfig decoder;
  // LlavaForConditionalGeneration: the vision tower and projector (image_token is left
  // empty: it comes from the tokenizer).
  std::optional<VisionConfig> vision;
  std::vector<int32_t> eos_token_ids;  // config.json eos_token_id (int or list), may be empty
};

// Parses config.json: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, or
// LlavaForConditionalGeneration with a CLIP or SigLIP vision_config and one of those as
// text_config. transformers saves a LLaVA's sub-configs as differences from their
// class defaults, so absent fields of text_config / vision_config take the defaults of
// their model_type (LlamaConfig, Qwen2Config, MistralConfig, CLIPVisionConfig,
// SiglipVisionConfig), as transformers would fill them.
Expected<HfConfig> LoadHfConfig(const std::string& path);
// Same, from JSON text; `file` is used in error messages.
Expected<HfConfig> ParseHfConfig(const std::string& json_text, const std::string& file);

// transformers' activation name (ACT2FN key) -> xg.gelu's `approximate` ("none",
// "tanh", "quick"), or "" for an activation the vision graph does not support.
std::string GeluApproximation(const std::string& act);

// Parses generation_config.json: eos_token_id, temperature, top_p, top_k,
// repetition_penalty (all optional).
Expected<GenerationDefaults> LoadGenerationConfig(const std::string& path);
Expected<GenerationDefaults> ParseGenerationConfig(const std::string& json_text,
                                                   const std::string& file);

// The chat template of model directory `dir`, first found of:
// chat_template.jinja (raw text), chat_template.json ({"chat_template": ...}),
// tokenizer_config.json "chat_template" (a string, or a list of {name, template}
// from which "default" is taken). "" if there is none. Appends the files it read
// to `files_read` if non-null.
Expected<std::string> LoadHfChatTemplate(const std::string& dir,
                                         std::vector<std::string>* files_read);

// Whole file as a string; NotFound if it cannot be read.
Expected<std::string> ReadTextFile(const std::string& path);

}  // namespace xcc
