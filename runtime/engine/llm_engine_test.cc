// LLMEngine: the engine thread around the core. A failed step fails only its
// requests; the trace replay behind `xcc check --trace` reports the
// executables the engine really runs.
#include "runtime/engine/llm_engine.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/engine/engine_test_util.h"
#include "runtime/engine/replay.h"

namespace xrt {
namespace {

using testing::FakeExecutor;
using ::testing::HasSubstr;
using ::testing::Not;

// Collects the outputs of submitted requests; waits for them to finish.
class Outputs {
 public:
  OutputCallback Callback() {
    return [this](const RequestOutput& o) {
      std::lock_guard<std::mutex> lock(mu_);
      tokens_[o.request_id] += static_cast<int64_t>(o.tokens.size());
      if (o.finished) {
        reason_[o.request_id] = o.finish_reason;
        error_[o.request_id] = o.error;
        cv_.notify_all();
      }
    };
  }
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return reason_.size() >= n; });
  }
  std::string reason(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_[id];
  }
  std::string error(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return error_[id];
  }
  int64_t tokens(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu_);
    return tokens_[id];
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> reason_, error_;
  std::map<std::string, int64_t> tokens_;
};

TEST(LLMEngine, AFailedStepFailsOnlyItsRequestsNotTheWaitingOnes) {
  FakeExecutor ex(32, 5);
  EngineCoreParams p = testing::SmallCoreParams(&ex);
  p.requested.max_num_seqs = 2;
  ex.FailCall(1);
  auto engine = LLMEngine::Create(p);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Outputs out;
  std::vector<std::pair<EngineRequest, OutputCallback>> batch;
  for (const char* id : {"a", "b", "c", "d"})
    batch.emplace_back(testing::SmallRequest(id, 3, 4), out.Callback());
  ASSERT_TRUE((*engine)->SubmitBatch(std::move(batch)).ok());
  ASSERT_TRUE(out.WaitFor(4));
  EXPECT_EQ(out.reason("a"), "error");
  EXPECT_EQ(out.reason("b"), "error");
  EXPECT_THAT(out.error("a"), HasSubstr("injected failure of step 1"));
  EXPECT_EQ(out.reason("c"), "length");
  EXPECT_EQ(out.reason("d"), "length");
  EXPECT_EQ(out.tokens("c"), 4);
  EXPECT_EQ(out.tokens("d"), 4);
  const std::string metrics = (*engine)->MetricsText();
  EXPECT_THAT(metrics, HasSubstr("xrt_requests_finished_total{finished_reason=\"error\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("xrt_requests_finished_total{finished_reason=\"length\"} 2"));
}

TEST(LLMEngine, RejectsInvalidRequestsAtSubmit) {
  FakeExecutor ex(32, 5);
  auto engine = LLMEngine::Create(testing::SmallCoreParams(&ex));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Outputs out;
  Status s = (*engine)->Submit(testing::SmallRequest("long", 60, 10), out.Callback());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("maximum context length is 64 tokens"));
}

// Pause(kKeep) freezes requests in flight and holds new ones: no step runs
// until Resume, and then they all finish as if nothing happened. Pause(kAbort)
// ends everything in flight; the engine then serves again after Resume.
TEST(LLMEngine, PauseKeepFreezesAndResumeGoesOn) {
  FakeExecutor ex(32, 5);
  auto engine = LLMEngine::Create(testing::SmallCoreParams(&ex));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  LLMEngine& e = **engine;
  Outputs out;
  // a's third token holds the engine thread until a Pause is under way, so a
  // is frozen after exactly three tokens.
  std::mutex mu;
  std::condition_variable cv;
  int64_t a_tokens = 0;
  bool pausing = false;
  OutputCallback collect = out.Callback();
  OutputCallback a_callback = [&](const RequestOutput& o) {
    {
      std::unique_lock<std::mutex> lock(mu);
      a_tokens += static_cast<int64_t>(o.tokens.size());
      cv.notify_all();
      if (a_tokens == 3) cv.wait(lock, [&] { return pausing; });
    }
    collect(o);  // last: the test may end once a's final output is collected
  };
  ASSERT_TRUE(e.Submit(testing::SmallRequest("a", 3, 40), a_callback).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return a_tokens == 3; }));
  }
  std::thread pauser([&] { e.Pause(PauseMode::kKeep); });
  while (!e.IsPaused()) std::this_thread::yield();
  {
    std::lock_guard<std::mutex> lock(mu);
    pausing = true;
    cv.notify_all();
  }
  pauser.join();
  const int64_t steps = e.num_steps();
  ASSERT_TRUE(e.Submit(testing::SmallRequest("b", 4, 6), out.Callback()).ok());
  ASSERT_TRUE(e.Submit(testing::SmallRequest("c", 5, 6), out.Callback()).ok());
  e.Pause(PauseMode::kKeep);  // a second pause returns once the loop took b and c
  EXPECT_THAT(e.MetricsText(), HasSubstr("xrt_num_requests_waiting 2"));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(e.num_steps(), steps);
  EXPECT_EQ(out.tokens("a"), 3);
  EXPECT_EQ(out.tokens("b"), 0);
  e.Resume();
  EXPECT_FALSE(e.IsPaused());
  ASSERT_TRUE(out.WaitFor(3));
  EXPECT_EQ(out.reason("a"), "length");
  EXPECT_EQ(out.tokens("a"), 40);
  EXPECT_EQ(out.tokens("b"), 6);
  EXPECT_EQ(out.tokens("c"), 6);
}

TEST(LLMEngine, PauseAbortEndsWhatIsInFlight) {
  FakeExecutor ex(32, 5);
  auto engine = LLMEngine::Create(testing::SmallCoreParams(&ex));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  LLMEngine& e = **engine;
  Outputs out;
  e.Pause(PauseMode::kKeep);
  ASSERT_TRUE(e.Submit(testing::SmallRequest("a", 3, 40), out.Callback()).ok());
  ASSERT_TRUE(e.Submit(testing::SmallRequest("b", 3, 40), out.Callback()).ok());
  e.Pause(PauseMode::kAbort);  // returns after both final outputs
  EXPECT_EQ(out.reason("a"), "abort");
  EXPECT_EQ(out.reason("b"), "abort");
  EXPECT_EQ(e.num_steps(), 0);
  EXPECT_THAT(e.MetricsText(),
              HasSubstr("xrt_requests_finished_total{finished_reason=\"abort\"} 2"));
  ASSERT_TRUE(e.Submit(testing::SmallRequest("c", 3, 4), out.Callback()).ok());
  e.Resume();
  ASSERT_TRUE(out.WaitFor(3));
  EXPECT_EQ(out.reason("c"), "length");
  EXPECT_EQ(out.tokens("c"), 4);
}

// RunSteps single-steps a paused engine: exactly that many steps, then paused
// again; fewer when nothing is left to run.
TEST(LLMEngine, RunStepsSingleSteps) {
  FakeExecutor ex(32, 5);
  auto engine = LLMEngine::Create(testing::SmallCoreParams(&ex));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  LLMEngine& e = **engine;
  Outputs out;
  e.Pause(PauseMode::kKeep);
  ASSERT_TRUE(e.Submit(testing::SmallRequest("a", 3, 40), out.Callback()).ok());
  EXPECT_EQ(e.RunSteps(1), 1);
  EXPECT_TRUE(e.IsPaused());
  EXPECT_EQ(out.tokens("a"), 1);
  EXPECT_EQ(e.RunSteps(5), 5);
  EXPECT_EQ(out.tokens("a"), 6);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(e.num_steps(), 6);
  EXPECT_EQ(e.RunSteps(100), 34);  // a ends after 34 more
  EXPECT_EQ(out.reason("a"), "length");
  EXPECT_EQ(out.tokens("a"), 40);
  EXPECT_EQ(e.RunSteps(3), 0);  // nothing to run
  EXPECT_TRUE(e.IsPaused());
  ASSERT_TRUE(e.Submit(testing::SmallRequest("b", 3, 4), out.Callback()).ok());
  e.Resume();
  ASSERT_TRUE(out.WaitFor(2));
  EXPECT_EQ(out.tokens("b"), 4);
}

TEST(LLMEngine, ShutdownWhilePausedAbortsTheFrozenRequests) {
  FakeExecutor ex(32, 5);
  auto engine = LLMEngine::Create(testing::SmallCoreParams(&ex));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Outputs out;
  (*engine)->Pause(PauseMode::kKeep);
  ASSERT_TRUE((*engine)->Submit(testing::SmallRequest("a", 3, 4), out.Callback()).ok());
  (*engine)->Shutdown();
  ASSERT_TRUE(out.WaitFor(1));
  EXPECT_EQ(out.reason("a"), "abort");
  (*engine)->Pause(PauseMode::kKeep);  // after the loop ended: returns at once
  engine->reset();
}

// LoRA metrics: steps per lm_step LoRA mode (agreeing with the bucket hits and
// the step count), slot loads and swaps, requests per adapter (label escaped;
// base requests not counted). One slot, two adapters: x runs first (single),
// then y with the base request behind it (mixed), y replacing x in the slot.
TEST(LLMEngine, LoraMetrics) {
  FakeExecutor ex(32, 5);
  EngineCoreParams p = testing::SmallCoreParams(&ex);
  LoraGeometry geometry;
  geometry.spec.max_lora_rank = 1;
  geometry.max_loras = 1;
  LoraManager manager(geometry, /*allocate=*/false);
  p.lora = &manager;
  LoraRegistry registry(geometry);
  auto add = [&](const std::string& name) {
    LoraAdapter a;
    a.name = name;
    a.owned = {0.0f};
    return registry.AddPacked(std::move(a)).value();
  };
  auto engine = LLMEngine::Create(p);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Outputs out;
  std::vector<std::pair<EngineRequest, OutputCallback>> batch;
  const std::pair<const char*, std::shared_ptr<const LoraAdapter>> requests[] = {
      {"x1", add("x")}, {"y1", add("y\"\\")}, {"base", nullptr}};
  for (const auto& [id, lora] : requests) {
    EngineRequest r = testing::SmallRequest(id, 3, 4);
    r.lora = lora;
    batch.emplace_back(std::move(r), out.Callback());
  }
  ASSERT_TRUE((*engine)->SubmitBatch(std::move(batch)).ok());
  ASSERT_TRUE(out.WaitFor(3));
  for (const char* id : {"x1", "y1", "base"}) EXPECT_EQ(out.reason(id), "length") << id;

  std::map<std::string, int64_t> by_mode = {{"none", 0}, {"single", 0}, {"mixed", 0}};
  int64_t lm_steps = 0;
  for (const auto& [exe, n] : (*engine)->bucket_hits()) {
    if (exe.rfind("lm_step_", 0) != 0) continue;
    lm_steps += n;
    const size_t last = exe.rfind('_');
    const std::string suffix = exe.substr(last + 1);
    by_mode[suffix == "single" || suffix == "mixed" ? suffix : "none"] += n;
  }
  EXPECT_EQ(lm_steps, (*engine)->num_steps());
  EXPECT_GT(by_mode["single"], 0);
  EXPECT_GT(by_mode["mixed"], 0);
  const std::string metrics = (*engine)->MetricsText();
  for (const auto& [mode, n] : by_mode)
    EXPECT_THAT(metrics,
                HasSubstr(fmt::format("xrt_lora_mode_steps_total{{mode=\"{}\"}} {}\n", mode, n)));
  EXPECT_THAT(metrics, HasSubstr("\nxrt_lora_slot_loads_total 2\n"));
  EXPECT_THAT(metrics, HasSubstr("\nxrt_lora_slot_swaps_total 1\n"));
  EXPECT_THAT(metrics, HasSubstr("\nxrt_lora_requests_total{adapter=\"x\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("\nxrt_lora_requests_total{adapter=\"y\\\"\\\\\"} 1\n"));
  EXPECT_THAT(metrics, Not(HasSubstr("xrt_lora_requests_total{adapter=\"\"}")));
}

// The report of `xcc check --trace` is computed from the same core the engine
// runs: replaying the committed trace gives the executables the engine runs
// when it serves the same requests (here with logits and sampled tokens).
TEST(LLMEngine, ReplayOfTheCommittedTraceMatchesTheEngine) {
  const int64_t vocab = 512;
  auto trace = ReadTrace(
      std::string(XCC_SOURCE_DIR) + "/tests/fixtures/traces/mixed.jsonl",
      [&](const std::string& text) {
        std::vector<int32_t> ids;
        for (unsigned char ch : text) ids.push_back(static_cast<int32_t>(ch));
        return ids;
      },
      static_cast<int32_t>(vocab));
  ASSERT_TRUE(trace.ok()) << trace.status().ToString();

  FakeExecutor ex(vocab, 7);
  EngineCoreParams p;
  p.executor = &ex;
  p.compiled = {/*max_num_seqs=*/8, /*max_num_batched_tokens=*/64, /*max_model_len=*/256,
                /*block_size=*/16, /*max_blocks_per_req=*/16};
  p.buckets = BucketTable::Create({16, 32, 64}, {1, 2, 4, 8}).value();
  p.num_kv_blocks = 16;  // tight: preemptions happen
  p.vocab_size = vocab;
  p.eos_token_ids = {7};  // what the fake samples: EOS, ignored by both below

  ReplayParams rp;
  rp.core = p;
  auto report = Replay(rp, *trace);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->unbucketed.empty());
  EXPECT_GT(report->preemptions, 0);

  auto engine = LLMEngine::Create(p);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  Outputs out;
  std::vector<std::pair<EngineRequest, OutputCallback>> batch;
  for (size_t i = 0; i < trace->size(); ++i) {
    EngineRequest r;
    r.request_id = "r" + std::to_string(i);
    r.prompt = (*trace)[i].prompt;
    r.max_tokens = (*trace)[i].max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    batch.emplace_back(std::move(r), out.Callback());
  }
  ASSERT_TRUE((*engine)->SubmitBatch(std::move(batch)).ok());
  ASSERT_TRUE(out.WaitFor(trace->size()));
  for (size_t i = 0; i < trace->size(); ++i) {
    const std::string id = "r" + std::to_string(i);
    EXPECT_EQ(out.reason(id), "length") << id << ": " << out.error(id);
    EXPECT_EQ(out.tokens(id), (*trace)[i].max_tokens) << id;
  }
  EXPECT_EQ((*engine)->bucket_hits(), report->bucket_hits);
  EXPECT_EQ((*engine)->num_steps(), report->steps);
  EXPECT_EQ((*engine)->num_preemptions(), report->preemptions);
}

}  // namespace
}  // namespace xrt
