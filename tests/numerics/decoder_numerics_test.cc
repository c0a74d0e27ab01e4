// Numerics of compiled decoders against HF transformers references.
//
// For every tiny fixture model (tests/fixtures/models/* and the GGUF ones,
// tests/fixtures/gguf/*/model.gguf with Q8_0 / Q4_0 / Q4_1 / F16 / BF16 tensors and
// Q4_K / Q5_K / Q6_K ones (gguf/kquants, tied Q6_K table),
// made by tests/gen_model_fixtures.py): compile it twice, once with buckets covering a
// 128-token budget and once with a single 16-token bucket (so prompts are
// prefilled in 16-token chunks), then for every reference prompt check that
// the last-position logits match HF's within 1e-4 (max abs) and that the
// 32-token greedy continuation matches token for token, with both artifacts.
#include <cmath>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/executor/model_runner.h"
#include "tests/numerics/decoder_artifacts.h"
#include "tests/numerics/fixture_io.h"
#include "tests/numerics/greedy.h"

namespace {

using nlohmann::json;

using xcc::testing::DecoderFixtureDir;
using xcc::testing::FixtureParamName;
using xcc::testing::ReadJson;

class DecoderNumerics : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderNumerics, MatchesTransformers) {
  const std::string name = GetParam();
  json ref = ReadJson(DecoderFixtureDir(name) / "reference.json");
  auto a = xcc::testing::CompileDecoderFixture(name);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  for (const std::string& path : {a->wide, a->chunked}) {
    auto engine = xcc::testing::OpenEngine(path);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    for (const json& p : ref["prompts"]) {
      SCOPED_TRACE(name + " " + p["name"].get<std::string>() + " via " + path);
      auto result = xcc::testing::Greedy(*engine->core, p["ids"].get<std::vector<int32_t>>(), 32);
      ASSERT_TRUE(result.status.ok()) << result.status.ToString();
      const std::vector<float>& logits = result.prompt_logits;

      std::vector<float> expected = p["last_logits"].get<std::vector<float>>();
      ASSERT_EQ(logits.size(), expected.size());
      float max_diff = 0;
      for (size_t i = 0; i < logits.size(); ++i)
        max_diff = std::max(max_diff, std::fabs(logits[i] - expected[i]));
      EXPECT_LE(max_diff, 1e-4f) << "last-position logits differ from HF";
      EXPECT_EQ(result.tokens, p["greedy_ids"].get<std::vector<int32_t>>())
          << "greedy continuation differs from HF";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, DecoderNumerics,
                         ::testing::ValuesIn(xcc::testing::kDecoderFixtures),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return FixtureParamName(info.param);
                         });

}  // namespace
