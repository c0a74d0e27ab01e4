// DecoderChain against what Hugging Face `tokenizers` 0.23.3 gives for the same
// decoders (tokenizers.decoders.*.decode(list), values recorded by hand), and
// streaming: pushing tokens one by one settles the same text.
#include "runtime/tokenizer/decoder_chain.h"

#include <gtest/gtest.h>

namespace xrt {
namespace {

const std::string kMeta = "\u2581";

// Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0): Llama 2's decoder.
std::vector<DecoderStep> Llama2Steps() {
  return {{"replace", kMeta, " ", 0, ""},
          {"byte_fallback", "", "", 0, ""},
          {"fuse", "", "", 0, ""},
          {"strip", "", " ", 1, ""}};
}

// Decodes `tokens` all at once; also checks that streaming them gives the same.
std::string Decode(const DecoderChain& chain, const std::vector<std::string>& tokens) {
  DecoderChain::State state = chain.NewState();
  std::string text;
  for (const std::string& t : tokens) chain.Push(&state, t, &text);
  chain.Finish(&state, &text);
  return text;
}

TEST(DecoderChain, ByteFallbackRunsDecodeAsUtf8OrOneReplacementPerByte) {
  auto chain = DecoderChain::Create(Llama2Steps());
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  EXPECT_EQ(Decode(*chain, {"<0xE4>", "<0xB8>", "<0xAD>", kMeta + "hi"}), "中 hi");
  // One invalid byte makes the whole run U+FFFD, one per byte.
  EXPECT_EQ(Decode(*chain, {"<0xE4>", "<0xB8>", "<0xAD>", "<0xFF>", kMeta + "hi"}),
            "\uFFFD\uFFFD\uFFFD\uFFFD hi");
  EXPECT_EQ(Decode(*chain, {"<0xE4>", "<0xB8>"}), "\uFFFD\uFFFD");  // truncated at the end
  // The leading space is stripped once, from the whole text.
  EXPECT_EQ(Decode(*chain, {"", kMeta, kMeta + "x"}), " x");
  EXPECT_EQ(Decode(*chain, {kMeta + kMeta + "a"}), " a");
  EXPECT_EQ(Decode(*chain, {"<0x20>", "a"}), "a");
}

TEST(DecoderChain, ParsesByteTokensAsRustDoes) {
  EXPECT_EQ(DecoderChain::ParseByteToken("<0x0A>"), 10);
  EXPECT_EQ(DecoderChain::ParseByteToken("<0x0a>"), 10);
  EXPECT_EQ(DecoderChain::ParseByteToken("<0x+A>"), 10);  // u8::from_str_radix accepts '+'
  EXPECT_EQ(DecoderChain::ParseByteToken("<0xFF>"), 255);
  EXPECT_EQ(DecoderChain::ParseByteToken("<0x-1>"), -1);
  EXPECT_EQ(DecoderChain::ParseByteToken("<0xG0>"), -1);
  EXPECT_EQ(DecoderChain::ParseByteToken("<0x0A"), -1);
  EXPECT_EQ(DecoderChain::ParseByteToken("<0x00A>"), -1);
}

TEST(DecoderChain, MetaspaceDropsEveryReplacementInTheFirstTokenOnly) {
  auto first = DecoderChain::Create({{"metaspace", "", kMeta, 0, "first"}});
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(Decode(*first, {kMeta + "a" + kMeta, kMeta + "b"}), "a b");
  auto never = DecoderChain::Create({{"metaspace", "", kMeta, 0, "never"}});
  ASSERT_TRUE(never.ok());
  EXPECT_EQ(Decode(*never, {kMeta + "a", kMeta + "b"}), " a b");
}

TEST(DecoderChain, StripAfterFuseSpansPieces) {
  auto chain = DecoderChain::Create({{"fuse", "", "", 0, ""}, {"strip", "", " ", 2, ""}});
  ASSERT_TRUE(chain.ok());
  EXPECT_EQ(Decode(*chain, {"", " ", " x"}), "x");
}

TEST(DecoderChain, StreamingHoldsByteRunsUntilTheyEndOrTurnInvalid) {
  auto chain = DecoderChain::Create(Llama2Steps());
  ASSERT_TRUE(chain.ok());
  DecoderChain::State state = chain->NewState();
  std::string out;
  chain->Push(&state, kMeta + "a", &out);
  EXPECT_EQ(out, "a");
  out.clear();
  chain->Push(&state, "<0xE4>", &out);
  chain->Push(&state, "<0xB8>", &out);
  chain->Push(&state, "<0xAD>", &out);
  EXPECT_EQ(out, "");  // a later invalid byte would turn "中" into U+FFFDs
  chain->Push(&state, kMeta + "b", &out);
  EXPECT_EQ(out, "中 b");
  out.clear();
  chain->Push(&state, "<0xE4>", &out);
  EXPECT_EQ(out, "");
  chain->Push(&state, "<0x41>", &out);  // E4 41: invalid, settled at once
  EXPECT_EQ(out, "\uFFFD\uFFFD");
  out.clear();
  chain->Push(&state, "<0xE4>", &out);  // still the same (invalid) run
  EXPECT_EQ(out, "\uFFFD");
  out.clear();
  chain->Finish(&state, &out);
  EXPECT_EQ(out, "");
  // After Finish the state starts a new text: the leading space is stripped again.
  chain->Push(&state, kMeta + "c", &out);
  EXPECT_EQ(out, "c");
}

TEST(DecoderChain, TokenTextIsTheTokenAloneNotAtTheStart) {
  auto chain = DecoderChain::Create(Llama2Steps());
  ASSERT_TRUE(chain.ok());
  EXPECT_EQ(chain->TokenText(kMeta + "the"), " the");
  EXPECT_EQ(chain->TokenText("<0x0A>"), "\n");
  EXPECT_EQ(chain->TokenText("<0xE4>"), "\xE4");
}

TEST(DecoderChain, RejectsStepsItCannotRun) {
  struct Case {
    std::vector<DecoderStep> steps;
    const char* needle;
  };
  const Case cases[] = {
      {{{"fuse", "", "", 0, ""}, {"byte_fallback", "", "", 0, ""}}, "byte_fallback after fuse"},
      {{{"fuse", "", "", 0, ""}, {"replace", "ab", "c", 0, ""}}, "after fuse"},
      {{{"replace", "", "c", 0, ""}}, "empty replace pattern"},
      {{{"strip", "", "ab", 1, ""}}, "not one character"},
      {{{"metaspace", "", kMeta, 0, "sometimes"}}, "prepend_scheme 'sometimes'"},
      {{{"wordpiece", "", "", 0, ""}}, "unknown type 'wordpiece'"},
  };
  for (const Case& c : cases) {
    auto chain = DecoderChain::Create(c.steps);
    ASSERT_FALSE(chain.ok()) << c.needle;
    EXPECT_NE(chain.status().message().find(c.needle), std::string::npos)
        << chain.status().message();
  }
}

}  // namespace
}  // namespace xrt
