#include "runtime/engine/replay.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/engine/input_builder.h"
#include "runtime/engine/scheduler.h"

namespace xrt {

Expected<std::vector<TraceRequest>> ReadTrace(const std::string& path, const EncodeFn& encode,
                                              int32_t vocab_size) {
  std::ifstream in(path);
  if (!in) return NotFoundError("{}: cannot open", path);
  std::vector<TraceRequest> out;
  std::string line;
  for (int lineNo = 1; std::getline(in, line); ++lineNo) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return InvalidArgumentError("{}:{}: not a JSON object", path, lineNo);
    TraceRequest r;
    if (j.contains("arrival")) {
      if (!j["arrival"].is_number() || j["arrival"].get<double>() < 0)
        return InvalidArgumentError("{}:{}: 'arrival' must be a non-negative number", path, lineNo);
      r.arrival = j["arrival"].get<double>();
    }
    if (j.contains("prompt")) {
      if (!j["prompt"].is_string())
        return InvalidArgumentError("{}:{}: 'prompt' must be a string", path, lineNo);
      r.prompt = encode(j["prompt"].get<std::string>());
    } else if (j.contains("prompt_len")) {
      if (!j["prompt_len"].is_number_integer() || j["prompt_len"].get<int64_t>() < 1)
        return InvalidArgumentError("{}:{}: 'prompt_len' must be a positive integer", path, lineNo);
      const int64_t n = j["prompt_len"].get<int64_t>();
      r.prompt.resize(static_cast<size_t>(n));
      // Distinct per request so prompts do not share prefix-cache blocks by accident.
      for (int64_t i = 0; i < n; ++i)
        r.prompt[i] = static_cast<int32_t>((lineNo * 7919 + i * 31) % std::max(vocab_size, 1));
    } else {
      return InvalidArgumentError("{}:{}: needs 'prompt' or 'prompt_len'", path, lineNo);
    }
    if (r.prompt.empty()) return InvalidArgumentError("{}:{}: the prompt is empty", path, lineNo);
    if (!j.contains("max_tokens") || !j["max_tokens"].is_number_integer() ||
        j["max_tokens"].get<int64_t>() < 1)
      return InvalidArgumentError("{}:{}: 'max_tokens' must be a positive integer", path, lineNo);
    r.max_tokens = j["max_tokens"].get<int64_t>();
    out.push_back(std::move(r));
  }
  if (out.empty()) return InvalidArgumentError("{}: the trace has no requests", path);
  return out;
}

Expected<ReplayReport> Replay(const ReplayParams& p, const std::vector<TraceRequest>& trace) {
  SchedulerParams sp;
  sp.max_num_seqs = p.max_num_seqs;
  sp.max_num_batched_tokens = p.max_num_batched_tokens;
  sp.max_model_len = p.max_model_len;
  sp.buckets = p.buckets;
  sp.kv = p.kv;
  XRT_ASSIGN_OR_RETURN(Scheduler scheduler, Scheduler::Create(sp));
  InputBuilderParams ip;
  ip.buckets = p.buckets;
  ip.max_num_reqs = p.compiled_max_num_reqs;
  ip.max_blocks_per_req = p.kv.max_blocks_per_req;
  ip.block_size = p.kv.block_size;
  XRT_ASSIGN_OR_RETURN(InputBuilder builder, InputBuilder::Create(ip));
  StepInputs in;
  builder.Reserve(&in);

  ReplayReport report;
  std::map<RequestId, int64_t> remaining;  // tokens still to generate
  size_t next = 0;
  double now = 0;
  while (next < trace.size() || scheduler.HasUnfinished()) {
    if (!scheduler.HasUnfinished() && next < trace.size()) now = std::max(now, trace[next].arrival);
    for (; next < trace.size() && trace[next].arrival <= now; ++next) {
      const RequestId id = next + 1;
      Status s = scheduler.AddRequest(id, trace[next].prompt, trace[next].max_tokens);
      if (!s.ok()) return s.WithContext(fmt::format("trace request {}", next + 1));
      remaining[id] = trace[next].max_tokens;
    }
    XRT_ASSIGN_OR_RETURN(SchedulerOutput out, scheduler.Schedule());
    now += p.step_seconds;
    if (out.empty()) continue;
    ++report.steps;
    report.preemptions += static_cast<int64_t>(out.preempted.size());
    Status built = builder.Build(out.requests, &in);
    if (!built.ok()) {
      ++report.steps_without_bucket;
      report.unbucketed.push_back(fmt::format("step {} ({} tokens, {} requests): {}", report.steps,
                                              out.num_tokens, out.size(), built.message()));
    } else {
      report.bucket_hits["lm_step_t" + std::to_string(in.token_bucket)]++;
      report.padding["lm_step_t" + std::to_string(in.token_bucket)] += in.token_bucket - in.num_tokens;
      if (in.num_logits > 0) {
        report.bucket_hits["lm_logits_r" + std::to_string(in.req_bucket)]++;
        report.padding["lm_logits_r" + std::to_string(in.req_bucket)] += in.req_bucket - in.num_logits;
      }
    }
    report.step_tokens.push_back(out.num_tokens);
    report.step_reqs.push_back(out.num_sampling);
    std::vector<int32_t> sampled(static_cast<size_t>(out.num_sampling), 1);
    XRT_RETURN_IF_ERROR(scheduler.UpdateAfterStep(out, sampled));
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out.samples(i)) continue;
      const RequestId id = out.request_ids[i];
      if (--remaining[id] == 0) {
        XRT_RETURN_IF_ERROR(scheduler.FinishRequest(id));
        remaining.erase(id);
      }
    }
  }
  return report;
}

}  // namespace xrt
