#include "runtime/tokenizer/streaming_detokenizer.h"

#include <gtest/gtest.h>

#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/utf8.h"

namespace xrt {
namespace {

// A vocabulary of the 256 single bytes plus one special token.
Tokenizer ByteTokenizer() {
  TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) spec.vocab.push_back(byte_level::Encode(std::string(1, char(b))));
  spec.vocab.push_back("<|eot|>");
  spec.added_tokens = {{256, "<|eot|>", /*special=*/true}};
  auto tok = Tokenizer::Create(std::move(spec));
  EXPECT_TRUE(tok.ok()) << tok.status().ToString();
  return std::move(tok).value();
}

std::string Stream(const Tokenizer& tok, const std::string& bytes, bool skip, int32_t extra = -1) {
  StreamingDetokenizer stream(&tok, skip);
  std::string out;
  for (unsigned char b : bytes) {
    std::string piece = stream.Push(b);
    EXPECT_TRUE(utf8::IsValid(piece));
    out += piece;
    if (extra >= 0) out += stream.Push(extra);
  }
  return out + stream.Flush();
}

TEST(StreamingDetokenizer, MatchesDecodeOnValidAndInvalidBytes) {
  const Tokenizer tok = ByteTokenizer();
  const std::string r(utf8::kReplacement);
  for (const std::string& bytes :
       {std::string("plain ascii"), std::string("h\xC3\xA9llo \xE4\xB8\xAD \xF0\x9F\x98\x80!"),
        std::string("a\xE0\x80"
                    "b"),
        std::string("\xED\xA0\x80"), std::string("x\xF0\x9F\x98"), std::string("\xC3"),
        std::string("\x80\x80\xFF"), std::string("\xF4\x90\x80\x80")}) {
    std::vector<int32_t> ids(bytes.begin(), bytes.end());
    for (int32_t& id : ids) id &= 0xFF;
    EXPECT_EQ(Stream(tok, bytes, false), tok.Decode(ids)) << bytes;
    EXPECT_EQ(tok.Decode(ids), utf8::Lossy(bytes));
  }
}

TEST(StreamingDetokenizer, HoldsBackIncompleteCharacters) {
  const Tokenizer tok = ByteTokenizer();
  StreamingDetokenizer stream(&tok);
  EXPECT_EQ(stream.Push(0xE4), "");
  EXPECT_EQ(stream.Push(0xB8), "");
  EXPECT_EQ(stream.pending_bytes(), 2u);
  EXPECT_EQ(stream.Push(0xAD), "\xE4\xB8\xAD");
  EXPECT_EQ(stream.pending_bytes(), 0u);
  EXPECT_EQ(stream.Push(0xE4), "");
  EXPECT_EQ(stream.Push('a'), std::string(utf8::kReplacement) + "a");  // broken: emit at once
  EXPECT_EQ(stream.Push(0xF0), "");
  EXPECT_EQ(stream.Flush(), utf8::kReplacement);
  EXPECT_EQ(stream.Push('b'), "b");  // reusable after Flush
}

TEST(StreamingDetokenizer, SpecialTokensAndBadIds) {
  const Tokenizer tok = ByteTokenizer();
  EXPECT_EQ(Stream(tok, "ab", false, 256), "a<|eot|>b<|eot|>");
  EXPECT_EQ(Stream(tok, "ab", true, 256), "ab");
  StreamingDetokenizer stream(&tok);
  EXPECT_EQ(stream.Push(-1), "");
  EXPECT_EQ(stream.Push(100000), "");
}

}  // namespace
}  // namespace xrt
