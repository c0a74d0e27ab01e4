#include "runtime/kernels/dense_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/kernels/cpu_isa.h"

namespace xrt {
namespace {

constexpr int64_t kRowsPerItem = 32;

// exp(x) for x <= 0 in plain arithmetic the compiler vectorizes (a libm call
// would not be): x = n ln2 + r with r in [-ln2/2, ln2/2] (Cody-Waite, two-part
// ln2), a degree-6 polynomial for exp(r) (Cephes expf coefficients, ~1 ulp),
// times 2^n built in the exponent bits. x < -87 gives 0.
__attribute__((always_inline)) inline float ExpNonPositive(float x) {
  const bool underflow = x < -87.0f;
  x = x < -87.0f ? -87.0f : x;
  // Round x / ln2 to the nearest integer with the 1.5 * 2^23 trick.
  const float shifter = 12582912.0f;
  const float nf = (x * 1.44269504088896341f + shifter) - shifter;
  float r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + (r + 1.0f);
  const int32_t bits = (static_cast<int32_t>(nf) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return underflow ? 0.0f : p * scale;
}

// Softmax of one row of scores in place (max-subtracted, scaled); returns 1/sum.
__attribute__((always_inline)) inline float SoftmaxInPlace(float* scores, int64_t n, float scale) {
  float mx = -INFINITY;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] *= scale;
    mx = std::max(mx, scores[j]);
  }
  float sum = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    scores[j] = ExpNonPositive(scores[j] - mx);
    sum += scores[j];
  }
  return 1.0f / sum;
}

// Rows [row_begin, row_end) of one sequence (first row `base`), head h, kRowBlock
// rows at a time so that every key and value element loaded feeds kRowBlock
// multiply-adds. `kt` is the head's keys transposed, [head_dim][seq_len], so the
// inner loops run over contiguous floats and vectorize; `scores` holds kRowBlock
// rows of seq_len. Each row's arithmetic is the same whatever block it is in.
// Inlined into one wrapper per ISA (below), which compiles it for that ISA.
constexpr int kRowBlock = 4;
__attribute__((always_inline)) inline void AttendRowsBody(const DenseAttentionArgs& a, int64_t base,
                                                          int64_t h, const float* kt,
                                                          int64_t row_begin, int64_t row_end,
                                                          float* scores) {
  const int64_t s = a.seq_len, hd = a.head_dim;
  for (int64_t i0 = row_begin; i0 < row_end; i0 += kRowBlock) {
    const int rows = static_cast<int>(std::min<int64_t>(kRowBlock, row_end - i0));
    const float* q[kRowBlock];
    float* sc[kRowBlock];
    float* out[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) {
      // Missing rows of a partial block repeat the last row; their results are dropped.
      const int64_t i = i0 + std::min(r, rows - 1);
      q[r] = a.q + (base + i) * a.q_stride + h * hd;
      sc[r] = scores + r * s;
      out[r] = a.out + (base + i) * a.out_stride + h * hd;
    }
    for (int r = 0; r < kRowBlock; ++r)
      for (int64_t j = 0; j < s; ++j) sc[r][j] = 0.0f;
    for (int64_t d = 0; d < hd; ++d) {
      const float* krow = kt + d * s;
      const float q0 = q[0][d], q1 = q[1][d], q2 = q[2][d], q3 = q[3][d];
      float* s0 = sc[0];
      float* s1 = sc[1];
      float* s2 = sc[2];
      float* s3 = sc[3];
      for (int64_t j = 0; j < s; ++j) {
        const float k = krow[j];
        s0[j] += q0 * k;
        s1[j] += q1 * k;
        s2[j] += q2 * k;
        s3[j] += q3 * k;
      }
    }
    float inv[kRowBlock];
    for (int r = 0; r < kRowBlock; ++r) inv[r] = SoftmaxInPlace(sc[r], s, a.scale);
    float acc[kRowBlock][256];  // head_dim <= 256 (checked by DenseAttention)
    for (int r = 0; r < kRowBlock; ++r)
      for (int64_t d = 0; d < hd; ++d) acc[r][d] = 0.0f;
    for (int64_t j = 0; j < s; ++j) {
      const float* v = a.v + (base + j) * a.v_stride + h * hd;
      const float p0 = sc[0][j] * inv[0], p1 = sc[1][j] * inv[1], p2 = sc[2][j] * inv[2],
                  p3 = sc[3][j] * inv[3];
      for (int64_t d = 0; d < hd; ++d) {
        const float vd = v[d];
        acc[0][d] += p0 * vd;
        acc[1][d] += p1 * vd;
        acc[2][d] += p2 * vd;
        acc[3][d] += p3 * vd;
      }
    }
    for (int r = 0; r < rows; ++r)
      for (int64_t d = 0; d < hd; ++d) out[r][d] = acc[r][d];
  }
}

using AttendRowsFn = void (*)(const DenseAttentionArgs&, int64_t, int64_t, const float*, int64_t,
                              int64_t, float*);

void AttendRowsScalar(const DenseAttentionArgs& a, int64_t base, int64_t h, const float* kt,
                      int64_t r0, int64_t r1, float* scores) {
  AttendRowsBody(a, base, h, kt, r0, r1, scores);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void AttendRowsAvx2(const DenseAttentionArgs& a, int64_t base,
                                                        int64_t h, const float* kt, int64_t r0,
                                                        int64_t r1, float* scores) {
  AttendRowsBody(a, base, h, kt, r0, r1, scores);
}

__attribute__((target("avx512f,avx512vl,avx2,fma"))) void AttendRowsAvx512(
    const DenseAttentionArgs& a, int64_t base, int64_t h, const float* kt, int64_t r0, int64_t r1,
    float* scores) {
  AttendRowsBody(a, base, h, kt, r0, r1, scores);
}
#endif

// The variant for this process's ISA (BestCpuIsa, fixed per process as for
// the other kernels).
AttendRowsFn AttendRowsFor(CpuIsa isa) {
#if defined(__x86_64__)
  if (IsaAtLeast(isa, CpuIsa::kAvx512)) return AttendRowsAvx512;
  if (isa == CpuIsa::kAvx2) return AttendRowsAvx2;
#endif
  return AttendRowsScalar;
}

}  // namespace

Status DenseAttention(const DenseAttentionArgs& a, ThreadPool* pool) {
  static const CpuIsa isa = BestCpuIsa();
  return DenseAttentionWithIsa(a, pool, isa);
}

Status DenseAttentionWithIsa(const DenseAttentionArgs& a, ThreadPool* pool, CpuIsa isa) {
  if (a.num_tokens <= 0 || a.seq_len <= 0 || a.num_heads <= 0 || a.head_dim <= 0)
    return InvalidArgumentError(
        "attention: num_tokens {}, seq_len {}, num_heads {}, head_dim {} must be positive",
        a.num_tokens, a.seq_len, a.num_heads, a.head_dim);
  if (a.head_dim > 256)
    return InvalidArgumentError("attention: head_dim {} is above the supported 256", a.head_dim);
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
  const AttendRowsFn attend = AttendRowsFor(isa);
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> kt(a.head_dim * a.seq_len), scores(kRowBlock * a.seq_len);
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
      attend(a, base, h, kt.data(), r0, std::min(a.seq_len, r0 + kRowsPerItem), scores.data());
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
