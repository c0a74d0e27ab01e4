// InputBuilder: THE one place that turns a scheduled step into the padded,
// fixed-shape inputs of the compiled executables and picks their buckets
// (docs/DESIGN.md §2).
//
// A step is a list of requests, each contributing num_tokens new tokens (a
// prefill chunk or one decode token) on top of num_computed_tokens already in
// the KV cache. The requests' tokens are laid out back to back in the given
// order (the scheduler decides that order, e.g. decodes first), then padded:
//
//   lm_step inputs, length token_bucket (smallest token bucket >= num_tokens):
//     token_ids      real: the token;            padding: 0
//     positions      real: num_computed + i;     padding: 0
//     slot_mapping   real: KV slot of position;  padding: -1 (no KV write)
//     embed_source   real: row in the encoder-output cache, -1 for text;  padding: -1
//     lora_slot      real: the request's slot (-1: none);                 padding: -1
//   lora_mode: which lm_step variant runs (docs/DESIGN.md §2): none when no
//     request has an adapter slot, single when every request has the same one
//     (the executable reads lora_slot[0] for every row), mixed otherwise.
//   request tables (max_num_reqs rows, the lm_step executables' fixed size):
//     block_tables   [max_num_reqs * max_blocks_per_req], row r = request r's
//                    table, the tail of the row 0; unused rows all 0
//     seq_lens       [max_num_reqs]: num_computed + num_tokens; unused rows 0
//     query_start_loc[max_num_reqs + 1]: qsl[0] = 0, qsl[r+1] = qsl[r] + num_tokens_r;
//                    entries past the last request repeat the total token count
//   lm_logits input, length req_bucket (smallest req bucket >= num_logits):
//     logits_indices real: index in the flattened batch of the LAST token of
//                    the j-th request with needs_logits; padding: -1 (the
//                    kernel emits a zero row for an index out of range)
//
// slot = block_table[pos / block_size] * block_size + pos % block_size.
// When no request needs logits, num_logits == req_bucket == 0 and
// logits_indices is empty: the caller skips lm_logits.
//
// Build validates the whole step before writing anything: on error *out is
// unchanged. Errors name the request index and the offending value:
//   InvalidArgument: an empty step, a request with no new tokens or null
//     pointers, negative num_computed_tokens, a token id outside
//     [0, vocab_size) (when vocab_size is set), a negative block id, an
//     embed_source < -1, a lora_slot < -1;
//   OutOfRange: more requests than max_num_reqs, more tokens than the largest
//     token bucket (the caller must split the step), more logits than the
//     largest req bucket, a block table too short for the request's positions
//     or longer than max_blocks_per_req, a position or slot beyond int32.
//
// Allocation: the output vectors are resized with assign(), which keeps
// their capacity; after Reserve(out) (or one step of the largest bucket) a
// Build allocates nothing.
//
// Ownership: Build reads the caller's token ids, block tables and embed
// sources only during the call. Thread-safety: an InputBuilder is immutable
// after Create; Build is const and may run on several threads with distinct
// outputs.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/bucket_table.h"
#include "runtime/engine/serving_limits.h"
#include "schemas/artifact_generated.h"  // xpk::LoraMode

namespace xrt {

struct ScheduledRequest {
  const int32_t* token_ids = nullptr;  // this step's new tokens [num_tokens]
  int64_t num_tokens = 0;              // this step's new tokens (>= 1)
  int64_t num_computed_tokens = 0;     // context already in the KV cache
  // The request's block table; must cover positions [0, num_computed + num_tokens).
  const std::vector<int32_t>* block_table = nullptr;
  // Sample after this step (the last chunk of a prefill, or a decode).
  bool needs_logits = false;
  int32_t lora_slot = -1;  // LoRA slot of every token of the request; -1: none
  // Optional [num_tokens]: the encoder-output cache row of each new token
  // (image placeholder tokens), -1 for a text token. nullptr: all text.
  const int32_t* embed_source = nullptr;
};

struct InputBuilderParams {
  BucketTable buckets;
  int64_t max_num_reqs = 0;        // rows of the lm_step request tables
  int64_t max_blocks_per_req = 0;  // columns of block_tables
  int64_t block_size = 0;          // tokens per KV block
  int64_t vocab_size = 0;          // > 0: token ids are checked against it
};

struct StepInputs {
  int64_t token_bucket = 0;                       // lm_step bucket
  int64_t req_bucket = 0;                         // lm_logits bucket; 0 when num_logits == 0
  int64_t num_tokens = 0;                         // real tokens (<= token_bucket)
  int64_t num_reqs = 0;                           // real requests (<= max_num_reqs)
  int64_t num_logits = 0;                         // requests with needs_logits (<= req_bucket)
  xpk::LoraMode lora_mode = xpk::LoraMode::none;  // the lm_step variant

  std::vector<int32_t> token_ids;        // [token_bucket]
  std::vector<int32_t> positions;        // [token_bucket]
  std::vector<int32_t> slot_mapping;     // [token_bucket]
  std::vector<int32_t> block_tables;     // [max_num_reqs * max_blocks_per_req]
  std::vector<int32_t> seq_lens;         // [max_num_reqs]
  std::vector<int32_t> query_start_loc;  // [max_num_reqs + 1]
  std::vector<int32_t> embed_source;     // [token_bucket]
  std::vector<int32_t> lora_slot;        // [token_bucket]
  std::vector<int32_t> logits_indices;   // [req_bucket]

  // Images to encode before lm_step (vision_encode; BuildImages), in order:
  // each one's pixels (the tower's input, owned by its request) and the first
  // encoder-cache row its features go to. image_bucket 0: none this step.
  int64_t image_bucket = 0;
  std::vector<const std::vector<float>*> image_pixels;
  std::vector<int64_t> image_cache_rows;
};

class InputBuilder {
 public:
  // InvalidArgument for an empty bucket table or a field < 1 (vocab_size may
  // be 0: unchecked).
  static Expected<InputBuilder> Create(InputBuilderParams params);
  // The builder of executables compiled for `compiled` with `buckets`:
  // compiled.max_num_seqs request rows of max_blocks_per_req columns.
  static Expected<InputBuilder> ForCompiled(const ServingLimits& compiled, BucketTable buckets,
                                            int64_t vocab_size = 0);

  // Fills *out for `step` (see the file comment); clears its images.
  Status Build(const std::vector<ScheduledRequest>& step, StepInputs* out) const;

  // Sets the images of *out to encode (clears them when `pixels` is empty) and
  // picks the smallest vision_encode bucket that holds them. InvalidArgument
  // when the lists differ in length, OutOfRange when no image bucket holds
  // them; *out is unchanged on error.
  Status BuildImages(const std::vector<const std::vector<float>*>& pixels,
                     const std::vector<int64_t>& cache_rows, StepInputs* out) const;

  // Gives *out the capacity of the largest buckets, so that Build never
  // allocates.
  void Reserve(StepInputs* out) const;

  const InputBuilderParams& params() const { return params_; }

 private:
  explicit InputBuilder(InputBuilderParams params) : params_(std::move(params)) {}

  Status Validate(const std::vector<ScheduledRequest>& step, int64_t* num_tokens,
                  int64_t* num_logits) const;

  InputBuilderParams params_;
};

}  // namespace xrt
