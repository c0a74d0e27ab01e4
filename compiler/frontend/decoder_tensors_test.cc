// ValidateDecoderTensors on a model whose layer count does not fit its tensors.
#include "compiler/frontend/decoder_tensors.h"

#include <gtest/gtest.h>

#include "compiler/frontend/test_util.h"

namespace xcc {
namespace {

using namespace testing;  // NOLINT: test helpers

// A GGUF llama with `block_count` layers in its metadata but the tensors of none: the
// embeddings and the final norm only.
std::string GgufClaimingLayers(uint32_t block_count) {
  constexpr uint64_t kD = 32, kV = 4;
  GgufWriter w;
  w.KvString("general.architecture", "llama");
  w.KvU32("llama.embedding_length", kD);
  w.KvU32("llama.block_count", block_count);
  w.KvU32("llama.feed_forward_length", 32);
  w.KvU32("llama.attention.head_count", 4);
  w.KvU32("llama.attention.head_count_kv", 2);
  w.KvU32("llama.context_length", 64);
  w.KvF32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
  w.KvString("tokenizer.ggml.model", "gpt2");
  w.KvStringArray("tokenizer.ggml.tokens", {"a", "b", "ab", "<|endoftext|>"});
  w.KvStringArray("tokenizer.ggml.merges", {"a b"});
  w.TensorF32("token_embd.weight", {kD, kV}, std::vector<float>(kD * kV, 0.5f));
  w.TensorF32("output_norm.weight", {kD}, std::vector<float>(kD, 1.0f));
  return w.Build();
}

// More layers than tensors: the error says so, instead of naming the first of the
// missing tensors.
TEST(DecoderTensorsTest, MoreLayersThanTensorsIsAnError) {
  TempDir dir;
  WriteFile(dir.File("m.gguf"), GgufClaimingLayers(1000));
  auto m = ModelSource::Open(dir.File("m.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), xrt::StatusCode::kInvalidArgument) << m.status().ToString();
  EXPECT_NE(
      m.status().message().find("num_hidden_layers is 1000, but the model has only 2 tensors"),
      std::string::npos)
      << m.status().message();
}

// Found by tests/fuzz/gguf_fuzzer: a corrupt block_count of ~10^9 made the check build
// ~10^10 tensor specs (minutes of work and all the memory) before reporting anything.
TEST(DecoderTensorsTest, CorruptHugeLayerCountFailsFast) {
  TempDir dir;
  WriteFile(dir.File("m.gguf"), GgufClaimingLayers(0x3d000001));
  auto m = ModelSource::Open(dir.File("m.gguf"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("num_hidden_layers is 1023410177"), std::string::npos)
      << m.status().message();
}

}  // namespace
}  // namespace xcc
