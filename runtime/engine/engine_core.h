// EngineCore: THE engine step, once (vLLM V1's EngineCore.step). Every client
// drives this one loop: the server's engine thread (runtime/engine/
// llm_engine.h), `xrt generate` (one request) and the trace replay behind
// `xcc check --trace` and `xcc tune-buckets` (runtime/engine/replay.h, with an
// executor that runs no kernels), so what the check proves is what the server
// does.
//
// One Step():
//   1. Scheduler::Schedule: decodes first, then chunked prefills, preemption
//      by recompute when KV blocks run out (scheduler.h);
//   2. strict mode (check_recompilation): a step beyond the largest compiled
//      token bucket fails its largest chunks (StepStats::unbucketed) and runs
//      the rest; otherwise the scheduler's budget never exceeds that bucket;
//   3. InputBuilder::Build pads the step into the compiled shapes (and
//      BuildImages lists the images the scheduler chose to encode);
//   4. StepExecutor::Execute runs vision_encode (when images are to be
//      encoded), lm_step and lm_logits;
//   5. one token is sampled per request that reached its last known token
//      (an executor without logits gets a fixed token: replay);
//   6. Scheduler::UpdateAfterStep commits the KV and appends the tokens;
//   7. StopChecker: eos / stop token ids / stop strings / max_tokens /
//      max_model_len; finished requests are freed;
//   8. outputs: one RequestOutput per request that got a token or finished,
//      and the StepStats from which metrics (LLMEngine) and replay reports
//      are both computed.
//
// Failures are per request: a step whose inputs cannot be built or whose
// executables fail finishes the requests that were in it with "error"; the
// requests that were not in the step (waiting, or running but not scheduled)
// go on. A request whose sampling fails alone gets "error". Only a Schedule()
// error (the scheduler's state is then not to be trusted) fails every request.
//
// Ownership: owns the Scheduler (and through it the KV cache bookkeeping), the
// InputBuilder and every request's state; the executor and tokenizer are
// borrowed and must outlive the core. Thread-compatible: one thread drives a
// core, except Validate(), limits() and request_processor_params(), which
// read immutable state and may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/bucket_table.h"
#include "runtime/engine/engine_request.h"
#include "runtime/engine/input_builder.h"
#include "runtime/engine/request_processor.h"
#include "runtime/engine/serving_limits.h"
#include "runtime/engine/stop_checker.h"
#include "runtime/sampler/sampler.h"

namespace xrt {

class LoraManager;
class Scheduler;
class Tokenizer;

// Runs the compiled executables of one step. Implemented by ModelRunner (real
// kernels) and by the replay's executor (no kernels, no logits).
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  // Runs vision_encode for in.image_bucket (when > 0: the images' features go
  // to their encoder-cache rows), lm_step for `in.token_bucket` and, when
  // in.num_logits > 0, lm_logits
  // for `in.req_bucket`. Returns logits [in.num_logits][vocab_size], valid
  // until the next Execute; nullptr when in.num_logits == 0 or when the
  // executor computes no logits (the core then samples a fixed token).
  virtual Expected<const float*> Execute(const StepInputs& in) = 0;
};

struct EngineCoreParams {
  StepExecutor* executor = nullptr;  // must outlive the core
  // The limits the executables were compiled for, and those to serve at
  // (0 fields: the compiled value; never above it, see ResolveServingLimits).
  ServingLimits compiled;
  ServingLimits requested;
  BucketTable buckets;  // compiled lm_step token buckets / lm_logits req buckets
  int64_t num_kv_blocks = 0;
  int64_t vocab_size = 0;                // the logits' width; prompt token ids must be below it
  std::vector<int32_t> eos_token_ids;    // the model's (ModelEosTokenIds)
  const Tokenizer* tokenizer = nullptr;  // detokenizes outputs; null: no text
  bool enable_prefix_caching = true;
  // Strict mode (xrt run --check-recompilation): see the file comment.
  bool check_recompilation = false;
  // A LLaVA-style model (0: text-only): the encoder-output cache in rows and the
  // rows (placeholder tokens) of one image. The encoder budget per step is as
  // many whole images as max(max_num_batched_tokens, tokens_per_image) rows hold
  // (vLLM's compute_encoder_budget), at most the largest vision_encode bucket.
  int64_t encoder_cache_rows = 0;
  int64_t tokens_per_image = 0;
  // An artifact with LoRA: its adapter slots (owned by the executor's side: the
  // ModelRunner, or the replay; must outlive the core). A step holds at most
  // max_loras distinct adapters; before it runs they are put into slots (their
  // requests' lora_slot) and the step runs the matching lm_step variant. null:
  // requests with an adapter are refused.
  LoraManager* lora = nullptr;
  // Distinct adapters one step may hold when served below the compiled slot
  // count (xrt run --max-loras); 0: all of the artifact's max_loras slots.
  int64_t max_loras = 0;
};

// What one Step() did, for metrics and replay reports.
struct StepStats {
  uint64_t step = 0;         // the scheduler's step number; 0: nothing was scheduled
  int64_t num_tokens = 0;    // tokens scheduled (incl. requests strict mode failed)
  int64_t num_reqs = 0;      // requests scheduled
  int64_t num_sampling = 0;  // of which sample after the step
  bool ran = false;          // the executables ran
  // Executables run (xpk::abi::ExecutableName) and their padding: bucket minus
  // real tokens (lm_step) or real sampling rows (lm_logits). "" when not run.
  std::string lm_step;  // incl. its LoRA mode, e.g. "lm_step_t64_mixed"
  int64_t lm_step_padding = 0;
  // LoRA: the step's lm_step variant, its distinct adapters, and the adapters
  // copied into a slot for it (loads; swaps: of which replaced another one).
  xpk::LoraMode lora_mode = xpk::LoraMode::none;
  int64_t lora_adapters = 0;
  int64_t lora_loads = 0;
  int64_t lora_swaps = 0;
  std::string lm_logits;
  int64_t lm_logits_padding = 0;
  int64_t preemptions = 0;        // requests preempted while forming the step
  int64_t prompt_tokens = 0;      // prefill tokens computed (incl. recompute)
  int64_t generation_tokens = 0;  // tokens sampled
  int64_t prefix_queries = 0;     // prompt tokens of requests scheduled for the first time
  int64_t prefix_hits = 0;        // of which the prefix cache held
  // Images: encoded by this step's vision_encode (its name and padding: bucket
  // minus images, "" / 0 when none ran), and the encoder cache's hits, misses
  // (= entries allocated for encoding) and evictions while forming the step.
  int64_t images_encoded = 0;
  std::string vision_encode;
  int64_t vision_encode_padding = 0;
  int64_t encoder_cache_hits = 0;
  int64_t encoder_cache_misses = 0;
  int64_t encoder_cache_evictions = 0;
  // Strict mode: the step had no compiled bucket; the message its failed
  // requests got (names the shape and the fix). "" otherwise.
  std::string unbucketed;
  // The step (or scheduling) failed: its requests got this message. Ok otherwise.
  Status error;
};

struct EngineCoreOutputs {
  StepStats stats;
  std::vector<RequestOutput> outputs;  // in step order; each finished one once
};

class EngineCore {
 public:
  // InvalidArgument for a missing executor, limits beyond the compiled ones
  // (ResolveServingLimits' message), or errors of Scheduler/InputBuilder::Create.
  static Expected<std::unique_ptr<EngineCore>> Create(const EngineCoreParams& params);
  ~EngineCore();

  // Checks a request against the limits served at (RequestProcessor::Validate).
  // Thread-safe.
  Status Validate(const EngineRequest& request) const;

  // Queues a request (Validate first). InvalidArgument for a live request_id.
  Status AddRequest(EngineRequest request);

  // Runs one step (see the file comment). Nothing scheduled: empty outputs,
  // stats.step == 0.
  EngineCoreOutputs Step();

  // Finishes a live request with "abort" (its blocks are freed) and returns
  // its final output; nullopt for an unknown id.
  std::optional<RequestOutput> Abort(const std::string& request_id);
  // Aborts every live request, in the order they were added.
  std::vector<RequestOutput> AbortAll();

  bool HasUnfinished() const { return !live_.empty(); }
  int64_t num_running() const;
  int64_t num_waiting() const;
  int64_t num_kv_blocks_used() const;
  int64_t num_steps() const { return num_steps_; }  // steps that ran executables

  // The limits served at (resolved). Thread-safe.
  const ServingLimits& limits() const { return limits_; }
  int64_t num_kv_blocks() const { return params_.num_kv_blocks; }
  // Limits, KV pool, vocabulary and tokenizer for a RequestProcessor that
  // makes requests for this core (add the chat template and sampling
  // defaults). Thread-safe.
  RequestProcessorParams request_processor_params() const { return validator_.params(); }

 private:
  struct Live;
  EngineCore(const EngineCoreParams& params, const ServingLimits& limits, InputBuilder builder,
             std::unique_ptr<Scheduler> scheduler);

  // Finishes request `id` for `reason` ("abort" or "error"); its output.
  RequestOutput Finish(uint64_t id, const std::string& reason, const std::string& error);
  // Forgets request `id`: frees its KV blocks (scheduler) and drops it from the maps.
  void Forget(uint64_t id);
  RequestOutput OutputOf(const Live& r) const;
  // Puts the step's adapters into LoRA slots and sets each request's lora_slot.
  Status AssignLoraSlots(const std::vector<uint64_t>& ids, std::vector<ScheduledRequest>* step,
                         StepStats* st);
  // Fails every request of `ids` that is still live.
  void FailAll(const std::vector<uint64_t>& ids, const std::string& error,
               std::vector<RequestOutput>* outputs);

  EngineCoreParams params_;
  ServingLimits limits_;
  RequestProcessor validator_;
  InputBuilder builder_;
  std::unique_ptr<Scheduler> scheduler_;
  Sampler sampler_;
  StepInputs inputs_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Live>> live_;  // by internal id (= admission order)
  std::map<std::string, uint64_t> by_name_;
  int64_t num_steps_ = 0;
  // The encoder cache's counters at the end of the previous step.
  int64_t cache_hits_ = 0, cache_misses_ = 0, cache_evictions_ = 0;
};

// Drives `core` until no request is left, passing every output to `on_output`
// in order. Returns the first step error (the requests it failed were passed
// to on_output with "error" as well).
Status RunToCompletion(EngineCore& core,
                       const std::function<void(const RequestOutput&)>& on_output);

}  // namespace xrt
