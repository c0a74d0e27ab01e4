#include "runtime/engine/scheduler.h"

#include <algorithm>
#include <set>

namespace xrt {

const char* RequestStateName(RequestState state) {
  switch (state) {
    case RequestState::kWaiting:
      return "WAITING";
    case RequestState::kPrefill:
      return "PREFILL";
    case RequestState::kDecode:
      return "DECODE";
  }
  return "?";
}

Expected<Scheduler> Scheduler::Create(SchedulerParams params) {
  const ServingLimits& lim = params.limits;
  const struct {
    const char* name;
    int64_t value;
  } fields[] = {{"max_num_seqs", lim.max_num_seqs},
                {"max_num_batched_tokens", lim.max_num_batched_tokens},
                {"max_model_len", lim.max_model_len}};
  for (const auto& f : fields) {
    if (f.value < 1)
      return InvalidArgumentError("scheduler: {} is {}; must be >= 1", f.name, f.value);
  }
  if (params.buckets.max_tokens() < 1 || params.buckets.max_reqs() < 1) {
    return InvalidArgumentError("scheduler: the bucket table is empty");
  }
  if (params.buckets.max_reqs() < lim.max_num_seqs) {
    return InvalidArgumentError(
        "scheduler: max_num_seqs = {} but the largest req bucket is {}: a step's logits would "
        "not fit",
        lim.max_num_seqs, params.buckets.max_reqs());
  }
  KvCacheManagerParams kp;
  kp.num_blocks = params.num_kv_blocks;
  kp.block_size = lim.block_size;
  kp.max_blocks_per_req = lim.max_blocks_per_req;
  kp.enable_prefix_caching = params.enable_prefix_caching;
  XRT_ASSIGN_OR_RETURN(KvCacheManager kv, KvCacheManager::Create(kp));
  const int64_t positions = lim.max_blocks_per_req * lim.block_size;
  if (positions < lim.max_model_len) {
    return InvalidArgumentError(
        "scheduler: max_model_len = {} but a request's block table holds {} positions "
        "(max_blocks_per_req {} x block_size {})",
        lim.max_model_len, positions, lim.max_blocks_per_req, lim.block_size);
  }
  const int64_t budget = params.strict_buckets
                             ? lim.max_num_batched_tokens
                             : std::min(lim.max_num_batched_tokens, params.buckets.max_tokens());
  if (!params.enable_chunked_prefill && budget < lim.max_model_len) {
    return InvalidArgumentError(
        "scheduler: without chunked prefill the token budget ({} = min(max_num_batched_tokens "
        "{}, largest token bucket {})) must hold max_model_len = {}",
        budget, lim.max_num_batched_tokens, params.buckets.max_tokens(), lim.max_model_len);
  }
  std::optional<EncoderCache> encoder_cache;
  if (params.encoder_cache_rows > 0 || params.encoder_item_rows > 0) {
    XRT_ASSIGN_OR_RETURN(EncoderCache c, EncoderCache::Create({params.encoder_cache_rows,
                                                               params.encoder_item_rows}));
    if (params.encoder_budget_rows < params.encoder_item_rows)
      return InvalidArgumentError(
          "scheduler: the encoder budget of {} rows cannot encode one image of {} rows",
          params.encoder_budget_rows, params.encoder_item_rows);
    encoder_cache.emplace(std::move(c));
  }
  Scheduler s(std::move(params), std::move(kv), budget);
  s.encoder_cache_ = std::move(encoder_cache);
  return s;
}

Expected<Scheduler::Request*> Scheduler::Find(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return NotFoundError("scheduler: no request {}", id);
  return &it->second;
}

Expected<const Scheduler::Request*> Scheduler::Find(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return NotFoundError("scheduler: no request {}", id);
  return &it->second;
}

int64_t Scheduler::BlocksFor(int64_t positions) const {
  const int64_t bs = params_.limits.block_size;
  return (positions + bs - 1) / bs;
}

Status Scheduler::AddRequest(RequestId id, std::vector<int32_t> prompt, int64_t max_tokens,
                             PrefixKeys keys) {
  if (requests_.count(id) != 0) {
    return InvalidArgumentError("scheduler: request {} is already known", id);
  }
  const int64_t n = static_cast<int64_t>(prompt.size());
  if (n == 0) return InvalidArgumentError("scheduler: request {}: the prompt is empty", id);
  if (max_tokens < 1) {
    return InvalidArgumentError("scheduler: request {}: max_tokens is {}; must be >= 1", id,
                                max_tokens);
  }
  if (n + max_tokens > params_.limits.max_model_len) {
    return InvalidArgumentError(
        "scheduler: request {}: the prompt ({} tokens) plus max_tokens ({}) exceeds "
        "max_model_len ({})",
        id, n, max_tokens, params_.limits.max_model_len);
  }
  XRT_RETURN_IF_ERROR(
      ValidatePrefixKeys(keys).WithContext(fmt::format("scheduler: request {}", id)));
  if (!keys.images.empty() && !encoder_cache_)
    return InvalidArgumentError("scheduler: request {} has images but the model has no encoder",
                                id);
  for (size_t i = 0; i < keys.images.size(); ++i) {
    const MultimodalSpan& m = keys.images[i];
    if (m.length != params_.encoder_item_rows || m.offset + m.length > n)
      return InvalidArgumentError(
          "scheduler: request {}: image {} spans tokens [{}, {}) but images are {} tokens "
          "inside the {}-token prompt",
          id, i, m.offset, m.offset + m.length, params_.encoder_item_rows, n);
  }
  // The last sampled token is never fed back, so its KV is never written.
  const int64_t need = BlocksFor(n + max_tokens - 1);
  if (need > params_.num_kv_blocks) {
    return ResourceExhaustedError(
        "scheduler: request {}: {} prompt tokens + max_tokens {} need {} KV blocks; the pool "
        "has {}",
        id, n, max_tokens, need, params_.num_kv_blocks);
  }
  Request r;
  r.id = id;
  r.tokens = std::move(prompt);
  r.num_prompt_tokens = n;
  r.max_tokens = max_tokens;
  r.keys = std::move(keys);
  auto it = requests_.emplace(id, std::move(r)).first;
  waiting_.push_back(&it->second);
  return Status::Ok();
}

Status Scheduler::Preempt(Request* r, std::vector<Entry>* entries, int64_t* budget,
                          std::vector<RequestId>* preempted) {
  auto e =
      std::find_if(entries->begin(), entries->end(), [r](const Entry& x) { return x.req == r; });
  if (e != entries->end()) {
    *budget += e->num_tokens;
    entries->erase(e);
  }
  Status s = kv_.FreeRequest(r->id);
  if (!s.ok()) return InternalError("scheduler: preempting request {}: {}", r->id, s.message());
  if (encoder_cache_) encoder_cache_->ReleaseRequest(r->id);
  running_.erase(std::find(running_.begin(), running_.end(), r));
  r->state = RequestState::kWaiting;
  r->num_computed = 0;
  ++r->num_preemptions;
  ++num_preemptions_;
  waiting_.push_front(r);
  preempted->push_back(r->id);
  return Status::Ok();
}

Status Scheduler::ScheduleRunning(Request* r, int64_t num_tokens, std::vector<Entry>* entries,
                                  int64_t* budget, std::vector<RequestId>* preempted,
                                  bool* scheduled) {
  for (;;) {
    Status s = kv_.AllocateSlots(r->id, num_tokens);
    if (s.ok()) {
      entries->push_back(Entry{r, num_tokens});
      *budget -= num_tokens;
      *scheduled = true;
      return Status::Ok();
    }
    if (s.code() != StatusCode::kResourceExhausted) {
      return InternalError("scheduler: request {}: {}", r->id, s.message());
    }
    // Short of blocks: the most recently admitted running request gives way
    // (r itself when it is the most recent; running_ always holds r here).
    Request* victim = running_.back();
    XRT_RETURN_IF_ERROR(Preempt(victim, entries, budget, preempted));
    if (victim == r) {
      *scheduled = false;
      return Status::Ok();
    }
  }
}

Status Scheduler::FitImages(Request* r, int64_t computed, int64_t* n, int64_t* encoder_budget) {
  if (!encoder_cache_) return Status::Ok();
  EncoderCache& cache = *encoder_cache_;
  for (const MultimodalSpan& m : r->keys.images) {
    if (m.offset >= computed + *n) break;           // beyond this chunk
    if (m.offset + m.length <= computed) continue;  // all in the KV cache already
    if (cache.Contains(m.content_hash)) {
      Status s = cache.Reference(m.content_hash, r->id);
      if (!s.ok()) return InternalError("scheduler: request {}: {}", r->id, s.message());
      continue;
    }
    if (*encoder_budget >= m.length && cache.num_available_slots() > 0) {
      Expected<int64_t> row = cache.Allocate(m.content_hash, r->id);
      if (!row.ok())
        return InternalError("scheduler: request {}: {}", r->id, row.status().message());
      *encoder_budget -= m.length;
      continue;
    }
    // Cannot be encoded in this step: stop before the image.
    *n = m.offset > computed ? m.offset - computed : 0;
    break;
  }
  return Status::Ok();
}

void Scheduler::ReleaseComputedImages(const Request& r) {
  if (!encoder_cache_) return;
  for (const MultimodalSpan& m : r.keys.images) {
    if (m.offset + m.length > r.num_computed) break;
    encoder_cache_->Release(m.content_hash, r.id);
  }
}

Status Scheduler::AdmitFront(std::vector<Entry>* entries, int64_t* budget, int64_t* encoder_budget,
                             bool* admitted) {
  *admitted = false;
  Request* r = waiting_.front();
  const int64_t total = static_cast<int64_t>(r->tokens.size());
  if (!params_.enable_chunked_prefill &&
      total - kv_.CachedPrefixLength(r->tokens.data(), total, r->keys) > *budget) {
    return Status::Ok();  // the whole rest of the prompt must fit this step
  }

  Expected<int64_t> hit = kv_.AddRequest(r->id, r->tokens.data(), total, r->keys);
  if (!hit.ok()) {
    return InternalError("scheduler: admitting request {}: {}", r->id, hit.status().message());
  }
  const int64_t computed = *hit;
  int64_t n = std::min(total - computed, *budget);
  XRT_RETURN_IF_ERROR(FitImages(r, computed, &n, encoder_budget));
  auto undo_admission = [&]() -> Status {
    if (encoder_cache_) encoder_cache_->ReleaseRequest(r->id);
    return kv_.FreeRequest(r->id);
  };
  // Images cut the chunk to nothing, or (without chunked prefill) the cache
  // changed under us: the request waits.
  if (n == 0 || (!params_.enable_chunked_prefill && n < total - computed)) {
    XRT_RETURN_IF_ERROR(undo_admission());
    return Status::Ok();
  }
  Status s = kv_.AllocateSlots(r->id, n);
  if (!s.ok()) {
    Status undo = undo_admission();
    if (!undo.ok()) return InternalError("scheduler: request {}: {}", r->id, undo.message());
    if (s.code() != StatusCode::kResourceExhausted) {
      return InternalError("scheduler: request {}: {}", r->id, s.message());
    }
    return Status::Ok();  // waits for blocks
  }
  waiting_.pop_front();
  running_.push_back(r);
  r->state = RequestState::kPrefill;
  r->num_computed = computed;
  if (r->num_cached_tokens < 0) r->num_cached_tokens = computed;
  entries->push_back(Entry{r, n});
  *budget -= n;
  *admitted = true;
  return Status::Ok();
}

Expected<SchedulerOutput> Scheduler::Schedule() {
  if (!step_applied_) {
    return FailedPreconditionError(
        "scheduler: step {} was scheduled but UpdateAfterStep has not been called for it", step_);
  }
  ++step_;
  int64_t budget = token_budget_;
  int64_t encoder_budget = params_.encoder_budget_rows;
  std::vector<Entry> entries;
  std::vector<RequestId> preempted;
  // LoRA: the distinct adapters of this step, at most max_loras.
  std::set<int64_t> step_loras;
  auto lora_fits = [&](const Request* r) {
    const int64_t id = r->keys.lora_id;
    return params_.max_loras <= 0 || id < 0 || step_loras.count(id) > 0 ||
           static_cast<int64_t>(step_loras.size()) < params_.max_loras;
  };
  auto add_lora = [&](const Request* r) {
    if (r->keys.lora_id >= 0) step_loras.insert(r->keys.lora_id);
  };

  // 1. decodes, 2. running prefills; each in admission order.
  for (RequestState phase : {RequestState::kDecode, RequestState::kPrefill}) {
    const std::vector<Request*> snapshot = running_;  // Preempt edits running_
    for (Request* r : snapshot) {
      if (budget == 0) break;
      if (r->state != phase) continue;                    // also skips those preempted meanwhile
      if (r->num_generated() >= r->max_tokens) continue;  // awaiting FinishRequest
      const int64_t uncomputed = r->num_uncomputed();
      if (uncomputed < 1 || (phase == RequestState::kDecode && uncomputed != 1)) {
        return InternalError("scheduler: request {} ({}) has {} tokens to compute", r->id,
                             RequestStateName(r->state), uncomputed);
      }
      if (!lora_fits(r)) continue;  // its adapter waits for a step with a free slot
      int64_t n = std::min(uncomputed, budget);
      XRT_RETURN_IF_ERROR(FitImages(r, r->num_computed, &n, &encoder_budget));
      if (n == 0) continue;  // waits for the encoder budget or cache
      if (!params_.enable_chunked_prefill && n < uncomputed) continue;
      bool scheduled = false;
      XRT_RETURN_IF_ERROR(ScheduleRunning(r, n, &entries, &budget, &preempted, &scheduled));
      if (scheduled) add_lora(r);
    }
  }

  // 3. waiting requests, FCFS. Not after a preemption while others still run:
  // the pool is short, admitting would only preempt again.
  if (preempted.empty() || running_.empty()) {
    while (!waiting_.empty() && budget > 0 &&
           static_cast<int64_t>(running_.size()) < params_.limits.max_num_seqs) {
      Request* front = waiting_.front();
      if (front->num_generated() >= front->max_tokens) break;  // awaiting FinishRequest
      if (!lora_fits(front)) break;                            // strict FCFS: nobody passes it
      bool admitted = false;
      XRT_RETURN_IF_ERROR(AdmitFront(&entries, &budget, &encoder_budget, &admitted));
      if (!admitted) break;
      add_lora(front);
    }
  }

  if (entries.empty() && running_.empty() && !waiting_.empty() &&
      waiting_.front()->num_generated() < waiting_.front()->max_tokens) {
    // The pool holds nothing of a running request, yet the first waiting
    // request does not fit: waiting would never help.
    const Request* r = waiting_.front();
    const int64_t total = static_cast<int64_t>(r->tokens.size());
    const int64_t cached = kv_.CachedPrefixLength(r->tokens.data(), total, r->keys);
    const int64_t n = std::min(total - cached, budget);
    const int64_t need = BlocksFor(cached + n) - cached / params_.limits.block_size;
    return ResourceExhaustedError(
        "scheduler: request {} needs {} KV blocks for its next {} tokens but only {} of {} "
        "blocks are free and nothing else is running",
        r->id, need, n, kv_.num_free_blocks(), params_.num_kv_blocks);
  }

  SchedulerOutput out;
  out.step = step_;
  out.preempted = std::move(preempted);
  out.request_ids.reserve(entries.size());
  out.requests.reserve(entries.size());
  out.num_cached_tokens.reserve(entries.size());
  for (const Entry& e : entries) {
    Request* r = e.req;
    XRT_ASSIGN_OR_RETURN(const std::vector<int32_t>* table, kv_.BlockTable(r->id));
    ScheduledRequest sr;
    sr.token_ids = r->tokens.data() + r->num_computed;
    sr.num_tokens = e.num_tokens;
    sr.num_computed_tokens = r->num_computed;
    sr.block_table = table;
    sr.needs_logits = r->num_computed + e.num_tokens == static_cast<int64_t>(r->tokens.size());
    FillEmbedSource(r, e.num_tokens);
    if (!r->embed_source.empty()) sr.embed_source = r->embed_source.data();
    r->last_step = step_;
    out.request_ids.push_back(r->id);
    out.requests.push_back(sr);
    out.num_cached_tokens.push_back(r->num_cached_tokens);
    out.num_tokens += e.num_tokens;
    out.num_sampling += sr.needs_logits ? 1 : 0;
  }
  if (encoder_cache_) {
    // Pending entries are those allocated for this step's requests (entries of
    // requests preempted meanwhile were dropped with them).
    for (const BlockHash& h : encoder_cache_->Pending()) {
      SchedulerOutput::EncodeItem item;
      item.hash = h;
      item.cache_row = encoder_cache_->Row(h);
      bool found = false;
      for (size_t i = 0; i < out.request_ids.size() && !found; ++i) {
        const Request& r = requests_.at(out.request_ids[i]);
        for (size_t k = 0; k < r.keys.images.size() && !found; ++k) {
          if (r.keys.images[k].content_hash == h) {
            item.request = r.id;
            item.image = k;
            found = true;
          }
        }
      }
      if (!found)
        return InternalError("scheduler: an image to encode belongs to no request of the step");
      out.encode.push_back(item);
    }
  }
  step_applied_ = out.empty();
  return out;
}

void Scheduler::FillEmbedSource(Request* r, int64_t num_tokens) {
  r->embed_source.clear();
  if (!encoder_cache_) return;
  const int64_t begin = r->num_computed, end = begin + num_tokens;
  for (const MultimodalSpan& m : r->keys.images) {
    if (m.offset >= end) break;
    if (m.offset + m.length <= begin) continue;
    if (r->embed_source.empty()) r->embed_source.assign(num_tokens, -1);
    const int64_t row = encoder_cache_->Row(m.content_hash);
    for (int64_t p = std::max(begin, m.offset); p < std::min(end, m.offset + m.length); ++p)
      r->embed_source[p - begin] = static_cast<int32_t>(row + (p - m.offset));
  }
}

Status Scheduler::UpdateAfterStep(const SchedulerOutput& out, const std::vector<int32_t>& sampled) {
  if (out.step != step_ || step_applied_) {
    if (out.empty() && out.step == step_) return Status::Ok();
    return FailedPreconditionError(
        "scheduler: UpdateAfterStep for step {} but the step awaiting it is {}", out.step,
        step_applied_ ? 0 : step_);
  }
  if (static_cast<int64_t>(sampled.size()) != out.num_sampling) {
    return InvalidArgumentError("scheduler: step {}: {} sampled tokens for {} sampling requests",
                                out.step, sampled.size(), out.num_sampling);
  }
  // The step ran: what it encoded is in the cache now (entries of requests that
  // failed with it were dropped when they finished).
  if (encoder_cache_) encoder_cache_->MarkEncoded();
  size_t k = 0;
  for (size_t i = 0; i < out.requests.size(); ++i) {
    const ScheduledRequest& sr = out.requests[i];
    const RequestId id = out.request_ids[i];
    const int32_t* token = sr.needs_logits ? &sampled[k++] : nullptr;
    auto it = requests_.find(id);
    // Finished (and maybe re-added) since Schedule: nothing to apply.
    if (it == requests_.end() || it->second.last_step != out.step) continue;
    Request& r = it->second;
    if (r.state == RequestState::kWaiting || r.num_computed != sr.num_computed_tokens) {
      return InternalError(
          "scheduler: step {}: request {} ({}) has {} computed tokens, the step "
          "expected {}",
          out.step, id, RequestStateName(r.state), r.num_computed, sr.num_computed_tokens);
    }
    Status s = kv_.CommitComputed(id, sr.num_tokens);
    if (!s.ok()) return InternalError("scheduler: step {}: {}", out.step, s.message());
    r.num_computed += sr.num_tokens;
    ReleaseComputedImages(r);
    if (token != nullptr) {
      r.tokens.push_back(*token);  // invalidates this step's token_ids of r: done with them
      s = kv_.AppendTokens(id, token, 1);
      if (!s.ok()) return InternalError("scheduler: step {}: {}", out.step, s.message());
      r.state = RequestState::kDecode;
    }
  }
  step_applied_ = true;
  return Status::Ok();
}

Status Scheduler::FinishRequest(RequestId id) {
  XRT_ASSIGN_OR_RETURN(Request * r, Find(id));
  if (encoder_cache_) encoder_cache_->ReleaseRequest(id);
  if (r->state == RequestState::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
  } else {
    Status s = kv_.FreeRequest(id);
    if (!s.ok()) return InternalError("scheduler: finishing request {}: {}", id, s.message());
    running_.erase(std::find(running_.begin(), running_.end(), r));
  }
  requests_.erase(id);
  return Status::Ok();
}

Expected<RequestState> Scheduler::State(RequestId id) const {
  XRT_ASSIGN_OR_RETURN(const Request* r, Find(id));
  return r->state;
}

Expected<int64_t> Scheduler::NumComputed(RequestId id) const {
  XRT_ASSIGN_OR_RETURN(const Request* r, Find(id));
  return r->num_computed;
}

Expected<int64_t> Scheduler::NumGeneratedTokens(RequestId id) const {
  XRT_ASSIGN_OR_RETURN(const Request* r, Find(id));
  return r->num_generated();
}

Expected<const std::vector<int32_t>*> Scheduler::Tokens(RequestId id) const {
  XRT_ASSIGN_OR_RETURN(const Request* r, Find(id));
  return &r->tokens;
}

Expected<int64_t> Scheduler::NumPreemptions(RequestId id) const {
  XRT_ASSIGN_OR_RETURN(const Request* r, Find(id));
  return r->num_preemptions;
}

}  // namespace xrt
