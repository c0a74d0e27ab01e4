// ModelSource for a Hugging Face model directory:
//   config.json, [generation_config.json], tokenizer.json, [tokenizer_config.json],
//   [chat_template.jinja | chat_template.json], and either model.safetensors or
//   model.safetensors.index.json + the shards its weight_map names.
#pragma once

#include <memory>
#include <string>

#include "compiler/frontend/model_source.h"

namespace xcc {

// Opens and validates the directory: config fields, every safetensors header,
// the index's weight_map against the shards, and the decoder tensors
// (ValidateDecoderTensors): each one present with its shape, and no other
// tensor except what transformers skips on load (rotary_emb.inv_freq).
Expected<std::unique_ptr<ModelSource>> OpenHfModelDir(const std::string& dir);

}  // namespace xcc
