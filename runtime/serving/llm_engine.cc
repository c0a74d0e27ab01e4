#include "runtime/serving/llm_engine.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "runtime/engine/scheduler.h"
#include "runtime/sampler/sampler.h"
#include "runtime/tokenizer/streaming_detokenizer.h"

namespace xrt {

using Clock = std::chrono::steady_clock;

struct LLMEngine::Live {
  uint64_t id = 0;
  EngineRequest req;
  OutputCallback callback;
  std::optional<SamplingState> sampling;
  std::optional<StreamingDetokenizer> detok;
  std::string held;             // decoded text held back: may be the start of a stop string
  int64_t generated = 0;
  int64_t cached_tokens = 0;
  Clock::time_point submitted, last_token;
  bool first_token_seen = false;
  bool cache_counted = false;
};

LLMEngine::LLMEngine(const LLMEngineParams& params) : params_(params), runner_(*params.runner) {}

Expected<std::unique_ptr<LLMEngine>> LLMEngine::Create(const LLMEngineParams& params) {
  if (!params.runner) return InvalidArgumentError("LLMEngine needs a ModelRunner");
  const ServingLimits& lim = params.runner->limits();
  std::unique_ptr<LLMEngine> e(new LLMEngine(params));
  SchedulerParams sp;
  sp.max_num_seqs = params.max_num_seqs > 0 ? params.max_num_seqs : lim.max_num_seqs;
  sp.max_num_batched_tokens =
      params.max_num_batched_tokens > 0 ? params.max_num_batched_tokens : lim.max_num_batched_tokens;
  if (sp.max_num_seqs > lim.max_num_seqs)
    return InvalidArgumentError(
        "max_num_seqs {} exceeds what the artifact was compiled for ({}); recompile with "
        "--max-num-seqs {}",
        sp.max_num_seqs, lim.max_num_seqs, sp.max_num_seqs);
  if (sp.max_num_batched_tokens > lim.max_num_batched_tokens)
    return InvalidArgumentError(
        "max_num_batched_tokens {} exceeds what the artifact was compiled for ({}); recompile "
        "with --max-num-batched-tokens {}",
        sp.max_num_batched_tokens, lim.max_num_batched_tokens, sp.max_num_batched_tokens);
  sp.max_model_len = lim.max_model_len;
  sp.buckets = params.runner->buckets();
  sp.kv.num_blocks = params.runner->num_kv_blocks();
  sp.kv.block_size = lim.block_size;
  sp.kv.max_blocks_per_req = lim.max_blocks_per_req;
  sp.kv.enable_prefix_caching = params.enable_prefix_caching;
  sp.strict_buckets = params.check_recompilation;
  e->params_.max_num_batched_tokens = sp.max_num_batched_tokens;
  XRT_ASSIGN_OR_RETURN(Scheduler scheduler, Scheduler::Create(sp));
  e->scheduler_ = std::make_unique<Scheduler>(std::move(scheduler));
  params.runner->input_builder().Reserve(&e->inputs_);
  e->metrics_.kv_blocks_total = sp.kv.num_blocks;
  e->thread_ = std::thread([raw = e.get()] { raw->Loop(); });
  return e;
}

LLMEngine::~LLMEngine() {
  Shutdown();
  if (thread_.joinable()) thread_.join();
}

int64_t LLMEngine::max_model_len() const { return runner_.limits().max_model_len; }

int64_t LLMEngine::num_preemptions() const { return metrics_.preemptions.load(); }

std::string LLMEngine::MetricsText() const { return metrics_.Render(); }

Status LLMEngine::Validate(const EngineRequest& request) const {
  XRT_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  if (n == 0) return InvalidArgumentError("prompt: empty");
  if (request.max_tokens < 1)
    return InvalidArgumentError("max_tokens: must be >= 1, got {}", request.max_tokens);
  if (n + request.max_tokens > max_model_len())
    return InvalidArgumentError(
        "This model's maximum context length is {} tokens. However, you requested {} tokens "
        "({} in the messages, {} in the completion). Please reduce the length of the messages "
        "or completion.",
        max_model_len(), n + request.max_tokens, n, request.max_tokens);
  const int64_t block = runner_.limits().block_size;
  const int64_t blocks = (n + request.max_tokens - 1 + block - 1) / block;
  if (blocks > runner_.num_kv_blocks())
    return InvalidArgumentError(
        "max_tokens: the prompt ({} tokens) plus max_tokens ({}) needs {} KV cache blocks; the "
        "server has {} (raise --kv-cache-memory or lower max_tokens)",
        n, request.max_tokens, blocks, runner_.num_kv_blocks());
  for (int32_t t : request.prompt)
    if (t < 0 || t >= runner_.vocab_size())
      return InvalidArgumentError("prompt: token id {} outside the vocabulary [0, {})", t,
                                  runner_.vocab_size());
  return Status::Ok();
}

Status LLMEngine::Submit(EngineRequest request, OutputCallback callback) {
  XRT_RETURN_IF_ERROR(Validate(request));
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return UnavailableError("the server is shutting down");
  incoming_.emplace_back(std::move(request), std::move(callback));
  cv_.notify_one();
  return Status::Ok();
}

Status LLMEngine::SubmitBatch(std::vector<std::pair<EngineRequest, OutputCallback>> batch) {
  for (const auto& [request, callback] : batch) XRT_RETURN_IF_ERROR(Validate(request));
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return UnavailableError("the server is shutting down");
  for (auto& item : batch) incoming_.push_back(std::move(item));
  cv_.notify_one();
  return Status::Ok();
}

void LLMEngine::Abort(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  aborts_.push_back(request_id);
  cv_.notify_one();
}

void LLMEngine::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
  stop_ = true;
  cv_.notify_one();
}

void LLMEngine::Deliver(Live& r, std::vector<GeneratedToken> tokens, std::string text,
                        bool finished, const std::string& reason, const std::string& error) {
  RequestOutput out;
  out.request_id = r.req.request_id;
  out.tokens = std::move(tokens);
  out.text = std::move(text);
  out.finished = finished;
  out.finish_reason = reason;
  out.error = error;
  out.prompt_tokens = static_cast<int64_t>(r.req.prompt.size());
  out.completion_tokens = r.generated;
  out.cached_tokens = r.cached_tokens;
  r.callback(out);
}

void LLMEngine::Finish(uint64_t id, const std::string& reason, const std::string& error) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& r = *it->second;
  std::string tail = reason == "stop" ? "" : r.held + r.detok->Flush();
  (void)scheduler_->FinishRequest(id);
  Deliver(r, {}, std::move(tail), true, reason, error);
  metrics_.CountFinished(reason);
  metrics_.e2e.Observe(std::chrono::duration<double>(Clock::now() - r.submitted).count());
  by_name_.erase(r.req.request_id);
  live_.erase(it);
}

void LLMEngine::Loop() {
  for (;;) {
    std::deque<std::pair<EngineRequest, OutputCallback>> incoming;
    std::vector<std::string> aborts;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !incoming_.empty() || !aborts_.empty() || scheduler_->HasUnfinished();
      });
      incoming.swap(incoming_);
      aborts.swap(aborts_);
      stop = stop_;
    }
    for (auto& [req, cb] : incoming) {
      auto live = std::make_unique<Live>();
      live->id = next_id_++;
      live->req = std::move(req);
      live->callback = std::move(cb);
      live->submitted = Clock::now();
      auto state = SamplingState::Create(live->req.sampling, static_cast<int32_t>(runner_.vocab_size()));
      Status s = state.ok() ? state->SetPromptTokens(live->req.prompt.data(), live->req.prompt.size())
                            : state.status();
      if (s.ok()) s = scheduler_->AddRequest(live->id, live->req.prompt, live->req.max_tokens);
      if (!s.ok()) {
        Deliver(*live, {}, "", true, "error", s.message());
        metrics_.CountFinished("error");
        continue;
      }
      live->sampling.emplace(std::move(*state));
      live->detok.emplace(&runner_.tokenizer(), live->req.skip_special_tokens);
      by_name_[live->req.request_id] = live->id;
      live_[live->id] = std::move(live);
    }
    for (const std::string& name : aborts) {
      auto it = by_name_.find(name);
      if (it != by_name_.end()) Finish(it->second, "abort");
    }
    if (stop) {
      while (!live_.empty()) Finish(live_.begin()->first, "abort");
      return;
    }
    if (scheduler_->HasUnfinished()) {
      Status s = Step();
      if (!s.ok()) {
        // A failed step fails the requests in it, not the server.
        std::vector<uint64_t> ids;
        for (auto& [id, r] : live_) ids.push_back(id);
        for (uint64_t id : ids) Finish(id, "error", s.message());
      }
    }
    UpdateGauges();
  }
}

Status LLMEngine::Step() {
  XRT_ASSIGN_OR_RETURN(SchedulerOutput out, scheduler_->Schedule());
  if (out.empty()) return Status::Ok();
  metrics_.preemptions += static_cast<int64_t>(out.preempted.size());

  // Strict mode: the scheduler forms steps up to max_num_batched_tokens even
  // beyond the largest compiled bucket; such a step is never split here: the
  // requests that overflow it fail (counted, logged) and the rest runs.
  std::vector<bool> dropped(out.size(), false);
  const int64_t maxBucket = runner_.buckets().max_tokens();
  if (out.num_tokens > maxBucket) {
    // Fail the largest chunks first (ties: the later request), so decodes and
    // small chunks that fit keep running.
    std::vector<size_t> order(out.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return out.requests[a].num_tokens != out.requests[b].num_tokens
                 ? out.requests[a].num_tokens > out.requests[b].num_tokens
                 : a > b;
    });
    int64_t tokens = out.num_tokens;
    for (size_t k = 0; k < order.size() && tokens > maxBucket; ++k) {
      dropped[order[k]] = true;
      tokens -= out.requests[order[k]].num_tokens;
    }
    metrics_.steps_without_bucket++;
    const std::string msg = fmt::format(
        "no compiled lm_step bucket holds a step of {} tokens ({} requests; largest compiled "
        "bucket {}), and --check-recompilation forbids splitting it: recompile with buckets "
        "covering max_num_batched_tokens {}",
        out.num_tokens, out.size(), maxBucket, params_.max_num_batched_tokens);
    std::fprintf(stderr, "xrt: strict mode: %s\n", msg.c_str());
    for (size_t i = 0; i < out.size(); ++i)
      if (dropped[i]) Finish(out.request_ids[i], "error", msg);
  }
  std::vector<ScheduledRequest> step;
  for (size_t i = 0; i < out.size(); ++i)
    if (!dropped[i]) step.push_back(out.requests[i]);

  const float* logits = nullptr;
  if (!step.empty()) {
    XRT_RETURN_IF_ERROR(runner_.input_builder().Build(step, &inputs_));
    XRT_ASSIGN_OR_RETURN(logits, runner_.Execute(inputs_));
    metrics_.steps++;
    metrics_.CountBucket("lm_step_t" + std::to_string(inputs_.token_bucket));
    metrics_.padded_tokens += inputs_.token_bucket - inputs_.num_tokens;
    if (inputs_.num_logits > 0) {
      metrics_.CountBucket("lm_logits_r" + std::to_string(inputs_.req_bucket));
      metrics_.padded_reqs += inputs_.req_bucket - inputs_.num_logits;
    }
  }

  // Sample, in step order, for every request that needs logits (failed ones
  // get a placeholder the scheduler ignores).
  const int64_t vocab = runner_.vocab_size();
  std::vector<int32_t> sampled;
  std::vector<std::pair<uint64_t, SampleResult>> results;
  int64_t row = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (dropped[i]) {
      if (out.samples(i)) sampled.push_back(0);
      continue;
    }
    const RequestId id = out.request_ids[i];
    Live& r = *live_.at(id);
    auto state = scheduler_->State(id);
    if (state.ok() && *state != RequestState::kDecode)
      metrics_.prompt_tokens += out.requests[i].num_tokens;
    if (!r.cache_counted) {
      r.cache_counted = true;
      r.cached_tokens = out.num_cached_tokens[i];
      metrics_.prefix_queries += static_cast<int64_t>(r.req.prompt.size());
      metrics_.prefix_hits += r.cached_tokens;
    }
    if (!out.samples(i)) continue;
    auto res = sampler_.Sample(logits + row * vocab, &*r.sampling);
    ++row;
    if (!res.ok()) return res.status();
    sampled.push_back(res->token);
    results.emplace_back(id, std::move(*res));
  }
  XRT_RETURN_IF_ERROR(scheduler_->UpdateAfterStep(out, sampled));

  // Detokenize, check stop conditions, deliver.
  const std::vector<int32_t>& eos = runner_.eos_token_ids();
  const auto now = Clock::now();
  for (auto& [id, res] : results) {
    Live& r = *live_.at(id);
    ++r.generated;
    metrics_.generation_tokens++;
    if (!r.first_token_seen) {
      metrics_.ttft.Observe(std::chrono::duration<double>(now - r.submitted).count());
      r.first_token_seen = true;
    } else {
      metrics_.tpot.Observe(std::chrono::duration<double>(now - r.last_token).count());
    }
    r.last_token = now;
    GeneratedToken tok;
    tok.token = res.token;
    tok.logprob = res.logprob;
    tok.top_logprobs = std::move(res.top_logprobs);
    std::vector<GeneratedToken> tokens = {std::move(tok)};

    const bool isEos = std::find(eos.begin(), eos.end(), res.token) != eos.end();
    const bool isStopToken = std::find(r.req.stop_token_ids.begin(), r.req.stop_token_ids.end(),
                                       res.token) != r.req.stop_token_ids.end();
    if ((isEos && !r.req.ignore_eos) || isStopToken) {
      // The stop token itself adds no text.
      std::string text = r.held + r.detok->Flush();
      r.held.clear();
      Deliver(r, std::move(tokens), std::move(text), false, "", "");
      Finish(id, "stop");
      continue;
    }
    r.held += r.detok->Push(res.token);
    // Stop strings: cut at the first match; hold back a tail that may start one.
    size_t cut = std::string::npos;
    for (const std::string& stop : r.req.stop)
      if (!stop.empty()) cut = std::min(cut, r.held.find(stop));
    if (cut != std::string::npos) {
      std::string text = r.held.substr(0, cut);
      r.held.clear();
      Deliver(r, std::move(tokens), std::move(text), false, "", "");
      Finish(id, "stop");
      continue;
    }
    size_t keep = 0;
    for (const std::string& stop : r.req.stop)
      for (size_t k = std::min(stop.size() - 1, r.held.size()); k > keep; --k)
        if (r.held.compare(r.held.size() - k, k, stop, 0, k) == 0) {
          keep = k;
          break;
        }
    std::string text = r.held.substr(0, r.held.size() - keep);
    r.held.erase(0, r.held.size() - keep);
    const int64_t context = static_cast<int64_t>(r.req.prompt.size()) + r.generated;
    const bool length = r.generated >= r.req.max_tokens || context >= max_model_len();
    Deliver(r, std::move(tokens), std::move(text), false, "", "");
    if (length) Finish(id, "length");
  }
  return Status::Ok();
}

void LLMEngine::UpdateGauges() {
  metrics_.running = scheduler_->num_running();
  metrics_.waiting = scheduler_->num_waiting();
  metrics_.kv_blocks_used = runner_.num_kv_blocks() - scheduler_->kv().num_free_blocks();
}

}  // namespace xrt
