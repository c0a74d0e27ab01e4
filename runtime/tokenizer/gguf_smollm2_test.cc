// SmolLM2-135M-Instruct's real vocabulary, read from its GGUF file, encodes
// every corpus line to the ids the original tokenizer gives
// (tests/fixtures/tokenizer/smollm2_expected.json). Skipped unless
// XCC_SMOLLM2_GGUF names the file.
//
// The GGUF reader proper lives in compiler/frontend; this test walks just the
// metadata key/values itself so that the tokenizer library does not depend
// on it.
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/tokenizer/streaming_detokenizer.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_import.h"

namespace xrt {
namespace {

// Metadata values of interest: integers/bools, strings, and arrays of either.
using GgufValue =
    std::variant<int64_t, std::string, std::vector<int64_t>, std::vector<std::string>>;

class GgufMetadataWalker {
 public:
  explicit GgufMetadataWalker(const std::string& path) : in_(path, std::ios::binary) {}

  // Reads all metadata key/values (GGUF v2/v3); false on a malformed header.
  bool Read(std::map<std::string, GgufValue>* out) {
    char magic[4];
    in_.read(magic, 4);
    if (!in_ || std::string(magic, 4) != "GGUF" || Get<uint32_t>() < 2) return false;
    Get<uint64_t>();  // tensor count
    const uint64_t kv_count = Get<uint64_t>();
    for (uint64_t i = 0; i < kv_count && in_; ++i) {
      std::string key = String();
      (*out)[key] = Value(Get<uint32_t>());
    }
    return static_cast<bool>(in_);
  }

 private:
  template <typename T>
  T Get() {
    T v{};
    in_.read(reinterpret_cast<char*>(&v), sizeof(v));
    return v;
  }
  std::string String() {
    std::string s(Get<uint64_t>(), '\0');
    in_.read(s.data(), s.size());
    return s;
  }
  int64_t Scalar(uint32_t type) {
    switch (type) {
      case 0:
        return Get<uint8_t>();
      case 1:
        return Get<int8_t>();
      case 2:
        return Get<uint16_t>();
      case 3:
        return Get<int16_t>();
      case 4:
        return Get<uint32_t>();
      case 5:
        return Get<int32_t>();
      case 6:
        Get<float>();
        return 0;
      case 7:
        return Get<uint8_t>();
      case 10:
        return static_cast<int64_t>(Get<uint64_t>());
      case 11:
        return Get<int64_t>();
      case 12:
        Get<double>();
        return 0;
      default:
        in_.setstate(std::ios::failbit);
        return 0;
    }
  }
  GgufValue Value(uint32_t type) {
    if (type == 8) return String();
    if (type != 9) return Scalar(type);
    const uint32_t elem = Get<uint32_t>();
    const uint64_t n = Get<uint64_t>();
    if (elem == 8) {
      std::vector<std::string> v;
      for (uint64_t i = 0; i < n && in_; ++i) v.push_back(String());
      return v;
    }
    std::vector<int64_t> v;
    for (uint64_t i = 0; i < n && in_; ++i) v.push_back(Scalar(elem));
    return v;
  }
  std::ifstream in_;
};

TEST(SmolLM2Gguf, MatchesTheOriginalTokenizerOnTheCorpus) {
  const char* path = std::getenv("XCC_SMOLLM2_GGUF");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "XCC_SMOLLM2_GGUF is not set";
  std::map<std::string, GgufValue> kv;
  ASSERT_TRUE(GgufMetadataWalker(path).Read(&kv)) << path;

  auto str = [&](const char* k) { return std::get<std::string>(kv.at(k)); };
  auto num = [&](const char* k, int64_t dflt) {
    return kv.count(k) ? std::get<int64_t>(kv.at(k)) : dflt;
  };
  GgufTokenizerMetadata meta;
  meta.model = str("tokenizer.ggml.model");
  meta.pre = str("tokenizer.ggml.pre");
  meta.tokens = std::get<std::vector<std::string>>(kv.at("tokenizer.ggml.tokens"));
  for (int64_t t : std::get<std::vector<int64_t>>(kv.at("tokenizer.ggml.token_type"))) {
    meta.token_types.push_back(static_cast<int32_t>(t));
  }
  meta.merges = std::get<std::vector<std::string>>(kv.at("tokenizer.ggml.merges"));
  meta.bos_id = static_cast<int32_t>(num("tokenizer.ggml.bos_token_id", -1));
  meta.eos_id = static_cast<int32_t>(num("tokenizer.ggml.eos_token_id", -1));
  meta.unk_id = static_cast<int32_t>(num("tokenizer.ggml.unknown_token_id", -1));
  meta.pad_id = static_cast<int32_t>(num("tokenizer.ggml.padding_token_id", -1));
  meta.add_bos = num("tokenizer.ggml.add_bos_token", 0) != 0;
  meta.add_space_prefix = num("tokenizer.ggml.add_space_prefix", 0) != 0;
  EXPECT_EQ(meta.pre, "smollm");

  auto spec = TokenizerSpecFromGguf(meta);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto tok = Tokenizer::Create(std::move(spec).value());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(tok->vocab_size(), 49152);
  EXPECT_EQ(tok->IdToPiece(tok->eos_id()), "<|im_end|>");

  std::ifstream in(std::string(XCC_SOURCE_DIR) + "/tests/fixtures/tokenizer/smollm2_expected.json");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto expected = nlohmann::json::parse(ss.str());
  ASSERT_EQ(expected["cases"].size(), 34u);
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->Encode(text), ids) << "text: " << text;
    EXPECT_EQ(tok->Decode(ids), c["decoded"].get<std::string>());
    EXPECT_EQ(tok->Decode(ids, true), c["decoded_skip_special"].get<std::string>());
    StreamingDetokenizer stream(&tok.value());
    std::string streamed;
    for (int32_t id : ids) streamed += stream.Push(id);
    EXPECT_EQ(streamed + stream.Flush(), c["decoded"].get<std::string>());
  }
}

}  // namespace
}  // namespace xrt
