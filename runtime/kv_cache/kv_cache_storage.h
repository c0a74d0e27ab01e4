// KvCacheStorage: the memory of the paged KV cache.
//
// Per layer, one K and one V array of values (element_bytes each: 4 for an
// f32 cache, 2 for an f16 one, 1 for fp8; the attention kernel's
// KvCacheDtype) laid out as
//   [num_blocks][num_kv_heads][block_size][head_dim]
// (the layout the paged attention kernel reads, runtime/kernels/attention.h):
// element (slot, kv_head, d) of a layer is at
//   ((block * num_kv_heads + kv_head) * block_size + offset) * head_dim + d,
// slot = block * block_size + offset.
// Every array starts on a page boundary and reads as zeros; its pages are
// committed lazily, as blocks are first written (anonymous mappings).
//
// Ownership: owns its memory (one allocation per array); move-only. The
// pointers stay valid until the object is destroyed (moves keep them).
// Thread-compatible: writers (the step being run) must be synchronized by the
// caller; the object itself has no mutable state besides the arrays.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "runtime/base/status.h"

namespace xrt {

struct KvCacheParams {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 0;  // tokens per block
  int64_t num_blocks = 0;
  int64_t element_bytes = 4;  // bytes per cached value: 4 (f32), 2 (f16) or 1 (fp8)
};

class KvCacheStorage {
 public:
  // All fields >= 1 and the total size must fit in memory addressing
  // (InvalidArgument naming the field otherwise); ResourceExhausted when the
  // memory cannot be allocated.
  static Expected<KvCacheStorage> Create(const KvCacheParams& params);

  KvCacheStorage(KvCacheStorage&&) = default;
  KvCacheStorage& operator=(KvCacheStorage&&) = default;

  // The K / V array of `layer` (0 <= layer < num_layers, asserted).
  void* key(int64_t layer);
  void* value(int64_t layer);
  const void* key(int64_t layer) const;
  const void* value(int64_t layer) const;

  const KvCacheParams& params() const { return params_; }
  // Values in one layer's K (or V) array.
  int64_t values_per_layer() const;
  // Total bytes owned (K and V of every layer).
  int64_t total_bytes() const;

  // Bytes one block takes across all layers, K and V:
  //   2 * num_layers * block_size * num_kv_heads * head_dim * element_bytes.
  // params.num_blocks is ignored. The other fields must be >= 1 (see
  // ValidateKvCacheParams); the result is then exact and positive for any
  // realistic model.
  static int64_t BytesPerBlock(const KvCacheParams& params);

  // How many blocks fit in `bytes` (params.num_blocks is ignored).
  // InvalidArgument for a bad field, ResourceExhausted when not even one
  // block fits (naming the budget and BytesPerBlock).
  static Expected<int64_t> NumBlocksForBudget(const KvCacheParams& params, int64_t bytes);

 private:
  struct Unmapper {
    size_t bytes = 0;
    void operator()(void* p) const;
  };
  using Array = std::unique_ptr<void, Unmapper>;

  KvCacheStorage(const KvCacheParams& params, std::vector<Array> keys, std::vector<Array> values)
      : params_(params), keys_(std::move(keys)), values_(std::move(values)) {}

  KvCacheParams params_;
  std::vector<Array> keys_;
  std::vector<Array> values_;
};

// InvalidArgument naming the first field < 1 (num_blocks is checked only when
// check_num_blocks is true) or a shape whose byte size overflows int64.
Status ValidateKvCacheParams(const KvCacheParams& params, bool check_num_blocks);

// The KV cache size a server uses when none is given: enough blocks for
// max_num_seqs sequences of max_blocks_per_req blocks, capped at 4 GiB of
// params.element_bytes values (an f16 cache gets twice the blocks under the cap).
int64_t DefaultNumKvBlocks(const KvCacheParams& params, int64_t max_num_seqs,
                           int64_t max_blocks_per_req);

}  // namespace xrt
