// Builds the xg functions of a Llama-family decoder from its config.
#pragma once

#include <cstdint>
#include <string>

#include "compiler/frontend/model_source.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace xcc {

// Name of the synthesized weight holding RoPE inverse frequencies (with the
// config's rope scaling applied), [head_dim / 2] f32.
inline constexpr const char* kRopeInvFreqWeight = "xcc.rope_inv_freq";

struct DecoderBuildOptions {
  int64_t max_num_reqs = 0;        // rows of block_tables / seq_lens
  int64_t max_blocks_per_req = 0;  // columns of block_tables
  int64_t max_token_bucket = 0;    // rows of lm_logits' hidden_states input
  // A LLaVA-style model: builds @vision_encode and lm_step's merge of encoder rows.
  const VisionConfig* vision = nullptr;
  int64_t encoder_cache_rows = 0;  // rows of the encoder-output cache lm_step reads
};

// Returns a module with two entry functions whose batch dimension is symbolic:
//   @lm_step(token_ids, positions, slot_mapping, block_tables, seq_lens,
//            query_start_loc, embed_source, lora_slot) -> hidden_states [T, D]
//     bucket parameter num_tokens (T);
//   @lm_logits(hidden_states [max_token_bucket, D], logits_indices [R]) -> logits [R, V]
//     bucket parameter num_reqs (R).
// With options.vision, lm_step reads image rows from the encoder cache
// (`xg.merge_rows` of its embeddings, `embed_source` and `xg.encoder_cache`), and
//   @vision_encode(pixel_values [N, C * S * S]) -> image_features [N * tokens_per_image, D]
//     bucket parameter num_images (N): tower up to the deepest feature layer,
//     feature selection, projector.
// Arguments and results carry their ABI names in `xg.name`.
mlir::OwningOpRef<mlir::ModuleOp> BuildDecoderModule(mlir::MLIRContext* ctx,
                                                     const DecoderConfig& config,
                                                     const DecoderBuildOptions& options);

// RoPE inverse frequencies for `config` (HF's default / linear / llama3 rules), in f32.
std::vector<float> RopeInverseFrequencies(const DecoderConfig& config);

}  // namespace xcc
