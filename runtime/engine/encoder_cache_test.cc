#include "runtime/engine/encoder_cache.h"

#include <gtest/gtest.h>

namespace xrt {
namespace {

BlockHash H(uint64_t i) { return BlockHash{i, ~i}; }

TEST(EncoderCacheTest, CreateChecksSizes) {
  EXPECT_FALSE(EncoderCache::Create({/*capacity_rows=*/15, /*item_rows=*/16}).ok());
  EXPECT_FALSE(EncoderCache::Create({16, 0}).ok());
  auto c = EncoderCache::Create({50, 16});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->num_slots(), 3);  // 50 rows hold three 16-row items
}

TEST(EncoderCacheTest, AllocatesReferencesAndCountsHits) {
  EncoderCache c = *EncoderCache::Create({48, 16});
  auto row = c.Allocate(H(1), /*request=*/7);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(*row, 0);
  EXPECT_TRUE(c.Contains(H(1)));
  EXPECT_EQ(c.Pending(), std::vector<BlockHash>{H(1)});
  // A second request of the same step shares the pending entry: not a hit (not encoded yet).
  ASSERT_TRUE(c.Reference(H(1), 8).ok());
  EXPECT_EQ(c.hits(), 0);
  c.MarkEncoded();
  EXPECT_TRUE(c.Pending().empty());
  ASSERT_TRUE(c.Reference(H(1), 9).ok());
  EXPECT_EQ(c.hits(), 1);
  ASSERT_TRUE(c.Reference(H(1), 9).ok());  // already a user: no second hit
  EXPECT_EQ(c.hits(), 1);
  EXPECT_EQ(c.misses(), 1);
  EXPECT_EQ(*c.Allocate(H(2), 7), 16);
  EXPECT_EQ(c.Row(H(2)), 16);
  EXPECT_EQ(c.Row(H(3)), -1);
  EXPECT_FALSE(c.Allocate(H(2), 8).ok());   // exists
  EXPECT_FALSE(c.Reference(H(3), 8).ok());  // absent
}

TEST(EncoderCacheTest, UnreferencedEntriesStayUntilEvictedOldestFirst) {
  EncoderCache c = *EncoderCache::Create({32, 16});  // two slots
  ASSERT_TRUE(c.Allocate(H(1), 1).ok());
  ASSERT_TRUE(c.Allocate(H(2), 2).ok());
  c.MarkEncoded();
  EXPECT_EQ(c.num_available_slots(), 0);
  // Full and referenced: nothing can be evicted.
  EXPECT_EQ(c.Allocate(H(3), 3).status().code(), StatusCode::kResourceExhausted);
  c.ReleaseRequest(2);
  c.ReleaseRequest(1);
  EXPECT_EQ(c.num_available_slots(), 2);
  EXPECT_TRUE(c.Contains(H(1)));  // still cached: a later request may hit it
  // H(2) was released first, so it is the oldest freeable entry.
  auto row = c.Allocate(H(3), 3);
  ASSERT_TRUE(row.ok());
  EXPECT_EQ(*row, 16);
  EXPECT_FALSE(c.Contains(H(2)));
  EXPECT_TRUE(c.Contains(H(1)));
  EXPECT_EQ(c.evictions(), 1);
  // A hit takes the entry off the freeable list: it cannot be evicted while used.
  ASSERT_TRUE(c.Reference(H(1), 4).ok());
  EXPECT_EQ(c.num_available_slots(), 0);
  EXPECT_FALSE(c.Allocate(H(4), 4).ok());
}

TEST(EncoderCacheTest, PendingEntryWithoutUsersIsDropped) {
  EncoderCache c = *EncoderCache::Create({32, 16});
  ASSERT_TRUE(c.Allocate(H(1), 1).ok());
  ASSERT_TRUE(c.Reference(H(1), 2).ok());
  c.ReleaseRequest(1);
  EXPECT_TRUE(c.Contains(H(1)));  // request 2 still encodes it this step
  c.Release(H(1), 2);
  // Never encoded, nobody needs it: gone, and its slot is free (not a freeable hit).
  EXPECT_FALSE(c.Contains(H(1)));
  EXPECT_TRUE(c.Pending().empty());
  EXPECT_EQ(c.num_available_slots(), 2);
  EXPECT_EQ(c.num_entries(), 0);
}

}  // namespace
}  // namespace xrt
