// The boundary between the HTTP server and the serving engine.
//
// The server turns an OpenAI request into one EngineRequest per choice (n > 1
// fans out into n requests sharing the prompt; prefix caching makes that
// cheap), submits it with a callback, and streams the RequestOutputs it
// receives. The engine runs its loop on its own thread; callbacks are invoked
// on that thread and must not block (push into a queue and return).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/engine_request.h"  // EngineRequest, RequestOutput

namespace xrt {

using OutputCallback = std::function<void(const RequestOutput&)>;

// What Pause does with the requests in flight (vLLM's POST /pause?mode=).
enum class PauseMode {
  kAbort,  // end each with finish_reason "abort" (vLLM's default)
  kKeep,   // freeze each where it is, KV blocks kept; Resume goes on
};

class AsyncEngine {
 public:
  virtual ~AsyncEngine() = default;

  // Queues a request. InvalidArgument (naming the field) for bad sampling
  // params, an empty prompt, or prompt + max_tokens > max_model_len; the
  // callback is then never called. Otherwise the callback receives outputs
  // until one with finished == true. Thread-safe.
  virtual Status Submit(EngineRequest request, OutputCallback callback) = 0;

  // Aborts a live request (its blocks are freed); a final output with
  // finish_reason "abort" is delivered. Unknown ids are ignored. Thread-safe.
  virtual void Abort(const std::string& request_id) = 0;

  // Stops running steps (vLLM's pause_generation: weight updates, and tests
  // that need requests to meet in one step). Returns once no step is running
  // and, with kAbort, every request in flight has its final output. Requests
  // submitted while paused are accepted and wait. Thread-safe.
  virtual void Pause(PauseMode mode) = 0;
  // Steps again: frozen and waiting requests go on. Thread-safe.
  virtual void Resume() = 0;
  // Single-stepping (a debugger's "step", for tests that must catch requests
  // in flight on any machine): runs at most `steps` steps (fewer once nothing
  // is left to run), then stays paused, as Pause(kKeep) leaves it. Returns the
  // steps run, once they ran. Thread-safe.
  virtual int64_t RunSteps(int64_t steps) = 0;
  virtual bool IsPaused() const = 0;

  // Stops accepting requests, aborts every live one, stops the loop.
  virtual void Shutdown() = 0;

  // Prometheus text exposition of the engine's metrics. Thread-safe.
  virtual std::string MetricsText() const = 0;

  // Serving limits, for request validation and /v1/models.
  virtual int64_t max_model_len() const = 0;
};

}  // namespace xrt
