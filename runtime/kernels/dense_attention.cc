#include "runtime/kernels/dense_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace xrt {
namespace {

constexpr int64_t kRowsPerItem = 32;

// Rows [row_begin, row_end) of one sequence (first row `base`), head h.
// `kt` is the head's keys transposed, [head_dim][seq_len].
void AttendRows(const DenseAttentionArgs& a, int64_t base, int64_t h, const float* kt,
                int64_t row_begin, int64_t row_end, float* scores) {
  const int64_t s = a.seq_len, hd = a.head_dim;
  for (int64_t i = row_begin; i < row_end; ++i) {
    const float* q = a.q + (base + i) * a.q_stride + h * hd;
    std::fill(scores, scores + s, 0.0f);
    for (int64_t d = 0; d < hd; ++d) {
      const float qd = q[d];
      const float* krow = kt + d * s;
      for (int64_t j = 0; j < s; ++j) scores[j] += qd * krow[j];
    }
    float mx = -INFINITY;
    for (int64_t j = 0; j < s; ++j) {
      scores[j] *= a.scale;
      mx = std::max(mx, scores[j]);
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < s; ++j) {
      scores[j] = std::exp(scores[j] - mx);
      sum += scores[j];
    }
    const float inv = 1.0f / sum;
    float* out = a.out + (base + i) * a.out_stride + h * hd;
    std::fill(out, out + hd, 0.0f);
    for (int64_t j = 0; j < s; ++j) {
      const float p = scores[j] * inv;
      const float* v = a.v + (base + j) * a.v_stride + h * hd;
      for (int64_t d = 0; d < hd; ++d) out[d] += p * v[d];
    }
  }
}

}  // namespace

Status DenseAttention(const DenseAttentionArgs& a, ThreadPool* pool) {
  if (a.num_tokens <= 0 || a.seq_len <= 0 || a.num_heads <= 0 || a.head_dim <= 0)
    return InvalidArgumentError(
        "attention: num_tokens {}, seq_len {}, num_heads {}, head_dim {} must be positive",
        a.num_tokens, a.seq_len, a.num_heads, a.head_dim);
  if (a.num_tokens % a.seq_len != 0)
    return InvalidArgumentError("attention: num_tokens {} is not a multiple of seq_len {}",
                                a.num_tokens, a.seq_len);
  const int64_t width = a.num_heads * a.head_dim;
  for (int64_t stride : {a.q_stride, a.k_stride, a.v_stride, a.out_stride})
    if (stride < width)
      return InvalidArgumentError("attention: row stride {} is shorter than {} columns", stride,
                                  width);
  const int64_t num_seqs = a.num_tokens / a.seq_len;
  const int64_t blocks = (a.seq_len + kRowsPerItem - 1) / kRowsPerItem;
  const int64_t items = num_seqs * a.num_heads * blocks;
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> kt(a.head_dim * a.seq_len), scores(a.seq_len);
    int64_t cached = -1;  // (sequence, head) whose keys are in kt
    for (int64_t item = begin; item < end; ++item) {
      const int64_t block = item % blocks, sh = item / blocks;
      const int64_t h = sh % a.num_heads, n = sh / a.num_heads;
      const int64_t base = n * a.seq_len;
      if (sh != cached) {
        for (int64_t j = 0; j < a.seq_len; ++j) {
          const float* k = a.k + (base + j) * a.k_stride + h * a.head_dim;
          for (int64_t d = 0; d < a.head_dim; ++d) kt[d * a.seq_len + j] = k[d];
        }
        cached = sh;
      }
      const int64_t r0 = block * kRowsPerItem;
      AttendRows(a, base, h, kt.data(), r0, std::min(a.seq_len, r0 + kRowsPerItem), scores.data());
    }
  };
  if (pool) {
    pool->ParallelFor(items, run);
  } else {
    run(0, items);
  }
  return Status::Ok();
}

}  // namespace xrt
