#include "runtime/engine/replay.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

namespace xrt {

Expected<std::vector<TraceRequest>> ReadTrace(const std::string& path, const EncodeFn& encode,
                                              int32_t vocab_size) {
  std::ifstream in(path);
  if (!in) return NotFoundError("{}: cannot open", path);
  std::vector<TraceRequest> out;
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object())
      return InvalidArgumentError("{}:{}: not a JSON object", path, line_no);
    TraceRequest r;
    if (j.contains("arrival")) {
      if (!j["arrival"].is_number() || j["arrival"].get<double>() < 0)
        return InvalidArgumentError("{}:{}: 'arrival' must be a non-negative number", path,
                                    line_no);
      r.arrival = j["arrival"].get<double>();
    }
    if (j.contains("prompt")) {
      if (!j["prompt"].is_string())
        return InvalidArgumentError("{}:{}: 'prompt' must be a string", path, line_no);
      r.prompt = encode(j["prompt"].get<std::string>());
    } else if (j.contains("prompt_len")) {
      if (!j["prompt_len"].is_number_integer() || j["prompt_len"].get<int64_t>() < 1)
        return InvalidArgumentError("{}:{}: 'prompt_len' must be a positive integer", path,
                                    line_no);
      const int64_t n = j["prompt_len"].get<int64_t>();
      r.prompt.resize(static_cast<size_t>(n));
      // Distinct per request so prompts do not share prefix-cache blocks by accident.
      for (int64_t i = 0; i < n; ++i)
        r.prompt[i] = static_cast<int32_t>((line_no * 7919 + i * 31) % std::max(vocab_size, 1));
    } else {
      return InvalidArgumentError("{}:{}: needs 'prompt' or 'prompt_len'", path, line_no);
    }
    if (r.prompt.empty()) return InvalidArgumentError("{}:{}: the prompt is empty", path, line_no);
    if (!j.contains("max_tokens") || !j["max_tokens"].is_number_integer() ||
        j["max_tokens"].get<int64_t>() < 1)
      return InvalidArgumentError("{}:{}: 'max_tokens' must be a positive integer", path, line_no);
    r.max_tokens = j["max_tokens"].get<int64_t>();
    out.push_back(std::move(r));
  }
  if (out.empty()) return InvalidArgumentError("{}: the trace has no requests", path);
  return out;
}

namespace {

// Runs no kernels and computes no logits.
class NoKernelExecutor : public StepExecutor {
 public:
  Expected<const float*> Execute(const StepInputs&) override { return nullptr; }
};

}  // namespace

Expected<ReplayReport> Replay(const ReplayParams& p, const std::vector<TraceRequest>& trace) {
  NoKernelExecutor executor;
  EngineCoreParams cp = p.core;
  cp.executor = &executor;
  cp.tokenizer = nullptr;
  cp.eos_token_ids.clear();
  XRT_ASSIGN_OR_RETURN(std::unique_ptr<EngineCore> core, EngineCore::Create(cp));
  const RequestProcessor processor(core->request_processor_params());

  ReplayReport report;
  size_t next = 0;
  double now = 0;
  while (next < trace.size() || core->HasUnfinished()) {
    if (!core->HasUnfinished() && next < trace.size()) now = std::max(now, trace[next].arrival);
    for (; next < trace.size() && trace[next].arrival <= now; ++next) {
      GenerationRequest g;
      g.request_id = fmt::format("trace-{}", next + 1);
      g.kind = PromptKind::kTokens;
      g.prompt_token_ids = trace[next].prompt;
      g.max_tokens = trace[next].max_tokens;
      g.ignore_eos = true;
      g.sampling.temperature = 0;
      g.sampling_set.temperature = true;
      Expected<EngineRequest> request = processor.Process(g);
      Status s = request.ok() ? core->AddRequest(std::move(*request)) : request.status();
      if (!s.ok()) return s.WithContext(fmt::format("trace request {}", next + 1));
    }
    EngineCoreOutputs out = core->Step();
    now += p.step_seconds;
    const StepStats& st = out.stats;
    if (st.step == 0) {
      if (!st.error.ok()) return st.error;
      if (core->HasUnfinished())
        return InternalError("replay: requests are left but nothing could be scheduled");
      continue;
    }
    ++report.steps;
    report.preemptions += st.preemptions;
    const std::string failure = !st.error.ok() ? st.error.message() : st.unbucketed;
    if (!failure.empty()) {
      ++report.steps_without_bucket;
      report.unbucketed.push_back(fmt::format("step {} ({} tokens, {} requests): {}", report.steps,
                                              st.num_tokens, st.num_reqs, failure));
    }
    if (!st.lm_step.empty()) {
      report.bucket_hits[st.lm_step]++;
      report.padding[st.lm_step] += st.lm_step_padding;
    }
    if (!st.lm_logits.empty()) {
      report.bucket_hits[st.lm_logits]++;
      report.padding[st.lm_logits] += st.lm_logits_padding;
    }
    report.step_tokens.push_back(st.num_tokens);
    report.step_reqs.push_back(st.num_sampling);
  }
  return report;
}

}  // namespace xrt
