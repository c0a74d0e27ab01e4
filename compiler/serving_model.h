// What `xcc check` and `xcc tune-buckets` need to know about how an artifact
// will be served: its compiled buckets, the serving limits (the artifact's,
// or a serving config's), and the replay parameters that match xrt run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/replay.h"

namespace xrt {
class Artifact;
}

namespace xcc {

struct ServingConfig {
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t max_model_len = 0;
};

// The artifact's limits, overridden by a serving config file if `path` is
// non-empty: a JSON object whose keys are xrt run's flags (dashes or
// underscores). Unknown keys are errors: a typo must not pass a CI gate.
xrt::Expected<ServingConfig> LoadServingConfig(const xrt::Artifact& artifact,
                                               const std::string& path);

// Sorted num_tokens buckets of lm_step and num_reqs buckets of lm_logits
// (executables without LoRA).
struct CompiledBuckets {
  std::vector<int64_t> tokens, reqs;
};
CompiledBuckets BucketsOf(const xrt::Artifact& artifact);

// Replay parameters for serving `artifact` under `serving` with `buckets`:
// limits clamped to what the artifact can run, KV cache sized as xrt run
// sizes it by default, prefix caching on (xrt run's default).
xrt::ReplayParams ReplayParamsFor(const xrt::Artifact& artifact, const ServingConfig& serving,
                                  xrt::BucketTable buckets);

// Reads a JSONL trace, encoding text prompts with the artifact's tokenizer.
xrt::Expected<std::vector<xrt::TraceRequest>> ReadTraceFor(const xrt::Artifact& artifact,
                                                           const std::string& path);

}  // namespace xcc
