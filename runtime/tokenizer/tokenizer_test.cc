// Tokenizer against fixtures produced by Hugging Face `tokenizers`
// (tests/gen_tokenizer_fixtures.py), plus hand-built specs for BPE details
// and validation.
#include "runtime/tokenizer/tokenizer.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/streaming_detokenizer.h"
#include "runtime/tokenizer/tokenizer_import.h"
#include "runtime/tokenizer/utf8.h"

namespace xrt {
namespace {

const std::string kFixtures = std::string(XCC_SOURCE_DIR) + "/tests/fixtures/tokenizer/";

nlohmann::json ReadJsonFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

Expected<Tokenizer> LoadFixture(const std::string& style) {
  XRT_ASSIGN_OR_RETURN(TokenizerSpec spec,
                       LoadTokenizerJson(kFixtures + style + "/tokenizer.json",
                                         kFixtures + style + "/tokenizer_config.json"));
  return Tokenizer::Create(std::move(spec));
}

// Declares `Tokenizer& name` loaded from fixture `style`, or fails the test.
#define LOAD_FIXTURE(name, style)                               \
  auto name##_or = LoadFixture(style);                          \
  ASSERT_TRUE(name##_or.ok()) << name##_or.status().ToString(); \
  Tokenizer& name = name##_or.value()

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, EncodesAndDecodesEveryCorpusLineLikeHuggingFace) {
  LOAD_FIXTURE(tok, GetParam());
  const auto expected = ReadJsonFile(kFixtures + GetParam() + "/expected.json");
  ASSERT_EQ(expected["cases"].size(), 34u);
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.Encode(text, /*add_special_tokens=*/true), ids) << "text: " << text;
    EXPECT_EQ(tok.Decode(ids, false), c["decoded"].get<std::string>()) << "text: " << text;
    EXPECT_EQ(tok.Decode(ids, true), c["decoded_skip_special"].get<std::string>())
        << "text: " << text;
  }
}

TEST_P(FixtureTest, StreamingDetokenizerEqualsDecode) {
  LOAD_FIXTURE(tok, GetParam());
  const auto expected = ReadJsonFile(kFixtures + GetParam() + "/expected.json");
  for (bool skip : {false, true}) {
    StreamingDetokenizer stream(&tok, skip);
    for (const auto& c : expected["cases"]) {
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      std::string text;
      for (int32_t id : ids) {
        std::string piece = stream.Push(id);
        EXPECT_TRUE(utf8::IsValid(piece));
        text += piece;
      }
      text += stream.Flush();
      EXPECT_EQ(text, tok.Decode(ids, skip)) << "text: " << c["text"].get<std::string>();
    }
  }
}

TEST_P(FixtureTest, EncodesLongTextQuickly) {
  LOAD_FIXTURE(tok, GetParam());
  const auto expected = ReadJsonFile(kFixtures + GetParam() + "/expected.json");
  std::string text;
  while (text.size() < 64 * 1024) {
    for (const auto& c : expected["cases"]) text += c["text"].get<std::string>() + "\n";
  }
  text += std::string(20000, ' ') + "x";  // one long whitespace word
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> ids = tok.Encode(text, false);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  // Warm-cache encoding gives the same ids (and is the steady state in serving).
  const auto warm_start = std::chrono::steady_clock::now();
  EXPECT_TRUE(tok.Encode(text, false) == ids);
  const double warm_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_start)
          .count();
  // Serving needs a few thousand tokens in about a millisecond; this allows
  // for slow CI machines and sanitizers but catches quadratic behaviour.
  EXPECT_LT(ms, 1000.0) << ids.size() << " tokens";
  std::printf("[ info     ] %s: %zu bytes -> %zu tokens: %.2f ms cold cache, %.2f ms warm\n",
              GetParam().c_str(), text.size(), ids.size(), ms, warm_ms);
}

INSTANTIATE_TEST_SUITE_P(Styles, FixtureTest,
                         ::testing::Values("llama3", "qwen2", "smollm2", "llama2", "llama2_first",
                                           "sp_always_split", "sp_never", "sp_unk"));

// SentencePiece-style fixtures: encoding without special tokens, and tokens
// decoded one at a time (the leading-space strip and the first-token rule of
// Metaspace apply to each such decode).
class SentencePieceFixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SentencePieceFixtureTest, EncodesWithoutSpecialTokensAndDecodesSingleTokens) {
  LOAD_FIXTURE(tok, GetParam());
  EXPECT_FALSE(tok.spec().byte_level);
  const auto expected = ReadJsonFile(kFixtures + GetParam() + "/expected.json");
  for (const auto& c : expected["cases"]) {
    EXPECT_EQ(tok.Encode(c["text"].get<std::string>(), /*add_special_tokens=*/false),
              c["ids_plain"].get<std::vector<int32_t>>())
        << "text: " << c["text"].get<std::string>();
  }
  ASSERT_GT(expected["single_tokens"].size(), 300u);
  for (const auto& t : expected["single_tokens"]) {
    const int32_t id = t["id"];
    EXPECT_EQ(tok.Decode(&id, 1, false), t["decoded"].get<std::string>()) << "id " << id;
  }
}

TEST_P(SentencePieceFixtureTest, StreamsEachCaseWithAFreshDetokenizer) {
  LOAD_FIXTURE(tok, GetParam());
  const auto expected = ReadJsonFile(kFixtures + GetParam() + "/expected.json");
  for (const char* key : {"decoded", "decoded_skip_special"}) {
    const bool skip = std::string(key) == "decoded_skip_special";
    for (const auto& c : expected["cases"]) {
      StreamingDetokenizer stream(&tok, skip);
      std::string text;
      for (int32_t id : c["ids"].get<std::vector<int32_t>>()) text += stream.Push(id);
      text += stream.Flush();
      EXPECT_EQ(text, c[key].get<std::string>()) << "text: " << c["text"].get<std::string>();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Styles, SentencePieceFixtureTest,
                         ::testing::Values("llama2", "llama2_first", "sp_always_split", "sp_never",
                                           "sp_unk"));

TEST(TokenizerFixtures, SpecialIdsComeFromTheFiles) {
  LOAD_FIXTURE(llama, "llama3");
  EXPECT_EQ(llama.IdToPiece(llama.bos_id()), "<|begin_of_text|>");
  EXPECT_EQ(llama.IdToPiece(llama.eos_id()), "<|eot_id|>");
  EXPECT_TRUE(llama.add_bos());
  EXPECT_TRUE(llama.IsSpecial(llama.eos_id()));
  EXPECT_FALSE(llama.IsSpecial(*llama.PieceToId("</s>")));
  EXPECT_TRUE(llama.spec().ignore_merges);

  LOAD_FIXTURE(qwen, "qwen2");
  EXPECT_FALSE(qwen.add_bos());
  EXPECT_EQ(qwen.bos_id(), -1);
  EXPECT_EQ(qwen.IdToPiece(qwen.eos_id()), "<|im_end|>");
  EXPECT_EQ(qwen.IdToPiece(qwen.pad_id()), "<|endoftext|>");
  EXPECT_EQ(qwen.spec().normalizer, "nfc");

  LOAD_FIXTURE(smol, "smollm2");
  EXPECT_FALSE(smol.add_bos());
  EXPECT_EQ(smol.IdToPiece(smol.eos_id()), "<|im_end|>");
  EXPECT_EQ(smol.Encode("<|im_start|>", false),
            std::vector<int32_t>{*smol.PieceToId("<|im_start|>")});
}

TEST(TokenizerFixtures, PartialUtf8PiecesAreHeldBackAndReplacedAtTheEnd) {
  LOAD_FIXTURE(tok, "llama3");
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600, surely not one token here
  const std::vector<int32_t> ids = tok.Encode(emoji, false);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_FALSE(utf8::IsValid(tok.TokenBytes(ids[0])));
  EXPECT_EQ(tok.Decode(ids), emoji);
  // One piece alone is an incomplete character: U+FFFD, as HF decode gives.
  EXPECT_EQ(tok.Decode(std::vector<int32_t>{ids[0]}), utf8::kReplacement);

  StreamingDetokenizer stream(&tok);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(stream.Push(ids[i]), "");
  EXPECT_GT(stream.pending_bytes(), 0u);
  EXPECT_EQ(stream.Push(ids.back()), emoji);
  EXPECT_EQ(stream.Flush(), "");

  // Cut short: the held-back bytes become one U+FFFD at Flush.
  StreamingDetokenizer cut(&tok);
  EXPECT_EQ(cut.Push(ids[0]), "");
  EXPECT_EQ(cut.Flush(), utf8::kReplacement);
  // A continuation byte that cannot start a character is emitted at once.
  const auto cont = tok.PieceToId(byte_level::Encode("\x80"));
  ASSERT_TRUE(cont.has_value());
  StreamingDetokenizer bad(&tok);
  EXPECT_EQ(bad.Push(*cont), utf8::kReplacement);
  EXPECT_EQ(bad.Push(*tok.PieceToId("a")), "a");
}

TEST(TokenizerFixtures, InvalidUtf8InputIsReplaced) {
  LOAD_FIXTURE(tok, "smollm2");
  EXPECT_EQ(tok.Decode(tok.Encode("a\xFF"
                                  "b",
                                  false)),
            "a\xEF\xBF\xBD"
            "b");
}

// ---- Hand-built specs ---------------------------------------------------

TokenizerSpec TinySpec() {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.vocab.push_back(byte_level::Encode(std::string(1, char(b))));
  for (const char* t : {"ab", "bc", "abc", "Ġab"}) spec.vocab.push_back(t);
  spec.merges = {{"b", "c"}, {"a", "b"}, {"a", "bc"}, {"Ġ", "ab"}};
  spec.split_regexes = {kGpt2SplitRegex};
  return spec;
}

TEST(Tokenizer, MergesLowestRankFirst) {
  auto tok = Tokenizer::Create(TinySpec());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  // "abc": b+c (rank 0) before a+b (rank 1), then a+bc.
  EXPECT_EQ(tok->Encode("abc"), std::vector<int32_t>{258});
  // "ab c" -> "ab", "Ġc"; " ab" -> "Ġab".
  EXPECT_EQ(tok->Encode("ab c ab"), (std::vector<int32_t>{256, ' ', 'c', 259}));
  EXPECT_EQ(tok->Decode(tok->Encode("ab c ab")), "ab c ab");
}

TEST(Tokenizer, IgnoreMergesTakesWholeWordsFromTheVocabulary) {
  TokenizerSpec spec = TinySpec();
  spec.vocab.push_back("ac");  // reachable only as a whole word: no merge builds it
  auto plain = Tokenizer::Create(spec);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->Encode("ac"), (std::vector<int32_t>{'a', 'c'}));
  spec.ignore_merges = true;
  auto ignoring = Tokenizer::Create(spec);
  ASSERT_TRUE(ignoring.ok());
  EXPECT_EQ(ignoring->Encode("ac"), std::vector<int32_t>{260});
}

TEST(Tokenizer, AddedTokensStripAndSingleWord) {
  TokenizerSpec spec = TinySpec();
  spec.vocab.push_back("<x>");
  spec.vocab.push_back("");  // a hole, filled by the added token below
  spec.added_tokens = {{260, "<x>", true, /*lstrip=*/true, /*rstrip=*/true},
                       {261, "ab!", false, false, false, false, /*single_word=*/true}};
  auto tok = Tokenizer::Create(spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  EXPECT_EQ(tok->Encode("c  <x>  c"), (std::vector<int32_t>{'c', 260, 'c'}));
  EXPECT_EQ(tok->Encode("ab! c"), (std::vector<int32_t>{261, *tok->PieceToId("Ġ"), 'c'}));
  EXPECT_EQ(tok->Encode("cab!"), (std::vector<int32_t>{'c', 256, '!'}));  // not a single word
  EXPECT_EQ(tok->Decode(tok->Encode("c <x>"), /*skip_special_tokens=*/true), "c");
}

// Which characters next to a single_word token make it part of a word, for
// every assigned non-ASCII code point, as `tokenizers` decides
// (tests/fixtures/tokenizer/single_word_chars.json): the Unicode \w class, so
// letter numbers ('Ⅻ') and joiners count, other numbers ('²', '½') do not.
TEST(Tokenizer, SingleWordBoundariesMatchHuggingFace) {
  TokenizerSpec spec = TinySpec();
  spec.vocab.push_back("<w>");
  spec.added_tokens = {{260, "<w>", false, false, false, false, /*single_word=*/true}};
  auto tok = Tokenizer::Create(spec);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto is_word_char = [&](uint32_t cp) {
    std::string s;
    utf8::AppendCodePoint(cp, &s);
    const std::vector<int32_t> left = tok->Encode(s + "<w>"), right = tok->Encode("<w>" + s);
    const bool left_word = std::find(left.begin(), left.end(), 260) == left.end();
    const bool right_word = std::find(right.begin(), right.end(), 260) == right.end();
    EXPECT_EQ(left_word, right_word) << std::hex << cp;
    return left_word;
  };
  EXPECT_FALSE(is_word_char(0xB2));   // '²' (No)
  EXPECT_FALSE(is_word_char(0xBD));   // '½' (No)
  EXPECT_TRUE(is_word_char(0x216B));  // 'Ⅻ' (Nl)
  EXPECT_TRUE(is_word_char(0x200D));  // zero width joiner
  EXPECT_TRUE(is_word_char(0x24B6));  // circled 'A' (So, Other_Alphabetic)

  const auto fixture = ReadJsonFile(kFixtures + "single_word_chars.json");
  std::vector<std::pair<uint32_t, uint32_t>> word;
  for (const auto& r : fixture["word"]) word.emplace_back(r[0], r[1]);
  size_t checked = 0, mismatches = 0;
  for (const auto& r : fixture["checked"]) {
    for (uint32_t cp = r[0]; cp <= r[1].get<uint32_t>(); ++cp) {
      auto it = std::upper_bound(word.begin(), word.end(), std::make_pair(cp, UINT32_MAX));
      const bool want = it != word.begin() && std::prev(it)->second >= cp;
      ++checked;
      if (is_word_char(cp) != want && ++mismatches <= 10) {
        ADD_FAILURE() << "U+" << std::hex << cp << ": tokenizers says word char = " << want;
      }
    }
  }
  EXPECT_GT(checked, 100000u);
  EXPECT_EQ(mismatches, 0u);
}

TEST(Tokenizer, NfcNormalizesBeforeSplitting) {
  TokenizerSpec spec = TinySpec();
  spec.normalizer = "nfc";
  auto tok = Tokenizer::Create(spec);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->Decode(tok->Encode("e\xCC\x81")), "\xC3\xA9");  // e + U+0301 -> é
}

TEST(Tokenizer, RejectsBadSpecs) {
  auto expect_error = [](TokenizerSpec spec, StatusCode code, const std::string& needle) {
    auto tok = Tokenizer::Create(std::move(spec));
    ASSERT_FALSE(tok.ok());
    EXPECT_EQ(tok.status().code(), code);
    EXPECT_NE(tok.status().message().find(needle), std::string::npos) << tok.status().message();
  };
  TokenizerSpec s = TinySpec();
  s.merges.push_back({"a", "zz"});
  expect_error(s, StatusCode::kInvalidArgument,
               "merge #4 'a zz': token 'zz' is not in the vocabulary");
  s = TinySpec();
  s.merges.push_back({"c", "a"});  // "ca" is not a token
  expect_error(s, StatusCode::kInvalidArgument, "token 'ca' is not in the vocabulary");
  s = TinySpec();
  s.vocab.push_back("ab");
  expect_error(s, StatusCode::kInvalidArgument, "tokens 256 and 260 are both 'ab'");
  s = TinySpec();
  s.added_tokens = {{256, "ab"}, {256, "ab"}};
  expect_error(s, StatusCode::kInvalidArgument, "duplicate id 256");
  s = TinySpec();
  s.added_tokens = {{256, "<zz>"}};
  expect_error(s, StatusCode::kInvalidArgument, "content '<zz>' but the vocabulary has 'ab'");
  s = TinySpec();
  s.added_tokens = {{999, "<zz>"}};
  expect_error(s, StatusCode::kInvalidArgument, "id 999 outside the vocabulary");
  s = TinySpec();
  s.split_regexes.push_back("(unclosed");
  expect_error(s, StatusCode::kInvalidArgument, "regex '(unclosed'");
  s = TinySpec();
  s.normalizer = "nfkc";
  expect_error(s, StatusCode::kUnimplemented, "normalizer 'nfkc'");
  s = TinySpec();
  s.add_bos = true;
  expect_error(s, StatusCode::kInvalidArgument, "add_bos without a bos_id");
  s = TinySpec();
  s.vocab[5] = "\xFF";
  expect_error(s, StatusCode::kInvalidArgument, "token 5: not valid UTF-8");
}

TEST(Utf8, LossyReplacesMaximalInvalidSubparts) {
  const std::string r(utf8::kReplacement);
  EXPECT_EQ(utf8::Lossy("a\xE0\x80"
                        "b"),
            "a" + r + r + "b");                       // E0 needs A0..BF next
  EXPECT_EQ(utf8::Lossy("\xED\xA0\x80"), r + r + r);  // surrogate
  EXPECT_EQ(utf8::Lossy("\xF0\x9F\x98"
                        "x"),
            r + "x");                         // truncated 4-byte
  EXPECT_EQ(utf8::Lossy("\xF0\x9F\x98"), r);  // truncated at the end
  std::string out;
  EXPECT_EQ(utf8::AppendLossy("ok\xF0\x9F", /*final=*/false, &out), 2u);
  EXPECT_EQ(out, "ok");
}

TEST(ByteLevel, RoundTripsAllBytes) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string spelled = byte_level::Encode(all);
  EXPECT_EQ(byte_level::Encode(" the"), "\xC4\xA0the");  // "Ġthe"
  EXPECT_EQ(byte_level::Decode(spelled), all);
  EXPECT_FALSE(byte_level::Decode("a b").has_value());  // ' ' is not in the alphabet
}

}  // namespace
}  // namespace xrt
