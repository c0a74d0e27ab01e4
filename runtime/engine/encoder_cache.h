// EncoderCache: which images' encoder outputs (the projected feature rows
// vision_encode computes) sit in the runtime's encoder-output cache buffer, and
// at which rows (vLLM V1's EncoderCacheManager). lm_step reads image rows from
// that buffer through embed_source, so an entry is a fixed range of rows.
//
// The buffer holds num_slots = capacity_rows / item_rows items of item_rows
// rows each (a LLaVA-style model's images all become tokens_per_image rows).
// An entry is keyed by the image's content hash and remembers the requests
// that still need it (those whose placeholder tokens are not all in the KV
// cache yet). An entry nobody references stays cached, in a FIFO of freeable
// entries, until a new item needs its slot: the oldest is evicted lazily, so a
// repeated image hits as long as it was not pushed out.
//
// Entries are created by Allocate in the step that encodes them ("pending");
// MarkEncoded makes them valid once that step ran. A pending entry whose last
// user goes away (preempted, finished, its step failed) is dropped at once: its
// rows were never written.
//
// Statistics: hits (Reference of a valid entry by a request), misses
// (Allocate), evictions.
//
// Thread-compatible: the engine thread (the scheduler) owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/kv_cache/block_hash.h"
#include "runtime/kv_cache/kv_cache_manager.h"  // RequestId

namespace xrt {

struct EncoderCacheParams {
  int64_t capacity_rows = 0;  // rows of the buffer (VisionConfig.encoder_cache_rows)
  int64_t item_rows = 0;      // rows of one item (tokens_per_image)
};

class EncoderCache {
 public:
  // InvalidArgument when item_rows < 1 or capacity_rows < item_rows.
  static Expected<EncoderCache> Create(EncoderCacheParams params);

  // Whether `hash` has an entry (valid, or pending in this step).
  bool Contains(const BlockHash& hash) const;
  // The first row of `hash`'s entry, or -1.
  int64_t Row(const BlockHash& hash) const;
  // Makes `request` a user of the existing entry of `hash` (no-op if it
  // already is); counts a hit for a valid entry. FailedPrecondition if absent.
  Status Reference(const BlockHash& hash, RequestId request);
  // Slots a new item can take now: free ones plus unreferenced valid entries.
  int64_t num_available_slots() const;
  // A pending entry for `hash` used by `request`, in a free slot or, when none
  // is free, in the slot of the oldest unreferenced entry (evicted). Returns its
  // first row. ResourceExhausted when every slot is referenced;
  // FailedPrecondition when `hash` already has an entry.
  Expected<int64_t> Allocate(const BlockHash& hash, RequestId request);
  // The pending entries' rows now hold their encoder outputs.
  void MarkEncoded();
  // Hashes of the pending entries, in allocation order.
  std::vector<BlockHash> Pending() const;
  // `request` no longer needs `hash` (no-op if it did not reference it).
  void Release(const BlockHash& hash, RequestId request);
  // Releases every entry `request` references.
  void ReleaseRequest(RequestId request);

  int64_t num_slots() const { return static_cast<int64_t>(slot_used_.size()); }
  int64_t num_entries() const { return static_cast<int64_t>(entries_.size()); }
  int64_t item_rows() const { return params_.item_rows; }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  int64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    int64_t slot = 0;
    bool valid = false;  // encoded
    std::set<RequestId> users;
  };

  explicit EncoderCache(EncoderCacheParams params);
  void Drop(const BlockHash& hash);  // forgets the entry, frees its slot

  EncoderCacheParams params_;
  std::unordered_map<BlockHash, Entry, BlockHashHasher> entries_;
  std::vector<bool> slot_used_;
  std::deque<BlockHash> freeable_;  // unreferenced valid entries, oldest first
  std::vector<BlockHash> pending_;  // allocation order
  std::map<RequestId, std::vector<BlockHash>> by_request_;
  int64_t hits_ = 0, misses_ = 0, evictions_ = 0;
};

}  // namespace xrt
