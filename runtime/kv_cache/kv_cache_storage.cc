#include "runtime/kv_cache/kv_cache_storage.h"

#include <algorithm>

#include <cassert>
#include <cstring>
#include <new>

#include <sys/mman.h>

namespace xrt {
namespace {

// a * b, or false on int64 overflow.
bool MulChecked(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Bytes of one layer's K (or V) array for `num_blocks` blocks; false on overflow.
bool LayerArrayBytes(const KvCacheParams& p, int64_t num_blocks, int64_t* out) {
  int64_t n = num_blocks;
  return MulChecked(n, p.block_size, &n) && MulChecked(n, p.num_kv_heads, &n) &&
         MulChecked(n, p.head_dim, &n) && MulChecked(n, p.element_bytes, out);
}

}  // namespace

Status ValidateKvCacheParams(const KvCacheParams& p, bool check_num_blocks) {
  const struct {
    const char* name;
    int64_t value;
  } fields[] = {{"num_layers", p.num_layers},
                {"num_kv_heads", p.num_kv_heads},
                {"head_dim", p.head_dim},
                {"block_size", p.block_size},
                {"num_blocks", check_num_blocks ? p.num_blocks : 1}};
  for (const auto& f : fields) {
    if (f.value < 1)
      return InvalidArgumentError("kv cache: {} is {}; must be >= 1", f.name, f.value);
  }
  if (p.element_bytes != 1 && p.element_bytes != 2 && p.element_bytes != 4) {
    return InvalidArgumentError(
        "kv cache: element_bytes is {}; must be 1 (fp8), 2 (f16) or 4 (f32)", p.element_bytes);
  }
  int64_t bytes = 0;
  const int64_t blocks = check_num_blocks ? p.num_blocks : 1;
  if (!LayerArrayBytes(p, blocks, &bytes) || !MulChecked(bytes, 2 * p.num_layers, &bytes)) {
    return InvalidArgumentError(
        "kv cache: {} blocks of {} tokens x {} kv heads x {} dims x {} layers overflow int64 bytes",
        blocks, p.block_size, p.num_kv_heads, p.head_dim, p.num_layers);
  }
  return Status::Ok();
}

Expected<KvCacheStorage> KvCacheStorage::Create(const KvCacheParams& params) {
  XRT_RETURN_IF_ERROR(ValidateKvCacheParams(params, /*check_num_blocks=*/true));
  int64_t bytes = 0;
  LayerArrayBytes(params, params.num_blocks, &bytes);  // validated: no overflow
  if (static_cast<uint64_t>(bytes) > SIZE_MAX / 2) {
    return InvalidArgumentError("kv cache: a layer array of {} bytes is not addressable", bytes);
  }
  // Anonymous mappings: page-aligned and zero-filled lazily, so start-up does
  // not touch (or commit) the whole cache; pages are committed as blocks are
  // first written.
  const size_t alloc_bytes = static_cast<size_t>(bytes);
  std::vector<Array> keys, values;
  keys.reserve(static_cast<size_t>(params.num_layers));
  values.reserve(static_cast<size_t>(params.num_layers));
  for (int64_t layer = 0; layer < params.num_layers; ++layer) {
    for (std::vector<Array>* arrays : {&keys, &values}) {
      void* p = ::mmap(nullptr, alloc_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) {
        return ResourceExhaustedError(
            "kv cache: cannot map {} bytes for layer {} ({} blocks; {} bytes in all)", alloc_bytes,
            layer, params.num_blocks, 2 * params.num_layers * bytes);
      }
      arrays->emplace_back(p, Unmapper{alloc_bytes});
    }
  }
  return KvCacheStorage(params, std::move(keys), std::move(values));
}

void KvCacheStorage::Unmapper::operator()(void* p) const { ::munmap(p, bytes); }

void* KvCacheStorage::key(int64_t layer) {
  assert(layer >= 0 && layer < params_.num_layers);
  return keys_[static_cast<size_t>(layer)].get();
}
void* KvCacheStorage::value(int64_t layer) {
  assert(layer >= 0 && layer < params_.num_layers);
  return values_[static_cast<size_t>(layer)].get();
}
const void* KvCacheStorage::key(int64_t layer) const {
  assert(layer >= 0 && layer < params_.num_layers);
  return keys_[static_cast<size_t>(layer)].get();
}
const void* KvCacheStorage::value(int64_t layer) const {
  assert(layer >= 0 && layer < params_.num_layers);
  return values_[static_cast<size_t>(layer)].get();
}

int64_t KvCacheStorage::values_per_layer() const {
  return params_.num_blocks * params_.block_size * params_.num_kv_heads * params_.head_dim;
}

int64_t KvCacheStorage::total_bytes() const {
  return 2 * params_.num_layers * values_per_layer() * params_.element_bytes;
}

int64_t KvCacheStorage::BytesPerBlock(const KvCacheParams& p) {
  return 2 * p.num_layers * p.block_size * p.num_kv_heads * p.head_dim * p.element_bytes;
}

Expected<int64_t> KvCacheStorage::NumBlocksForBudget(const KvCacheParams& params, int64_t bytes) {
  XRT_RETURN_IF_ERROR(ValidateKvCacheParams(params, /*check_num_blocks=*/false));
  const int64_t per_block = BytesPerBlock(params);
  const int64_t n = bytes < 0 ? 0 : bytes / per_block;
  if (n < 1) {
    return ResourceExhaustedError(
        "kv cache: a budget of {} bytes holds no block (one block takes {} bytes)", bytes,
        per_block);
  }
  return n;
}

int64_t DefaultNumKvBlocks(const KvCacheParams& params, int64_t max_num_seqs,
                           int64_t max_blocks_per_req) {
  const int64_t perBlock = std::max<int64_t>(KvCacheStorage::BytesPerBlock(params), 1);
  const int64_t wanted = max_num_seqs * max_blocks_per_req;
  const int64_t cap = (int64_t{4} << 30) / perBlock;
  return std::max<int64_t>(1, std::min(wanted, cap));
}

}  // namespace xrt
