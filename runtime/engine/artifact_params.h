// What the engine needs to know about a compiled artifact, read in one place
// for xrt (ModelRunner: run, generate) and xcc (check --trace, tune-buckets):
// the compiled serving limits, the compiled buckets, the KV cache geometry and
// default pool, the vocabulary, the model's EOS ids and its sampling defaults.
//
// Thread-safety: pure functions of the (immutable) artifact.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/engine_core.h"
#include "runtime/engine/serving_limits.h"
#include "runtime/kv_cache/kv_cache_storage.h"
#include "runtime/sampler/sampling_params.h"

namespace xrt {

class Artifact;

// Manifest.limits.
ServingLimits CompiledLimitsOf(const Artifact& artifact);

// Sorted num_tokens buckets of lm_step and num_reqs buckets of lm_logits
// (executables without LoRA); either may be empty in a broken artifact.
struct CompiledBuckets {
  std::vector<int64_t> tokens, reqs;
};
CompiledBuckets CompiledBucketsOf(const Artifact& artifact);

// The KV cache geometry of the model (num_blocks is left 0).
KvCacheParams KvCacheParamsOf(const Artifact& artifact);

// The model's generation_config defaults (ModelConfig.default_*; a field the
// compiler recorded as "not given" stays unset).
SamplingDefaults SamplingDefaultsOf(const Artifact& artifact);

// Every EOS id of the model: generation_config's and the tokenizer's
// (ModelEosTokenIds).
std::vector<int32_t> EosTokenIdsOf(const Artifact& artifact);

// EngineCoreParams for serving `artifact` as xrt run does by default: its
// compiled limits and buckets, vocabulary, EOS ids, and the KV pool xrt run
// sizes when given no --kv-cache-memory / --num-kv-blocks. The caller sets
// the executor, tokenizer, requested limits and switches. Errors of
// BucketTable::Create (an artifact without lm_step or lm_logits executables).
Expected<EngineCoreParams> EngineCoreParamsFor(const Artifact& artifact);

}  // namespace xrt
