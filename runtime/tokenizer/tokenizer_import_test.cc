// LoadTokenizerJson / TokenizerSpecFromGguf error handling. (The happy paths
// are covered by the fixtures in tokenizer_test.cc.)
#include "runtime/tokenizer/tokenizer_import.h"

#include <cstdio>
#include <fstream>
#include <functional>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/tokenizer/tokenizer.h"

namespace xrt {
namespace {

using json = nlohmann::json;

class ImportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir();
    json_path_ = dir_ + "/xrt_tok_" + std::to_string(::getpid()) + "_tokenizer.json";
    config_path_ = dir_ + "/xrt_tok_" + std::to_string(::getpid()) + "_config.json";
  }
  void TearDown() override {
    std::remove(json_path_.c_str());
    std::remove(config_path_.c_str());
  }

  // A small valid byte-level BPE tokenizer.json.
  static json Valid() {
    json vocab = json::object();
    int id = 0;
    for (const char* t : {"a", "b", "ab", "Ġ", "<s>"}) vocab[t] = id++;
    return {
        {"version", "1.0"},
        {"added_tokens", {{{"id", 4}, {"content", "<s>"}, {"special", true}}}},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
        {"post_processor", {{"type", "ByteLevel"}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model",
         {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"a b"}}, {"ignore_merges", false}}},
    };
  }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  Expected<TokenizerSpec> Load(const json& j, const std::string& config = "") {
    Write(json_path_, j.dump());
    if (!config.empty()) Write(config_path_, config);
    return LoadTokenizerJson(json_path_, config.empty() ? "" : config_path_);
  }

  // Mutates Valid() and expects an error with `code` containing `needle`.
  void ExpectError(const std::function<void(json&)>& mutate, StatusCode code,
                   const std::string& needle, const std::string& config = "") {
    json j = Valid();
    mutate(j);
    auto spec = Load(j, config);
    ASSERT_FALSE(spec.ok()) << "expected: " << needle;
    EXPECT_EQ(spec.status().code(), code) << spec.status().ToString();
    EXPECT_NE(spec.status().message().find(needle), std::string::npos) << spec.status().message();
    const std::string& file = config.empty() ? json_path_ : config_path_;
    EXPECT_NE(spec.status().message().find(file), std::string::npos)
        << "message should name the file: " << spec.status().message();
  }

  std::string dir_, json_path_, config_path_;
};

TEST_F(ImportTest, ValidFileLoads) {
  auto spec = Load(Valid(), R"({"bos_token": {"content": "<s>"}, "add_bos_token": true})");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->vocab.size(), 5u);
  EXPECT_EQ(spec->merges.size(), 1u);
  EXPECT_EQ(spec->bos_id, 4);
  EXPECT_TRUE(spec->add_bos);
  auto tok = Tokenizer::Create(*spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(tok->Encode("ab<s>"), (std::vector<int32_t>{4, 2, 4}));
}

TEST_F(ImportTest, MergesAsPairs) {
  json j = Valid();
  j["model"]["merges"] = json::array({json::array({"a", "b"})});
  auto spec = Load(j);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->merges[0], (std::pair<std::string, std::string>{"a", "b"}));
}

TEST_F(ImportTest, MalformedFiles) {
  Write(json_path_, "{\"model\": ");
  auto spec = LoadTokenizerJson(json_path_, "");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(spec.status().message().find("not valid JSON"), std::string::npos);

  EXPECT_FALSE(LoadTokenizerJson(dir_ + "/does_not_exist.json", "").ok());

  ExpectError([](json& j) { j["model"]["type"] = "Unigram"; }, StatusCode::kUnimplemented,
              "field 'model.type': unsupported 'Unigram'");
  ExpectError([](json& j) { j["model"].erase("vocab"); }, StatusCode::kDataLoss,
              "field 'model.vocab': missing");
  ExpectError([](json& j) { j["model"]["vocab"]["c"] = 1; }, StatusCode::kDataLoss,
              "id 1 used by both");
  ExpectError([](json& j) { j["model"]["vocab"]["c"] = "x"; }, StatusCode::kDataLoss,
              "token 'c': id is not");
  ExpectError([](json& j) { j["model"]["merges"] = {"ab"}; }, StatusCode::kDataLoss,
              "field 'model.merges[0]': 'ab' is not two tokens");
  ExpectError([](json& j) { j["model"]["merges"] = {42}; }, StatusCode::kDataLoss,
              "field 'model.merges[0]'");
  ExpectError([](json& j) { j["model"]["byte_fallback"] = true; }, StatusCode::kUnimplemented,
              "model.byte_fallback");
  ExpectError([](json& j) { j["normalizer"] = {{"type", "NFKC"}}; }, StatusCode::kUnimplemented,
              "field 'normalizer.type': unsupported 'NFKC'");
  ExpectError(
      [](json& j) {
        j["normalizer"] = {{"type", "Sequence"},
                           {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
      },
      StatusCode::kUnimplemented,
      "field 'normalizer.normalizers[1].type': unsupported 'Lowercase'");
  // No pre-tokenizer or Metaspace is SentencePiece style, which a ByteLevel decoder is not.
  ExpectError([](json& j) { j["pre_tokenizer"] = nullptr; }, StatusCode::kUnimplemented,
              "field 'decoder.type': ByteLevel with a pre-tokenizer that is not ByteLevel");
  ExpectError([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, StatusCode::kDataLoss,
              "field 'pre_tokenizer.replacement': expected a string of one character");
  ExpectError(
      [](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}}; },
      StatusCode::kUnimplemented, "field 'decoder.type': ByteLevel with a pre-tokenizer");
  ExpectError(
      [](json& j) {
        j["pre_tokenizer"] = {
            {"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}},
              {{"type", "ByteLevel"}, {"use_regex", false}, {"add_prefix_space", false}}}}};
      },
      StatusCode::kUnimplemented,
      "field 'pre_tokenizer.pretokenizers[0].behavior': unsupported 'Removed'");
  ExpectError([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, StatusCode::kUnimplemented,
              "field 'decoder.type': unsupported 'WordPiece'");
  ExpectError([](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; },
              StatusCode::kUnimplemented, "unsupported 'RobertaProcessing'");
  ExpectError([](json& j) { j["added_tokens"][0].erase("id"); }, StatusCode::kDataLoss,
              "field 'added_tokens[0].id': missing");
  ExpectError([](json& j) {}, StatusCode::kNotFound, "field 'eos_token': token '</s>'",
              R"({"eos_token": "</s>"})");
  ExpectError([](json& j) {}, StatusCode::kDataLoss, "field 'add_bos_token': true but",
              R"({"add_bos_token": true})");
}

// Messages that quote JSON shapes: braces in them are text, not format fields
// (they used to come out as "malformed tokenizer files: invalid format string").
TEST_F(ImportTest, MessagesQuotingJsonNameTheField) {
  const json split_bad_pattern = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Glob", "*"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"use_regex", false}, {"add_prefix_space", false}}}}};
  ExpectError([&](json& j) { j["pre_tokenizer"] = split_bad_pattern; }, StatusCode::kDataLoss,
              "field 'pre_tokenizer.pretokenizers[0].pattern': expected {\"Regex\": ...} or "
              "{\"String\": ...}");
  ExpectError(
      [&](json& j) {
        json p = split_bad_pattern;
        p["pretokenizers"][0]["pattern"] = 7;
        j["pre_tokenizer"] = p;
      },
      StatusCode::kDataLoss, "field 'pre_tokenizer.pretokenizers[0].pattern': expected {");
  ExpectError(
      [](json& j) {
        j["post_processor"] = {{"type", "TemplateProcessing"},
                               {"single", {{{"Sequence", {{"id", "A"}}}}, 5}},
                               {"special_tokens", json::object()}};
      },
      StatusCode::kDataLoss,
      "field 'post_processor.single[1]': expected {\"SpecialToken\": {\"id\": ...}} or "
      "{\"Sequence\": ...}");
  ExpectError([](json& j) {}, StatusCode::kDataLoss,
              "field 'bos_token': expected a string or {\"content\": ...}", R"({"bos_token": 12})");
}

// Found while fuzzing (tests/fuzz/tokenizer_import_fuzzer peaked at 1.1 GB on mutated
// ids): the vocabulary table is sized by the largest id, so an id of 2000000000 made the
// import allocate 64 GB and abort. Ids above 2^22 - 1 are an error (the old code accepted
// 2^22 and allocated a 4M-entry table).
TEST_F(ImportTest, HugeTokenIdsAreAnError) {
  const int64_t kFirstTooLarge = int64_t{1} << 22;
  ExpectError([&](json& j) { j["model"]["vocab"]["c"] = kFirstTooLarge; }, StatusCode::kDataLoss,
              "token 'c': id 4194304 is above the largest supported token id 4194303");
  ExpectError([&](json& j) { j["added_tokens"][0]["id"] = kFirstTooLarge; }, StatusCode::kDataLoss,
              "field 'added_tokens[0].id': 4194304 is above the largest supported token id");
  ExpectError(
      [](json& j) {}, StatusCode::kDataLoss,
      "field 'added_tokens_decoder.4194304': 4194304 is above the largest supported token id",
      R"({"added_tokens_decoder": {"4194304": {"content": "<x>"}}})");
}

TEST_F(ImportTest, BadRegexIsReportedByCreate) {
  json j = Valid();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "[unclosed"}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"use_regex", false}, {"add_prefix_space", false}}}}};
  auto spec = Load(j);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto tok = Tokenizer::Create(*spec);
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(tok.status().message().find("'[unclosed'"), std::string::npos)
      << tok.status().message();
}

TEST(GgufImport, RejectsUnsupportedAndInconsistentMetadata) {
  GgufTokenizerMetadata meta;
  meta.model = "gpt2";
  meta.pre = "smollm";
  meta.tokens = {"a", "b", "ab", "<|endoftext|>"};
  meta.token_types = {1, 1, 1, 3};
  meta.merges = {"a b"};
  meta.eos_id = 3;
  auto spec = TokenizerSpecFromGguf(meta);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->individual_digits);
  ASSERT_EQ(spec->added_tokens.size(), 1u);
  EXPECT_TRUE(spec->added_tokens[0].special);
  EXPECT_TRUE(Tokenizer::Create(*spec).ok());

  auto expect = [](GgufTokenizerMetadata m, StatusCode code, const std::string& needle) {
    auto s = TokenizerSpecFromGguf(m);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), code);
    EXPECT_NE(s.status().message().find(needle), std::string::npos) << s.status().message();
  };
  GgufTokenizerMetadata m = meta;
  m.model = "llama";
  expect(m, StatusCode::kUnimplemented, "tokenizer.ggml.model: unsupported 'llama'");
  m = meta;
  m.pre = "chatglm-bpe";
  expect(m, StatusCode::kUnimplemented, "tokenizer.ggml.pre: unsupported 'chatglm-bpe'");
  m = meta;
  m.merges = {"ab"};
  expect(m, StatusCode::kDataLoss, "tokenizer.ggml.merges[0]: 'ab' has no space");
  m = meta;
  m.token_types.pop_back();
  expect(m, StatusCode::kDataLoss, "3 entries for 4 tokens");
  m = meta;
  m.bos_id = 7;
  expect(m, StatusCode::kDataLoss, "bos_token_id: 7 outside");
  m = meta;
  m.pre = "llama-bpe";  // implies add_bos, but there is no BOS id
  expect(m, StatusCode::kDataLoss, "tokenizer.ggml.bos_token_id: missing, and tokenizer.ggml.pre");
}

// tokenizer.ggml.add_bos_token absent: llama.cpp prepends a BOS for the Llama 3
// pre-tokenizers and for no other BPE pre-tokenizer; present, it wins.
TEST(GgufImport, AddBosDefaultsLikeLlamaCpp) {
  GgufTokenizerMetadata meta;
  meta.model = "gpt2";
  meta.tokens = {"a", "b", "ab", "<|begin_of_text|>"};
  meta.token_types = {1, 1, 1, 3};
  meta.merges = {"a b"};
  meta.bos_id = 3;
  struct Implied {
    const char* pre;
    bool llama3;  // add_bos by default, ignore_merges
    const char* normalizer;
  };
  for (const Implied& c :
       {Implied{"llama-bpe", true, ""}, Implied{"llama3", true, ""}, Implied{"llama-v3", true, ""},
        Implied{"qwen2", false, "nfc"}, Implied{"smollm", false, ""}, Implied{"gpt2", false, ""},
        Implied{"default", false, ""}, Implied{"smaug-bpe", false, ""},
        Implied{"deepseek-r1-qwen", false, ""}}) {
    meta.pre = c.pre;
    meta.add_bos.reset();
    auto spec = TokenizerSpecFromGguf(meta);
    ASSERT_TRUE(spec.ok()) << spec.status().ToString();
    EXPECT_EQ(spec->add_bos, c.llama3) << c.pre;
    EXPECT_EQ(spec->ignore_merges, c.llama3) << c.pre;
    EXPECT_EQ(spec->normalizer, c.normalizer) << c.pre;
    meta.add_bos = !c.llama3;
    EXPECT_EQ(TokenizerSpecFromGguf(meta)->add_bos, !c.llama3) << c.pre;
  }
}

// Control and user-defined tokens are added tokens whatever their spelling.
TEST(GgufImport, ControlTokensOutsideTheByteLevelAlphabet) {
  GgufTokenizerMetadata meta;
  meta.model = "gpt2";
  meta.pre = "qwen2";
  meta.tokens = {"a", "b", "ab", "<\xEF\xBD\x9CUser\xEF\xBD\x9C>", "<think>", " "};
  meta.token_types = {1, 1, 1, 3, 4, 4};
  meta.merges = {"a b"};
  auto spec = TokenizerSpecFromGguf(meta);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  ASSERT_EQ(spec->added_tokens.size(), 3u);
  EXPECT_TRUE(spec->added_tokens[0].special);
  EXPECT_FALSE(spec->added_tokens[1].special);
  auto tok = Tokenizer::Create(*spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string text = "ab<\xEF\xBD\x9CUser\xEF\xBD\x9C><think> a";
  EXPECT_EQ(tok->Encode(text), (std::vector<int32_t>{2, 3, 4, 5, 0}));
  EXPECT_EQ(tok->Decode(tok->Encode(text)), text);
  EXPECT_EQ(tok->Decode(tok->Encode(text), /*skip_special_tokens=*/true), "ab<think> a");
}

}  // namespace
}  // namespace xrt
