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
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "runtime/executor/model_runner.h"
#include "tests/numerics/fixture_io.h"
#include "tests/numerics/greedy.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using xcc::testing::ReadJson;

// A fixture name as a gtest parameter / file name: "gguf/mixed" -> "gguf_mixed".
std::string ParamName(std::string name) {
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}

struct Artifacts {
  std::string wide;     // buckets 16..128, budget 128
  std::string chunked;  // one 16-token bucket, budget 16
};

class DecoderNumerics : public ::testing::TestWithParam<std::string> {
 protected:
  // "gguf/<name>" is tests/fixtures/gguf/<name>/; any other name tests/fixtures/models/<name>/.
  static bool IsGguf(const std::string& name) { return name.rfind("gguf/", 0) == 0; }

  static fs::path FixtureDir(const std::string& name) {
    const fs::path fixtures = fs::path(XCC_SOURCE_DIR) / "tests/fixtures";
    return IsGguf(name) ? fixtures / name : fixtures / "models" / name;
  }

  // What the compiler is given: the HF directory, or the GGUF file in it.
  static fs::path ModelPath(const std::string& name) {
    return IsGguf(name) ? FixtureDir(name) / "model.gguf" : FixtureDir(name);
  }

  Artifacts Compile(const std::string& name) {
    fs::path dir = fs::temp_directory_path() / ("xcc_numerics_" + ParamName(name));
    fs::create_directories(dir);
    Artifacts a{(dir / "wide.xpk").string(), (dir / "chunked.xpk").string()};
    xcc::CompileOptions o;
    o.model_path = ModelPath(name).string();
    o.quiet = true;
    o.limits.max_num_seqs = 4;
    o.limits.max_model_len = 256;
    o.limits.max_num_batched_tokens = 128;
    o.output_path = a.wide;
    auto s = xcc::Compile(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    o.limits.max_num_batched_tokens = 16;
    o.token_buckets = {16};
    o.output_path = a.chunked;
    s = xcc::Compile(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return a;
  }
};

TEST_P(DecoderNumerics, MatchesTransformers) {
  const std::string name = GetParam();
  json ref = ReadJson(FixtureDir(name) / "reference.json");
  Artifacts a = Compile(name);
  for (const std::string& path : {a.wide, a.chunked}) {
    xrt::ModelRunnerParams rp;
    rp.artifact_path = path;
    rp.num_threads = getenv("XCC_TEST_THREADS") ? atoi(getenv("XCC_TEST_THREADS")) : 2;
    auto runner = xrt::ModelRunner::Create(rp);
    ASSERT_TRUE(runner.ok()) << runner.status().ToString();
    xrt::EngineCoreParams cp = (*runner)->engine_core_params();
    cp.enable_prefix_caching = false;  // every prompt computed from scratch
    auto core = xrt::EngineCore::Create(cp);
    ASSERT_TRUE(core.ok()) << core.status().ToString();
    for (const json& p : ref["prompts"]) {
      SCOPED_TRACE(name + " " + p["name"].get<std::string>() + " via " + path);
      auto result = xcc::testing::Greedy(**core, p["ids"].get<std::vector<int32_t>>(), 32);
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
                         ::testing::Values("llama_gqa", "llama_tied", "llama_attn_bias",
                                           "qwen2_bias", "mistral", "gguf/mixed", "gguf/tied_q4_1",
                                           "gguf/llama3_rope", "gguf/kquants"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return ParamName(info.param);
                         });

}  // namespace
