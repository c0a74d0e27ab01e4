// The tensors a Llama-family decoder graph reads, with their HF names and
// shapes, and a check that a ModelSource provides them.
// Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/frontend/model_source.h"

namespace xcc {

struct DecoderTensorSpec {
  std::string name;            // HF name
  std::vector<int64_t> shape;  // HF shape, outermost first
  bool required = true;        // false: checked only if present (lm_head.weight when tied)
};

// Every tensor the decoder graph of `c` uses, in a stable order: embeddings,
// then per layer (input_layernorm, q/k/v[/biases], o, post_attention_layernorm,
// gate, up, down), then model.norm and lm_head.
std::vector<DecoderTensorSpec> DecoderTensorSpecs(const DecoderConfig& c);

// Every tensor the vision graph of `v` reads (LLaVA names after the frontend's
// normalization: vision_tower.vision_model.*, multi_modal_projector.*): the
// embeddings, [pre-layernorm,] the layers up to v.layers_used(), the projector.
// `text_hidden` is the decoder's hidden size (the projector's output).
std::vector<DecoderTensorSpec> VisionTensorSpecs(const VisionConfig& v, int64_t text_hidden);

// Whether a LLaVA checkpoint tensor is one the vision graph may leave unread:
// layers past the deepest selected feature layer, the post-layernorm (applied
// only to the pooled output), SigLIP's pooling head.
bool UnusedVisionTensor(const std::string& name);

// Checks that every tensor of DecoderTensorSpecs(source.config()) (and, for a
// model with vision, VisionTensorSpecs) exists with
// its shape, and that the source holds no other tensor except those
// `ignored` accepts (what the format's reference loader skips). Errors name
// the tensor and expected vs actual shape, e.g.
//   "tensor 'model.layers.3.self_attn.k_proj.weight' (model.safetensors): shape [64, 576], expected
//   [192, 576]",
// or the tensors the graph would not read.
Status ValidateDecoderTensors(const ModelSource& source,
                              bool (*ignored)(const std::string& name) = nullptr);

// "[a, b, c]"
std::string ShapeToString(const std::vector<int64_t>& shape);

}  // namespace xcc
