#include "runtime/engine/engine_core.h"

#include <algorithm>

#include "runtime/engine/scheduler.h"
#include "schemas/abi.h"

namespace xrt {
namespace {

// The token "sampled" when the executor computes no logits (trace replay,
// which models no EOS: each request generates exactly max_tokens).
constexpr int32_t kFixedToken = 1;

// The validator checks limits, KV pool and vocabulary; the request path (with the
// model's VisionParams) has already checked images against the model.
RequestProcessorParams ValidatorParams(const EngineCoreParams& params,
                                       const ServingLimits& limits) {
  RequestProcessorParams p;
  p.tokenizer = params.tokenizer;
  p.limits = limits;
  p.num_kv_blocks = params.num_kv_blocks;
  p.vocab_size = params.vocab_size;
  return p;
}

}  // namespace

struct EngineCore::Live {
  uint64_t id = 0;
  EngineRequest req;
  std::optional<SamplingState> sampling;
  std::optional<StopChecker> stop;
  int64_t generated = 0;
  int64_t cached_tokens = 0;
  bool scheduled_once = false;
};

EngineCore::EngineCore(const EngineCoreParams& params, const ServingLimits& limits,
                       InputBuilder builder, std::unique_ptr<Scheduler> scheduler)
    : params_(params),
      limits_(limits),
      validator_(ValidatorParams(params, limits)),
      builder_(std::move(builder)),
      scheduler_(std::move(scheduler)) {
  builder_.Reserve(&inputs_);
}

EngineCore::~EngineCore() = default;

Expected<std::unique_ptr<EngineCore>> EngineCore::Create(const EngineCoreParams& params) {
  if (params.executor == nullptr) return InvalidArgumentError("engine core: no step executor");
  XRT_ASSIGN_OR_RETURN(ServingLimits limits,
                       ResolveServingLimits(params.compiled, params.requested));
  XRT_ASSIGN_OR_RETURN(
      InputBuilder builder,
      InputBuilder::ForCompiled(params.compiled, params.buckets, params.vocab_size));
  SchedulerParams sp;
  sp.limits = limits;
  sp.buckets = params.buckets;
  sp.strict_buckets = params.check_recompilation;
  sp.num_kv_blocks = params.num_kv_blocks;
  sp.enable_prefix_caching = params.enable_prefix_caching;
  if (params.lora) {
    const int64_t compiled = params.lora->geometry().max_loras;
    if (params.max_loras > compiled)
      return InvalidArgumentError(
          "max_loras {} exceeds the {} adapter slots the artifact was compiled with "
          "(xcc compile --max-loras)",
          params.max_loras, compiled);
    sp.max_loras = params.max_loras > 0 ? params.max_loras : compiled;
  } else if (params.max_loras > 0) {
    return InvalidArgumentError(
        "max_loras {} asks for LoRA, but the artifact was compiled without it (xcc compile "
        "--enable-lora)",
        params.max_loras);
  }
  if (params.tokens_per_image > 0) {
    const int64_t tpi = params.tokens_per_image;
    if (params.buckets.max_images() < 1)
      return InvalidArgumentError("engine core: a model with images needs vision_encode buckets");
    const int64_t images =
        std::min(std::max(limits.max_num_batched_tokens, tpi) / tpi, params.buckets.max_images());
    sp.encoder_cache_rows = params.encoder_cache_rows;
    sp.encoder_item_rows = tpi;
    sp.encoder_budget_rows = images * tpi;
  }
  XRT_ASSIGN_OR_RETURN(Scheduler scheduler, Scheduler::Create(std::move(sp)));
  return std::unique_ptr<EngineCore>(new EngineCore(
      params, limits, std::move(builder), std::make_unique<Scheduler>(std::move(scheduler))));
}

Status EngineCore::Validate(const EngineRequest& request) const {
  if (request.lora && !params_.lora)
    return InvalidArgumentError(
        "request '{}' asks for LoRA adapter '{}', but the model was compiled without LoRA "
        "(xcc compile --enable-lora)",
        request.request_id, request.lora->name);
  return validator_.Validate(request);
}

Status EngineCore::AddRequest(EngineRequest request) {
  XRT_RETURN_IF_ERROR(Validate(request));
  if (by_name_.count(request.request_id) != 0)
    return InvalidArgumentError("request '{}' is already in flight", request.request_id);
  auto live = std::make_unique<Live>();
  live->id = next_id_;
  XRT_ASSIGN_OR_RETURN(
      SamplingState state,
      SamplingState::Create(request.sampling, static_cast<int32_t>(params_.vocab_size)));
  XRT_RETURN_IF_ERROR(state.SetPromptTokens(request.prompt.data(), request.prompt.size()));
  StopConditions c;
  c.stop = request.stop;
  c.stop_token_ids = request.stop_token_ids;
  c.eos_token_ids = params_.eos_token_ids;
  c.ignore_eos = request.ignore_eos;
  c.max_tokens = request.max_tokens;
  c.prompt_tokens = static_cast<int64_t>(request.prompt.size());
  c.max_model_len = limits_.max_model_len;
  PrefixKeys keys;
  for (const ImageInput& image : request.images) keys.images.push_back(image.span);
  if (request.lora) keys.lora_id = request.lora->id;
  XRT_RETURN_IF_ERROR(
      scheduler_->AddRequest(live->id, request.prompt, request.max_tokens, std::move(keys)));
  ++next_id_;
  live->stop.emplace(std::move(c), params_.tokenizer, request.skip_special_tokens);
  live->sampling.emplace(std::move(state));
  live->req = std::move(request);
  by_name_[live->req.request_id] = live->id;
  live_[live->id] = std::move(live);
  return Status::Ok();
}

Status EngineCore::AssignLoraSlots(const std::vector<uint64_t>& ids,
                                   std::vector<ScheduledRequest>* step, StepStats* st) {
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  std::vector<int> index(ids.size(), -1);
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::shared_ptr<const LoraAdapter>& a = live_.at(ids[i])->req.lora;
    if (!a) continue;
    auto it = std::find(adapters.begin(), adapters.end(), a);
    index[i] = static_cast<int>(it - adapters.begin());
    if (it == adapters.end()) adapters.push_back(a);
  }
  st->lora_adapters = static_cast<int64_t>(adapters.size());
  if (adapters.empty()) return Status::Ok();
  if (!params_.lora) return InternalError("a step with LoRA adapters but no LoRA manager");
  const LoraManagerStats before = params_.lora->stats();
  XRT_ASSIGN_OR_RETURN(std::vector<int32_t> slots, params_.lora->Activate(adapters));
  st->lora_loads = params_.lora->stats().loads - before.loads;
  st->lora_swaps = params_.lora->stats().swaps - before.swaps;
  for (size_t i = 0; i < ids.size(); ++i)
    (*step)[i].lora_slot = index[i] < 0 ? -1 : slots[static_cast<size_t>(index[i])];
  return Status::Ok();
}

RequestOutput EngineCore::OutputOf(const Live& r) const {
  RequestOutput o;
  o.request_id = r.req.request_id;
  o.prompt_tokens = static_cast<int64_t>(r.req.prompt.size());
  o.completion_tokens = r.generated;
  o.cached_tokens = r.cached_tokens;
  return o;
}

RequestOutput EngineCore::Finish(uint64_t id, const std::string& reason, const std::string& error) {
  auto it = live_.find(id);
  Live& r = *it->second;
  RequestOutput o = OutputOf(r);
  o.text = r.stop->Flush();
  o.finished = true;
  o.finish_reason = reason;
  o.error = error;
  Forget(id);
  return o;
}

void EngineCore::Forget(uint64_t id) {
  auto it = live_.find(id);
  (void)scheduler_->FinishRequest(id);  // NotFound only for an unknown id
  by_name_.erase(it->second->req.request_id);
  live_.erase(it);
}

void EngineCore::FailAll(const std::vector<uint64_t>& ids, const std::string& error,
                         std::vector<RequestOutput>* outputs) {
  for (uint64_t id : ids)
    if (live_.count(id) != 0) outputs->push_back(Finish(id, "error", error));
}

std::optional<RequestOutput> EngineCore::Abort(const std::string& request_id) {
  auto it = by_name_.find(request_id);
  if (it == by_name_.end()) return std::nullopt;
  return Finish(it->second, "abort", "");
}

std::vector<RequestOutput> EngineCore::AbortAll() {
  std::vector<RequestOutput> out;
  while (!live_.empty()) out.push_back(Finish(live_.begin()->first, "abort", ""));
  return out;
}

int64_t EngineCore::num_running() const { return scheduler_->num_running(); }
int64_t EngineCore::num_waiting() const { return scheduler_->num_waiting(); }
int64_t EngineCore::num_kv_blocks_used() const {
  return params_.num_kv_blocks - scheduler_->kv().num_free_blocks();
}

EngineCoreOutputs EngineCore::Step() {
  EngineCoreOutputs result;
  StepStats& st = result.stats;
  std::vector<RequestOutput>& outs = result.outputs;
  if (live_.empty()) return result;

  Expected<SchedulerOutput> scheduled = scheduler_->Schedule();
  if (!scheduled.ok()) {
    // No step was formed and the scheduler cannot go on: nothing can run.
    st.error = scheduled.status();
    std::vector<uint64_t> all;
    for (const auto& [id, r] : live_) all.push_back(id);
    FailAll(all, st.error.message(), &outs);
    return result;
  }
  const SchedulerOutput& so = *scheduled;
  if (so.empty()) return result;
  st.step = so.step;
  st.num_tokens = so.num_tokens;
  st.num_reqs = static_cast<int64_t>(so.size());
  st.num_sampling = so.num_sampling;
  st.preemptions = static_cast<int64_t>(so.preempted.size());

  // Strict mode: the scheduler forms steps up to max_num_batched_tokens even
  // beyond the largest compiled bucket; such a step is never split: the
  // requests that overflow it fail and the rest runs. The largest chunks fail
  // first (ties: the later request), so decodes and small chunks keep running.
  std::vector<bool> dropped(so.size(), false);
  const int64_t max_bucket = params_.buckets.max_tokens();
  if (so.num_tokens > max_bucket) {
    std::vector<size_t> order(so.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return so.requests[a].num_tokens != so.requests[b].num_tokens
                 ? so.requests[a].num_tokens > so.requests[b].num_tokens
                 : a > b;
    });
    int64_t tokens = so.num_tokens;
    for (size_t k = 0; k < order.size() && tokens > max_bucket; ++k) {
      dropped[order[k]] = true;
      tokens -= so.requests[order[k]].num_tokens;
    }
    st.unbucketed = fmt::format(
        "no compiled lm_step bucket holds a step of {} tokens ({} requests; largest compiled "
        "bucket {}), and --check-recompilation forbids splitting it: recompile with buckets "
        "covering max_num_batched_tokens {}",
        so.num_tokens, so.size(), max_bucket, limits_.max_num_batched_tokens);
    for (size_t i = 0; i < so.size(); ++i)
      if (dropped[i]) outs.push_back(Finish(so.request_ids[i], "error", st.unbucketed));
  }
  std::vector<ScheduledRequest> step;
  std::vector<uint64_t> step_ids;
  for (size_t i = 0; i < so.size(); ++i) {
    if (dropped[i]) continue;
    step.push_back(so.requests[i]);
    step_ids.push_back(so.request_ids[i]);
  }

  // Images to encode: those still pending after strict mode's drops, with the
  // pixels of a live request of the step that carries each.
  std::vector<const std::vector<float>*> image_pixels;
  std::vector<int64_t> image_rows;
  if (const EncoderCache* cache = scheduler_->encoder_cache()) {
    const std::vector<BlockHash> pending = cache->Pending();
    for (const SchedulerOutput::EncodeItem& item : so.encode) {
      if (std::find(pending.begin(), pending.end(), item.hash) == pending.end()) continue;
      const std::vector<float>* pixels = nullptr;
      for (uint64_t id : step_ids) {
        for (const ImageInput& image : live_.at(id)->req.images)
          if (image.span.content_hash == item.hash) pixels = image.pixel_values.get();
        if (pixels) break;
      }
      image_pixels.push_back(pixels);
      image_rows.push_back(item.cache_row);
    }
    st.encoder_cache_hits = cache->hits() - cache_hits_;
    st.encoder_cache_misses = cache->misses() - cache_misses_;
    st.encoder_cache_evictions = cache->evictions() - cache_evictions_;
    cache_hits_ = cache->hits();
    cache_misses_ = cache->misses();
    cache_evictions_ = cache->evictions();
  }

  const float* logits = nullptr;
  if (!step.empty()) {
    Status run = AssignLoraSlots(step_ids, &step, &st);
    if (run.ok()) run = builder_.Build(step, &inputs_);
    if (run.ok()) run = builder_.BuildImages(image_pixels, image_rows, &inputs_);
    if (run.ok()) {
      Expected<const float*> executed = params_.executor->Execute(inputs_);
      if (executed.ok()) {
        logits = *executed;
      } else {
        run = executed.status();
      }
    }
    if (!run.ok()) {
      // The requests of this step fail; the others (waiting, or running but
      // not scheduled) go on. Nothing of the step is applied: its requests
      // are gone, so UpdateAfterStep skips them.
      st.error = run;
      FailAll(step_ids, run.message(), &outs);
      Status applied = scheduler_->UpdateAfterStep(so, std::vector<int32_t>(so.num_sampling, 0));
      if (!applied.ok()) {
        st.error = applied;
        FailAll(step_ids, applied.message(), &outs);
      }
      return result;
    }
    ++num_steps_;
    st.ran = true;
    if (inputs_.image_bucket > 0) {
      st.images_encoded = static_cast<int64_t>(inputs_.image_pixels.size());
      st.vision_encode =
          xpk::abi::ExecutableName(xpk::ExecutableKind::vision_encode, inputs_.image_bucket);
      st.vision_encode_padding = inputs_.image_bucket - st.images_encoded;
    }
    st.lora_mode = inputs_.lora_mode;
    st.lm_step = xpk::abi::ExecutableName(xpk::ExecutableKind::lm_step, inputs_.token_bucket,
                                          inputs_.lora_mode);
    st.lm_step_padding = inputs_.token_bucket - inputs_.num_tokens;
    if (inputs_.num_logits > 0) {
      st.lm_logits = xpk::abi::ExecutableName(xpk::ExecutableKind::lm_logits, inputs_.req_bucket);
      st.lm_logits_padding = inputs_.req_bucket - inputs_.num_logits;
    }
  }

  // Sample, in step order, for every request that reached its last known
  // token (failed ones get a placeholder the scheduler ignores). The logits
  // rows are the sampling requests of the built step, in order.
  struct Sampled {
    uint64_t id;
    SampleResult result;
    std::vector<float> prompt_logits;
  };
  std::vector<Sampled> samples;
  std::vector<int32_t> tokens;
  const int64_t vocab = params_.vocab_size;
  int64_t row = 0;
  for (size_t i = 0; i < so.size(); ++i) {
    const bool samples_now = so.samples(i);
    if (dropped[i]) {
      if (samples_now) tokens.push_back(0);
      continue;
    }
    const uint64_t id = so.request_ids[i];
    Live& r = *live_.at(id);
    Expected<RequestState> state = scheduler_->State(id);
    if (state.ok() && *state != RequestState::kDecode)
      st.prompt_tokens += so.requests[i].num_tokens;
    if (!r.scheduled_once) {
      r.scheduled_once = true;
      r.cached_tokens = so.num_cached_tokens[i];
      st.prefix_queries += static_cast<int64_t>(r.req.prompt.size());
      st.prefix_hits += r.cached_tokens;
    }
    if (!samples_now) continue;
    const float* row_logits = logits != nullptr ? logits + row * vocab : nullptr;
    ++row;
    Sampled s{id, {}, {}};
    if (row_logits == nullptr) {
      s.result.token = kFixedToken;
      (void)r.sampling->AddOutputToken(kFixedToken);
    } else {
      if (r.req.return_prompt_logits && r.generated == 0)
        s.prompt_logits.assign(row_logits, row_logits + vocab);
      Expected<SampleResult> res = sampler_.Sample(row_logits, &*r.sampling);
      if (!res.ok()) {
        outs.push_back(Finish(id, "error", res.status().message()));
        tokens.push_back(0);
        continue;
      }
      s.result = std::move(*res);
    }
    tokens.push_back(s.result.token);
    samples.push_back(std::move(s));
  }
  Status applied = scheduler_->UpdateAfterStep(so, tokens);
  if (!applied.ok()) {
    st.error = applied;
    FailAll(step_ids, applied.message(), &outs);
    return result;
  }

  // Stop checks; one output per token.
  for (Sampled& s : samples) {
    Live& r = *live_.at(s.id);
    ++r.generated;
    ++st.generation_tokens;
    StopResult stop = r.stop->Append(s.result.token, r.generated);
    RequestOutput o = OutputOf(r);
    GeneratedToken tok;
    tok.token = s.result.token;
    tok.logprob = s.result.logprob;
    tok.top_logprobs = std::move(s.result.top_logprobs);
    o.tokens.push_back(std::move(tok));
    o.text = std::move(stop.text);
    o.prompt_logits = std::move(s.prompt_logits);
    if (stop.finished()) {
      o.finished = true;
      o.finish_reason = stop.finish_reason;
      Forget(s.id);
    }
    outs.push_back(std::move(o));
  }
  return result;
}

Status RunToCompletion(EngineCore& core,
                       const std::function<void(const RequestOutput&)>& on_output) {
  Status first = Status::Ok();
  while (core.HasUnfinished()) {
    EngineCoreOutputs out = core.Step();
    for (const RequestOutput& o : out.outputs) on_output(o);
    if (!out.stats.error.ok() && first.ok()) first = out.stats.error;
    if (out.stats.step == 0 && out.outputs.empty() && core.HasUnfinished())
      return InternalError("engine core: requests are left but nothing could be scheduled");
  }
  return first;
}

}  // namespace xrt
