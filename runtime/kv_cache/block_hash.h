// Block hashes for prefix caching (vLLM V1 style chained hashes).
//
// The KV of a full block of block_size tokens depends on every token before
// it, so each full block i of a request is named by
//   hash_i = H(hash_{i-1}, token ids of block i, extra keys of block i),
// with hash_{-1} = kRootBlockHash. Two requests share a block only when the
// whole prefix up to and including it is identical. Extra keys carry what
// changes the KV besides token ids:
//   - the LoRA adapter (lora_id), on every block of the request;
//   - for every image whose placeholder tokens overlap the block: its content
//     hash, its length and its start offset relative to the block start,
// so two prompts with the same text but different images or adapters never
// share a block. Only full blocks are hashed; a partial last block never is.
//
// H is a 128-bit, non-cryptographic hash (two independently seeded 64-bit
// lanes, 64-bit words, length-prefixed fields). Accidental collisions are
// out of reach (~2^-128 per pair); it is not meant to resist an adversary
// crafting colliding prompts. The values are fixed by this file (no
// per-process seed), so they are stable across runs and machines.
//
// Thread-safety: pure functions over caller-owned data.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/base/status.h"

namespace xrt {

struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;

  friend bool operator==(const BlockHash& a, const BlockHash& b) {
    return a.lo == b.lo && a.hi == b.hi;
  }
  friend bool operator!=(const BlockHash& a, const BlockHash& b) { return !(a == b); }
};

// For std::unordered_map<BlockHash, ...>.
struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi >> 7)); }
};

// The parent of a request's first block.
inline constexpr BlockHash kRootBlockHash{0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL};

// An image (or other encoder item) occupying placeholder tokens
// [offset, offset + length) of a request.
struct MultimodalSpan {
  int64_t offset = 0;
  int64_t length = 0;
  BlockHash content_hash;  // of the item's content (e.g. its decoded pixels)
};

// Everything besides token ids that decides a request's KV.
struct PrefixKeys {
  int64_t lora_id = -1;                // a stable id of the adapter; -1: base model
  std::vector<MultimodalSpan> images;  // sorted by offset, non-overlapping
};

// InvalidArgument when lora_id < -1 or the spans are negative, empty,
// unsorted or overlapping (naming the span).
Status ValidatePrefixKeys(const PrefixKeys& keys);

// H(parent, tokens[0, num_tokens), extra_keys[0, num_extra)).
BlockHash HashBlock(const BlockHash& parent, const int32_t* tokens, int64_t num_tokens,
                    const uint64_t* extra_keys, size_t num_extra);

// The extra keys of the block covering tokens [begin, end), appended to *out
// (cleared first). Empty for a text-only request on the base model.
void BlockExtraKeys(const PrefixKeys& keys, int64_t begin, int64_t end, std::vector<uint64_t>* out);

// Extends *hashes (the chained hashes of a request's first hashes->size()
// full blocks) to cover every full block of tokens[0, num_tokens). Blocks
// already in *hashes are not recomputed, so a growing request costs O(new
// tokens). `keys` must have passed ValidatePrefixKeys; block_size >= 1.
void ExtendBlockHashes(const int32_t* tokens, int64_t num_tokens, int64_t block_size,
                       const PrefixKeys& keys, std::vector<BlockHash>* hashes);

}  // namespace xrt
