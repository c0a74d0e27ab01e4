#include "runtime/engine/bucket_table.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string>

namespace xrt {
namespace {

// Largest limit the generators accept; keeps the doubling far from overflow.
constexpr int64_t kMaxGeneratorLimit = int64_t{1} << 40;

Status CheckBucketList(const std::vector<int64_t>& buckets, const char* what) {
  if (buckets.empty()) return InvalidArgumentError("{} buckets: the list is empty", what);
  for (size_t i = 0; i < buckets.size(); ++i) {
    if (buckets[i] < 1) {
      return InvalidArgumentError("{} buckets: bucket {} is {}; buckets must be >= 1", what, i,
                                  buckets[i]);
    }
    if (i > 0 && buckets[i] <= buckets[i - 1]) {
      return InvalidArgumentError(
          "{} buckets: bucket {} is {}, not greater than the bucket before it ({}); buckets "
          "must be sorted and unique",
          what, i, buckets[i], buckets[i - 1]);
    }
  }
  return Status::Ok();
}

Expected<int64_t> SmallestCovering(const std::vector<int64_t>& buckets, int64_t n,
                                   const char* what) {
  if (n < 1) return InvalidArgumentError("{} = {}: must be >= 1", what, n);
  if (buckets.empty()) return OutOfRangeError("{} = {}: there are no {} buckets", what, n, what);
  auto it = std::lower_bound(buckets.begin(), buckets.end(), n);
  if (it == buckets.end()) {
    return OutOfRangeError("{} = {} exceeds the largest {} bucket ({})", what, n, what,
                           buckets.back());
  }
  return *it;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

}  // namespace

Expected<BucketTable> BucketTable::Create(std::vector<int64_t> token_buckets,
                                          std::vector<int64_t> req_buckets,
                                          std::vector<int64_t> image_buckets) {
  XRT_RETURN_IF_ERROR(CheckBucketList(token_buckets, "token"));
  XRT_RETURN_IF_ERROR(CheckBucketList(req_buckets, "req"));
  if (!image_buckets.empty()) XRT_RETURN_IF_ERROR(CheckBucketList(image_buckets, "image"));
  return BucketTable(std::move(token_buckets), std::move(req_buckets), std::move(image_buckets));
}

Expected<int64_t> BucketTable::ImageBucketFor(int64_t num_images) const {
  return SmallestCovering(image_buckets_, num_images, "num_images");
}

Expected<int64_t> BucketTable::TokenBucketFor(int64_t num_tokens) const {
  return SmallestCovering(token_buckets_, num_tokens, "num_tokens");
}

Expected<int64_t> BucketTable::ReqBucketFor(int64_t num_reqs) const {
  return SmallestCovering(req_buckets_, num_reqs, "num_reqs");
}

std::vector<int64_t> DefaultTokenBuckets(int64_t max_num_batched_tokens, int64_t gap) {
  const int64_t limit = max_num_batched_tokens;
  if (limit < 1 || limit > kMaxGeneratorLimit || gap < 0 || gap > kMaxGeneratorLimit) return {};
  std::vector<int64_t> out{kMinTokenBucket};
  if (gap == 0) {
    while (out.back() < limit) out.push_back(out.back() * 2);
    return out;
  }
  while (out.back() < limit && out.back() * 2 <= gap) out.push_back(out.back() * 2);
  while (out.back() < limit) out.push_back(out.back() + gap);
  return out;
}

std::vector<int64_t> DefaultReqBuckets(int64_t max_num_seqs) {
  if (max_num_seqs < 1 || max_num_seqs > kMaxGeneratorLimit) return {};
  std::vector<int64_t> out;
  for (int64_t b = kMinReqBucket; b < max_num_seqs; b *= 2) out.push_back(b);
  out.push_back(max_num_seqs);
  return out;
}

Expected<std::vector<int64_t>> ParseBucketList(std::string_view text) {
  if (Trim(text).empty()) return InvalidArgumentError("bucket list '{}' is empty", text);
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string_view entry = Trim(text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    const size_t index = out.size() + 1;
    if (entry.empty()) {
      return InvalidArgumentError("bucket list '{}': entry {} is empty", text, index);
    }
    int64_t value = 0;
    auto [end, ec] = std::from_chars(entry.data(), entry.data() + entry.size(), value);
    if (ec == std::errc::result_out_of_range) {
      return InvalidArgumentError("bucket list '{}': entry {} ('{}') is too large", text, index,
                                  entry);
    }
    if (ec != std::errc() || end != entry.data() + entry.size()) {
      return InvalidArgumentError("bucket list '{}': entry {} ('{}') is not an integer", text,
                                  index, entry);
    }
    if (value < 1) {
      return InvalidArgumentError("bucket list '{}': entry {} ({}) must be >= 1", text, index,
                                  value);
    }
    if (!out.empty() && value <= out.back()) {
      return InvalidArgumentError(
          "bucket list '{}': entry {} ({}) is not greater than the entry before it ({}); "
          "buckets must be increasing",
          text, index, value, out.back());
    }
    out.push_back(value);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Status CheckCovers(const std::vector<int64_t>& buckets, int64_t limit, const char* limit_name) {
  if (buckets.empty()) {
    return InvalidArgumentError("{} = {} is not covered: there are no buckets", limit_name, limit);
  }
  const int64_t largest = *std::max_element(buckets.begin(), buckets.end());
  if (largest < limit) {
    return InvalidArgumentError("{} = {} is not covered: the largest bucket is {}", limit_name,
                                limit, largest);
  }
  return Status::Ok();
}

Expected<EncoderBudget> ComputeEncoderBudget(int64_t max_num_batched_tokens,
                                             int64_t tokens_per_image, int64_t max_num_seqs,
                                             int64_t max_images_per_prompt,
                                             int64_t cache_rows_override) {
  if (max_num_batched_tokens < 1 || tokens_per_image < 1 || max_num_seqs < 1 ||
      max_images_per_prompt < 1)
    return InvalidArgumentError(
        "encoder budget: max_num_batched_tokens {}, tokens_per_image {}, max_num_seqs {} and "
        "max images per prompt {} must be >= 1",
        max_num_batched_tokens, tokens_per_image, max_num_seqs, max_images_per_prompt);
  if (cache_rows_override < 0)
    return InvalidArgumentError("encoder cache size must be >= 0 rows (0: automatic), got {}",
                                cache_rows_override);
  EncoderBudget b;
  b.compute_rows = std::max(max_num_batched_tokens, tokens_per_image);
  b.images_per_step = b.compute_rows / tokens_per_image;
  if (cache_rows_override > 0) {
    b.cache_rows = std::max(cache_rows_override, tokens_per_image);
  } else {
    int64_t items = tokens_per_image > max_num_batched_tokens
                        ? 1
                        : (max_num_batched_tokens + tokens_per_image - 1) / tokens_per_image;
    items = std::min(items + 1, max_num_seqs * max_images_per_prompt);
    b.cache_rows = std::max<int64_t>(items, 1) * tokens_per_image;
  }
  return b;
}

std::vector<int64_t> DefaultImageBuckets(int64_t images_per_step) {
  std::vector<int64_t> out;
  for (int64_t b = 1; b < images_per_step; b *= 2) out.push_back(b);
  if (images_per_step >= 1) out.push_back(images_per_step);
  return out;
}

}  // namespace xrt
