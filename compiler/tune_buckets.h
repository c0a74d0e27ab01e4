// `xcc tune-buckets`: choose the lm_step token buckets that minimize padding on
// recorded traffic, under a cap on the number of executables. For a vision
// artifact the vision_encode buckets are not tuned: the proposal keeps the
// compiled ones when they cover every image count one step can encode under
// the token budget, and the default set (1, 2, 4, ..., that count) otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/status.h"

namespace xcc {

// The bucket set of at most `max_buckets` sizes, the largest being
// `must_cover` (so coverage of the token budget is kept), that minimizes
// sum over steps of (smallest bucket >= step - step). Exact (dynamic
// programming over the distinct step sizes). Steps larger than must_cover are
// an error.
xrt::Expected<std::vector<int64_t>> OptimalBuckets(const std::vector<int64_t>& steps,
                                                   int64_t must_cover, int64_t max_buckets);

// Padded tokens of `steps` under `buckets` (sorted); steps above the largest
// bucket count as split into largest-bucket pieces.
int64_t PaddingFor(const std::vector<int64_t>& steps, const std::vector<int64_t>& buckets);

struct TuneOptions {
  std::string artifact_path;
  std::string trace_path;
  std::string serving_config_path;  // as for xcc check; default: the artifact's limits
  int64_t max_executables = 0;      // 0: as many as the default bucket set has
};

struct TuneReport {
  int64_t budget = 0;  // max_num_batched_tokens the buckets must cover
  int64_t steps = 0;
  std::vector<int64_t> current, defaults, proposed;
  int64_t current_padding = 0, default_padding = 0, proposed_padding = 0;
  int64_t real_tokens = 0;
  // A vision artifact: the images one step can encode under `budget` (as xcc
  // compile computes it) and the vision_encode buckets proposed; 0 / empty for
  // a text-only one.
  int64_t images_per_step = 0;
  std::vector<int64_t> image_buckets;
  std::string flags;  // to pass to xcc compile
  std::string ToText() const;
};

xrt::Expected<TuneReport> TuneBuckets(const TuneOptions& options);

}  // namespace xcc
