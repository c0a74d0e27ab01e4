// RequestProcessor with images: the expanded prompt ids equal HF's
// LlavaProcessor input_ids for every case of the three tiny LLaVA fixtures
// (tests/fixtures/llava, made by tests/gen_llava_fixtures.py), each image's
// pixels equal HF's pixel_values, chat messages with image parts render as
// HF's apply_chat_template, and every image error names the image.
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/engine/artifact_params.h"
#include "runtime/engine/request_processor.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_import.h"

namespace xrt {
namespace {

using ::testing::HasSubstr;

const std::string kLlavaDir = std::string(XCC_SOURCE_DIR) + "/tests/fixtures/llava/";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

nlohmann::ordered_json ReadJson(const std::string& path) {
  return nlohmann::ordered_json::parse(ReadFile(path), nullptr, /*allow_exceptions=*/false);
}

std::vector<float> ReadF32(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

RequestImage Image(const std::string& file) {
  return RequestImage{file, ReadFile(kLlavaDir + "images/" + file)};
}

// One fixture model's request path: its tokenizer, chat template and vision
// params as the compiler records them (from reference.json's loader facts and
// the model's image processor file).
struct LlavaModel {
  std::string name;
  nlohmann::ordered_json reference;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  VisionParams vision;

  static std::unique_ptr<LlavaModel> Load(const std::string& name) {
    auto m = std::make_unique<LlavaModel>();
    m->name = name;
    const std::string dir = kLlavaDir + name + "/";
    m->reference = ReadJson(dir + "reference.json");
    EXPECT_TRUE(m->reference.is_object()) << dir;
    if (!m->reference.is_object()) return nullptr;
    Expected<TokenizerSpec> spec =
        LoadTokenizerJson(dir + "tokenizer.json", dir + "tokenizer_config.json");
    Expected<Tokenizer> tok = spec.ok() ? Tokenizer::Create(std::move(*spec)) : spec.status();
    EXPECT_TRUE(tok.ok()) << tok.status().ToString();
    if (!tok.ok()) return nullptr;
    m->tokenizer.emplace(std::move(*tok));

    const nlohmann::ordered_json& facts = m->reference["loader_facts"];
    const std::string template_file = facts["chat_template_file"];
    std::string source;
    if (template_file == "chat_template.jinja")
      source = ReadFile(dir + template_file);
    else
      source = ReadJson(dir + template_file)["chat_template"];
    Expected<ChatTemplate> tmpl = ChatTemplate::Parse(source);
    EXPECT_TRUE(tmpl.ok()) << tmpl.status().ToString();
    if (!tmpl.ok()) return nullptr;
    m->chat_template.emplace(std::move(*tmpl));

    VisionParams& v = m->vision;
    v.image_token = facts["image_token"];
    v.image_token_id = facts["image_token_id"];
    v.tokens_per_image = facts["tokens_per_image"];
    v.num_channels = 3;
    v.image_size = facts["image_size"];
    v.max_images_per_prompt = 4;
    const std::string processor_file = facts["image_processor_file"];
    Expected<ImagePreprocessParams> pre = ParseImageProcessorConfig(
        nlohmann::json::parse(ReadFile(dir + processor_file)), processor_file);
    EXPECT_TRUE(pre.ok()) << pre.status().ToString();
    if (!pre.ok()) return nullptr;
    v.preprocess = *pre;
    return m;
  }

  RequestProcessorParams Params() const {
    RequestProcessorParams p;
    p.tokenizer = &*tokenizer;
    p.chat_template = &*chat_template;
    p.limits.max_model_len = 512;
    p.limits.block_size = 16;
    p.vocab_size = 512;
    p.vision = &vision;
    return p;
  }

  // The request of a reference case: its prompt (or chat messages) and images.
  GenerationRequest Request(const nlohmann::ordered_json& c) const {
    GenerationRequest g;
    g.request_id = c["name"];
    if (c["prompt"].is_null()) {
      g.kind = PromptKind::kChat;
      g.messages = c["messages"];
    } else {
      g.prompt = c["prompt"];
    }
    for (const auto& file : c["images"]) g.images.push_back(Image(file));
    g.max_tokens = 8;
    return g;
  }
};

class LlavaFixtureTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    model_ = LlavaModel::Load(GetParam());
    ASSERT_NE(model_, nullptr);
    ASSERT_GE(model_->reference["cases"].size(), 4u);
  }
  std::unique_ptr<LlavaModel> model_;
};

// Every case: ids = HF's input_ids, a span per image exactly over HF's image
// token positions, pixels = HF's pixel_values.
TEST_P(LlavaFixtureTest, ExpandedPromptAndPixelsMatchHf) {
  RequestProcessor p(model_->Params());
  const VisionParams& v = model_->vision;
  for (const auto& c : model_->reference["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    Expected<EngineRequest> r = p.Process(model_->Request(c));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->prompt, c["input_ids"].get<std::vector<int32_t>>());
    ASSERT_EQ(r->images.size(), c["images"].size());
    std::vector<int64_t> positions;
    for (const ImageInput& image : r->images) {
      EXPECT_EQ(image.span.length, v.tokens_per_image);
      for (int64_t i = 0; i < image.span.length; ++i) positions.push_back(image.span.offset + i);
    }
    EXPECT_EQ(positions, c["image_token_positions"].get<std::vector<int64_t>>());
    EXPECT_EQ(static_cast<int64_t>(positions.size()), c["num_image_tokens"].get<int64_t>());
    if (r->images.empty()) continue;
    const std::vector<float> hf =
        ReadF32(kLlavaDir + model_->name + "/" + c["pixel_values"]["file"].get<std::string>());
    ASSERT_EQ(static_cast<int64_t>(hf.size()), v.pixel_floats() * r->images.size());
    for (size_t i = 0; i < r->images.size(); ++i) {
      ASSERT_NE(r->images[i].pixel_values, nullptr);
      const std::vector<float>& px = *r->images[i].pixel_values;
      ASSERT_EQ(static_cast<int64_t>(px.size()), v.pixel_floats());
      for (int64_t j = 0; j < v.pixel_floats(); ++j)
        ASSERT_NEAR(px[j], hf[i * v.pixel_floats() + j], 1e-6) << "image " << i << " float " << j;
    }
    EXPECT_TRUE(p.Validate(*r).ok()) << p.Validate(*r).ToString();
  }
}

// Expanding the image token's id equals tokenizing HF's expanded text (what
// the processor does), with this runtime's tokenizer too.
TEST_P(LlavaFixtureTest, ExpandingIdsEqualsTokenizingExpandedText) {
  RequestProcessor p(model_->Params());
  const VisionParams& v = model_->vision;
  std::string repeated;
  for (int64_t i = 0; i < v.tokens_per_image; ++i) repeated += v.image_token;
  for (const auto& c : model_->reference["cases"]) {
    if (c["prompt"].is_null()) continue;
    SCOPED_TRACE(c["name"].get<std::string>());
    std::string text = c["prompt"];
    for (size_t at = text.find(v.image_token); at != std::string::npos;
         at = text.find(v.image_token, at + repeated.size()))
      text.replace(at, v.image_token.size(), repeated);
    Expected<EngineRequest> r = p.Process(model_->Request(c));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->prompt, model_->tokenizer->Encode(text, /*add_special_tokens=*/true));
  }
}

// The chat case: messages with {"type": "image"} parts render as HF's
// apply_chat_template, the template placing the image token.
TEST_P(LlavaFixtureTest, ChatMessagesWithImagePartsRenderAsHf) {
  const Tokenizer& tok = *model_->tokenizer;
  int chats = 0;
  for (const auto& c : model_->reference["cases"]) {
    if (!c["prompt"].is_null()) continue;
    ++chats;
    const std::string bos = tok.bos_id() >= 0 ? tok.Decode({tok.bos_id()}) : "";
    const std::string eos = tok.eos_id() >= 0 ? tok.Decode({tok.eos_id()}) : "";
    Expected<std::string> text = ApplyChatTemplate(*model_->chat_template, c["messages"],
                                                   c["add_generation_prompt"], bos, eos);
    ASSERT_TRUE(text.ok()) << text.status().ToString();
    EXPECT_EQ(*text, c["text"].get<std::string>());
  }
  EXPECT_EQ(chats, 1);
}

INSTANTIATE_TEST_SUITE_P(Models, LlavaFixtureTest,
                         ::testing::Values("llava_clip_llama", "llava_clip_qwen2_full",
                                           "llava_siglip"));

class RequestImagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = LlavaModel::Load("llava_clip_llama");
    ASSERT_NE(model_, nullptr);
  }
  GenerationRequest Text(const std::string& prompt, std::vector<std::string> files) {
    GenerationRequest g;
    g.request_id = "r";
    g.prompt = prompt;
    g.max_tokens = 4;
    for (const std::string& f : files) g.images.push_back(Image(f));
    return g;
  }
  std::unique_ptr<LlavaModel> model_;
};

// `r` failed with InvalidArgument, a message containing `message`, and
// `where` naming `param`.
void ExpectInvalid(const Expected<EngineRequest>& r, const RequestError& where,
                   const std::string& message, const std::string& param) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr(message));
  EXPECT_EQ(where.param, param);
}

TEST_F(RequestImagesTest, ImageTokensMustMatchTheImages) {
  RequestProcessor p(model_->Params());
  RequestError where;
  auto more_tokens = p.Process(Text("<image> and <image>", {"chelsea_rgb.jpg"}), &where);
  ASSERT_FALSE(more_tokens.ok());
  EXPECT_EQ(more_tokens.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(more_tokens.status().message(),
              HasSubstr("the prompt has 2 image tokens ('<image>') but the request has 1 image"));
  EXPECT_EQ(where.param, "prompt");

  auto more_images = p.Process(Text("<image> only", {"chelsea_rgb.jpg", "camera_gray.png"}));
  ASSERT_FALSE(more_images.ok());
  EXPECT_THAT(more_images.status().message(), HasSubstr("1 image token ('<image>')"));
  EXPECT_THAT(more_images.status().message(), HasSubstr("2 images"));

  // As in HF: image tokens without images fail, they are not plain text.
  auto no_images = p.Process(Text("What is <image>?", {}), &where);
  ASSERT_FALSE(no_images.ok());
  EXPECT_THAT(no_images.status().message(), HasSubstr("but the request has 0 images"));

  GenerationRequest chat;
  chat.kind = PromptKind::kChat;
  chat.messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])");
  chat.images.push_back(Image("chelsea_rgb.jpg"));
  auto chat_r = p.Process(chat, &where);
  ASSERT_FALSE(chat_r.ok());
  EXPECT_THAT(chat_r.status().message(), HasSubstr("messages: the prompt has 0 image tokens"));
  EXPECT_EQ(where.param, "messages");
}

TEST_F(RequestImagesTest, TooManyImagesNamesTheFirstOverTheLimit) {
  VisionParams v = model_->vision;
  v.max_images_per_prompt = 2;
  RequestProcessorParams params = model_->Params();
  params.vision = &v;
  RequestProcessor p(params);
  GenerationRequest g = Text("<image><image><image>", {"a.png", "b.png", "c.png"});
  for (size_t i = 0; i < 3; ++i) g.images[i] = Image("chelsea_rgb.jpg");
  g.images[2].name = "messages[0].content[2]";
  RequestError where;
  auto r = p.Process(g, &where);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(),
              HasSubstr("messages[0].content[2]: at most 2 images per request; this one has 3"));
  EXPECT_EQ(where.param, "messages[0].content[2]");
  g.images.pop_back();
  g.prompt = "<image><image>";
  EXPECT_TRUE(p.Process(g).ok());
}

TEST_F(RequestImagesTest, AnUndecodableImageIsNamed) {
  RequestProcessor p(model_->Params());
  GenerationRequest g = Text("<image> <image>", {"chelsea_rgb.jpg", "camera_gray.png"});
  g.images[1].name = "--image broken.png";
  g.images[1].bytes = "not an image at all";
  RequestError where;
  ExpectInvalid(p.Process(g, &where), where, "--image broken.png: cannot decode the image",
                "--image broken.png");

  // A truncated file is reported too (DataLoss from the decoder becomes a 400).
  g.images[1] = Image("camera_gray.png");
  g.images[1].bytes.resize(g.images[1].bytes.size() / 2);
  auto truncated = p.Process(g, &where);
  ASSERT_FALSE(truncated.ok());
  EXPECT_EQ(truncated.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(where.param, "camera_gray.png");
}

TEST_F(RequestImagesTest, PixelLimitIsAParam) {
  RequestProcessorParams params = model_->Params();
  params.image_decode_limits.max_pixels = 64 * 48 - 1;  // chelsea_rgb.jpg is 64 x 48
  RequestProcessor p(params);
  RequestError where;
  ExpectInvalid(p.Process(Text("<image>", {"chelsea_rgb.jpg"}), &where), where,
                "chelsea_rgb.jpg: cannot decode the image", "chelsea_rgb.jpg");
  params.image_decode_limits.max_pixels = 64 * 48;
  EXPECT_TRUE(RequestProcessor(params).Process(Text("<image>", {"chelsea_rgb.jpg"})).ok());
}

TEST_F(RequestImagesTest, ATextModelRefusesImages) {
  RequestProcessorParams params = model_->Params();
  params.vision = nullptr;
  RequestProcessor p(params);
  RequestError where;
  ExpectInvalid(p.Process(Text("<image>", {"chelsea_rgb.jpg"}), &where), where,
                "chelsea_rgb.jpg: the model does not accept images", "chelsea_rgb.jpg");
  // Without images a text model takes "<image>" as text (no image token to it).
  auto text = p.Process(Text("<image>", {}));
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_TRUE(text->images.empty());
}

TEST_F(RequestImagesTest, TokenIdPromptsCannotCarryImages) {
  RequestProcessor p(model_->Params());
  GenerationRequest g = Text("", {"chelsea_rgb.jpg"});
  g.kind = PromptKind::kTokens;
  g.prompt_token_ids = {1, 510, 30};
  RequestError where;
  auto r = p.Process(g, &where);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("a prompt of token ids cannot carry images"));
  EXPECT_EQ(where.param, "chelsea_rgb.jpg");
  // Without images the ids are taken as given (an image token id embeds as text).
  g.images.clear();
  auto ids = p.Process(g);
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  EXPECT_EQ(ids->prompt, (std::vector<int32_t>{1, 510, 30}));
  EXPECT_TRUE(ids->images.empty());
}

TEST_F(RequestImagesTest, HashesFollowTheContent) {
  RequestProcessor p(model_->Params());
  auto r = p.Process(
      Text("<image><image><image>", {"chelsea_rgb.jpg", "camera_gray.png", "chelsea_rgb.jpg"}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->images.size(), 3u);
  EXPECT_EQ(r->images[0].span.content_hash, r->images[2].span.content_hash);
  EXPECT_NE(r->images[0].span.content_hash, r->images[1].span.content_hash);
  // The same image shares its pixels.
  EXPECT_EQ(r->images[0].pixel_values, r->images[2].pixel_values);
  EXPECT_NE(r->images[0].pixel_values, r->images[1].pixel_values);

  // The same image in another request hashes the same; the hash is the first
  // 128 bits of HashImage's SHA-256.
  auto again = p.Process(Text("Look: <image>", {"chelsea_rgb.jpg"}));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->images[0].span.content_hash, r->images[0].span.content_hash);
  const std::string bytes = Image("chelsea_rgb.jpg").bytes;
  auto decoded = DecodeImage(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  ASSERT_TRUE(decoded.ok());
  const ImageHash sha = HashImage(*decoded, model_->vision.preprocess);
  uint64_t lo = 0, hi = 0;
  std::memcpy(&lo, sha.bytes.data(), 8);
  std::memcpy(&hi, sha.bytes.data() + 8, 8);
  EXPECT_EQ(r->images[0].span.content_hash, (BlockHash{lo, hi}));

  // Other preprocessing parameters give another hash for the same pixels.
  VisionParams v = model_->vision;
  v.preprocess.image_mean[0] += 0.25f;
  RequestProcessorParams params = model_->Params();
  params.vision = &v;
  auto other = RequestProcessor(params).Process(Text("<image>", {"chelsea_rgb.jpg"}));
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->images[0].span.content_hash, r->images[0].span.content_hash);
}

TEST_F(RequestImagesTest, ContextLengthCountsTheExpandedPrompt) {
  RequestProcessorParams params = model_->Params();
  // "<image>" tokenizes to 2 ids (bos + image), 17 once expanded.
  params.limits.max_model_len = 20;
  RequestProcessor p(params);
  GenerationRequest g = Text("<image>", {"chelsea_rgb.jpg"});
  g.max_tokens = 3;
  auto fits = p.Process(g);
  ASSERT_TRUE(fits.ok()) << fits.status().ToString();
  EXPECT_EQ(fits->prompt.size(), 17u);
  g.max_tokens = 4;
  RequestError where;
  auto over = p.Process(g, &where);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(), HasSubstr("you requested 21 tokens (17 in the prompt"));
  EXPECT_EQ(where.code, "context_length_exceeded");
}

TEST_F(RequestImagesTest, ValidateChecksTheSpans) {
  RequestProcessor p(model_->Params());
  auto made = p.Process(Text("<image> x <image>", {"chelsea_rgb.jpg", "camera_gray.png"}));
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  ASSERT_TRUE(p.Validate(*made).ok());

  EngineRequest overlap = *made;
  overlap.images[1].span.offset = overlap.images[0].span.offset + 1;
  EXPECT_THAT(p.Validate(overlap).message(), HasSubstr("images[1]: placeholder tokens"));

  EngineRequest past_end = *made;
  past_end.images[1].span.offset = static_cast<int64_t>(past_end.prompt.size()) - 2;
  EXPECT_THAT(p.Validate(past_end).message(), HasSubstr("end past the prompt"));

  EngineRequest not_image_tokens = *made;
  not_image_tokens.prompt[not_image_tokens.images[0].span.offset + 3] = 30;
  EXPECT_THAT(p.Validate(not_image_tokens).message(),
              HasSubstr("images[0]: placeholder tokens [1, 17) must be 16 image token ids (510)"));

  EngineRequest wrong_pixels = *made;
  wrong_pixels.images[1].pixel_values = std::make_shared<std::vector<float>>(10);
  EXPECT_THAT(p.Validate(wrong_pixels).message(), HasSubstr("images[1]: 10 pixel values"));

  // Without vision params only the spans' structure is checked (the trace
  // replay's requests carry no pixels).
  RequestProcessorParams text_params = model_->Params();
  text_params.vision = nullptr;
  RequestProcessor text(text_params);
  EngineRequest no_pixels = *made;
  no_pixels.images[0].pixel_values = nullptr;
  EXPECT_TRUE(text.Validate(no_pixels).ok());
  EXPECT_FALSE(text.Validate(overlap).ok());
}

}  // namespace
}  // namespace xrt
