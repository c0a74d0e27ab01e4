#include "runtime/kv_cache/block_pool.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

namespace xrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

BlockPool MakePool(int64_t n, bool caching = false) {
  auto p = BlockPool::Create(BlockPoolParams{n, caching});
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return std::move(p).value();
}

BlockHash H(uint64_t v) { return BlockHash{v, ~v}; }

TEST(BlockPool, CreateValidates) {
  EXPECT_FALSE(BlockPool::Create(BlockPoolParams{0, false}).ok());
  EXPECT_FALSE(BlockPool::Create(BlockPoolParams{int64_t{1} << 32, false}).ok());
}

TEST(BlockPool, AllocatesInAscendingOrderThenFreeOrder) {
  BlockPool pool = MakePool(6);
  EXPECT_EQ(pool.num_free(), 6);
  auto a = pool.Allocate(3);
  ASSERT_TRUE(a.ok());
  EXPECT_THAT(*a, ElementsAre(0, 1, 2));
  EXPECT_EQ(pool.num_free(), 3);
  for (int32_t id : *a) EXPECT_EQ(pool.ref_count(id), 1);
  ASSERT_TRUE(pool.Free({2, 0}).ok());
  EXPECT_EQ(pool.num_free(), 5);
  // Never-used blocks first (they were freed at start), then the freed ones
  // in free order.
  auto b = pool.Allocate(5);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(*b, ElementsAre(3, 4, 5, 2, 0));
  EXPECT_EQ(pool.num_free(), 0);
}

TEST(BlockPool, ExhaustionIsAllOrNothing) {
  BlockPool pool = MakePool(4);
  auto a = pool.Allocate(3);
  ASSERT_TRUE(a.ok());
  auto b = pool.Allocate(2);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("2 blocks requested, 1 of 4 free"));
  EXPECT_EQ(pool.num_free(), 1);
  // The output vector is untouched on failure.
  std::vector<int32_t> out = {42};
  EXPECT_FALSE(pool.Allocate(5, &out).ok());
  EXPECT_THAT(out, ElementsAre(42));
  // What remains is still allocatable.
  ASSERT_TRUE(pool.Allocate(1, &out).ok());
  EXPECT_THAT(out, ElementsAre(42, 3));
  EXPECT_TRUE(pool.Allocate(0, &out).ok());
  EXPECT_EQ(pool.Allocate(-1, &out).code(), StatusCode::kInvalidArgument);
}

TEST(BlockPool, RefCountsKeepSharedBlocksAllocated) {
  BlockPool pool = MakePool(3);
  auto a = pool.Allocate(1);
  ASSERT_TRUE(a.ok());
  const int32_t id = (*a)[0];
  ASSERT_TRUE(pool.Acquire(id).ok());
  EXPECT_EQ(pool.ref_count(id), 2);
  ASSERT_TRUE(pool.Free({id}).ok());
  EXPECT_EQ(pool.ref_count(id), 1);
  EXPECT_EQ(pool.num_free(), 2);
  ASSERT_TRUE(pool.Free({id}).ok());
  EXPECT_EQ(pool.ref_count(id), 0);
  EXPECT_EQ(pool.num_free(), 3);
  // A plain free block cannot be acquired: its content is gone.
  EXPECT_EQ(pool.Acquire(id).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(pool.Acquire(7).code(), StatusCode::kInvalidArgument);
}

TEST(BlockPool, FreeIsAllOrNothing) {
  BlockPool pool = MakePool(4);
  auto a = pool.Allocate(2);  // 0, 1
  ASSERT_TRUE(a.ok());
  // 1 is referenced once; freeing it twice must fail and undo the first drop.
  Status s = pool.Free({0, 1, 1});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("block 1 (entry 2)"));
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.num_free(), 2);
  s = pool.Free({0, 9});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("block 9"));
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.Free({3}).code(), StatusCode::kInvalidArgument);  // never allocated
  // Repeated ids are fine when they are referenced that often.
  ASSERT_TRUE(pool.Acquire(1).ok());
  ASSERT_TRUE(pool.Free({1, 0, 1}).ok());
  EXPECT_EQ(pool.num_free(), 4);
}

TEST(BlockPool, RegisterAndLookup) {
  BlockPool pool = MakePool(4, /*caching=*/true);
  auto a = pool.Allocate(2);  // 0, 1
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(pool.Lookup(H(1)), -1);
  auto r = pool.Register(0, H(1));
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r);
  EXPECT_EQ(pool.Lookup(H(1)), 0);
  EXPECT_TRUE(pool.is_cached(0));
  EXPECT_EQ(pool.num_cached(), 1);
  // Same hash on another block: the first copy stays.
  auto dup = pool.Register(1, H(1));
  ASSERT_TRUE(dup.ok());
  EXPECT_FALSE(*dup);
  EXPECT_EQ(pool.Lookup(H(1)), 0);
  EXPECT_FALSE(pool.is_cached(1));
  // A block holds one hash.
  auto second = pool.Register(0, H(2));
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(*second);
  EXPECT_EQ(pool.Lookup(H(2)), -1);
  // Only allocated blocks can be registered.
  EXPECT_EQ(pool.Register(3, H(3)).status().code(), StatusCode::kInvalidArgument);
}

TEST(BlockPool, RegisterNeedsPrefixCaching) {
  BlockPool pool = MakePool(2, /*caching=*/false);
  auto a = pool.Allocate(1);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(pool.Register(0, H(1)).status().code(), StatusCode::kFailedPrecondition);
}

TEST(BlockPool, FreedCachedBlocksStayFindableUntilEvicted) {
  BlockPool pool = MakePool(4, /*caching=*/true);
  auto a = pool.Allocate(4);  // 0..3
  ASSERT_TRUE(a.ok());
  for (int32_t id = 0; id < 4; ++id) ASSERT_TRUE(pool.Register(id, H(100 + id)).ok());
  // Free in the order 3, 1, 2 (0 stays allocated).
  ASSERT_TRUE(pool.Free({3, 1, 2}).ok());
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.num_evictable(), 3);
  EXPECT_EQ(pool.Lookup(H(101)), 1);
  // A hit takes block 1 back out of the LRU.
  ASSERT_TRUE(pool.Acquire(1).ok());
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.num_evictable(), 2);
  // Allocation evicts the least recently freed cached block first: 3, then 2.
  auto b = pool.Allocate(1);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(*b, ElementsAre(3));
  EXPECT_EQ(pool.Lookup(H(103)), -1);
  EXPECT_FALSE(pool.is_cached(3));
  EXPECT_EQ(pool.Lookup(H(102)), 2);
  auto c = pool.Allocate(1);
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(*c, ElementsAre(2));
  EXPECT_EQ(pool.Lookup(H(102)), -1);
  EXPECT_EQ(pool.num_cached(), 2);  // 0 and 1
  EXPECT_FALSE(pool.Allocate(1).ok());
}

TEST(BlockPool, PlainFreeBlocksAreUsedBeforeEvicting) {
  BlockPool pool = MakePool(3, /*caching=*/true);
  auto a = pool.Allocate(3);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(pool.Register(0, H(1)).ok());
  ASSERT_TRUE(pool.Free({0, 1, 2}).ok());  // 0 evictable, 1 and 2 plain free
  auto b = pool.Allocate(2);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(*b, ElementsAre(1, 2));
  EXPECT_EQ(pool.Lookup(H(1)), 0);
  auto c = pool.Allocate(1);
  ASSERT_TRUE(c.ok());
  EXPECT_THAT(*c, ElementsAre(0));
  EXPECT_EQ(pool.Lookup(H(1)), -1);
}

// Random operations against a simple model: reference counts, free counts,
// cached lookups and all-or-nothing behaviour match; the same seed gives the
// same allocation sequence.
std::vector<int32_t> RunRandom(uint64_t seed, bool check) {
  const int64_t k_blocks = 24;
  BlockPool pool = MakePool(k_blocks, /*caching=*/true);
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> owners;  // each owner holds one ref per listed block
  std::map<int32_t, int32_t> refs;           // model of ref counts
  std::map<uint64_t, int32_t> cache;         // model: hash -> block
  std::vector<int32_t> trace;
  uint64_t next_hash = 1;
  for (int step = 0; step < 3000; ++step) {
    const int roll = static_cast<int>(rng() % 10);
    const int op = roll < 3 ? 0 : roll < 7 ? 1 : roll < 9 ? 2 : 3;
    if (op == 0) {
      const int64_t n = static_cast<int64_t>(rng() % 6);
      int64_t model_free = 0;
      for (int32_t id = 0; id < k_blocks; ++id) model_free += refs[id] == 0;
      auto got = pool.Allocate(n);
      if (check) {
        EXPECT_EQ(got.ok(), n <= model_free);
      }
      if (!got.ok()) continue;
      for (int32_t id : *got) {
        if (check) {
          EXPECT_EQ(refs[id], 0) << "allocated a referenced block";
        }
        refs[id] = 1;
        for (auto it = cache.begin(); it != cache.end();) {  // evicted
          it = it->second == id ? cache.erase(it) : std::next(it);
        }
        trace.push_back(id);
      }
      owners.push_back(*got);
    } else if (op == 1 && !owners.empty()) {
      const size_t k = rng() % owners.size();
      if (!pool.Free(owners[k]).ok()) {
        ADD_FAILURE() << "free failed at step " << step;
        return trace;
      }
      for (int32_t id : owners[k]) --refs[id];
      owners.erase(owners.begin() + static_cast<ptrdiff_t>(k));
    } else if (op == 2 && !owners.empty()) {
      // Register an owned, uncached block.
      const auto& o = owners[rng() % owners.size()];
      if (o.empty()) continue;
      const int32_t id = o[rng() % o.size()];
      auto r = pool.Register(id, H(next_hash));
      if (!r.ok()) {
        ADD_FAILURE() << r.status().ToString();
        return trace;
      }
      bool already = false;
      for (auto& [h, b] : cache) already |= b == id;
      if (check) {
        EXPECT_EQ(*r, !already);
      }
      if (*r) cache[next_hash] = id;
      ++next_hash;
    } else if (op == 3 && !cache.empty()) {
      // A prefix hit on a random cached hash.
      auto it = cache.begin();
      std::advance(it, static_cast<ptrdiff_t>(rng() % cache.size()));
      const int32_t id = pool.Lookup(H(it->first));
      if (check) {
        EXPECT_EQ(id, it->second);
      }
      if (!pool.Acquire(id).ok()) {
        ADD_FAILURE() << "acquire failed at step " << step;
        return trace;
      }
      ++refs[id];
      owners.push_back({id});
    }
    if (check) {
      int64_t model_free = 0;
      for (int32_t id = 0; id < k_blocks; ++id) {
        EXPECT_EQ(pool.ref_count(id), refs[id]) << "block " << id;
        model_free += refs[id] == 0;
      }
      EXPECT_EQ(pool.num_free(), model_free);
      EXPECT_EQ(pool.num_cached(), static_cast<int64_t>(cache.size()));
      for (auto& [h, b] : cache) EXPECT_EQ(pool.Lookup(H(h)), b);
    }
  }
  return trace;
}

TEST(BlockPool, RandomOperationsMatchModel) {
  auto trace = RunRandom(42, /*check=*/true);
  EXPECT_GT(trace.size(), 500u);
  EXPECT_EQ(RunRandom(42, /*check=*/false), trace);
  EXPECT_NE(RunRandom(43, /*check=*/false), trace);
}

}  // namespace
}  // namespace xrt
