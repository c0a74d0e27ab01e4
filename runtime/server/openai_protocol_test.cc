#include "runtime/server/openai_protocol.h"

#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "runtime/base/json_parse.h"
#include "runtime/chat/chat_template.h"
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

// Bodies nested deeper than kMaxJsonDepth are refused while parsing (copying or
// printing such a value would overflow the stack), and up to it they parse.
TEST(OpenAiProtocol, RejectsDeeplyNestedBodies) {
  // The body object, then "tools", a tool, its function and its parameters, then lists:
  // `levels` + 1 levels in all.
  auto nested = [](int levels) {
    return R"({"model":"m","messages":[{"role":"user","content":"x"}],)"
           R"("tools":[{"function":{"name":"f","parameters":{"x":)" +
           std::string(levels - 4, '[') + std::string(levels - 4, ']') + "}}}]}";
  };
  for (int levels : {kMaxJsonDepth, 100000}) {
    auto r = ParseChatRequest(nested(levels));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(),
              "request body nests more than " + std::to_string(kMaxJsonDepth) + " levels deep");
    EXPECT_EQ(ApiErrorFromStatus(r.status(), "").http_status, 400);
  }
  // One level less (the body object and kMaxJsonDepth - 1 lists) parses.
  auto r = ParseChatRequest(nested(kMaxJsonDepth - 1));
  EXPECT_TRUE(r.ok()) << r.status().message();
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
      {R"({"model":"m","messages":[{"role":"user","content":[{"type":"audio"}]}]})",
       "messages[0].content[0]", "unsupported content part type"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
       "top_logprobs", "requires 'logprobs'"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":30})",
       "top_logprobs", "[0, 20]"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"logprobs":1})", "logprobs",
       "boolean"},
      // tools: the shape vLLM's ChatCompletionToolsParam accepts
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":{}})", "tools",
       "'tools' must be a list of tools, got object"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[[]]})", "tools[0]",
       "'tools[0]' must be an object, got array"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"code"}]})",
       "tools[0].type", "'tools[0].type' must be \"function\""},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}]})",
       "tools[0].function", "'tools[0].function' is required"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"function":"f"}]})",
       "tools[0].function", "'tools[0].function' must be an object, got string"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[
          {"function":{"name":"f"}},{"function":{"name":""}}]})",
       "tools[1].function.name", "'tools[1].function.name' must be a non-empty string"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[
          {"function":{"name":"f","description":1}}]})",
       "tools[0].function.description", "must be a string, got integer"},
      {R"({"model":"m","messages":[{"role":"user","content":"x"}],"tools":[
          {"function":{"name":"f","parameters":[]}}]})",
       "tools[0].function.parameters", "must be an object, got array"},
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

TEST(OpenAiProtocol, ParsesImageParts) {
  auto r = ParseChatRequest(R"({"model":"m","messages":[
      {"role":"system","content":"be brief"},
      {"role":"user","content":[{"type":"text","text":"Describe"},
        {"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","detail":"high"}},
        "and",
        {"type":"image_url","image_url":"http://h/b.png"}]},
      {"role":"assistant","content":null,"tool_calls":[]},
      {"role":"tool","content":[{"type":"text","text":"4"},{"type":"text","text":"2"}],"tool_call_id":"c"},
      {"role":"user","content":[{"image_url":{"url":"file:///x/c.png","detail":null}}]}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->images.size(), 3u);
  EXPECT_EQ(r->images[0].url, "data:image/png;base64,AAAA");
  EXPECT_EQ(r->images[0].detail, "high");
  EXPECT_EQ(r->images[0].Field(), "messages[1].content[1]");
  EXPECT_EQ(r->images[1].url, "http://h/b.png");  // the string shorthand
  EXPECT_EQ(r->images[1].detail, "auto");
  EXPECT_EQ(r->images[1].Field(), "messages[1].content[3]");
  EXPECT_EQ(r->images[2].url, "file:///x/c.png");  // no "type"
  EXPECT_EQ(r->images[2].Field(), "messages[4].content[0]");
  // With images the template gets every content as parts, in the order sent.
  const Json want = Json::parse(R"([
      {"role":"system","content":[{"type":"text","text":"be brief"}]},
      {"role":"user","content":[{"type":"text","text":"Describe"},{"type":"image"},
                                {"type":"text","text":"and"},{"type":"image"}]},
      {"role":"assistant","content":[],"tool_calls":[]},
      {"role":"tool","content":"4\n2","tool_call_id":"c"},
      {"role":"user","content":[{"type":"image"}]}])");
  EXPECT_EQ(r->messages, want);
  EXPECT_EQ(r->message_parts, want);
}

TEST(OpenAiProtocol, TextOnlyMessagesStayStrings) {
  auto r = ParseChatRequest(R"({"model":"m","messages":[
      {"role":"system","content":"s"},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":""},"b"]}]})");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->images.empty());
  EXPECT_EQ(r->messages,
            Json::parse(R"([{"role":"system","content":"s"},{"role":"user","content":"a\n\nb"}])"));
  EXPECT_EQ(r->message_parts,
            Json::parse(R"([{"role":"system","content":[{"type":"text","text":"s"}]},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":""},
                                {"type":"text","text":"b"}]}])"));
}

std::string ReadFixture(const std::string& name) {
  std::ifstream f(std::string(XCC_SOURCE_DIR) + "/tests/fixtures/chat_templates/" + name);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The messages of image requests are what HF's llava-hf template expects: for
// the fixture conversations (rendered by Python jinja2), the parsed messages
// equal the fixture's and render to its text.
TEST(OpenAiProtocol, ImageMessagesRenderWithTheLlavaTemplate) {
  auto tmpl = ChatTemplate::Parse(ReadFixture("llava_1_5.jinja"));
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
  const Json fixtures = Json::parse(ReadFixture("expected.json"));
  const std::string url =
      R"({"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}})";
  const std::pair<const char*, std::string> cases[] = {
      {"text_then_two_images/agp=1",
       R"([{"role":"user","content":[{"type":"text","text":"Compare"},)" + url + "," + url + "]}]"},
      {"multi_turn/agp=1",
       R"([{"role":"system","content":"Be helpful."},
           {"role":"user","content":[)" +
           url + R"(,{"type":"text","text":"Describe it."}]},
           {"role":"assistant","content":"A cat on a mat."},
           {"role":"user","content":"What color is the cat?"}])"},
  };
  for (const auto& [name, messages] : cases) {
    SCOPED_TRACE(name);
    const Json* fixture = nullptr;
    for (const Json& c : fixtures["cases"])
      if (c["template"] == "llava_1_5.jinja" && c["name"] == name) fixture = &c;
    ASSERT_NE(fixture, nullptr);
    auto r = ParseChatRequest(R"({"model":"m","messages":)" + messages + "}");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->messages, (*fixture)["context"]["messages"]);
    auto text = ApplyChatTemplate(*tmpl, r->messages, true, "<s>", "</s>");
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(*text, (*fixture)["expected"].get<std::string>());
  }
}

TEST(OpenAiProtocol, RejectsBadContentParts) {
  const std::pair<const char*, const char*> cases[] = {
      {"5", "messages[1].content[2]: a content part must be an object, got integer"},
      {R"({"text":"x"})", "messages[1].content[2]: the content part has no 'type'"},
      {R"({"type":1})", "messages[1].content[2]: 'type' must be a string, got integer"},
      {R"({"type":"input_audio","input_audio":{}})",
       "messages[1].content[2]: unsupported content part type 'input_audio' (supported: text, "
       "image_url)"},
      {R"({"type":"text"})", "messages[1].content[2]: a text part needs 'text'"},
      {R"({"type":"text","text":["a"]})",
       "messages[1].content[2]: 'text' must be a string, got array"},
      {R"({"type":"image_url"})", "messages[1].content[2]: an image_url part needs 'image_url'"},
      {R"({"type":"image_url","image_url":{}})",
       "messages[1].content[2]: 'image_url' has no 'url'"},
      {R"({"type":"image_url","image_url":{"url":7}})",
       "messages[1].content[2]: 'image_url.url' must be a string, got integer"},
      {R"({"type":"image_url","image_url":{"url":""}})",
       "messages[1].content[2]: the image URL is empty"},
      {R"({"type":"image_url","image_url":7})",
       "messages[1].content[2]: 'image_url' must be an object with a 'url' (or the URL as a "
       "string), got integer"},
      {R"({"type":"image_url","image_url":{"url":"http://h/a.png","detail":"ultra"}})",
       "messages[1].content[2]: 'image_url.detail' must be one of auto, low, high; got 'ultra'"},
      {R"({"type":"image_url","image_url":{"url":"http://h/a.png","detail":1}})",
       "messages[1].content[2]: 'image_url.detail' must be a string, got integer"},
  };
  for (const auto& [part, message] : cases) {
    const std::string body =
        std::string(R"({"model":"m","messages":[{"role":"system","content":"s"},
        {"role":"user","content":[{"type":"text","text":"a"},"b",)") +
        part + "]}]}";
    std::string param;
    auto r = ParseChatRequest(body, &param);
    ASSERT_FALSE(r.ok()) << part;
    EXPECT_EQ(r.status().message(), message);
    EXPECT_EQ(param, "messages[1].content[2]") << part;
    EXPECT_EQ(ApiErrorFromStatus(r.status(), param).http_status, 400);
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

// vLLM's runtime LoRA API bodies: both fields required and non-empty, with
// vLLM's message; wrong types are named; other fields are ignored.
TEST(OpenAiProtocol, LoadLoraAdapterRequest) {
  std::string param;
  auto ok = ParseLoadLoraAdapterRequest(
      R"({"lora_name":"sql","lora_path":"/adapters/sql","load_inplace":false})", &param);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->lora_name, "sql");
  EXPECT_EQ(ok->lora_path, "/adapters/sql");
  EXPECT_EQ(param, "");

  const std::pair<const char*, const char*> missing[] = {
      {R"({"lora_path":"/a"})", "lora_name"},
      {R"({"lora_name":"","lora_path":"/a"})", "lora_name"},
      {R"({"lora_name":"x"})", "lora_path"},
      {R"({"lora_name":"x","lora_path":null})", "lora_path"},
  };
  for (const auto& [body, field] : missing) {
    auto r = ParseLoadLoraAdapterRequest(body, &param);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_EQ(r.status().message(), "Both 'lora_name' and 'lora_path' must be provided.");
    EXPECT_EQ(param, field) << body;
    EXPECT_EQ(ApiErrorFromStatus(r.status(), param).http_status, 400);
  }
  auto typed = ParseLoadLoraAdapterRequest(R"({"lora_name":"x","lora_path":3})", &param);
  ASSERT_FALSE(typed.ok());
  EXPECT_EQ(typed.status().message(), "'lora_path' must be a string, got integer");
  EXPECT_EQ(param, "lora_path");
  EXPECT_EQ(ParseLoadLoraAdapterRequest("[1]").status().message(),
            "request body must be a JSON object, got array");
}

TEST(OpenAiProtocol, UnloadLoraAdapterRequest) {
  std::string param;
  auto ok = ParseUnloadLoraAdapterRequest(R"({"lora_name":"sql","lora_int_id":3})", &param);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->lora_name, "sql");
  auto missing = ParseUnloadLoraAdapterRequest(R"({"lora_int_id":3})", &param);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "'lora_name' must be provided.");
  EXPECT_EQ(param, "lora_name");
  EXPECT_EQ(ParseUnloadLoraAdapterRequest("{").status().message(),
            "request body is not valid JSON");
}

// /v1/models: the base model (parent null, its max_model_len), then adapters
// (root: their directory, parent: the base model, max_model_len null).
TEST(OpenAiProtocol, ModelListJson) {
  Json j = ModelListJson({{"tiny", "tiny", "", 7, 512}, {"sql", "/adapters/sql", "tiny", 7, -1}});
  EXPECT_EQ(
      DumpJson(j),
      R"({"object":"list","data":[)"
      R"({"id":"tiny","object":"model","created":7,"owned_by":"xrt","root":"tiny","parent":null,"max_model_len":512},)"
      R"({"id":"sql","object":"model","created":7,"owned_by":"xrt","root":"/adapters/sql","parent":"tiny","max_model_len":null}]})");
  EXPECT_EQ(DumpJson(ModelListJson({})), R"({"object":"list","data":[]})");
}

}  // namespace
}  // namespace xrt::server
