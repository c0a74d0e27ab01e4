// SplitPrefill: cuts one long prompt into chunks that each fit one step.
//
// For `xrt generate` (one request, nothing else in the batch); the real
// scheduler, which shares the budget with decodes, comes later.
//
// A chunk holds at most min(token_budget, buckets.max_tokens()) tokens. The
// chunks are greedy: every chunk but the last is that maximum, the last holds
// the rest. Fewer steps means fewer passes over the weights, which costs more
// than the padding of the last chunk up to its bucket, so greedy is the right
// default on both CPU and GPU targets.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/bucket_table.h"

namespace xrt {

struct PrefillChunk {
  int64_t begin = 0;       // first token of the chunk (0-based within the prompt part)
  int64_t num_tokens = 0;  // >= 1
};

// Chunks covering tokens [0, num_tokens) in order, back to back. The caller
// adds its num_computed_tokens (e.g. a prefix-cache hit) to `begin`.
// InvalidArgument when num_tokens < 1 or token_budget < 1; FailedPrecondition
// for an empty bucket table.
Expected<std::vector<PrefillChunk>> SplitPrefill(int64_t num_tokens, const BucketTable& buckets,
                                                 int64_t token_budget);

}  // namespace xrt
