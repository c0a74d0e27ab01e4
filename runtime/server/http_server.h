// HttpServer: the OpenAI-compatible HTTP front end of an AsyncEngine.
//
// Endpoints: POST /v1/completions, POST /v1/chat/completions, GET /v1/models,
// GET /health, GET /metrics. Requests are parsed by openai_protocol.h, made
// into an EngineRequest by the RequestProcessor (tokenization, chat template,
// the model's sampling defaults, limits), and fanned out into n ("<id>-0", "<id>-1",
// ...). Each HTTP request owns a queue (mutex + condvar) into which the
// engine's callbacks push RequestOutputs; the HTTP thread waits on it, so the
// engine thread never blocks. Streaming responses are SSE; when the client
// goes away every unfinished choice is aborted.
//
// Lifetime: the engine and the request processor must outlive the server.
// Threading: Start/Wait/Stop from one controlling thread; requests are served
// on `http_threads` worker threads.
//
// Shutdown order (the caller's job):
//   server.Stop();       // stop accepting; returns at once
//   engine->Shutdown();  // aborts in-flight requests, so their handlers return
//   server.Wait();       // joins the listener and the workers
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "runtime/base/status.h"
#include "runtime/engine/request_processor.h"
#include "runtime/serving/engine_api.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace xrt {

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
  // is Unavailable ("cannot bind 127.0.0.1:8000 (address in use?)").
  Status Start();
  // The bound port (after Start), useful with params.port == 0.
  int port() const { return port_; }
  // Blocks until the server stopped and every in-flight handler returned.
  void Wait();
  // Stops accepting connections; non-blocking. See the shutdown order above.
  void Stop();

 private:
  struct RequestState;
  void RegisterRoutes();
  bool Authorized(const httplib::Request& req, httplib::Response& res);
  void HandleGeneration(const httplib::Request& req, httplib::Response& res, bool chat);
  void HandleModels(httplib::Response& res);
  void HandleMetrics(httplib::Response& res);
  void SendError(httplib::Response& res, int status, const std::string& type, const std::string& message,
                 const std::string& param = "", const std::string& code = "");
  std::string NewRequestId(const char* prefix);
  void CountRequest(const std::string& path, int status);

  ServerParams params_;
  AsyncEngine* engine_;
  const RequestProcessor* processor_;
  const Tokenizer* tokenizer_;  // the processor's
  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;
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
