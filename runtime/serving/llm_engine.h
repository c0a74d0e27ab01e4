// LLMEngine: continuous batching over one compiled artifact.
//
// One engine thread runs the loop: take new requests and aborts, ask the
// Scheduler for a step (decodes first, then chunked prefills, preemption by
// recompute when KV blocks run out), build the padded step inputs, run the
// compiled executables (ModelRunner), sample one token per request that needs
// it, detokenize, apply stop conditions and deliver RequestOutputs through the
// callbacks. Nothing here compiles; a step whose token count has no compiled
// bucket cannot be produced (the scheduler's budget is capped by the largest
// bucket).
//
// Thread-safe: Submit/Abort/Shutdown/MetricsText may be called from any
// thread. Callbacks run on the engine thread and must not block.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/model_runner/model_runner.h"
#include "runtime/serving/engine_api.h"
#include "runtime/sampler/sampler.h"
#include "runtime/serving/engine_metrics.h"

namespace xrt {

class Scheduler;

struct LLMEngineParams {
  ModelRunner* runner = nullptr;     // must outlive the engine
  // Serving limits; 0: the artifact's. They may be lowered, never raised
  // beyond what the artifact was compiled for (Create says which and why).
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  bool enable_prefix_caching = true;
  // Strict mode (xrt run --check-recompilation): a step that no compiled
  // bucket holds fails its overflowing requests (counted in /metrics, logged
  // with its shape) instead of being split. Neither mode ever compiles.
  bool check_recompilation = false;
};

class LLMEngine : public AsyncEngine {
 public:
  static Expected<std::unique_ptr<LLMEngine>> Create(const LLMEngineParams& params);
  ~LLMEngine() override;

  Status Submit(EngineRequest request, OutputCallback callback) override;
  void Abort(const std::string& request_id) override;
  void Shutdown() override;
  std::string MetricsText() const override;
  int64_t max_model_len() const override;

  // Queues several requests at once, so the engine sees them together (for
  // deterministic tests and trace replays). All-or-nothing validation.
  Status SubmitBatch(std::vector<std::pair<EngineRequest, OutputCallback>> batch);
  // Runs of each compiled executable so far ("lm_step_t16" -> count).
  std::map<std::string, int64_t> bucket_hits() const { return metrics_.BucketHits(); }

  // Test hook: the number of steps run and preemptions so far.
  int64_t num_steps() const { return metrics_.steps.load(); }
  int64_t num_preemptions() const;

 private:
  struct Live;  // a request in flight
  explicit LLMEngine(const LLMEngineParams& params);
  void Loop();
  Status Step();
  void UpdateGauges();
  Status Validate(const EngineRequest& request) const;
  void Finish(uint64_t id, const std::string& reason, const std::string& error = "");
  void Deliver(Live& r, std::vector<GeneratedToken> tokens, std::string text, bool finished,
               const std::string& reason, const std::string& error);

  LLMEngineParams params_;
  ModelRunner& runner_;
  std::unique_ptr<Scheduler> scheduler_;
  Sampler sampler_;
  StepInputs inputs_;

  mutable std::mutex mu_;  // guards the queues below and accepting_
  std::condition_variable cv_;
  std::deque<std::pair<EngineRequest, OutputCallback>> incoming_;
  std::vector<std::string> aborts_;
  bool accepting_ = true;
  bool stop_ = false;

  // Engine-thread state.
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Live>> live_;
  std::map<std::string, uint64_t> by_name_;

  mutable EngineMetrics metrics_;
  std::thread thread_;
};

}  // namespace xrt
