// One greedy request run to completion on an engine core (the path `xrt
// generate` takes), for the numerics tests.
#pragma once

#include <string>
#include <vector>

#include "runtime/engine/engine_core.h"

namespace xcc::testing {

struct GreedyResult {
  xrt::Status status;
  std::vector<int32_t> tokens;
  std::vector<float> prompt_logits;  // of the prompt's last position
  std::string finish_reason;
};

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

}  // namespace xcc::testing
