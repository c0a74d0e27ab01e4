#include "runtime/model_runner/generate.h"

#include <algorithm>
#include <chrono>

#include "runtime/engine/kv_cache_manager.h"
#include "runtime/engine/prefill_split.h"

namespace xrt {

Expected<GenerateResult> Generate(ModelRunner& runner, const GenerateRequest& req) {
  using Clock = std::chrono::steady_clock;
  const ServingLimits& lim = runner.limits();
  const int64_t n = static_cast<int64_t>(req.prompt.size());
  if (n == 0) return InvalidArgumentError("the prompt is empty");
  if (req.max_tokens < 1) return InvalidArgumentError("max_tokens must be >= 1, got {}", req.max_tokens);
  if (n + req.max_tokens > lim.max_model_len)
    return InvalidArgumentError(
        "the prompt ({} tokens) plus max_tokens ({}) exceeds max_model_len ({})", n,
        req.max_tokens, lim.max_model_len);
  XRT_RETURN_IF_ERROR(ValidateSamplingParams(req.sampling));

  KvCacheManagerParams kp;
  kp.num_blocks = runner.num_kv_blocks();
  kp.block_size = lim.block_size;
  kp.max_blocks_per_req = lim.max_blocks_per_req;
  XRT_ASSIGN_OR_RETURN(KvCacheManager kv, KvCacheManager::Create(kp));
  const RequestId id = 1;
  XRT_ASSIGN_OR_RETURN(int64_t computed, kv.AddRequest(id, req.prompt.data(), n));
  XRT_ASSIGN_OR_RETURN(SamplingState state,
                       SamplingState::Create(req.sampling, static_cast<int32_t>(runner.vocab_size())));
  XRT_RETURN_IF_ERROR(state.SetPromptTokens(req.prompt.data(), req.prompt.size()));
  Sampler sampler;
  StepInputs in;
  runner.input_builder().Reserve(&in);
  GenerateResult result;
  result.prompt_tokens = n;

  // Runs one step of `count` tokens starting at `tokens`; returns the logits.
  auto step = [&](const int32_t* tokens, int64_t count, bool needsLogits) -> Expected<const float*> {
    XRT_RETURN_IF_ERROR(kv.AllocateSlots(id, count));
    XRT_ASSIGN_OR_RETURN(const std::vector<int32_t>* table, kv.BlockTable(id));
    XRT_ASSIGN_OR_RETURN(int64_t done, kv.NumComputedTokens(id));
    ScheduledRequest sr;
    sr.token_ids = tokens;
    sr.num_tokens = count;
    sr.num_computed_tokens = done;
    sr.block_table = table;
    sr.needs_logits = needsLogits;
    XRT_RETURN_IF_ERROR(runner.input_builder().Build({sr}, &in));
    XRT_ASSIGN_OR_RETURN(const float* logits, runner.Execute(in));
    XRT_RETURN_IF_ERROR(kv.CommitComputed(id, count));
    return logits;
  };

  // Prefill, in chunks that fit the token budget and the buckets.
  const int64_t budget = req.max_chunk_tokens > 0 ? req.max_chunk_tokens : lim.max_num_batched_tokens;
  XRT_ASSIGN_OR_RETURN(std::vector<PrefillChunk> chunks,
                       SplitPrefill(n - computed, runner.buckets(), budget));
  auto t0 = Clock::now();
  const float* logits = nullptr;
  for (size_t i = 0; i < chunks.size(); ++i) {
    XRT_ASSIGN_OR_RETURN(logits, step(req.prompt.data() + computed + chunks[i].begin,
                                      chunks[i].num_tokens, i + 1 == chunks.size()));
  }
  result.prefill_steps = static_cast<int64_t>(chunks.size());
  if (req.prompt_logits) req.prompt_logits->assign(logits, logits + runner.vocab_size());
  auto t1 = Clock::now();
  result.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();

  const std::vector<int32_t>& eos = runner.eos_token_ids();
  for (;;) {
    XRT_ASSIGN_OR_RETURN(SampleResult s, sampler.Sample(logits, &state));
    result.tokens.push_back(s.token);
    if (req.on_token) req.on_token(s.token);
    if (!req.ignore_eos && std::find(eos.begin(), eos.end(), s.token) != eos.end()) {
      result.finish_reason = "stop";
      break;
    }
    if (static_cast<int64_t>(result.tokens.size()) >= req.max_tokens) {
      result.finish_reason = "length";
      break;
    }
    XRT_RETURN_IF_ERROR(kv.AppendTokens(id, &s.token, 1));
    XRT_ASSIGN_OR_RETURN(logits, step(&result.tokens.back(), 1, true));
  }
  result.decode_seconds = std::chrono::duration<double>(Clock::now() - t1).count();
  return result;
}

}  // namespace xrt
