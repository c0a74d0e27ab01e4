// ServingLimits: requested limits may lower the compiled ones, never raise
// them; the message names both values and the recompile flag.
#include "runtime/engine/serving_limits.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace xrt {
namespace {

using ::testing::HasSubstr;

ServingLimits Compiled() { return {32, 128, 512, 16, 32}; }

TEST(ServingLimits, ZeroTakesTheCompiledValueAndLowerValuesWin) {
  auto same = ResolveServingLimits(Compiled(), {});
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_EQ(same->max_num_seqs, 32);
  EXPECT_EQ(same->max_num_batched_tokens, 128);
  EXPECT_EQ(same->max_model_len, 512);
  EXPECT_EQ(same->block_size, 16);
  EXPECT_EQ(same->max_blocks_per_req, 32);
  ServingLimits lower;
  lower.max_num_seqs = 4;
  lower.max_model_len = 100;
  lower.block_size = 99;  // the KV geometry is the compiled one
  auto r = ResolveServingLimits(Compiled(), lower);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->max_num_seqs, 4);
  EXPECT_EQ(r->max_num_batched_tokens, 128);
  EXPECT_EQ(r->max_model_len, 100);
  EXPECT_EQ(r->block_size, 16);
}

TEST(ServingLimits, RaisingALimitIsAnErrorNamingTheRecompileFlag) {
  ServingLimits more;
  more.max_num_seqs = 1000;
  auto r = ResolveServingLimits(Compiled(), more);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(
      r.status().message(),
      HasSubstr("max_num_seqs 1000 exceeds the 32 request rows the artifact was compiled for"));
  EXPECT_THAT(r.status().message(), HasSubstr("steps with 33..1000 requests have no executable"));
  EXPECT_THAT(r.status().message(), HasSubstr("recompile with --max-num-seqs 1000"));
  ServingLimits negative;
  negative.max_model_len = -1;
  EXPECT_FALSE(ResolveServingLimits(Compiled(), negative).ok());
}

TEST(ServingLimits, EveryExcessIsListed) {
  ServingLimits more{33, 256, 1024, 0, 0};
  std::vector<LimitExcess> e = LimitsBeyondCompiled(Compiled(), more);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0].field, "max_num_seqs");
  EXPECT_THAT(e[0].message, HasSubstr("steps with 33 requests"));
  EXPECT_EQ(e[1].field, "max_num_batched_tokens");
  EXPECT_THAT(e[1].message, HasSubstr("recompile with --max-num-batched-tokens 256"));
  EXPECT_EQ(e[2].field, "max_model_len");
  EXPECT_EQ(e[2].requested, 1024);
  EXPECT_EQ(e[2].compiled, 512);
  EXPECT_THAT(e[2].message, HasSubstr("32 KV blocks per request"));
  EXPECT_TRUE(LimitsBeyondCompiled(Compiled(), Compiled()).empty());
}

}  // namespace
}  // namespace xrt
