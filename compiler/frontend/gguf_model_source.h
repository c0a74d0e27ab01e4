// ModelSource for a GGUF file (llama.cpp's format).
//
// Names are mapped to HF names (blk.N.attn_q.weight -> model.layers.N.self_attn.q_proj.weight,
// ...), dims are reversed to HF's outermost-first order, and for architectures
// converted with llama.cpp's rotary row permutation (llama, mistral) the rows of
// q_proj/k_proj weights and biases are put back in HF order. That un-permutation
// is done once at open on the raw bytes (rows are whole blocks), so both
// tensor()->data and ReadF32 are in HF layout; those tensors' data points into
// buffers owned by the ModelSource instead of into the mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "compiler/frontend/gguf_file.h"
#include "compiler/frontend/model_source.h"

namespace xcc {

// Opens and validates a GGUF model (metadata, tensors, decoder tensors). As in
// llama.cpp, a tensor the decoder graph does not read is an error.
Expected<std::unique_ptr<ModelSource>> OpenGgufModel(const std::string& path);

// DecoderConfig from the `<arch>.*` keys. Tensor-dependent fields
// (tie_word_embeddings, attention_bias, attention_output_bias) are filled from
// the tensor list.
Expected<DecoderConfig> DecoderConfigFromGguf(const GgufFile& f);

// GGUF tensor name -> HF tensor name; names without a mapping are returned unchanged.
std::string GgufToHfTensorName(const std::string& gguf_name);

// Inverse of llama.cpp's rotary permutation of q/k rows
// (w.reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2).reshape(rows, cols)):
// `in` holds `rows` rows of `row_bytes` bytes in GGUF order; `out` receives them
// in HF order. InvalidArgument unless rows is a multiple of 2 * n_head.
Status UnpermuteRotaryRows(const uint8_t* in, size_t row_bytes, int64_t rows, int64_t n_head,
                           uint8_t* out);

}  // namespace xcc
