// Scheduler: continuous batching over one paged KV cache (docs/DESIGN.md §5),
// vLLM V1 style, for executables compiled at static token buckets.
//
// A request goes through explicit states:
//
//   AddRequest ──> WAITING ──admitted──> PREFILL ──last chunk ran──> DECODE
//                     ^                     │                          │
//                     └──── preempted ──────┴──────────────────────────┘
//   FinishRequest (from any state) ──> forgotten, blocks freed
//
// Uniform view of a step: every known token of a request (prompt, then the
// tokens it sampled) needs its KV computed once; a request's uncomputed
// tokens are [num_computed, num_tokens). A request samples after a step
// whose chunk reaches its last known token. PREFILL: admitted, has not
// sampled since (its prompt, or after a preemption prompt + generated, is
// being computed chunk by chunk). DECODE: has sampled since admission; exactly
// one uncomputed token (the one sampled last step).
//
// Schedule() builds one step under a token budget of
//   min(max_num_batched_tokens, buckets.max_tokens())
// and at most max_num_seqs requests, in this order:
//   1. DECODE requests, in admission order, 1 token each;
//   2. PREFILL requests (admitted in an earlier step), in admission order,
//      their next chunk: min(uncomputed, budget left);
//   3. WAITING requests, FCFS, while the budget, max_num_seqs (counting every
//      running request) and the KV pool allow. KvCacheManager::AddRequest
//      attaches the cached prefix (num_computed > 0 on a hit); the first
//      chunk is min(uncomputed, budget left). Without chunked prefill a
//      request whose uncomputed tokens do not fit the budget left waits. The
//      first waiting request that does not fit stops admission (strict FCFS:
//      no later request jumps ahead). No request is admitted in a step that
//      preempted one while others still run (memory is tight).
//
// LoRA: a step holds at most max_loras distinct adapters (PrefixKeys::lora_id;
// the compiled adapter slots). A running request whose adapter would be one
// too many is not scheduled this step (it keeps its blocks); a waiting one
// stops admission like any request that does not fit (strict FCFS, where vLLM
// lets later requests pass it).
//
// Images (vLLM V1's encoder scheduling, with whole images only): a request's
// PrefixKeys::images are the placeholder spans of its images. Whenever a
// request's chunk [c, c + n) overlaps an image whose tokens are not all
// computed, that image's encoder output must be in the encoder cache for the
// step: it already is (a hit, possibly from another request or an earlier
// step), or it is encoded in this step (the whole image, within the step's
// encoder budget and a free or evictable cache slot). When neither is
// possible the chunk is cut back to the image's start (n = offset - c; a chunk
// that would start inside it is not scheduled this step), so a chunk never
// covers image tokens whose rows are not in the cache, but it may end inside
// an image whose rows are (the rest reads them in later steps). A request
// holds its entries until all of an image's tokens are computed (then the
// entry becomes freeable), or until it is preempted or finished.
// SchedulerOutput::encode lists this step's images to encode (each once, even
// when several requests of the step share it); ScheduledRequest::embed_source
// gives every scheduled image token its cache row.
//
// Preemption by recompute: when a running request's AllocateSlots fails for
// lack of blocks, the most recently admitted running request is preempted
// (its blocks freed, removed from this step if it was already in it, its
// num_computed reset to 0) and goes to the FRONT of the waiting queue; its
// prompt to recompute is everything it knows (prompt + generated tokens), so
// when it is admitted again its last chunk samples its next token exactly as
// if nothing had happened (prefix caching may make the recompute cheap).
// Then the allocation is retried. When the request that needs blocks is
// itself the most recently admitted, it is the one preempted (earlier
// requests have priority). A step in which nothing at all can run because
// the first waiting request does not fit an otherwise empty KV pool is an
// error (ResourceExhausted naming the request and the block counts) rather
// than an endless series of empty steps. AddRequest already rejects a
// request that could never fit the pool alone.
//
// Engine loop:
//   XRT_ASSIGN_OR_RETURN(SchedulerOutput out, sched.Schedule());
//   if (!out.empty()) {
//     input_builder.Build(out.requests, &inputs);  ... run, sample ...
//     sched.UpdateAfterStep(out, sampled);   // one token per sampling request
//   }
//   for each request that is done (eos, stop string, max_tokens, abort):
//     sched.FinishRequest(id);
// A request that has generated max_tokens tokens is not scheduled again; the
// engine must FinishRequest it (it still counts as running until then).
//
// Pointers in a SchedulerOutput (token ids, block tables) point into the
// scheduler and its KvCacheManager. A request's pointers stay valid until
// UpdateAfterStep for that output or FinishRequest of that request,
// whichever comes first. FinishRequest between Schedule and UpdateAfterStep
// (an abort while the step runs) is allowed; UpdateAfterStep then skips that
// request. Schedule refuses to run while the previous non-empty step has not
// been applied with UpdateAfterStep.
//
// Determinism: no hash-order iteration; the same calls give the same steps.
// Ownership: owns its KvCacheManager (built from params.kv) and copies of
// every request's tokens. Thread-compatible: the engine thread owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/bucket_table.h"
#include "runtime/engine/encoder_cache.h"
#include "runtime/engine/input_builder.h"
#include "runtime/engine/serving_limits.h"
#include "runtime/kv_cache/block_hash.h"
#include "runtime/kv_cache/kv_cache_manager.h"

namespace xrt {

struct SchedulerParams {
  // The limits served at: max_num_seqs (requests per step, and running at
  // once), max_num_batched_tokens (token budget per step), max_model_len
  // (prompt + max_tokens of one request), and the KV geometry of the
  // requests' block tables: max_blocks_per_req * block_size must hold
  // max_model_len positions.
  ServingLimits limits;
  // The compiled shapes: a step's tokens <= buckets.max_tokens(); a step's
  // requests (hence its logits rows) <= max_num_seqs <= buckets.max_reqs().
  BucketTable buckets;
  bool enable_chunked_prefill = true;
  // Strict serving mode (xrt run --check-recompilation): the budget is
  // max_num_batched_tokens even when no compiled bucket holds that many
  // tokens, so such a step is formed and the engine fails it instead of the
  // scheduler splitting it. Off: the budget is capped by the largest bucket.
  bool strict_buckets = false;
  // The KV cache the scheduler creates and owns (KvCacheManager, with the
  // geometry of `limits`).
  int64_t num_kv_blocks = 0;
  bool enable_prefix_caching = false;
  // Images (a LLaVA-style model; all 0 for a text-only one): the encoder-output
  // cache the scheduler owns (EncoderCache of encoder_cache_rows rows, items of
  // encoder_item_rows = tokens_per_image rows) and the encoder's budget per step
  // in rows (whole images only: budget / item rows images per step).
  int64_t encoder_cache_rows = 0;
  int64_t encoder_item_rows = 0;
  int64_t encoder_budget_rows = 0;
  // Multi-LoRA: the most distinct adapters (PrefixKeys::lora_id >= 0) one step
  // may hold, the artifact's adapter slots; 0: no limit.
  int64_t max_loras = 0;
};

enum class RequestState {
  kWaiting,  // queued (new or preempted); holds no KV blocks
  kPrefill,  // running; more than one token still to compute
  kDecode,   // running; one token (the last sampled) to compute per step
};

const char* RequestStateName(RequestState state);

// One step, in step order (the order of the tokens in the lm_step batch).
struct SchedulerOutput {
  uint64_t step = 0;  // sequence number of the Schedule() call that made it (1-based)
  std::vector<RequestId> request_ids;
  // For InputBuilder::Build. needs_logits says whether the request samples
  // after this step (its chunk reaches its last known token: the last chunk of
  // a (re)computed prompt, or a decode). lora_slot / embed_source are left at
  // their defaults (-1 / nullptr) for the engine to fill.
  std::vector<ScheduledRequest> requests;
  // Per request: prompt tokens found in the prefix cache when the request was
  // first admitted (usage.prompt_tokens_details.cached_tokens).
  std::vector<int64_t> num_cached_tokens;
  // Requests preempted (back to WAITING) during this step, in preemption order.
  std::vector<RequestId> preempted;
  int64_t num_tokens = 0;    // sum of requests[i].num_tokens
  int64_t num_sampling = 0;  // requests with needs_logits
  // Images to encode before this step runs, in allocation order: the first
  // encoder-cache row of each and one request (with the image's index among its
  // PrefixKeys::images) that carries it.
  struct EncodeItem {
    BlockHash hash;
    int64_t cache_row = 0;
    RequestId request = 0;
    size_t image = 0;
  };
  std::vector<EncodeItem> encode;

  bool empty() const { return requests.empty(); }
  size_t size() const { return requests.size(); }
  bool samples(size_t i) const { return requests[i].needs_logits; }
};

class Scheduler {
 public:
  // InvalidArgument naming the field for: max_num_seqs, max_num_batched_tokens
  // or max_model_len < 1; an empty bucket table; buckets.max_reqs() <
  // max_num_seqs; a KV cache whose requests cannot hold max_model_len
  // positions; without chunked prefill, a token budget below max_model_len
  // (a recomputed request could never run). Errors of KvCacheManager::Create.
  static Expected<Scheduler> Create(SchedulerParams params);

  // Queues a new request at the back of the waiting queue. The scheduler
  // copies the prompt. Errors (nothing changes): InvalidArgument for a known
  // id, an empty prompt, max_tokens < 1, prompt + max_tokens > max_model_len,
  // bad keys; ResourceExhausted when the request alone needs more KV blocks
  // than the pool has.
  Status AddRequest(RequestId id, std::vector<int32_t> prompt, int64_t max_tokens,
                    PrefixKeys keys = {});

  // Builds the next step (see the file comment). An empty output when there
  // is nothing to run. Errors: ResourceExhausted when nothing can run because
  // the first waiting request does not fit the KV pool; Internal when the KV
  // cache manager disagrees with the scheduler (a bug); FailedPrecondition
  // when the previous non-empty step was not applied (UpdateAfterStep). State
  // is consistent after an error.
  Expected<SchedulerOutput> Schedule();

  // The step `out` (the last Schedule() result) ran. `sampled` holds one
  // token per request of `out` with needs_logits, in step order (including
  // requests finished since Schedule: their tokens are ignored). Commits each
  // request's computed tokens to the KV cache, appends its sampled token, and
  // moves a request whose prompt is now computed from PREFILL to DECODE.
  // FailedPrecondition when `out` is not the last step or was already
  // applied; InvalidArgument when sampled.size() != out.num_sampling.
  Status UpdateAfterStep(const SchedulerOutput& out, const std::vector<int32_t>& sampled);

  // The engine is done with the request (eos, stop string, max_tokens,
  // abort): frees its KV blocks and forgets it, whatever its state.
  // NotFound for an unknown id.
  Status FinishRequest(RequestId id);

  bool HasUnfinished() const { return !requests_.empty(); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_preemptions() const { return num_preemptions_; }  // total so far

  // Per request (NotFound for an unknown or finished id).
  Expected<RequestState> State(RequestId id) const;
  Expected<int64_t> NumComputed(RequestId id) const;  // 0 while WAITING
  Expected<int64_t> NumGeneratedTokens(RequestId id) const;
  // Prompt followed by the generated tokens.
  Expected<const std::vector<int32_t>*> Tokens(RequestId id) const;
  Expected<int64_t> NumPreemptions(RequestId id) const;

  const KvCacheManager& kv() const { return kv_; }
  // The encoder-output cache; nullptr without images.
  const EncoderCache* encoder_cache() const { return encoder_cache_ ? &*encoder_cache_ : nullptr; }
  const SchedulerParams& params() const { return params_; }
  int64_t token_budget() const { return token_budget_; }

 private:
  struct Request {
    RequestId id = 0;
    std::vector<int32_t> tokens;  // prompt + generated; token_ids point into it
    int64_t num_prompt_tokens = 0;
    int64_t max_tokens = 0;
    PrefixKeys keys;
    RequestState state = RequestState::kWaiting;
    int64_t num_computed = 0;
    int64_t num_cached_tokens = -1;  // at first admission; -1: never admitted
    int64_t num_preemptions = 0;
    uint64_t last_step = 0;             // the step that last scheduled it
    std::vector<int32_t> embed_source;  // this step's, when it overlaps an image

    int64_t num_generated() const {
      return static_cast<int64_t>(tokens.size()) - num_prompt_tokens;
    }
    int64_t num_uncomputed() const { return static_cast<int64_t>(tokens.size()) - num_computed; }
  };

  // A request of the step under construction.
  struct Entry {
    Request* req;
    int64_t num_tokens;
  };

  Scheduler(SchedulerParams params, KvCacheManager kv, int64_t token_budget)
      : params_(std::move(params)), kv_(std::move(kv)), token_budget_(token_budget) {}

  Expected<Request*> Find(RequestId id);
  Expected<const Request*> Find(RequestId id) const;
  int64_t BlocksFor(int64_t positions) const;

  // Schedules `num_tokens` more tokens of running request `r`, preempting
  // (most recently admitted first) while the pool is short. Sets *scheduled
  // to false when `r` itself got preempted.
  Status ScheduleRunning(Request* r, int64_t num_tokens, std::vector<Entry>* entries,
                         int64_t* budget, std::vector<RequestId>* preempted, bool* scheduled);
  // Preempts running request `r` (see the file comment).
  Status Preempt(Request* r, std::vector<Entry>* entries, int64_t* budget,
                 std::vector<RequestId>* preempted);
  // Makes sure every image overlapping request `r`'s chunk of *n tokens from
  // `computed` is in the encoder cache for this step (referenced or allocated,
  // spending *encoder_budget), cutting *n back to the first image that cannot
  // be (see the file comment).
  Status FitImages(Request* r, int64_t computed, int64_t* n, int64_t* encoder_budget);
  // Fills r->embed_source for this step's chunk of `num_tokens` (empty when it
  // overlaps no image).
  void FillEmbedSource(Request* r, int64_t num_tokens);
  // Releases the entries of `r`'s images whose tokens are all computed.
  void ReleaseComputedImages(const Request& r);

  // Tries to admit the first waiting request. *admitted false: it stays
  // waiting (and admission stops for this step).
  Status AdmitFront(std::vector<Entry>* entries, int64_t* budget, int64_t* encoder_budget,
                    bool* admitted);

  SchedulerParams params_;
  KvCacheManager kv_;
  std::optional<EncoderCache> encoder_cache_;
  int64_t token_budget_ = 0;
  // Node-based: Request addresses (and their token vectors) are stable.
  std::map<RequestId, Request> requests_;
  std::deque<Request*> waiting_;   // FCFS; preempted requests at the front
  std::vector<Request*> running_;  // admission order
  int64_t num_preemptions_ = 0;
  uint64_t step_ = 0;         // last Schedule() sequence number
  bool step_applied_ = true;  // UpdateAfterStep ran for step_
};

}  // namespace xrt
