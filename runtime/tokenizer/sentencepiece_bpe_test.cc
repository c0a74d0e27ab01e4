// SentencePiece-style BPE details on hand-built specs (expected ids from Hugging
// Face `tokenizers` 0.23.3 on the same vocabulary, recorded by hand), and
// streaming with the llama2 fixture (tests/gen_tokenizer_fixtures.py).
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "runtime/tokenizer/streaming_detokenizer.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_import.h"
#include "runtime/tokenizer/utf8.h"

namespace xrt {
namespace {

// models.BPE(vocab={"<unk>":0, "a":1, "b":2, "<0xC3>":3, "<0xA9>":4, "ab":5},
//            merges=[("a", "b")], unk_token="<unk>", ...), no normalizer or pre-tokenizer.
TokenizerSpec SmallSpec(bool byte_fallback, bool fuse_unk) {
  TokenizerSpec spec;
  spec.byte_level = false;
  spec.vocab = {"<unk>", "a", "b", "<0xC3>", "<0xA9>", "ab"};
  spec.merges = {{"a", "b"}};
  spec.unk_id = 0;
  spec.byte_fallback = byte_fallback;
  spec.fuse_unk = fuse_unk;
  spec.decoders = {{"byte_fallback", "", "", 0, ""}, {"fuse", "", "", 0, ""}};
  return spec;
}

TEST(SentencePieceBpe, ByteFallbackAndUnknownPieces) {
  auto tok = Tokenizer::Create(SmallSpec(/*byte_fallback=*/true, /*fuse_unk=*/true));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  using Ids = std::vector<int32_t>;
  EXPECT_EQ(tok->Encode("ab\u00e9"), (Ids{5, 3, 4}));     // é -> <0xC3> <0xA9>
  EXPECT_EQ(tok->Encode("a\u00e9b"), (Ids{1, 3, 4, 2}));  // no merge across the bytes
  EXPECT_EQ(tok->Encode("a中b"), (Ids{1, 0, 2}));         // no <0xE4>: unk
  EXPECT_EQ(tok->Encode("中中ab"), (Ids{0, 5}));          // fused unk
  // As `tokenizers` does, a pending unk is added after a byte-fallback piece.
  EXPECT_EQ(tok->Encode("中\u00e9"), (Ids{3, 4, 0}));
  EXPECT_EQ(tok->Decode(Ids{5, 3, 4}), "ab\u00e9");

  auto no_fallback = Tokenizer::Create(SmallSpec(false, false));
  ASSERT_TRUE(no_fallback.ok());
  EXPECT_EQ(no_fallback->Encode("a中中b"), (Ids{1, 0, 0, 2}));
  EXPECT_EQ(no_fallback->Encode("中\u00e9"), (Ids{0, 0}));
  auto fused = Tokenizer::Create(SmallSpec(false, true));
  ASSERT_TRUE(fused.ok());
  EXPECT_EQ(fused->Encode("a中中b"), (Ids{1, 0, 2}));
}

TEST(SentencePieceBpe, RejectsByteLevelOptionsAndBadMetaspace) {
  TokenizerSpec spec = SmallSpec(true, true);
  spec.split_regexes = {"\\s+"};
  EXPECT_FALSE(Tokenizer::Create(spec).ok());
  spec = SmallSpec(true, true);
  spec.metaspace = true;
  spec.metaspace_replacement = "__";
  spec.metaspace_prepend_scheme = "first";
  auto bad = Tokenizer::Create(spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not one character"), std::string::npos);
  spec.metaspace_replacement = "\u2581";
  spec.metaspace_prepend_scheme = "sometimes";
  EXPECT_FALSE(Tokenizer::Create(spec).ok());
  spec = SmallSpec(true, true);
  spec.byte_level = true;  // byte fallback needs character-level BPE
  EXPECT_FALSE(Tokenizer::Create(spec).ok());
  spec = SmallSpec(true, true);
  spec.normalizer_steps = {{"lowercase", "", ""}};
  EXPECT_EQ(Tokenizer::Create(spec).status().code(), StatusCode::kUnimplemented);
}

const std::string kFixtures = std::string(XCC_SOURCE_DIR) + "/tests/fixtures/tokenizer/";

TEST(SentencePieceBpe, StreamingSplitsByteFallbackAndStripsTheLeadingSpaceOnce) {
  auto spec = LoadTokenizerJson(kFixtures + "llama2/tokenizer.json",
                                kFixtures + "llama2/tokenizer_config.json");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  auto tok = Tokenizer::Create(std::move(*spec));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  const std::string text = " Hi 🦙!";
  const std::vector<int32_t> ids = tok->Encode(text, /*add_special_tokens=*/false);
  // 🦙 is not in the small vocabulary: four byte tokens.
  int byte_tokens = 0;
  for (int32_t id : ids) byte_tokens += tok->IdToPiece(id).rfind("<0x", 0) == 0;
  EXPECT_EQ(byte_tokens, 4);
  // Prepend gives "▁▁Hi▁🦙!"; the decoder strips one leading space.
  EXPECT_EQ(tok->Decode(ids), text);
  StreamingDetokenizer stream(&*tok);
  std::string streamed;
  for (int32_t id : ids) {
    const std::string piece = stream.Push(id);
    EXPECT_TRUE(utf8::IsValid(piece));
    // Nothing of the emoji shows before its last byte token.
    if (tok->IdToPiece(id).rfind("<0x", 0) == 0) {
      EXPECT_EQ(piece.find("🦙"), std::string::npos);
    }
    streamed += piece;
  }
  streamed += stream.Flush();
  EXPECT_EQ(streamed, text);
  // A stream cut inside the emoji: its bytes become U+FFFDs, one per byte, at Flush.
  StreamingDetokenizer cut(&*tok);
  std::string partial;
  size_t i = 0;
  while (tok->IdToPiece(ids[i]).rfind("<0x", 0) != 0) partial += cut.Push(ids[i++]);
  partial += cut.Push(ids[i]);
  partial += cut.Push(ids[i + 1]);
  partial += cut.Flush();
  EXPECT_EQ(partial, tok->Decode(std::vector<int32_t>(ids.begin(), ids.begin() + i + 2)));
  EXPECT_EQ(partial, " Hi \uFFFD\uFFFD");
}

// tokenizer.json variants of the llama2 fixture that the importer must refuse,
// each naming the field.
TEST(SentencePieceBpe, ImportErrorsNameTheField) {
  const std::string path = kFixtures + "llama2/tokenizer.json";
  std::string original;
  {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    original = ss.str();
  }
  struct Case {
    std::string from, to, needle;
  };
  const Case cases[] = {
      {R"("start":1,"stop":0)", R"("start":1,"stop":1)", "field 'decoder.decoders[3].stop'"},
      {R"({"type":"ByteFallback"},{"type":"Fuse"})", R"({"type":"Fuse"},{"type":"ByteFallback"})",
       "field 'decoder.decoders[2]': ByteFallback after Fuse"},
      {R"("decoder":{"type":"Sequence")", R"("decoder":{"type":"ByteLevel")",
       "field 'decoder.type': ByteLevel with a pre-tokenizer that is not ByteLevel"},
      {R"("pre_tokenizer":null)",
       R"("pre_tokenizer":{"type":"Metaspace","replacement":"_","prepend_scheme":"first","add_prefix_space":false})",
       "field 'pre_tokenizer.add_prefix_space'"},
      {R"("pre_tokenizer":null)", R"("pre_tokenizer":{"type":"Digits"})",
       "field 'pre_tokenizer': no ByteLevel pre-tokenizer"},
  };
  const std::string tmp = ::testing::TempDir() + "/sp_import_tokenizer.json";
  for (const Case& c : cases) {
    const size_t at = original.find(c.from);
    ASSERT_NE(at, std::string::npos) << c.from;
    std::string changed = original;
    changed.replace(at, c.from.size(), c.to);
    std::ofstream(tmp) << changed;
    auto spec = LoadTokenizerJson(tmp, "");
    ASSERT_FALSE(spec.ok()) << c.needle;
    EXPECT_NE(spec.status().message().find(c.needle), std::string::npos) << spec.status().message();
  }
}

}  // namespace
}  // namespace xrt
