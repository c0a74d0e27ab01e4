#include "runtime/kv_cache/block_pool.h"

#include <limits>

namespace xrt {

Expected<BlockPool> BlockPool::Create(const BlockPoolParams& params) {
  if (params.num_blocks < 1 || params.num_blocks > std::numeric_limits<int32_t>::max()) {
    return InvalidArgumentError("block pool: num_blocks is {}; must be in [1, {}]",
                                params.num_blocks, std::numeric_limits<int32_t>::max());
  }
  return BlockPool(params);
}

BlockPool::BlockPool(const BlockPoolParams& params)
    : prefix_caching_(params.enable_prefix_caching),
      ref_(static_cast<size_t>(params.num_blocks), 0),
      prev_(static_cast<size_t>(params.num_blocks), -1),
      next_(static_cast<size_t>(params.num_blocks), -1),
      list_(static_cast<size_t>(params.num_blocks), kNone),
      has_hash_(static_cast<size_t>(params.num_blocks), 0),
      hash_(static_cast<size_t>(params.num_blocks)) {
  for (int32_t id = 0; id < static_cast<int32_t>(params.num_blocks); ++id) PushBack(kFree, id);
}

void BlockPool::PushBack(ListId list, int32_t id) {
  const size_t i = static_cast<size_t>(id);
  prev_[i] = tail_[list];
  next_[i] = -1;
  if (tail_[list] >= 0) {
    next_[static_cast<size_t>(tail_[list])] = id;
  } else {
    head_[list] = id;
  }
  tail_[list] = id;
  list_[i] = list;
  ++list_size_[list];
}

void BlockPool::Unlink(int32_t id) {
  const size_t i = static_cast<size_t>(id);
  const uint8_t list = list_[i];
  if (list == kNone) return;
  if (prev_[i] >= 0) {
    next_[static_cast<size_t>(prev_[i])] = next_[i];
  } else {
    head_[list] = next_[i];
  }
  if (next_[i] >= 0) {
    prev_[static_cast<size_t>(next_[i])] = prev_[i];
  } else {
    tail_[list] = prev_[i];
  }
  prev_[i] = next_[i] = -1;
  list_[i] = kNone;
  --list_size_[list];
}

int32_t BlockPool::PopFront(ListId list) {
  const int32_t id = head_[list];
  if (id >= 0) Unlink(id);
  return id;
}

Status BlockPool::Allocate(int64_t n, std::vector<int32_t>* out) {
  if (n < 0) return InvalidArgumentError("block pool: cannot allocate {} blocks", n);
  if (n > num_free()) {
    return ResourceExhaustedError("block pool: {} blocks requested, {} of {} free", n, num_free(),
                                  num_blocks());
  }
  out->reserve(out->size() + static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    int32_t id = PopFront(kFree);
    if (id < 0) {
      id = PopFront(kEvictable);
      const size_t i = static_cast<size_t>(id);
      cached_.erase(hash_[i]);  // evict: the content is about to be overwritten
      has_hash_[i] = 0;
    }
    ref_[static_cast<size_t>(id)] = 1;
    out->push_back(id);
  }
  return Status::Ok();
}

Expected<std::vector<int32_t>> BlockPool::Allocate(int64_t n) {
  std::vector<int32_t> out;
  XRT_RETURN_IF_ERROR(Allocate(n, &out));
  return out;
}

Status BlockPool::Free(const int32_t* ids, size_t count) {
  // Phase 1: drop the references, undoing them all if one is invalid.
  for (size_t k = 0; k < count; ++k) {
    const int32_t id = ids[k];
    if (!InRange(id) || ref_[static_cast<size_t>(id)] == 0) {
      for (size_t u = 0; u < k; ++u) ++ref_[static_cast<size_t>(ids[u])];
      if (!InRange(id)) {
        return InvalidArgumentError(
            "block pool: cannot free block {} (entry {}): ids are in [0, {})", id, k, num_blocks());
      }
      return InvalidArgumentError(
          "block pool: cannot free block {} (entry {}): it is not allocated (or freed more "
          "often than referenced)",
          id, k);
    }
    --ref_[static_cast<size_t>(id)];
  }
  // Phase 2: release the blocks whose count reached zero, in the given order.
  for (size_t k = 0; k < count; ++k) {
    const size_t i = static_cast<size_t>(ids[k]);
    if (ref_[i] == 0 && list_[i] == kNone) PushBack(has_hash_[i] ? kEvictable : kFree, ids[k]);
  }
  return Status::Ok();
}

int32_t BlockPool::Lookup(const BlockHash& hash) const {
  auto it = cached_.find(hash);
  return it == cached_.end() ? -1 : it->second;
}

Status BlockPool::Acquire(int32_t id) {
  if (!InRange(id)) {
    return InvalidArgumentError("block pool: cannot acquire block {}: ids are in [0, {})", id,
                                num_blocks());
  }
  const size_t i = static_cast<size_t>(id);
  if (list_[i] == kFree) {
    return InvalidArgumentError("block pool: cannot acquire block {}: it is free and holds nothing",
                                id);
  }
  if (list_[i] == kEvictable) Unlink(id);
  ++ref_[i];
  return Status::Ok();
}

Expected<bool> BlockPool::Register(int32_t id, const BlockHash& hash) {
  if (!prefix_caching_) {
    return FailedPreconditionError("block pool: Register needs prefix caching enabled");
  }
  if (!InRange(id) || ref_[static_cast<size_t>(id)] == 0) {
    return InvalidArgumentError("block pool: cannot register block {}: it is not allocated", id);
  }
  const size_t i = static_cast<size_t>(id);
  if (has_hash_[i]) return false;
  if (!cached_.emplace(hash, id).second) return false;
  has_hash_[i] = 1;
  hash_[i] = hash;
  return true;
}

int32_t BlockPool::ref_count(int32_t id) const {
  return InRange(id) ? ref_[static_cast<size_t>(id)] : -1;
}

bool BlockPool::is_cached(int32_t id) const {
  return InRange(id) && has_hash_[static_cast<size_t>(id)] != 0;
}

}  // namespace xrt
