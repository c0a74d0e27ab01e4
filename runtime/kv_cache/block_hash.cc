#include "runtime/kv_cache/block_hash.h"

namespace xrt {
namespace {

// Tags that separate the kinds of extra keys, so a LoRA id can never be read
// as part of an image key.
constexpr uint64_t kLoraTag = 0x4c6f5241ULL;   // "LoRA"
constexpr uint64_t kImageTag = 0x496d6721ULL;  // "Img!"

inline uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// The murmur3 64-bit finalizer: a bijection with full avalanche.
inline uint64_t Fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

// Two 64-bit lanes with different constants, each absorbing every word with
// a multiply-rotate-multiply round; finalized with cross-mixing.
class Hasher128 {
 public:
  explicit Hasher128(const BlockHash& seed) : a_(seed.lo), b_(seed.hi) {}

  void Add(uint64_t w) {
    a_ = Rotl(a_ ^ (w * 0x9e3779b97f4a7c15ULL), 31) * 0x87c37b91114253d5ULL;
    b_ = Rotl(b_ + (w * 0xc2b2ae3d27d4eb4fULL), 33) * 0x4cf5ad432745937fULL;
    ++n_;
  }

  BlockHash Finish() const {
    uint64_t a = Fmix64(a_ ^ n_);
    uint64_t b = Fmix64(b_ ^ Rotl(n_, 32));
    a += b;
    b += a;
    return BlockHash{Fmix64(a), Fmix64(b ^ 0x165667b19e3779f9ULL)};
  }

 private:
  uint64_t a_, b_;
  uint64_t n_ = 0;
};

}  // namespace

Status ValidatePrefixKeys(const PrefixKeys& keys) {
  if (keys.lora_id < -1) {
    return InvalidArgumentError("prefix keys: lora_id is {}; must be >= 0, or -1 for none",
                                keys.lora_id);
  }
  for (size_t i = 0; i < keys.images.size(); ++i) {
    const MultimodalSpan& s = keys.images[i];
    if (s.offset < 0 || s.length < 1) {
      return InvalidArgumentError(
          "prefix keys: image {} has offset {} and length {}; need offset >= 0 and length >= 1", i,
          s.offset, s.length);
    }
    if (i > 0) {
      const MultimodalSpan& p = keys.images[i - 1];
      if (s.offset < p.offset + p.length) {
        return InvalidArgumentError(
            "prefix keys: image {} starts at {}, inside or before image {} ([{}, {})); images "
            "must be sorted and must not overlap",
            i, s.offset, i - 1, p.offset, p.offset + p.length);
      }
    }
  }
  return Status::Ok();
}

BlockHash HashBlock(const BlockHash& parent, const int32_t* tokens, int64_t num_tokens,
                    const uint64_t* extra_keys, size_t num_extra) {
  Hasher128 h(parent);
  h.Add(parent.lo);
  h.Add(parent.hi);
  h.Add(static_cast<uint64_t>(num_tokens));
  int64_t i = 0;
  for (; i + 1 < num_tokens; i += 2) {
    h.Add(static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) |
          (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i + 1])) << 32));
  }
  if (i < num_tokens) h.Add(static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])));
  h.Add(static_cast<uint64_t>(num_extra));
  for (size_t k = 0; k < num_extra; ++k) h.Add(extra_keys[k]);
  return h.Finish();
}

void BlockExtraKeys(const PrefixKeys& keys, int64_t begin, int64_t end,
                    std::vector<uint64_t>* out) {
  out->clear();
  if (keys.lora_id >= 0) {
    out->push_back(kLoraTag);
    out->push_back(static_cast<uint64_t>(keys.lora_id));
  }
  for (const MultimodalSpan& s : keys.images) {
    if (s.offset >= end) break;  // sorted: no later span overlaps either
    if (s.offset + s.length <= begin) continue;
    out->push_back(kImageTag);
    out->push_back(s.content_hash.lo);
    out->push_back(s.content_hash.hi);
    out->push_back(static_cast<uint64_t>(s.length));
    out->push_back(static_cast<uint64_t>(s.offset - begin));  // may be negative
  }
}

void ExtendBlockHashes(const int32_t* tokens, int64_t num_tokens, int64_t block_size,
                       const PrefixKeys& keys, std::vector<BlockHash>* hashes) {
  std::vector<uint64_t> extra;
  const int64_t num_full = num_tokens / block_size;
  for (int64_t b = static_cast<int64_t>(hashes->size()); b < num_full; ++b) {
    const int64_t begin = b * block_size;
    BlockExtraKeys(keys, begin, begin + block_size, &extra);
    const BlockHash& parent = b == 0 ? kRootBlockHash : (*hashes)[static_cast<size_t>(b - 1)];
    hashes->push_back(HashBlock(parent, tokens + begin, block_size, extra.data(), extra.size()));
  }
}

}  // namespace xrt
