// Generate: one request, start to finish, on a ModelRunner (the offline path
// behind `xrt generate` and the numerics tests; the serving engine batches
// many requests instead).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/model_runner/model_runner.h"
#include "runtime/sampler/sampler.h"

namespace xrt {

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids
  SamplingParams sampling;
  int64_t max_tokens = 16;
  bool ignore_eos = false;
  // Prefill chunk size limit; 0: the artifact's max_num_batched_tokens.
  int64_t max_chunk_tokens = 0;
  // Called with each generated token as soon as it is sampled.
  std::function<void(int32_t)> on_token;
  // If set, receives the logits of the prompt's last position.
  std::vector<float>* prompt_logits = nullptr;
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  std::string finish_reason;  // "stop" (eos) or "length"
  int64_t prompt_tokens = 0;
  int64_t prefill_steps = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;  // after the first token
};

// Errors: InvalidArgument for an empty prompt or prompt + max_tokens beyond
// max_model_len (naming both); errors of the runner pass through.
Expected<GenerateResult> Generate(ModelRunner& runner, const GenerateRequest& request);

}  // namespace xrt
