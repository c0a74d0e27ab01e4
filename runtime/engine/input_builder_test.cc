#include "runtime/engine/input_builder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "runtime/kv_cache/kv_cache_manager.h"

namespace xrt {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kMaxReqs = 4, kMaxBlocks = 4, kBlockSize = 4;

InputBuilder MakeBuilder(int64_t vocab = 0) {
  auto table = BucketTable::Create({8, 16, 32}, {2, 4});
  EXPECT_TRUE(table.ok());
  auto b =
      InputBuilder::Create(InputBuilderParams{*table, kMaxReqs, kMaxBlocks, kBlockSize, vocab});
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return std::move(b).value();
}

std::vector<int32_t> Range(int32_t n, int32_t start) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(InputBuilder, CreateValidates) {
  auto table = BucketTable::Create({8}, {2});
  ASSERT_TRUE(table.ok());
  EXPECT_FALSE(InputBuilder::Create(InputBuilderParams{BucketTable(), 4, 4, 4, 0}).ok());
  auto bad = InputBuilder::Create(InputBuilderParams{*table, 4, 0, 4, 0});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("max_blocks_per_req is 0"));
  EXPECT_FALSE(InputBuilder::Create(InputBuilderParams{*table, 0, 4, 4, 0}).ok());
  EXPECT_FALSE(InputBuilder::Create(InputBuilderParams{*table, 4, 4, 0, 0}).ok());
  EXPECT_FALSE(InputBuilder::Create(InputBuilderParams{*table, 4, 4, 4, -1}).ok());
}

// Two decodes and one prefill chunk (the middle of a prompt: no logits).
TEST(InputBuilder, MixedDecodesAndPrefillChunk) {
  InputBuilder b = MakeBuilder();
  std::vector<int32_t> d0_tok = {500}, d1_tok = {600}, chunk = Range(6, 100);
  std::vector<int32_t> d0_table = {7, 2}, d1_table = {3}, p_table = {0, 1, 5};
  std::vector<ScheduledRequest> step(3);
  step[0] = {d0_tok.data(), 1, 5, &d0_table, true, 2};   // position 5 -> block 2, slot 9
  step[1] = {d1_tok.data(), 1, 0, &d1_table, true, -1};  // position 0 -> block 3, slot 12
  step[2] = {chunk.data(), 6, 4, &p_table, false, 1};    // positions 4..9
  StepInputs in;
  ASSERT_TRUE(b.Build(step, &in).ok());
  EXPECT_EQ(in.num_tokens, 8);
  EXPECT_EQ(in.token_bucket, 8);
  EXPECT_EQ(in.num_reqs, 3);
  EXPECT_EQ(in.num_logits, 2);
  EXPECT_EQ(in.req_bucket, 2);
  EXPECT_THAT(in.token_ids, ElementsAre(500, 600, 100, 101, 102, 103, 104, 105));
  EXPECT_THAT(in.positions, ElementsAre(5, 0, 4, 5, 6, 7, 8, 9));
  // chunk positions 4..7 -> block 1 (slots 4..7), 8..9 -> block 5 (slots 20, 21)
  EXPECT_THAT(in.slot_mapping, ElementsAre(9, 12, 4, 5, 6, 7, 20, 21));
  EXPECT_THAT(in.seq_lens, ElementsAre(6, 1, 10, 0));
  EXPECT_THAT(in.query_start_loc, ElementsAre(0, 1, 2, 8, 8));
  EXPECT_THAT(in.block_tables, ElementsAre(7, 2, 0, 0,  //
                                           3, 0, 0, 0,  //
                                           0, 1, 5, 0,  //
                                           0, 0, 0, 0));
  EXPECT_THAT(in.lora_slot, ElementsAre(2, -1, 1, 1, 1, 1, 1, 1));
  EXPECT_THAT(in.embed_source, Each(-1));
  EXPECT_THAT(in.logits_indices, ElementsAre(0, 1));
}

TEST(InputBuilder, PaddingValuesEverywhere) {
  InputBuilder b = MakeBuilder();
  std::vector<int32_t> prompt = Range(10, 1), table = {3, 1, 2};
  std::vector<ScheduledRequest> step = {{prompt.data(), 10, 0, &table, true, -1}};
  StepInputs in;
  ASSERT_TRUE(b.Build(step, &in).ok());
  EXPECT_EQ(in.token_bucket, 16);
  ASSERT_EQ(in.token_ids.size(), 16u);
  for (size_t t = 10; t < 16; ++t) {
    EXPECT_EQ(in.token_ids[t], 0) << t;
    EXPECT_EQ(in.positions[t], 0) << t;
    EXPECT_EQ(in.slot_mapping[t], -1) << t;
    EXPECT_EQ(in.embed_source[t], -1) << t;
    EXPECT_EQ(in.lora_slot[t], -1) << t;
  }
  EXPECT_THAT(in.seq_lens, ElementsAre(10, 0, 0, 0));
  EXPECT_THAT(in.query_start_loc, ElementsAre(0, 10, 10, 10, 10));
  EXPECT_EQ(in.block_tables.size(), static_cast<size_t>(kMaxReqs * kMaxBlocks));
  EXPECT_THAT(std::vector<int32_t>(in.block_tables.begin() + kMaxBlocks, in.block_tables.end()),
              Each(0));
  EXPECT_EQ(in.req_bucket, 2);
  EXPECT_THAT(in.logits_indices, ElementsAre(9, -1));
}

TEST(InputBuilder, LogitsIndicesFollowNeedsLogits) {
  InputBuilder b = MakeBuilder();
  std::vector<int32_t> a = Range(3, 1), c = Range(2, 1), d = Range(4, 1), e = {9};
  std::vector<int32_t> t = {0, 1};
  std::vector<ScheduledRequest> step = {{a.data(), 3, 0, &t, true},
                                        {c.data(), 2, 0, &t, false},
                                        {d.data(), 4, 0, &t, true},
                                        {e.data(), 1, 0, &t, true}};
  StepInputs in;
  ASSERT_TRUE(b.Build(step, &in).ok());
  EXPECT_EQ(in.num_logits, 3);
  EXPECT_EQ(in.req_bucket, 4);
  EXPECT_THAT(in.logits_indices, ElementsAre(2, 8, 9, -1));
  EXPECT_THAT(in.query_start_loc, ElementsAre(0, 3, 5, 9, 10));

  // No request samples: no lm_logits this step.
  for (auto& r : step) r.needs_logits = false;
  ASSERT_TRUE(b.Build(step, &in).ok());
  EXPECT_EQ(in.num_logits, 0);
  EXPECT_EQ(in.req_bucket, 0);
  EXPECT_TRUE(in.logits_indices.empty());
}

TEST(InputBuilder, EmbedSourceAndVocabCheck) {
  InputBuilder b = MakeBuilder(/*vocab=*/1000);
  std::vector<int32_t> toks = {1, 999, 999, 2}, embed = {-1, 0, 1, -1}, table = {0};
  std::vector<ScheduledRequest> step = {{toks.data(), 4, 0, &table, true, 0, embed.data()}};
  StepInputs in;
  ASSERT_TRUE(b.Build(step, &in).ok());
  EXPECT_THAT(in.embed_source, ElementsAre(-1, 0, 1, -1, -1, -1, -1, -1));
  toks[2] = 1000;
  Status s = b.Build(step, &in);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("request 0: token 2 is id 1000"));
  toks[2] = -1;
  EXPECT_FALSE(b.Build(step, &in).ok());
  toks[2] = 5;
  embed[1] = -2;
  EXPECT_THAT(b.Build(step, &in).message(), HasSubstr("token 1 has embed_source = -2"));
}

TEST(InputBuilder, ErrorsNameRequestAndValue) {
  InputBuilder b = MakeBuilder();
  std::vector<int32_t> toks = Range(40, 1);
  std::vector<int32_t> t1 = {0}, t2 = {0, 1}, t4 = {0, 1, 2, 3}, t5 = {0, 1, 2, 3, 4};
  std::vector<int32_t> tneg = {0, -3};
  StepInputs in;
  struct Case {
    std::vector<ScheduledRequest> step;
    StatusCode code;
    const char* expect;
  };
  std::vector<Case> cases = {
      {{}, StatusCode::kInvalidArgument, "no requests"},
      {std::vector<ScheduledRequest>(5, {toks.data(), 1, 0, &t1, true}), StatusCode::kOutOfRange,
       "5 requests exceed max_num_reqs = 4"},
      {{{toks.data(), 16, 0, &t4, false},
        {toks.data(), 16, 0, &t4, false},
        {toks.data(), 1, 0, &t1, false}},
       StatusCode::kOutOfRange,
       "exceeds the largest num_tokens bucket (32)"},
      {{{toks.data(), 1, 0, &t1, true}, {toks.data(), 5, 0, &t1, true}},
       StatusCode::kOutOfRange,
       "request 1 has a block table of 1 blocks; its 5 positions need 2"},
      {{{toks.data(), 1, 8, &t2, true}},
       StatusCode::kOutOfRange,
       "request 0 has a block table of 2 blocks; its 9 positions need 3"},
      {{{toks.data(), 1, 0, &t1, true}, {toks.data(), 1, 0, &t5, true}},
       StatusCode::kOutOfRange,
       "request 1 has a block table of 5 blocks; max_blocks_per_req = 4"},
      {{{toks.data(), 1, 4, &tneg, true}},
       StatusCode::kInvalidArgument,
       "request 0: block table entry 1 is -3"},
      {{{toks.data(), 0, 0, &t1, true}},
       StatusCode::kInvalidArgument,
       "request 0 has 0 new tokens"},
      {{{nullptr, 1, 0, &t1, true}}, StatusCode::kInvalidArgument, "no token ids"},
      {{{toks.data(), 1, -1, &t1, true}}, StatusCode::kInvalidArgument, "num_computed_tokens = -1"},
      {{{toks.data(), 1, 0, nullptr, true}}, StatusCode::kInvalidArgument, "no block table"},
      {{{toks.data(), 1, 0, &t1, true, -2}}, StatusCode::kInvalidArgument, "lora_slot = -2"},
  };
  for (const Case& c : cases) {
    Status s = b.Build(c.step, &in);
    ASSERT_FALSE(s.ok()) << c.expect;
    EXPECT_EQ(s.code(), c.code) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(c.expect));
  }
  auto table = BucketTable::Create({8, 16}, {2});
  ASSERT_TRUE(table.ok());
  auto wide = InputBuilder::Create(InputBuilderParams{*table, 8, 4, 4, 0});
  ASSERT_TRUE(wide.ok());
  std::vector<ScheduledRequest> three(3, {toks.data(), 1, 0, &t1, true});
  // More logits than the largest req bucket (a builder with more request rows).
  Status s = wide->Build(three, &in);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("num_reqs = 3 exceeds the largest num_reqs bucket (2)"));
}

TEST(InputBuilder, ErrorLeavesOutputUnchanged) {
  InputBuilder b = MakeBuilder();
  std::vector<int32_t> toks = Range(4, 1), table = {2};
  StepInputs in;
  ASSERT_TRUE(b.Build({{toks.data(), 4, 0, &table, true}}, &in).ok());
  const StepInputs before = in;
  std::vector<int32_t> short_table = {};
  ASSERT_FALSE(
      b.Build({{toks.data(), 2, 0, &table, true}, {toks.data(), 4, 0, &short_table, true}}, &in)
          .ok());
  EXPECT_EQ(in.token_ids, before.token_ids);
  EXPECT_EQ(in.slot_mapping, before.slot_mapping);
  EXPECT_EQ(in.query_start_loc, before.query_start_loc);
  EXPECT_EQ(in.num_tokens, before.num_tokens);
}

TEST(InputBuilder, ReusesCapacityAcrossSteps) {
  InputBuilder b = MakeBuilder();
  StepInputs in;
  b.Reserve(&in);
  std::vector<const int32_t*> ptrs;
  auto data_ptrs = [&] {
    return std::vector<const int32_t*>{
        in.token_ids.data(),    in.positions.data(), in.slot_mapping.data(),
        in.block_tables.data(), in.seq_lens.data(),  in.query_start_loc.data(),
        in.embed_source.data(), in.lora_slot.data(), in.logits_indices.data()};
  };
  std::vector<int32_t> toks = Range(32, 1), t = {0, 1, 2, 3};
  const std::vector<std::vector<ScheduledRequest>> steps = {
      {{toks.data(), 1, 0, &t, true}},
      {{toks.data(), 16, 0, &t, true}, {toks.data(), 16, 0, &t, true}},
      {{toks.data(), 3, 0, &t, true}, {toks.data(), 1, 2, &t, true}, {toks.data(), 1, 5, &t, true}},
      {{toks.data(), 9, 0, &t, true}},
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    ASSERT_TRUE(b.Build(steps[i], &in).ok());
    if (i == 0) ptrs = data_ptrs();
    EXPECT_EQ(data_ptrs(), ptrs) << "step " << i << " reallocated";
  }
}

// Property test: random steps over a real KvCacheManager; checks the
// kernel-facing invariants of the built inputs.
TEST(InputBuilder, RandomStepsKeepInvariants) {
  const int64_t k_reqs = 6, k_blocks_per_req = 8, k_bs = 4;
  auto table = BucketTable::Create({8, 16, 32, 64}, {2, 4, 6});
  ASSERT_TRUE(table.ok());
  auto builder =
      InputBuilder::Create(InputBuilderParams{*table, k_reqs, k_blocks_per_req, k_bs, 1000});
  ASSERT_TRUE(builder.ok());
  auto mgr = KvCacheManager::Create(KvCacheManagerParams{64, k_bs, k_blocks_per_req, false});
  ASSERT_TRUE(mgr.ok());
  std::mt19937_64 rng(2024);
  StepInputs in;
  std::vector<std::vector<int32_t>> step_tokens(k_reqs);
  RequestId next_id = 1;
  for (int iter = 0; iter < 500; ++iter) {
    // Random requests: fresh prompts (chunked) or decodes of earlier ones.
    const int64_t n = 1 + static_cast<int64_t>(rng() % k_reqs);
    std::vector<ScheduledRequest> step;
    std::vector<RequestId> ids, added;
    int64_t budget = 64;
    for (int64_t r = 0; r < n; ++r) {
      const RequestId id = next_id++;
      const int64_t prompt_len = 1 + static_cast<int64_t>(rng() % 30);
      std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
      for (auto& x : prompt) x = static_cast<int32_t>(rng() % 1000);
      ASSERT_TRUE(mgr->AddRequest(id, prompt.data(), prompt_len).ok());
      added.push_back(id);
      // Pretend a random part is already computed (an earlier chunk).
      const int64_t done = static_cast<int64_t>(rng() % static_cast<uint64_t>(prompt_len));
      const int64_t todo = std::min<int64_t>(prompt_len - done, budget);
      if (todo < 1) break;
      budget -= todo;
      if (!mgr->AllocateSlots(id, done).ok() || !mgr->CommitComputed(id, done).ok() ||
          !mgr->AllocateSlots(id, todo).ok()) {
        break;  // out of blocks: a smaller step
      }
      step_tokens[static_cast<size_t>(r)].assign(prompt.begin() + done,
                                                 prompt.begin() + done + todo);
      ScheduledRequest q;
      q.token_ids = step_tokens[static_cast<size_t>(r)].data();
      q.num_tokens = todo;
      q.num_computed_tokens = done;
      q.block_table = *mgr->BlockTable(id);
      q.needs_logits = done + todo == prompt_len;
      q.lora_slot = static_cast<int32_t>(rng() % 3) - 1;
      step.push_back(q);
      ids.push_back(id);
    }
    auto free_all = [&] {
      for (RequestId id : added) ASSERT_TRUE(mgr->FreeRequest(id).ok());
      ASSERT_EQ(mgr->num_requests(), 0u);
    };
    if (step.empty()) {
      free_all();
      continue;
    }
    Status s = builder->Build(step, &in);
    ASSERT_TRUE(s.ok()) << s.ToString();

    // Totals and buckets.
    int64_t total = 0, logits = 0;
    for (const auto& q : step) total += q.num_tokens, logits += q.needs_logits;
    ASSERT_EQ(in.num_tokens, total);
    ASSERT_EQ(in.token_bucket, *table->TokenBucketFor(total));
    ASSERT_TRUE(in.token_bucket / 2 < total || in.token_bucket == 8);  // smallest bucket
    ASSERT_EQ(in.num_logits, logits);
    ASSERT_EQ(in.req_bucket, logits == 0 ? 0 : *table->ReqBucketFor(logits));
    ASSERT_EQ(in.token_ids.size(), static_cast<size_t>(in.token_bucket));

    // Every real token has a unique slot, and it matches the block table.
    std::set<int32_t> slots;
    size_t t = 0, j = 0;
    for (size_t r = 0; r < step.size(); ++r) {
      const auto& q = step[r];
      ASSERT_EQ(in.query_start_loc[r], static_cast<int32_t>(t));
      ASSERT_EQ(in.seq_lens[r], q.num_computed_tokens + q.num_tokens);
      const auto& bt = *q.block_table;
      for (size_t k = 0; k < static_cast<size_t>(k_blocks_per_req); ++k) {
        ASSERT_EQ(in.block_tables[r * k_blocks_per_req + k], k < bt.size() ? bt[k] : 0);
      }
      for (int64_t i = 0; i < q.num_tokens; ++i, ++t) {
        const int64_t pos = q.num_computed_tokens + i;
        ASSERT_EQ(in.token_ids[t], q.token_ids[i]);
        ASSERT_EQ(in.positions[t], pos);
        ASSERT_EQ(in.slot_mapping[t], *mgr->SlotFor(ids[r], pos));
        ASSERT_EQ(in.slot_mapping[t], bt[static_cast<size_t>(pos / k_bs)] * k_bs + pos % k_bs);
        ASSERT_TRUE(slots.insert(in.slot_mapping[t]).second)
            << "slot reused " << in.slot_mapping[t];
        ASSERT_EQ(in.lora_slot[t], q.lora_slot);
        ASSERT_EQ(in.embed_source[t], -1);
      }
      if (q.needs_logits) {
        ASSERT_EQ(in.logits_indices[j++], static_cast<int32_t>(t - 1));
      }
    }
    // Padding invariants.
    for (; t < static_cast<size_t>(in.token_bucket); ++t) {
      ASSERT_EQ(in.token_ids[t], 0);
      ASSERT_EQ(in.positions[t], 0);
      ASSERT_EQ(in.slot_mapping[t], -1);
      ASSERT_EQ(in.embed_source[t], -1);
      ASSERT_EQ(in.lora_slot[t], -1);
    }
    for (size_t r = step.size(); r < static_cast<size_t>(k_reqs); ++r) {
      ASSERT_EQ(in.seq_lens[r], 0);
      ASSERT_EQ(in.query_start_loc[r + 1], total);
      for (size_t k = 0; k < static_cast<size_t>(k_blocks_per_req); ++k) {
        ASSERT_EQ(in.block_tables[r * k_blocks_per_req + k], 0);
      }
    }
    for (; j < in.logits_indices.size(); ++j) ASSERT_EQ(in.logits_indices[j], -1);

    free_all();
  }
}

}  // namespace
}  // namespace xrt
