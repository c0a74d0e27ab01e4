// The scheduler's image rules (scheduler.h, "Images"): whole images within the
// encoder budget, chunks cut before an image that cannot be encoded, shared and
// cached encoder outputs, embed_source rows, entries freed once computed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/engine/scheduler.h"

namespace xrt {
namespace {

constexpr int64_t kImage = 8;  // tokens per image

BlockHash ImageHash(uint64_t i) { return BlockHash{1000 + i, 2000 + i}; }

struct Setup {
  int64_t token_budget = 32;
  int64_t cache_images = 4;
  int64_t images_per_step = 1;
  int64_t max_num_seqs = 4;
  bool prefix_caching = false;
};

Scheduler Make(const Setup& s) {
  SchedulerParams p;
  p.limits.max_num_seqs = s.max_num_seqs;
  p.limits.max_num_batched_tokens = s.token_budget;
  p.limits.max_model_len = 128;
  p.limits.block_size = 4;
  p.limits.max_blocks_per_req = 32;
  auto b = BucketTable::Create({8, 16, 32}, {1, 2, s.max_num_seqs});
  EXPECT_TRUE(b.ok());
  p.buckets = *b;
  p.num_kv_blocks = 128;
  p.enable_prefix_caching = s.prefix_caching;
  p.encoder_cache_rows = s.cache_images * kImage;
  p.encoder_item_rows = kImage;
  p.encoder_budget_rows = s.images_per_step * kImage;
  auto sched = Scheduler::Create(p);
  EXPECT_TRUE(sched.ok()) << sched.status().ToString();
  return std::move(*sched);
}

// A prompt of `n` text tokens with images (given by id) at the given offsets.
struct Req {
  std::vector<int32_t> prompt;
  PrefixKeys keys;
};
Req Prompt(int64_t n, std::vector<std::pair<int64_t, uint64_t>> images, int32_t seed = 1) {
  Req r;
  for (int64_t i = 0; i < n; ++i) r.prompt.push_back(static_cast<int32_t>(seed * 37 + i) % 500);
  for (auto [offset, id] : images) {
    for (int64_t i = 0; i < kImage; ++i) r.prompt[offset + i] = 999;
    r.keys.images.push_back(MultimodalSpan{offset, kImage, ImageHash(id)});
  }
  return r;
}

Status Add(Scheduler& s, RequestId id, const Req& r, int64_t max_tokens = 4) {
  return s.AddRequest(id, r.prompt, max_tokens, r.keys);
}

// Applies a step, sampling token 7 for every request that samples.
void Apply(Scheduler& s, const SchedulerOutput& out) {
  ASSERT_TRUE(s.UpdateAfterStep(out, std::vector<int32_t>(out.num_sampling, 7)).ok());
}

std::vector<int32_t> EmbedSource(const ScheduledRequest& r) {
  if (!r.embed_source) return {};
  return std::vector<int32_t>(r.embed_source, r.embed_source + r.num_tokens);
}

TEST(SchedulerImagesTest, EncodesTheWholeImageAndMapsItsTokensToCacheRows) {
  Scheduler s = Make({});
  ASSERT_TRUE(Add(s, 1, Prompt(20, {{4, 1}})).ok());
  auto out = s.Schedule();
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out->size(), 1u);
  EXPECT_EQ(out->requests[0].num_tokens, 20);
  ASSERT_EQ(out->encode.size(), 1u);
  EXPECT_EQ(out->encode[0].hash, ImageHash(1));
  EXPECT_EQ(out->encode[0].request, 1u);
  EXPECT_EQ(out->encode[0].image, 0u);
  const int32_t row = static_cast<int32_t>(out->encode[0].cache_row);
  std::vector<int32_t> want(20, -1);
  for (int i = 0; i < kImage; ++i) want[4 + i] = row + i;
  EXPECT_EQ(EmbedSource(out->requests[0]), want);
  Apply(s, *out);
  // The image's tokens are in the KV cache: the entry is freeable but still cached.
  EXPECT_EQ(s.encoder_cache()->num_available_slots(), 4);
  EXPECT_TRUE(s.encoder_cache()->Contains(ImageHash(1)));
}

TEST(SchedulerImagesTest, CutsTheChunkBeforeAnImageBeyondTheEncoderBudget) {
  Scheduler s = Make({.token_budget = 32, .images_per_step = 1});
  ASSERT_TRUE(Add(s, 1, Prompt(24, {{2, 1}, {14, 2}})).ok());
  auto out = s.Schedule();
  ASSERT_TRUE(out.ok());
  // Budget for one image: the chunk stops where the second image starts.
  EXPECT_EQ(out->requests[0].num_tokens, 14);
  ASSERT_EQ(out->encode.size(), 1u);
  EXPECT_EQ(out->encode[0].hash, ImageHash(1));
  Apply(s, *out);
  out = s.Schedule();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->requests[0].num_tokens, 10);
  ASSERT_EQ(out->encode.size(), 1u);
  EXPECT_EQ(out->encode[0].hash, ImageHash(2));
  EXPECT_EQ(EmbedSource(out->requests[0])[0], out->encode[0].cache_row);
}

TEST(SchedulerImagesTest, AChunkMayEndInsideAnImageWhoseRowsAreCached) {
  Scheduler s = Make({.token_budget = 8});
  ASSERT_TRUE(Add(s, 1, Prompt(16, {{4, 1}})).ok());
  auto out = s.Schedule();
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->requests[0].num_tokens, 8);  // ends in the middle of the image
  ASSERT_EQ(out->encode.size(), 1u);          // encoded whole, once
  const int32_t row = static_cast<int32_t>(out->encode[0].cache_row);
  EXPECT_THAT(EmbedSource(out->requests[0]),
              ::testing::ElementsAre(-1, -1, -1, -1, row, row + 1, row + 2, row + 3));
  Apply(s, *out);
  out = s.Schedule();
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->encode.empty());  // the rest reads the cached rows
  EXPECT_THAT(EmbedSource(out->requests[0]),
              ::testing::ElementsAre(row + 4, row + 5, row + 6, row + 7, -1, -1, -1, -1));
}

TEST(SchedulerImagesTest, AnImageSharedInOneStepIsEncodedOnceAndLaterHits) {
  Scheduler s = Make({.images_per_step = 2});
  ASSERT_TRUE(Add(s, 1, Prompt(12, {{0, 5}}, 1)).ok());
  ASSERT_TRUE(Add(s, 2, Prompt(12, {{2, 5}}, 2)).ok());
  auto out = s.Schedule();
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->size(), 2u);
  ASSERT_EQ(out->encode.size(), 1u);
  EXPECT_EQ(EmbedSource(out->requests[0])[0], EmbedSource(out->requests[1])[2]);
  Apply(s, *out);
  EXPECT_EQ(s.encoder_cache()->misses(), 1);
  // A later request with the same image: no encoding, a hit.
  ASSERT_TRUE(Add(s, 3, Prompt(10, {{1, 5}}, 3)).ok());
  out = s.Schedule();
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->encode.empty());
  EXPECT_EQ(s.encoder_cache()->hits(), 1);
}

TEST(SchedulerImagesTest, ARequestWaitsWhileEveryCacheSlotIsInUse) {
  // One slot; request 1's image stays referenced until its tokens are computed.
  Scheduler s = Make({.token_budget = 8, .cache_images = 1, .images_per_step = 1});
  ASSERT_TRUE(Add(s, 1, Prompt(16, {{4, 1}}, 1)).ok());
  ASSERT_TRUE(Add(s, 2, Prompt(12, {{0, 2}}, 2)).ok());
  auto out = s.Schedule();
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->size(), 1u);  // request 2 cannot start: its image has no slot
  EXPECT_EQ(out->request_ids[0], 1u);
  Apply(s, *out);
  out = s.Schedule();  // request 1 computes the rest of its image: the slot frees after
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out->size(), 1u);
  Apply(s, *out);
  for (int step = 0; step < 4; ++step) {
    out = s.Schedule();
    ASSERT_TRUE(out.ok());
    bool has2 =
        std::find(out->request_ids.begin(), out->request_ids.end(), 2u) != out->request_ids.end();
    Apply(s, *out);
    if (has2) {
      EXPECT_EQ(s.encoder_cache()->evictions(), 1);  // image 1's freeable entry made room
      return;
    }
  }
  FAIL() << "request 2 never ran";
}

TEST(SchedulerImagesTest, PreemptionAndFinishReleaseEntries) {
  Scheduler s = Make({.token_budget = 8});
  ASSERT_TRUE(Add(s, 1, Prompt(16, {{4, 1}})).ok());
  auto out = s.Schedule();
  ASSERT_TRUE(out.ok());
  Apply(s, *out);
  EXPECT_EQ(s.encoder_cache()->num_available_slots(), 3);  // still referenced
  ASSERT_TRUE(s.FinishRequest(1).ok());
  EXPECT_EQ(s.encoder_cache()->num_available_slots(), 4);
}

TEST(SchedulerImagesTest, RejectsBadSpans) {
  Scheduler s = Make({});
  Req r = Prompt(12, {{0, 1}});
  r.keys.images[0].length = 5;
  EXPECT_THAT(Add(s, 1, r).message(), ::testing::HasSubstr("images are 8 tokens"));
  Req beyond = Prompt(12, {});
  beyond.keys.images.push_back(MultimodalSpan{8, kImage, ImageHash(1)});
  EXPECT_FALSE(Add(s, 2, beyond).ok());
}

}  // namespace
}  // namespace xrt
