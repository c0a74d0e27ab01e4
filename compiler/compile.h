// `xcc compile`: model -> .xpk artifact.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/serving_limits.h"

namespace xcc {

struct CompileOptions {
  std::string model_path;   // HF model directory or .gguf file
  std::string output_path;  // .xpk
  // Serving limits the artifact is compiled for. max_model_len 0:
  // min(max_position_embeddings, 4096); max_blocks_per_req is derived.
  xrt::ServingLimits limits = {/*max_num_seqs=*/16, /*max_num_batched_tokens=*/256,
                               /*max_model_len=*/0, /*block_size=*/16, /*max_blocks_per_req=*/0};
  // Buckets: explicit list, or the defaults from max_num_batched_tokens (+ gap).
  std::vector<int64_t> token_buckets;
  int64_t token_bucket_gap = 0;
  // A LLaVA-style model: vision_encode buckets (num_images; empty: 1, 2, 4, ... up to
  // the images one step's encoder budget holds), the encoder-output cache in rows (0:
  // automatic, see xrt::ComputeEncoderBudget) and the most images one request may carry.
  std::vector<int64_t> image_buckets;
  int64_t encoder_cache_rows = 0;
  int64_t max_images_per_prompt = 8;
  // Multi-LoRA: with enable_lora every lm_step bucket also gets a single-adapter and
  // a mixed-adapter executable with max_loras adapter slots of rank max_lora_rank on
  // lora_target_modules (short PEFT names; empty: all seven). lora_modules are
  // PEFT adapter directories packed into the artifact (name, path).
  bool enable_lora = false;
  int64_t max_loras = 1;
  int64_t max_lora_rank = 16;
  std::vector<std::string> lora_target_modules;
  std::vector<std::pair<std::string, std::string>> lora_modules;
  // How linear weights and embedding tables are stored (runtime/kernels/weight_format.h):
  // "auto" keeps each tensor's own format where a kernel exists for it (GGUF Q8_0 / Q4_0 /
  // Q4_1 / Q4_K / Q5_K / Q6_K, f16 / bf16 safetensors; other block types are dequantized to
  // f32); "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1" convert or quantize every one of them
  // (a weight whose K is not a multiple of the format's block stays f32); "q4_k", "q5_k",
  // "q6_k" are rejected (no K-quant quantizer).
  std::string weight_dtype = "auto";
  // What every linear layer's matmul multiplies (runtime/kernels/matmul.h, ComputeType):
  // "f32", "bf16" (activations and weights rounded to bf16, sums in f32; for bf16
  // matrix units) or "int8" (activations quantized to int8 per block, integer dot
  // products with the integer quants of q8_0/q4_0/q4_1/q4_k/q5_k/q6_k weights, as
  // llama.cpp; weights without integer quants compute in f32). With "bf16" the vision
  // tower's attention (dense_attention.h) and the decoder's paged attention
  // (attention.h) compute their two products in bf16 too; norms and LoRA stay f32.
  std::string compute = "f32";
  std::string target = "host";
  std::vector<std::string> dump_ir_after;
  bool quiet = false;  // no progress / summary on stderr
};

// What `xcc compile` prints at the end.
struct CompileSummary {
  int64_t num_executables = 0;         // in the manifest
  int64_t num_dispatch_functions = 0;  // in the code segment
  uint64_t code_bytes = 0;             // the code segment (one shared object)
  uint64_t weight_bytes = 0;
  // Per stored format ("q4_1", "f32", ...): how many weights and their bytes.
  struct FormatUse {
    int64_t weights = 0;
    uint64_t bytes = 0;
  };
  std::map<std::string, FormatUse> weight_formats;
  // Weights stored differently from what --weight-dtype asked for, and why.
  std::vector<std::string> weight_notes;
  uint64_t max_arena_bytes = 0;  // the largest executable's scratch arena
  uint64_t file_bytes = 0;
  double seconds = 0;
  // A model with vision: its vision_encode buckets, the tokens each image becomes
  // and the encoder cache rows; empty / 0 otherwise.
  std::vector<int64_t> image_buckets;
  int64_t tokens_per_image = 0;
  int64_t encoder_cache_rows = 0;
};

xrt::Expected<CompileSummary> Compile(const CompileOptions& options);

// Compiler version recorded in artifacts.
inline constexpr const char* kXccVersion = "0.1.0";

}  // namespace xcc
