#include "runtime/engine/engine_metrics.h"

#include <fmt/format.h>

namespace xrt {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::Render(const std::string& name, const std::string& help, std::string* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  *out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    *out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], cumulative);
  }
  cumulative += counts_.back();
  *out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, cumulative,
                      name, sum_, name, count_);
}

namespace {
std::vector<double> LatencyBounds() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.25, 0.5,
          0.75,  1.0,    2.5,   5.0,  7.5,   10.0, 20.0,  40.0, 80.0};
}

// A label value in the text exposition format: backslash, double quote and
// newline escaped.
std::string PrometheusLabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

EngineMetrics::EngineMetrics()
    : ttft(LatencyBounds()), tpot(LatencyBounds()), e2e(LatencyBounds()) {}

void EngineMetrics::Count(std::map<std::string, int64_t>* counts, const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(*counts)[key];
}

void EngineMetrics::CountFinished(const std::string& reason) { Count(&finished_, reason); }
void EngineMetrics::CountBucket(const std::string& executable) { Count(&buckets_, executable); }
void EngineMetrics::CountLoraMode(const std::string& mode) { Count(&lora_modes_, mode); }
void EngineMetrics::CountLoraRequest(const std::string& adapter) {
  Count(&lora_requests_, adapter);
}

std::map<std::string, int64_t> EngineMetrics::BucketHits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buckets_;
}

std::string EngineMetrics::Render() const {
  std::string out;
  auto gauge = [&](const char* name, const char* help, int64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
  };
  auto counter = [&](const char* name, const char* help, int64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  gauge("xrt_num_requests_running", "Requests in the running batch.", running.load());
  gauge("xrt_num_requests_waiting", "Requests waiting to be scheduled.", waiting.load());
  counter("xrt_steps_total", "Engine steps run.", steps.load());
  counter("xrt_prompt_tokens_total", "Prompt tokens prefilled (incl. recompute).",
          prompt_tokens.load());
  counter("xrt_generation_tokens_total", "Tokens generated.", generation_tokens.load());
  counter("xrt_padding_tokens_total", "Padded minus real tokens over lm_step runs.",
          padded_tokens.load());
  counter("xrt_padding_requests_total", "Padded minus real rows over lm_logits runs.",
          padded_reqs.load());
  counter("xrt_preemptions_total", "Requests preempted (recomputed later).", preemptions.load());
  counter("xrt_steps_without_bucket_total",
          "Steps no compiled executable holds (strict mode fails their overflowing requests).",
          steps_without_bucket.load());
  counter("xrt_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
          prefix_queries.load());
  counter("xrt_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
          prefix_hits.load());
  counter("xrt_images_encoded_total", "Images run through vision_encode.", images_encoded.load());
  counter("xrt_padding_images_total", "Padded minus real images over vision_encode runs.",
          padded_images.load());
  counter("xrt_encoder_cache_hits_total",
          "Images whose encoder output was already in the encoder cache.",
          encoder_cache_hits.load());
  counter("xrt_encoder_cache_misses_total", "Images the encoder had to run for.",
          encoder_cache_misses.load());
  counter("xrt_encoder_cache_evictions_total", "Encoder cache entries evicted to make room.",
          encoder_cache_evictions.load());
  counter("xrt_lora_slot_loads_total",
          "LoRA adapters copied into a device slot (into an empty one, or replacing another).",
          lora_slot_loads.load());
  counter("xrt_lora_slot_swaps_total", "LoRA slot loads that replaced another adapter.",
          lora_slot_swaps.load());
  gauge("xrt_kv_cache_blocks_used", "KV cache blocks in use.", kv_blocks_used.load());
  gauge("xrt_kv_cache_blocks_total", "KV cache blocks.", kv_blocks_total.load());
  {
    std::lock_guard<std::mutex> lock(mu_);
    out +=
        "# HELP xrt_requests_finished_total Requests finished, by reason.\n"
        "# TYPE xrt_requests_finished_total counter\n";
    for (const char* reason : {"stop", "length", "abort", "error"}) {
      auto it = finished_.find(reason);
      out += fmt::format("xrt_requests_finished_total{{finished_reason=\"{}\"}} {}\n", reason,
                         it == finished_.end() ? 0 : it->second);
    }
    out +=
        "# HELP xrt_bucket_hits_total Executable runs, by compiled bucket.\n"
        "# TYPE xrt_bucket_hits_total counter\n";
    for (const auto& [exe, n] : buckets_)
      out += fmt::format("xrt_bucket_hits_total{{executable=\"{}\"}} {}\n", exe, n);
    out +=
        "# HELP xrt_lora_mode_steps_total Steps run, by the LoRA mode of their lm_step (none: "
        "the executable without LoRA).\n"
        "# TYPE xrt_lora_mode_steps_total counter\n";
    for (const char* mode : {"none", "single", "mixed"}) {
      auto it = lora_modes_.find(mode);
      out += fmt::format("xrt_lora_mode_steps_total{{mode=\"{}\"}} {}\n", mode,
                         it == lora_modes_.end() ? 0 : it->second);
    }
    out +=
        "# HELP xrt_lora_requests_total Requests admitted with a LoRA adapter, by adapter name "
        "(base-model requests are not counted).\n"
        "# TYPE xrt_lora_requests_total counter\n";
    for (const auto& [adapter, n] : lora_requests_)
      out += fmt::format("xrt_lora_requests_total{{adapter=\"{}\"}} {}\n",
                         PrometheusLabelValue(adapter), n);
  }
  ttft.Render("xrt_time_to_first_token_seconds", "Time to first token.", &out);
  tpot.Render("xrt_time_per_output_token_seconds", "Time between output tokens.", &out);
  e2e.Render("xrt_e2e_request_latency_seconds", "Request latency, submit to finish.", &out);
  return out;
}

}  // namespace xrt
