// `xcc check --trace` replays a trace through the real scheduler without
// kernels; the engine running the same trace for real, in process, with the
// same arrival order must use exactly the same compiled executables.
#include <condition_variable>
#include <filesystem>
#include <mutex>

#include <gtest/gtest.h>

#include "compiler/check.h"
#include "compiler/compile.h"
#include "runtime/engine/replay.h"
#include "runtime/model_runner/model_runner.h"
#include "runtime/serving/llm_engine.h"

namespace {

namespace fs = std::filesystem;

TEST(Replay, BucketHistogramMatchesTheEngine) {
  const fs::path dir = fs::temp_directory_path() / "xcc_replay_test";
  fs::create_directories(dir);
  const std::string artifact = (dir / "m.xpk").string();
  const std::string trace = (fs::path(XCC_SOURCE_DIR) / "tests/fixtures/traces/mixed.jsonl").string();
  xcc::CompileOptions o;
  o.model_path = (fs::path(XCC_SOURCE_DIR) / "tests/fixtures/models/llama_gqa").string();
  o.output_path = artifact;
  o.quiet = true;
  o.max_num_seqs = 8;
  o.max_num_batched_tokens = 64;
  o.max_model_len = 256;
  auto compiled = xcc::Compile(o);
  ASSERT_TRUE(compiled.ok()) << compiled.status().ToString();

  xcc::CheckOptions co;
  co.artifact_path = artifact;
  co.trace_path = trace;
  auto report = xcc::RunCheck(co);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  ASSERT_TRUE(report->findings.empty()) << report->ToText();
  ASSERT_FALSE(report->replay_bucket_hits.empty());

  xrt::ModelRunnerParams rp;
  rp.artifact_path = artifact;
  auto runner = xrt::ModelRunner::Create(rp);
  ASSERT_TRUE(runner.ok()) << runner.status().ToString();
  xrt::LLMEngineParams ep;
  ep.runner = runner->get();
  auto engine = xrt::LLMEngine::Create(ep);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();

  const xrt::Tokenizer& tok = (*runner)->tokenizer();
  auto requests = xrt::ReadTrace(
      trace, [&](const std::string& t) { return tok.Encode(t, true); },
      static_cast<int32_t>((*runner)->vocab_size()));
  ASSERT_TRUE(requests.ok()) << requests.status().ToString();

  std::mutex mu;
  std::condition_variable cv;
  size_t finished = 0;
  std::vector<std::string> errors;
  std::vector<std::pair<xrt::EngineRequest, xrt::OutputCallback>> batch;
  for (size_t i = 0; i < requests->size(); ++i) {
    xrt::EngineRequest r;
    r.request_id = "r" + std::to_string(i);
    r.prompt = (*requests)[i].prompt;
    r.max_tokens = (*requests)[i].max_tokens;
    r.sampling.temperature = 0;
    r.ignore_eos = true;
    batch.emplace_back(std::move(r), [&](const xrt::RequestOutput& out) {
      if (!out.finished) return;
      std::lock_guard<std::mutex> lock(mu);
      if (out.finish_reason != "length") errors.push_back(out.request_id + ": " + out.finish_reason + " " + out.error);
      ++finished;
      cv.notify_one();
    });
  }
  ASSERT_TRUE((*engine)->SubmitBatch(std::move(batch)).ok());
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return finished == requests->size(); }));
  }
  EXPECT_TRUE(errors.empty()) << errors.front();
  EXPECT_EQ((*engine)->bucket_hits(), report->replay_bucket_hits);
  fs::remove_all(dir);
}

}  // namespace
