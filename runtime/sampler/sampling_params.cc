#include "runtime/sampler/sampling_params.h"

#include <cmath>

namespace xrt {

Status ValidateSamplingParams(const SamplingParams& p) {
  if (!std::isfinite(p.temperature) || p.temperature < 0)
    return InvalidArgumentError("temperature must be a finite number >= 0, got {}", p.temperature);
  if (p.top_k < -1)
    return InvalidArgumentError("top_k must be -1 or 0 (off) or a positive count, got {}", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1))
    return InvalidArgumentError("top_p must be in (0, 1], got {}", p.top_p);
  if (!(p.min_p >= 0 && p.min_p <= 1))
    return InvalidArgumentError("min_p must be in [0, 1], got {}", p.min_p);
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    return InvalidArgumentError("presence_penalty must be in [-2, 2], got {}", p.presence_penalty);
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    return InvalidArgumentError("frequency_penalty must be in [-2, 2], got {}",
                                p.frequency_penalty);
  if (!std::isfinite(p.repetition_penalty) || p.repetition_penalty <= 0)
    return InvalidArgumentError("repetition_penalty must be a finite number > 0, got {}",
                                p.repetition_penalty);
  if (p.logprobs < -1 || p.logprobs > SamplingParams::kMaxLogprobs)
    return InvalidArgumentError("logprobs must be -1 (off) or in [0, {}], got {}",
                                SamplingParams::kMaxLogprobs, p.logprobs);
  return Status::Ok();
}

}  // namespace xrt
