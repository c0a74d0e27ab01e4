// EngineCore: one step schedules, builds, runs, samples, applies and stops;
// failures stay with the requests they concern.
#include "runtime/engine/engine_core.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "runtime/engine/engine_test_util.h"

namespace xrt {
namespace {

using testing::FakeExecutor;
using ::testing::HasSubstr;
using testing::SmallCoreParams;
using testing::SmallRequest;

std::unique_ptr<EngineCore> MakeCore(const EngineCoreParams& p) {
  auto core = EngineCore::Create(p);
  EXPECT_TRUE(core.ok()) << core.status().ToString();
  return core.ok() ? std::move(*core) : nullptr;
}

// Everything the core outputs until it is idle, by request id.
struct Collected {
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, std::string> reason, error;
  std::vector<StepStats> steps;
};
Collected Drain(EngineCore& core) {
  Collected c;
  for (int guard = 0; core.HasUnfinished() && guard < 1000; ++guard) {
    EngineCoreOutputs out = core.Step();
    c.steps.push_back(out.stats);
    for (const RequestOutput& o : out.outputs) {
      for (const GeneratedToken& t : o.tokens) c.tokens[o.request_id].push_back(t.token);
      if (o.finished) {
        EXPECT_EQ(c.reason.count(o.request_id), 0u) << o.request_id << " finished twice";
        c.reason[o.request_id] = o.finish_reason;
        c.error[o.request_id] = o.error;
      }
    }
  }
  return c;
}

TEST(EngineCore, AFailedStepFailsOnlyTheRequestsInIt) {
  FakeExecutor ex(32, 5);
  EngineCoreParams p = SmallCoreParams(&ex);
  p.requested.max_num_seqs = 2;  // c and d wait while a and b run
  auto core = MakeCore(p);
  for (const char* id : {"a", "b", "c", "d"})
    ASSERT_TRUE(core->AddRequest(SmallRequest(id, 3, 4)).ok());
  ex.FailCall(1);

  EngineCoreOutputs first = core->Step();
  EXPECT_FALSE(first.stats.error.ok());
  EXPECT_THAT(first.stats.error.message(), HasSubstr("injected failure of step 1"));
  ASSERT_EQ(first.outputs.size(), 2u);
  for (const RequestOutput& o : first.outputs) {
    EXPECT_TRUE(o.request_id == "a" || o.request_id == "b") << o.request_id;
    EXPECT_TRUE(o.finished);
    EXPECT_EQ(o.finish_reason, "error");
    EXPECT_THAT(o.error, HasSubstr("injected failure"));
  }
  EXPECT_EQ(core->num_waiting(), 2);
  EXPECT_EQ(core->num_kv_blocks_used(), 0);  // a's and b's blocks are free again

  Collected rest = Drain(*core);
  EXPECT_EQ(rest.reason["c"], "length");
  EXPECT_EQ(rest.reason["d"], "length");
  EXPECT_EQ(rest.tokens["c"], (std::vector<int32_t>{5, 5, 5, 5}));
  EXPECT_EQ(rest.tokens["d"], (std::vector<int32_t>{5, 5, 5, 5}));
  EXPECT_EQ(rest.reason.count("a"), 0u);
  EXPECT_EQ(core->num_kv_blocks_used(), 0);
}

TEST(EngineCore, AFailedDecodeStepSparesRequestsNotInIt) {
  FakeExecutor ex(32, 5);
  EngineCoreParams p = SmallCoreParams(&ex);
  p.requested.max_num_seqs = 1;  // b waits until a is done
  auto core = MakeCore(p);
  ASSERT_TRUE(core->AddRequest(SmallRequest("a", 3, 5)).ok());
  ASSERT_TRUE(core->AddRequest(SmallRequest("b", 3, 2)).ok());
  ex.FailCall(3);  // a's second decode
  Collected c = Drain(*core);
  EXPECT_EQ(c.reason["a"], "error");
  EXPECT_EQ(c.tokens["a"].size(), 2u);  // sent before the failure
  EXPECT_EQ(c.reason["b"], "length");
  EXPECT_EQ(c.tokens["b"].size(), 2u);
}

TEST(EngineCore, ChunksPrefillsAndReportsEachStep) {
  FakeExecutor ex(32, 5);
  EngineCoreParams p = SmallCoreParams(&ex);
  p.requested.max_num_batched_tokens = 8;
  auto core = MakeCore(p);
  EXPECT_EQ(core->limits().max_num_batched_tokens, 8);
  EXPECT_EQ(core->limits().max_num_seqs, 4);  // the compiled one
  ASSERT_TRUE(core->AddRequest(SmallRequest("a", 20, 3)).ok());
  Collected c = Drain(*core);
  ASSERT_EQ(c.steps.size(), 5u);  // prefill 8 + 8 + 4 (samples), then 2 decodes
  const int64_t tokens[] = {8, 8, 4, 1, 1};
  for (size_t i = 0; i < 5; ++i) {
    SCOPED_TRACE(i);
    const StepStats& st = c.steps[i];
    EXPECT_EQ(st.step, i + 1);
    EXPECT_TRUE(st.ran);
    EXPECT_TRUE(st.error.ok());
    EXPECT_EQ(st.num_tokens, tokens[i]);
    EXPECT_EQ(st.lm_step, "lm_step_t8");
    EXPECT_EQ(st.lm_step_padding, 8 - tokens[i]);
    EXPECT_EQ(st.lm_logits, i < 2 ? "" : "lm_logits_r1");
    EXPECT_EQ(st.prompt_tokens, i < 3 ? tokens[i] : 0);
    EXPECT_EQ(st.generation_tokens, i < 2 ? 0 : 1);
    EXPECT_EQ(st.prefix_queries, i == 0 ? 20 : 0);
  }
  EXPECT_EQ(c.reason["a"], "length");
  EXPECT_EQ(c.tokens["a"].size(), 3u);
  EXPECT_EQ(core->num_steps(), 5);
}

TEST(EngineCore, ModelEosStopsUnlessIgnored) {
  FakeExecutor ex(32, 2);  // always the EOS id
  auto core = MakeCore(SmallCoreParams(&ex));
  ASSERT_TRUE(core->AddRequest(SmallRequest("eos", 3, 5)).ok());
  EngineRequest ignore = SmallRequest("ignore", 3, 5);
  ignore.ignore_eos = true;
  ASSERT_TRUE(core->AddRequest(ignore).ok());
  Collected c = Drain(*core);
  EXPECT_EQ(c.reason["eos"], "stop");
  EXPECT_EQ(c.tokens["eos"], (std::vector<int32_t>{2}));
  EXPECT_EQ(c.reason["ignore"], "length");
  EXPECT_EQ(c.tokens["ignore"].size(), 5u);
}

TEST(EngineCore, StopTokenIdsStop) {
  FakeExecutor ex(32, 5);
  auto core = MakeCore(SmallCoreParams(&ex));
  EngineRequest r = SmallRequest("a", 3, 5);
  r.stop_token_ids = {5};
  ASSERT_TRUE(core->AddRequest(r).ok());
  Collected c = Drain(*core);
  EXPECT_EQ(c.reason["a"], "stop");
  EXPECT_EQ(c.tokens["a"].size(), 1u);
}

TEST(EngineCore, StrictModeFailsTheLargestChunkAndRunsTheRest) {
  FakeExecutor ex(32, 5);
  EngineCoreParams p = SmallCoreParams(&ex);
  p.buckets = BucketTable::Create({8, 16}, {1, 2, 4}).value();  // budget 32 > largest bucket
  p.check_recompilation = true;
  auto core = MakeCore(p);
  ASSERT_TRUE(core->AddRequest(SmallRequest("long", 20, 2)).ok());
  ASSERT_TRUE(core->AddRequest(SmallRequest("short", 3, 2)).ok());
  EngineCoreOutputs first = core->Step();
  EXPECT_THAT(first.stats.unbucketed,
              HasSubstr("no compiled lm_step bucket holds a step of 23 tokens"));
  EXPECT_THAT(first.stats.unbucketed, HasSubstr("--check-recompilation"));
  EXPECT_TRUE(first.stats.ran);
  EXPECT_EQ(first.stats.lm_step, "lm_step_t8");
  ASSERT_EQ(first.outputs.size(), 2u);
  EXPECT_EQ(first.outputs[0].request_id, "long");
  EXPECT_EQ(first.outputs[0].finish_reason, "error");
  EXPECT_EQ(first.outputs[1].request_id, "short");
  EXPECT_FALSE(first.outputs[1].finished);
  Collected rest = Drain(*core);
  EXPECT_EQ(rest.reason["short"], "length");
}

TEST(EngineCore, AbortFreesTheRequestAndReturnsItsFinalOutput) {
  FakeExecutor ex(32, 5);
  auto core = MakeCore(SmallCoreParams(&ex));
  ASSERT_TRUE(core->AddRequest(SmallRequest("a", 9, 10)).ok());
  ASSERT_TRUE(core->AddRequest(SmallRequest("b", 9, 3)).ok());
  core->Step();
  EXPECT_GT(core->num_kv_blocks_used(), 0);
  std::optional<RequestOutput> out = core->Abort("a");
  ASSERT_TRUE(out.has_value());
  EXPECT_TRUE(out->finished);
  EXPECT_EQ(out->finish_reason, "abort");
  EXPECT_EQ(out->completion_tokens, 1);
  EXPECT_FALSE(core->Abort("a").has_value());
  EXPECT_FALSE(core->Abort("nobody").has_value());
  Collected c = Drain(*core);
  EXPECT_EQ(c.reason["b"], "length");
  EXPECT_EQ(core->num_kv_blocks_used(), 0);
}

TEST(EngineCore, ReturnsPromptLogitsWithTheFirstToken) {
  FakeExecutor ex(32, 5);
  auto core = MakeCore(SmallCoreParams(&ex));
  EngineRequest r = SmallRequest("a", 12, 2);
  r.return_prompt_logits = true;
  ASSERT_TRUE(core->AddRequest(r).ok());
  std::vector<std::vector<float>> logits;
  ASSERT_TRUE(RunToCompletion(*core, [&](const RequestOutput& o) {
                logits.push_back(o.prompt_logits);
              }).ok());
  ASSERT_EQ(logits.size(), 2u);
  ASSERT_EQ(logits[0].size(), 32u);
  EXPECT_EQ(logits[0][5], 10.0f);
  EXPECT_TRUE(logits[1].empty());
}

TEST(EngineCore, ValidatesRequestsAndLimits) {
  FakeExecutor ex(32, 5);
  auto core = MakeCore(SmallCoreParams(&ex));
  EXPECT_THAT(core->AddRequest(SmallRequest("long", 60, 5)).message(),
              HasSubstr("maximum context length is 64 tokens"));
  ASSERT_TRUE(core->AddRequest(SmallRequest("a", 3, 2)).ok());
  EXPECT_THAT(core->AddRequest(SmallRequest("a", 3, 2)).message(), HasSubstr("already in flight"));

  EngineCoreParams p = SmallCoreParams(&ex);
  p.requested.max_num_seqs = 5;
  auto over = EngineCore::Create(p);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(over.status().message(),
              HasSubstr("max_num_seqs 5 exceeds the 4 request rows the artifact was compiled for"));
  EXPECT_THAT(over.status().message(), HasSubstr("--max-num-seqs 5"));
  p = SmallCoreParams(nullptr);
  EXPECT_FALSE(EngineCore::Create(p).ok());
}

// LoRA: steps hold at most max_loras distinct adapters (served below the
// compiled slots with EngineCoreParams::max_loras), each step runs the lm_step
// variant of its adapters (none / single / mixed) and reports slot loads.
TEST(EngineCore, LoraStepsPickTheirVariantAndRespectMaxLoras) {
  FakeExecutor ex(32, 5);
  LoraGeometry g;
  g.max_loras = 2;
  g.spec.max_lora_rank = 4;
  g.spec.targets = {{"t", 8, 8}};
  LoraManager lora(g, /*allocate=*/false);
  EngineCoreParams p = SmallCoreParams(&ex);
  p.lora = &lora;
  p.max_loras = 3;
  EXPECT_THAT(EngineCore::Create(p).status().message(),
              HasSubstr("max_loras 3 exceeds the 2 adapter slots"));
  p.max_loras = 1;
  auto core = MakeCore(p);
  ASSERT_NE(core, nullptr);
  auto adapter = [](int64_t id) {
    auto a = std::make_shared<LoraAdapter>();
    a->id = id;
    a->name = "a" + std::to_string(id);
    return a;
  };
  auto a1 = adapter(1), a2 = adapter(2);
  EngineRequest r1 = SmallRequest("r1", 3, 2), r2 = SmallRequest("r2", 3, 2),
                r3 = SmallRequest("r3", 3, 2);
  r1.lora = a1;
  r2.lora = a2;
  ASSERT_TRUE(core->AddRequest(r1).ok());
  ASSERT_TRUE(core->AddRequest(r2).ok());
  ASSERT_TRUE(core->AddRequest(r3).ok());
  Collected c = Drain(*core);
  std::set<std::string> modes;
  int64_t loads = 0;
  for (const StepStats& st : c.steps) {
    if (!st.ran) continue;
    EXPECT_LE(st.lora_adapters, 1) << "step " << st.step;
    modes.insert(xpk::EnumNameLoraMode(st.lora_mode));
    EXPECT_NE(st.lm_step.find(st.lora_mode == xpk::LoraMode::none ? "lm_step_t" : "_"),
              std::string::npos);
    loads += st.lora_loads;
  }
  // r1 alone (single), then r2 beside the base request r3 (mixed).
  EXPECT_EQ(modes, (std::set<std::string>{"single", "mixed"}));
  EXPECT_EQ(loads, 2);
  EXPECT_EQ(c.reason["r1"], "length");
  EXPECT_EQ(c.reason["r3"], "length");
  // Without LoRA compiled in, a request with an adapter is refused.
  EngineCoreParams plain = SmallCoreParams(&ex);
  auto no_lora = MakeCore(plain);
  EXPECT_THAT(no_lora->AddRequest(r1).message(), HasSubstr("compiled without LoRA"));
}

TEST(EngineCore, WithoutLogitsEveryRequestGeneratesMaxTokens) {
  struct NoLogits : StepExecutor {
    Expected<const float*> Execute(const StepInputs&) override {
      return static_cast<const float*>(nullptr);
    }
  } ex;
  auto core = MakeCore(SmallCoreParams(&ex));
  ASSERT_TRUE(core->AddRequest(SmallRequest("a", 5, 7)).ok());
  Collected c = Drain(*core);
  EXPECT_EQ(c.reason["a"], "length");
  EXPECT_EQ(c.tokens["a"].size(), 7u);
}

}  // namespace
}  // namespace xrt
