// DenseAttention: bidirectional softmax attention within fixed-length
// sequences, the vision encoder's self-attention (no mask, no KV cache).
//
// The num_tokens rows form num_tokens / seq_len consecutive sequences (one per
// image). For every sequence, head h and row i of it:
//   out[i][h] = sum_j softmax_j(scale * q_i[h] · k_j[h]) v_j[h]
// over the rows j of the same sequence, in f32 (max-subtracted softmax).
//
// Layouts (floats): q[t*q_stride + h*head_dim + d], same for k, v and out.
//
// Batch invariance: a row's result depends only on its own sequence; the
// reductions run in a fixed order whatever the number of sequences or threads.
// The code is compiled once per ISA (scalar, AVX2, AVX-512; the one for
// BestCpuIsa() is used, fixed per process), works on blocks of 4 query rows so
// each key and value load feeds 4 multiply-adds, and uses a polynomial exp
// (about 1 ulp) that vectorizes, instead of libm's.
//
// Threading: work items (sequence, head, block of query rows) are spread over
// `pool` (nullptr: run on the caller). Thread-compatible: concurrent calls must
// not share outputs. Allocates per-call scratch for the transposed keys.
#pragma once

#include <cstdint>

#include "runtime/base/status.h"
#include "runtime/base/thread_pool.h"
#include "runtime/kernels/cpu_isa.h"

namespace xrt {

struct DenseAttentionArgs {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* out = nullptr;
  int64_t q_stride = 0, k_stride = 0, v_stride = 0, out_stride = 0;
  int64_t num_tokens = 0, seq_len = 0, num_heads = 0, head_dim = 0;
  float scale = 1.0f;
};

// InvalidArgument when a size is not positive, head_dim > 256, num_tokens is not
// a multiple of seq_len, or a row stride is shorter than num_heads * head_dim.
Status DenseAttention(const DenseAttentionArgs& args, ThreadPool* pool);
// The same with the code of `isa` (which must be supported), for tests.
Status DenseAttentionWithIsa(const DenseAttentionArgs& args, ThreadPool* pool, CpuIsa isa);

}  // namespace xrt
