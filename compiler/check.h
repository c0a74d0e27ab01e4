// `xcc check`: the CI gate that proves an artifact serves every step shape its
// serving limits allow, and that it is up to date with its inputs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/status.h"

namespace xcc {

struct CheckOptions {
  std::string artifact_path;
  // JSON object with the keys of `xrt run`'s flags (max-num-seqs or
  // max_num_seqs, max-num-batched-tokens, max-model-len, limit-mm-per-prompt,
  // enable-lora, max-loras, max-lora-rank; see LoadServingConfig); empty: the
  // artifact's own limits.
  std::string serving_config_path;
  // Model paths (directory or .gguf) to re-hash against the provenance, and
  // the adapters packed with --lora-modules: NAME=DIR, or DIR alone when its
  // last path component is that of exactly one packed adapter's path.
  std::vector<std::string> inputs;
  // JSONL request trace to replay through the real scheduler (see
  // runtime/engine/replay.h); empty: no replay.
  std::string trace_path;
  // Also recompute the checksum of every weights/adapters segment (reads the whole
  // file). Code segments are always verified: the loader does it at open.
  bool verify_weights = false;
};

struct CheckFinding {
  std::string kind;     // "coverage" | "stale" | "integrity"
  std::string message;  // names the shape / file and the limit or change behind it
};

struct CheckReport {
  std::vector<CheckFinding> findings;
  std::vector<std::string> notes;  // what was checked, for the human report
  // A LLaVA-style artifact: its vision_encode num_images buckets and the most
  // images one step can encode under the serving limits (every count
  // 1..images_per_step was checked).
  std::vector<int64_t> vision_encode_buckets;
  int64_t images_per_step = 0;
  // With a trace: runs per compiled executable and their padding (rows; images
  // for vision_encode), and the images encoded and encoder-cache traffic.
  std::map<std::string, int64_t> replay_bucket_hits, replay_padding;
  int64_t replay_images_encoded = 0;
  int64_t replay_encoder_cache_hits = 0;
  int64_t replay_encoder_cache_misses = 0;
  int64_t replay_encoder_cache_evictions = 0;
  // With a trace on an artifact served with LoRA: steps that ran per lm_step
  // variant ("none", "single", "mixed"), and adapter loads into slots / swaps.
  bool replay_lora = false;
  std::map<std::string, int64_t> replay_lora_mode_steps;
  int64_t replay_lora_loads = 0;
  int64_t replay_lora_swaps = 0;
  nlohmann::ordered_json ToJson() const;
  std::string ToText() const;
};

// Runs every check. An error Status means the check could not run (exit code
// 2), e.g. an artifact the loader rejects (a corrupt code segment among them);
// findings mean it ran and found a gap, staleness or a corrupt or unverifiable
// segment (exit code 1).
xrt::Expected<CheckReport> RunCheck(const CheckOptions& options);

}  // namespace xcc
