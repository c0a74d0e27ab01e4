#include "compiler/frontend/gguf_model_source.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include <gtest/gtest.h>

#include "compiler/frontend/decoder_tensors.h"
#include "compiler/frontend/test_util.h"
#include "runtime/tokenizer/tokenizer.h"

namespace xcc {
namespace {

using namespace testing;  // NOLINT: test helpers

bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

// Tiny model: D=32, 4 heads of 8, 2 kv heads, F=16, V=6, 1 layer.
constexpr int kD = 32, kH = 4, kKV = 2, kHd = 8, kF = 16, kV = 6;

std::vector<float> Iota(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + static_cast<float>(i);
  return v;
}

// HF -> GGUF row order, as llama.cpp's converter does it:
// w.reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2).reshape(rows, cols).
std::vector<int> PermutedRowOrder(int rows, int n_head) {
  int hd = rows / n_head, half = hd / 2;
  std::vector<int> order;  // order[gguf_row] = hf_row
  for (int h = 0; h < n_head; ++h)
    for (int i = 0; i < half; ++i)
      for (int j = 0; j < 2; ++j) order.push_back(h * hd + j * half + i);
  return order;
}

// The HF q_proj matrix of the tiny model: q[r][c] = (7r + c) % 100 - 50, exactly
// representable in Q8_0 with d = 1.
float HfQ(int r, int c) { return static_cast<float>((7 * r + c) % 100 - 50); }

std::string QAsPermutedQ8_0() {
  std::string bytes;
  for (int gr : PermutedRowOrder(kH * kHd, kH)) {  // one 32-value block per row
    Append<uint16_t>(&bytes, 0x3c00);              // d = 1
    for (int c = 0; c < kD; ++c) Append<int8_t>(&bytes, static_cast<int8_t>(HfQ(gr, c)));
  }
  return bytes;
}

// Rows of an F32 matrix in permuted order.
std::vector<float> PermuteRowsF32(const std::vector<float>& hf, int rows, int cols, int n_head) {
  std::vector<float> out;
  for (int r : PermutedRowOrder(rows, n_head)) {
    out.insert(out.end(), hf.begin() + r * cols, hf.begin() + (r + 1) * cols);
  }
  return out;
}

struct TinyOptions {
  std::string arch = "llama";
  bool output = false;                 // write output.weight
  bool bias = true;                    // q/k/v biases
  bool o_bias = false;                 // attn_output bias
  std::vector<std::string> extra_f32;  // more [kD] F32 tensors, by GGUF name
  bool permute = true;                 // store q/k permuted (llama convention)
  std::string skip_key;                // metadata key to leave out
  std::vector<uint64_t> k_ne = {kD, kKV* kHd};
  std::vector<float> rope_freqs;  // written as rope_freqs.weight [size] when not empty
  std::vector<std::pair<std::string, float>> extra_f32_keys;  // more float metadata
  // Writes the tokenizer.ggml.* keys instead of the default 6-token vocabulary
  // and returns the vocabulary size.
  std::function<uint64_t(GgufWriter&)> tokenizer;
};

std::string TinyGguf(const TinyOptions& o = TinyOptions()) {
  GgufWriter w;
  const std::string a = o.arch;
  auto u32 = [&](const std::string& k, uint32_t v) {
    if (k != o.skip_key) w.KvU32(k, v);
  };
  auto f32 = [&](const std::string& k, float v) {
    if (k != o.skip_key) w.KvF32(k, v);
  };
  w.KvString("general.architecture", a);
  w.KvString("general.name", "tiny");
  u32(a + ".embedding_length", kD);
  u32(a + ".block_count", 1);
  u32(a + ".feed_forward_length", kF);
  u32(a + ".attention.head_count", kH);
  u32(a + ".attention.head_count_kv", kKV);
  u32(a + ".context_length", 128);
  u32(a + ".rope.dimension_count", kHd);
  f32(a + ".rope.freq_base", 100000.0f);
  f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  uint64_t vocab = kV;
  if (o.tokenizer) {
    vocab = o.tokenizer(w);
  } else {
    w.KvString("tokenizer.ggml.model", "gpt2");
    w.KvString("tokenizer.ggml.pre", "smollm");
    w.KvStringArray("tokenizer.ggml.tokens",
                    {"a", "b", "ab", "<|endoftext|>", "<|im_start|>", "<|im_end|>"});
    w.KvI32Array("tokenizer.ggml.token_type", {1, 1, 1, 3, 3, 3});
    w.KvStringArray("tokenizer.ggml.merges", {"a b"});
    w.KvU32("tokenizer.ggml.bos_token_id", 4);
    w.KvU32("tokenizer.ggml.eos_token_id", 3);
    w.KvU32("tokenizer.ggml.eot_token_id", 5);
    w.KvBool("tokenizer.ggml.add_bos_token", false);
  }
  w.KvString("tokenizer.chat_template", "{{ messages }}");

  w.Tensor("token_embd.weight", {kD, vocab}, kTF32, Bytes(Iota(kD * vocab, 0)));
  w.TensorF32("blk.0.attn_norm.weight", {kD}, Iota(kD, 1));
  if (o.permute) {
    w.Tensor("blk.0.attn_q.weight", {kD, kH * kHd}, kTQ8_0, QAsPermutedQ8_0());
  } else {
    std::string bytes;
    for (int r = 0; r < kH * kHd; ++r) {
      Append<uint16_t>(&bytes, 0x3c00);
      for (int c = 0; c < kD; ++c) Append<int8_t>(&bytes, static_cast<int8_t>(HfQ(r, c)));
    }
    w.Tensor("blk.0.attn_q.weight", {kD, kH * kHd}, kTQ8_0, bytes);
  }
  std::vector<float> k = Iota(kKV * kHd * kD, 200);
  std::vector<float> qb = Iota(kH * kHd, 0), kb = Iota(kKV * kHd, 50);
  if (o.permute) {
    k = PermuteRowsF32(k, kKV * kHd, kD, kKV);
    qb = PermuteRowsF32(qb, kH * kHd, 1, kH);
    kb = PermuteRowsF32(kb, kKV * kHd, 1, kKV);
  }
  w.Tensor("blk.0.attn_k.weight", o.k_ne, kTF32, Bytes(k));
  w.TensorF32("blk.0.attn_v.weight", {kD, kKV * kHd}, Iota(kKV * kHd * kD, 300));
  if (o.bias) {
    w.TensorF32("blk.0.attn_q.bias", {kH * kHd}, qb);
    w.TensorF32("blk.0.attn_k.bias", {kKV * kHd}, kb);
    w.TensorF32("blk.0.attn_v.bias", {kKV * kHd}, Iota(kKV * kHd, 70));
  }
  w.TensorF32("blk.0.attn_output.weight", {kH * kHd, kD}, Iota(kD * kH * kHd, 400));
  if (o.o_bias) w.TensorF32("blk.0.attn_output.bias", {kD}, Iota(kD, 450));
  for (const std::string& name : o.extra_f32) w.TensorF32(name, {kD}, Iota(kD, 0));
  if (!o.rope_freqs.empty()) w.TensorF32("rope_freqs.weight", {o.rope_freqs.size()}, o.rope_freqs);
  for (const auto& [key, value] : o.extra_f32_keys) w.KvF32(key, value);
  w.TensorF32("blk.0.ffn_norm.weight", {kD}, Iota(kD, 2));
  w.TensorF32("blk.0.ffn_gate.weight", {kD, kF}, Iota(kD * kF, 500));
  w.TensorF32("blk.0.ffn_up.weight", {kD, kF}, Iota(kD * kF, 600));
  w.TensorF32("blk.0.ffn_down.weight", {kF, kD}, Iota(kD * kF, 700));
  w.TensorF32("output_norm.weight", {kD}, Iota(kD, 3));
  if (o.output) w.TensorF32("output.weight", {kD, vocab}, Iota(kD * vocab, 800));
  return w.Build();
}

Expected<std::unique_ptr<ModelSource>> OpenTiny(const TempDir& dir, const TinyOptions& o) {
  WriteFile(dir.File("tiny.gguf"), TinyGguf(o));
  return ModelSource::Open(dir.File("tiny.gguf"));
}

TEST(GgufModelSourceTest, OpensTinyLlama) {
  TempDir dir;
  Expected<std::unique_ptr<ModelSource>> src = OpenTiny(dir, TinyOptions());
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const ModelSource& m = **src;
  // vocab from the token list; sizes kV, kD, kF, kH, kKV, kHd.
  EXPECT_EQ(DescribeDecoderConfig(m.config()),
            "LlamaForCausalLM vocab 6 hidden 32 intermediate 16 layers 1 heads 4 kv_heads 2 "
            "head_dim 8 max_pos 128 rms_eps 1e-05 rope_theta 100000 rope_scaling none x1 "
            "tied yes qkv_bias yes o_bias no act silu sliding_window 0");
  EXPECT_EQ(m.generation().eos_token_ids, (std::vector<int32_t>{3, 5}));
  EXPECT_EQ(m.chat_template(), "{{ messages }}");
  EXPECT_EQ(m.input_files(), (std::vector<std::string>{dir.File("tiny.gguf")}));
  EXPECT_TRUE(ValidateDecoderTensors(m).ok());

  std::vector<std::string> names = m.tensor_names();
  EXPECT_EQ(
      names,
      (std::vector<std::string>{
          "model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
          "model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.gate_proj.weight",
          "model.layers.0.mlp.up_proj.weight", "model.layers.0.post_attention_layernorm.weight",
          "model.layers.0.self_attn.k_proj.bias", "model.layers.0.self_attn.k_proj.weight",
          "model.layers.0.self_attn.o_proj.weight", "model.layers.0.self_attn.q_proj.bias",
          "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.v_proj.bias",
          "model.layers.0.self_attn.v_proj.weight", "model.norm.weight"}));

  Expected<const SourceTensor*> embed = m.tensor("model.embed_tokens.weight");
  ASSERT_TRUE(embed.ok());
  EXPECT_EQ((*embed)->shape, (std::vector<int64_t>{kV, kD}));  // reversed from ne
  Expected<const SourceTensor*> down = m.tensor("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(down.ok());
  EXPECT_EQ((*down)->shape, (std::vector<int64_t>{kD, kF}));
  Expected<std::vector<float>> d = m.ReadF32("model.layers.0.mlp.down_proj.weight");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, Iota(kD * kF, 700));

  // q (Q8_0) comes back in HF row order.
  Expected<const SourceTensor*> qt = m.tensor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(qt.ok());
  EXPECT_EQ((*qt)->dtype, SourceDType::kQ8_0);
  EXPECT_EQ((*qt)->shape, (std::vector<int64_t>{kH * kHd, kD}));
  Expected<std::vector<float>> q = m.ReadF32("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  for (int r = 0; r < kH * kHd; ++r)
    for (int cc = 0; cc < kD; ++cc) ASSERT_EQ((*q)[r * kD + cc], HfQ(r, cc)) << r << "," << cc;
  // The raw bytes are un-permuted too: row 1 of HF is the block with q = HfQ(1, .).
  EXPECT_EQ(static_cast<int8_t>((*qt)->data[34 + 2]), static_cast<int8_t>(HfQ(1, 0)));

  // k uses num_key_value_heads for the permutation; biases are un-permuted as well.
  Expected<std::vector<float>> k = m.ReadF32("model.layers.0.self_attn.k_proj.weight");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, Iota(kKV * kHd * kD, 200));
  Expected<std::vector<float>> qb = m.ReadF32("model.layers.0.self_attn.q_proj.bias");
  ASSERT_TRUE(qb.ok());
  EXPECT_EQ(*qb, Iota(kH * kHd, 0));
  Expected<std::vector<float>> kb = m.ReadF32("model.layers.0.self_attn.k_proj.bias");
  ASSERT_TRUE(kb.ok());
  EXPECT_EQ(*kb, Iota(kKV * kHd, 50));
  Expected<std::vector<float>> v = m.ReadF32("model.layers.0.self_attn.v_proj.weight");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, Iota(kKV * kHd * kD, 300));  // v is never permuted
}

TEST(GgufModelSourceTest, HandComputedPermutation) {
  // head_dim 4: llama.cpp stores each head's rows as [0, 2, 1, 3].
  EXPECT_EQ(PermutedRowOrder(8, 2), (std::vector<int>{0, 2, 1, 3, 4, 6, 5, 7}));
  const uint8_t in[8] = {0, 2, 1, 3, 4, 6, 5, 7};
  uint8_t out[8];
  ASSERT_TRUE(UnpermuteRotaryRows(in, 1, 8, 2, out).ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], i);
  EXPECT_FALSE(UnpermuteRotaryRows(in, 1, 6, 2, out).ok());
  EXPECT_FALSE(UnpermuteRotaryRows(in, 1, 8, 0, out).ok());
}

TEST(GgufModelSourceTest, Qwen2IsNotPermuted) {
  TempDir dir;
  TinyOptions o;
  o.arch = "qwen2";
  o.permute = false;
  o.output = true;
  Expected<std::unique_ptr<ModelSource>> src = OpenTiny(dir, o);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_EQ((*src)->config().architecture, "Qwen2ForCausalLM");
  EXPECT_FALSE((*src)->config().tie_word_embeddings);
  Expected<std::vector<float>> q = (*src)->ReadF32("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)[1 * kD], HfQ(1, 0));
  Expected<std::vector<float>> k = (*src)->ReadF32("model.layers.0.self_attn.k_proj.weight");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(*k, Iota(kKV * kHd * kD, 200));
  Expected<std::vector<float>> lm = (*src)->ReadF32("lm_head.weight");
  ASSERT_TRUE(lm.ok());
  EXPECT_EQ(*lm, Iota(kD * kV, 800));

  o.bias = false;
  src = OpenTiny(dir, o);
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "blk.0.attn_q.bias")) << src.status().message();
}

TEST(GgufModelSourceTest, MissingKeyNamesFileAndKey) {
  TempDir dir;
  TinyOptions o;
  o.skip_key = "llama.embedding_length";
  Expected<std::unique_ptr<ModelSource>> src = OpenTiny(dir, o);
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(),
                       dir.File("tiny.gguf") + ": key 'llama.embedding_length': missing"))
      << src.status().message();
  o.skip_key = "llama.attention.layer_norm_rms_epsilon";
  src = OpenTiny(dir, o);
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "llama.attention.layer_norm_rms_epsilon"));
}

TEST(GgufModelSourceTest, UnknownArchitecture) {
  TempDir dir;
  TinyOptions o;
  o.arch = "gpt2";
  Expected<std::unique_ptr<ModelSource>> src = OpenTiny(dir, o);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), xrt::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(src.status().message(), "unsupported architecture 'gpt2'"))
      << src.status().message();
}

TEST(GgufModelSourceTest, WrongShapeNamesHfTensor) {
  TempDir dir;
  TinyOptions o;
  o.k_ne = {kKV * kHd, kD};  // transposed
  Expected<std::unique_ptr<ModelSource>> src = OpenTiny(dir, o);
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "tensor 'model.layers.0.self_attn.k_proj.weight'"))
      << src.status().message();
  EXPECT_TRUE(Contains(src.status().message(), "shape [32, 16], expected [16, 32]"))
      << src.status().message();
}

TEST(GgufModelSourceTest, TruncatedModelFile) {
  TempDir dir;
  std::string bytes = TinyGguf();
  WriteFile(dir.File("cut.gguf"), bytes.substr(0, bytes.size() - 100));
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.File("cut.gguf"));
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), xrt::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(src.status().message(), "cut.gguf")) << src.status().message();
  // GGUF magic without the extension is still recognized.
  WriteFile(dir.File("model.bin"), bytes);
  src = ModelSource::Open(dir.File("model.bin"));
  EXPECT_TRUE(src.ok()) << src.status().ToString();
  // .gguf extension with the wrong magic gives the GGUF reader's error.
  WriteFile(dir.File("x.gguf"), "not a gguf file at all");
  src = ModelSource::Open(dir.File("x.gguf"));
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(), "bad magic")) << src.status().message();
}

// Random byte corruption of a valid file: every outcome is a model or an error
// with a message, never a crash (run under ASan to make this meaningful).
TEST(GgufModelSourceTest, CorruptedBytesNeverCrash) {
  TempDir dir;
  const std::string good = TinyGguf();
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  auto next = [&]() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
  };
  int errors = 0;
  for (int iter = 0; iter < 300; ++iter) {
    std::string bytes = good;
    int flips = 1 + static_cast<int>(next() % 4);
    for (int f = 0; f < flips; ++f) {
      // Mostly corrupt the header/metadata/tensor-info region, where parsing happens.
      size_t limit = (next() % 4 == 0) ? bytes.size() : std::min<size_t>(bytes.size(), 1200);
      bytes[next() % limit] = static_cast<char>(next() & 0xff);
    }
    WriteFile(dir.File("fuzz.gguf"), bytes);
    Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(dir.File("fuzz.gguf"));
    if (!src.ok()) {
      ++errors;
      EXPECT_FALSE(src.status().message().empty());
      continue;
    }
    for (const std::string& name : (*src)->tensor_names()) {
      Expected<std::vector<float>> v = (*src)->ReadF32(name);
      EXPECT_TRUE(v.ok()) << v.status().ToString();
    }
  }
  EXPECT_GT(errors, 0);
}

nlohmann::json ReadFixture(const std::string& relative) {
  std::ifstream in(std::string(XCC_SOURCE_DIR) + "/tests/fixtures/" + relative);
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

// A byte-level BPE tokenizer.json converted to GGUF metadata the way
// convert_hf_to_gguf.py does (one token list, added tokens typed CONTROL or
// USER_DEFINED and stored as their text), with the added-token table and
// tokenizer.ggml.pre of `expected` (tests/fixtures/tokenizer/<name>/gguf_expected.json).
// No tokenizer.ggml.add_bos_token key is written: llama.cpp's default applies.
std::function<uint64_t(GgufWriter&)> GgufTokenizerFrom(const nlohmann::json& tokenizer_json,
                                                       const nlohmann::json& expected) {
  return [&tokenizer_json, &expected](GgufWriter& w) -> uint64_t {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (const auto& [text, id] : tokenizer_json["model"]["vocab"].items()) {
      const size_t i = id.get<size_t>();
      if (i >= tokens.size()) tokens.resize(i + 1), types.resize(i + 1, 1);
      tokens[i] = text;
    }
    for (const auto& t : expected["added_tokens"]) {
      const size_t i = t["id"].get<size_t>();
      if (i >= tokens.size()) tokens.resize(i + 1), types.resize(i + 1, 1);
      tokens[i] = t["content"].get<std::string>();
      types[i] = t["type"].get<int32_t>();
    }
    std::vector<std::string> merges;
    for (const auto& m : tokenizer_json["model"]["merges"]) {
      merges.push_back(m.is_string() ? m.get<std::string>()
                                     : m[0].get<std::string>() + " " + m[1].get<std::string>());
    }
    w.KvString("tokenizer.ggml.model", "gpt2");
    w.KvString("tokenizer.ggml.pre", expected["pre"].get<std::string>());
    w.KvStringArray("tokenizer.ggml.tokens", tokens);
    w.KvI32Array("tokenizer.ggml.token_type", types);
    w.KvStringArray("tokenizer.ggml.merges", merges);
    if (!expected["bos_token_id"].is_null()) {
      w.KvU32("tokenizer.ggml.bos_token_id", expected["bos_token_id"].get<uint32_t>());
    }
    return tokens.size();
  };
}

// A GGUF vocabulary encodes like Hugging Face `tokenizers` on the equivalent
// tokenizer (tests/gen_tokenizer_fixtures.py): llama-bpe implies ignore_merges
// and, with add_bos_token absent, a BOS; qwen2 implies NFC; control tokens
// spelled outside the byte-level alphabet (DeepSeek-R1's <｜User｜>) are single tokens.
class GgufTokenizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufTokenizerTest, EncodesLikeHuggingFace) {
  const nlohmann::json tokenizer_json = ReadFixture("tokenizer/" + GetParam() + "/tokenizer.json");
  const nlohmann::json expected = ReadFixture("tokenizer/" + GetParam() + "/gguf_expected.json");
  TempDir dir;
  TinyOptions o;
  o.tokenizer = GgufTokenizerFrom(tokenizer_json, expected);
  Expected<std::unique_ptr<ModelSource>> src = OpenTiny(dir, o);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  Expected<xrt::Tokenizer> tok = xrt::Tokenizer::Create((*src)->tokenizer());
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ASSERT_GE(expected["cases"].size(), 25u);
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->Encode(text, /*add_special_tokens=*/true), ids) << "text: " << text;
    EXPECT_EQ(tok->Decode(ids, false), c["decoded"].get<std::string>()) << "text: " << text;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufTokenizerTest, ::testing::Values("llama3", "qwen2"));

// llama.cpp loads blk.N.attn_output.bias for llama, never for qwen2; any
// tensor the graph does not read is an error naming it, as llama.cpp's
// "wrong number of tensors".
TEST(GgufModelSourceTest, AttentionOutputBiasAndUnusedTensors) {
  TempDir dir;
  TinyOptions o;
  o.o_bias = true;
  Expected<std::unique_ptr<ModelSource>> src = OpenTiny(dir, o);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  EXPECT_TRUE((*src)->config().attention_output_bias);
  Expected<std::vector<float>> ob = (*src)->ReadF32("model.layers.0.self_attn.o_proj.bias");
  ASSERT_TRUE(ob.ok()) << ob.status().ToString();
  EXPECT_EQ(*ob, Iota(kD, 450));
  EXPECT_TRUE(ValidateDecoderTensors(**src).ok());

  o.arch = "qwen2";
  o.permute = false;
  src = OpenTiny(dir, o);
  ASSERT_FALSE(src.ok());
  EXPECT_EQ(src.status().code(), xrt::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(src.status().message(),
                       "'model.layers.0.self_attn.o_proj.bias' (" + dir.File("tiny.gguf") + ")"))
      << src.status().message();

  TinyOptions extra;
  extra.extra_f32 = {"blk.0.attn_rot_embd.weight", "blk.0.ffn_down.bias"};
  src = OpenTiny(dir, extra);
  ASSERT_FALSE(src.ok());
  EXPECT_TRUE(Contains(src.status().message(),
                       "2 tensor(s) the LlamaForCausalLM decoder graph "
                       "does not use"))
      << src.status().message();
  EXPECT_TRUE(Contains(src.status().message(), "'blk.0.attn_rot_embd.weight'"));
  EXPECT_TRUE(Contains(src.status().message(), "'model.layers.0.mlp.down_proj.bias'"));
}

// rope_freqs.weight (llama.cpp's Llama 3 rope scaling) becomes the config's
// freq_factors, not a tensor of the model; a wrong shape, a factor that is not
// positive, or a second rope scaling is an error naming the tensor.
TEST(GgufModelSourceTest, RopeFreqsBecomeFreqFactors) {
  TempDir dir;
  TinyOptions o;
  o.rope_freqs = {1.0f, 1.5f, 4.0f, 8.0f};  // head_dim 8: 4 frequencies
  Expected<std::unique_ptr<ModelSource>> src = OpenTiny(dir, o);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const RopeScaling& r = (*src)->config().rope_scaling;
  EXPECT_EQ(r.type, "freq_factors");
  EXPECT_EQ(r.freq_factors, o.rope_freqs);
  for (const std::string& name : (*src)->tensor_names()) EXPECT_EQ(name.find("rope"), name.npos);
  EXPECT_TRUE(ValidateDecoderTensors(**src).ok());

  auto error = [&](const TinyOptions& bad) {
    Expected<std::unique_ptr<ModelSource>> s = OpenTiny(dir, bad);
    EXPECT_FALSE(s.ok());
    return s.ok() ? std::string() : s.status().message();
  };
  TinyOptions bad = o;
  bad.rope_freqs = {1.0f, 2.0f};
  EXPECT_TRUE(Contains(error(bad), "tensor 'rope_freqs.weight': shape [2], expected [4]"))
      << error(bad);
  bad.rope_freqs = {1.0f, 0.0f, 2.0f, 3.0f};
  EXPECT_TRUE(Contains(error(bad), "tensor 'rope_freqs.weight': factor 1 is 0"));
  bad.rope_freqs = {1.0f, 2.0f, -std::numeric_limits<float>::infinity(), 3.0f};
  EXPECT_TRUE(Contains(error(bad), "factor 2 is -inf"));
  bad = o;
  bad.extra_f32_keys = {{"llama.rope.scaling.factor", 4.0f}};
  bad.extra_f32_keys.push_back({"llama.rope.scale_linear", 4.0f});
  EXPECT_TRUE(Contains(error(bad), "both scale the rope frequencies")) << error(bad);
}

TEST(GgufModelSourceTest, NameMapping) {
  EXPECT_EQ(GgufToHfTensorName("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(GgufToHfTensorName("output.weight"), "lm_head.weight");
  EXPECT_EQ(GgufToHfTensorName("output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(GgufToHfTensorName("blk.12.attn_output.weight"),
            "model.layers.12.self_attn.o_proj.weight");
  EXPECT_EQ(GgufToHfTensorName("blk.3.attn_v.bias"), "model.layers.3.self_attn.v_proj.bias");
  EXPECT_EQ(GgufToHfTensorName("blk.0.ffn_norm.weight"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(GgufToHfTensorName("blk.0.attn_norm.weight"), "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(GgufToHfTensorName("blk.1.ffn_gate.weight"), "model.layers.1.mlp.gate_proj.weight");
  EXPECT_EQ(GgufToHfTensorName("blk.x.attn_q.weight"), "blk.x.attn_q.weight");
  EXPECT_EQ(GgufToHfTensorName("rope_freqs.weight"), "rope_freqs.weight");
}

// The real SmolLM2-135M-Instruct Q4_1 file, when XCC_SMOLLM2_GGUF points to it.
TEST(GgufModelSourceTest, SmolLM2) {
  const char* path = std::getenv("XCC_SMOLLM2_GGUF");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "XCC_SMOLLM2_GGUF not set";
  Expected<std::unique_ptr<ModelSource>> src = ModelSource::Open(path);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  const ModelSource& m = **src;
  EXPECT_EQ(DescribeDecoderConfig(m.config()),
            "LlamaForCausalLM vocab 49152 hidden 576 intermediate 1536 layers 30 heads 9 "
            "kv_heads 3 head_dim 64 max_pos 8192 rms_eps 1e-05 rope_theta 100000 rope_scaling "
            "none x1 tied yes qkv_bias no o_bias no act silu sliding_window 0");
  EXPECT_FALSE(m.chat_template().empty());
  EXPECT_FALSE(m.generation().eos_token_ids.empty());
  EXPECT_EQ(m.tokenizer().vocab.size(), 49152u);
  EXPECT_EQ(m.tensor_names().size(), 1u + 30u * 9u + 1u);

  Expected<const SourceTensor*> q = m.tensor("model.layers.0.self_attn.q_proj.weight");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ((*q)->dtype, SourceDType::kQ4_1);
  EXPECT_EQ((*q)->shape, (std::vector<int64_t>{576, 576}));
  for (const char* name : {"model.layers.0.self_attn.q_proj.weight",
                           "model.layers.29.mlp.down_proj.weight", "model.embed_tokens.weight"}) {
    Expected<std::vector<float>> w = m.ReadF32(name);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    double sum_sq = 0;
    for (float x : *w) {
      ASSERT_TRUE(std::isfinite(x)) << name;
      sum_sq += static_cast<double>(x) * x;
    }
    EXPECT_GT(sum_sq, 0.0) << name;
  }
}

}  // namespace
}  // namespace xcc
