// StopChecker: decides, token by token, when a request is done and which of
// its decoded text may be sent now. The one place for every stop rule:
//
//   - a stop token id of the request, or an EOS id of the model (unless
//     ignore_eos): finish "stop"; the token itself adds no text;
//   - a stop string: finish "stop"; the text is cut before the first match
//     (the stop string and what follows are never sent). A tail of the text
//     that may be the start of a stop string is held back until it is known
//     not to be one;
//   - max_tokens generated, or prompt + generated reaching max_model_len:
//     finish "length" (checked after the stop rules, so a token that is both
//     EOS and the last allowed one finishes "stop").
//
// Text comes from a StreamingDetokenizer over the request's tokens (special
// tokens skipped unless the request keeps them). Without a tokenizer (trace
// replay) there is no text and stop strings never match.
//
// Ownership: holds a pointer to the tokenizer (which must outlive it) and a
// copy of the conditions. One per request; thread-compatible.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tokenizer/streaming_detokenizer.h"
#include "runtime/tokenizer/tokenizer.h"

namespace xrt {

struct StopConditions {
  std::vector<std::string> stop;        // stop strings (empty ones are ignored)
  std::vector<int32_t> stop_token_ids;  // stop even with ignore_eos
  std::vector<int32_t> eos_token_ids;   // the model's (ModelEosTokenIds)
  bool ignore_eos = false;
  int64_t max_tokens = 0;  // >= 1
  int64_t prompt_tokens = 0;
  int64_t max_model_len = 0;  // 0: no limit besides max_tokens
};

// Every EOS id of a model: those of generation_config (the artifact's
// ModelConfig.eos_token_ids) and the tokenizer's eos_id (-1: none), without
// repeats, in that order. HF generate and vLLM stop on any of them.
std::vector<int32_t> ModelEosTokenIds(const std::vector<int32_t>& generation_config_eos,
                                      int32_t tokenizer_eos);

// What one generated token did to a request.
struct StopResult {
  std::string text;           // text to send now
  std::string finish_reason;  // "stop", "length", or "" (continues)
  bool finished() const { return !finish_reason.empty(); }
};

class StopChecker {
 public:
  // `tokenizer` may be null (no text).
  StopChecker(StopConditions conditions, const Tokenizer* tokenizer, bool skip_special_tokens);

  // The request generated `token` (its num_generated-th token, 1-based).
  // After a finished result the checker must not be used again.
  StopResult Append(int32_t token, int64_t num_generated);

  // Ends the request for a reason the checker did not decide (abort, error):
  // returns the text held back, plus a U+FFFD for incomplete UTF-8.
  std::string Flush();

 private:
  bool IsStopToken(int32_t token) const;
  // Length of the longest tail of held_ that is a proper prefix of a stop string.
  size_t HeldBackLength() const;

  StopConditions c_;
  std::optional<StreamingDetokenizer> detok_;
  std::string held_;  // decoded, not yet sent
};

}  // namespace xrt
