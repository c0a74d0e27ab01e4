// PagedAttention: writes this step's K/V into the paged cache, then runs
// causal attention for every query token of a ragged batch of requests
// (prefill chunks and decodes mixed), reading keys/values through each
// request's block table. vLLM-style inputs; see docs/DESIGN.md §2.
//
// Semantics:
//  1. Validation, before anything is written: shapes are positive,
//     num_heads % num_kv_heads == 0, every slot_mapping entry is -1 (padding)
//     or in [0, num_blocks*block_size), query_start_loc is non-decreasing
//     within [0, num_tokens], every request with query tokens has
//     q_len <= seq_len, ceil(seq_len / block_size) <= max_blocks_per_req and
//     those block-table entries in [0, num_blocks). Any violation returns an
//     error Status and leaves out and the caches untouched.
//  2. KV write: for t in 0..num_tokens-1 with slot_mapping[t] >= 0, the
//     cache rows of slot (block slot / block_size, offset slot % block_size)
//     get k/v[t] (all kv heads). Done in token order, so
//     if two tokens share a slot (e.g. a scratch slot for padding), the later
//     token's values win.
//  3. Attention: request r owns tokens [qsl[r], qsl[r+1]); they are the last
//     q_len of its seq_lens[r] positions, so token t sits at position
//     pos = seq_lens[r] - q_len + (t - qsl[r]) and attends to cache positions
//     0..pos (causal). Head h reads kv head h / (num_heads / num_kv_heads).
//     out[t][h] = sum_j softmax_j(scale * q·k_j) v_j, in f32 with an online
//     (running-max) softmax. Tokens not owned by any request get out = 0.
//
// Layouts (q, k, v, out are floats; the caches are elements of kv_dtype):
//   q[t*q_stride + h*head_dim + d], k/v[t*k_stride + kvh*head_dim + d],
//   out[t*out_stride + h*head_dim + d],
//   k_cache/v_cache[((block*num_kv_heads + kvh)*block_size + offset)*head_dim + d]
// (a block holds each kv head's block_size rows together, as vLLM's cache
// does: a request's keys for one head are read in runs of block_size rows,
// not one row every num_kv_heads * head_dim values).
//
// KV cache dtype: kF32 stores k/v as they are; kF16 stores each value as an
// IEEE half, rounded to nearest even (FloatToHalf), and attention reads it
// back exactly (every half is an f32). So with kF16 the output equals, bit for
// bit, that of kF32 run on k/v rounded to half first, on every ISA path; it
// halves the cache's memory and the bytes a decode step's attention reads
// (llama.cpp's default cache type; vLLM's --kv-cache-dtype). kFp8E4M3 does
// the same with one byte per value: OCP fp8 e4m3 (FloatToFp8E4M3: nearest
// even, saturating at +-448), with no scale (vLLM's fp8 cache with the
// default k/v scales of 1), so a quarter of kF32's bytes at 3 mantissa bits:
// values under 2^-6 keep less (subnormals, down to 2^-9), and larger ones
// than 448 are clipped.
//
// Batch invariance: the output of a token depends only on its q, its
// position, and its request's cached K/V (in the order of positions 0..pos):
// keys are reduced in partitions of 256 positions aligned to absolute
// positions ([0,256), [256,512), ...), each from a fresh state with one
// online-softmax step per chunk of 64 positions in increasing order (each
// step's arithmetic fixed by the chunk's length); the partitions' states are
// then folded in increasing order (rescaled to the larger max, added). So the
// values are bit-identical whatever else is in the batch, whether the token
// comes as a decode or inside a prefill chunk, whatever the thread count and
// whether its partitions ran on one thread or several. The ISA path is fixed
// per process (BestCpuIsa()), and each sums a score q·k in one order of its
// own (scalar: one fma chain over d; AVX2: 8 chains, lane l over d = l,
// l + 8, ..., added in a fixed tree; AVX-512: 16 lanes), the same for a
// decode and a prompt's tile; the SIMD paths use a polynomial exp (about
// 1 ulp) instead of libm's.
//
// Compute types (PagedAttentionArgs::compute). kF32 is everything above.
// kBF16 computes each partition's two products as kBF16 matmuls (matmul.h's
// contract: operands rounded to bf16, one f32 chain by k-pairs, each pair's
// odd element first), so a prompt's attention runs on the bf16 units like the
// linears (vdpbf16ps on the avx512_bf16 tier, AMX tiles on the amx tier). For
// a row at position pos and its partition [P, P + 256), which it sees up to
// key e = min(pos + 1, P + 256):
//   x_j = scale * dot_bf16(q, k_j) (pairs over d), j in [P, e);
//   m_p = max_j x_j (exact), p_j = exp(x_j - m_p), l_p = sum_j p_j (f32, the
//   ISA's fixed order; the SIMD paths' polynomial exp);
//   acc_p[d] = dot_bf16(p, v[.][d]) (pairs over the keys j = P, P + 1, ...).
// The partitions' (acc_p, m_p, l_p) are then folded and divided as in kF32.
// A prompt's tile packs a partition's keys and transposed values as matmul
// weights and runs both products through Matmul; on the avx512_bf16 tier
// a few rows (a decode's heads) run the same chains on vdpbf16ps straight
// from the cache rows (no packing): the same bits. On the amx tier every row
// count goes through Matmul (whose kBF16 there is TDPBF16PS's own sums,
// matmul.h), and the values product always runs over the whole 256 keys of
// a partition, zeros past its last: a row's steps do not depend on how far
// the tile's other rows see.
// The max is exact per partition (no 64-key chunks), so a score's numerator is
// rounded to bf16 once, from that partition's max. Batch invariance and
// decode = prefill hold as for kF32, except that an output that is exactly
// zero may come out with either sign (a prompt's partition chain may run over
// keys that a row does not see, with numerators of +0). kInt8 is not an
// attention compute type (InvalidArgument).
//
// Tiles: a request's query tokens are attended in tiles of consecutive
// tokens (up to 96 query rows, 384 in kBF16: tokens x the query heads of a
// kv head; fewer when a short prompt needs more tiles to keep the threads busy), so a
// prompt's rows read each chunk of keys and values once per tile, not once
// per token; a chunk that only some of a tile's tokens see whole is done per
// token. The rows of a tile do not affect each other's arithmetic.
//
// Threading: the KV write runs on the caller; the attention work items,
// (tile, kv head) pairs, are spread over `pool` (nullptr: run on the
// caller), the ones that see the most keys first. A tile that would leave
// threads idle (one long decode has only num_kv_heads items) is split: its
// partitions become items of their own (flash-decoding's split-K), whose
// states the caller folds afterwards. Thread-compatible: concurrent calls
// must not share caches or outputs. Allocates per call a tile and item
// list; keeps per thread a tile's scratch (softmax states, scores, a kF16
// cache's chunk as floats; kBF16: a partition's keys and values packed)
// and, on the caller, the split partitions' states.
#pragma once

#include <cstdint>

#include "runtime/base/status.h"
#include "runtime/base/thread_pool.h"
#include "runtime/kernels/cpu_isa.h"
#include "runtime/kernels/matmul.h"

namespace xrt {

// The element type of the paged KV cache (see the file comment).
enum class KvCacheDtype : uint8_t { kF32 = 0, kF16 = 1, kFp8E4M3 = 2 };

// Bytes per cached value: 4, 2 or 1.
constexpr int64_t KvCacheElementBytes(KvCacheDtype t) {
  return t == KvCacheDtype::kF16 ? 2 : t == KvCacheDtype::kFp8E4M3 ? 1 : 4;
}
// "f32", "f16" or "fp8", as xrt's --kv-cache-dtype spells it.
constexpr const char* KvCacheDtypeName(KvCacheDtype t) {
  return t == KvCacheDtype::kF16 ? "f16" : t == KvCacheDtype::kFp8E4M3 ? "fp8" : "f32";
}

struct PagedAttentionArgs {
  const float* q = nullptr;  // [t][h*head_dim + d], row stride q_stride
  int64_t q_stride = 0;
  const float* k = nullptr;  // this step's new keys [t][kv_head][d], row stride k_stride
  int64_t k_stride = 0;
  const float* v = nullptr;  // this step's new values, row stride v_stride
  int64_t v_stride = 0;
  float* out = nullptr;  // [t][h*head_dim + d], row stride out_stride
  int64_t out_stride = 0;
  void* k_cache = nullptr;  // [num_blocks][num_kv_heads][block_size][head_dim] of kv_dtype
  void* v_cache = nullptr;
  KvCacheDtype kv_dtype = KvCacheDtype::kF32;
  const int32_t* slot_mapping = nullptr;     // [num_tokens]; -1 = padding token
  const int32_t* block_tables = nullptr;     // [max_num_reqs][max_blocks_per_req]
  const int32_t* seq_lens = nullptr;         // [max_num_reqs]; incl. this step; 0 = unused
  const int32_t* query_start_loc = nullptr;  // [max_num_reqs + 1]
  int64_t num_tokens = 0, max_num_reqs = 0, max_blocks_per_req = 0;
  int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
  int64_t block_size = 0, num_blocks = 0;
  float scale = 1.0f;                       // usually 1/sqrt(head_dim)
  ComputeType compute = ComputeType::kF32;  // kF32 or kBF16
};

// See the file comment. Errors: InvalidArgument for inconsistent shapes or
// request metadata or a compute type other than kF32 / kBF16, OutOfRange
// for a slot or block-table entry outside the cache.
Status PagedAttention(const PagedAttentionArgs& args, ThreadPool* pool);

// Same on an explicit ISA path (must satisfy CpuIsaSupported). For tests.
Status PagedAttentionWithIsa(const PagedAttentionArgs& args, ThreadPool* pool, CpuIsa isa);

// The cache level a decode's K/V rows are prefetched into, a chunk of keys
// ahead of the one being computed (and a partition's first chunk at its
// start): kAuto, the default, per vendor (StreamPrefetchIsL2: L2 on AMD's
// CPUs, L1 on the others). A decode step finds its K/V in DRAM (a step's
// weights went through the caches since). On Zen 4 (an EPYC VM, SmolLM2's
// heads, f16 cache, 2 threads, three interleaved runs) into L2 read them from
// DRAM 1.34-1.36x faster than into L1 at 128 keys, 1.0-1.23x at 1024, 0.96-1.17x
// at 4096; in SmolLM2's decode step (Q4_1, int8) the attention took 0.67x /
// 0.69x its time at context 128 / 1024 (medians of ten paired rounds;
// bench/README.md, "A decode's K/V prefetched into L2 on Zen 4"). A prompt's
// tiles keep L1. Where the lines come from changes, never the results.
// SetPagedAttentionPrefetch: kL1 / kL2 on any CPU, for tests and benchmarks;
// process-wide, not for concurrent calls.
bool PagedAttentionPrefetchesToL2();
void SetPagedAttentionPrefetch(StreamPrefetch where);

}  // namespace xrt
