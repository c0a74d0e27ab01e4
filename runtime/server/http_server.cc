#include "runtime/server/http_server.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <random>
#include <vector>

#include <httplib.h>
#include <sys/socket.h>

#include "runtime/lora/lora_manager.h"
#include "runtime/server/client_connection.h"
#include "runtime/server/openai_protocol.h"
#include "runtime/tokenizer/tokenizer.h"

namespace xrt {
namespace server {

using Json = nlohmann::ordered_json;

namespace {

constexpr const char* kJsonType = "application/json";
constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kHeartbeatInterval = std::chrono::seconds(10);

// Outputs of one HTTP request's choices, pushed by the engine thread and
// popped by the HTTP thread. Shared with the engine callbacks, so it outlives
// an HTTP handler that returned early.
class OutputQueue {
 public:
  void Push(int choice, const RequestOutput& output) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      items_.emplace_back(choice, output);
    }
    cv_.notify_one();
  }
  // Everything queued, waiting up to `timeout` for the first item.
  std::vector<std::pair<int, RequestOutput>> PopAll(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !items_.empty(); });
    std::vector<std::pair<int, RequestOutput>> out(std::make_move_iterator(items_.begin()),
                                                   std::make_move_iterator(items_.end()));
    items_.clear();
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int, RequestOutput>> items_;
};

// Counts one generation request in flight for as long as it lives; shared by
// the handler and, for a stream, the response's content provider.
class InFlightCount {
 public:
  explicit InFlightCount(std::atomic<int64_t>& count) : count_(count) { ++count_; }
  ~InFlightCount() { --count_; }
  InFlightCount(const InFlightCount&) = delete;
  InFlightCount& operator=(const InFlightCount&) = delete;

 private:
  std::atomic<int64_t>& count_;
};

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

bool IsV1Path(const std::string& path) { return path.rfind("/v1/", 0) == 0; }

// Label value for the request counter: known endpoints, else "other".
std::string PathLabel(const std::string& path) {
  static const char* k_known[] = {"/v1/completions",
                                  "/v1/chat/completions",
                                  "/v1/models",
                                  "/v1/load_lora_adapter",
                                  "/v1/unload_lora_adapter",
                                  "/health",
                                  "/metrics",
                                  "/pause",
                                  "/resume",
                                  "/is_paused"};
  for (const char* k : k_known)
    if (path == k) return k;
  return "other";
}

}  // namespace

// One HTTP generation request in flight: its choices and what came back.
struct HttpServer::RequestState {
  OpenAiRequest request;
  ResponseHeader header;
  std::vector<std::string> engine_ids;  // per choice
  std::shared_ptr<OutputQueue> queue = std::make_shared<OutputQueue>();
  std::vector<ChoiceResult> results;  // per choice
  std::vector<bool> finished;
  std::vector<int64_t> text_offsets;  // completions logprobs text_offset, per choice
  std::vector<int64_t> completion_tokens;
  UsageInfo usage;
  int num_finished = 0;
  std::string error;     // the first "error" output's message
  bool started = false;  // streaming: role chunks sent
  bool done = false;     // streaming: [DONE] sent

  bool all_finished() const { return num_finished == static_cast<int>(engine_ids.size()); }

  // Applies an output to the accumulated state.
  void Apply(int choice, const RequestOutput& o) {
    ChoiceResult& r = results[choice];
    r.text += o.text;
    r.tokens.insert(r.tokens.end(), o.tokens.begin(), o.tokens.end());
    completion_tokens[choice] = o.completion_tokens;
    if (choice == 0) {
      usage.prompt_tokens = o.prompt_tokens;
      usage.cached_tokens = o.cached_tokens;
    }
    if (o.finished && !finished[choice]) {
      finished[choice] = true;
      ++num_finished;
      r.finish_reason = o.finish_reason;
      if (o.finish_reason == "error" && error.empty())
        error = o.error.empty() ? "engine error" : o.error;
    }
    usage.completion_tokens = 0;
    for (int64_t c : completion_tokens) usage.completion_tokens += c;
  }
};

HttpServer::HttpServer(ServerParams params, AsyncEngine* engine, const RequestProcessor* processor)
    : params_(std::move(params)),
      engine_(engine),
      processor_(processor),
      tokenizer_(processor->params().tokenizer),
      http_(std::make_unique<httplib::Server>()) {
  std::random_device rd;
  id_salt_ = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  created_ = std::chrono::duration_cast<std::chrono::seconds>(
                 std::chrono::system_clock::now().time_since_epoch())
                 .count();
  RegisterRoutes();
}

HttpServer::~HttpServer() {
  Stop();
  Wait();
}

Status HttpServer::Start() {
  if (listener_.joinable()) return FailedPreconditionError("HttpServer::Start called twice");
  if (params_.port < 0 || params_.port > 65535)
    return InvalidArgumentError("port must be in [0, 65535], got {}", params_.port);
  if (params_.http_threads < 1)
    return InvalidArgumentError("http_threads must be >= 1, got {}", params_.http_threads);
  Expected<MediaFetcher> fetcher = MediaFetcher::Create(params_.media);
  if (!fetcher.ok()) return fetcher.status();
  media_fetcher_.emplace(std::move(fetcher).value());
  int threads = params_.http_threads;
  http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  http_->set_payload_max_length(params_.max_body_bytes);
  // httplib's default sets SO_REUSEPORT, which lets a second server bind a
  // port already in use and silently share it. SO_REUSEADDR alone still
  // allows a quick restart (TIME_WAIT) but makes a live listener an error.
  int listen_fd = -1;
  http_->set_socket_options([&listen_fd](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = static_cast<int>(sock);
  });
  if (params_.port == 0) {
    port_ = http_->bind_to_any_port(params_.host);
    if (port_ < 0) return UnavailableError("cannot bind {} to any port", params_.host);
  } else {
    if (!http_->bind_to_port(params_.host, params_.port))
      return UnavailableError(
          "cannot bind {}:{} (address in use, or the host is not a local address?)", params_.host,
          params_.port);
    port_ = params_.port;
  }
  listen_fd_ = listen_fd;
  // Debian's libcpp-httplib listens with a backlog of 5 (compiled in), so a
  // burst of new connections overflows the queue and clients retry after ~1 s.
  // listen() again on the bound socket raises the backlog (Linux allows it).
  if (listen_fd >= 0) ::listen(listen_fd, SOMAXCONN);
  listener_ = std::thread([this] { http_->listen_after_bind(); });
  // Stop() is a no-op until the listener runs; wait for it so Stop always works.
  for (int i = 0; i < 5000 && !http_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return Status::Ok();
}

void HttpServer::Wait() {
  if (listener_.joinable()) listener_.join();
}

void HttpServer::Stop() {
  draining_ = true;
  // After StopAccepting the listener closes the socket itself.
  if (listen_closed_ || !http_->is_running()) return;
  listen_closed_ = true;
  http_->stop();
}

void HttpServer::StopAccepting() {
  draining_ = true;
  if (listen_closed_ || listen_fd_ < 0 || !http_->is_running()) return;
  listen_closed_ = true;
  // httplib's stop() would also end every stream at its next event (its
  // providers stop once the listening socket is marked closed). Shutting the
  // socket down instead makes the listener's accept() fail: it closes the
  // socket, stops accepting and, once every connection is done, returns.
  ::shutdown(listen_fd_, SHUT_RDWR);
}

void HttpServer::SendShuttingDown(httplib::Response& res) {
  SendError(res, 503, "service_unavailable_error", "the server is shutting down");
}

void HttpServer::AbortUnfinished(const RequestState& state) {
  for (size_t i = 0; i < state.engine_ids.size(); ++i)
    if (!state.finished[i]) engine_->Abort(state.engine_ids[i]);
}

void HttpServer::SendError(httplib::Response& res, int status, const std::string& type,
                           const std::string& message, const std::string& param,
                           const std::string& code) {
  ApiError e;
  e.http_status = status;
  e.type = type;
  e.message = message;
  e.param = param;
  e.code = code;
  res.status = status;
  res.set_content(DumpJson(ApiErrorJson(e)), kJsonType);
}

static void SendApiError(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(DumpJson(ApiErrorJson(e)), kJsonType);
}

std::string HttpServer::NewRequestId(const char* prefix) {
  uint64_t n = next_id_.fetch_add(1);
  uint64_t a = SplitMix64(id_salt_ ^ n), b = SplitMix64(a ^ (n << 1));
  return fmt::format("{}{:016x}{:016x}", prefix, a, b);
}

void HttpServer::CountRequest(const std::string& path, int status) {
  std::lock_guard<std::mutex> lock(counters_mu_);
  ++request_counts_[{PathLabel(path), status}];
}

bool HttpServer::Authorized(const httplib::Request& req, httplib::Response& res) {
  if (params_.api_key.empty()) return true;
  const std::string expected = "Bearer " + params_.api_key;
  if (req.has_header("Authorization") && req.get_header_value("Authorization") == expected)
    return true;
  SendError(res, 401, "authentication_error",
            req.has_header("Authorization") ? "Incorrect API key provided"
                                            : "Missing API key: send 'Authorization: Bearer <key>'",
            "", "invalid_api_key");
  return false;
}

void HttpServer::RegisterRoutes() {
  http_->set_pre_routing_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (draining_) {
          SendShuttingDown(res);
          return httplib::Server::HandlerResponse::Handled;
        }
        if (IsV1Path(req.path) && !Authorized(req, res))
          return httplib::Server::HandlerResponse::Handled;
        return httplib::Server::HandlerResponse::Unhandled;
      }));
  // While shutting down, every response closes its connection, so that no
  // client sends its next request to a server that is going away.
  http_->set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    if (!draining_) return;
    res.headers.erase("Keep-Alive");
    if (res.get_header_value("Connection") != "close") res.set_header("Connection", "close");
  });
  // Errors httplib produces itself (unknown route, 413, malformed HTTP) get an
  // OpenAI-style body; responses our handlers filled are left alone.
  http_->set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_length_ > 0)
          return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 404) {
          SendError(res, 404, "not_found_error",
                    fmt::format("no route for {} {}", req.method, req.path));
        } else if (res.status == 413) {
          SendError(res, 413, "invalid_request_error",
                    fmt::format("request body larger than {} bytes", params_.max_body_bytes));
        } else if (res.status == 405) {
          SendError(res, 405, "invalid_request_error",
                    fmt::format("method {} not allowed on {}", req.method, req.path));
        } else {
          SendError(res, res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                    fmt::format("HTTP error {}", res.status));
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  http_->set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          if (ep) std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        SendError(res, 500, "server_error", what);
      });
  http_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    CountRequest(req.path, res.status);
  });

  http_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGeneration(req, res, false);
  });
  http_->Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGeneration(req, res, true);
  });
  http_->Get("/v1/models",
             [this](const httplib::Request&, httplib::Response& res) { HandleModels(res); });
  if (params_.allow_runtime_lora_updating) {
    http_->Post("/v1/load_lora_adapter",
                [this](const httplib::Request& req, httplib::Response& res) {
                  HandleLoadLoraAdapter(req, res);
                });
    http_->Post("/v1/unload_lora_adapter",
                [this](const httplib::Request& req, httplib::Response& res) {
                  HandleUnloadLoraAdapter(req, res);
                });
  }
  if (params_.server_dev_mode) {
    http_->Post("/pause", [this](const httplib::Request& req, httplib::Response& res) {
      if (Authorized(req, res)) HandlePause(req, res);
    });
    http_->Post("/resume", [this](const httplib::Request& req, httplib::Response& res) {
      if (Authorized(req, res)) HandleResume(req, res);
    });
    http_->Get("/is_paused", [this](const httplib::Request& req, httplib::Response& res) {
      if (!Authorized(req, res)) return;
      res.set_content(DumpJson(Json{{"is_paused", engine_->IsPaused()}}), kJsonType);
    });
  }
  http_->Get("/health", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", kJsonType);
  });
  http_->Get("/metrics",
             [this](const httplib::Request&, httplib::Response& res) { HandleMetrics(res); });
}

// Adapters in the order they were registered (vLLM lists them in load order).
static std::vector<std::shared_ptr<const LoraAdapter>> AdaptersInLoadOrder(
    const LoraRegistry* registry) {
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  if (registry) adapters = registry->List();
  std::sort(adapters.begin(), adapters.end(),
            [](const auto& a, const auto& b) { return a->id < b->id; });
  return adapters;
}

void HttpServer::HandleModels(httplib::Response& res) {
  std::vector<ModelCard> cards;
  cards.push_back(ModelCard{params_.served_model_name, params_.served_model_name, "", created_,
                            engine_->max_model_len()});
  // An adapter packed into the artifact has no directory: its root is its name.
  for (const auto& a : AdaptersInLoadOrder(params_.lora_registry))
    cards.push_back(ModelCard{a->name, a->path.empty() ? a->name : a->path,
                              params_.served_model_name, created_, -1});
  res.set_content(DumpJson(ModelListJson(cards)), kJsonType);
}

Expected<std::shared_ptr<const LoraAdapter>> HttpServer::ResolveModel(
    const std::string& model) const {
  if (model == params_.served_model_name) return std::shared_ptr<const LoraAdapter>();
  if (params_.lora_registry)
    if (auto adapter = params_.lora_registry->Find(model)) return adapter;
  // An empty served name accepts any model name (for the base model).
  if (params_.served_model_name.empty()) return std::shared_ptr<const LoraAdapter>();
  std::string names = fmt::format("'{}'", params_.served_model_name);
  const auto adapters = AdaptersInLoadOrder(params_.lora_registry);
  constexpr size_t k_listed = 32;
  for (size_t i = 0; i < adapters.size() && i < k_listed; ++i)
    names += fmt::format(", '{}'", adapters[i]->name);
  if (adapters.size() > k_listed) names += fmt::format(" and {} more", adapters.size() - k_listed);
  return NotFoundError("The model '{}' does not exist; this server serves {}", model, names);
}

void HttpServer::HandleLoadLoraAdapter(const httplib::Request& req, httplib::Response& res) {
  std::string param;
  Expected<LoraAdapterRequest> parsed = ParseLoadLoraAdapterRequest(req.body, &param);
  if (!parsed.ok()) return SendApiError(res, ApiErrorFromStatus(parsed.status(), param));
  const std::string& name = parsed->lora_name;
  if (!params_.lora_registry)
    return SendError(res, 400, "invalid_request_error",
                     fmt::format("cannot load LoRA adapter '{}': the model was compiled without "
                                 "LoRA (xcc compile --enable-lora)",
                                 name),
                     "lora_name");
  if (name == params_.served_model_name || params_.lora_registry->Find(name))
    return SendError(
        res, 400, "invalid_request_error",
        name == params_.served_model_name
            ? fmt::format("'{}' is the base model's name; choose another lora_name", name)
            : fmt::format("The lora adapter '{}' has already been loaded.", name),
        "lora_name");
  // Reads, validates and packs the adapter on this HTTP thread; the engine
  // thread goes on stepping meanwhile and only sees the adapter once a request
  // selects it.
  Expected<std::shared_ptr<const LoraAdapter>> loaded =
      params_.lora_registry->Load(name, parsed->lora_path);
  if (!loaded.ok()) return SendApiError(res, ApiErrorFromStatus(loaded.status()));
  std::fprintf(stderr, "xrt: loaded LoRA adapter '%s' from '%s' (rank %lld)\n", name.c_str(),
               parsed->lora_path.c_str(), static_cast<long long>((*loaded)->rank));
  res.set_content(fmt::format("Success: LoRA adapter '{}' added successfully.", name),
                  "text/plain; charset=utf-8");
}

void HttpServer::HandleUnloadLoraAdapter(const httplib::Request& req, httplib::Response& res) {
  std::string param;
  Expected<LoraAdapterRequest> parsed = ParseUnloadLoraAdapterRequest(req.body, &param);
  if (!parsed.ok()) return SendApiError(res, ApiErrorFromStatus(parsed.status(), param));
  const std::string& name = parsed->lora_name;
  if (!params_.lora_registry || !params_.lora_registry->Unload(name).ok())
    return SendError(res, 404, "not_found_error",
                     fmt::format("The lora adapter '{}' cannot be found.", name), "lora_name");
  std::fprintf(stderr, "xrt: unloaded LoRA adapter '%s'\n", name.c_str());
  res.set_content(fmt::format("Success: LoRA adapter '{}' removed successfully.", name),
                  "text/plain; charset=utf-8");
}

void HttpServer::HandlePause(const httplib::Request& req, httplib::Response& res) {
  const std::string mode = req.has_param("mode") ? req.get_param_value("mode") : "abort";
  PauseMode m;
  if (mode == "abort") {
    m = PauseMode::kAbort;
  } else if (mode == "keep") {
    m = PauseMode::kKeep;
  } else {
    return SendError(res, 400, "invalid_request_error",
                     mode == "wait" ? "mode 'wait' is not supported: use 'abort' or 'keep'"
                                    : fmt::format("mode must be 'abort' or 'keep', not '{}'", mode),
                     "mode");
  }
  engine_->Pause(m);
  std::fprintf(stderr, "xrt: generation paused (mode %s)\n", mode.c_str());
  res.set_content(R"({"status":"paused"})", kJsonType);
}

void HttpServer::HandleResume(const httplib::Request& req, httplib::Response& res) {
  if (!req.has_param("steps")) {
    engine_->Resume();
    std::fprintf(stderr, "xrt: generation resumed\n");
    return res.set_content(R"({"status":"resumed"})", kJsonType);
  }
  const std::string text = req.get_param_value("steps");
  int64_t steps = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), steps);
  if (ec != std::errc() || end != text.data() + text.size() || steps <= 0)
    return SendError(res, 400, "invalid_request_error",
                     fmt::format("steps must be a positive integer, not '{}'", text), "steps");
  const int64_t ran = engine_->RunSteps(steps);
  res.set_content(DumpJson(Json{{"status", "paused"}, {"steps", ran}}), kJsonType);
}

void HttpServer::HandleMetrics(httplib::Response& res) {
  std::string text = engine_->MetricsText();
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += "# HELP xrt_http_requests_total HTTP requests served, by path and status code.\n";
  text += "# TYPE xrt_http_requests_total counter\n";
  {
    std::lock_guard<std::mutex> lock(counters_mu_);
    for (const auto& [key, count] : request_counts_)
      text += fmt::format("xrt_http_requests_total{{path=\"{}\",code=\"{}\"}} {}\n", key.first,
                          key.second, count);
  }
  text += "# HELP xrt_lora_adapters_loaded LoRA adapters registered (selectable by name).\n";
  text += "# TYPE xrt_lora_adapters_loaded gauge\n";
  text += fmt::format("xrt_lora_adapters_loaded {}\n",
                      params_.lora_registry ? params_.lora_registry->List().size() : 0);
  text += "# HELP xrt_http_generation_requests_in_flight Generation requests being served.\n";
  text += "# TYPE xrt_http_generation_requests_in_flight gauge\n";
  text += fmt::format("xrt_http_generation_requests_in_flight {}\n", in_flight_.load());
  res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
}

void HttpServer::HandleGeneration(const httplib::Request& http_req, httplib::Response& res,
                                  bool chat) {
  // Counted before the check, so a graceful shutdown either refuses this
  // request or waits for it (draining_ is set before the count is read).
  const auto in_flight = std::make_shared<InFlightCount>(in_flight_);
  if (draining_) return SendShuttingDown(res);
  std::string param;
  Expected<OpenAiRequest> parsed = chat ? ParseChatRequest(http_req.body, &param)
                                        : ParseCompletionRequest(http_req.body, &param);
  if (!parsed.ok()) return SendApiError(res, ApiErrorFromStatus(parsed.status(), param));
  auto state = std::make_shared<RequestState>();
  state->request = std::move(parsed).value();
  OpenAiRequest& request = state->request;

  // The base model, or the LoRA adapter of that name.
  Expected<std::shared_ptr<const LoraAdapter>> adapter = ResolveModel(request.model);
  if (!adapter.ok())
    return SendError(res, 404, "not_found_error", adapter.status().message(), "model",
                     "model_not_found");
  const bool vision = processor_->params().vision != nullptr;
  if (!request.images.empty() && !vision) {
    const std::string field = request.images.front().Field();
    return SendError(
        res, 400, "invalid_request_error",
        fmt::format("{}: this model does not accept images (it has no vision encoder)", field),
        field);
  }

  // The engine request: tokenized, the model's defaults applied, images
  // fetched, decoded and placed, validated. Every failure names its field
  // (an image's: "messages[1].content[2]").
  GenerationRequest g;
  g.kind = chat ? PromptKind::kChat : PromptKind::kText;
  g.prompt = request.prompt;
  // A vision model's template gets every content as a list of parts, with
  // {"type": "image"} where the images were (llava-hf templates loop over
  // message['content']), as vLLM does; a text model's gets strings.
  g.messages = vision ? request.message_parts : request.messages;
  if (!request.images.empty()) {
    std::string field;
    Expected<std::vector<FetchedMedia>> fetched =
        FetchRequestImages(request, *media_fetcher_, &field);
    if (!fetched.ok()) return SendApiError(res, ApiErrorFromStatus(fetched.status(), field));
    for (size_t i = 0; i < fetched->size(); ++i)
      g.images.push_back(RequestImage{request.images[i].Field(), std::move((*fetched)[i].bytes)});
  }
  g.tools = request.tools;
  g.max_tokens = request.max_tokens;
  g.sampling = request.sampling;
  g.sampling_set = request.sampling_set;
  g.stop = request.stop;
  g.stop_token_ids = request.stop_token_ids;
  g.ignore_eos = request.ignore_eos;
  g.skip_special_tokens = request.skip_special_tokens;
  g.lora = std::move(adapter).value();
  RequestError where;
  Expected<EngineRequest> made = processor_->Process(g, &where);
  if (!made.ok()) {
    ApiError e = ApiErrorFromStatus(made.status(), where.param);
    e.code = where.code;
    return SendApiError(res, e);
  }
  const int64_t prompt_len = static_cast<int64_t>(made->prompt.size());

  // Fan out into n engine requests.
  state->header.id = NewRequestId(chat ? "chatcmpl-" : "cmpl-");
  state->header.created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  state->header.model = request.model;
  const int n = request.n;
  state->results.resize(n);
  state->finished.assign(n, false);
  state->text_offsets.assign(n, 0);
  state->completion_tokens.assign(n, 0);
  state->usage.prompt_tokens = prompt_len;
  for (int i = 0; i < n; ++i) {
    EngineRequest er = *made;
    er.request_id = fmt::format("{}-{}", state->header.id, i);
    if (er.sampling.has_seed) er.sampling.seed += static_cast<uint64_t>(i);
    std::shared_ptr<OutputQueue> queue = state->queue;
    Status st =
        engine_->Submit(std::move(er), [queue, i](const RequestOutput& o) { queue->Push(i, o); });
    if (!st.ok()) {
      for (const std::string& id : state->engine_ids) engine_->Abort(id);
      std::string p = st.message().find("max_tokens") != std::string::npos ? "max_tokens" : "";
      return SendApiError(res, ApiErrorFromStatus(st, p));
    }
    state->engine_ids.push_back(fmt::format("{}-{}", state->header.id, i));
  }

  if (!request.stream) {
    // Nothing is written before the generation is done, so watch the client's
    // connection meanwhile: a client that hung up aborts its request instead
    // of leaving it to run to max_tokens.
    Expected<ClientConnection> client = ClientConnection::Find(
        http_req.local_addr, http_req.local_port, http_req.remote_addr, http_req.remote_port);
    if (!client.ok()) {
      static std::once_flag logged;
      std::call_once(logged, [&] {
        std::fprintf(
            stderr,
            "xrt: warning: cannot watch client connections (%s); a non-streaming request whose "
            "client hangs up runs to its end\n",
            client.status().message().c_str());
      });
    }
    while (!state->all_finished()) {
      for (auto& [choice, output] : state->queue->PopAll(kPollInterval))
        state->Apply(choice, output);
      if (!state->all_finished() && client.ok() && client->Closed()) {
        AbortUnfinished(*state);
        // Nobody reads it; the status (nginx's "client closed request") is for
        // the request counter in /metrics.
        return SendError(res, 499, "invalid_request_error", "the client closed the connection");
      }
    }
    if (!state->error.empty()) return SendError(res, 500, "server_error", state->error);
    Json body =
        chat ? ChatResponseJson(request, state->header, state->results, state->usage, *tokenizer_)
             : CompletionResponseJson(request, state->header, state->results, state->usage,
                                      *tokenizer_);
    return res.set_content(DumpJson(body), kJsonType);
  }

  // Streaming: each provider call forwards what has arrived since the last one.
  res.set_header("Cache-Control", "no-cache");
  auto last_write =
      std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::steady_clock::now());
  const Tokenizer* tokenizer = tokenizer_;
  res.set_chunked_content_provider(
      "text/event-stream",
      [state, chat, tokenizer, last_write, in_flight](size_t, httplib::DataSink& sink) -> bool {
        RequestState& s = *state;
        const OpenAiRequest& rq = s.request;
        std::string out;
        if (!s.started) {
          s.started = true;
          if (chat)
            for (int i = 0; i < static_cast<int>(s.engine_ids.size()); ++i)
              out += SseEvent(ChatChunkJson(
                  rq, s.header, i, Json{{"role", "assistant"}, {"content", ""}}, nullptr, ""));
        }
        for (auto& [choice, o] :
             s.queue->PopAll(out.empty() ? kPollInterval : std::chrono::milliseconds(0))) {
          const bool was_finished = s.finished[choice];
          s.Apply(choice, o);
          if (was_finished) continue;
          if (o.finished && o.finish_reason == "error") {
            ApiError e;
            e.http_status = 500;
            e.type = "server_error";
            e.message = o.error.empty() ? "engine error" : o.error;
            out += SseEvent(ApiErrorJson(e));
            continue;
          }
          if (o.text.empty() && o.tokens.empty() && !o.finished) continue;
          const std::string reason = o.finished ? o.finish_reason : "";
          Json logprobs = nullptr;
          if (rq.sampling.logprobs >= 0)
            logprobs = chat ? ChatLogprobsJson(o.tokens, *tokenizer)
                            : CompletionLogprobsJson(o.tokens, *tokenizer, &s.text_offsets[choice]);
          if (chat) {
            Json delta = o.text.empty() && o.finished ? Json::object() : Json{{"content", o.text}};
            out += SseEvent(
                ChatChunkJson(rq, s.header, choice, std::move(delta), std::move(logprobs), reason));
          } else {
            out += SseEvent(
                CompletionChunkJson(rq, s.header, choice, o.text, std::move(logprobs), reason));
          }
        }
        if (s.all_finished()) {
          if (rq.include_usage) out += SseEvent(UsageChunkJson(rq, s.header, s.usage));
          out += kSseDone;
        }
        auto now = std::chrono::steady_clock::now();
        if (out.empty()) {
          // Nothing new: probe the connection, and keep idle proxies alive.
          if (!sink.is_writable()) return false;
          if (now - *last_write < kHeartbeatInterval) return true;
          out = ":\n\n";  // an SSE comment
        }
        if (!sink.write(out.data(), out.size())) return false;
        *last_write = now;
        if (s.all_finished()) {
          s.done = true;
          sink.done();
        }
        return true;
      },
      [this, state](bool /*success*/) {
        // The client went away (or the server is stopping): abort what is left.
        AbortUnfinished(*state);
      });
}

}  // namespace server
}  // namespace xrt
