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
};

// Returns a module with two entry functions whose batch dimension is symbolic:
//   @lm_step(token_ids, positions, slot_mapping, block_tables, seq_lens,
//            query_start_loc, embed_source, lora_slot) -> hidden_states [T, D]
//     bucket parameter num_tokens (T);
//   @lm_logits(hidden_states [max_token_bucket, D], logits_indices [R]) -> logits [R, V]
//     bucket parameter num_reqs (R).
// Arguments and results carry their ABI names in `xg.name`.
mlir::OwningOpRef<mlir::ModuleOp> BuildDecoderModule(mlir::MLIRContext* ctx,
                                                     const DecoderConfig& config,
                                                     const DecoderBuildOptions& options);

// RoPE inverse frequencies for `config` (HF's default / linear / llama3 rules), in f32.
std::vector<float> RopeInverseFrequencies(const DecoderConfig& config);

}  // namespace xcc
