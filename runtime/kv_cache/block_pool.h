// BlockPool: the ids of the paged KV cache's blocks, with reference counts,
// a free list and (optionally) the prefix cache's hash -> block index.
//
// Block states:
//   allocated  ref_count >= 1 (shared by ref_count requests)
//   free       ref_count == 0, holds nothing reusable
//   evictable  ref_count == 0, still holds the KV of a cached block hash: a
//              later request with the same prefix can take it back (Acquire)
//              until an allocation evicts it.
//
// Determinism: allocation order depends only on the sequence of calls.
// Allocate takes free blocks first, in the order they became free (initially
// ascending ids 0, 1, 2, ...), then evicts evictable blocks, the least
// recently freed first (an LRU over frees). Free releases ids in the order
// given, so a caller that frees a request's blocks tail first (as
// KvCacheManager does) has its tail blocks evicted first: they are the least
// likely to be shared.
//
// All operations are O(1) per block (intrusive doubly linked lists over
// arrays) and allocate no memory after Create, except Allocate's output
// vector and the hash index.
//
// Ownership: owns only bookkeeping; the KV memory is KvCacheStorage's.
// Thread-compatible: one engine thread uses it; external synchronization
// otherwise.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/kv_cache/block_hash.h"

namespace xrt {

struct BlockPoolParams {
  int64_t num_blocks = 0;              // in [1, 2^31 - 1]
  bool enable_prefix_caching = false;  // off: Register is refused, nothing is evictable
};

class BlockPool {
 public:
  static Expected<BlockPool> Create(const BlockPoolParams& params);

  // Appends n newly allocated blocks (ref_count 1, no hash) to *out.
  // All-or-nothing: ResourceExhausted (naming n and num_free()) when fewer
  // than n blocks are free or evictable; then nothing changes. n == 0 is a
  // no-op; n < 0 is InvalidArgument.
  Status Allocate(int64_t n, std::vector<int32_t>* out);
  Expected<std::vector<int32_t>> Allocate(int64_t n);

  // Drops one reference to each block, in order (an id may repeat as often as
  // it is referenced). A block whose count reaches 0 goes to the back of the
  // evictable LRU if it holds a cached hash, else to the back of the free
  // list. All-or-nothing: InvalidArgument naming the id when an id is out of
  // range or would drop below zero references; then nothing changes.
  Status Free(const int32_t* ids, size_t count);
  Status Free(const std::vector<int32_t>& ids) { return Free(ids.data(), ids.size()); }

  // --- prefix caching ---

  // The block holding the KV of `hash` (allocated or evictable), or -1.
  int32_t Lookup(const BlockHash& hash) const;

  // Takes one more reference to an allocated or evictable block (an
  // evictable block leaves the LRU and becomes allocated). InvalidArgument
  // for an id out of range or a block that is plain free (its content is
  // gone).
  Status Acquire(int32_t id);

  // Records that allocated block `id` now holds the KV of `hash`. Returns
  // true when registered; false (nothing changes) when another block already
  // holds `hash` (two requests computed the same block: the first one stays
  // the cached copy) or `id` already holds a hash. FailedPrecondition when
  // prefix caching is off; InvalidArgument when `id` is not allocated.
  Expected<bool> Register(int32_t id, const BlockHash& hash);

  // --- state ---
  int64_t num_blocks() const { return static_cast<int64_t>(ref_.size()); }
  // Blocks an Allocate can take: free + evictable.
  int64_t num_free() const { return list_size_[kFree] + list_size_[kEvictable]; }
  int64_t num_evictable() const { return list_size_[kEvictable]; }
  // Blocks holding a cached hash (allocated or evictable).
  int64_t num_cached() const { return static_cast<int64_t>(cached_.size()); }
  bool prefix_caching() const { return prefix_caching_; }
  // ref_count of a block; -1 for an id out of range.
  int32_t ref_count(int32_t id) const;
  // Whether `id` holds a cached hash.
  bool is_cached(int32_t id) const;

 private:
  enum ListId : uint8_t { kFree = 0, kEvictable = 1, kNone = 2 };

  explicit BlockPool(const BlockPoolParams& params);

  bool InRange(int32_t id) const { return id >= 0 && id < num_blocks(); }
  void PushBack(ListId list, int32_t id);
  void Unlink(int32_t id);
  int32_t PopFront(ListId list);

  bool prefix_caching_ = false;
  std::vector<int32_t> ref_;
  std::vector<int32_t> prev_, next_;  // links within the block's list; -1 = none
  std::vector<uint8_t> list_;         // ListId of each block
  std::vector<uint8_t> has_hash_;
  std::vector<BlockHash> hash_;
  int32_t head_[2] = {-1, -1}, tail_[2] = {-1, -1};
  int64_t list_size_[2] = {0, 0};
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> cached_;
};

}  // namespace xrt
