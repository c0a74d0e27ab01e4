// HttpServer: the OpenAI-compatible HTTP front end of an AsyncEngine.
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
// GET /health, GET /metrics, with ServerParams::allow_runtime_lora_updating
// POST /v1/load_lora_adapter, POST /v1/unload_lora_adapter, and with
// ServerParams::server_dev_mode POST /pause, POST /resume, GET /is_paused. Requests are parsed by
// openai_protocol.h, made into an EngineRequest by the RequestProcessor (tokenization, chat
// template, the model's sampling defaults, limits), and fanned out into n ("<id>-0", "<id>-1",
// ...). Each HTTP request owns a queue (mutex + condvar) into which the
// engine's callbacks push RequestOutputs; the HTTP thread waits on it, so the
// engine thread never blocks. Streaming responses are SSE. When the client
// goes away every unfinished choice is aborted (its KV blocks are freed):
// a stream notices on its next write or idle probe, a non-streaming request
// by polling its connection while it waits (client_connection.h).
//
// Lifetime: the engine and the request processor must outlive the server.
// Threading: Start/StopAccepting/Stop/Wait from one controlling thread;
// num_in_flight from any thread; requests are served on `http_threads`
// worker threads.
//
// Graceful shutdown (xrt run on SIGTERM, like uvicorn under vLLM):
//   server.StopAccepting();  // new connections are refused; returns at once
//   ... wait while server.num_in_flight() > 0, up to a deadline ...
//   engine->Shutdown();      // ends what is left with finish_reason "abort":
//                            // streams get a final chunk and [DONE]
//   server.Wait();           // joins the listener and the workers
// Immediate stop (tests, the destructor):
//   server.Stop();           // stop accepting; cuts streams at their next
//                            // event, without a final chunk
//   engine->Shutdown();      // aborts in-flight requests, so their handlers return
//   server.Wait();
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "runtime/base/status.h"
#include "runtime/engine/engine_api.h"
#include "runtime/engine/request_processor.h"
#include "runtime/server/media_fetcher.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace xrt {

struct LoraAdapter;
class LoraRegistry;
class Tokenizer;

namespace server {

struct ServerParams {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port())
  std::string served_model_name;
  std::string api_key;  // empty: no auth
  // Each keep-alive connection holds a worker while open, so this must exceed
  // the number of concurrent clients (xrt run uses max(64, 4 x max_num_seqs)).
  int http_threads = 64;
  size_t max_body_bytes = 32 << 20;  // larger bodies get 413
  // How image content parts are fetched (--allowed-local-media-path,
  // --limit-mm-per-prompt, ...); checked by Start. With a vision model (the
  // processor's params().vision) a chat request's images are fetched, then
  // decoded and placed by the RequestProcessor; a fetch or decode failure, or
  // too many images, is a 400 naming the part ("messages[0].content[1]: ...").
  // A model without vision answers any request with image parts with a 400
  // naming the first one ("...: this model does not accept images"), fetching
  // nothing.
  MediaFetchParams media;
  // Multi-LoRA (an artifact compiled with --enable-lora): the adapters a
  // request selects with "model": "<adapter name>" (the served_model_name
  // selects none) and that /v1/models lists after the base model (id: the
  // name, root: its PEFT directory, parent: served_model_name). Borrowed, must
  // outlive the server; null: no adapters (then every other model name is a
  // 404 model_not_found, as any unknown one).
  LoraRegistry* lora_registry = nullptr;
  // vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING (xrt run
  // --allow-runtime-lora-updating): POST /v1/load_lora_adapter {"lora_name",
  // "lora_path"} and /v1/unload_lora_adapter {"lora_name"} exist (else 404).
  // Loading reads and validates the PEFT directory on the HTTP thread (the
  // engine thread never waits for it; nothing is compiled); any problem is a
  // 400 listing every problem, a name taken (an adapter's or the base model's)
  // a 400, unloading an unknown name a 404; success is 200 with vLLM's plain
  // text ("Success: LoRA adapter 'x' added successfully."). Requests running
  // with an unloaded adapter finish with it; new ones get a 404.
  bool allow_runtime_lora_updating = false;
  // vLLM's VLLM_SERVER_DEV_MODE (xrt run --server-dev-mode): the engine control
  // endpoints exist (else 404), behind the API key like /v1:
  //   POST /pause[?mode=abort|keep]  AsyncEngine::Pause; abort (the default)
  //        ends the requests in flight with finish_reason "abort", keep freezes
  //        them; {"status":"paused"} once no step runs. Requests sent while
  //        paused are accepted and wait.
  //   POST /resume                   {"status":"resumed"}
  //   POST /resume?steps=N           AsyncEngine::RunSteps: N steps (fewer if
  //        nothing is left), then paused again: {"status":"paused","steps":n}
  //        (not in vLLM; for tests that must catch requests in flight)
  //   GET  /is_paused                {"is_paused":true|false}
  bool server_dev_mode = false;
};

class HttpServer {
 public:
  // `processor` makes the engine's requests; it needs a tokenizer, and a chat
  // template for /v1/chat/completions (without one that endpoint is a 400).
  HttpServer(ServerParams params, AsyncEngine* engine, const RequestProcessor* processor);
  ~HttpServer();  // Stop() + Wait()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port and starts serving on a background thread. A port in use
  // is Unavailable ("cannot bind 127.0.0.1:8000 (address in use?)"); bad
  // media params (a missing --allowed-local-media-path) are InvalidArgument.
  Status Start();
  // The bound port (after Start), useful with params.port == 0.
  int port() const { return port_; }
  // Blocks until the server stopped and every in-flight handler returned.
  void Wait();
  // Stops accepting connections; non-blocking; cuts streams in flight. See the
  // shutdown order above. After StopAccepting it does nothing more.
  void Stop();
  // Stops accepting connections (the listening socket is closed, so new ones
  // are refused) and requests: a request arriving on a connection already open
  // gets a 503, and every response from now on closes its connection.
  // Responses in flight, streams included, go on. Non-blocking. The listener
  // exits, and Wait returns, once every connection is closed.
  void StopAccepting();
  // Generation requests being served: counted from their arrival until their
  // response is written (for streams: until the last chunk). Thread-safe.
  int64_t num_in_flight() const { return in_flight_.load(); }

 private:
  struct RequestState;
  void RegisterRoutes();
  bool Authorized(const httplib::Request& req, httplib::Response& res);
  void HandleGeneration(const httplib::Request& req, httplib::Response& res, bool chat);
  void AbortUnfinished(const RequestState& state);
  void SendShuttingDown(httplib::Response& res);
  void HandleModels(httplib::Response& res);
  void HandleLoadLoraAdapter(const httplib::Request& req, httplib::Response& res);
  void HandleUnloadLoraAdapter(const httplib::Request& req, httplib::Response& res);
  void HandlePause(const httplib::Request& req, httplib::Response& res);
  void HandleResume(const httplib::Request& req, httplib::Response& res);
  // The adapter `model` selects: null for the base model; NotFound
  // (model_not_found) for a name that is neither.
  Expected<std::shared_ptr<const LoraAdapter>> ResolveModel(const std::string& model) const;
  void HandleMetrics(httplib::Response& res);
  void SendError(httplib::Response& res, int status, const std::string& type,
                 const std::string& message, const std::string& param = "",
                 const std::string& code = "");
  std::string NewRequestId(const char* prefix);
  void CountRequest(const std::string& path, int status);

  ServerParams params_;
  AsyncEngine* engine_;
  const RequestProcessor* processor_;
  const Tokenizer* tokenizer_;  // the processor's
  std::unique_ptr<httplib::Server> http_;
  std::optional<MediaFetcher> media_fetcher_;  // made by Start from params_.media
  std::thread listener_;
  int listen_fd_ = -1;          // the listening socket, once bound
  bool listen_closed_ = false;  // by Stop or StopAccepting (controlling thread)
  std::atomic<bool> draining_{false};
  int port_ = -1;
  int64_t created_ = 0;

  std::atomic<uint64_t> next_id_{0};
  uint64_t id_salt_ = 0;
  std::atomic<int64_t> in_flight_{0};
  std::mutex counters_mu_;
  std::map<std::pair<std::string, int>, uint64_t> request_counts_;  // (path, status) -> count
};

}  // namespace server
}  // namespace xrt
