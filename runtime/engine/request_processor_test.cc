// RequestProcessor: prompts are tokenized as HF does, the model's sampling
// defaults fill what the request leaves unset, and every limit is checked
// with the field at fault.
#include "runtime/engine/request_processor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/chat/chat_template.h"
#include "runtime/engine/engine_test_util.h"

namespace xrt {
namespace {

using ::testing::HasSubstr;

constexpr const char* kTemplate =
    "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}";

class RequestProcessorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = testing::FixtureTokenizer("llama3");
    ASSERT_NE(tokenizer_, nullptr);
    auto tmpl = ChatTemplate::Parse(kTemplate);
    ASSERT_TRUE(tmpl.ok()) << tmpl.status().ToString();
    template_ = std::make_unique<ChatTemplate>(std::move(tmpl).value());
  }

  RequestProcessorParams Params() {
    RequestProcessorParams p;
    p.tokenizer = tokenizer_;
    p.chat_template = template_.get();
    p.limits.max_model_len = 64;
    p.limits.block_size = 4;
    p.num_kv_blocks = 16;  // exactly max_model_len
    p.vocab_size = 1 << 20;
    return p;
  }
  GenerationRequest Text(const std::string& prompt, int64_t max_tokens = -1) {
    GenerationRequest g;
    g.request_id = "r";
    g.prompt = prompt;
    g.max_tokens = max_tokens;
    return g;
  }
  GenerationRequest Chat(const std::string& content, int64_t max_tokens = -1) {
    GenerationRequest g;
    g.request_id = "r";
    g.kind = PromptKind::kChat;
    g.messages.push_back({{"role", "user"}, {"content", content}});
    g.max_tokens = max_tokens;
    return g;
  }

  const Tokenizer* tokenizer_ = nullptr;
  std::unique_ptr<ChatTemplate> template_;
};

TEST_F(RequestProcessorTest, TokenizesTextChatAndTokens) {
  RequestProcessor p(Params());
  auto text = p.Process(Text("Hello world"));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(text->prompt, tokenizer_->Encode("Hello world", true));
  EXPECT_EQ(text->max_tokens, 16);
  EXPECT_EQ(text->request_id, "r");

  auto chat = p.Process(Chat("Hi there"));
  ASSERT_TRUE(chat.ok()) << chat.status().ToString();
  // The template gets the tokenizer's bos text and writes the special tokens.
  EXPECT_EQ(chat->prompt, tokenizer_->Encode("<|begin_of_text|><user>Hi there<assistant>", false));
  EXPECT_EQ(static_cast<int64_t>(chat->prompt.size()) + chat->max_tokens, 64);  // fills the context

  GenerationRequest ids;
  ids.kind = PromptKind::kTokens;
  ids.prompt_token_ids = {5, 6, 7};
  ids.max_tokens = 3;
  auto tokens = p.Process(ids);
  ASSERT_TRUE(tokens.ok()) << tokens.status().ToString();
  EXPECT_EQ(tokens->prompt, (std::vector<int32_t>{5, 6, 7}));
}

// The adapter a client selected goes into the engine request as is (the same
// registry entry, which keeps it alive); none selects the base model.
TEST_F(RequestProcessorTest, PassesTheLoraAdapterThrough) {
  RequestProcessor p(Params());
  auto adapter = std::make_shared<LoraAdapter>();
  adapter->name = "sql";
  GenerationRequest g = Text("Hello world");
  g.lora = adapter;
  auto made = p.Process(g);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_EQ(made->lora, adapter);
  auto base = p.Process(Text("Hello world"));
  ASSERT_TRUE(base.ok()) << base.status().ToString();
  EXPECT_EQ(base->lora, nullptr);
}

TEST_F(RequestProcessorTest, ModelDefaultsFillOnlyWhatTheRequestLeavesUnset) {
  RequestProcessorParams params = Params();
  params.sampling_defaults.temperature = 0.7f;
  params.sampling_defaults.top_p = 0.8f;
  params.sampling_defaults.top_k = 20;
  params.sampling_defaults.repetition_penalty = 1.05f;
  RequestProcessor p(params);

  auto unset = p.Process(Text("Hello", 4));
  ASSERT_TRUE(unset.ok()) << unset.status().ToString();
  EXPECT_FLOAT_EQ(unset->sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(unset->sampling.top_p, 0.8f);
  EXPECT_EQ(unset->sampling.top_k, 20);
  EXPECT_FLOAT_EQ(unset->sampling.repetition_penalty, 1.05f);

  GenerationRequest g = Text("Hello", 4);
  g.sampling.temperature = 0;
  g.sampling.repetition_penalty = 1.0f;
  g.sampling_set.temperature = true;
  g.sampling_set.repetition_penalty = true;
  auto set = p.Process(g);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_FLOAT_EQ(set->sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(set->sampling.repetition_penalty, 1.0f);
  EXPECT_FLOAT_EQ(set->sampling.top_p, 0.8f);  // still the model's

  // Without model defaults the request's values (here SamplingParams') stay.
  auto plain = RequestProcessor(Params()).Process(Text("Hello", 4));
  ASSERT_TRUE(plain.ok());
  EXPECT_FLOAT_EQ(plain->sampling.repetition_penalty, 1.0f);
  EXPECT_FLOAT_EQ(plain->sampling.temperature, 1.0f);
}

TEST_F(RequestProcessorTest, ContextLengthIsOpenAisMessageWithTheFieldAtFault) {
  RequestProcessor p(Params());
  const int64_t n = static_cast<int64_t>(tokenizer_->Encode("Hello world", true).size());
  RequestError e;
  auto r = p.Process(Text("Hello world", 62), &e);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      r.status().message(),
      fmt::format("This model's maximum context length is 64 tokens. However, you requested {} "
                  "tokens ({} in the prompt, 62 in the completion). Please reduce the length of "
                  "the prompt or the completion.",
                  n + 62, n));
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.code, "context_length_exceeded");

  e = {};
  auto chat = p.Process(Chat("Hi", 100), &e);
  ASSERT_FALSE(chat.ok());
  EXPECT_THAT(chat.status().message(), HasSubstr("in the messages"));
  EXPECT_EQ(e.param, "max_completion_tokens");

  // A chat prompt that fills the context leaves no room for a default max_tokens.
  e = {};
  std::string long_text;
  for (int i = 0; i < 80; ++i) long_text += " word";
  auto full = p.Process(Chat(long_text), &e);
  ASSERT_FALSE(full.ok());
  EXPECT_EQ(e.param, "messages");
  EXPECT_EQ(e.code, "context_length_exceeded");
}

TEST_F(RequestProcessorTest, RejectsWithTheFieldAtFault) {
  RequestProcessorParams params = Params();
  params.num_kv_blocks = 12;
  RequestProcessor p(params);
  struct Case {
    GenerationRequest request;
    const char* param;
    const char* message;
  };
  GenerationRequest bad_top_p = Text("Hello", 4);
  bad_top_p.sampling.top_p = 1.5f;
  bad_top_p.sampling_set.top_p = true;
  GenerationRequest bad_id;
  bad_id.kind = PromptKind::kTokens;
  bad_id.prompt_token_ids = {1, -3};
  bad_id.max_tokens = 2;
  GenerationRequest empty;
  empty.kind = PromptKind::kTokens;
  empty.max_tokens = 2;
  const Case cases[] = {
      {Text("Hello", 0), "max_tokens", "max_tokens must be >= 1, got 0"},
      {empty, "prompt", "the prompt is empty"},
      {bad_top_p, "top_p", "top_p must be in (0, 1]"},
      {bad_id, "prompt", "token id -3 outside the vocabulary"},
      // 12 blocks of 4 tokens hold 48 positions.
      {Text("Hello", 50), "max_tokens", "KV cache blocks; the server has 12"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    RequestError e;
    auto r = p.Process(c.request, &e);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(c.message));
    EXPECT_EQ(e.param, c.param);
  }
}

TEST_F(RequestProcessorTest, ChatNeedsATemplate) {
  RequestProcessorParams params = Params();
  params.chat_template = nullptr;
  RequestError e;
  auto r = RequestProcessor(params).Process(Chat("Hi"), &e);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("no chat template"));
  EXPECT_EQ(e.param, "messages");
}

TEST_F(RequestProcessorTest, ValidateChecksAMadeRequest) {
  RequestProcessor p(Params());
  EngineRequest r;
  r.prompt = {1, 2, 3};
  r.max_tokens = 4;
  EXPECT_TRUE(p.Validate(r).ok());
  r.max_tokens = 62;
  EXPECT_THAT(p.Validate(r).message(), HasSubstr("maximum context length is 64 tokens"));
}

}  // namespace
}  // namespace xrt
