#include "runtime/server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/engine/artifact_params.h"
#include "runtime/lora/lora_manager.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_import.h"

namespace xrt::server {
namespace {

using Json = nlohmann::json;

// An AsyncEngine on its own thread: every `step` it emits one token per live
// request, cycling through the request's prompt tokens, until max_tokens
// ("length") or an abort ("abort"). cached_tokens is prompt_tokens / 2.
class FakeEngine : public AsyncEngine {
 public:
  FakeEngine(const Tokenizer* tokenizer, int64_t max_model_len, std::chrono::milliseconds step)
      : tokenizer_(tokenizer),
        max_model_len_(max_model_len),
        step_(step),
        thread_([this] { Loop(); }) {}
  ~FakeEngine() override { Shutdown(); }

  Status Submit(EngineRequest request, OutputCallback callback) override {
    if (request.prompt.empty()) return InvalidArgumentError("prompt is empty");
    int64_t p = static_cast<int64_t>(request.prompt.size());
    if (p + request.max_tokens > max_model_len_)
      return InvalidArgumentError("prompt ({} tokens) + max_tokens ({}) exceeds max_model_len ({})",
                                  p, request.max_tokens, max_model_len_);
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return UnavailableError("engine is shut down");
    submitted_.push_back(request);
    live_.push_back(Live{std::move(request), std::move(callback), 0, false});
    cv_.notify_all();
    return Status::Ok();
  }
  void Abort(const std::string& id) override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.insert(id);
    for (Live& l : live_)
      if (l.request.request_id == id) l.abort = true;
  }
  void Shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      cv_.notify_all();
    }
    thread_.join();
  }
  void Pause(PauseMode mode) override {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = true;
    if (mode == PauseMode::kAbort)
      for (Live& l : live_) l.abort = true;
    pause_modes_.push_back(mode);
  }
  void Resume() override {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  bool IsPaused() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return paused_;
  }
  int64_t RunSteps(int64_t steps) override {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = true;
    run_steps_.push_back(steps);
    return std::min<int64_t>(steps, 2);
  }
  std::string MetricsText() const override {
    return "# TYPE fake_engine_steps counter\nfake_engine_steps 1\n";
  }
  int64_t max_model_len() const override { return max_model_len_; }

  std::vector<EngineRequest> submitted() {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_;
  }
  std::set<std::string> aborted() {
    std::lock_guard<std::mutex> lock(mu_);
    return aborted_;
  }
  size_t num_live() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_.size();
  }
  std::vector<PauseMode> pause_modes() {
    std::lock_guard<std::mutex> lock(mu_);
    return pause_modes_;
  }
  std::vector<int64_t> run_steps() {
    std::lock_guard<std::mutex> lock(mu_);
    return run_steps_;
  }

 private:
  struct Live {
    EngineRequest request;
    OutputCallback callback;
    int64_t generated;
    bool abort;
  };

  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait_for(lock, step_, [&] { return stopped_; });
      if (stopped_) {
        for (Live& l : live_) l.abort = true;
      }
      std::vector<std::pair<OutputCallback, RequestOutput>> emit;
      for (auto it = live_.begin(); it != live_.end();) {
        if (paused_ && !it->abort) {  // frozen
          ++it;
          continue;
        }
        RequestOutput o;
        o.request_id = it->request.request_id;
        o.prompt_tokens = static_cast<int64_t>(it->request.prompt.size());
        o.cached_tokens = o.prompt_tokens / 2;
        if (it->abort) {
          o.finished = true;
          o.finish_reason = "abort";
        } else {
          int32_t token = it->request.prompt[it->generated % it->request.prompt.size()];
          GeneratedToken g;
          g.token = token;
          g.logprob = -0.125f * static_cast<float>(it->generated + 1);
          for (int k = 0; k < it->request.sampling.logprobs; ++k)
            g.top_logprobs.push_back({token + k, g.logprob - static_cast<float>(k)});
          o.tokens.push_back(g);
          o.text = tokenizer_->Decode(&token, 1, it->request.skip_special_tokens);
          ++it->generated;
          if (it->generated >= it->request.max_tokens) {
            o.finished = true;
            o.finish_reason = "length";
          }
        }
        o.completion_tokens = it->generated;
        emit.emplace_back(it->callback, std::move(o));
        it = emit.back().second.finished ? live_.erase(it) : std::next(it);
      }
      lock.unlock();
      for (auto& [cb, o] : emit) cb(o);  // never under the lock
      lock.lock();
      if (stopped_ && live_.empty()) return;
    }
  }

  const Tokenizer* tokenizer_;
  int64_t max_model_len_;
  std::chrono::milliseconds step_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Live> live_;
  std::vector<EngineRequest> submitted_;
  std::set<std::string> aborted_;
  std::vector<PauseMode> pause_modes_;
  std::vector<int64_t> run_steps_;
  bool stopped_ = false;
  bool paused_ = false;
  std::thread thread_;
};

constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

struct SseStream {
  std::vector<Json> events;
  bool done = false;
  bool well_formed = true;
};

SseStream ParseSse(const std::string& body) {
  SseStream s;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      s.well_formed = false;
      break;
    }
    std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind(":", 0) == 0) continue;  // comment
    if (ev.rfind("data: ", 0) != 0) {
      s.well_formed = false;
      continue;
    }
    std::string data = ev.substr(6);
    if (data == "[DONE]") {
      if (s.done) s.well_formed = false;
      s.done = true;
      continue;
    }
    if (s.done) s.well_formed = false;  // nothing after [DONE]
    s.events.push_back(Json::parse(data));
  }
  return s;
}

class HttpServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string dir = std::string(XCC_SOURCE_DIR) + "/tests/fixtures/tokenizer/llama3/";
    auto spec = LoadTokenizerJson(dir + "tokenizer.json", dir + "tokenizer_config.json");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    auto tok = Tokenizer::Create(std::move(spec).value());
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = new Tokenizer(std::move(tok).value());
    auto tmpl = ChatTemplate::Parse(kTemplate);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
    template_ = new ChatTemplate(std::move(tmpl).value());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete template_;
  }

  void StartServer(std::string api_key = "",
                   std::chrono::milliseconds step = std::chrono::milliseconds(1)) {
    engine_ = std::make_unique<FakeEngine>(tokenizer_, 64, step);
    RequestProcessorParams pp;
    pp.tokenizer = tokenizer_;
    pp.chat_template = template_;
    pp.limits.max_model_len = 64;
    processor_ = std::make_unique<RequestProcessor>(pp);
    ServerParams p;
    p.host = "127.0.0.1";
    p.port = 0;
    p.served_model_name = "tiny";
    p.api_key = std::move(api_key);
    p.http_threads = 4;
    p.lora_registry = lora_registry_;
    p.allow_runtime_lora_updating = allow_runtime_lora_updating_;
    p.server_dev_mode = server_dev_mode_;
    server_ = std::make_unique<HttpServer>(p, engine_.get(), processor_.get());
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    ASSERT_GT(server_->port(), 0);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
  }
  void SetUp() override { StartServer(); }
  void TearDown() override {
    client_.reset();
    if (server_) server_->Stop();
    if (engine_) engine_->Shutdown();
    if (server_) server_->Wait();
    server_.reset();
    engine_.reset();
  }

  httplib::Result Post(const std::string& path, const std::string& body,
                       httplib::Headers headers = {}) {
    return client_->Post(path.c_str(), headers, body, "application/json");
  }
  // Asserts an OpenAI-style error and returns its "error" object.
  Json ExpectError(const httplib::Result& res, int status, const std::string& type) {
    EXPECT_TRUE(res) << "no response";
    if (!res) return Json();
    EXPECT_EQ(res->status, status) << res->body;
    Json j = Json::parse(res->body, nullptr, false);
    EXPECT_TRUE(j.is_object() && j.contains("error")) << res->body;
    if (!j.is_object() || !j.contains("error")) return Json();
    const Json& e = j["error"];
    EXPECT_EQ(e["type"], type) << res->body;
    EXPECT_TRUE(e["message"].is_string());
    EXPECT_TRUE(e.contains("param"));
    EXPECT_TRUE(e.contains("code"));
    return e;
  }
  // A good request still works (the server survived the previous one).
  void ExpectServerHealthy(httplib::Headers headers = {}) {
    auto res = Post("/v1/completions", R"({"model":"tiny","prompt":"Hello world","max_tokens":3})",
                    headers);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  }
  std::string ExpectedText(const std::string& prompt_text, int max_tokens, bool special) {
    std::vector<int32_t> ids = tokenizer_->Encode(prompt_text, special);
    std::string out;
    for (int i = 0; i < max_tokens; ++i) {
      int32_t t = ids[i % ids.size()];
      out += tokenizer_->Decode(&t, 1, true);
    }
    return out;
  }

  static Tokenizer* tokenizer_;
  static ChatTemplate* template_;
  // ServerParams of StartServer (HttpServerLoraTest sets them).
  LoraRegistry* lora_registry_ = nullptr;
  bool allow_runtime_lora_updating_ = false;
  bool server_dev_mode_ = false;
  std::unique_ptr<FakeEngine> engine_;
  std::unique_ptr<RequestProcessor> processor_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

Tokenizer* HttpServerTest::tokenizer_ = nullptr;
ChatTemplate* HttpServerTest::template_ = nullptr;

TEST_F(HttpServerTest, Completion) {
  auto res =
      Post("/v1/completions", R"({"model":"tiny","prompt":"Hello world","max_tokens":5,"seed":3})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_NE(res->get_header_value("Content-Type").find("application/json"), std::string::npos);
  Json j = Json::parse(res->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], ExpectedText("Hello world", 5, true));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  int64_t prompt_tokens = static_cast<int64_t>(tokenizer_->Encode("Hello world", true).size());
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt_tokens);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], prompt_tokens + 5);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], prompt_tokens / 2);
  // The prompt was encoded with special tokens (bos) and the seed forwarded.
  auto sub = engine_->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].prompt, tokenizer_->Encode("Hello world", true));
  EXPECT_EQ(sub[0].max_tokens, 5);
  EXPECT_TRUE(sub[0].sampling.has_seed);
  EXPECT_EQ(sub[0].sampling.seed, 3u);
}

TEST_F(HttpServerTest, CompletionLogprobs) {
  auto res = Post("/v1/completions",
                  R"({"model":"tiny","prompt":"Hello world","max_tokens":2,"logprobs":2})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json lp = Json::parse(res->body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 2u);
  EXPECT_DOUBLE_EQ(lp["token_logprobs"][0].get<double>(), -0.125);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"][0], 0);
}

TEST_F(HttpServerTest, ChatCompletion) {
  auto res =
      Post("/v1/chat/completions",
           R"({"model":"tiny","messages":[{"role":"user","content":"Hi there"}],"max_tokens":4,
                      "logprobs":true,"top_logprobs":1})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json j = Json::parse(res->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string prompt_text = "<|begin_of_text|><user>Hi there<assistant>";
  EXPECT_EQ(j["choices"][0]["message"]["content"], ExpectedText(prompt_text, 4, false));
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 4u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 1u);
  auto sub = engine_->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].prompt, tokenizer_->Encode(prompt_text, false));
}

TEST_F(HttpServerTest, ChatDefaultMaxTokensFillsContext) {
  auto res = Post("/v1/chat/completions",
                  R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}]})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto sub = engine_->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(static_cast<int64_t>(sub[0].prompt.size()) + sub[0].max_tokens, 64);
}

TEST_F(HttpServerTest, NGreaterThanOne) {
  auto res = Post("/v1/completions",
                  R"({"model":"tiny","prompt":"Hello world","max_tokens":3,"n":2,"seed":10})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  Json j = Json::parse(res->body);
  ASSERT_EQ(j["choices"].size(), 2u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][1]["index"], 1);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  auto sub = engine_->submitted();
  ASSERT_EQ(sub.size(), 2u);
  std::string id = j["id"];
  std::set<std::string> ids = {sub[0].request_id, sub[1].request_id};
  EXPECT_EQ(ids, (std::set<std::string>{id + "-0", id + "-1"}));
  std::set<uint64_t> seeds = {sub[0].sampling.seed, sub[1].sampling.seed};
  EXPECT_EQ(seeds, (std::set<uint64_t>{10, 11}));
}

TEST_F(HttpServerTest, CompletionStream) {
  auto res = Post("/v1/completions",
                  R"({"model":"tiny","prompt":"Hello world","max_tokens":4,"stream":true,
                                         "stream_options":{"include_usage":true}})",
                  {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  // SSE must not be compressed (a compressor would buffer the events).
  EXPECT_EQ(res->get_header_value("Content-Encoding"), "");
  SseStream s = ParseSse(res->body);
  EXPECT_TRUE(s.well_formed) << res->body;
  EXPECT_TRUE(s.done);
  ASSERT_EQ(s.events.size(), 5u) << res->body;  // 4 tokens + usage
  std::string text;
  for (size_t i = 0; i < 4; ++i) {
    const Json& e = s.events[i];
    EXPECT_EQ(e["object"], "text_completion");
    EXPECT_TRUE(e["usage"].is_null());
    text += e["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(e["choices"][0]["finish_reason"].is_null(), i < 3) << e.dump();
  }
  EXPECT_EQ(text, ExpectedText("Hello world", 4, true));
  EXPECT_EQ(s.events[3]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(s.events[4]["choices"].size(), 0u);
  EXPECT_EQ(s.events[4]["usage"]["completion_tokens"], 4);
}

TEST_F(HttpServerTest, ChatStreamWithN) {
  auto res =
      Post("/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],
      "max_tokens":3,"n":2,"stream":true})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  SseStream s = ParseSse(res->body);
  EXPECT_TRUE(s.well_formed) << res->body;
  EXPECT_TRUE(s.done);
  std::map<int, std::vector<Json>> per_choice;
  for (const Json& e : s.events) {
    EXPECT_EQ(e["object"], "chat.completion.chunk");
    EXPECT_FALSE(e.contains("usage"));
    per_choice[e["choices"][0]["index"].get<int>()].push_back(e["choices"][0]);
  }
  ASSERT_EQ(per_choice.size(), 2u);
  for (auto& [index, chunks] : per_choice) {
    ASSERT_EQ(chunks.size(), 4u);  // role + 3 tokens
    EXPECT_EQ(chunks[0]["delta"]["role"], "assistant");
    std::string text;
    for (size_t i = 1; i < chunks.size(); ++i) {
      EXPECT_FALSE(chunks[i]["delta"].contains("role"));
      text += chunks[i]["delta"]["content"].get<std::string>();
      EXPECT_EQ(chunks[i]["finish_reason"].is_null(), i + 1 < chunks.size());
    }
    EXPECT_EQ(chunks.back()["finish_reason"], "length");
    EXPECT_EQ(text, ExpectedText("<|begin_of_text|><user>Hi<assistant>", 3, false));
  }
}

TEST_F(HttpServerTest, ClientDisconnectMidStreamAborts) {
  TearDown();
  StartServer("", std::chrono::milliseconds(5));
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"model":"tiny","prompt":"Hello world","max_tokens":60,"stream":true})";
  req.set_header("Content-Type", "application/json");
  std::string received;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    received.append(data, len);
    return received.find("\n\n") == std::string::npos;  // hang up after the first event
  };
  auto res = client_->send(req);
  EXPECT_FALSE(res);  // canceled by us
  EXPECT_NE(received.find("data: "), std::string::npos);
  client_->stop();
  // The server notices on its next writes and aborts the request.
  for (int i = 0; i < 300 && engine_->aborted().empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  auto sub = engine_->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(engine_->aborted().count(sub[0].request_id), 1u);
  for (int i = 0; i < 300 && engine_->num_live() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(engine_->num_live(), 0u);
  client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
  ExpectServerHealthy();
}

// A raw connection that sends one HTTP request and can hang up before the
// response (httplib's client cannot).
class RawClient {
 public:
  explicit RawClient(int port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~RawClient() { HangUp(); }
  bool connected() const { return connected_; }
  bool Post(const std::string& path, const std::string& body) {
    std::string req = "POST " + path +
                      " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                      "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    return send(fd_, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size());
  }
  void HangUp() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  bool connected_ = false;
};

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout = std::chrono::milliseconds(3000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

TEST_F(HttpServerTest, ClientHangUpAbortsNonStreamingRequest) {
  TearDown();
  StartServer("", std::chrono::milliseconds(20));  // 60 tokens: 1.2 s
  RawClient raw(server_->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.Post("/v1/completions",
                       R"({"model":"tiny","prompt":"Hello world","max_tokens":60,"n":2})"));
  ASSERT_TRUE(WaitFor([&] { return engine_->submitted().size() == 2; }));
  raw.HangUp();
  // Both choices are aborted well before they could reach max_tokens.
  ASSERT_TRUE(
      WaitFor([&] { return engine_->aborted().size() == 2; }, std::chrono::milliseconds(800)))
      << "the request was not aborted";
  for (const EngineRequest& r : engine_->submitted())
    EXPECT_EQ(engine_->aborted().count(r.request_id), 1u);
  EXPECT_TRUE(WaitFor([&] { return engine_->num_live() == 0; }));
  EXPECT_TRUE(WaitFor([&] { return server_->num_in_flight() == 0; }));
  ExpectServerHealthy();
  // Counted as 499 (client closed request) once httplib is done with it.
  std::string metrics;
  EXPECT_TRUE(WaitFor([&] {
    auto res = client_->Get("/metrics");
    metrics = res ? res->body : "";
    return metrics.find("xrt_http_requests_total{path=\"/v1/completions\",code=\"499\"} 1\n") !=
           std::string::npos;
  })) << metrics;
}

TEST_F(HttpServerTest, NonStreamingRequestIsNotAbortedWhileTheClientWaits) {
  TearDown();
  StartServer("", std::chrono::milliseconds(5));
  auto res = Post("/v1/completions", R"({"model":"tiny","prompt":"Hello world","max_tokens":40})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body)["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(engine_->aborted().empty());
  // The body is still sent whole, with its length and type.
  EXPECT_EQ(res->get_header_value("Content-Length"), std::to_string(res->body.size()));
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
}

// Streams a completion on its own connection, in the background.
class BackgroundRequest {
 public:
  BackgroundRequest(int port, std::string path, std::string body)
      : thread_([this, port, path = std::move(path), body = std::move(body)] {
          httplib::Client c("127.0.0.1", port);
          c.set_read_timeout(10, 0);
          auto res = c.Post(path.c_str(), body, "application/json");
          if (res) {
            status_ = res->status;
            body_ = res->body;
            connection_ = res->get_header_value("Connection");
          }
        }) {}
  ~BackgroundRequest() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  int status() const { return status_; }
  const std::string& body() const { return body_; }
  const std::string& connection() const { return connection_; }

 private:
  int status_ = -1;
  std::string body_, connection_;
  std::thread thread_;
};

TEST_F(HttpServerTest, StopAcceptingLetsRequestsInFlightFinish) {
  TearDown();
  StartServer("", std::chrono::milliseconds(20));
  // A keep-alive connection opened before the shutdown.
  httplib::Client idle("127.0.0.1", server_->port());
  idle.set_keep_alive(true);
  auto health = idle.Get("/health");
  ASSERT_TRUE(health);
  ASSERT_EQ(health->status, 200);

  BackgroundRequest stream(
      server_->port(), "/v1/completions",
      R"({"model":"tiny","prompt":"Hello world","max_tokens":25,"stream":true})");
  BackgroundRequest plain(
      server_->port(), "/v1/chat/completions",
      R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":25})");
  ASSERT_TRUE(WaitFor([&] { return engine_->submitted().size() == 2; }));
  EXPECT_EQ(server_->num_in_flight(), 2);
  server_->StopAccepting();

  // New connections are refused; a request on an open one gets a 503 and the
  // connection is closed.
  httplib::Client fresh("127.0.0.1", server_->port());
  fresh.set_connection_timeout(1, 0);
  EXPECT_FALSE(fresh.Get("/health"));
  auto refused = idle.Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":2})",
                           "application/json");
  Json e = ExpectError(refused, 503, "service_unavailable_error");
  EXPECT_EQ(e["message"], "the server is shutting down");
  if (refused) {
    EXPECT_EQ(refused->get_header_value("Connection"), "close");
  }
  EXPECT_EQ(engine_->submitted().size(), 2u);

  // What was in flight runs to its end.
  stream.Join();
  plain.Join();
  ASSERT_EQ(stream.status(), 200);
  SseStream s = ParseSse(stream.body());
  EXPECT_TRUE(s.well_formed) << stream.body();
  EXPECT_TRUE(s.done) << stream.body();
  ASSERT_FALSE(s.events.empty());
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "length");
  ASSERT_EQ(plain.status(), 200) << plain.body();
  EXPECT_EQ(Json::parse(plain.body())["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(plain.connection(), "close");
  EXPECT_TRUE(engine_->aborted().empty());
  EXPECT_TRUE(WaitFor([&] { return server_->num_in_flight() == 0; }));

  // Every connection closes, so the server stops by itself.
  idle.stop();
  engine_->Shutdown();
  const auto start = std::chrono::steady_clock::now();
  server_->Wait();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
}

TEST_F(HttpServerTest, EngineShutdownAfterStopAcceptingEndsEveryResponse) {
  TearDown();
  StartServer("", std::chrono::milliseconds(20));  // 60 tokens: 1.2 s
  BackgroundRequest completion(
      server_->port(), "/v1/completions",
      R"({"model":"tiny","prompt":"Hello world","max_tokens":60,"stream":true,
                                   "stream_options":{"include_usage":true}})");
  BackgroundRequest chat(
      server_->port(), "/v1/chat/completions",
      R"({"model":"tiny","messages":[{"role":"user","content":"Hi"}],"max_tokens":40,
                             "stream":true,"n":2})");
  BackgroundRequest plain(server_->port(), "/v1/completions",
                          R"({"model":"tiny","prompt":"Hello world","max_tokens":60})");
  ASSERT_TRUE(WaitFor([&] { return engine_->submitted().size() == 4; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // a few tokens each
  server_->StopAccepting();
  engine_->Shutdown();  // the shutdown timeout ran out: abort what is left
  completion.Join();
  chat.Join();
  plain.Join();

  // Each stream ends with a final chunk whose finish_reason is "abort", then [DONE].
  ASSERT_EQ(completion.status(), 200);
  SseStream s = ParseSse(completion.body());
  EXPECT_TRUE(s.well_formed && s.done) << completion.body();
  ASSERT_GE(s.events.size(), 2u);
  EXPECT_EQ(s.events[s.events.size() - 2]["choices"][0]["finish_reason"], "abort");
  EXPECT_GT(s.events.back()["usage"]["completion_tokens"].get<int64_t>(), 0);
  ASSERT_EQ(chat.status(), 200);
  SseStream c = ParseSse(chat.body());
  EXPECT_TRUE(c.well_formed && c.done) << chat.body();
  std::map<int, std::string> reasons;
  for (const Json& ev : c.events)
    if (!ev["choices"][0]["finish_reason"].is_null())
      reasons[ev["choices"][0]["index"].get<int>()] = ev["choices"][0]["finish_reason"];
  EXPECT_EQ(reasons, (std::map<int, std::string>{{0, "abort"}, {1, "abort"}}));
  // The non-streaming one gets a whole JSON response with what was generated.
  ASSERT_EQ(plain.status(), 200) << plain.body();
  Json j = Json::parse(plain.body());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "abort");
  EXPECT_GT(j["usage"]["completion_tokens"].get<int64_t>(), 0);
  EXPECT_LT(j["usage"]["completion_tokens"].get<int64_t>(), 60);

  const auto start = std::chrono::steady_clock::now();
  server_->Wait();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
  EXPECT_EQ(server_->num_in_flight(), 0);
}

TEST_F(HttpServerTest, BadJson) {
  ExpectError(Post("/v1/completions", "{\"model\":"), 400, "invalid_request_error");
  ExpectServerHealthy();
  ExpectError(Post("/v1/chat/completions", "not json at all"), 400, "invalid_request_error");
  ExpectServerHealthy();
}

TEST_F(HttpServerTest, WrongTypes) {
  Json e = ExpectError(Post("/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":"3"})"),
                       400, "invalid_request_error");
  EXPECT_EQ(e["param"], "max_tokens");
  ExpectServerHealthy();
  e = ExpectError(
      Post("/v1/chat/completions", R"({"model":"tiny","messages":[{"role":"user","content":7}]})"),
      400, "invalid_request_error");
  EXPECT_EQ(e["param"], "messages[0].content");
  ExpectServerHealthy();
  e = ExpectError(Post("/v1/completions", R"({"model":"tiny","prompt":"x","top_p":7})"), 400,
                  "invalid_request_error");
  EXPECT_EQ(e["param"], "top_p");
  ExpectServerHealthy();
  e = ExpectError(Post("/v1/chat/completions",
                       R"({"model":"tiny","messages":[{"role":"user","content":[{"type":"image_url",
                           "image_url":{"url":"data:image/png;base64,AAAA"}}]}]})"),
                  400, "invalid_request_error");
  EXPECT_EQ(e["message"],
            "messages[0].content[0]: this model does not accept images (it has no vision encoder)");
  EXPECT_EQ(e["param"], "messages[0].content[0]");
  ExpectServerHealthy();
  e = ExpectError(
      Post("/v1/chat/completions",
           R"({"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"x"},
               {"type":"image_url","image_url":{"url":"http://h/a.png","detail":"huge"}}]}]})"),
      400, "invalid_request_error");
  EXPECT_EQ(e["message"],
            "messages[0].content[1]: 'image_url.detail' must be one of auto, low, high; got "
            "'huge'");
  EXPECT_EQ(e["param"], "messages[0].content[1]");
  ExpectServerHealthy();
  EXPECT_EQ(engine_->submitted().size(), 5u);  // only the healthy ones reached the engine
}

TEST_F(HttpServerTest, BadMediaParamsFailAtStart) {
  ServerParams p;
  p.port = 0;
  p.media.allowed_local_media_path = "/nonexistent/media/dir";
  HttpServer server(p, engine_.get(), processor_.get());
  Status st = server.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(),
            "--allowed-local-media-path '/nonexistent/media/dir': No such file or directory");
}

TEST_F(HttpServerTest, UnknownModel) {
  Json e = ExpectError(Post("/v1/completions", R"({"model":"gpt-9","prompt":"x"})"), 404,
                       "not_found_error");
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(e["param"], "model");
  ExpectServerHealthy();
}

TEST_F(HttpServerTest, TooLong) {
  int64_t p = static_cast<int64_t>(tokenizer_->Encode("Hello world", true).size());
  Json e = ExpectError(
      Post("/v1/completions", R"({"model":"tiny","prompt":"Hello world","max_tokens":62})"), 400,
      "invalid_request_error");
  std::string msg = e["message"];
  EXPECT_NE(msg.find("64"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(p + 62)), std::string::npos) << msg;
  EXPECT_EQ(e["param"], "max_tokens");
  EXPECT_EQ(e["code"], "context_length_exceeded");
  ExpectServerHealthy();
  EXPECT_TRUE(engine_->submitted().size() == 1u);  // only the healthy one reached the engine
}

TEST_F(HttpServerTest, UnknownRouteAndMethod) {
  auto res = client_->Get("/v1/nothing");
  ExpectError(res, 404, "not_found_error");
  ExpectServerHealthy();
}

TEST_F(HttpServerTest, ModelsHealthMetrics) {
  auto models = client_->Get("/v1/models");
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  Json m = Json::parse(models->body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["max_model_len"], 64);

  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Json::parse(health->body)["status"], "ok");

  ExpectServerHealthy();
  // The HTTP counters are updated after a response is written (httplib's logger),
  // so the last request may show up a moment after its client got the response:
  // poll, bounded, until it has been counted.
  const std::string completions_line =
      "xrt_http_requests_total{path=\"/v1/completions\",code=\"200\"} 1\n";
  auto metrics = [&] {
    for (int attempt = 1;; ++attempt) {
      httplib::Result r = client_->Get("/metrics");
      if (!r || r->body.find(completions_line) != std::string::npos || attempt == 200) return r;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }();
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_NE(metrics->body.find("fake_engine_steps 1\n"), std::string::npos);
  EXPECT_NE(metrics->body.find(completions_line), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("xrt_http_requests_total{path=\"/health\",code=\"200\"} 1\n"),
            std::string::npos);
}

TEST_F(HttpServerTest, ApiKey) {
  TearDown();
  StartServer("sekret");
  ExpectError(Post("/v1/completions", R"({"model":"tiny","prompt":"x"})"), 401,
              "authentication_error");
  ExpectServerHealthy({{"Authorization", "Bearer sekret"}});
  ExpectError(Post("/v1/completions", R"({"model":"tiny","prompt":"x"})",
                   {{"Authorization", "Bearer wrong"}}),
              401, "authentication_error");
  ExpectServerHealthy({{"Authorization", "Bearer sekret"}});
  ExpectError(client_->Get("/v1/models"), 401, "authentication_error");
  auto models = client_->Get("/v1/models", {{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  // /health and /metrics are open.
  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  auto metrics = client_->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
}

TEST_F(HttpServerTest, PortInUseIsAClearError) {
  ServerParams p;
  p.port = server_->port();
  p.served_model_name = "tiny";
  HttpServer second(p, engine_.get(), processor_.get());
  Status st = second.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(std::to_string(server_->port())), std::string::npos) << st.ToString();
  ExpectServerHealthy();
}

TEST_F(HttpServerTest, NoChatTemplate) {
  ServerParams p;
  p.port = 0;
  p.served_model_name = "tiny";
  RequestProcessorParams pp;
  pp.tokenizer = tokenizer_;
  pp.limits.max_model_len = 64;
  RequestProcessor no_template(pp);
  HttpServer plain(p, engine_.get(), &no_template);
  ASSERT_TRUE(plain.Start().ok());
  httplib::Client c("127.0.0.1", plain.port());
  auto res =
      c.Post("/v1/chat/completions",
             R"({"model":"tiny","messages":[{"role":"user","content":"x"}]})", "application/json");
  ExpectError(res, 400, "invalid_request_error");
  plain.Stop();
  plain.Wait();
}

TEST_F(HttpServerTest, ModelSamplingDefaultsFillWhatTheRequestLeavesUnset) {
  RequestProcessorParams pp;
  pp.tokenizer = tokenizer_;
  pp.limits.max_model_len = 64;
  pp.sampling_defaults.temperature = 0.7f;
  pp.sampling_defaults.repetition_penalty = 1.05f;
  RequestProcessor with_defaults(pp);
  ServerParams p;
  p.port = 0;
  p.served_model_name = "tiny";
  HttpServer server(p, engine_.get(), &with_defaults);
  ASSERT_TRUE(server.Start().ok());
  httplib::Client c("127.0.0.1", server.port());
  auto res =
      c.Post("/v1/completions", R"({"model":"tiny","prompt":"Hi","max_tokens":2,"temperature":0})",
             "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto sub = engine_->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_FLOAT_EQ(sub[0].sampling.repetition_penalty, 1.05f);  // the model's
  EXPECT_FLOAT_EQ(sub[0].sampling.temperature, 0.0f);          // the request's
  server.Stop();
  server.Wait();
}

// A vision model's server (the tokenizer, chat template and vision params of
// tests/fixtures/llava/llava_clip_llama): image parts are fetched, decoded and
// placed; every bad image is a 400 naming its part, and the server goes on.
class HttpServerVisionTest : public HttpServerTest {
 protected:
  void SetUp() override {
    const std::string dir = std::string(XCC_SOURCE_DIR) + "/tests/fixtures/llava/";
    model_dir_ = dir + "llava_clip_llama/";
    images_dir_ = dir + "images";
    auto spec =
        LoadTokenizerJson(model_dir_ + "tokenizer.json", model_dir_ + "tokenizer_config.json");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    auto tok = Tokenizer::Create(std::move(spec).value());
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    llava_tokenizer_.emplace(std::move(tok).value());
    std::ifstream tmpl_file(model_dir_ + "chat_template.json");  // llava-hf's template
    auto tmpl = ChatTemplate::Parse(Json::parse(tmpl_file)["chat_template"]);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
    llava_template_.emplace(std::move(tmpl).value());
    std::ifstream pre(model_dir_ + "preprocessor_config.json");
    auto params = ParseImageProcessorConfig(nlohmann::json::parse(pre), "preprocessor_config.json");
    ASSERT_TRUE(params.ok()) << params.status().ToString();
    vision_.image_token = "<image>";
    vision_.image_token_id = 510;
    vision_.tokens_per_image = 16;
    vision_.num_channels = 3;
    vision_.image_size = 32;
    vision_.max_images_per_prompt = 2;
    vision_.preprocess = *params;

    engine_ = std::make_unique<FakeEngine>(&*llava_tokenizer_, 512, std::chrono::milliseconds(1));
    RequestProcessorParams pp;
    pp.tokenizer = &*llava_tokenizer_;
    pp.chat_template = &*llava_template_;
    pp.limits.max_model_len = 512;
    pp.vision = &vision_;
    processor_ = std::make_unique<RequestProcessor>(pp);
    ServerParams p;
    p.host = "127.0.0.1";
    p.port = 0;
    p.served_model_name = "tiny";
    p.http_threads = 4;
    p.media.allowed_local_media_path = images_dir_;
    p.media.limit_images_per_prompt = 3;
    server_ = std::make_unique<HttpServer>(p, engine_.get(), processor_.get());
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(10, 0);
  }

  // A chat body with one user message of `parts` (JSON text).
  static std::string Chat(const std::string& parts) {
    return R"({"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":[)" + parts +
           "]}]}";
  }
  std::string ImagePart(const std::string& file) {
    return R"({"type":"image_url","image_url":{"url":"file://)" + images_dir_ + "/" + file +
           R"("}})";
  }
  void ExpectBadImage(const std::string& body, const std::string& param,
                      const std::string& message) {
    Json e = ExpectError(Post("/v1/chat/completions", body), 400, "invalid_request_error");
    EXPECT_EQ(e["param"], param);
    EXPECT_NE(e["message"].get<std::string>().find(message), std::string::npos) << e.dump();
    auto ok = Post("/v1/chat/completions",
                   Chat(ImagePart("camera_gray.png") + R"(,{"type":"text","text":"and?"})"));
    ASSERT_TRUE(ok);
    EXPECT_EQ(ok->status, 200) << ok->body;
  }

  std::string model_dir_, images_dir_;
  std::optional<Tokenizer> llava_tokenizer_;
  std::optional<ChatTemplate> llava_template_;
  VisionParams vision_;
};

TEST_F(HttpServerVisionTest, ImagePartsBecomeImagesOfTheEngineRequest) {
  // HF's chat_1 case of the fixture: the same messages give its input_ids.
  std::ifstream ref(model_dir_ + "reference.json");
  const Json reference = Json::parse(ref);
  const Json* chat_case = nullptr;
  for (const Json& c : reference["cases"])
    if (c["name"] == "chat_1") chat_case = &c;
  ASSERT_NE(chat_case, nullptr);
  ASSERT_EQ((*chat_case)["images"][0], "rocket_tiny.png");
  auto res = Post("/v1/chat/completions",
                  Chat(ImagePart("rocket_tiny.png") +
                       R"(,{"type":"text","text":"What is shown in this image?"})"));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto sub = engine_->submitted();
  ASSERT_EQ(sub.size(), 1u);
  EXPECT_EQ(sub[0].prompt, (*chat_case)["input_ids"].get<std::vector<int32_t>>());
  ASSERT_EQ(sub[0].images.size(), 1u);
  EXPECT_EQ(sub[0].images[0].span.offset, (*chat_case)["image_token_positions"][0].get<int64_t>());
  EXPECT_EQ(sub[0].images[0].span.length, 16);
  ASSERT_NE(sub[0].images[0].pixel_values, nullptr);
  EXPECT_EQ(sub[0].images[0].pixel_values->size(), 3u * 32 * 32);
  EXPECT_EQ(Json::parse(res->body)["usage"]["prompt_tokens"], sub[0].prompt.size());

  // A text-only chat on a vision model goes to the template as parts too.
  auto text =
      Post("/v1/chat/completions",
           R"({"model":"tiny","max_tokens":2,"messages":[{"role":"user","content":"Hi"}]})");
  ASSERT_TRUE(text);
  ASSERT_EQ(text->status, 200) << text->body;
  sub = engine_->submitted();
  ASSERT_EQ(sub.size(), 2u);
  EXPECT_EQ(sub[1].prompt, llava_tokenizer_->Encode("USER: Hi ASSISTANT:", true));
  EXPECT_TRUE(sub[1].images.empty());
}

TEST_F(HttpServerVisionTest, EveryBadImageIsA400NamingThePart) {
  const std::string text = R"({"type":"text","text":"hi"})";
  // Not an image.
  ExpectBadImage(
      Chat(text + R"(,{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}})"),
      "messages[0].content[1]", "messages[0].content[1]: cannot decode the image");
  // Outside --allowed-local-media-path.
  ExpectBadImage(Chat(R"({"type":"image_url","image_url":{"url":"file:///etc/passwd"}})"),
                 "messages[0].content[0]", "messages[0].content[0]");
  // More than the model takes (2), within the server's fetch limit (3).
  ExpectBadImage(Chat(ImagePart("camera_gray.png") + "," + ImagePart("chelsea_rgb.jpg") + "," +
                      ImagePart("rocket_tiny.png")),
                 "messages[0].content[2]", "messages[0].content[2]: at most 2 images per request");
  // More than the server fetches (3).
  ExpectBadImage(Chat(ImagePart("camera_gray.png") + "," + ImagePart("camera_gray.png") + "," +
                      ImagePart("camera_gray.png") + "," + ImagePart("camera_gray.png")),
                 "messages[0].content[3]", "messages[0].content[3]");
  // An image token typed in the text besides the image part.
  ExpectBadImage(Chat(ImagePart("camera_gray.png") + R"(,{"type":"text","text":"<image>"})"),
                 "messages",
                 "the prompt has 2 image tokens ('<image>') but the request has 1 image");
  EXPECT_EQ(engine_->submitted().size(), 5u);  // only the good requests
}

// ---------------------------------------------------------------------------
// Multi-LoRA: adapters from the committed PEFT fixtures (tests/fixtures/lora/llama_gqa),
// validated against llama_gqa's geometry (what `xcc compile --enable-lora
// --max-loras 2 --max-lora-rank 8` gives that model).

class HttpServerLoraTest : public HttpServerTest {
 protected:
  void SetUp() override {
    LoraGeometry g;
    g.spec = MakeLoraSpec(/*num_layers=*/2, /*hidden=*/64, /*intermediate=*/176, /*num_heads=*/4,
                          /*num_kv_heads=*/2, /*head_dim=*/16, /*max_lora_rank=*/8,
                          AllLoraTargetModules());
    g.max_loras = 2;
    registry_ = std::make_unique<LoraRegistry>(std::move(g));
    for (const char* name : {"a_all_r8", "b_qv_r4_rslora"}) {
      auto loaded = registry_->Load(name, Fixture(name));
      ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    }
    lora_registry_ = registry_.get();
    allow_runtime_lora_updating_ = true;
    StartServer("", std::chrono::milliseconds(5));
  }
  static std::string Fixture(const std::string& name) {
    return std::string(XCC_SOURCE_DIR) + "/tests/fixtures/lora/" +
           (name.find('/') == std::string::npos ? "llama_gqa/" : "") + name;
  }
  httplib::Result Load(const std::string& name, const std::string& path) {
    return Post("/v1/load_lora_adapter", Json{{"lora_name", name}, {"lora_path", path}}.dump());
  }
  httplib::Result Unload(const std::string& name) {
    return Post("/v1/unload_lora_adapter", Json{{"lora_name", name}}.dump());
  }
  // The adapter name of the engine request `i` submitted ("" for the base model).
  std::string SubmittedLora(size_t i) {
    auto submitted = engine_->submitted();
    EXPECT_LT(i, submitted.size());
    if (i >= submitted.size() || !submitted[i].lora) return "";
    return submitted[i].lora->name;
  }

  std::unique_ptr<LoraRegistry> registry_;
};

TEST_F(HttpServerLoraTest, ModelNameSelectsTheAdapter) {
  auto res = Post("/v1/completions", R"({"model":"a_all_r8","prompt":"Hello","max_tokens":2})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body)["model"], "a_all_r8");
  EXPECT_EQ(SubmittedLora(0), "a_all_r8");
  res = Post(
      "/v1/chat/completions",
      R"({"model":"b_qv_r4_rslora","max_tokens":2,"messages":[{"role":"user","content":"hi"}]})");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(Json::parse(res->body)["model"], "b_qv_r4_rslora");
  EXPECT_EQ(SubmittedLora(1), "b_qv_r4_rslora");
  EXPECT_EQ(engine_->submitted()[1].lora, registry_->Find("b_qv_r4_rslora"));
  ExpectServerHealthy();  // the base model's name selects no adapter
  EXPECT_EQ(SubmittedLora(2), "");
}

TEST_F(HttpServerLoraTest, ModelsListTheAdaptersWithTheirParent) {
  auto res = client_->Get("/v1/models");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  Json data = Json::parse(res->body)["data"];
  ASSERT_EQ(data.size(), 3u) << res->body;
  EXPECT_EQ(data[0]["id"], "tiny");
  EXPECT_TRUE(data[0]["parent"].is_null());
  EXPECT_EQ(data[0]["max_model_len"], 64);
  EXPECT_EQ(data[1]["id"], "a_all_r8");
  EXPECT_EQ(data[1]["root"], Fixture("a_all_r8"));
  EXPECT_EQ(data[1]["parent"], "tiny");
  EXPECT_TRUE(data[1]["max_model_len"].is_null());
  EXPECT_EQ(data[2]["id"], "b_qv_r4_rslora");
  EXPECT_EQ(data[2]["parent"], "tiny");
}

TEST_F(HttpServerLoraTest, UnknownModelListsTheBaseModelAndTheAdapters) {
  Json e = ExpectError(Post("/v1/completions", R"({"model":"c_pattern","prompt":"x"})"), 404,
                       "not_found_error");
  EXPECT_EQ(e["message"],
            "The model 'c_pattern' does not exist; this server serves 'tiny', 'a_all_r8', "
            "'b_qv_r4_rslora'");
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(e["param"], "model");
  EXPECT_TRUE(engine_->submitted().empty());
}

// Load, use, unload, 404: vLLM's bodies, texts and status codes.
TEST_F(HttpServerLoraTest, LoadAndUnloadAtRunTime) {
  auto loaded = Load("c", Fixture("c_pattern"));
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->status, 200);
  EXPECT_EQ(loaded->body, "Success: LoRA adapter 'c' added successfully.");
  ASSERT_NE(registry_->Find("c"), nullptr);
  EXPECT_EQ(registry_->Find("c")->rank, 8);
  auto res = Post("/v1/completions", R"({"model":"c","prompt":"Hello","max_tokens":2})");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(SubmittedLora(0), "c");

  Json e = ExpectError(Load("c", Fixture("d_mlp_f16")), 400, "invalid_request_error");
  EXPECT_EQ(e["message"], "The lora adapter 'c' has already been loaded.");
  EXPECT_EQ(e["param"], "lora_name");
  e = ExpectError(Load("tiny", Fixture("d_mlp_f16")), 400, "invalid_request_error");
  EXPECT_EQ(e["message"], "'tiny' is the base model's name; choose another lora_name");
  e = ExpectError(Post("/v1/load_lora_adapter", R"({"lora_name":"d"})"), 400,
                  "invalid_request_error");
  EXPECT_EQ(e["message"], "Both 'lora_name' and 'lora_path' must be provided.");

  auto unloaded = Unload("c");
  ASSERT_TRUE(unloaded);
  EXPECT_EQ(unloaded->status, 200);
  EXPECT_EQ(unloaded->body, "Success: LoRA adapter 'c' removed successfully.");
  e = ExpectError(Unload("c"), 404, "not_found_error");
  EXPECT_EQ(e["message"], "The lora adapter 'c' cannot be found.");
  e = ExpectError(Post("/v1/completions", R"({"model":"c","prompt":"x"})"), 404, "not_found_error");
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_EQ(engine_->submitted().size(), 1u);
  ExpectServerHealthy();
}

// Every problem of an invalid adapter is in the 400 (the loader's message,
// complete); nothing is registered and the server goes on serving.
TEST_F(HttpServerLoraTest, InvalidAdapterIsA400ListingEveryProblem) {
  Json e = ExpectError(Load("bad", Fixture("invalid/multi_problem")), 400, "invalid_request_error");
  const std::string msg = e["message"];
  EXPECT_NE(msg.find("5 problems"), std::string::npos) << msg;
  for (const char* problem : {"modules_to_save is", "DoRA is not supported",
                              "LoRA rank 16 (model.layers.0.self_attn.q_proj) is greater than "
                              "max_lora_rank 8"})
    EXPECT_NE(msg.find(problem), std::string::npos) << problem << " in " << msg;
  e = ExpectError(Load("bad", "/nonexistent/adapter"), 400, "invalid_request_error");
  EXPECT_NE(e["message"].get<std::string>().find("not a directory"), std::string::npos);
  EXPECT_EQ(registry_->Find("bad"), nullptr);
  EXPECT_EQ(registry_->List().size(), 2u);
  ExpectServerHealthy();
}

// A request running with an adapter finishes normally when the adapter is
// unloaded meanwhile (it holds the adapter); new requests cannot select it.
TEST_F(HttpServerLoraTest, UnloadWhileStreamingLetsTheStreamFinish) {
  std::optional<httplib::Result> stream;
  std::thread t([&] {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10, 0);
    stream = c.Post("/v1/completions", httplib::Headers{},
                    R"({"model":"a_all_r8","prompt":"Hello","max_tokens":40,"stream":true})",
                    "application/json");
  });
  for (int i = 0; i < 2000 && engine_->num_live() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(engine_->num_live(), 1u);
  auto unloaded = Unload("a_all_r8");
  ASSERT_TRUE(unloaded);
  EXPECT_EQ(unloaded->status, 200);
  EXPECT_EQ(engine_->num_live(), 1u);  // 40 steps of 5 ms: still streaming
  ExpectError(Post("/v1/completions", R"({"model":"a_all_r8","prompt":"x"})"), 404,
              "not_found_error");
  t.join();
  ASSERT_TRUE(stream.has_value() && *stream);
  SseStream s = ParseSse((*stream)->body);
  EXPECT_TRUE(s.done && s.well_formed);
  ASSERT_FALSE(s.events.empty());
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(s.events.back()["model"], "a_all_r8");
  EXPECT_TRUE(engine_->aborted().empty());
}

TEST_F(HttpServerLoraTest, MetricsCountTheAdaptersLoaded) {
  auto text = [&] { return client_->Get("/metrics")->body; };
  EXPECT_NE(text().find("\nxrt_lora_adapters_loaded 2\n"), std::string::npos) << text();
  ASSERT_EQ(Unload("b_qv_r4_rslora")->status, 200);
  EXPECT_NE(text().find("\nxrt_lora_adapters_loaded 1\n"), std::string::npos) << text();
}

// Without --allow-runtime-lora-updating the routes do not exist (vLLM: 404).
TEST_F(HttpServerTest, LoraUpdateRoutesNeedTheFlag) {
  ExpectError(Post("/v1/load_lora_adapter", R"({"lora_name":"a","lora_path":"/a"})"), 404,
              "not_found_error");
  ExpectError(Post("/v1/unload_lora_adapter", R"({"lora_name":"a"})"), 404, "not_found_error");
  ExpectServerHealthy();
}

// With the flag but an artifact without LoRA, loading names the compile flag.
TEST_F(HttpServerTest, LoadingIntoAModelWithoutLoraNamesTheCompileFlag) {
  TearDown();
  allow_runtime_lora_updating_ = true;
  StartServer();
  Json e = ExpectError(Post("/v1/load_lora_adapter", R"({"lora_name":"a","lora_path":"/a"})"), 400,
                       "invalid_request_error");
  EXPECT_EQ(e["message"],
            "cannot load LoRA adapter 'a': the model was compiled without LoRA (xcc compile "
            "--enable-lora)");
  ExpectError(Post("/v1/unload_lora_adapter", R"({"lora_name":"a"})"), 404, "not_found_error");
  Json m =
      ExpectError(Post("/v1/completions", R"({"model":"a","prompt":"x"})"), 404, "not_found_error");
  EXPECT_EQ(m["message"], "The model 'a' does not exist; this server serves 'tiny'");
}

// --server-dev-mode: /pause, /resume and /is_paused (vLLM's dev endpoints),
// behind the API key. A stream frozen by mode=keep goes on after /resume; the
// default mode aborts it with a final chunk.
TEST_F(HttpServerTest, PauseAndResume) {
  ExpectError(Post("/pause", ""), 404, "not_found_error");  // needs the flag
  EXPECT_EQ(client_->Get("/is_paused")->status, 404);
  TearDown();
  server_dev_mode_ = true;
  StartServer("sk-test");
  const httplib::Headers auth = {{"Authorization", "Bearer sk-test"}};
  ExpectError(Post("/pause", ""), 401, "authentication_error");
  EXPECT_EQ(client_->Get("/is_paused")->status, 401);
  Json e = ExpectError(Post("/pause?mode=wait", "", auth), 400, "invalid_request_error");
  EXPECT_EQ(e["message"], "mode 'wait' is not supported: use 'abort' or 'keep'");
  e = ExpectError(Post("/pause?mode=later", "", auth), 400, "invalid_request_error");
  EXPECT_EQ(e["message"], "mode must be 'abort' or 'keep', not 'later'");
  EXPECT_EQ(e["param"], "mode");
  EXPECT_TRUE(engine_->pause_modes().empty());
  EXPECT_EQ(Json::parse(client_->Get("/is_paused", auth)->body), (Json{{"is_paused", false}}));

  auto paused = Post("/pause?mode=keep", "", auth);
  ASSERT_TRUE(paused);
  EXPECT_EQ(paused->status, 200);
  EXPECT_EQ(Json::parse(paused->body), (Json{{"status", "paused"}}));
  EXPECT_EQ(Json::parse(client_->Get("/is_paused", auth)->body), (Json{{"is_paused", true}}));
  std::optional<httplib::Result> stream;
  std::thread t([&] {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(10, 0);
    stream = c.Post("/v1/completions", auth,
                    R"({"model":"tiny","prompt":"Hello","max_tokens":20,"stream":true})",
                    "application/json");
  });
  for (int i = 0; i < 2000 && engine_->num_live() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(engine_->num_live(), 1u);  // accepted while paused; waits
  auto resumed = Post("/resume", "", auth);
  ASSERT_TRUE(resumed);
  EXPECT_EQ(Json::parse(resumed->body), (Json{{"status", "resumed"}}));
  t.join();
  ASSERT_TRUE(stream.has_value() && *stream);
  SseStream s = ParseSse((*stream)->body);
  ASSERT_TRUE(s.done && s.well_formed && !s.events.empty());
  EXPECT_EQ(s.events.back()["choices"][0]["finish_reason"], "length");

  // steps=N single-steps the engine and leaves it paused (the fake runs at most 2).
  auto stepped = Post("/resume?steps=5", "", auth);
  ASSERT_TRUE(stepped);
  EXPECT_EQ(Json::parse(stepped->body), (Json{{"status", "paused"}, {"steps", 2}}));
  for (const char* bad : {"0", "-1", "x", "3x", ""}) {
    e = ExpectError(Post(std::string("/resume?steps=") + bad, "", auth), 400,
                    "invalid_request_error");
    EXPECT_EQ(e["message"], fmt::format("steps must be a positive integer, not '{}'", bad));
  }
  EXPECT_EQ(engine_->run_steps(), std::vector<int64_t>{5});

  ASSERT_EQ(Post("/pause", "", auth)->status, 200);  // default mode: abort
  EXPECT_EQ(engine_->pause_modes(), (std::vector<PauseMode>{PauseMode::kKeep, PauseMode::kAbort}));
  ASSERT_EQ(Post("/resume", "", auth)->status, 200);
  ExpectServerHealthy(auth);
}

}  // namespace
}  // namespace xrt::server
