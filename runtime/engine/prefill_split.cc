#include "runtime/engine/prefill_split.h"

#include <algorithm>

namespace xrt {

Expected<std::vector<PrefillChunk>> SplitPrefill(int64_t num_tokens, const BucketTable& buckets,
                                                 int64_t token_budget) {
  if (num_tokens < 1) return InvalidArgumentError("split prefill: num_tokens is {}", num_tokens);
  if (token_budget < 1) {
    return InvalidArgumentError("split prefill: token_budget is {}; must be >= 1", token_budget);
  }
  if (buckets.max_tokens() < 1) {
    return FailedPreconditionError("split prefill: the bucket table has no token buckets");
  }
  const int64_t chunk = std::min(token_budget, buckets.max_tokens());
  std::vector<PrefillChunk> out;
  out.reserve(static_cast<size_t>((num_tokens + chunk - 1) / chunk));
  for (int64_t begin = 0; begin < num_tokens; begin += chunk) {
    out.push_back(PrefillChunk{begin, std::min(chunk, num_tokens - begin)});
  }
  return out;
}

}  // namespace xrt
