// KvCacheManager: the block tables of an engine's running requests over one
// BlockPool, with optional prefix caching.
//
// Per request it keeps the token ids known so far (prompt + sampled tokens),
// its block table, and num_computed: how many leading positions already have
// their KV in the cache. One step of a request goes:
//
//   AddRequest(id, prompt)          -> num_computed = cached prefix (0 w/o caching)
//   AllocateSlots(id, n)            -> table holds positions [0, num_computed + n)
//   (build inputs, run the step: it writes the KV of those n positions)
//   CommitComputed(id, n)           -> num_computed += n; full blocks get cached
//   AppendTokens(id, &sampled, 1)   -> when the step sampled a token
//   ...
//   FreeRequest(id)                 -> references dropped; cached blocks stay
//                                      evictable for later prefix hits
//
// Position p of a request lives in KV slot
//   block_table[p / block_size] * block_size + p % block_size   (SlotForPosition).
//
// Prefix caching (params.enable_prefix_caching): a block is registered under
// its chained hash (block_hash.h) only once CommitComputed says its KV was
// written, so a hit never reads a block that is still being computed.
// AddRequest attaches the longest run of cached full blocks that prefix the
// prompt, but never the whole prompt: at least the last prompt token is
// recomputed so the step yields its logits. Requests never write to a shared
// block (hits are whole blocks below num_computed).
//
// Preemption by recompute is FreeRequest followed by AddRequest with the
// prompt plus the tokens generated so far.
//
// Ownership: owns the BlockPool and the per-request state; block tables are
// returned by pointer, valid until that request's next AllocateSlots or
// FreeRequest (other requests' calls do not move it).
// Thread-compatible: the engine thread owns it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/kv_cache/block_hash.h"
#include "runtime/kv_cache/block_pool.h"

namespace xrt {

using RequestId = uint64_t;

struct KvCacheManagerParams {
  int64_t num_blocks = 0;
  int64_t block_size = 0;          // tokens per block
  int64_t max_blocks_per_req = 0;  // ceil(max_model_len / block_size)
  bool enable_prefix_caching = false;
};

// The KV slot of position `pos` given a block table (no bounds checks; the
// caller guarantees pos / block_size < block_table.size()).
inline int64_t SlotForPosition(const std::vector<int32_t>& block_table, int64_t block_size,
                               int64_t pos) {
  return static_cast<int64_t>(block_table[static_cast<size_t>(pos / block_size)]) * block_size +
         pos % block_size;
}

class KvCacheManager {
 public:
  // InvalidArgument naming a field < 1.
  static Expected<KvCacheManager> Create(const KvCacheManagerParams& params);

  // Starts tracking request `id` whose prompt is tokens[0, num_tokens).
  // Returns num_computed: the number of prompt tokens whose KV was found in
  // the prefix cache (a multiple of block_size, < num_tokens; 0 without
  // prefix caching). Errors: InvalidArgument for a known id, num_tokens < 1 or
  // bad keys; OutOfRange when the prompt needs more than max_blocks_per_req
  // blocks. Nothing changes on error.
  Expected<int64_t> AddRequest(RequestId id, const int32_t* tokens, int64_t num_tokens,
                               const PrefixKeys& keys = {});

  // The number of leading tokens AddRequest would find cached for this
  // prompt, without taking anything (for a scheduler's budget). Same cap as
  // AddRequest; 0 without prefix caching or for invalid keys.
  int64_t CachedPrefixLength(const int32_t* tokens, int64_t num_tokens,
                             const PrefixKeys& keys = {}) const;

  // Appends known tokens (sampled ones) to the request. NotFound for an
  // unknown id.
  Status AppendTokens(RequestId id, const int32_t* tokens, int64_t num_tokens);

  // Grows the block table so that positions [0, num_computed + num_new_tokens)
  // have slots (a table that is already long enough is left as is).
  // All-or-nothing: ResourceExhausted when the pool is short, OutOfRange
  // when the table would exceed max_blocks_per_req (both name the request
  // and the counts); InvalidArgument for num_new_tokens < 0; NotFound.
  Status AllocateSlots(RequestId id, int64_t num_new_tokens);

  // The step that wrote the KV of positions [num_computed, num_computed + n)
  // ran. Requires those positions to have slots and their token ids to be
  // known (FailedPrecondition otherwise). With prefix caching, every block
  // that is now full is registered in the prefix cache.
  Status CommitComputed(RequestId id, int64_t num_tokens);

  // Drops the request and its block references (tail block first, so the
  // pool evicts tails before shared heads). NotFound for an unknown id.
  Status FreeRequest(RequestId id);

  // NotFound for an unknown id.
  Expected<const std::vector<int32_t>*> BlockTable(RequestId id) const;
  Expected<int64_t> NumComputedTokens(RequestId id) const;
  Expected<int64_t> NumTokens(RequestId id) const;  // known token ids
  // The slot of position `pos`; OutOfRange when pos has no slot yet.
  Expected<int64_t> SlotFor(RequestId id, int64_t pos) const;

  bool HasRequest(RequestId id) const { return requests_.count(id) != 0; }
  size_t num_requests() const { return requests_.size(); }
  int64_t num_free_blocks() const { return pool_.num_free(); }
  const BlockPool& pool() const { return pool_; }
  const KvCacheManagerParams& params() const { return params_; }

 private:
  struct Request {
    std::vector<int32_t> tokens;
    PrefixKeys keys;
    std::vector<int32_t> block_table;
    std::vector<BlockHash> hashes;  // chained hashes of known full blocks (prefix caching)
    int64_t num_computed = 0;
    int64_t num_registered_blocks = 0;  // leading blocks already offered to the cache
  };

  KvCacheManager(const KvCacheManagerParams& params, BlockPool pool)
      : params_(params), pool_(std::move(pool)) {}

  Expected<Request*> Find(RequestId id);
  Expected<const Request*> Find(RequestId id) const;
  // Leading cached blocks of a prompt whose hashes are `hashes`, capped so
  // that at least one token remains to compute.
  int64_t CountCachedBlocks(const std::vector<BlockHash>& hashes, int64_t num_tokens) const;

  KvCacheManagerParams params_;
  BlockPool pool_;
  std::unordered_map<RequestId, Request> requests_;
};

}  // namespace xrt
