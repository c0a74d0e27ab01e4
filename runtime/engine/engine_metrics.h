// The engine's Prometheus metrics: counters, gauges and histograms updated by
// the engine thread and read (rendered as text exposition format 0.0.4) by
// HTTP threads. Thread-safe: every field is atomic or mutex-guarded.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace xrt {

// A histogram with fixed upper bounds (seconds), Prometheus-style cumulative.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Appends "# TYPE name histogram" and its _bucket/_sum/_count lines.
  void Render(const std::string& name, const std::string& help, std::string* out) const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<uint64_t> counts_;  // per bound, plus +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct EngineMetrics {
  EngineMetrics();

  std::atomic<int64_t> running{0};
  std::atomic<int64_t> waiting{0};
  std::atomic<int64_t> steps{0};
  std::atomic<int64_t> prompt_tokens{0};
  std::atomic<int64_t> generation_tokens{0};
  std::atomic<int64_t> padded_tokens{0};  // sum over steps of (bucket - real tokens), lm_step
  std::atomic<int64_t> padded_reqs{0};    // same for lm_logits rows
  std::atomic<int64_t> preemptions{0};
  std::atomic<int64_t> steps_without_bucket{0};  // strict mode: steps no executable holds
  std::atomic<int64_t> prefix_queries{0};        // prompt tokens looked up in the prefix cache
  std::atomic<int64_t> prefix_hits{0};           // of which were found
  std::atomic<int64_t> images_encoded{0};        // images run through vision_encode
  std::atomic<int64_t> padded_images{0};         // sum of (bucket - images) over vision_encode runs
  std::atomic<int64_t> encoder_cache_hits{0};    // image lookups the encoder cache served
  std::atomic<int64_t> encoder_cache_misses{0};  // images that had to be encoded
  std::atomic<int64_t> encoder_cache_evictions{0};
  // Multi-LoRA: adapters copied into a slot (loads) and of those the ones that
  // replaced another adapter (swaps), from StepStats.
  std::atomic<int64_t> lora_slot_loads{0};
  std::atomic<int64_t> lora_slot_swaps{0};
  std::atomic<int64_t> kv_blocks_used{0};
  std::atomic<int64_t> kv_blocks_total{0};

  void CountFinished(const std::string& reason);
  void CountBucket(const std::string& executable);
  // A step that ran, by its lm_step LoRA mode ("none", "single", "mixed": the
  // suffix of the lm_step bucket it hit; "none" is the plain executable).
  void CountLoraMode(const std::string& mode);
  // A request admitted with the LoRA adapter `adapter` (base-model requests
  // are not counted here).
  void CountLoraRequest(const std::string& adapter);

  Histogram ttft, tpot, e2e;

  std::string Render() const;
  std::map<std::string, int64_t> BucketHits() const;

 private:
  // ++(*counts)[key] under mu_ (counts: one of the maps below).
  void Count(std::map<std::string, int64_t>* counts, const std::string& key);

  mutable std::mutex mu_;
  std::map<std::string, int64_t> finished_;       // by reason
  std::map<std::string, int64_t> buckets_;        // hits by executable
  std::map<std::string, int64_t> lora_modes_;     // steps by LoRA mode
  std::map<std::string, int64_t> lora_requests_;  // requests by adapter name
};

}  // namespace xrt
