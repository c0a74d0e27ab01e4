// What `xcc check` and `xcc tune-buckets` need to know about how an artifact
// will be served: the serving limits (the artifact's, or a serving config's)
// and the replay parameters that match xrt run. The artifact's compiled
// limits, buckets and engine parameters are read by the runtime's own
// functions (runtime/engine/artifact_params.h), so the check sees the engine
// xrt run builds.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/replay.h"
#include "runtime/engine/serving_limits.h"

namespace xrt {
class Artifact;
}

namespace xcc {

// How an artifact is served: xrt run's limits, the images one request may
// carry (xrt run --limit-mm-per-prompt) and multi-LoRA (vLLM's --enable-lora,
// --max-loras, --max-lora-rank).
struct ServingConfig {
  xrt::ServingLimits limits;
  // 0 for a text-only artifact; the compiled max_images unless the config says.
  int64_t limit_mm_per_prompt = 0;
  // LoRA: by default on with the compiled max_loras / max_lora_rank for an
  // artifact with LoRA, off (0, 0) for one without.
  bool enable_lora = false;
  int64_t max_loras = 0;
  int64_t max_lora_rank = 0;
};

// The artifact's limits, overridden by a serving config file if `path` is
// non-empty: a JSON object whose keys are xrt run's flags (dashes or
// underscores): max-num-seqs, max-num-batched-tokens, max-model-len (positive
// integers), limit-mm-per-prompt (a non-negative integer, or vLLM's
// {"image": N}), enable-lora (a boolean), max-loras and max-lora-rank
// (positive integers; either one enables LoRA, and with enable-lora alone on
// an artifact without LoRA they take vLLM's defaults 1 and 16). Unknown keys,
// and max-loras / max-lora-rank with enable-lora false, are errors: a typo
// must not pass a CI gate.
xrt::Expected<ServingConfig> LoadServingConfig(const xrt::Artifact& artifact,
                                               const std::string& path);

// Replay parameters for serving `artifact` under `serving` with `buckets`:
// the engine xrt run builds by default (KV pool, prefix caching on), on an
// artifact compiled for `serving`'s token budget; max_num_seqs, max_model_len
// and max_loras are clamped to the compiled ones (going beyond them is a
// coverage finding of its own). With LoRA served, the replay has the
// artifact's LoRA geometry with serving.max_loras slots. The caller sets
// lm_step_executables when the buckets are the artifact's.
xrt::Expected<xrt::ReplayParams> ReplayParamsFor(const xrt::Artifact& artifact,
                                                 const ServingConfig& serving,
                                                 xrt::BucketTable buckets);

// The artifact's lm_step executables, LoRA variants included, named from their
// fields (xpk::abi::ExecutableName(kind, num_tokens, lora_mode)) as the
// ModelRunner finds them.
std::set<std::string> LmStepExecutablesOf(const xrt::Artifact& artifact);

// Reads a JSONL trace, encoding text prompts with the artifact's tokenizer;
// its images take the artifact's image token and tokens_per_image; a line
// naming a LoRA adapter is an error unless `serving` serves LoRA.
xrt::Expected<std::vector<xrt::TraceRequest>> ReadTraceFor(const xrt::Artifact& artifact,
                                                           const ServingConfig& serving,
                                                           const std::string& path);

}  // namespace xcc
