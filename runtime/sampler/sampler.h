// Token sampling for generation: penalties -> temperature -> min_p -> top_k
// -> top_p -> draw, as vLLM orders them.
//
// Determinism: each request owns a SamplingState with its own RNG
// (std::mt19937_64, whose output sequence the C++ standard fixes), so the same
// seed gives the same tokens whatever else runs in the batch, on any standard
// library. One 64-bit draw is used per sampled token (none for greedy):
//   u = (x >> 11) * 2^-53, a double in [0, 1);
// the token is the first, in ascending token id order over the kept tokens,
// whose cumulative weight exp((logit - max) / T) exceeds u * sum (summed in double).
//
// Cost per token: O(V) for greedy; O(V) plus nth_element for top_k; top_p
// finds its nucleus with a weighted quickselect (expected O(V), no full
// sort); nothing sorts more than the kept set. Logprobs add an O(V)
// log-sum-exp and an O(V log N) top-N only when requested (raw mode or
// greedy), or O(kept) in processed mode.
#pragma once

#include <cstdint>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/sampler/sampling_params.h"

namespace xrt {

// Per-request sampling state: params, RNG and the token history penalties use.
// Thread-compatible: one request is sampled by one thread at a time.
class SamplingState {
 public:
  // Validates `params`. vocab_size is the logits width the Sampler will see.
  static Expected<SamplingState> Create(const SamplingParams& params, int32_t vocab_size);

  // Prompt tokens: repetition_penalty applies to them too (as in vLLM).
  // Ids outside [0, vocab_size) are InvalidArgument.
  Status SetPromptTokens(const int32_t* tokens, size_t count);
  // Records a generated token not produced by Sampler::Sample (Sample records
  // its own): it counts for presence/frequency/repetition penalties.
  Status AddOutputToken(int32_t token);

  const SamplingParams& params() const { return params_; }
  int32_t vocab_size() const { return vocab_size_; }
  // How many times `token` was generated so far.
  int32_t OutputCount(int32_t token) const;
  size_t num_output_tokens() const { return num_output_; }

  // The next uniform double in [0, 1) from this request's RNG (53 bits).
  double NextUniform();

 private:
  SamplingState(const SamplingParams& params, int32_t vocab_size, uint64_t seed)
      : params_(params), vocab_size_(vocab_size), rng_(seed) {}
  friend class Sampler;

  SamplingParams params_;
  int32_t vocab_size_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::unordered_set<int32_t> prompt_tokens_;
  size_t num_output_ = 0;
};

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampleResult {
  int32_t token = -1;
  // Only when params.logprobs >= 0 (else 0): the sampled token's logprob in the
  // distribution chosen by params.logprobs_mode and its rank there (1 = most
  // likely; ties share the better rank).
  float logprob = 0;
  int32_t rank = 0;
  // params.logprobs > 0: the N most likely tokens of that distribution, best
  // first, ties by lowest id (tokens removed by truncation come last, at -inf).
  std::vector<TokenLogprob> top_logprobs;
};

// Samples tokens from logits. Holds scratch buffers reused across calls, so
// use one Sampler per thread; it has no per-request state.
class Sampler {
 public:
  // `logits` has state->vocab_size() entries (NaN counts as -inf). Records the
  // chosen token in `state`. InvalidArgument if no logit is finite.
  Expected<SampleResult> Sample(const float* logits, SamplingState* state);

 private:
  void ApplyPenalties(const float* logits, const SamplingState& state);
  void FullLogprobs(const float* values, int32_t vocab, int32_t token, int32_t top_n,
                    SampleResult* out);
  void KeptLogprobs(int32_t vocab, float inv_t, float max_logit, double sum, int32_t token,
                    int32_t top_n, SampleResult* out);

  struct Candidate {
    float x;     // penalized logit
    float w;     // exp((x - max) / T)
    int32_t id;  // token
  };
  std::vector<float> work_;      // penalized logits
  std::vector<Candidate> kept_;  // tokens still in the running
  std::vector<uint8_t> mark_;    // scratch membership flags
};

}  // namespace xrt
