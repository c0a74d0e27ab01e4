#include "runtime/engine/stop_checker.h"

#include <algorithm>

namespace xrt {

std::vector<int32_t> ModelEosTokenIds(const std::vector<int32_t>& generation_config_eos,
                                      int32_t tokenizer_eos) {
  std::vector<int32_t> out;
  auto add = [&](int32_t id) {
    if (id >= 0 && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  };
  for (int32_t id : generation_config_eos) add(id);
  add(tokenizer_eos);
  return out;
}

StopChecker::StopChecker(StopConditions conditions, const Tokenizer* tokenizer,
                         bool skip_special_tokens)
    : c_(std::move(conditions)) {
  if (tokenizer != nullptr) detok_.emplace(tokenizer, skip_special_tokens);
}

bool StopChecker::IsStopToken(int32_t token) const {
  auto has = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  return has(c_.stop_token_ids) || (!c_.ignore_eos && has(c_.eos_token_ids));
}

size_t StopChecker::HeldBackLength() const {
  size_t keep = 0;
  for (const std::string& stop : c_.stop) {
    if (stop.empty()) continue;
    for (size_t k = std::min(stop.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, stop, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  return keep;
}

std::string StopChecker::Flush() {
  std::string text = std::move(held_);
  held_.clear();
  if (detok_) text += detok_->Flush();
  return text;
}

StopResult StopChecker::Append(int32_t token, int64_t num_generated) {
  StopResult r;
  if (IsStopToken(token)) {
    r.text = Flush();
    r.finish_reason = "stop";
    return r;
  }
  if (detok_) held_ += detok_->Push(token);
  size_t cut = std::string::npos;
  for (const std::string& stop : c_.stop)
    if (!stop.empty()) cut = std::min(cut, held_.find(stop));
  if (cut != std::string::npos) {
    r.text = held_.substr(0, cut);
    held_.clear();
    r.finish_reason = "stop";
    return r;
  }
  const bool length =
      num_generated >= c_.max_tokens ||
      (c_.max_model_len > 0 && c_.prompt_tokens + num_generated >= c_.max_model_len);
  if (length) {
    r.text = Flush();
    r.finish_reason = "length";
    return r;
  }
  const size_t keep = HeldBackLength();
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

}  // namespace xrt
