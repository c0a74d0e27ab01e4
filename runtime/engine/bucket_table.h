// BucketTable: the compiled static shapes of an artifact and the choice of
// the bucket a step runs in (docs/DESIGN.md §2).
//
//   token buckets: the num_tokens sizes of the lm_step executables;
//   req buckets:   the num_reqs sizes of the lm_logits executables;
//   image buckets: the num_images sizes of the vision_encode executables.
//
// A batch runs in the smallest bucket that holds it; the rows beyond the
// batch are padding (input_builder.h states the padding conventions).
//
// The free functions below are the default bucket generators and the
// `--buckets` parser. They are plain C++ on purpose: the compiler (xcc) uses
// them to decide which executables to build and the runtime uses them to
// check an artifact, so both sides agree by construction.
//
// Thread-safety: a BucketTable is immutable after Create; const methods may be
// called from any thread. The free functions are pure.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace xrt {

class BucketTable {
 public:
  // An empty table: every lookup fails. Exists so that params structs holding
  // a BucketTable can be default-constructed; use Create for a real table.
  BucketTable() = default;

  // Both lists must be non-empty, positive and strictly increasing
  // (InvalidArgument naming the list, the index and the value otherwise).
  // image_buckets (vision_encode num_images) may be empty: a text-only model.
  static Expected<BucketTable> Create(std::vector<int64_t> token_buckets,
                                      std::vector<int64_t> req_buckets,
                                      std::vector<int64_t> image_buckets = {});

  // The smallest token bucket >= num_tokens. InvalidArgument when
  // num_tokens < 1; OutOfRange (naming num_tokens and the largest bucket)
  // when no bucket holds it: the caller must split the batch.
  Expected<int64_t> TokenBucketFor(int64_t num_tokens) const;
  // The smallest req bucket >= num_reqs; same errors as TokenBucketFor.
  Expected<int64_t> ReqBucketFor(int64_t num_reqs) const;

  // The smallest image bucket >= num_images; same errors as TokenBucketFor.
  Expected<int64_t> ImageBucketFor(int64_t num_images) const;

  // The largest buckets (0 for an empty table).
  int64_t max_tokens() const { return token_buckets_.empty() ? 0 : token_buckets_.back(); }
  int64_t max_reqs() const { return req_buckets_.empty() ? 0 : req_buckets_.back(); }
  int64_t max_images() const { return image_buckets_.empty() ? 0 : image_buckets_.back(); }

  const std::vector<int64_t>& token_buckets() const { return token_buckets_; }
  const std::vector<int64_t>& req_buckets() const { return req_buckets_; }
  const std::vector<int64_t>& image_buckets() const { return image_buckets_; }

 private:
  BucketTable(std::vector<int64_t> token_buckets, std::vector<int64_t> req_buckets,
              std::vector<int64_t> image_buckets)
      : token_buckets_(std::move(token_buckets)),
        req_buckets_(std::move(req_buckets)),
        image_buckets_(std::move(image_buckets)) {}

  std::vector<int64_t> token_buckets_;
  std::vector<int64_t> req_buckets_;
  std::vector<int64_t> image_buckets_;
};

// The smallest (and first) default token bucket.
inline constexpr int64_t kMinTokenBucket = 16;
// The smallest default req bucket (when max_num_seqs allows it).
inline constexpr int64_t kMinReqBucket = 8;

// Default lm_step buckets for a serving limit of max_num_batched_tokens.
//   gap == 0: 16, 32, 64, ... doubling up to and including the first bucket
//             >= max_num_batched_tokens (max 100 -> 16, 32, 64, 128).
//   gap  > 0: doubling from 16 while the bucket is <= gap, then steps of +gap
//             from the last doubled bucket until one is >= the limit
//             (max 512, gap 128 -> 16, 32, 64, 128, 256, 384, 512;
//              max 300, gap 100 -> 16, 32, 64, 164, 264, 364).
//             A gap below 16 starts the +gap steps at 16.
// Doubling always stops at the first bucket >= the limit, so a large gap
// changes nothing. The last bucket may exceed the limit (it covers it, see
// CheckCovers). Returns an empty list when max_num_batched_tokens < 1 or
// gap < 0 (the caller validates its flags; CheckCovers rejects an empty list).
std::vector<int64_t> DefaultTokenBuckets(int64_t max_num_batched_tokens, int64_t gap);

// Default lm_logits buckets: 8, 16, 32, ... doubling, capped at max_num_seqs,
// so the last bucket is exactly max_num_seqs and no bucket is larger than a
// batch can ever be (max 12 -> 8, 12; max 64 -> 8, 16, 32, 64;
// max 100 -> 8, 16, 32, 64, 100). max_num_seqs <= 8 gives the single
// bucket {max_num_seqs} (max 1 -> {1}: a single-sequence server gathers one
// row). Returns an empty list when max_num_seqs < 1.
std::vector<int64_t> DefaultReqBuckets(int64_t max_num_seqs);

// The vision encoder's per-step budget and the encoder-output cache size, in
// encoder output rows (= image placeholder tokens), after vLLM's
// compute_encoder_budget: both default to max_num_batched_tokens and are never
// smaller than one image's tokens_per_image, so a step can always encode one
// image and the cache can always hold it.
//   images_per_step: whole images one step may encode = compute_rows / tokens_per_image
//                    (the largest vision_encode bucket);
//   cache_rows:      with cache_rows_override > 0 that value (raised to one image);
//                    else enough for the images one step's tokens can cover
//                    (ceil(max_num_batched_tokens / tokens_per_image), or one image
//                    when an image is larger than the step), plus one in flight,
//                    capped at max_num_seqs * max_images_per_prompt images, in rows.
struct EncoderBudget {
  int64_t compute_rows = 0;
  int64_t images_per_step = 0;
  int64_t cache_rows = 0;
};
// InvalidArgument when a size is < 1 or the override is negative.
Expected<EncoderBudget> ComputeEncoderBudget(int64_t max_num_batched_tokens,
                                             int64_t tokens_per_image, int64_t max_num_seqs,
                                             int64_t max_images_per_prompt,
                                             int64_t cache_rows_override);

// Default vision_encode buckets: 1, 2, 4, ... doubling while below
// images_per_step, then images_per_step itself (5 -> 1, 2, 4, 5). Empty when
// images_per_step < 1.
std::vector<int64_t> DefaultImageBuckets(int64_t images_per_step);

// Parses a comma-separated bucket list, e.g. "16,32,64" (spaces around the
// entries are allowed). InvalidArgument naming the entry (1-based) and its
// text for: an empty list or entry, a non-numeric entry, a value that does
// not fit in int64, a value < 1, a value not greater than the one before.
Expected<std::vector<int64_t>> ParseBucketList(std::string_view text);

// OK when the largest bucket is >= limit. InvalidArgument otherwise (or for an
// empty list), naming the limit ("max_num_batched_tokens = 300") and the
// largest bucket.
Status CheckCovers(const std::vector<int64_t>& buckets, int64_t limit, const char* limit_name);

}  // namespace xrt
