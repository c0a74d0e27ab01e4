#include "runtime/kv_cache/block_hash.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <unordered_set>

namespace xrt {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> Iota(int32_t n, int32_t start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<BlockHash> Hashes(const std::vector<int32_t>& tokens, int64_t block_size,
                              const PrefixKeys& keys = {}) {
  std::vector<BlockHash> h;
  ExtendBlockHashes(tokens.data(), static_cast<int64_t>(tokens.size()), block_size, keys, &h);
  return h;
}

TEST(BlockHash, OnlyFullBlocksAreHashed) {
  EXPECT_EQ(Hashes(Iota(15), 4).size(), 3u);
  EXPECT_EQ(Hashes(Iota(16), 4).size(), 4u);
  EXPECT_EQ(Hashes(Iota(3), 4).size(), 0u);
}

TEST(BlockHash, DeterministicAndStable) {
  auto a = Hashes(Iota(32), 8);
  auto b = Hashes(Iota(32), 8);
  EXPECT_EQ(a, b);
  // Pinned value: the hash must not change between builds or machines, or
  // persisted caches / cross-process comparisons would silently miss.
  std::vector<int32_t> t = {1, 2, 3, 4};
  BlockHash h = HashBlock(kRootBlockHash, t.data(), 4, nullptr, 0);
  EXPECT_EQ(h.lo, 0x29956c330c1420d9ULL);
  EXPECT_EQ(h.hi, 0xee9c69f6db9f1603ULL);
}

TEST(BlockHash, ChainedOnThePrefix) {
  // Same second block, different first block: the second hashes differ.
  std::vector<int32_t> x = {1, 2, 3, 4, 9, 9, 9, 9};
  std::vector<int32_t> y = {1, 2, 3, 5, 9, 9, 9, 9};
  auto hx = Hashes(x, 4), hy = Hashes(y, 4);
  ASSERT_EQ(hx.size(), 2u);
  EXPECT_NE(hx[0], hy[0]);
  EXPECT_NE(hx[1], hy[1]);
  // Same prefix, different tail: the shared blocks hash the same.
  std::vector<int32_t> z = {1, 2, 3, 4, 9, 9, 9, 8};
  auto hz = Hashes(z, 4);
  EXPECT_EQ(hx[0], hz[0]);
  EXPECT_NE(hx[1], hz[1]);
}

TEST(BlockHash, ExtendIsIncremental) {
  auto tokens = Iota(40, 100);
  std::vector<BlockHash> grown;
  for (int64_t n = 0; n <= 40; ++n) ExtendBlockHashes(tokens.data(), n, 8, {}, &grown);
  EXPECT_EQ(grown, Hashes(tokens, 8));
}

TEST(BlockHash, TokenOrderAndLengthMatter) {
  std::vector<int32_t> a = {1, 2}, b = {2, 1}, c = {1, 2, 0};
  EXPECT_NE(HashBlock(kRootBlockHash, a.data(), 2, nullptr, 0),
            HashBlock(kRootBlockHash, b.data(), 2, nullptr, 0));
  // A trailing 0 token must not vanish in the word packing.
  EXPECT_NE(HashBlock(kRootBlockHash, a.data(), 2, nullptr, 0),
            HashBlock(kRootBlockHash, c.data(), 3, nullptr, 0));
  // Moving a word from the tokens to the extra keys changes the hash.
  uint64_t extra = 0;
  EXPECT_NE(HashBlock(kRootBlockHash, c.data(), 3, nullptr, 0),
            HashBlock(kRootBlockHash, a.data(), 2, &extra, 1));
}

TEST(BlockHash, LoraSeparatesEveryBlock) {
  auto tokens = Iota(16);
  PrefixKeys base, lora1, lora2;
  lora1.lora_id = 1;
  lora2.lora_id = 2;
  auto h0 = Hashes(tokens, 4, base), h1 = Hashes(tokens, 4, lora1), h2 = Hashes(tokens, 4, lora2);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NE(h0[i], h1[i]) << i;
    EXPECT_NE(h1[i], h2[i]) << i;
  }
  EXPECT_EQ(Hashes(tokens, 4, lora1), h1);
}

TEST(BlockHash, ImagesSeparateOnlyOverlappingBlocks) {
  // Placeholder tokens 5..10 hold the image; blocks of 4: block 1 [4,8) and
  // block 2 [8,12) overlap it, block 0 does not.
  std::vector<int32_t> tokens(16, 7);
  PrefixKeys cat, dog, text;
  cat.images = {{5, 6, BlockHash{1, 2}}};
  dog.images = {{5, 6, BlockHash{3, 4}}};
  auto hc = Hashes(tokens, 4, cat), hd = Hashes(tokens, 4, dog), ht = Hashes(tokens, 4, text);
  EXPECT_EQ(hc[0], hd[0]);
  EXPECT_EQ(hc[0], ht[0]);
  EXPECT_NE(hc[1], hd[1]);
  EXPECT_NE(hc[2], hd[2]);
  EXPECT_NE(hc[3], hd[3]);  // chained: differs after the image too
  EXPECT_NE(hc[1], ht[1]);

  // Same image at another offset: different keys for the overlapped blocks.
  PrefixKeys shifted;
  shifted.images = {{6, 6, BlockHash{1, 2}}};
  EXPECT_NE(Hashes(tokens, 4, shifted)[1], hc[1]);
}

TEST(BlockHash, ExtraKeysOfABlock) {
  PrefixKeys k;
  k.lora_id = 3;
  k.images = {{2, 3, BlockHash{10, 11}}, {8, 4, BlockHash{20, 21}}};
  std::vector<uint64_t> extra;
  BlockExtraKeys(k, 0, 4, &extra);  // lora + image 0 (offset +2)
  ASSERT_EQ(extra.size(), 2u + 5u);
  EXPECT_EQ(extra[1], 3u);
  EXPECT_EQ(extra[3], 10u);
  EXPECT_EQ(extra[5], 3u);          // length
  EXPECT_EQ(extra[6], 2u);          // offset relative to the block start
  BlockExtraKeys(k, 4, 8, &extra);  // image 0 [2, 5) still overlaps [4, 8)
  EXPECT_EQ(extra.size(), 2u + 5u);
  EXPECT_EQ(static_cast<int64_t>(extra[6]), -2);
  BlockExtraKeys(k, 5, 8, &extra);  // [5,8): no image
  EXPECT_EQ(extra.size(), 2u);
  BlockExtraKeys(k, 4, 12, &extra);  // both images
  EXPECT_EQ(extra.size(), 2u + 10u);
  PrefixKeys none;
  BlockExtraKeys(none, 0, 4, &extra);
  EXPECT_TRUE(extra.empty());
}

TEST(BlockHash, ValidatePrefixKeys) {
  PrefixKeys k;
  EXPECT_TRUE(ValidatePrefixKeys(k).ok());
  k.lora_id = -2;
  EXPECT_THAT(ValidatePrefixKeys(k).message(), HasSubstr("lora_id is -2"));
  k = {};
  k.images = {{0, 0, {}}};
  EXPECT_THAT(ValidatePrefixKeys(k).message(), HasSubstr("image 0 has offset 0 and length 0"));
  k.images = {{4, 4, {}}, {6, 2, {}}};
  EXPECT_THAT(ValidatePrefixKeys(k).message(), HasSubstr("image 1 starts at 6"));
  k.images = {{4, 4, {}}, {8, 2, {}}};
  EXPECT_TRUE(ValidatePrefixKeys(k).ok());
}

TEST(BlockHash, NoCollisionsOverManyRandomBlocks) {
  std::mt19937_64 rng(1234);
  std::unordered_set<BlockHash, BlockHashHasher> seen;
  std::unordered_set<uint64_t> seen_lo;
  const int k_blocks = 20000;
  for (int i = 0; i < k_blocks; ++i) {
    std::vector<int32_t> t(16);
    for (auto& x : t) x = static_cast<int32_t>(rng() % 50);  // small vocab: many near-duplicates
    BlockHash h = HashBlock(kRootBlockHash, t.data(), 16, nullptr, 0);
    seen.insert(h);
    seen_lo.insert(h.lo);
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(k_blocks));
  EXPECT_EQ(seen_lo.size(), static_cast<size_t>(k_blocks));
  // Single-token changes at every position give distinct hashes.
  std::unordered_set<BlockHash, BlockHashHasher> flips;
  std::vector<int32_t> base(16, 0);
  for (int pos = 0; pos < 16; ++pos) {
    for (int32_t v = 1; v <= 64; ++v) {
      auto t = base;
      t[static_cast<size_t>(pos)] = v;
      flips.insert(HashBlock(kRootBlockHash, t.data(), 16, nullptr, 0));
    }
  }
  EXPECT_EQ(flips.size(), 16u * 64u);
}

}  // namespace
}  // namespace xrt
