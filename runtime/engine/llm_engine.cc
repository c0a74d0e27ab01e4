#include "runtime/engine/llm_engine.h"

#include <chrono>
#include <cstdio>

namespace xrt {

using Clock = std::chrono::steady_clock;

struct LLMEngine::Live {
  OutputCallback callback;
  Clock::time_point submitted, last_token;
  bool first_token_seen = false;
};

LLMEngine::LLMEngine(std::unique_ptr<EngineCore> core) : core_(std::move(core)) {}

Expected<std::unique_ptr<LLMEngine>> LLMEngine::Create(const EngineCoreParams& params) {
  XRT_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::Create(params));
  std::unique_ptr<LLMEngine> e(new LLMEngine(std::move(core)));
  e->metrics_.kv_blocks_total = e->core_->num_kv_blocks();
  e->thread_ = std::thread([raw = e.get()] { raw->Loop(); });
  return e;
}

LLMEngine::~LLMEngine() {
  Shutdown();
  if (thread_.joinable()) thread_.join();
}

std::string LLMEngine::MetricsText() const { return metrics_.Render(); }

Status LLMEngine::Submit(EngineRequest request, OutputCallback callback) {
  XRT_RETURN_IF_ERROR(core_->Validate(request));
  std::lock_guard<std::mutex> lock(mu_);
  if (!accepting_) return UnavailableError("the server is shutting down");
  incoming_.emplace_back(std::move(request), std::move(callback));
  cv_.notify_one();
  return Status::Ok();
}

Status LLMEngine::SubmitBatch(std::vector<std::pair<EngineRequest, OutputCallback>> batch) {
  for (const auto& [request, callback] : batch) XRT_RETURN_IF_ERROR(core_->Validate(request));
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

void LLMEngine::Pause(PauseMode mode) {
  std::unique_lock<std::mutex> lock(mu_);
  paused_ = true;
  step_budget_ = -1;
  if (mode == PauseMode::kAbort) abort_all_ = true;
  const int64_t ticket = ++pauses_;
  cv_.notify_one();
  pause_cv_.wait(lock, [&] { return pauses_seen_ >= ticket || loop_done_; });
}

void LLMEngine::Resume() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = false;
  step_budget_ = -1;
  cv_.notify_one();
}

int64_t LLMEngine::RunSteps(int64_t steps) {
  std::unique_lock<std::mutex> lock(mu_);
  if (steps <= 0 || loop_done_) {
    paused_ = true;
    return 0;
  }
  paused_ = false;
  step_budget_ = steps;
  budget_steps_run_ = 0;
  cv_.notify_one();
  // The loop spends the budget, or finds nothing to run, and pauses again.
  pause_cv_.wait(lock, [&] { return step_budget_ < 0 || loop_done_; });
  return budget_steps_run_;
}

bool LLMEngine::IsPaused() const {
  std::lock_guard<std::mutex> lock(mu_);
  return paused_;
}

void LLMEngine::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  accepting_ = false;
  stop_ = true;
  cv_.notify_one();
}

void LLMEngine::Deliver(const RequestOutput& o) {
  auto it = live_.find(o.request_id);
  if (it == live_.end()) return;
  Live& r = *it->second;
  const auto now = Clock::now();
  if (!o.tokens.empty()) {
    if (!r.first_token_seen) {
      metrics_.ttft.Observe(std::chrono::duration<double>(now - r.submitted).count());
      r.first_token_seen = true;
    } else {
      metrics_.tpot.Observe(std::chrono::duration<double>(now - r.last_token).count());
    }
    r.last_token = now;
  }
  if (!o.finished) return r.callback(o);
  // Counted before the client hears of it, so /metrics agrees with what it saw.
  metrics_.CountFinished(o.finish_reason);
  metrics_.e2e.Observe(std::chrono::duration<double>(now - r.submitted).count());
  const OutputCallback callback = std::move(r.callback);
  live_.erase(it);
  callback(o);
}

void LLMEngine::CountStep(const StepStats& st) {
  metrics_.preemptions += st.preemptions;
  metrics_.prompt_tokens += st.prompt_tokens;
  metrics_.generation_tokens += st.generation_tokens;
  metrics_.prefix_queries += st.prefix_queries;
  metrics_.prefix_hits += st.prefix_hits;
  metrics_.encoder_cache_hits += st.encoder_cache_hits;
  metrics_.encoder_cache_misses += st.encoder_cache_misses;
  metrics_.encoder_cache_evictions += st.encoder_cache_evictions;
  if (!st.unbucketed.empty()) {
    metrics_.steps_without_bucket++;
    std::fprintf(stderr, "xrt: strict mode: %s\n", st.unbucketed.c_str());
  }
  if (!st.ran) return;
  metrics_.steps++;
  if (!st.vision_encode.empty()) {
    metrics_.CountBucket(st.vision_encode);
    metrics_.images_encoded += st.images_encoded;
    metrics_.padded_images += st.vision_encode_padding;
  }
  metrics_.CountBucket(st.lm_step);
  metrics_.CountLoraMode(xpk::EnumNameLoraMode(st.lora_mode));
  metrics_.lora_slot_loads += st.lora_loads;
  metrics_.lora_slot_swaps += st.lora_swaps;
  metrics_.padded_tokens += st.lm_step_padding;
  if (!st.lm_logits.empty()) {
    metrics_.CountBucket(st.lm_logits);
    metrics_.padded_reqs += st.lm_logits_padding;
  }
}

void LLMEngine::Loop() {
  for (;;) {
    std::deque<std::pair<EngineRequest, OutputCallback>> incoming;
    std::vector<std::string> aborts;
    bool stop = false, paused = false, abort_all = false;
    int64_t pauses = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !incoming_.empty() || !aborts_.empty() || pauses_seen_ < pauses_ ||
               (!paused_ && (core_->HasUnfinished() || step_budget_ >= 0));
      });
      incoming.swap(incoming_);
      aborts.swap(aborts_);
      stop = stop_;
      paused = paused_;
      abort_all = abort_all_;
      abort_all_ = false;
      pauses = pauses_;
    }
    for (auto& [req, cb] : incoming) {
      auto live = std::make_unique<Live>();
      live->callback = std::move(cb);
      live->submitted = Clock::now();
      const std::string id = req.request_id;
      const int64_t prompt_tokens = static_cast<int64_t>(req.prompt.size());
      const std::string adapter = req.lora ? req.lora->name : "";
      // The core rejects an id already in flight (its requests are exactly live_'s).
      Status s = core_->AddRequest(std::move(req));
      if (!s.ok()) {
        RequestOutput out;
        out.request_id = id;
        out.finished = true;
        out.finish_reason = "error";
        out.error = s.message();
        out.prompt_tokens = prompt_tokens;
        metrics_.CountFinished("error");
        live->callback(out);
        continue;
      }
      if (!adapter.empty()) metrics_.CountLoraRequest(adapter);
      live_[id] = std::move(live);
    }
    for (const std::string& name : aborts)
      if (std::optional<RequestOutput> out = core_->Abort(name)) Deliver(*out);
    if (stop || abort_all)
      for (const RequestOutput& out : core_->AbortAll()) Deliver(out);
    UpdateGauges();
    {
      // Carried out: a Pause returns (one Resume already undid is carried out too).
      std::lock_guard<std::mutex> lock(mu_);
      pauses_seen_ = pauses;
      loop_done_ = stop;
      pause_cv_.notify_all();
    }
    if (stop) return;
    if (paused) continue;
    if (!core_->HasUnfinished()) {
      EndStepBudget(false);  // nothing left to run: a RunSteps ends early
      continue;
    }
    EngineCoreOutputs step = core_->Step();
    CountStep(step.stats);
    for (const RequestOutput& out : step.outputs) Deliver(out);
    UpdateGauges();
    EndStepBudget(true);
  }
}

void LLMEngine::EndStepBudget(bool stepped) {
  std::lock_guard<std::mutex> lock(mu_);
  if (step_budget_ < 0) return;
  if (stepped) {
    ++budget_steps_run_;
    if (--step_budget_ > 0) return;
  }
  step_budget_ = -1;
  paused_ = true;
  pause_cv_.notify_all();
}

void LLMEngine::UpdateGauges() {
  metrics_.running = core_->num_running();
  metrics_.waiting = core_->num_waiting();
  metrics_.kv_blocks_used = core_->num_kv_blocks_used();
}

}  // namespace xrt
