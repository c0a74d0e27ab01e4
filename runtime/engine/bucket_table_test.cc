#include "runtime/engine/bucket_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace xrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

BucketTable MakeTable(std::vector<int64_t> tokens, std::vector<int64_t> reqs) {
  auto t = BucketTable::Create(std::move(tokens), std::move(reqs));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

TEST(BucketTable, PicksSmallestCoveringBucket) {
  BucketTable t = MakeTable({16, 32, 64, 128}, {8, 16});
  EXPECT_EQ(*t.TokenBucketFor(1), 16);   // one token
  EXPECT_EQ(*t.TokenBucketFor(16), 16);  // exact fit
  EXPECT_EQ(*t.TokenBucketFor(17), 32);  // in between
  EXPECT_EQ(*t.TokenBucketFor(33), 64);
  EXPECT_EQ(*t.TokenBucketFor(64), 64);
  EXPECT_EQ(*t.TokenBucketFor(100), 128);
  EXPECT_EQ(*t.TokenBucketFor(128), 128);
  EXPECT_EQ(*t.ReqBucketFor(1), 8);
  EXPECT_EQ(*t.ReqBucketFor(8), 8);
  EXPECT_EQ(*t.ReqBucketFor(9), 16);
  EXPECT_EQ(t.max_tokens(), 128);
  EXPECT_EQ(t.max_reqs(), 16);
}

TEST(BucketTable, BeyondLargestIsOutOfRangeNamingBoth) {
  BucketTable t = MakeTable({16, 32, 64, 128}, {8, 16});
  auto tok = t.TokenBucketFor(129);
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(tok.status().message(), HasSubstr("129"));
  EXPECT_THAT(tok.status().message(), HasSubstr("(128)"));
  auto req = t.ReqBucketFor(17);
  ASSERT_FALSE(req.ok());
  EXPECT_EQ(req.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(req.status().message(), HasSubstr("17"));
  EXPECT_THAT(req.status().message(), HasSubstr("(16)"));
}

TEST(BucketTable, NonPositiveCountIsInvalid) {
  BucketTable t = MakeTable({16}, {8});
  EXPECT_EQ(t.TokenBucketFor(0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(t.ReqBucketFor(-3).status().code(), StatusCode::kInvalidArgument);
}

TEST(BucketTable, EmptyTableFailsEveryLookup) {
  BucketTable t;
  EXPECT_EQ(t.max_tokens(), 0);
  EXPECT_EQ(t.max_reqs(), 0);
  EXPECT_EQ(t.TokenBucketFor(1).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(t.ReqBucketFor(1).status().code(), StatusCode::kOutOfRange);
}

TEST(BucketTable, CreateRejectsBadLists) {
  auto unsorted = BucketTable::Create({16, 64, 32}, {8});
  ASSERT_FALSE(unsorted.ok());
  EXPECT_THAT(unsorted.status().message(), HasSubstr("token buckets: bucket 2 is 32"));
  auto dup = BucketTable::Create({16}, {8, 8});
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(dup.status().message(), HasSubstr("req buckets: bucket 1 is 8"));
  auto zero = BucketTable::Create({0, 16}, {8});
  ASSERT_FALSE(zero.ok());
  EXPECT_THAT(zero.status().message(), HasSubstr("bucket 0 is 0"));
  EXPECT_FALSE(BucketTable::Create({}, {8}).ok());
  EXPECT_FALSE(BucketTable::Create({16}, {}).ok());
}

TEST(DefaultTokenBuckets, DoublingCoversTheLimit) {
  EXPECT_THAT(DefaultTokenBuckets(100, 0), ElementsAre(16, 32, 64, 128));
  EXPECT_THAT(DefaultTokenBuckets(128, 0), ElementsAre(16, 32, 64, 128));
  EXPECT_THAT(DefaultTokenBuckets(129, 0), ElementsAre(16, 32, 64, 128, 256));
  EXPECT_THAT(DefaultTokenBuckets(1, 0), ElementsAre(16));
  EXPECT_THAT(DefaultTokenBuckets(16, 0), ElementsAre(16));
  EXPECT_THAT(DefaultTokenBuckets(17, 0), ElementsAre(16, 32));
}

TEST(DefaultTokenBuckets, GapSwitchesToLinearSteps) {
  EXPECT_THAT(DefaultTokenBuckets(512, 128), ElementsAre(16, 32, 64, 128, 256, 384, 512));
  EXPECT_THAT(DefaultTokenBuckets(500, 128), ElementsAre(16, 32, 64, 128, 256, 384, 512));
  // A gap that is not a power of two steps from the last doubled bucket.
  EXPECT_THAT(DefaultTokenBuckets(300, 100), ElementsAre(16, 32, 64, 164, 264, 364));
  // A gap below 16 steps from 16.
  EXPECT_THAT(DefaultTokenBuckets(40, 8), ElementsAre(16, 24, 32, 40));
  // A gap beyond the limit changes nothing.
  EXPECT_THAT(DefaultTokenBuckets(100, 4096), ElementsAre(16, 32, 64, 128));
  EXPECT_THAT(DefaultTokenBuckets(2048, 512),
              ElementsAre(16, 32, 64, 128, 256, 512, 1024, 1536, 2048));
}

TEST(DefaultTokenBuckets, InvalidLimitsGiveEmptyList) {
  EXPECT_TRUE(DefaultTokenBuckets(0, 0).empty());
  EXPECT_TRUE(DefaultTokenBuckets(-5, 0).empty());
  EXPECT_TRUE(DefaultTokenBuckets(100, -1).empty());
}

TEST(DefaultTokenBuckets, AlwaysSortedAndCovering) {
  for (int64_t limit = 1; limit <= 3000; limit += 37) {
    for (int64_t gap : {0, 1, 8, 16, 48, 100, 128, 1000}) {
      auto b = DefaultTokenBuckets(limit, gap);
      ASSERT_FALSE(b.empty());
      EXPECT_TRUE(CheckCovers(b, limit, "limit").ok()) << limit << " " << gap;
      EXPECT_TRUE(BucketTable::Create(b, {8}).ok()) << limit << " " << gap;
      // Only the last bucket may reach the limit.
      for (size_t i = 0; i + 1 < b.size(); ++i) EXPECT_LT(b[i], limit);
    }
  }
}

TEST(DefaultReqBuckets, DoublingCappedAtMaxNumSeqs) {
  EXPECT_THAT(DefaultReqBuckets(64), ElementsAre(8, 16, 32, 64));
  EXPECT_THAT(DefaultReqBuckets(100), ElementsAre(8, 16, 32, 64, 100));
  EXPECT_THAT(DefaultReqBuckets(12), ElementsAre(8, 12));
  EXPECT_THAT(DefaultReqBuckets(9), ElementsAre(8, 9));
  EXPECT_THAT(DefaultReqBuckets(8), ElementsAre(8));
  EXPECT_THAT(DefaultReqBuckets(5), ElementsAre(5));
  EXPECT_THAT(DefaultReqBuckets(1), ElementsAre(1));
  EXPECT_TRUE(DefaultReqBuckets(0).empty());
}

TEST(ParseBucketList, ParsesWithSpaces) {
  auto b = ParseBucketList("16,32,64");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_THAT(*b, ElementsAre(16, 32, 64));
  auto spaced = ParseBucketList(" 16 , 48,\t128 ");
  ASSERT_TRUE(spaced.ok()) << spaced.status().ToString();
  EXPECT_THAT(*spaced, ElementsAre(16, 48, 128));
  auto one = ParseBucketList("7");
  ASSERT_TRUE(one.ok());
  EXPECT_THAT(*one, ElementsAre(7));
}

TEST(ParseBucketList, ErrorsNameTheEntry) {
  struct Case {
    const char* text;
    const char* expect;
  } cases[] = {
      {"", "is empty"},
      {"  ", "is empty"},
      {"16,,32", "entry 2 is empty"},
      {"16,32,", "entry 3 is empty"},
      {"16,abc", "entry 2 ('abc') is not an integer"},
      {"16,32x", "entry 2 ('32x') is not an integer"},
      {"1.5", "entry 1 ('1.5') is not an integer"},
      {"16,0", "entry 2 (0) must be >= 1"},
      {"-16", "entry 1 (-16) must be >= 1"},
      {"16,32,32", "entry 3 (32) is not greater than the entry before it (32)"},
      {"64,32", "entry 2 (32) is not greater than the entry before it (64)"},
      {"99999999999999999999", "entry 1 ('99999999999999999999') is too large"},
  };
  for (const Case& c : cases) {
    auto b = ParseBucketList(c.text);
    ASSERT_FALSE(b.ok()) << "'" << c.text << "'";
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(b.status().message(), HasSubstr(c.expect)) << "'" << c.text << "'";
  }
}

TEST(CheckCovers, NamesLimitAndLargestBucket) {
  EXPECT_TRUE(CheckCovers({16, 32, 128}, 100, "max_num_batched_tokens").ok());
  EXPECT_TRUE(CheckCovers({16, 32, 128}, 128, "max_num_batched_tokens").ok());
  Status s = CheckCovers({16, 32, 64}, 100, "max_num_batched_tokens");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("max_num_batched_tokens = 100"));
  EXPECT_THAT(s.message(), HasSubstr("largest bucket is 64"));
  Status empty = CheckCovers({}, 4, "max_num_seqs");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(empty.message(), HasSubstr("max_num_seqs = 4"));
}

}  // namespace
}  // namespace xrt
