#include "runtime/engine/prefill_split.h"

#include <gtest/gtest.h>

namespace xrt {
namespace {

BucketTable Table() {
  auto t = BucketTable::Create({16, 32, 64}, {8});
  EXPECT_TRUE(t.ok());
  return std::move(t).value();
}

std::vector<std::pair<int64_t, int64_t>> Pairs(const std::vector<PrefillChunk>& chunks) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& c : chunks) out.emplace_back(c.begin, c.num_tokens);
  return out;
}

using P = std::vector<std::pair<int64_t, int64_t>>;

TEST(SplitPrefill, GreedyChunksCappedByBudgetAndLargestBucket) {
  BucketTable t = Table();
  EXPECT_EQ(Pairs(*SplitPrefill(10, t, 100)), (P{{0, 10}}));
  EXPECT_EQ(Pairs(*SplitPrefill(64, t, 100)), (P{{0, 64}}));
  EXPECT_EQ(Pairs(*SplitPrefill(150, t, 100)), (P{{0, 64}, {64, 64}, {128, 22}}));
  EXPECT_EQ(Pairs(*SplitPrefill(100, t, 40)), (P{{0, 40}, {40, 40}, {80, 20}}));
  EXPECT_EQ(Pairs(*SplitPrefill(3, t, 1)), (P{{0, 1}, {1, 1}, {2, 1}}));
}

TEST(SplitPrefill, ChunksCoverThePromptAndFitABucket) {
  BucketTable t = Table();
  for (int64_t n = 1; n <= 300; n += 7) {
    for (int64_t budget : {1, 5, 16, 48, 64, 1000}) {
      auto chunks = SplitPrefill(n, t, budget);
      ASSERT_TRUE(chunks.ok());
      int64_t next = 0;
      for (const auto& c : *chunks) {
        EXPECT_EQ(c.begin, next);
        EXPECT_GE(c.num_tokens, 1);
        EXPECT_LE(c.num_tokens, budget);
        EXPECT_TRUE(t.TokenBucketFor(c.num_tokens).ok());
        next += c.num_tokens;
      }
      EXPECT_EQ(next, n);
    }
  }
}

TEST(SplitPrefill, Errors) {
  BucketTable t = Table();
  EXPECT_EQ(SplitPrefill(0, t, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitPrefill(10, t, 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SplitPrefill(10, BucketTable(), 10).status().code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace xrt
