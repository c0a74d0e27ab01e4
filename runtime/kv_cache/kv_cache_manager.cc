#include "runtime/kv_cache/kv_cache_manager.h"

#include <algorithm>

namespace xrt {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

Expected<KvCacheManager> KvCacheManager::Create(const KvCacheManagerParams& params) {
  const struct {
    const char* name;
    int64_t value;
  } fields[] = {{"num_blocks", params.num_blocks},
                {"block_size", params.block_size},
                {"max_blocks_per_req", params.max_blocks_per_req}};
  for (const auto& f : fields) {
    if (f.value < 1) {
      return InvalidArgumentError("kv cache manager: {} is {}; must be >= 1", f.name, f.value);
    }
  }
  XRT_ASSIGN_OR_RETURN(BlockPool pool, BlockPool::Create(BlockPoolParams{
                                           params.num_blocks, params.enable_prefix_caching}));
  return KvCacheManager(params, std::move(pool));
}

Expected<KvCacheManager::Request*> KvCacheManager::Find(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return NotFoundError("kv cache manager: no request {}", id);
  return &it->second;
}

Expected<const KvCacheManager::Request*> KvCacheManager::Find(RequestId id) const {
  auto it = requests_.find(id);
  if (it == requests_.end()) return NotFoundError("kv cache manager: no request {}", id);
  return &it->second;
}

int64_t KvCacheManager::CountCachedBlocks(const std::vector<BlockHash>& hashes,
                                          int64_t num_tokens) const {
  const int64_t limit =
      std::min<int64_t>(static_cast<int64_t>(hashes.size()), (num_tokens - 1) / params_.block_size);
  int64_t n = 0;
  while (n < limit && pool_.Lookup(hashes[static_cast<size_t>(n)]) >= 0) ++n;
  return n;
}

Expected<int64_t> KvCacheManager::AddRequest(RequestId id, const int32_t* tokens,
                                             int64_t num_tokens, const PrefixKeys& keys) {
  if (requests_.count(id) != 0) {
    return InvalidArgumentError("kv cache manager: request {} is already running", id);
  }
  if (num_tokens < 1 || tokens == nullptr) {
    return InvalidArgumentError("kv cache manager: request {}: the prompt has {} tokens", id,
                                tokens == nullptr ? 0 : num_tokens);
  }
  XRT_RETURN_IF_ERROR(ValidatePrefixKeys(keys).WithContext(fmt::format("request {}", id)));
  const int64_t capacity = params_.max_blocks_per_req * params_.block_size;
  if (num_tokens > capacity) {
    return OutOfRangeError(
        "kv cache manager: request {}: a prompt of {} tokens exceeds the {} positions of a "
        "request ({} blocks of {})",
        id, num_tokens, capacity, params_.max_blocks_per_req, params_.block_size);
  }
  Request r;
  r.tokens.assign(tokens, tokens + num_tokens);
  r.keys = keys;
  if (pool_.prefix_caching()) {
    ExtendBlockHashes(tokens, num_tokens, params_.block_size, keys, &r.hashes);
    const int64_t hits = CountCachedBlocks(r.hashes, num_tokens);
    r.block_table.reserve(static_cast<size_t>(hits));
    for (int64_t b = 0; b < hits; ++b) {
      const int32_t block = pool_.Lookup(r.hashes[static_cast<size_t>(b)]);
      Status s = pool_.Acquire(block);
      if (!s.ok()) {                              // cannot happen: Lookup only returns held blocks
        Status undo = pool_.Free(r.block_table);  // give back the hits taken so far
        (void)undo;
        return InternalError("kv cache manager: request {}: {}", id, s.message());
      }
      r.block_table.push_back(block);
    }
    r.num_computed = hits * params_.block_size;
    r.num_registered_blocks = hits;
  }
  const int64_t num_computed = r.num_computed;
  requests_.emplace(id, std::move(r));
  return num_computed;
}

int64_t KvCacheManager::CachedPrefixLength(const int32_t* tokens, int64_t num_tokens,
                                           const PrefixKeys& keys) const {
  if (!pool_.prefix_caching() || tokens == nullptr || num_tokens < 1 ||
      !ValidatePrefixKeys(keys).ok()) {
    return 0;
  }
  std::vector<BlockHash> hashes;
  ExtendBlockHashes(tokens, num_tokens, params_.block_size, keys, &hashes);
  return CountCachedBlocks(hashes, num_tokens) * params_.block_size;
}

Status KvCacheManager::AppendTokens(RequestId id, const int32_t* tokens, int64_t num_tokens) {
  XRT_ASSIGN_OR_RETURN(Request * r, Find(id));
  if (num_tokens < 0 || (num_tokens > 0 && tokens == nullptr)) {
    return InvalidArgumentError("kv cache manager: request {}: cannot append {} tokens", id,
                                num_tokens);
  }
  r->tokens.insert(r->tokens.end(), tokens, tokens + num_tokens);
  return Status::Ok();
}

Status KvCacheManager::AllocateSlots(RequestId id, int64_t num_new_tokens) {
  XRT_ASSIGN_OR_RETURN(Request * r, Find(id));
  if (num_new_tokens < 0) {
    return InvalidArgumentError("kv cache manager: request {}: num_new_tokens is {}", id,
                                num_new_tokens);
  }
  const int64_t total = r->num_computed + num_new_tokens;
  const int64_t needed = CeilDiv(total, params_.block_size);
  if (needed > params_.max_blocks_per_req) {
    return OutOfRangeError(
        "kv cache manager: request {}: {} positions need {} blocks; a request has at most {} "
        "(block_size {})",
        id, total, needed, params_.max_blocks_per_req, params_.block_size);
  }
  const int64_t have = static_cast<int64_t>(r->block_table.size());
  if (needed <= have) return Status::Ok();
  return pool_.Allocate(needed - have, &r->block_table)
      .WithContext(fmt::format("kv cache manager: request {} ({} positions)", id, total));
}

Status KvCacheManager::CommitComputed(RequestId id, int64_t num_tokens) {
  XRT_ASSIGN_OR_RETURN(Request * r, Find(id));
  if (num_tokens < 0) {
    return InvalidArgumentError("kv cache manager: request {}: cannot commit {} tokens", id,
                                num_tokens);
  }
  const int64_t computed = r->num_computed + num_tokens;
  const int64_t slotted = static_cast<int64_t>(r->block_table.size()) * params_.block_size;
  if (computed > slotted) {
    return FailedPreconditionError(
        "kv cache manager: request {}: committing {} computed positions but only {} have slots", id,
        computed, slotted);
  }
  if (computed > static_cast<int64_t>(r->tokens.size())) {
    return FailedPreconditionError(
        "kv cache manager: request {}: committing {} computed positions but only {} token ids "
        "are known",
        id, computed, r->tokens.size());
  }
  r->num_computed = computed;
  if (!pool_.prefix_caching()) return Status::Ok();
  ExtendBlockHashes(r->tokens.data(), computed, params_.block_size, r->keys, &r->hashes);
  const int64_t full = computed / params_.block_size;
  for (int64_t b = r->num_registered_blocks; b < full; ++b) {
    XRT_ASSIGN_OR_RETURN(bool registered, pool_.Register(r->block_table[static_cast<size_t>(b)],
                                                         r->hashes[static_cast<size_t>(b)]));
    (void)registered;  // false: an identical block is cached already; keep that one
  }
  r->num_registered_blocks = std::max(r->num_registered_blocks, full);
  return Status::Ok();
}

Status KvCacheManager::FreeRequest(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return NotFoundError("kv cache manager: no request {}", id);
  std::vector<int32_t>& table = it->second.block_table;
  std::reverse(table.begin(), table.end());
  Status s = pool_.Free(table);
  requests_.erase(it);
  if (!s.ok()) return InternalError("kv cache manager: request {}: {}", id, s.message());
  return Status::Ok();
}

Expected<const std::vector<int32_t>*> KvCacheManager::BlockTable(RequestId id) const {
  XRT_ASSIGN_OR_RETURN(const Request* r, Find(id));
  return &r->block_table;
}

Expected<int64_t> KvCacheManager::NumComputedTokens(RequestId id) const {
  XRT_ASSIGN_OR_RETURN(const Request* r, Find(id));
  return r->num_computed;
}

Expected<int64_t> KvCacheManager::NumTokens(RequestId id) const {
  XRT_ASSIGN_OR_RETURN(const Request* r, Find(id));
  return static_cast<int64_t>(r->tokens.size());
}

Expected<int64_t> KvCacheManager::SlotFor(RequestId id, int64_t pos) const {
  XRT_ASSIGN_OR_RETURN(const Request* r, Find(id));
  const int64_t slotted = static_cast<int64_t>(r->block_table.size()) * params_.block_size;
  if (pos < 0 || pos >= slotted) {
    return OutOfRangeError("kv cache manager: request {}: position {} has no slot ({} slotted)", id,
                           pos, slotted);
  }
  return SlotForPosition(r->block_table, params_.block_size, pos);
}

}  // namespace xrt
