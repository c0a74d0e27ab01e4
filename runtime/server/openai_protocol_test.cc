#include "runtime/server/openai_protocol.h"

#include <gtest/gtest.h>

#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_import.h"

namespace xrt::server {
namespace {

using Json = nlohmann::ordered_json;

TEST(OpenAiProtocol, ParsesCompletionRequest) {
  std::string param;
  auto r = ParseCompletionRequest(
      R"({"model":"m","prompt":"hi","max_tokens":5,"temperature":0.5,"top_p":0.9,
    "top_k":40,"min_p":0.1,"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.1,"seed":7,
    "n":3,"stop":["a","b"],"stream":true,"stream_options":{"include_usage":true},"logprobs":2,"ignore_eos":true,
    "user":"u","some_unknown_field":{"x":1}})",
      &param);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kind, ApiKind::kCompletion);
  EXPECT_EQ(r->model, "m");
  EXPECT_EQ(r->prompt, "hi");
  EXPECT_EQ(r->max_tokens, 5);
  EXPECT_FLOAT_EQ(r->sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r->sampling.top_p, 0.9f);
  EXPECT_EQ(r->sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r->sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(r->sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(r->sampling.has_seed);
  EXPECT_EQ(r->sampling.seed, 7u);
  EXPECT_EQ(r->n, 3);
  EXPECT_EQ(r->stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->sampling.logprobs, 2);
  EXPECT_TRUE(r->ignore_eos);
}

TEST(OpenAiProtocol, CompletionDefaults) {
  auto r = ParseCompletionRequest(R"({"model":"m","prompt":["one"],"stop":"x","max_tokens":null})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->prompt, "one");
  EXPECT_EQ(r->max_tokens, -1);
  EXPECT_EQ(r->n, 1);
  EXPECT_EQ(r->sampling.logprobs, -1);
  EXPECT_FALSE(r->sampling.has_seed);
  EXPECT_EQ(r->stop, std::vector<std::string>{"x"});
}

TEST(OpenAiProtocol, RecordsWhichSamplingDefaultsTheBodySets) {
  // Fields left out (or null) take the model's generation_config defaults later.
  auto none = ParseCompletionRequest(R"({"model":"m","prompt":"x","top_p":null})");
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_FALSE(none->sampling_set.temperature);
  EXPECT_FALSE(none->sampling_set.top_p);
  EXPECT_FALSE(none->sampling_set.top_k);
  EXPECT_FALSE(none->sampling_set.repetition_penalty);
  auto all =
      ParseChatRequest(R"({"model":"m","messages":[{"role":"user","content":"x"}],"temperature":1,
    "top_p":1,"top_k":-1,"repetition_penalty":1})");
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(all->sampling_set.temperature);
  EXPECT_TRUE(all->sampling_set.top_p);
  EXPECT_TRUE(all->sampling_set.top_k);
  EXPECT_TRUE(all->sampling_set.repetition_penalty);
}

struct BadCase {
  const char* body;
  const char* param;
  const char* message_part;
};

TEST(OpenAiProtocol, RejectsBadCompletionRequests) {
  const BadCase cases[] = {
      {"{not json", "", "not valid JSON"},
      {"[1,2]", "", "JSON object"},
      {R"({"prompt":"x"})", "model", "'model' is required"},
      {R"({"model":"m"})", "prompt", "'prompt' is required"},
      {R"({"model":"m","prompt":5})", "prompt", "'prompt' must be a string"},
      {R"({"model":"m","prompt":[[1,2]]})", "prompt", "token-id"},
      {R"({"model":"m","prompt":[1,2]})", "prompt", "token-id"},
      {R"({"model":"m","prompt":["a","b"]})", "prompt", "exactly one"},
      {R"({"model":"m","prompt":"x","max_tokens":"5"})", "max_tokens",
       "'max_tokens' must be an integer, got string"},
      {R"({"model":"m","prompt":"x","max_tokens":0})", "max_tokens", "must be in"},
      {R"({"model":"m","prompt":"x","max_tokens":1.5})", "max_tokens", "integer"},
      {R"({"model":"m","prompt":"x","temperature":"hot"})", "temperature",
       "'temperature' must be a number"},
      {R"({"model":"m","prompt":"x","temperature":-1})", "temperature", "temperature must be"},
      {R"({"model":"m","prompt":"x","top_p":1.5})", "top_p", "top_p must be in (0, 1]"},
      {R"({"model":"m","prompt":"x","n":0})", "n", "'n' must be in [1, 16]"},
      {R"({"model":"m","prompt":"x","n":17})", "n", "'n' must be in [1, 16]"},
      {R"({"model":"m","prompt":"x","stop":[1]})", "stop",
       "'stop' must be a string or a list of strings"},
      {R"({"model":"m","prompt":"x","stop":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
       "stop", "at most 16"},
      {R"({"model":"m","prompt":"x","stream":"yes"})", "stream", "boolean"},
      {R"({"model":"m","prompt":"x","stream_options":{"include_usage":true}})", "stream_options",
       "only allowed"},
      {R"({"model":"m","prompt":"x","logprobs":21})", "logprobs", "[0, 20]"},
      {R"({"model":"m","prompt":"x","logprobs":true})", "logprobs", "integer"},
      {R"({"model":"m","prompt":"x","echo":true})", "echo", "'echo' is not supported"},
      {R"({"model":"m","prompt":"x","seed":"1"})", "seed", "integer"},
  };
  for (const BadCase& c : cases) {
    std::string param = "unset";
    auto r = ParseCompletionRequest(c.body, &param);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(param, c.param) << c.body;
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos)
        << c.body << " -> " << r.status().message();
    EXPECT_EQ(ApiErrorFromStatus(r.status(), param).http_status, 400);
  }
}

TEST(OpenAiProtocol, ParsesChatRequest) {
  auto r = ParseChatRequest(R"({"model":"m","messages":[
      {"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
      {"role":"assistant","content":null,"tool_calls":[]},
      {"role":"tool","content":"42","tool_call_id":"c1"}],
      "max_completion_tokens":9,"max_tokens":3,"logprobs":true,"top_logprobs":4})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->kind, ApiKind::kChat);
  ASSERT_EQ(r->messages.size(), 4u);
  EXPECT_EQ(r->messages[1]["content"], "a\nb");
  EXPECT_TRUE(r->messages[2]["content"].is_null());
  EXPECT_EQ(r->messages[3]["tool_call_id"], "c1");
  EXPECT_EQ(r->max_tokens, 9);
  EXPECT_EQ(r->sampling.logprobs, 4);

  auto plain = ParseChatRequest(
      R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":false})");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->sampling.logprobs, -1);
}

TEST(OpenAiProtocol, RejectsBadChatRequests) {
  const BadCase cases[] = {
      {R"({"model":"m"})", "messages", "'messages' is required"},
      {R"({"model":"m","messages":"hi"})", "messages", "must be a list"},
      {R"({"model":"m","messages":[]})", "messages", "must not be empty"},
      {R"({"model":"m","messages":[{"role":"wizard","content":"x"}]})", "messages[0].role",
       "must be one of"},
      {R"({"model":"m","messages":[{"content":"x"}]})", "messages[0].role", "must be a string"},
      {R"({"model":"m","messages":[{"role":"user"}]})", "messages[0].content", "is required"},
      {R"({"model":"m","messages":[{"role":"user","content":5}]})", "messages[0].content",
       "content parts"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:"}}]}]})",
       "messages[0].content", "images are not supported by this model"},
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"audio"}]}]})",
       "messages[0].content", "unsupported content part type"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
       "top_logprobs", "requires 'logprobs'"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":30})",
       "top_logprobs", "[0, 20]"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":1})", "logprobs",
       "boolean"},
  };
  for (const BadCase& c : cases) {
    std::string param;
    auto r = ParseChatRequest(c.body, &param);
    ASSERT_FALSE(r.ok()) << c.body;
    EXPECT_EQ(param, c.param) << c.body;
    EXPECT_NE(r.status().message().find(c.message_part), std::string::npos)
        << c.body << " -> " << r.status().message();
  }
}

TEST(OpenAiProtocol, ErrorJsonShape) {
  ApiError e = ApiErrorFromStatus(NotFoundError("no such model"), "model");
  EXPECT_EQ(e.http_status, 404);
  e.code = "model_not_found";
  Json j = ApiErrorJson(e);
  EXPECT_EQ(
      DumpJson(j),
      R"({"error":{"message":"no such model","type":"not_found_error","param":"model","code":"model_not_found"}})");
  Json k = ApiErrorJson(ApiErrorFromStatus(InternalError("boom")));
  EXPECT_EQ(DumpJson(k),
            R"({"error":{"message":"boom","type":"server_error","param":null,"code":null}})");
  EXPECT_EQ(ApiErrorFromStatus(InternalError("boom")).http_status, 500);
}

TEST(OpenAiProtocol, DumpJsonReplacesInvalidUtf8) {
  Json j = {{"t", std::string("a\xff")}};
  EXPECT_EQ(DumpJson(j), "{\"t\":\"a\xEF\xBF\xBD\"}");
}

class ProtocolWithTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = std::string(XCC_SOURCE_DIR) + "/tests/fixtures/tokenizer/llama3/";
    auto spec = LoadTokenizerJson(dir + "tokenizer.json", dir + "tokenizer_config.json");
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    auto tok = Tokenizer::Create(std::move(spec).value());
    ASSERT_TRUE(tok.ok()) << tok.status().ToString();
    tokenizer_ = std::make_unique<Tokenizer>(std::move(tok).value());
  }
  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(ProtocolWithTokenizer, CompletionResponseShape) {
  OpenAiRequest req;
  req.sampling.logprobs = 1;
  std::vector<int32_t> ids = tokenizer_->Encode("Hello world", false);
  ASSERT_GE(ids.size(), 2u);
  const std::string t0 = tokenizer_->TokenBytes(ids[0]), t1 = tokenizer_->TokenBytes(ids[1]);
  ChoiceResult c;
  c.text = t0 + t1;
  c.finish_reason = "length";
  c.tokens = {{ids[0], -0.5f, {{ids[1], -0.25f}}}, {ids[1], -1.0f, {{ids[1], -1.0f}}}};
  ResponseHeader h{"cmpl-1", 123, "m"};
  Json j = CompletionResponseJson(req, h, {c}, UsageInfo{4, 2, 1}, *tokenizer_);
  EXPECT_EQ(j["id"], "cmpl-1");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 123);
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["text"], t0 + t1);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json::array({t0, t1}));
  EXPECT_EQ(lp["token_logprobs"], Json::array({-0.5, -1.0}));
  EXPECT_EQ(lp["text_offset"], Json::array({0, static_cast<int64_t>(t0.size())}));
  // The sampled token joins its top-N dict (unless it is already there).
  EXPECT_EQ(lp["top_logprobs"][0].size(), ids[0] == ids[1] ? 1u : 2u);
  EXPECT_EQ(lp["top_logprobs"][1].size(), 1u);
  EXPECT_EQ(
      DumpJson(j["usage"]),
      R"({"prompt_tokens":4,"completion_tokens":2,"total_tokens":6,"prompt_tokens_details":{"cached_tokens":1}})");
}

TEST_F(ProtocolWithTokenizer, ChatResponseAndChunkShapes) {
  OpenAiRequest req;
  req.kind = ApiKind::kChat;
  req.sampling.logprobs = 1;
  req.include_usage = true;
  int32_t id = tokenizer_->Encode("H", false)[0];
  ASSERT_EQ(tokenizer_->TokenBytes(id), "H");
  ChoiceResult c{"H", {{id, -0.5f, {{id, -0.5f}}}}, "stop"};
  ResponseHeader h{"chatcmpl-1", 1, "m"};
  Json j = ChatResponseJson(req, h, {c}, UsageInfo{3, 1, 0}, *tokenizer_);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(DumpJson(j["choices"][0]["message"]), R"({"role":"assistant","content":"H"})");
  EXPECT_EQ(
      DumpJson(j["choices"][0]["logprobs"]),
      R"({"content":[{"token":"H","logprob":-0.5,"bytes":[72],"top_logprobs":[{"token":"H","logprob":-0.5,"bytes":[72]}]}]})");

  Json chunk = ChatChunkJson(req, h, 1, Json{{"content", "x"}}, nullptr, "");
  EXPECT_EQ(
      DumpJson(chunk),
      R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":1,"delta":{"content":"x"},"logprobs":null,"finish_reason":null}],"usage":null})");
  Json usage = UsageChunkJson(req, h, UsageInfo{3, 1, 0});
  EXPECT_EQ(usage["choices"], Json::array());
  EXPECT_EQ(usage["usage"]["total_tokens"], 4);
  EXPECT_EQ(SseEvent(Json{{"a", 1}}), "data: {\"a\":1}\n\n");

  req.kind = ApiKind::kCompletion;
  req.include_usage = false;
  Json cc = CompletionChunkJson(req, h, 0, "t", nullptr, "stop");
  EXPECT_EQ(
      DumpJson(cc),
      R"({"id":"chatcmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"t","logprobs":null,"finish_reason":"stop"}]})");
}

}  // namespace
}  // namespace xrt::server
