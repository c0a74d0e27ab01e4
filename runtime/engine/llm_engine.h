// LLMEngine: the serving engine of `xrt run`: a thread, queues and callbacks
// around one EngineCore (runtime/engine/engine_core.h), which does the work
// (continuous batching, the compiled executables, sampling, stop checks).
//
// The engine thread loops: take new requests and aborts, run one core step,
// compute the metrics from the step's StepStats and outputs, and deliver the
// RequestOutputs through the callbacks. Nothing here compiles.
//
// Thread-safe: Submit/Abort/Shutdown/MetricsText may be called from any
// thread. Callbacks run on the engine thread and must not block.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine/engine_api.h"
#include "runtime/engine/engine_core.h"
#include "runtime/engine/engine_metrics.h"

namespace xrt {

class LLMEngine : public AsyncEngine {
 public:
  // Builds the core (EngineCore::Create's errors, e.g. a requested limit
  // beyond the compiled one) and starts the engine thread.
  static Expected<std::unique_ptr<LLMEngine>> Create(const EngineCoreParams& params);
  ~LLMEngine() override;

  // Validates (EngineCore::Validate) and queues.
  Status Submit(EngineRequest request, OutputCallback callback) override;
  void Abort(const std::string& request_id) override;
  void Pause(PauseMode mode) override;
  void Resume() override;
  int64_t RunSteps(int64_t steps) override;
  bool IsPaused() const override;
  void Shutdown() override;
  std::string MetricsText() const override;
  int64_t max_model_len() const override { return limits().max_model_len; }

  // The limits served at. Thread-safe.
  const ServingLimits& limits() const { return core_->limits(); }
  int64_t num_kv_blocks() const { return core_->num_kv_blocks(); }
  // For the RequestProcessor that makes this engine's requests. Thread-safe.
  RequestProcessorParams request_processor_params() const {
    return core_->request_processor_params();
  }

  // Queues several requests at once, so the engine sees them together (for
  // deterministic tests and trace replays). All-or-nothing validation.
  Status SubmitBatch(std::vector<std::pair<EngineRequest, OutputCallback>> batch);
  // Runs of each compiled executable so far ("lm_step_t16" -> count).
  std::map<std::string, int64_t> bucket_hits() const { return metrics_.BucketHits(); }

  // Test hook: the number of steps run and preemptions so far.
  int64_t num_steps() const { return metrics_.steps.load(); }
  int64_t num_preemptions() const { return metrics_.preemptions.load(); }

 private:
  struct Live;  // a request in flight: its callback and timestamps
  explicit LLMEngine(std::unique_ptr<EngineCore> core);
  void Loop();
  void Deliver(const RequestOutput& output);
  void CountStep(const StepStats& stats);
  void UpdateGauges();
  // After a loop iteration that ran a step (or found none to run): spends
  // RunSteps' budget, pausing again when it is spent (or nothing is left).
  void EndStepBudget(bool stepped);

  std::unique_ptr<EngineCore> core_;  // driven by the engine thread only

  mutable std::mutex mu_;  // guards the queues and flags below
  std::condition_variable cv_;
  std::deque<std::pair<EngineRequest, OutputCallback>> incoming_;
  std::vector<std::string> aborts_;
  bool accepting_ = true;
  bool stop_ = false;
  bool paused_ = false;
  bool abort_all_ = false;   // a Pause(kAbort) the loop has not carried out yet
  int64_t pauses_ = 0;       // Pause calls so far
  int64_t pauses_seen_ = 0;  // of which the loop has carried out
  bool loop_done_ = false;
  int64_t step_budget_ = -1;  // RunSteps: steps left before pausing again; -1: none
  int64_t budget_steps_run_ = 0;
  std::condition_variable pause_cv_;  // pauses_seen_, step_budget_ or loop_done_ moved

  // Engine-thread state.
  std::map<std::string, std::unique_ptr<Live>> live_;  // by request_id

  mutable EngineMetrics metrics_;
  std::thread thread_;
};

}  // namespace xrt
