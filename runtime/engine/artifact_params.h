// What the engine needs to know about a compiled artifact, read in one place
// for xrt (ModelRunner: run, generate) and xcc (check --trace, tune-buckets):
// the compiled serving limits, the compiled buckets, the KV cache geometry and
// default pool, the vocabulary, the model's EOS ids and its sampling defaults.
//
// Thread-safety: pure functions of the (immutable) artifact.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/engine_core.h"
#include "runtime/engine/serving_limits.h"
#include "runtime/kv_cache/kv_cache_storage.h"
#include "runtime/sampler/sampling_params.h"
#include "runtime/vision/image_preprocess.h"

namespace xrt {

class Artifact;

// Manifest.limits.
ServingLimits CompiledLimitsOf(const Artifact& artifact);

// Sorted num_tokens buckets of lm_step and num_reqs buckets of lm_logits
// (executables without LoRA; either may be empty in a broken artifact), and
// num_images buckets of vision_encode (empty for a text-only model).
struct CompiledBuckets {
  std::vector<int64_t> tokens, reqs, images;
};
CompiledBuckets CompiledBucketsOf(const Artifact& artifact);

// The KV cache geometry of the model (num_blocks is left 0, element_bytes 4).
KvCacheParams KvCacheParamsOf(const Artifact& artifact);

// The KV cache element size xrt's `--kv-cache-dtype auto` picks for `artifact`:
// 2 (an f16 cache) when a matmul of its lm_step executables computes in bf16
// or int8 (`xcc compile --compute bf16|int8`: the model already trades
// precision for speed, and halves are read faster and hold twice the tokens),
// 4 (f32, keys and values as computed) otherwise, so that f32 compute keeps
// its agreement with HF.
int64_t AutoKvCacheElementBytes(const Artifact& artifact);

// The model's generation_config defaults (ModelConfig.default_*; a field the
// compiler recorded as "not given" stays unset).
SamplingDefaults SamplingDefaultsOf(const Artifact& artifact);

// Every EOS id of the model: generation_config's and the tokenizer's
// (ModelEosTokenIds).
std::vector<int32_t> EosTokenIdsOf(const Artifact& artifact);

// What the request path and the engine need to know of a LLaVA-style model's
// vision side (ModelConfig.vision).
struct VisionParams {
  int32_t image_token_id = -1;
  std::string image_token;       // its text, e.g. "<image>"
  int64_t tokens_per_image = 0;  // placeholder tokens (= feature rows) per image
  int64_t num_channels = 0;      // the tower's input: [num_channels, image_size, image_size]
  int64_t image_size = 0;
  int64_t max_images_per_prompt = 0;  // as compiled (ServingLimits.max_images)
  int64_t encoder_cache_rows = 0;
  std::vector<int64_t> image_buckets;  // vision_encode num_images buckets, ascending
  ImagePreprocessParams preprocess;
  int64_t pixel_floats() const { return num_channels * image_size * image_size; }
};
// std::nullopt for a text-only model; DataLoss when the vision tables are
// inconsistent (a preprocessing output that is not the tower's input size, ...).
Expected<std::optional<VisionParams>> VisionParamsOf(const Artifact& artifact);

// EngineCoreParams for serving `artifact` as xrt run does by default: its
// compiled limits and buckets, vocabulary, EOS ids, and the KV pool xrt run
// sizes when given no --kv-cache-memory / --num-kv-blocks, for a cache of
// kv_element_bytes per value (4: f32; 2: f16; std::nullopt: the size `auto`
// picks, AutoKvCacheElementBytes). The caller sets the executor, tokenizer,
// requested limits and switches. Errors of BucketTable::Create (an artifact
// without lm_step or lm_logits executables).
Expected<EngineCoreParams> EngineCoreParamsFor(
    const Artifact& artifact, std::optional<int64_t> kv_element_bytes = std::nullopt);

}  // namespace xrt
