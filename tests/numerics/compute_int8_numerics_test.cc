// `xcc compile --compute int8` on every decoder fixture: its deviation from the
// same quantized weights computed in float32, and batch invariance.
//
// Each fixture is compiled with --weight-dtype q8_0 and q4_0 (int8 compute
// multiplies the integer quants of those formats; f32 weights would compute in
// f32), and each GGUF fixture with auto too (its own tensors' formats: q4_0,
// q4_1, q5_0, q5_1, q8_0, the K-quants; its f16 / bf16 / f32 ones compute in
// f32), as a wide and a 16-token chunked int8 artifact, and as a wide
// f32-compute artifact of the same weights. The kernel's arithmetic is checked bit for bit
// against its contract in runtime/kernels/matmul_int8_test.cc; here:
//  - the wide and chunked int8 artifacts give bit-identical logits and tokens;
//  - the last-position logits stay within kMaxDeviation of f32 compute on the
//    same weights, and differ from them (the mode is on);
//  - the deviation and the greedy agreement with f32 compute are printed (the
//    README's "int8 compute" table);
//  - xrt's default KV cache ("auto") is f16 for the int8 artifacts and f32 for the
//    f32-compute ones, and the int8 artifact on its default cache stays within the
//    same bound (its deviation and agreement are printed too).
#include <cmath>
#include <cstdio>
#include <optional>

#include <gtest/gtest.h>

#include "runtime/executor/model_runner.h"
#include "tests/numerics/decoder_artifacts.h"
#include "tests/numerics/fixture_io.h"
#include "tests/numerics/greedy.h"

namespace {

using xcc::testing::LeadingAgreement;
using xcc::testing::MaxAbsDiff;
using xrt::KvCacheDtype;

// The largest deviation as a share of the largest |logit| of f32 compute.
// Measured at most 15.7% (gguf/kquants as q4_0) on these random models; about twice that.
constexpr float kMaxRelativeDeviation = 0.3f;
constexpr size_t kTokens = 32;

std::vector<std::vector<int32_t>> Prompts(const std::string& fixture) {
  const auto ref =
      xcc::testing::ReadJson(xcc::testing::DecoderFixtureDir(fixture) / "reference.json");
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& p : ref["prompts"]) prompts.push_back(p["ids"].get<std::vector<int32_t>>());
  return prompts;
}

// Greedy on every prompt; `cache`: the KV cache asked for (std::nullopt: "auto",
// expected to choose `auto_cache`).
std::vector<xcc::testing::GreedyResult> RunAll(
    const std::string& artifact, const std::vector<std::vector<int32_t>>& prompts,
    std::optional<KvCacheDtype> cache = KvCacheDtype::kF32,
    KvCacheDtype auto_cache = KvCacheDtype::kF32) {
  std::vector<xcc::testing::GreedyResult> out;
  auto engine = xcc::testing::OpenEngine(artifact, cache);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return out;
  EXPECT_EQ(engine->runner->kv_cache_dtype(), cache.value_or(auto_cache))
      << artifact << ": the KV cache \"auto\" chose";
  for (const auto& ids : prompts) {
    out.push_back(xcc::testing::Greedy(*engine->core, ids, kTokens));
    EXPECT_TRUE(out.back().status.ok()) << out.back().status.ToString();
  }
  return out;
}

TEST(ComputeInt8, CloseToF32OnTheSameWeightsAndBatchInvariant) {
  std::printf(
      "| fixture | weights | max abs logit deviation from f32 compute (of max |logit|) | "
      "greedy tokens as f32 compute's | with the default (f16) KV cache: deviation | "
      "greedy tokens |\n");
  for (const std::string dtype : {"q8_0", "q4_0", "auto"}) {
    float deviation = 0;
    for (const std::string& name : xcc::testing::kDecoderFixtures) {
      if (dtype == "auto" && !xcc::testing::IsGgufFixture(name)) continue;  // f32 weights
      SCOPED_TRACE(name + " " + dtype);
      const auto prompts = Prompts(name);
      // Own directories: another test compiles the fixtures' auto f32 artifacts.
      auto int8 = xcc::testing::CompileDecoderFixture(name, "int8", dtype, "int8_deviation");
      ASSERT_TRUE(int8.ok()) << int8.status().ToString();
      auto f32 = xcc::testing::CompileDecoderFixture(name, "f32", dtype, "int8_deviation");
      ASSERT_TRUE(f32.ok()) << f32.status().ToString();
      const auto wide = RunAll(int8->wide, prompts);
      const auto chunked = RunAll(int8->chunked, prompts);
      const auto served = RunAll(int8->wide, prompts, std::nullopt, KvCacheDtype::kF16);
      const auto base = RunAll(f32->wide, prompts, std::nullopt, KvCacheDtype::kF32);
      ASSERT_EQ(wide.size(), prompts.size());
      ASSERT_EQ(chunked.size(), prompts.size());
      ASSERT_EQ(served.size(), prompts.size());
      ASSERT_EQ(base.size(), prompts.size());
      float fixture_dev = 0, fixture_rel = 0, served_rel = 0;
      size_t agree = 0, served_agree = 0, tokens = 0;
      for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_TRUE(wide[i].prompt_logits == chunked[i].prompt_logits &&
                    wide[i].tokens == chunked[i].tokens)
            << "prompt " << i << ": the chunked int8 artifact differs from the wide one";
        const float dev = MaxAbsDiff(wide[i].prompt_logits, base[i].prompt_logits);
        float scale = 0;
        for (float x : base[i].prompt_logits) scale = std::max(scale, std::fabs(x));
        EXPECT_LE(dev, kMaxRelativeDeviation * scale) << "prompt " << i;
        const float served_dev = MaxAbsDiff(served[i].prompt_logits, base[i].prompt_logits);
        EXPECT_LE(served_dev, kMaxRelativeDeviation * scale) << "prompt " << i << ", f16 cache";
        fixture_dev = std::max(fixture_dev, dev);
        fixture_rel = std::max(fixture_rel, dev / scale);
        served_rel = std::max(served_rel, served_dev / scale);
        agree += LeadingAgreement(wide[i].tokens, base[i].tokens);
        served_agree += LeadingAgreement(served[i].tokens, base[i].tokens);
        tokens += wide[i].tokens.size();
      }
      std::printf("| %s | %s | %.3f (%.1f%%) | %zu / %zu | %.1f%% | %zu / %zu |\n", name.c_str(),
                  dtype.c_str(), fixture_dev, 100 * fixture_rel, agree, tokens, 100 * served_rel,
                  served_agree, tokens);
      deviation = std::max(deviation, fixture_dev);
    }
    EXPECT_GT(deviation, 1e-3f) << dtype << ": int8 compute gives f32's logits: is it on?";
  }
}

}  // namespace
