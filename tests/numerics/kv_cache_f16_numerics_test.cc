// `xrt --kv-cache-dtype f16` on every decoder fixture: its deviation from the f32
// cache and from HF transformers, and batch invariance.
//
// The attention kernel's arithmetic with a half cache is checked bit for bit in
// runtime/kernels/attention_test.cc (the f32 path on half-rounded K/V); here, on
// the f32-compute artifacts of decoder_numerics_test:
//  - the wide artifact and the chunked one (prompts prefilled in 16-token chunks,
//    reading the earlier chunks' K/V back from the cache) give bit-identical
//    logits and tokens;
//  - the last-position logits stay within kMaxDeviation of the f32 cache's, and
//    differ from them (the mode is on);
//  - the deviation from HF's logits and the greedy agreement with HF and with the
//    f32 cache are printed (the README's KV cache table).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include <gtest/gtest.h>

#include "runtime/executor/model_runner.h"
#include "tests/numerics/decoder_artifacts.h"
#include "tests/numerics/fixture_io.h"
#include "tests/numerics/greedy.h"

namespace {

using xcc::testing::LeadingAgreement;
using xcc::testing::MaxAbsDiff;
using xrt::KvCacheDtype;

// The largest deviation as a share of the largest |logit| with the f32 cache.
// Half's relative step is 2^-11 (0.05%); measured at most 0.17% (llama_tied) on these
// random models; about 2.4 times that.
constexpr float kMaxRelativeDeviation = 0.004f;
constexpr size_t kTokens = 32;

TEST(KvCacheF16, CloseToTheF32CacheAndBatchInvariant) {
  std::printf(
      "| fixture | max abs logit deviation from the f32 cache (of max |logit|) | from HF | greedy "
      "tokens as the "
      "f32 cache's | as HF's |\n");
  float deviation = 0;
  for (const std::string& name : xcc::testing::kDecoderFixtures) {
    SCOPED_TRACE(name);
    const auto ref =
        xcc::testing::ReadJson(xcc::testing::DecoderFixtureDir(name) / "reference.json");
    auto a = xcc::testing::CompileDecoderFixture(name, "f32", "auto", "kv_f16");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    auto wide16 = xcc::testing::OpenEngine(a->wide, KvCacheDtype::kF16);
    auto chunked16 = xcc::testing::OpenEngine(a->chunked, KvCacheDtype::kF16);
    auto wide32 = xcc::testing::OpenEngine(a->wide, KvCacheDtype::kF32);
    ASSERT_TRUE(wide16.ok()) << wide16.status().ToString();
    ASSERT_TRUE(chunked16.ok()) << chunked16.status().ToString();
    ASSERT_TRUE(wide32.ok()) << wide32.status().ToString();
    float dev = 0, rel = 0, dev_hf = 0;
    size_t agree = 0, agree_hf = 0, tokens = 0;
    for (const auto& p : ref["prompts"]) {
      const auto ids = p["ids"].get<std::vector<int32_t>>();
      const auto w16 = xcc::testing::Greedy(*wide16->core, ids, kTokens);
      const auto c16 = xcc::testing::Greedy(*chunked16->core, ids, kTokens);
      const auto w32 = xcc::testing::Greedy(*wide32->core, ids, kTokens);
      ASSERT_TRUE(w16.status.ok()) << w16.status.ToString();
      ASSERT_TRUE(c16.status.ok()) << c16.status.ToString();
      ASSERT_TRUE(w32.status.ok()) << w32.status.ToString();
      EXPECT_TRUE(w16.prompt_logits == c16.prompt_logits && w16.tokens == c16.tokens)
          << "the chunked artifact differs from the wide one with an f16 cache";
      const float d = MaxAbsDiff(w16.prompt_logits, w32.prompt_logits);
      float scale = 0;
      for (float x : w32.prompt_logits) scale = std::max(scale, std::fabs(x));
      EXPECT_LE(d, kMaxRelativeDeviation * scale);
      dev = std::max(dev, d);
      rel = std::max(rel, d / scale);
      dev_hf = std::max(dev_hf,
                        MaxAbsDiff(w16.prompt_logits, p["last_logits"].get<std::vector<float>>()));
      agree += LeadingAgreement(w16.tokens, w32.tokens);
      agree_hf += LeadingAgreement(w16.tokens, p["greedy_ids"].get<std::vector<int32_t>>());
      tokens += w16.tokens.size();
    }
    std::printf("| %s | %.2g (%.2f%%) | %.2g | %zu / %zu | %zu / %zu |\n", name.c_str(), dev,
                100 * rel, dev_hf, agree, tokens, agree_hf, tokens);
    deviation = std::max(deviation, dev);
  }
  EXPECT_GT(deviation, 0.0f) << "an f16 cache gives the f32 cache's logits: is it on?";
}

}  // namespace
