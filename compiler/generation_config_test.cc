// generation_config.json's sampling defaults travel through the artifact into
// every request that leaves them unset (as vLLM applies them): the qwen2_bias
// fixture sets temperature 0.7, top_p 0.8, top_k 20, repetition_penalty 1.05.
#include <filesystem>

#include <gtest/gtest.h>

#include "compiler/compile.h"
#include "runtime/engine/artifact_params.h"
#include "runtime/engine/request_processor.h"
#include "runtime/loader/artifact.h"

namespace xcc {
namespace {

namespace fs = std::filesystem;

TEST(GenerationConfig, DefaultsReachRequestsThatLeaveThemUnset) {
  const fs::path dir =
      fs::temp_directory_path() / ("xcc_generation_config_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  CompileOptions o;
  o.model_path = (fs::path(XCC_SOURCE_DIR) / "tests/fixtures/models/qwen2_bias").string();
  o.output_path = (dir / "m.xpk").string();
  o.quiet = true;
  o.limits.max_num_seqs = 2;
  o.limits.max_num_batched_tokens = 32;
  o.limits.max_model_len = 64;
  auto compiled = Compile(o);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();
  auto artifact = xrt::Artifact::Open(o.output_path);
  ASSERT_TRUE(artifact.ok()) << artifact.status().ToString();

  const xrt::SamplingDefaults d = xrt::SamplingDefaultsOf(**artifact);
  ASSERT_TRUE(d.repetition_penalty.has_value());
  EXPECT_FLOAT_EQ(*d.repetition_penalty, 1.05f);
  EXPECT_FLOAT_EQ(d.temperature.value_or(-1), 0.7f);
  EXPECT_FLOAT_EQ(d.top_p.value_or(-1), 0.8f);
  EXPECT_EQ(d.top_k.value_or(-1), 20);

  xrt::RequestProcessorParams pp;
  pp.sampling_defaults = d;
  pp.limits = xrt::CompiledLimitsOf(**artifact);
  xrt::RequestProcessor processor(pp);
  xrt::GenerationRequest g;
  g.kind = xrt::PromptKind::kTokens;
  g.prompt_token_ids = {1, 2, 3};
  g.max_tokens = 4;
  auto unset = processor.Process(g);
  ASSERT_TRUE(unset.ok()) << unset.status().ToString();
  EXPECT_FLOAT_EQ(unset->sampling.repetition_penalty, 1.05f);
  EXPECT_FLOAT_EQ(unset->sampling.temperature, 0.7f);

  g.sampling.repetition_penalty = 1.2f;
  g.sampling_set.repetition_penalty = true;
  auto set = processor.Process(g);
  ASSERT_TRUE(set.ok()) << set.status().ToString();
  EXPECT_FLOAT_EQ(set->sampling.repetition_penalty, 1.2f);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xcc
