// SamplingParams: the per-request knobs of token sampling, with the meaning
// and ranges of vLLM / the OpenAI API, and their validation.
#pragma once

#include <cstdint>
#include <optional>

#include "runtime/base/status.h"

namespace xrt {

// Which distribution logprobs are reported from.
enum class LogprobsMode {
  // log-softmax of the distribution actually sampled from: after penalties,
  // temperature, min_p, top_k and top_p (tokens these remove have -inf).
  // With temperature 0 (greedy): after penalties, at temperature 1, untruncated.
  // This is vLLM's logprobs_mode="processed_logprobs".
  kProcessed,
  // log-softmax of the model's logits as given (vLLM's "raw_logprobs", the
  // default of vLLM v1).
  kRaw,
};

struct SamplingParams {
  static constexpr int kMaxLogprobs = 20;  // as vLLM's default max_logprobs / OpenAI's top_logprobs

  float temperature = 1.0f;  // >= 0; < 1e-5 means greedy (argmax, ties -> lowest id)
  int32_t top_k = -1;        // > 0 keeps the k most likely tokens; -1 or 0: off
  float top_p = 1.0f;        // in (0, 1]: smallest set of top tokens with mass >= top_p
  float min_p = 0.0f;        // in [0, 1]: drop tokens with p < min_p * p_max
  float presence_penalty =
      0.0f;  // in [-2, 2]: logit -= presence_penalty if the token was generated
  float frequency_penalty = 0.0f;  // in [-2, 2]: logit -= frequency_penalty * times generated
  float repetition_penalty =
      1.0f;               // > 0: tokens of prompt or output: logit / rp if > 0, else logit * rp
  bool has_seed = false;  // false: seeded from std::random_device
  uint64_t seed = 0;
  int32_t logprobs = -1;  // -1: none; 0: the sampled token's; N: also the top N (<= kMaxLogprobs)
  LogprobsMode logprobs_mode = LogprobsMode::kProcessed;

  bool greedy() const { return temperature < 1e-5f; }
};

// The model's sampling defaults (its generation_config.json). A request field
// these cover that the client leaves unset takes the model's value, as in vLLM.
struct SamplingDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::optional<float> repetition_penalty;
};

// Which of the fields SamplingDefaults covers a request set explicitly.
struct SamplingFieldsSet {
  bool temperature = false;
  bool top_p = false;
  bool top_k = false;
  bool repetition_penalty = false;
};

// InvalidArgument naming the parameter and value, e.g.
// "top_p must be in (0, 1], got 1.5".
Status ValidateSamplingParams(const SamplingParams& params);

}  // namespace xrt
