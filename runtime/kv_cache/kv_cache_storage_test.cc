#include "runtime/kv_cache/kv_cache_storage.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

namespace xrt {
namespace {

using ::testing::HasSubstr;

KvCacheParams SmallParams() {
  KvCacheParams p;
  p.num_layers = 3;
  p.num_kv_heads = 2;
  p.head_dim = 8;
  p.block_size = 4;
  p.num_blocks = 5;
  return p;
}

TEST(KvCacheStorage, AllocatesAlignedZeroedArraysPerLayer) {
  auto s = KvCacheStorage::Create(SmallParams());
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const int64_t n = 5 * 4 * 2 * 8;
  EXPECT_EQ(s->values_per_layer(), n);
  EXPECT_EQ(s->total_bytes(), 2 * 3 * n * 4);
  std::vector<const float*> seen;
  for (int64_t layer = 0; layer < 3; ++layer) {
    for (void* raw : {s->key(layer), s->value(layer)}) {
      float* a = static_cast<float*>(raw);
      ASSERT_NE(a, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], 0.0f) << layer << " " << i;
      a[n - 1] = 1.0f;  // the whole array is writable
      seen.push_back(a);
    }
  }
  // Distinct arrays.
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
  // Moving keeps the pointers.
  void* k0 = s->key(0);
  KvCacheStorage moved = std::move(s).value();
  EXPECT_EQ(moved.key(0), k0);
  EXPECT_EQ(static_cast<float*>(moved.key(0))[n - 1], 1.0f);
}

TEST(KvCacheStorage, HalfCacheTakesHalfTheBytesAndFitsTwiceTheBlocks) {
  KvCacheParams p = SmallParams();
  p.element_bytes = 2;
  auto s = KvCacheStorage::Create(p);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  const int64_t n = 5 * 4 * 2 * 8;
  EXPECT_EQ(s->values_per_layer(), n);
  EXPECT_EQ(s->total_bytes(), 2 * 3 * n * 2);
  static_cast<uint16_t*>(s->value(2))[n - 1] = 0x3c00;  // the whole array is writable
  EXPECT_EQ(KvCacheStorage::BytesPerBlock(p), 2 * 3 * 4 * 2 * 8 * 2);
  KvCacheParams f32 = SmallParams();
  const int64_t budget = 10 * KvCacheStorage::BytesPerBlock(f32);
  EXPECT_EQ(*KvCacheStorage::NumBlocksForBudget(f32, budget), 10);
  EXPECT_EQ(*KvCacheStorage::NumBlocksForBudget(p, budget), 20);
  p.element_bytes = 3;
  EXPECT_THAT(KvCacheStorage::Create(p).status().message(), HasSubstr("element_bytes is 3"));
}

TEST(KvCacheStorage, DefaultSizeIsCappedInBytesOfTheElementSize) {
  KvCacheParams f32 = SmallParams();
  f32.num_layers = 8;
  f32.num_kv_heads = 8;
  f32.head_dim = 128;
  f32.block_size = 16;  // 1 MiB per f32 block: 4096 blocks under the 4 GiB cap
  ASSERT_EQ(KvCacheStorage::BytesPerBlock(f32), int64_t{1} << 20);
  KvCacheParams f16 = f32;
  f16.element_bytes = 2;
  EXPECT_EQ(DefaultNumKvBlocks(f32, 16, 100), 1600);  // under the cap: what is asked
  EXPECT_EQ(DefaultNumKvBlocks(f16, 16, 100), 1600);
  EXPECT_EQ(DefaultNumKvBlocks(f32, 64, 512), 4096);  // capped
  EXPECT_EQ(DefaultNumKvBlocks(f16, 64, 512), 8192);
  EXPECT_EQ(DefaultNumKvBlocks(f16, 64, 100), 6400);
}

TEST(KvCacheStorage, CreateNamesTheBadField) {
  KvCacheParams p = SmallParams();
  p.head_dim = 0;
  auto s = KvCacheStorage::Create(p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.status().message(), HasSubstr("head_dim is 0"));
  p = SmallParams();
  p.num_blocks = -1;
  EXPECT_THAT(KvCacheStorage::Create(p).status().message(), HasSubstr("num_blocks is -1"));
  p = SmallParams();
  p.num_blocks = int64_t{1} << 60;
  EXPECT_THAT(KvCacheStorage::Create(p).status().message(), HasSubstr("overflow"));
}

TEST(KvCacheStorage, BytesPerBlockAndBudget) {
  KvCacheParams p = SmallParams();
  // 2 (K and V) * 3 layers * 4 tokens * 2 heads * 8 dims * 4 bytes.
  EXPECT_EQ(KvCacheStorage::BytesPerBlock(p), 2 * 3 * 4 * 2 * 8 * 4);
  const int64_t per = KvCacheStorage::BytesPerBlock(p);
  p.num_blocks = 0;  // ignored
  auto n = KvCacheStorage::NumBlocksForBudget(p, 10 * per + per - 1);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 10);
  EXPECT_EQ(*KvCacheStorage::NumBlocksForBudget(p, per), 1);
  auto none = KvCacheStorage::NumBlocksForBudget(p, per - 1);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(none.status().message(), HasSubstr(std::to_string(per)));
  p.num_layers = 0;
  EXPECT_EQ(KvCacheStorage::NumBlocksForBudget(p, 1 << 20).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(KvCacheStorage, BudgetedStorageFitsTheBudget) {
  KvCacheParams p = SmallParams();
  const int64_t budget = 100000;
  auto n = KvCacheStorage::NumBlocksForBudget(p, budget);
  ASSERT_TRUE(n.ok());
  p.num_blocks = *n;
  auto s = KvCacheStorage::Create(p);
  ASSERT_TRUE(s.ok());
  EXPECT_LE(s->total_bytes(), budget);
  EXPECT_GT(s->total_bytes() + KvCacheStorage::BytesPerBlock(p), budget);
}

}  // namespace
}  // namespace xrt
