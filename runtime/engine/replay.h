// Replay: run a request trace through the engine core (engine_core.h: the
// same Scheduler, KV cache manager, InputBuilder and stop checks the server
// runs) with a step executor that runs no kernels, and report which compiled
// executables the steps would use (`xcc check --trace`, `xcc tune-buckets`).
//
// Requests arrive in trace order; a request is added once the virtual clock
// reaches its arrival time (through the RequestProcessor, as the server adds
// them), and every step advances the clock by `step_seconds`. Without logits
// the core samples a fixed token and models no EOS: each request generates
// exactly max_tokens tokens, so the schedule depends only on lengths, arrival
// order and prefix-cache hits of the prompts.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/engine_core.h"

namespace xrt {

struct TraceRequest {
  double arrival = 0;           // seconds from the start of the trace
  std::vector<int32_t> prompt;  // token ids
  int64_t max_tokens = 1;
};

// Parses JSONL: one object per line with "arrival" (seconds, default 0),
// either "prompt" (text, encoded with `encode`) or "prompt_len" (synthetic
// ids), and "max_tokens". Errors name the line and field.
using EncodeFn = std::function<std::vector<int32_t>(const std::string&)>;
Expected<std::vector<TraceRequest>> ReadTrace(const std::string& path, const EncodeFn& encode,
                                              int32_t vocab_size);

struct ReplayParams {
  // The engine to replay: limits, buckets, KV pool, prefix caching. Its
  // executor, tokenizer and EOS ids are not used (no kernels, no text, no EOS).
  EngineCoreParams core;
  double step_seconds = 0.05;
};

struct ReplayReport {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t steps_without_bucket = 0;
  std::vector<std::string> unbucketed;         // one message per step that could not run
  std::map<std::string, int64_t> bucket_hits;  // "lm_step_t16" -> steps
  std::map<std::string, int64_t> padding;      // executable -> padded minus real rows
  std::vector<int64_t> step_tokens;            // real tokens of every step, in order
  std::vector<int64_t> step_reqs;              // sampling requests of every step
};

Expected<ReplayReport> Replay(const ReplayParams& params, const std::vector<TraceRequest>& trace);

}  // namespace xrt
