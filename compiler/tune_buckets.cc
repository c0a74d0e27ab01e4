//===- tune_buckets.cc - bucket sets fitted to recorded traffic ----------===//
//
// The trace is replayed through the real scheduler with one bucket equal to
// the token budget, which yields the step sizes the server forms when every
// size is covered; buckets only decide how much each step is padded, not how
// steps are formed (the budget does). The best set of K buckets is then an
// exact 1-D segmentation: dp[k][j] = least padding covering the j smallest
// distinct sizes with k buckets, the last bucket sitting at size j.
//
//===----------------------------------------------------------------------===//
#include "compiler/tune_buckets.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include <fmt/ranges.h>

#include "compiler/serving_model.h"
#include "runtime/engine/artifact_params.h"
#include "runtime/engine/bucket_table.h"
#include "runtime/loader/artifact.h"
#include "schemas/artifact_generated.h"

namespace xcc {

using xrt::Expected;

int64_t PaddingFor(const std::vector<int64_t>& steps, const std::vector<int64_t>& buckets) {
  int64_t pad = 0;
  for (int64_t n : steps) {
    auto it = std::lower_bound(buckets.begin(), buckets.end(), n);
    if (it != buckets.end()) {
      pad += *it - n;
    } else {
      const int64_t big = buckets.back(), rest = n % big;
      if (rest) pad += *std::lower_bound(buckets.begin(), buckets.end(), rest) - rest;
    }
  }
  return pad;
}

Expected<std::vector<int64_t>> OptimalBuckets(const std::vector<int64_t>& steps, int64_t must_cover,
                                              int64_t max_buckets) {
  if (max_buckets < 1) return xrt::InvalidArgumentError("--max-executables must be >= 1");
  std::map<int64_t, int64_t> count;  // size -> steps of that size
  for (int64_t n : steps) {
    if (n < 1 || n > must_cover)
      return xrt::InvalidArgumentError("step of {} tokens outside [1, {}]", n, must_cover);
    count[n]++;
  }
  count.emplace(must_cover, 0);  // the budget is always a bucket
  std::vector<int64_t> size, cnt;
  for (auto [s, c] : count) {
    size.push_back(s);
    cnt.push_back(c);
  }
  const size_t d = size.size();
  // cost(i, j): padding of sizes i..j (inclusive) all sent to bucket size[j].
  std::vector<int64_t> prefix_cnt(d + 1, 0), prefix_tok(d + 1, 0);
  for (size_t i = 0; i < d; ++i) {
    prefix_cnt[i + 1] = prefix_cnt[i] + cnt[i];
    prefix_tok[i + 1] = prefix_tok[i] + cnt[i] * size[i];
  }
  auto cost = [&](size_t i, size_t j) {
    return size[j] * (prefix_cnt[j + 1] - prefix_cnt[i]) - (prefix_tok[j + 1] - prefix_tok[i]);
  };
  const int64_t k = std::min<int64_t>(max_buckets, static_cast<int64_t>(d));
  const int64_t inf = std::numeric_limits<int64_t>::max() / 4;
  // dp[b][j]: best padding of sizes 0..j using b buckets, the last at size[j].
  std::vector<std::vector<int64_t>> dp(k + 1, std::vector<int64_t>(d, inf));
  std::vector<std::vector<size_t>> from(k + 1, std::vector<size_t>(d, 0));
  for (size_t j = 0; j < d; ++j) dp[1][j] = cost(0, j);
  for (int64_t b = 2; b <= k; ++b)
    for (size_t j = 0; j < d; ++j)
      for (size_t i = 0; i < j; ++i)
        if (dp[b - 1][i] < inf && dp[b - 1][i] + cost(i + 1, j) < dp[b][j]) {
          dp[b][j] = dp[b - 1][i] + cost(i + 1, j);
          from[b][j] = i;
        }
  int64_t best_b = 1;
  for (int64_t b = 1; b <= k; ++b)
    if (dp[b][d - 1] < dp[best_b][d - 1]) best_b = b;
  std::vector<int64_t> buckets;
  size_t j = d - 1;
  for (int64_t b = best_b; b >= 1; --b) {
    buckets.push_back(size[j]);
    if (b > 1) j = from[b][j];
  }
  std::reverse(buckets.begin(), buckets.end());
  return buckets;
}

Expected<TuneReport> TuneBuckets(const TuneOptions& o) {
  XRT_ASSIGN_OR_RETURN(std::unique_ptr<xrt::Artifact> a, xrt::Artifact::Open(o.artifact_path));
  XRT_ASSIGN_OR_RETURN(ServingConfig config, LoadServingConfig(*a, o.serving_config_path));
  const xrt::ServingLimits& serving = config.limits;
  const int64_t budget = serving.max_num_batched_tokens;
  TuneReport r;
  r.budget = budget;
  const xrt::CompiledBuckets compiled = xrt::CompiledBucketsOf(*a);
  r.current = compiled.tokens;
  XRT_ASSIGN_OR_RETURN(std::optional<xrt::VisionParams> vision, xrt::VisionParamsOf(*a));
  if (vision) {
    XRT_ASSIGN_OR_RETURN(
        xrt::EncoderBudget encoder,
        xrt::ComputeEncoderBudget(budget, vision->tokens_per_image, serving.max_num_seqs,
                                  vision->max_images_per_prompt, vision->encoder_cache_rows));
    r.images_per_step = encoder.images_per_step;
    r.image_buckets = compiled.images.back() == r.images_per_step
                          ? compiled.images
                          : xrt::DefaultImageBuckets(r.images_per_step);
  }
  XRT_ASSIGN_OR_RETURN(std::vector<xrt::TraceRequest> trace,
                       ReadTraceFor(*a, config, o.trace_path));
  // Step sizes with every size covered: one bucket at the budget (and one
  // vision_encode bucket for every image count).
  std::vector<int64_t> all_images;
  if (vision) all_images = {r.images_per_step};
  XRT_ASSIGN_OR_RETURN(xrt::BucketTable full,
                       xrt::BucketTable::Create({budget}, compiled.reqs, all_images));
  XRT_ASSIGN_OR_RETURN(const xrt::ReplayParams p, ReplayParamsFor(*a, config, std::move(full)));
  XRT_ASSIGN_OR_RETURN(xrt::ReplayReport rep, xrt::Replay(p, trace));
  r.steps = static_cast<int64_t>(rep.step_tokens.size());
  for (int64_t n : rep.step_tokens) r.real_tokens += n;

  r.defaults = xrt::DefaultTokenBuckets(budget, 0);
  const int64_t k =
      o.max_executables > 0 ? o.max_executables : static_cast<int64_t>(r.defaults.size());
  XRT_ASSIGN_OR_RETURN(r.proposed, OptimalBuckets(rep.step_tokens, budget, k));
  r.current_padding = PaddingFor(rep.step_tokens, r.current);
  r.default_padding = PaddingFor(rep.step_tokens, r.defaults);
  r.proposed_padding = PaddingFor(rep.step_tokens, r.proposed);
  std::string list;
  for (size_t i = 0; i < r.proposed.size(); ++i)
    list += (i ? "," : "") + std::to_string(r.proposed[i]);
  r.flags = fmt::format("--token-buckets {} --max-num-batched-tokens {}", list, budget);
  if (vision) r.flags += fmt::format(" --image-buckets {}", fmt::join(r.image_buckets, ","));
  return r;
}

std::string TuneReport::ToText() const {
  auto join = [](const std::vector<int64_t>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
    return s;
  };
  auto pct = [&](int64_t pad) {
    return real_tokens + pad > 0 ? 100.0 * pad / static_cast<double>(real_tokens + pad) : 0.0;
  };
  const std::string images =
      image_buckets.empty()
          ? ""
          : fmt::format(
                "  vision_encode [{}] (a bucket for every image count 1..{} one step can encode)\n",
                join(image_buckets), images_per_step);
  return fmt::format(
      "{} steps, {} real tokens, token budget {}\n"
      "  current   [{}] ({} executables): {} padded tokens ({:.1f}% of computed)\n"
      "  default   [{}] ({} executables): {} padded tokens ({:.1f}%)\n"
      "  proposed  [{}] ({} executables): {} padded tokens ({:.1f}%)\n"
      "{}xcc compile flags: {}\n",
      steps, real_tokens, budget, join(current), current.size(), current_padding,
      pct(current_padding), join(defaults), defaults.size(), default_padding, pct(default_padding),
      join(proposed), proposed.size(), proposed_padding, pct(proposed_padding), images, flags);
}

}  // namespace xcc
