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
  // Print the module after every pass whose argument (e.g. "xcc-xg-fuse") is listed.
  std::vector<std::string> dump_ir_after;
};

// Graph pipeline: specialize buckets, fuse, pack weights, plan memory, form
// dispatches. Leaves entry functions (tensor level, annotated with buffers,
// ukernels and dispatch symbols) and dispatch functions (scf/memref level).
mlir::LogicalResult RunGraphPipeline(mlir::ModuleOp module, const PipelineOptions& options);

// Codegen pipeline on a copy of the graph pipeline's output: keeps the dispatch
// functions only and lowers them to the LLVM dialect.
mlir::LogicalResult RunLoweringPipeline(mlir::ModuleOp module, const PipelineOptions& options);

// Registers every dialect the pipelines create in `ctx`.
void LoadPipelineDialects(mlir::MLIRContext* ctx);

}  // namespace xcc
