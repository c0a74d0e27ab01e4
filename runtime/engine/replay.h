// Replay: run a request trace through the real Scheduler, KV cache manager and
// InputBuilder without running any kernels, and report which compiled
// executables the steps would use (`xcc check --trace`, `xcc tune-buckets`).
//
// Requests arrive in trace order; a request is admitted to the scheduler once
// the virtual clock reaches its arrival time, and every step advances the clock
// by `step_seconds`. Each request generates exactly max_tokens tokens (EOS is
// not modelled), so the schedule depends only on lengths, arrival order and
// prefix-cache hits of the prompts.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/engine/bucket_table.h"
#include "runtime/engine/kv_cache_manager.h"

namespace xrt {

struct TraceRequest {
  double arrival = 0;            // seconds from the start of the trace
  std::vector<int32_t> prompt;   // token ids
  int64_t max_tokens = 1;
};

// Parses JSONL: one object per line with "arrival" (seconds, default 0),
// either "prompt" (text, encoded with `encode`) or "prompt_len" (synthetic
// ids), and "max_tokens". Errors name the line and field.
using EncodeFn = std::function<std::vector<int32_t>(const std::string&)>;
Expected<std::vector<TraceRequest>> ReadTrace(const std::string& path, const EncodeFn& encode,
                                              int32_t vocab_size);

struct ReplayParams {
  BucketTable buckets;
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t max_model_len = 0;
  int64_t compiled_max_num_reqs = 0;  // request rows of lm_step
  KvCacheManagerParams kv;
  double step_seconds = 0.05;
};

struct ReplayReport {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t steps_without_bucket = 0;
  std::vector<std::string> unbucketed;          // one message per step with no bucket
  std::map<std::string, int64_t> bucket_hits;   // "lm_step_t16" -> steps
  std::map<std::string, int64_t> padding;       // executable -> padded minus real rows
  std::vector<int64_t> step_tokens;             // real tokens of every step, in order
  std::vector<int64_t> step_reqs;               // sampling requests of every step
};

Expected<ReplayReport> Replay(const ReplayParams& params, const std::vector<TraceRequest>& trace);

}  // namespace xrt
