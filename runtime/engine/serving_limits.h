// ServingLimits: the limits an artifact is compiled for and an engine serves
// at, as one plain struct shared by the compiler (xcc compile, check,
// tune-buckets) and the runtime (xrt run, xrt generate).
//
// The compiled limits are baked into the executables' shapes: max_num_seqs is
// the request rows of lm_step (block_tables, seq_lens), max_model_len and
// block_size give max_blocks_per_req (the columns of block_tables), and the
// token buckets are chosen for max_num_batched_tokens. An engine may serve at
// lower limits, never higher ones: ResolveServingLimits and
// LimitsBeyondCompiled say which limit and how to recompile.
//
// Plain C++17, no dependency beyond runtime/base. Thread-safety: pure
// functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace xrt {

struct ServingLimits {
  int64_t max_num_seqs = 0;            // requests per step (and running at once)
  int64_t max_num_batched_tokens = 0;  // token budget per step
  int64_t max_model_len = 0;           // prompt + generated tokens of one request
  int64_t block_size = 0;              // tokens per KV cache block
  int64_t max_blocks_per_req = 0;      // ceil(max_model_len / block_size), as compiled
};

// A limit asked for beyond the compiled one. `message` names both values, the
// step shapes that would have no executable, and the recompile flag.
struct LimitExcess {
  std::string field;  // "max_num_seqs", "max_num_batched_tokens" or "max_model_len"
  int64_t requested = 0;
  int64_t compiled = 0;
  std::string message;
};

// Every field of max_num_seqs, max_num_batched_tokens and max_model_len that
// `requested` sets (> 0) above `compiled`, in that order.
std::vector<LimitExcess> LimitsBeyondCompiled(const ServingLimits& compiled,
                                              const ServingLimits& requested);

// The limits to serve at: each of max_num_seqs, max_num_batched_tokens and
// max_model_len that `requested` leaves at 0 takes the compiled value; the
// KV geometry (block_size, max_blocks_per_req) is always the compiled one.
// InvalidArgument with the first LimitExcess's message when a requested limit
// exceeds the compiled one, or when one is negative.
Expected<ServingLimits> ResolveServingLimits(const ServingLimits& compiled,
                                             const ServingLimits& requested);

}  // namespace xrt
