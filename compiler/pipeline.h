// The xcc pass pipelines, assembled in one place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

namespace xcc {

struct PipelineOptions {
  std::vector<int64_t> token_buckets;  // lm_step num_tokens buckets
  std::vector<int64_t> req_buckets;    // lm_logits num_reqs buckets
  std::vector<int64_t> image_buckets;  // vision_encode num_images buckets
  int64_t pack_nr = 16;                // panel width of packed weights
  // Multi-LoRA (xcc-xg-inject-lora): lora_slots > 0 adds the single- and
  // mixed-adapter variants of every lm_step bucket.
  int64_t lora_slots = 0;                        // max_loras
  int64_t lora_rank = 0;                         // max_lora_rank
  std::vector<std::string> lora_target_modules;  // short names
  // Print the module after every pass whose argument (e.g. "xcc-xg-fuse") is listed.
  std::vector<std::string> dump_ir_after;
};

// Graph pipeline: specialize buckets, fuse, pack weights, inject LoRA (when
// asked), plan memory, form dispatches. Leaves entry functions (tensor level, annotated with
// buffers, ukernels and dispatch symbols) and dispatch functions (scf/memref level).
mlir::LogicalResult RunGraphPipeline(mlir::ModuleOp module, const PipelineOptions& options);

// Codegen pipeline on a copy of the graph pipeline's output: keeps the dispatch
// functions only and lowers them to the LLVM dialect.
mlir::LogicalResult RunLoweringPipeline(mlir::ModuleOp module, const PipelineOptions& options);

// Registers every dialect the pipelines create in `ctx`.
void LoadPipelineDialects(mlir::MLIRContext* ctx);

}  // namespace xcc
