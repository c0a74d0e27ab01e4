#include "runtime/engine/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>

namespace xrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int32_t kVocab = 1000;

BucketTable Buckets(std::vector<int64_t> tokens, std::vector<int64_t> reqs) {
  auto b = BucketTable::Create(std::move(tokens), std::move(reqs));
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return std::move(b).value();
}

struct Config {
  int64_t max_num_seqs = 4;
  int64_t max_num_batched_tokens = 32;
  int64_t max_model_len = 256;
  bool chunked = true;
  int64_t num_blocks = 64;
  int64_t block_size = 4;
  bool prefix_caching = false;
  int64_t max_loras = 0;
};

SchedulerParams MakeParams(const Config& c) {
  SchedulerParams p;
  p.limits.max_num_seqs = c.max_num_seqs;
  p.limits.max_num_batched_tokens = c.max_num_batched_tokens;
  p.limits.max_model_len = c.max_model_len;
  std::vector<int64_t> tb;
  for (int64_t t = 8; t < c.max_num_batched_tokens; t *= 2) tb.push_back(t);
  tb.push_back(c.max_num_batched_tokens);
  std::vector<int64_t> rb;
  for (int64_t r = 1; r < c.max_num_seqs; r *= 2) rb.push_back(r);
  rb.push_back(c.max_num_seqs);
  p.buckets = Buckets(tb, rb);
  p.enable_chunked_prefill = c.chunked;
  p.num_kv_blocks = c.num_blocks;
  p.limits.block_size = c.block_size;
  p.limits.max_blocks_per_req = (c.max_model_len + c.block_size - 1) / c.block_size;
  p.enable_prefix_caching = c.prefix_caching;
  p.max_loras = c.max_loras;
  return p;
}

// The simulated model: the next token is a function of the whole history, so
// a recomputed request must have exactly the same history to agree.
int32_t NextToken(const std::vector<int32_t>& history) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t t : history) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(t));
    h *= 1099511628211ULL;
  }
  return static_cast<int32_t>(h % kVocab);
}

// What a request produces when it runs alone.
std::vector<int32_t> Reference(std::vector<int32_t> prompt, int64_t max_tokens) {
  std::vector<int32_t> out;
  for (int64_t i = 0; i < max_tokens; ++i) {
    const int32_t t = NextToken(prompt);
    out.push_back(t);
    prompt.push_back(t);
  }
  return out;
}

std::vector<int32_t> Prompt(int64_t n, int32_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = (seed * 131 + static_cast<int32_t>(i) * 7) % kVocab;
  return v;
}

// Drives a Scheduler like the engine would, checking the invariants of every
// step.
class Harness {
 public:
  explicit Harness(const Config& c) : config_(c) {
    auto s = Scheduler::Create(MakeParams(c));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    sched_ = std::make_unique<Scheduler>(std::move(s).value());
    InputBuilderParams ip;
    ip.buckets = sched_->params().buckets;
    ip.max_num_reqs = c.max_num_seqs;
    ip.max_blocks_per_req = sched_->params().limits.max_blocks_per_req;
    ip.block_size = c.block_size;
    ip.vocab_size = kVocab;
    auto b = InputBuilder::Create(ip);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    builder_ = std::make_unique<InputBuilder>(std::move(b).value());
  }

  Scheduler& s() { return *sched_; }

  void Add(RequestId id, std::vector<int32_t> prompt, int64_t max_tokens, PrefixKeys keys = {}) {
    expected_[id] = Reference(prompt, max_tokens);
    max_tokens_[id] = max_tokens;
    Status st = sched_->AddRequest(id, std::move(prompt), max_tokens, std::move(keys));
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  // One engine iteration: Schedule, check, build inputs, "run", sample,
  // UpdateAfterStep, finish the requests that reached max_tokens.
  SchedulerOutput Step() {
    auto o = sched_->Schedule();
    EXPECT_TRUE(o.ok()) << o.status().ToString();
    if (!o.ok()) return {};
    SchedulerOutput out = std::move(o).value();
    Check(out);
    if (out.empty()) return out;
    std::vector<int32_t> sampled;
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out.samples(i)) continue;
      auto toks = sched_->Tokens(out.request_ids[i]);
      EXPECT_TRUE(toks.ok());
      sampled.push_back(NextToken(**toks));
    }
    Status st = sched_->UpdateAfterStep(out, sampled);
    EXPECT_TRUE(st.ok()) << st.ToString();
    for (size_t i = 0; i < out.size(); ++i) {
      const RequestId id = out.request_ids[i];
      if (!out.samples(i)) continue;
      auto gen = sched_->NumGeneratedTokens(id);
      EXPECT_TRUE(gen.ok());
      if (*gen >= max_tokens_[id]) {
        auto toks = sched_->Tokens(id);
        const std::vector<int32_t>& all = **toks;
        outputs_[id].assign(all.end() - *gen, all.end());
        EXPECT_TRUE(sched_->FinishRequest(id).ok());
      }
    }
    ++steps_;
    return out;
  }

  // Steps until nothing is left (bounded).
  void RunToCompletion(int64_t max_steps = 10000) {
    for (int64_t i = 0; i < max_steps && sched_->HasUnfinished(); ++i) {
      Step();
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_FALSE(sched_->HasUnfinished());
  }

  // Checks outputs of finished requests against running alone; returns how many.
  void ExpectOutputsMatchReference() {
    for (const auto& [id, toks] : outputs_) {
      EXPECT_EQ(toks, expected_[id]) << "request " << id;
    }
  }

  void ExpectPoolEmpty() {
    EXPECT_EQ(sched_->kv().num_requests(), 0u);
    EXPECT_EQ(sched_->kv().num_free_blocks(), config_.num_blocks);
    EXPECT_EQ(sched_->num_running(), 0);
    EXPECT_EQ(sched_->num_waiting(), 0);
  }

  void Abort(RequestId id) {
    ASSERT_TRUE(sched_->FinishRequest(id).ok());
    aborted_.insert(id);
  }

  const std::map<RequestId, std::vector<int32_t>>& outputs() const { return outputs_; }
  const std::map<RequestId, std::vector<int32_t>>& expected() const { return expected_; }
  int64_t steps() const { return steps_; }

 private:
  void Check(const SchedulerOutput& out) {
    const SchedulerParams& p = sched_->params();
    ASSERT_EQ(out.request_ids.size(), out.requests.size());
    ASSERT_EQ(out.num_cached_tokens.size(), out.requests.size());
    EXPECT_LE(out.num_tokens, p.limits.max_num_batched_tokens);
    EXPECT_LE(out.num_tokens, p.buckets.max_tokens());
    EXPECT_LE(static_cast<int64_t>(out.size()), p.limits.max_num_seqs);
    EXPECT_LE(sched_->num_running(), p.limits.max_num_seqs);
    int64_t tokens = 0, sampling = 0;
    bool seen_prefill = false;
    std::set<RequestId> ids;
    for (size_t i = 0; i < out.size(); ++i) {
      const RequestId id = out.request_ids[i];
      const ScheduledRequest& r = out.requests[i];
      EXPECT_TRUE(ids.insert(id).second) << "request " << id << " twice in a step";
      EXPECT_GE(r.num_tokens, 1);
      tokens += r.num_tokens;
      sampling += r.needs_logits ? 1 : 0;
      auto state = sched_->State(id);
      ASSERT_TRUE(state.ok());
      // Decodes first: no DECODE after a PREFILL in the same step.
      if (*state == RequestState::kPrefill) seen_prefill = true;
      if (*state == RequestState::kDecode) {
        EXPECT_FALSE(seen_prefill) << "decode of request " << id << " after a prefill chunk";
        EXPECT_EQ(r.num_tokens, 1);
        EXPECT_TRUE(r.needs_logits);
      }
      auto computed = sched_->NumComputed(id);
      ASSERT_TRUE(computed.ok());
      EXPECT_EQ(r.num_computed_tokens, *computed);
      auto toks = sched_->Tokens(id);
      ASSERT_TRUE(toks.ok());
      const std::vector<int32_t>& all = **toks;
      EXPECT_LE(r.num_computed_tokens + r.num_tokens, static_cast<int64_t>(all.size()));
      EXPECT_EQ(r.needs_logits,
                r.num_computed_tokens + r.num_tokens == static_cast<int64_t>(all.size()));
      EXPECT_EQ(r.token_ids, all.data() + r.num_computed_tokens);
      if (std::find(out.preempted.begin(), out.preempted.end(), id) != out.preempted.end()) {
        // Preempted then re-admitted in the same step: starts from scratch
        // (or from its cached prefix).
        EXPECT_EQ(*state, RequestState::kPrefill);
      }
    }
    EXPECT_EQ(tokens, out.num_tokens);
    EXPECT_EQ(sampling, out.num_sampling);
    if (out.empty()) return;
    StepInputs in;
    Status st = builder_->Build(out.requests, &in);
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::set<int32_t> slots;
    for (int64_t i = 0; i < in.num_tokens; ++i) {
      const int32_t slot = in.slot_mapping[static_cast<size_t>(i)];
      EXPECT_GE(slot, 0);
      EXPECT_LT(slot, config_.num_blocks * config_.block_size);
      EXPECT_TRUE(slots.insert(slot).second) << "slot " << slot << " written twice in a step";
    }
  }

  Config config_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<InputBuilder> builder_;
  std::map<RequestId, int64_t> max_tokens_;
  std::map<RequestId, std::vector<int32_t>> expected_;
  std::map<RequestId, std::vector<int32_t>> outputs_;
  std::set<RequestId> aborted_;
  int64_t steps_ = 0;
};

TEST(Scheduler, CreateValidates) {
  Config c;
  SchedulerParams p = MakeParams(c);
  p.limits.max_num_seqs = 0;
  auto s = Scheduler::Create(p);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("max_num_seqs is 0"));

  p = MakeParams(c);
  p.limits.max_num_seqs = 8;  // req buckets end at 4
  s = Scheduler::Create(p);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("largest req bucket is 4"));

  p = MakeParams(c);
  p.buckets = BucketTable();
  EXPECT_FALSE(Scheduler::Create(p).ok());

  p = MakeParams(c);
  p.limits.max_blocks_per_req = 10;  // 40 positions < 256
  s = Scheduler::Create(p);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("max_model_len = 256"));

  Config nc = c;
  nc.chunked = false;  // budget 32 < max_model_len 256
  s = Scheduler::Create(MakeParams(nc));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("without chunked prefill"));

  // Token budget is the smaller of the limit and the largest bucket.
  p = MakeParams(c);
  p.limits.max_num_batched_tokens = 1000;
  s = Scheduler::Create(p);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->token_budget(), 32);
}

TEST(Scheduler, AddRequestValidates) {
  Config c;
  c.max_model_len = 64;
  c.num_blocks = 8;  // 32 positions
  Harness h(c);
  Status st = h.s().AddRequest(1, {}, 4);
  EXPECT_THAT(st.message(), HasSubstr("prompt is empty"));
  st = h.s().AddRequest(1, Prompt(60, 1), 5);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(),
              HasSubstr("prompt (60 tokens) plus max_tokens (5) exceeds max_model_len (64)"));
  st = h.s().AddRequest(1, Prompt(4, 1), 0);
  EXPECT_THAT(st.message(), HasSubstr("max_tokens is 0"));
  st = h.s().AddRequest(1, Prompt(30, 1), 4);  // 33 positions > 32
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(st.message(), HasSubstr("need 9 KV blocks; the pool has 8"));
  ASSERT_TRUE(h.s().AddRequest(1, Prompt(30, 1), 3).ok());  // 32 positions: fits
  st = h.s().AddRequest(1, Prompt(4, 1), 1);
  EXPECT_THAT(st.message(), HasSubstr("request 1 is already known"));
  PrefixKeys bad;
  bad.lora_id = -5;
  EXPECT_FALSE(h.s().AddRequest(2, Prompt(4, 1), 1, bad).ok());
  EXPECT_EQ(h.s().num_waiting(), 1);
  EXPECT_TRUE(h.s().HasUnfinished());
  EXPECT_EQ(h.s().FinishRequest(7).code(), StatusCode::kNotFound);
}

TEST(Scheduler, SingleRequestLifecycle) {
  Config c;
  Harness h(c);
  h.Add(1, Prompt(10, 1), 3);
  EXPECT_EQ(*h.s().State(1), RequestState::kWaiting);
  SchedulerOutput o = h.Step();
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o.requests[0].num_tokens, 10);
  EXPECT_TRUE(o.samples(0));
  EXPECT_EQ(*h.s().State(1), RequestState::kDecode);
  EXPECT_EQ(*h.s().NumComputed(1), 10);
  EXPECT_EQ(*h.s().NumGeneratedTokens(1), 1);
  o = h.Step();
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o.requests[0].num_tokens, 1);
  EXPECT_EQ(o.requests[0].num_computed_tokens, 10);
  h.RunToCompletion();
  h.ExpectOutputsMatchReference();
  EXPECT_EQ(h.outputs().at(1).size(), 3u);
  h.ExpectPoolEmpty();
}

TEST(Scheduler, BudgetAndMaxNumSeqsNeverExceeded) {
  Config c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 32;
  c.num_blocks = 256;
  Harness h(c);
  for (RequestId id = 1; id <= 12; ++id) h.Add(id, Prompt(5 + id * 3, static_cast<int32_t>(id)), 6);
  int64_t max_running = 0;
  while (h.s().HasUnfinished()) {
    SchedulerOutput o = h.Step();
    max_running = std::max<int64_t>(max_running, static_cast<int64_t>(o.size()));
    ASSERT_LT(h.steps(), 1000);
    if (HasFailure()) return;
  }
  EXPECT_EQ(max_running, 4);
  h.ExpectOutputsMatchReference();
  EXPECT_EQ(h.outputs().size(), 12u);
  h.ExpectPoolEmpty();
}

// A step holds at most max_loras distinct adapters; base-model requests and
// requests of an adapter already in the step always fit. A waiting request
// whose adapter would be one too many stops admission (strict FCFS).
TEST(Scheduler, AtMostMaxLorasDistinctAdaptersPerStep) {
  Config c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 64;
  c.num_blocks = 256;
  c.max_loras = 2;
  Harness h(c);
  // Adapters 10, 11, 12 and the base model (-1), interleaved.
  const int64_t adapters[] = {10, -1, 11, 10, 12, -1, 11, 12};
  std::map<RequestId, int64_t> lora_of;
  for (RequestId id = 1; id <= 8; ++id) {
    PrefixKeys keys;
    keys.lora_id = adapters[id - 1];
    lora_of[id] = keys.lora_id;
    h.Add(id, Prompt(6, static_cast<int32_t>(id)), 4, keys);
  }
  bool first = true;
  while (h.s().HasUnfinished()) {
    SchedulerOutput o = h.Step();
    std::set<int64_t> distinct;
    for (RequestId id : o.request_ids)
      if (lora_of[id] >= 0) distinct.insert(lora_of[id]);
    EXPECT_LE(distinct.size(), 2u) << "step " << o.step;
    if (first) {
      // 10, base, 11, 10 are admitted; 12 stops admission, so the base
      // request behind it waits too.
      EXPECT_THAT(o.request_ids, ElementsAre(1, 2, 3, 4));
      first = false;
    }
    ASSERT_LT(h.steps(), 1000);
    if (HasFailure()) return;
  }
  h.ExpectOutputsMatchReference();
  EXPECT_EQ(h.outputs().size(), 8u);
  h.ExpectPoolEmpty();
}

TEST(Scheduler, DecodesBeforePrefills) {
  Config c;
  Harness h(c);
  h.Add(1, Prompt(10, 1), 20);
  SchedulerOutput o = h.Step();  // 1 prefills
  h.Add(2, Prompt(100, 2), 5);   // long: chunked over several steps
  o = h.Step();
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o.request_ids[0], 1u);
  EXPECT_EQ(o.requests[0].num_tokens, 1);
  EXPECT_EQ(o.request_ids[1], 2u);
  EXPECT_EQ(o.requests[1].num_tokens, 31);
  EXPECT_FALSE(o.samples(1));
  h.Add(3, Prompt(3, 3), 2);
  // Request 2 (admitted first, still prefilling) and request 3 (waiting) come
  // after request 1's decode; 2 takes the rest of the budget.
  o = h.Step();
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o.request_ids[0], 1u);
  EXPECT_EQ(o.request_ids[1], 2u);
  EXPECT_EQ(o.requests[1].num_tokens, 31);
  EXPECT_EQ(o.requests[1].num_computed_tokens, 31);
  h.RunToCompletion();
  h.ExpectOutputsMatchReference();
  h.ExpectPoolEmpty();
}

TEST(Scheduler, FcfsAdmission) {
  Config c;
  c.max_num_seqs = 2;
  Harness h(c);
  h.Add(5, Prompt(4, 5), 2);
  h.Add(3, Prompt(4, 3), 4);
  h.Add(9, Prompt(4, 9), 2);
  h.Add(1, Prompt(4, 1), 2);
  SchedulerOutput o = h.Step();
  EXPECT_THAT(o.request_ids, ElementsAre(5u, 3u));
  EXPECT_EQ(h.s().num_waiting(), 2);
  o = h.Step();  // 5 generates its 2nd token and finishes
  EXPECT_THAT(o.request_ids, ElementsAre(5u, 3u));
  o = h.Step();  // a seat is free: 9 (queued before 1) gets it
  EXPECT_THAT(o.request_ids, ElementsAre(3u, 9u));
  h.RunToCompletion();
  h.ExpectOutputsMatchReference();
  h.ExpectPoolEmpty();
}

TEST(Scheduler, LongPromptIsChunkedAndSamplesOnlyOnLastChunk) {
  Config c;
  c.max_num_batched_tokens = 32;
  Harness h(c);
  h.Add(1, Prompt(100, 1), 2);
  std::vector<int64_t> chunks;
  std::vector<bool> samples;
  while (h.s().HasUnfinished()) {
    SchedulerOutput o = h.Step();
    ASSERT_EQ(o.size(), 1u);
    chunks.push_back(o.requests[0].num_tokens);
    samples.push_back(o.samples(0));
    if (chunks.size() < 4) {
      EXPECT_EQ(*h.s().State(1), RequestState::kPrefill);
    }
  }
  EXPECT_THAT(chunks, ElementsAre(32, 32, 32, 4, 1));
  EXPECT_THAT(samples, ElementsAre(false, false, false, true, true));
  h.ExpectOutputsMatchReference();
  h.ExpectPoolEmpty();
}

TEST(Scheduler, WithoutChunkedPrefillAPromptThatDoesNotFitWaits) {
  Config c;
  c.chunked = false;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 64;
  Harness h(c);
  h.Add(1, Prompt(10, 1), 3);
  h.Add(2, Prompt(60, 2), 4);
  SchedulerOutput o = h.Step();  // 10 + 60 > 64: 2 waits whole
  EXPECT_THAT(o.request_ids, ElementsAre(1u));
  o = h.Step();  // 1 decodes; 1 + 60 <= 64
  EXPECT_THAT(o.request_ids, ElementsAre(1u, 2u));
  EXPECT_EQ(o.requests[1].num_tokens, 60);
  EXPECT_TRUE(o.samples(1));
  h.RunToCompletion();
  h.ExpectOutputsMatchReference();
  h.ExpectPoolEmpty();
}

TEST(Scheduler, PrefixCacheHitSchedulesFewerPrefillTokens) {
  Config c;
  c.prefix_caching = true;
  c.block_size = 4;
  c.max_num_batched_tokens = 64;
  Harness h(c);
  std::vector<int32_t> shared = Prompt(40, 7);
  std::vector<int32_t> p1 = shared, p2 = shared;
  p1.push_back(1);
  p1.push_back(2);
  p2.push_back(3);
  p2.push_back(4);
  p2.push_back(5);
  h.Add(1, p1, 2);
  SchedulerOutput o = h.Step();
  EXPECT_EQ(o.requests[0].num_tokens, 42);
  EXPECT_EQ(o.num_cached_tokens[0], 0);
  h.Add(2, p2, 2);
  o = h.Step();
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o.request_ids[1], 2u);
  EXPECT_EQ(o.requests[1].num_computed_tokens, 40);  // 10 full shared blocks
  EXPECT_EQ(o.requests[1].num_tokens, 3);
  EXPECT_EQ(o.num_cached_tokens[1], 40);
  EXPECT_EQ(*h.s().NumComputed(2), 43);  // after the step ran
  h.RunToCompletion();
  h.ExpectOutputsMatchReference();
  h.ExpectPoolEmpty();
}

TEST(Scheduler, PreemptionRecomputesAndOutputsMatchRunningAlone) {
  Config c;
  c.max_num_seqs = 4;
  c.max_num_batched_tokens = 32;
  c.block_size = 4;
  c.num_blocks = 16;  // 64 positions for 4 requests of up to 12 + 20 tokens
  c.max_model_len = 64;
  Harness h(c);
  for (RequestId id = 1; id <= 4; ++id) h.Add(id, Prompt(12, static_cast<int32_t>(id)), 20);
  std::vector<RequestId> preempted;
  while (h.s().HasUnfinished()) {
    SchedulerOutput o = h.Step();
    for (RequestId id : o.preempted) {
      preempted.push_back(id);
      // Preempted requests run their whole history again.
      auto computed = h.s().NumComputed(id);
      if (computed.ok() && *h.s().State(id) == RequestState::kWaiting) {
        EXPECT_EQ(*computed, 0);
      }
    }
    ASSERT_LT(h.steps(), 1000);
    if (HasFailure()) return;
  }
  EXPECT_GT(h.s().num_preemptions(), 0);
  EXPECT_EQ(static_cast<int64_t>(preempted.size()), h.s().num_preemptions());
  // The most recently admitted request goes first.
  ASSERT_FALSE(preempted.empty());
  EXPECT_EQ(preempted[0], 4u);
  EXPECT_EQ(h.outputs().size(), 4u);
  h.ExpectOutputsMatchReference();
  h.ExpectPoolEmpty();
}

TEST(Scheduler, PreemptedRequestGoesToTheFrontOfTheQueue) {
  Config c;
  c.max_num_seqs = 2;
  c.block_size = 4;
  c.num_blocks = 6;  // 24 positions
  c.max_model_len = 24;
  Harness h(c);
  h.Add(1, Prompt(8, 1), 12);  // needs up to 19 positions
  h.Add(2, Prompt(4, 2), 12);
  h.Add(3, Prompt(4, 3), 2);
  SchedulerOutput o = h.Step();
  EXPECT_THAT(o.request_ids, ElementsAre(1u, 2u));
  bool saw = false;
  while (h.s().HasUnfinished() && !saw) {
    o = h.Step();
    if (!o.preempted.empty()) {
      saw = true;
      EXPECT_THAT(o.preempted, ElementsAre(2u));
      EXPECT_EQ(*h.s().State(2), RequestState::kWaiting);
      EXPECT_EQ(*h.s().NumPreemptions(2), 1);
      // 2 is ahead of 3 again, and nothing is admitted in this step.
      EXPECT_THAT(o.request_ids, ElementsAre(1u));
    }
    ASSERT_LT(h.steps(), 100);
  }
  EXPECT_TRUE(saw);
  o = h.Step();
  // Neither 2 nor 3 fits next to 1 until 1 finishes; then 2 comes first.
  h.RunToCompletion();
  h.ExpectOutputsMatchReference();
  EXPECT_EQ(h.outputs().size(), 3u);
  h.ExpectPoolEmpty();
}

TEST(Scheduler, AbortMidPrefillFreesBlocks) {
  Config c;
  c.max_num_batched_tokens = 16;
  c.num_blocks = 64;
  Harness h(c);
  h.Add(1, Prompt(100, 1), 4);
  SchedulerOutput o = h.Step();
  EXPECT_EQ(*h.s().State(1), RequestState::kPrefill);
  EXPECT_EQ(*h.s().NumComputed(1), 16);
  EXPECT_EQ(h.s().kv().num_free_blocks(), 64 - 4);
  h.Abort(1);
  EXPECT_FALSE(h.s().HasUnfinished());
  h.ExpectPoolEmpty();
  EXPECT_EQ(h.s().NumComputed(1).status().code(), StatusCode::kNotFound);

  // Abort while the step runs (between Schedule and UpdateAfterStep).
  h.Add(2, Prompt(100, 2), 4);
  h.Add(3, Prompt(3, 3), 1);
  auto step = h.s().Schedule();
  ASSERT_TRUE(step.ok());
  EXPECT_THAT(step->request_ids, ElementsAre(2u));
  ASSERT_TRUE(h.s().FinishRequest(2).ok());
  EXPECT_EQ(h.s().kv().num_free_blocks(), 64);
  ASSERT_TRUE(h.s().UpdateAfterStep(*step, {}).ok());
  h.RunToCompletion();
  h.ExpectPoolEmpty();
}

TEST(Scheduler, AbortWaitingRequest) {
  Config c;
  c.max_num_seqs = 1;
  Harness h(c);
  h.Add(1, Prompt(4, 1), 3);
  h.Add(2, Prompt(4, 2), 3);
  h.Step();
  EXPECT_EQ(*h.s().State(2), RequestState::kWaiting);
  h.Abort(2);
  EXPECT_EQ(h.s().num_waiting(), 0);
  h.RunToCompletion();
  h.ExpectPoolEmpty();
}

TEST(Scheduler, UpdateAfterStepMisuse) {
  Config c;
  Harness h(c);
  h.Add(1, Prompt(4, 1), 3);
  auto o = h.s().Schedule();
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(h.s().Schedule().status().code(), StatusCode::kFailedPrecondition);
  Status st = h.s().UpdateAfterStep(*o, {});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("0 sampled tokens for 1 sampling requests"));
  ASSERT_TRUE(h.s().UpdateAfterStep(*o, {42}).ok());
  EXPECT_EQ(h.s().UpdateAfterStep(*o, {42}).code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(**h.s().Tokens(1),
              ElementsAre(Prompt(4, 1)[0], Prompt(4, 1)[1], Prompt(4, 1)[2], Prompt(4, 1)[3], 42));
}

TEST(Scheduler, MaxTokensReachedIsNotScheduledUntilFinished) {
  Config c;
  Harness h(c);
  ASSERT_TRUE(h.s().AddRequest(1, Prompt(4, 1), 1).ok());
  auto o = h.s().Schedule();
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE(h.s().UpdateAfterStep(*o, {7}).ok());
  EXPECT_EQ(*h.s().NumGeneratedTokens(1), 1);
  o = h.s().Schedule();
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->empty());
  EXPECT_TRUE(h.s().HasUnfinished());
  ASSERT_TRUE(h.s().FinishRequest(1).ok());
  h.ExpectPoolEmpty();
}

TEST(Scheduler, Deterministic) {
  auto run = [] {
    Config c;
    c.num_blocks = 20;
    c.max_model_len = 64;
    c.prefix_caching = true;
    Harness h(c);
    std::vector<std::vector<RequestId>> trace;
    for (RequestId id = 1; id <= 8; ++id)
      h.Add(id, Prompt(10 + id, static_cast<int32_t>(id % 3)), 12);
    while (h.s().HasUnfinished() && h.steps() < 1000) {
      SchedulerOutput o = h.Step();
      trace.push_back(o.request_ids);
      trace.push_back(o.preempted);
    }
    return trace;
  };
  EXPECT_EQ(run(), run());
}

// Random arrivals, lengths, shared prefixes and aborts over many steps; every
// step is checked by the harness; every completed request matches running
// alone; the pool is whole at the end.
class SchedulerRandomized : public ::testing::TestWithParam<uint32_t> {};

TEST_P(SchedulerRandomized, Invariants) {
  std::mt19937 rng(GetParam());
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Config c;
  c.max_num_seqs = static_cast<int64_t>(1) << uni(0, 3);  // 1..8
  c.max_num_batched_tokens = 16 * uni(1, 4);
  c.block_size = uni(0, 1) ? 4 : 8;
  c.max_model_len = 96;
  c.num_blocks = (c.max_model_len / c.block_size) + uni(0, 24);  // often too few for everyone
  c.prefix_caching = uni(0, 1) == 1;
  c.chunked = uni(0, 3) != 0;
  if (!c.chunked) c.max_num_batched_tokens = c.max_model_len;  // must hold any prompt
  Harness h(c);
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 3; ++i) prefixes.push_back(Prompt(uni(8, 40), 100 + i));

  RequestId next_id = 1;
  std::set<RequestId> aborted;
  const int64_t total = 60;
  for (int64_t step = 0; step < 5000; ++step) {
    // Arrivals.
    if (next_id <= total && uni(0, 2) == 0) {
      const int64_t n_new = uni(1, 3);
      for (int64_t k = 0; k < n_new && next_id <= total; ++k) {
        std::vector<int32_t> prompt;
        if (uni(0, 1)) prompt = prefixes[static_cast<size_t>(uni(0, 2))];
        std::vector<int32_t> tail = Prompt(uni(1, 30), static_cast<int32_t>(next_id));
        prompt.insert(prompt.end(), tail.begin(), tail.end());
        if (static_cast<int64_t>(prompt.size()) > c.max_model_len - 1) {
          prompt.resize(static_cast<size_t>(c.max_model_len - 1));
        }
        const int64_t max_tokens =
            std::min<int64_t>(uni(1, 24), c.max_model_len - static_cast<int64_t>(prompt.size()));
        h.Add(next_id++, prompt, max_tokens);
      }
    }
    // Occasional aborts of a random known request.
    if (uni(0, 40) == 0 && next_id > 1) {
      const RequestId id = static_cast<RequestId>(uni(1, static_cast<int64_t>(next_id) - 1));
      if (h.s().State(id).ok()) {
        h.Abort(id);
        aborted.insert(id);
      }
    }
    if (!h.s().HasUnfinished() && next_id > total) break;
    h.Step();
    if (HasFailure()) return;
  }
  EXPECT_FALSE(h.s().HasUnfinished());
  EXPECT_EQ(static_cast<int64_t>(h.outputs().size() + aborted.size()), total);
  h.ExpectOutputsMatchReference();
  h.ExpectPoolEmpty();
  RecordProperty("preemptions", static_cast<int>(h.s().num_preemptions()));
}

INSTANTIATE_TEST_SUITE_P(Seeds, SchedulerRandomized, ::testing::Range<uint32_t>(1, 41));

TEST(Scheduler, RandomizedRunsDoPreempt) {
  // Guard against the property test silently never exercising preemption.
  Config c;
  c.max_num_seqs = 8;
  c.max_num_batched_tokens = 32;
  c.block_size = 4;
  c.max_model_len = 96;
  c.num_blocks = 30;
  Harness h(c);
  std::mt19937 rng(7);
  for (RequestId id = 1; id <= 16; ++id) {
    const int64_t len = std::uniform_int_distribution<int64_t>(10, 60)(rng);
    h.Add(id, Prompt(len, static_cast<int32_t>(id)), 30);
  }
  h.RunToCompletion();
  EXPECT_GT(h.s().num_preemptions(), 0);
  EXPECT_EQ(h.outputs().size(), 16u);
  h.ExpectOutputsMatchReference();
  h.ExpectPoolEmpty();
}

}  // namespace
}  // namespace xrt
