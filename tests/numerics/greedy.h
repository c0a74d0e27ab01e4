// One greedy request run to completion on an engine core (the path `xrt
// generate` takes), for the numerics tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/engine/engine_core.h"
#include "runtime/executor/model_runner.h"

namespace xcc::testing {

struct GreedyResult {
  xrt::Status status;
  std::vector<int32_t> tokens;
  std::vector<float> prompt_logits;  // of the prompt's last position
  std::string finish_reason;
};

// An artifact opened for the numerics tests: its runner and an engine core on it
// (prefix caching off: every prompt computed from scratch). Threads: XCC_TEST_THREADS,
// else 2.
struct TestEngine {
  std::unique_ptr<xrt::ModelRunner> runner;
  std::unique_ptr<xrt::EngineCore> core;
};

// `kv_cache_dtype`: f32 unless asked (std::nullopt: xrt's "auto").
inline xrt::Expected<TestEngine> OpenEngine(
    const std::string& artifact,
    std::optional<xrt::KvCacheDtype> kv_cache_dtype = xrt::KvCacheDtype::kF32) {
  xrt::ModelRunnerParams rp;
  rp.artifact_path = artifact;
  rp.kv_cache_dtype = kv_cache_dtype;
  const char* threads = std::getenv("XCC_TEST_THREADS");
  rp.num_threads = threads ? std::atoi(threads) : 2;
  TestEngine e;
  XRT_ASSIGN_OR_RETURN(e.runner, xrt::ModelRunner::Create(rp));
  xrt::EngineCoreParams cp = e.runner->engine_core_params();
  cp.enable_prefix_caching = false;
  XRT_ASSIGN_OR_RETURN(e.core, xrt::EngineCore::Create(cp));
  return e;
}

// Generates `max_tokens` tokens past every EOS, greedily.
// `lora`: the adapter to run with (null: the base model).
inline GreedyResult Greedy(xrt::EngineCore& core, const std::vector<int32_t>& prompt,
                           int64_t max_tokens, std::vector<xrt::ImageInput> images = {},
                           std::shared_ptr<const xrt::LoraAdapter> lora = nullptr) {
  GreedyResult r;
  xrt::EngineRequest req;
  req.request_id = "greedy";
  req.prompt = prompt;
  req.images = std::move(images);
  req.lora = std::move(lora);
  req.max_tokens = max_tokens;
  req.ignore_eos = true;
  req.sampling.temperature = 0.0f;
  req.return_prompt_logits = true;
  r.status = core.AddRequest(std::move(req));
  if (!r.status.ok()) return r;
  r.status = xrt::RunToCompletion(core, [&](const xrt::RequestOutput& o) {
    if (!o.prompt_logits.empty()) r.prompt_logits = o.prompt_logits;
    for (const xrt::GeneratedToken& t : o.tokens) r.tokens.push_back(t.token);
    if (o.finished) r.finish_reason = o.finish_reason;
    if (o.finish_reason == "error" && r.status.ok()) r.status = xrt::InternalError("{}", o.error);
  });
  return r;
}

// How many leading tokens of a and b are equal.
inline size_t LeadingAgreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  size_t n = 0;
  while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
  return n;
}

// max |a[i] - b[i]| over the common length.
inline float MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// The leading greedy steps of a reference whose top1-top2 margins are all at least
// `min_margin`: where another correct implementation must pick the same tokens (at
// a near tie, rounding may pick either).
inline size_t DecisiveSteps(const std::vector<float>& margins, float min_margin) {
  size_t n = 0;
  while (n < margins.size() && margins[n] >= min_margin) ++n;
  return n;
}

}  // namespace xcc::testing
