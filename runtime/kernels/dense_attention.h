// DenseAttention: bidirectional softmax attention within fixed-length
// sequences, the vision encoder's self-attention (no mask, no KV cache).
//
// The num_tokens rows form num_tokens / seq_len consecutive sequences (one per
// image). For every sequence, head h and row i of it:
//   out[i][h] = sum_j softmax_j(scale * q_i[h] · k_j[h]) v_j[h]
// over the rows j of the same sequence, in f32 (max-subtracted softmax).
//
// Compute types (DenseAttentionArgs::compute): kF32 as above. kBF16 computes
// the two products as kBF16 matmuls (matmul.h's contract: operands rounded to
// bf16, f32 sums by k-pairs, each pair's odd element first): the scores are
// x_j = dot_bf16(q_i[h], k_j[h]) (pairs over d); the softmax numerators
// p_j = exp(scale * x_j - max) and inv = 1 / sum_j p_j stay f32 (as below);
// out[i][h][d] = dot_bf16(p, v[.][h][d]) (pairs over the keys j) * inv. So the
// score and output sums run on the CPU's bf16 units like the tower's linears
// (vdpbf16ps on the avx512_bf16 tier, AMX tiles on the amx tier), with the
// matmul's bits on every ISA; only the softmax's order is per ISA, as below.
// kInt8 is not an attention compute type (InvalidArgument).
//
// Layouts (floats): q[t*q_stride + h*head_dim + d], same for k, v and out.
//
// Batch invariance: a row's result depends only on its own sequence; the
// reductions run in a fixed order whatever the number of sequences, threads or
// where a row falls in the tiles: each score q·k is one multiply-add chain over
// d in increasing order, the softmax sum is taken in vector lanes over keys
// and then across the lanes, and each output one chain over keys in
// increasing order, scaled by 1 / sum at the end. The order differs between
// ISA paths (the ISA is fixed per process: BestCpuIsa()).
//
// Method: the code is written once on GCC / clang vectors and compiled per
// ISA (AVX-512: 16 lanes; AVX2: 8; baseline x86-64: 4). For each (sequence,
// head) the thread packs the keys transposed in blocks of lanes and the values
// contiguously; then for each work item (up to 48 query rows) it computes the
// scores in register tiles (4 query rows x 4 blocks of keys on AVX-512, each
// block read from L1 for every row of the item), the softmax numerators in
// place (a vectorized polynomial exp, about 1 ulp, instead of libm's), and the
// outputs in register tiles (4 rows x 64 columns). The whole score row of a
// query is kept (seq_len floats per row), so the softmax needs no rescaling.
// kBF16 packs the head's keys and transposed values as f32 matmul weights
// (PackWeights) and runs each item's two products as kBF16 Matmul calls on
// the caller's thread, its softmax in between.
//
// Threading: work items (sequence, head, block of query rows) are spread over
// `pool` (nullptr: run on the caller) in contiguous ranges, so a thread packs
// each (sequence, head) it meets once. Thread-compatible: concurrent calls
// must not share outputs. Allocates per call and thread the packed keys and
// values of one head and the scores of one item.
#pragma once

#include <cstdint>

#include "runtime/base/status.h"
#include "runtime/base/thread_pool.h"
#include "runtime/kernels/cpu_isa.h"
#include "runtime/kernels/matmul.h"

namespace xrt {

struct DenseAttentionArgs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, out_stride = 0;
  int64_t num_tokens = 0, seq_len = 0, num_heads = 0, head_dim = 0;
  float scale = 1.0f;
  ComputeType compute = ComputeType::kF32;  // kF32 or kBF16
};

// InvalidArgument when a size is not positive, head_dim > 256, num_tokens is not
// a multiple of seq_len, a row stride is shorter than num_heads * head_dim, or
// compute is kInt8.
Status DenseAttention(const DenseAttentionArgs& args, ThreadPool* pool);
// The same with the code of `isa` (which must be supported), for tests.
Status DenseAttentionWithIsa(const DenseAttentionArgs& args, ThreadPool* pool, CpuIsa isa);

}  // namespace xrt
