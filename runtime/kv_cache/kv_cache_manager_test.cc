#include "runtime/kv_cache/kv_cache_manager.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

namespace xrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

KvCacheManager MakeManager(int64_t num_blocks, int64_t block_size, int64_t max_blocks,
                           bool caching = false) {
  auto m =
      KvCacheManager::Create(KvCacheManagerParams{num_blocks, block_size, max_blocks, caching});
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

std::vector<int32_t> Tokens(int32_t n, int32_t start = 1) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

const std::vector<int32_t>& Table(const KvCacheManager& m, RequestId id) {
  auto t = m.BlockTable(id);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  static const std::vector<int32_t> k_empty;
  return t.ok() ? **t : k_empty;
}

// Adds, allocates and commits a whole prompt; returns the cached prefix length.
int64_t Prefill(KvCacheManager& m, RequestId id, const std::vector<int32_t>& prompt,
                const PrefixKeys& keys = {}) {
  auto cached = m.AddRequest(id, prompt.data(), static_cast<int64_t>(prompt.size()), keys);
  EXPECT_TRUE(cached.ok()) << cached.status().ToString();
  if (!cached.ok()) return -1;
  const int64_t rest = static_cast<int64_t>(prompt.size()) - *cached;
  EXPECT_TRUE(m.AllocateSlots(id, rest).ok());
  EXPECT_TRUE(m.CommitComputed(id, rest).ok());
  return *cached;
}

TEST(KvCacheManager, CreateValidates) {
  auto m = KvCacheManager::Create(KvCacheManagerParams{8, 0, 4, false});
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("block_size is 0"));
  EXPECT_FALSE(KvCacheManager::Create(KvCacheManagerParams{0, 4, 4, false}).ok());
  EXPECT_FALSE(KvCacheManager::Create(KvCacheManagerParams{8, 4, 0, false}).ok());
}

TEST(KvCacheManager, SlotsAcrossBlockBoundaries) {
  KvCacheManager m = MakeManager(16, 4, 8);
  auto a = Tokens(2), b = Tokens(5);
  ASSERT_TRUE(m.AddRequest(1, a.data(), 2).ok());
  ASSERT_TRUE(m.AddRequest(2, b.data(), 5).ok());
  ASSERT_TRUE(m.AllocateSlots(1, 2).ok());  // A: block 0
  ASSERT_TRUE(m.AllocateSlots(2, 5).ok());  // B: blocks 1, 2
  EXPECT_THAT(Table(m, 1), ElementsAre(0));
  EXPECT_THAT(Table(m, 2), ElementsAre(1, 2));
  EXPECT_EQ(*m.SlotFor(2, 0), 4);
  EXPECT_EQ(*m.SlotFor(2, 3), 7);
  EXPECT_EQ(*m.SlotFor(2, 4), 8);  // first position of the second block
  ASSERT_TRUE(m.CommitComputed(1, 2).ok());
  // A grows past its first block: positions 0..5 -> blocks 0, 3.
  auto more = Tokens(4, 10);
  ASSERT_TRUE(m.AppendTokens(1, more.data(), 4).ok());
  ASSERT_TRUE(m.AllocateSlots(1, 4).ok());
  EXPECT_THAT(Table(m, 1), ElementsAre(0, 3));
  EXPECT_EQ(*m.SlotFor(1, 3), 3);
  EXPECT_EQ(*m.SlotFor(1, 4), 12);
  EXPECT_EQ(*m.SlotFor(1, 5), 13);
  EXPECT_EQ(*m.SlotFor(1, 7), 15);  // slotted, not yet computed
  EXPECT_EQ(m.SlotFor(1, 8).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(m.SlotFor(1, -1).status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(SlotForPosition(Table(m, 1), 4, 6), 14);
}

TEST(KvCacheManager, GrowthAllocatesOnlyWhenABlockFills) {
  KvCacheManager m = MakeManager(8, 4, 8);
  auto p = Tokens(3);
  ASSERT_TRUE(m.AddRequest(7, p.data(), 3).ok());
  ASSERT_TRUE(m.AllocateSlots(7, 3).ok());
  ASSERT_TRUE(m.CommitComputed(7, 3).ok());
  EXPECT_EQ(m.num_free_blocks(), 7);
  // Decode steps: positions 3 (same block), then 4 (new block).
  int32_t tok = 99;
  ASSERT_TRUE(m.AppendTokens(7, &tok, 1).ok());
  ASSERT_TRUE(m.AllocateSlots(7, 1).ok());
  EXPECT_EQ(m.num_free_blocks(), 7);
  ASSERT_TRUE(m.CommitComputed(7, 1).ok());
  ASSERT_TRUE(m.AppendTokens(7, &tok, 1).ok());
  ASSERT_TRUE(m.AllocateSlots(7, 1).ok());
  EXPECT_EQ(m.num_free_blocks(), 6);
  EXPECT_EQ(Table(m, 7).size(), 2u);
  // Allocating again for the same positions is a no-op.
  ASSERT_TRUE(m.AllocateSlots(7, 1).ok());
  EXPECT_EQ(m.num_free_blocks(), 6);
  ASSERT_TRUE(m.AllocateSlots(7, 0).ok());
  EXPECT_EQ(*m.NumComputedTokens(7), 4);
  EXPECT_EQ(*m.NumTokens(7), 5);
}

TEST(KvCacheManager, FreeReturnsBlocks) {
  KvCacheManager m = MakeManager(8, 4, 8);
  Prefill(m, 1, Tokens(9));
  Prefill(m, 2, Tokens(4));
  EXPECT_EQ(m.num_free_blocks(), 4);
  ASSERT_TRUE(m.FreeRequest(1).ok());
  EXPECT_EQ(m.num_free_blocks(), 7);
  EXPECT_FALSE(m.HasRequest(1));
  EXPECT_EQ(m.FreeRequest(1).code(), StatusCode::kNotFound);
  EXPECT_EQ(m.BlockTable(1).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(m.FreeRequest(2).ok());
  EXPECT_EQ(m.num_free_blocks(), 8);
  EXPECT_EQ(m.num_requests(), 0u);
}

TEST(KvCacheManager, ExhaustionLeavesTheTableUnchanged) {
  KvCacheManager m = MakeManager(3, 4, 8);
  Prefill(m, 1, Tokens(8));  // 2 blocks
  auto p = Tokens(12);
  ASSERT_TRUE(m.AddRequest(2, p.data(), 12).ok());
  Status s = m.AllocateSlots(2, 12);  // needs 3, 1 free
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(s.message(), HasSubstr("request 2"));
  EXPECT_TRUE(Table(m, 2).empty());
  EXPECT_EQ(m.num_free_blocks(), 1);
  ASSERT_TRUE(m.AllocateSlots(2, 4).ok());  // a chunk that fits
  EXPECT_EQ(Table(m, 2).size(), 1u);
}

TEST(KvCacheManager, LimitsPerRequest) {
  KvCacheManager m = MakeManager(32, 4, 2);  // at most 8 positions per request
  auto p = Tokens(9);
  auto too_long = m.AddRequest(1, p.data(), 9);
  ASSERT_FALSE(too_long.ok());
  EXPECT_EQ(too_long.status().code(), StatusCode::kOutOfRange);
  EXPECT_THAT(too_long.status().message(), HasSubstr("9 tokens exceeds the 8 positions"));
  ASSERT_TRUE(m.AddRequest(1, p.data(), 8).ok());
  Status s = m.AllocateSlots(1, 9);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("need 3 blocks"));
  EXPECT_EQ(m.num_free_blocks(), 32);
  EXPECT_EQ(m.AddRequest(1, p.data(), 8).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.AddRequest(2, p.data(), 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.AllocateSlots(1, -1).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(m.AllocateSlots(5, 1).code(), StatusCode::kNotFound);
}

TEST(KvCacheManager, CommitNeedsSlotsAndTokens) {
  KvCacheManager m = MakeManager(8, 4, 8);
  auto p = Tokens(3);
  ASSERT_TRUE(m.AddRequest(1, p.data(), 3).ok());
  EXPECT_EQ(m.CommitComputed(1, 1).code(), StatusCode::kFailedPrecondition);  // no slots
  ASSERT_TRUE(m.AllocateSlots(1, 4).ok());
  EXPECT_EQ(m.CommitComputed(1, 4).code(), StatusCode::kFailedPrecondition);  // 3 known tokens
  ASSERT_TRUE(m.CommitComputed(1, 3).ok());
  EXPECT_EQ(*m.NumComputedTokens(1), 3);
}

// --- prefix caching ---

TEST(KvCachePrefix, ReusesFullBlocksOfAFinishedRequest) {
  KvCacheManager m = MakeManager(16, 4, 8, /*caching=*/true);
  auto prompt = Tokens(10);
  EXPECT_EQ(Prefill(m, 1, prompt), 0);
  const std::vector<int32_t> first = Table(m, 1);  // 3 blocks; the first 2 are full
  ASSERT_TRUE(m.FreeRequest(1).ok());
  EXPECT_EQ(m.pool().num_cached(), 2);
  EXPECT_EQ(m.CachedPrefixLength(prompt.data(), 10), 8);
  auto cached = m.AddRequest(2, prompt.data(), 10);
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(*cached, 8);
  EXPECT_EQ(*m.NumComputedTokens(2), 8);
  EXPECT_THAT(Table(m, 2), ElementsAre(first[0], first[1]));
  ASSERT_TRUE(m.AllocateSlots(2, 2).ok());
  EXPECT_EQ(Table(m, 2).size(), 3u);
}

TEST(KvCachePrefix, NeverTheWholePrompt) {
  KvCacheManager m = MakeManager(16, 4, 8, /*caching=*/true);
  auto prompt = Tokens(8);
  Prefill(m, 1, prompt);
  ASSERT_TRUE(m.FreeRequest(1).ok());
  // Both blocks are cached, but the last token must be recomputed for logits.
  EXPECT_EQ(m.CachedPrefixLength(prompt.data(), 8), 4);
  auto cached = m.AddRequest(2, prompt.data(), 8);
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(*cached, 4);
  // A longer prompt with the same start gets both blocks.
  auto longer = Tokens(9);
  EXPECT_EQ(m.CachedPrefixLength(longer.data(), 9), 8);
}

TEST(KvCachePrefix, SharedBlocksWhileBothRun) {
  KvCacheManager m = MakeManager(16, 4, 8, /*caching=*/true);
  auto prompt = Tokens(12);
  Prefill(m, 1, prompt);
  auto p2 = prompt;
  p2.push_back(77);
  EXPECT_EQ(Prefill(m, 2, p2), 12);
  const auto& t1 = Table(m, 1);
  const auto& t2 = Table(m, 2);
  EXPECT_EQ(t1[0], t2[0]);
  EXPECT_EQ(t1[2], t2[2]);
  EXPECT_EQ(m.pool().ref_count(t1[0]), 2);
  EXPECT_EQ(m.num_free_blocks(), 12);  // 3 shared + 1 own
  ASSERT_TRUE(m.FreeRequest(1).ok());
  EXPECT_EQ(m.pool().ref_count(t2[0]), 1);
  EXPECT_EQ(m.num_free_blocks(), 12);
}

TEST(KvCachePrefix, OnlyComputedBlocksAreHits) {
  KvCacheManager m = MakeManager(16, 4, 8, /*caching=*/true);
  auto prompt = Tokens(12);
  ASSERT_TRUE(m.AddRequest(1, prompt.data(), 12).ok());
  ASSERT_TRUE(m.AllocateSlots(1, 12).ok());
  // Slots exist but the step has not run: nothing to share yet.
  EXPECT_EQ(m.CachedPrefixLength(prompt.data(), 12), 0);
  ASSERT_TRUE(m.CommitComputed(1, 6).ok());  // chunk 1: one full block
  EXPECT_EQ(m.CachedPrefixLength(prompt.data(), 12), 4);
  ASSERT_TRUE(m.CommitComputed(1, 6).ok());
  EXPECT_EQ(m.CachedPrefixLength(prompt.data(), 12), 8);  // capped at 11 tokens
  auto p13 = Tokens(13);
  EXPECT_EQ(m.CachedPrefixLength(p13.data(), 13), 12);
}

TEST(KvCachePrefix, GeneratedTokensAreCachedToo) {
  KvCacheManager m = MakeManager(16, 4, 8, /*caching=*/true);
  auto prompt = Tokens(6);
  Prefill(m, 1, prompt);
  std::vector<int32_t> all = prompt;
  for (int32_t tok : {50, 51, 52}) {  // decode positions 6, 7, 8
    ASSERT_TRUE(m.AppendTokens(1, &tok, 1).ok());
    ASSERT_TRUE(m.AllocateSlots(1, 1).ok());
    ASSERT_TRUE(m.CommitComputed(1, 1).ok());
    all.push_back(tok);
  }
  all.push_back(53);
  // Preemption by recompute: free, then re-add prompt + generated tokens.
  ASSERT_TRUE(m.FreeRequest(1).ok());
  auto cached = m.AddRequest(1, all.data(), static_cast<int64_t>(all.size()));
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(*cached, 8);
}

TEST(KvCachePrefix, LoraAndImagesSeparateTheCache) {
  KvCacheManager m = MakeManager(32, 4, 8, /*caching=*/true);
  auto prompt = Tokens(13);
  PrefixKeys cat;
  cat.images = {{5, 3, BlockHash{1, 1}}};  // placeholder tokens 5..7: block 1
  Prefill(m, 1, prompt, cat);
  ASSERT_TRUE(m.FreeRequest(1).ok());
  PrefixKeys dog;
  dog.images = {{5, 3, BlockHash{2, 2}}};
  EXPECT_EQ(m.CachedPrefixLength(prompt.data(), 13, cat), 12);
  EXPECT_EQ(m.CachedPrefixLength(prompt.data(), 13, dog), 4);  // block 0 is text only
  EXPECT_EQ(m.CachedPrefixLength(prompt.data(), 13, PrefixKeys{}), 4);
  PrefixKeys lora;
  lora.lora_id = 0;
  lora.images = cat.images;
  EXPECT_EQ(m.CachedPrefixLength(prompt.data(), 13, lora), 0);
  // Invalid keys are rejected by AddRequest.
  PrefixKeys bad;
  bad.images = {{-1, 3, {}}};
  EXPECT_EQ(m.AddRequest(2, prompt.data(), 13, bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(m.HasRequest(2));
}

TEST(KvCachePrefix, EvictedBlocksAreMisses) {
  KvCacheManager m = MakeManager(4, 4, 4, /*caching=*/true);
  auto a = Tokens(9);
  Prefill(m, 1, a);  // 3 blocks, 2 cached
  ASSERT_TRUE(m.FreeRequest(1).ok());
  EXPECT_EQ(m.CachedPrefixLength(a.data(), 9), 8);
  // A different prompt needing 3 blocks takes the plain free block first,
  // then evicts the tail cached block (freed first), keeping the head.
  auto b = Tokens(12, 1000);
  Prefill(m, 2, b);
  EXPECT_EQ(m.CachedPrefixLength(a.data(), 9), 4);
  ASSERT_TRUE(m.FreeRequest(2).ok());
}

TEST(KvCachePrefix, DuplicateComputationKeepsOneCopy) {
  KvCacheManager m = MakeManager(16, 4, 8, /*caching=*/true);
  auto p = Tokens(9);
  // Both start before either computed: both miss and compute the same blocks.
  ASSERT_EQ(*m.AddRequest(1, p.data(), 9), 0);
  ASSERT_EQ(*m.AddRequest(2, p.data(), 9), 0);
  for (RequestId id : {1, 2}) {
    ASSERT_TRUE(m.AllocateSlots(id, 9).ok());
    ASSERT_TRUE(m.CommitComputed(id, 9).ok());
  }
  EXPECT_EQ(m.pool().num_cached(), 2);
  const std::vector<int32_t> t1 = Table(m, 1);
  ASSERT_TRUE(m.FreeRequest(1).ok());
  ASSERT_TRUE(m.FreeRequest(2).ok());
  auto cached = m.AddRequest(3, p.data(), 9);
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(*cached, 8);
  EXPECT_THAT(Table(m, 3), ElementsAre(t1[0], t1[1]));
}

// Property test: a random workload of chunked prefills and decodes with
// shared prefixes, LoRA ids, preemption and finishing, on a small pool. A
// simulated KV cache records, for every slot, a fingerprint of the prefix
// whose last token was written there. Invariants after every operation:
//   - every computed position of every request reads a slot holding its own
//     prefix's fingerprint (prefix hits are correct, nothing was overwritten);
//   - a block a request will still write (at or beyond num_computed) is not
//     shared with any other request;
//   - reference counts equal the number of tables holding the block, and the
//     free count matches.
TEST(KvCachePrefix, RandomWorkloadKeepsTheCacheConsistent) {
  const int64_t k_block_size = 4, k_blocks = 40, k_max_blocks = 10;
  KvCacheManager m = MakeManager(k_blocks, k_block_size, k_max_blocks, /*caching=*/true);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> kv(static_cast<size_t>(k_blocks * k_block_size), 0);
  struct Req {
    std::vector<int32_t> tokens;
    PrefixKeys keys;
  };
  std::map<RequestId, Req> live;
  RequestId next_id = 1;
  int64_t total_hits = 0;

  auto fingerprint = [](const Req& r, int64_t pos) {
    uint64_t h = 0x12345 + static_cast<uint64_t>(r.keys.lora_id + 1) * 0x9e3779b97f4a7c15ULL;
    for (int64_t i = 0; i <= pos; ++i) {
      h = (h ^ static_cast<uint64_t>(r.tokens[static_cast<size_t>(i)])) * 0x100000001b3ULL;
    }
    return h;
  };
  // Prompts share one of a few stems so that hits happen.
  const std::vector<int32_t> stems[] = {Tokens(11, 1), Tokens(7, 100), Tokens(16, 200)};

  for (int op = 0; op < 4000; ++op) {
    const int kind = static_cast<int>(rng() % 10);
    if (kind < 3 && live.size() < 8) {  // new request
      Req r;
      const auto& stem = stems[rng() % 3];
      r.tokens.assign(stem.begin(), stem.begin() + static_cast<ptrdiff_t>(1 + rng() % stem.size()));
      const int extra = static_cast<int>(rng() % 6);
      for (int i = 0; i < extra; ++i) r.tokens.push_back(static_cast<int32_t>(rng() % 5));
      r.keys.lora_id = static_cast<int64_t>(rng() % 3) - 1;
      const RequestId id = next_id++;
      auto cached =
          m.AddRequest(id, r.tokens.data(), static_cast<int64_t>(r.tokens.size()), r.keys);
      ASSERT_TRUE(cached.ok()) << cached.status().ToString();
      ASSERT_EQ(*cached % k_block_size, 0);
      ASSERT_LT(*cached, static_cast<int64_t>(r.tokens.size()));
      total_hits += *cached;
      live.emplace(id, std::move(r));
    } else if (kind < 8 && !live.empty()) {  // one step of a random request
      auto it = live.begin();
      std::advance(it, static_cast<ptrdiff_t>(rng() % live.size()));
      const RequestId id = it->first;
      Req& r = it->second;
      const int64_t computed = *m.NumComputedTokens(id);
      int64_t known = static_cast<int64_t>(r.tokens.size());
      if (computed == known) {  // decode: sample a token first
        if (known >= k_max_blocks * k_block_size) continue;
        const int32_t tok = static_cast<int32_t>(rng() % 5);
        ASSERT_TRUE(m.AppendTokens(id, &tok, 1).ok());
        r.tokens.push_back(tok);
        ++known;
      }
      const int64_t n = std::min<int64_t>(known - computed, 1 + static_cast<int64_t>(rng() % 7));
      Status s = m.AllocateSlots(id, n);
      if (s.code() == StatusCode::kResourceExhausted) {  // preempt: recompute later
        ASSERT_TRUE(m.FreeRequest(id).ok());
        auto cached = m.AddRequest(id, r.tokens.data(), known, r.keys);
        ASSERT_TRUE(cached.ok()) << cached.status().ToString();
        continue;
      }
      ASSERT_TRUE(s.ok()) << s.ToString();
      // "Run the step": write the KV of positions [computed, computed + n).
      for (int64_t pos = computed; pos < computed + n; ++pos) {
        kv[static_cast<size_t>(*m.SlotFor(id, pos))] = fingerprint(r, pos);
      }
      ASSERT_TRUE(m.CommitComputed(id, n).ok());
    } else if (!live.empty()) {  // finish
      auto it = live.begin();
      std::advance(it, static_cast<ptrdiff_t>(rng() % live.size()));
      ASSERT_TRUE(m.FreeRequest(it->first).ok());
      live.erase(it);
    }

    // Invariants.
    std::map<int32_t, int32_t> holders;
    for (const auto& [id, r] : live) {
      const auto& table = Table(m, id);
      for (int32_t b : table) ++holders[b];
      const int64_t computed = *m.NumComputedTokens(id);
      for (int64_t pos = 0; pos < computed; ++pos) {
        ASSERT_EQ(kv[static_cast<size_t>(*m.SlotFor(id, pos))], fingerprint(r, pos))
            << "op " << op << " request " << id << " position " << pos;
      }
    }
    for (const auto& [id, r] : live) {
      const auto& table = Table(m, id);
      const int64_t computed = *m.NumComputedTokens(id);
      for (size_t b = static_cast<size_t>(computed / k_block_size); b < table.size(); ++b) {
        ASSERT_EQ(holders[table[b]], 1)
            << "op " << op << ": request " << id << " will write shared block " << table[b];
      }
    }
    int64_t used = 0;
    for (int32_t b = 0; b < k_blocks; ++b) {
      ASSERT_EQ(m.pool().ref_count(b), holders.count(b) ? holders[b] : 0) << "block " << b;
      used += holders.count(b) ? 1 : 0;
    }
    ASSERT_EQ(m.num_free_blocks(), k_blocks - used);
  }
  EXPECT_GT(total_hits, 100);  // the workload really exercised prefix hits
}

}  // namespace
}  // namespace xrt
