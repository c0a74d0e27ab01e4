#include "runtime/kernels/attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/kernels/simd.h"

namespace xrt {
namespace {

// Keys per online-softmax step. Chunks are aligned to absolute positions
// ([0, 64), [64, 128), ...; the last one cut at the token's position), so a
// token always sees the same chunks whatever else is in the batch.
constexpr int kChunk = 64;

// One online-softmax step: the query heads of one kv head (`group` of them)
// against one chunk of keys. k[j] / v[j] point at the head_dim floats of the
// chunk's j-th key / value, wherever its cache block is.
struct ChunkUpdate {
  const float* q;  // [group][dim]
  const float* const* k;
  const float* const* v;
  int n;  // keys in the chunk, <= kChunk
  int64_t dim, group;
  float scale;
  float* m;    // [group] running max of the scores
  float* l;    // [group] running sum of exp(score - m)
  float* acc;  // [group][dim] running sum of exp(score - m) * v
  float* s;    // scratch, [group][kChunk]
};
using UpdateFn = void (*)(const ChunkUpdate&);

// Per-ISA inner loops over one chunk. Each key's dot product is computed by
// the same instruction sequence whatever n is, so a score does not depend on
// the chunk it was computed in.
struct Primitives {
  // s[j] = scale * dot(q, k[j]), j in [0, n).
  void (*scores)(const float* q, const float* const* k, int n, int64_t dim, float scale, float* s);
  // s[j] = exp(s[j] - m) for j in [0, n); returns the sum of the new s[j],
  // added in an order fixed by n.
  float (*exp_sum)(float* s, int n, float m);
  // acc = acc * corr + sum_j p[j] * v[j], j in increasing order.
  void (*accumulate)(float* acc, float corr, const float* p, const float* const* v, int n,
                     int64_t dim);
};

// ---------------------------------------------------------------- scalar --

void ScoresScalar(const float* q, const float* const* k, int n, int64_t dim, float scale,
                  float* s) {
  for (int j = 0; j < n; ++j) {
    const float* kj = k[j];
    float dot = 0.0f;
    for (int64_t d = 0; d < dim; ++d) dot = std::fma(q[d], kj[d], dot);
    s[j] = dot * scale;
  }
}

float ExpSumScalar(float* s, int n, float m) {
  float sum = 0.0f;
  for (int j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - m);
    sum += s[j];
  }
  return sum;
}

void AccumulateScalar(float* acc, float corr, const float* p, const float* const* v, int n,
                      int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) acc[d] *= corr;
  for (int j = 0; j < n; ++j) {
    const float* vj = v[j];
    for (int64_t d = 0; d < dim; ++d) acc[d] = std::fma(p[j], vj[d], acc[d]);
  }
}

#if defined(__x86_64__)

// ------------------------------------------------------------------ AVX2 --

XRT_TARGET_AVX2 inline __m256i TailMask8(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

XRT_TARGET_AVX2 inline float HorizontalSum8(__m256 v) {
  const __m128 lo = _mm256_castps256_ps128(v);
  const __m128 hi = _mm256_extractf128_ps(v, 1);
  __m128 s = _mm_add_ps(lo, hi);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// exp(x) for x <= 0 (softmax weights): Cody-Waite range reduction to
// r in [-ln2/2, ln2/2], a degree-6 polynomial (Cephes expf coefficients,
// ~1 ulp), times 2^n built in the exponent bits. x < -87 flushes to 0.
XRT_TARGET_AVX2 inline __m256 ExpNonPositive8(__m256 x) {
  const __m256 min_x = _mm256_set1_ps(-87.0f);
  const __m256 underflow = _mm256_cmp_ps(x, min_x, _CMP_LT_OQ);
  x = _mm256_max_ps(x, min_x);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

XRT_TARGET_AVX2 float ExpSumAvx2(float* s, int n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 sum = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 p = ExpNonPositive8(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
    _mm256_storeu_ps(s + j, p);
    sum = _mm256_add_ps(sum, p);
  }
  if (j < n) {
    const __m256i mask = TailMask8(n - j);
    const __m256 x = _mm256_sub_ps(_mm256_maskload_ps(s + j, mask), mv);
    const __m256 p = _mm256_and_ps(ExpNonPositive8(x), _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(s + j, mask, p);
    sum = _mm256_add_ps(sum, p);
  }
  return HorizontalSum8(sum);
}

// Scores of J keys at once: J independent fma chains, each key's in the
// same order as alone (ILP only; the values do not depend on J).
template <int J>
XRT_TARGET_AVX2 inline void ScoresOfKeysAvx2(const float* q, const float* const* k, int64_t dim,
                                             float scale, float* s) {
  const int64_t full = dim / 8 * 8;
  __m256 acc[J];
  for (int j = 0; j < J; ++j) acc[j] = _mm256_setzero_ps();
  for (int64_t d = 0; d < full; d += 8) {
    const __m256 qv = _mm256_loadu_ps(q + d);
    for (int j = 0; j < J; ++j) acc[j] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k[j] + d), acc[j]);
  }
  if (full < dim) {
    const __m256i tail = TailMask8(dim - full);
    const __m256 qv = _mm256_maskload_ps(q + full, tail);
    for (int j = 0; j < J; ++j) {
      acc[j] = _mm256_fmadd_ps(qv, _mm256_maskload_ps(k[j] + full, tail), acc[j]);
    }
  }
  for (int j = 0; j < J; ++j) s[j] = HorizontalSum8(acc[j]) * scale;
}

XRT_TARGET_AVX2 void ScoresAvx2(const float* q, const float* const* k, int n, int64_t dim,
                                float scale, float* s) {
  int j = 0;
  for (; j + 4 <= n; j += 4) ScoresOfKeysAvx2<4>(q, k + j, dim, scale, s + j);
  for (; j < n; ++j) ScoresOfKeysAvx2<1>(q, k + j, dim, scale, s + j);
}

// acc[d .. d + 8NV) = acc * corr + sum_j p[j] v[j], one fma chain per lane
// in increasing j (NV independent chains, the same values as one at a time).
template <int NV>
XRT_TARGET_AVX2 inline void AccumulateBlockAvx2(float* acc, __m256 corr, const float* p,
                                                const float* const* v, int n, int64_t d) {
  __m256 a[NV];
  for (int i = 0; i < NV; ++i) a[i] = _mm256_mul_ps(_mm256_loadu_ps(acc + d + 8 * i), corr);
  for (int j = 0; j < n; ++j) {
    const __m256 pj = _mm256_set1_ps(p[j]);
    for (int i = 0; i < NV; ++i) {
      a[i] = _mm256_fmadd_ps(pj, _mm256_loadu_ps(v[j] + d + 8 * i), a[i]);
    }
  }
  for (int i = 0; i < NV; ++i) _mm256_storeu_ps(acc + d + 8 * i, a[i]);
}

XRT_TARGET_AVX2 void AccumulateAvx2(float* acc, float corr, const float* p, const float* const* v,
                                    int n, int64_t dim) {
  const int64_t full = dim / 8 * 8;
  const __m256 c = _mm256_set1_ps(corr);
  int64_t d = 0;
  for (; d + 64 <= full; d += 64) AccumulateBlockAvx2<8>(acc, c, p, v, n, d);
  if (d + 32 <= full) {
    AccumulateBlockAvx2<4>(acc, c, p, v, n, d);
    d += 32;
  }
  for (; d < full; d += 8) AccumulateBlockAvx2<1>(acc, c, p, v, n, d);
  if (full < dim) {
    const __m256i tail = TailMask8(dim - full);
    __m256 a = _mm256_mul_ps(_mm256_maskload_ps(acc + full, tail), c);
    for (int j = 0; j < n; ++j) {
      a = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_maskload_ps(v[j] + full, tail), a);
    }
    _mm256_maskstore_ps(acc + full, tail, a);
  }
}

// --------------------------------------------------------------- AVX-512 --

// GCC 12 reports the _mm512_undefined_*() placeholders inside several
// AVX-512 intrinsics (shuffles, unpacks) as uninitialized uses.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// Sum of the 16 lanes of v, in a fixed order.
XRT_TARGET_AVX512 inline float ReduceAdd16(__m512 v) {
  const __m512 t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m256 t8 = _mm512_castps512_ps256(t);
  __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  t4 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
  t4 = _mm_add_ss(t4, _mm_movehdup_ps(t4));
  return _mm_cvtss_f32(t4);
}

// Scores of up to 16 keys at once with q (NV vectors, the last masked by
// `tail`) held in registers: one accumulator per key, then a transposing
// reduction that leaves key j's sum in lane j. Key j's arithmetic depends
// only on j (its offset in the chunk, fixed by its absolute position), never
// on how many keys the chunk has: missing keys are computed on a copy of
// key 0 and dropped.
template <int NV>
XRT_TARGET_AVX512 void Scores16Avx512(const float* q, const float* const* k, int n, float scale,
                                      __mmask16 tail, float* s) {
  __m512 qv[NV];
#pragma GCC unroll 8
  for (int i = 0; i < NV; ++i) {
    qv[i] = _mm512_maskz_loadu_ps(i == NV - 1 ? tail : __mmask16(0xFFFF), q + 16 * i);
  }
  const __m512 sv = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int cnt = std::min(16, n - j0);
    __m512 a[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      const float* kj = k[j < cnt ? j0 + j : j0];
      __m512 acc =
          _mm512_mul_ps(qv[0], _mm512_maskz_loadu_ps(NV == 1 ? tail : __mmask16(0xFFFF), kj));
#pragma GCC unroll 8
      for (int i = 1; i < NV; ++i) {
        acc = _mm512_fmadd_ps(
            qv[i], _mm512_maskz_loadu_ps(i == NV - 1 ? tail : __mmask16(0xFFFF), kj + 16 * i), acc);
      }
      a[j] = acc;
    }
    // 16 -> 8: pairs of keys, elements {0,2} and {1,3} of each 128-bit lane.
    __m512 b[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      b[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                           _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    }
    // 8 -> 4: each 128-bit lane of c[i] holds keys 4i..4i+3.
    __m512 c[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      const __m512d lo =
          _mm512_unpacklo_pd(_mm512_castps_pd(b[2 * i]), _mm512_castps_pd(b[2 * i + 1]));
      const __m512d hi =
          _mm512_unpackhi_pd(_mm512_castps_pd(b[2 * i]), _mm512_castps_pd(b[2 * i + 1]));
      c[i] = _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
    }
    // Sum the four 128-bit lanes: lane i of the result holds keys 4i..4i+3.
    const __m512 d01 = _mm512_add_ps(_mm512_shuffle_f32x4(c[0], c[1], 0x88),
                                     _mm512_shuffle_f32x4(c[0], c[1], 0xDD));
    const __m512 d23 = _mm512_add_ps(_mm512_shuffle_f32x4(c[2], c[3], 0x88),
                                     _mm512_shuffle_f32x4(c[2], c[3], 0xDD));
    const __m512 e =
        _mm512_add_ps(_mm512_shuffle_f32x4(d01, d23, 0x88), _mm512_shuffle_f32x4(d01, d23, 0xDD));
    const __mmask16 out = cnt == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << cnt) - 1);
    _mm512_mask_storeu_ps(s + j0, out, _mm512_mul_ps(e, sv));
  }
}

// One key at a time, for head_dim > 128.
XRT_TARGET_AVX512 void ScoresWideAvx512(const float* q, const float* const* k, int n, int64_t dim,
                                        float scale, float* s) {
  for (int j = 0; j < n; ++j) {
    const float* kj = k[j];
    __m512 a = _mm512_setzero_ps();
    for (int64_t d = 0; d < dim; d += 16) {
      const __mmask16 m =
          dim - d >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (dim - d)) - 1);
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + d), _mm512_maskz_loadu_ps(m, kj + d), a);
    }
    s[j] = ReduceAdd16(a) * scale;
  }
}

XRT_TARGET_AVX512 void ScoresAvx512(const float* q, const float* const* k, int n, int64_t dim,
                                    float scale, float* s) {
  if (dim > 128) return ScoresWideAvx512(q, k, n, dim, scale, s);
  const int nv = static_cast<int>((dim + 15) / 16);
  const int64_t last = dim - 16 * (nv - 1);
  const __mmask16 tail = last == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << last) - 1);
  switch (nv) {
    case 1:
      return Scores16Avx512<1>(q, k, n, scale, tail, s);
    case 2:
      return Scores16Avx512<2>(q, k, n, scale, tail, s);
    case 3:
      return Scores16Avx512<3>(q, k, n, scale, tail, s);
    case 4:
      return Scores16Avx512<4>(q, k, n, scale, tail, s);
    case 5:
      return Scores16Avx512<5>(q, k, n, scale, tail, s);
    case 6:
      return Scores16Avx512<6>(q, k, n, scale, tail, s);
    case 7:
      return Scores16Avx512<7>(q, k, n, scale, tail, s);
    default:
      return Scores16Avx512<8>(q, k, n, scale, tail, s);
  }
}

// See ExpNonPositive8; 2^n applied with vscalefps.
XRT_TARGET_AVX512 inline __m512 ExpNonPositive16(__m512 x) {
  const __m512 min_x = _mm512_set1_ps(-87.0f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, min_x, _CMP_GE_OQ);
  x = _mm512_max_ps(x, min_x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

XRT_TARGET_AVX512 float ExpSumAvx512(float* s, int n, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16) {
    const __mmask16 mask =
        n - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512 p = _mm512_maskz_mov_ps(
        mask, ExpNonPositive16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), mv)));
    _mm512_mask_storeu_ps(s + j, mask, p);
    sum = _mm512_add_ps(sum, p);
  }
  return ReduceAdd16(sum);
}

// acc (NV vectors of 16, the last one masked by `tail`) held in registers
// across the chunk; values are read at v[j] + d0.
template <int NV>
XRT_TARGET_AVX512 void AccumulateAvx512Regs(float* acc, float corr, const float* p,
                                            const float* const* v, int64_t d0, int n,
                                            __mmask16 tail) {
  __m512 a[NV];
  const __m512 c = _mm512_set1_ps(corr);
#pragma GCC unroll 8
  for (int i = 0; i < NV; ++i) {
    const __mmask16 m = i == NV - 1 ? tail : __mmask16(0xFFFF);
    a[i] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc + 16 * i), c);
  }
  for (int j = 0; j < n; ++j) {
    const __m512 pj = _mm512_set1_ps(p[j]);
    const float* vj = v[j] + d0;
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) {
      const __mmask16 m = i == NV - 1 ? tail : __mmask16(0xFFFF);
      a[i] = _mm512_fmadd_ps(pj, _mm512_maskz_loadu_ps(m, vj + 16 * i), a[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < NV; ++i) {
    const __mmask16 m = i == NV - 1 ? tail : __mmask16(0xFFFF);
    _mm512_mask_storeu_ps(acc + 16 * i, m, a[i]);
  }
}

XRT_TARGET_AVX512 void AccumulateAvx512(float* acc, float corr, const float* p,
                                        const float* const* v, int n, int64_t dim) {
  // Up to 128 dims at a time in registers; the per-element chain is the same
  // whichever group an element falls in.
  for (int64_t d = 0; d < dim; d += 128) {
    const int64_t width = std::min<int64_t>(128, dim - d);
    const int nv = static_cast<int>((width + 15) / 16);
    const int64_t last = width - 16 * (nv - 1);
    const __mmask16 tail =
        last == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << last) - 1);
    float* ad = acc + d;
    switch (nv) {
      case 1:
        AccumulateAvx512Regs<1>(ad, corr, p, v, d, n, tail);
        break;
      case 2:
        AccumulateAvx512Regs<2>(ad, corr, p, v, d, n, tail);
        break;
      case 3:
        AccumulateAvx512Regs<3>(ad, corr, p, v, d, n, tail);
        break;
      case 4:
        AccumulateAvx512Regs<4>(ad, corr, p, v, d, n, tail);
        break;
      case 5:
        AccumulateAvx512Regs<5>(ad, corr, p, v, d, n, tail);
        break;
      case 6:
        AccumulateAvx512Regs<6>(ad, corr, p, v, d, n, tail);
        break;
      case 7:
        AccumulateAvx512Regs<7>(ad, corr, p, v, d, n, tail);
        break;
      default:
        AccumulateAvx512Regs<8>(ad, corr, p, v, d, n, tail);
        break;
    }
  }
}

// acc += for G heads at once: acc[g] = acc[g] * corr[g] + sum_j p[g][j] v[j].
// Each value row is loaded once for the G heads, and the G*NV accumulator
// chains run side by side (one head alone is FMA-latency bound).
template <int NV, int G>
XRT_TARGET_AVX512 void AccumulateHeadsAvx512(float* acc, int64_t dim, const float* corr,
                                             const float* p, const float* const* v, int n,
                                             __mmask16 tail) {
  __m512 a[G][NV];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
    const __m512 c = _mm512_set1_ps(corr[g]);
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) {
      const __mmask16 m = i == NV - 1 ? tail : __mmask16(0xFFFF);
      a[g][i] = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, acc + g * dim + 16 * i), c);
    }
  }
  for (int j = 0; j < n; ++j) {
    const float* vj = v[j];
    __m512 vv[NV];
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) {
      vv[i] = _mm512_maskz_loadu_ps(i == NV - 1 ? tail : __mmask16(0xFFFF), vj + 16 * i);
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const __m512 pj = _mm512_set1_ps(p[g * kChunk + j]);
#pragma GCC unroll 8
      for (int i = 0; i < NV; ++i) a[g][i] = _mm512_fmadd_ps(pj, vv[i], a[g][i]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) {
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i) {
      const __mmask16 m = i == NV - 1 ? tail : __mmask16(0xFFFF);
      _mm512_mask_storeu_ps(acc + g * dim + 16 * i, m, a[g][i]);
    }
  }
}

// The whole chunk step for head_dim <= 16*NV: scores, max and exp per head,
// then the value accumulation for up to G_MAX heads at a time.
template <int NV>
XRT_TARGET_AVX512 void UpdateAvx512(const ChunkUpdate& c) {
  constexpr int k_max_heads = NV <= 4 ? 3 : NV <= 6 ? 2 : 1;  // <= 12..16 accumulators
  const int64_t last = c.dim - 16 * (NV - 1);
  const __mmask16 tail = last == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << last) - 1);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  float corr[k_max_heads];
  for (int64_t g0 = 0; g0 < c.group; g0 += k_max_heads) {
    const int heads = static_cast<int>(std::min<int64_t>(k_max_heads, c.group - g0));
    for (int h = 0; h < heads; ++h) {
      const int64_t g = g0 + h;
      float* s = c.s + h * kChunk;
      Scores16Avx512<NV>(c.q + g * c.dim, c.k, c.n, c.scale, tail, s);
      __m512 mx = neg_inf;
      for (int j = 0; j < c.n; j += 16) {
        const __mmask16 m =
            c.n - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (c.n - j)) - 1);
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(neg_inf, m, s + j));
      }
      const float m_new = std::max(c.m[g], _mm512_reduce_max_ps(mx));  // max is exact
      // exp(m_old - m_new): 0 on the first chunk (m_old = -inf).
      corr[h] = _mm512_cvtss_f32(ExpNonPositive16(_mm512_set1_ps(c.m[g] - m_new)));
      const float sum = ExpSumAvx512(s, c.n, m_new);
      c.l[g] = c.l[g] * corr[h] + sum;
      c.m[g] = m_new;
    }
    float* acc = c.acc + g0 * c.dim;
    switch (heads) {
      case 1:
        AccumulateHeadsAvx512<NV, 1>(acc, c.dim, corr, c.s, c.v, c.n, tail);
        break;
      case 2:
        AccumulateHeadsAvx512<NV, k_max_heads >= 2 ? 2 : 1>(acc, c.dim, corr, c.s, c.v, c.n, tail);
        break;
      default:
        AccumulateHeadsAvx512<NV, k_max_heads>(acc, c.dim, corr, c.s, c.v, c.n, tail);
        break;
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // __x86_64__

// The chunk step from the primitives of one ISA.
template <const Primitives& P>
void UpdateGeneric(const ChunkUpdate& c) {
  for (int64_t g = 0; g < c.group; ++g) {
    P.scores(c.q + g * c.dim, c.k, c.n, c.dim, c.scale, c.s);
    float mx = c.s[0];
    for (int j = 1; j < c.n; ++j) mx = std::max(mx, c.s[j]);
    const float m_new = std::max(c.m[g], mx);
    const float corr = std::exp(c.m[g] - m_new);  // 0 on the first chunk
    const float sum = P.exp_sum(c.s, c.n, m_new);
    c.l[g] = c.l[g] * corr + sum;
    c.m[g] = m_new;
    P.accumulate(c.acc + g * c.dim, corr, c.s, c.v, c.n, c.dim);
  }
}

constexpr Primitives kScalarPrimitives{&ScoresScalar, &ExpSumScalar, &AccumulateScalar};
#if defined(__x86_64__)
constexpr Primitives kAvx2Primitives{&ScoresAvx2, &ExpSumAvx2, &AccumulateAvx2};
constexpr Primitives kAvx512Primitives{&ScoresAvx512, &ExpSumAvx512, &AccumulateAvx512};
#endif

// The chunk step for `isa` and this head_dim.
UpdateFn UpdateFor(CpuIsa isa, int64_t dim) {
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx512) {
    switch ((dim + 15) / 16) {
      case 1:
        return &UpdateAvx512<1>;
      case 2:
        return &UpdateAvx512<2>;
      case 3:
        return &UpdateAvx512<3>;
      case 4:
        return &UpdateAvx512<4>;
      case 5:
        return &UpdateAvx512<5>;
      case 6:
        return &UpdateAvx512<6>;
      case 7:
        return &UpdateAvx512<7>;
      case 8:
        return &UpdateAvx512<8>;
      default:
        return &UpdateGeneric<kAvx512Primitives>;
    }
  }
  if (isa == CpuIsa::kAvx2) return &UpdateGeneric<kAvx2Primitives>;
#endif
  return &UpdateGeneric<kScalarPrimitives>;
}

Status Validate(const PagedAttentionArgs& a) {
  if (a.num_tokens < 0 || a.max_num_reqs < 0 || a.max_blocks_per_req < 0) {
    return InvalidArgumentError(
        "paged attention: negative size (num_tokens={}, max_num_reqs={}, max_blocks_per_req={})",
        a.num_tokens, a.max_num_reqs, a.max_blocks_per_req);
  }
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.head_dim <= 0 || a.block_size <= 0 ||
      a.num_blocks < 0) {
    return InvalidArgumentError(
        "paged attention: bad shape (num_heads={}, num_kv_heads={}, head_dim={}, "
        "block_size={}, num_blocks={})",
        a.num_heads, a.num_kv_heads, a.head_dim, a.block_size, a.num_blocks);
  }
  if (a.num_heads % a.num_kv_heads != 0) {
    return InvalidArgumentError(
        "paged attention: num_heads {} is not a multiple of num_kv_heads {}", a.num_heads,
        a.num_kv_heads);
  }
  // Slots and block ids are int32 in the metadata; keep the cache within that.
  if (a.block_size > std::numeric_limits<int32_t>::max() ||
      a.num_blocks > std::numeric_limits<int32_t>::max()) {
    return InvalidArgumentError("paged attention: cache of {} blocks of {} slots is too large",
                                a.num_blocks, a.block_size);
  }
  const int64_t q_width = a.num_heads * a.head_dim, kv_width = a.num_kv_heads * a.head_dim;
  if (a.num_tokens > 0) {
    if (!a.q || !a.k || !a.v || !a.out || !a.slot_mapping) {
      return InvalidArgumentError("paged attention: null q/k/v/out/slot_mapping");
    }
    if (a.q_stride < q_width || a.out_stride < q_width || a.k_stride < kv_width ||
        a.v_stride < kv_width) {
      return InvalidArgumentError(
          "paged attention: row strides (q {}, k {}, v {}, out {}) smaller than rows "
          "(q/out {}, k/v {})",
          a.q_stride, a.k_stride, a.v_stride, a.out_stride, q_width, kv_width);
    }
  }
  if (a.max_num_reqs > 0 &&
      (!a.seq_lens || !a.query_start_loc || (a.max_blocks_per_req > 0 && !a.block_tables))) {
    return InvalidArgumentError("paged attention: null seq_lens/query_start_loc/block_tables");
  }
  const int64_t num_slots = a.num_blocks * a.block_size;
  if (num_slots > 0 && (!a.k_cache || !a.v_cache)) {
    return InvalidArgumentError("paged attention: null k_cache/v_cache");
  }
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int64_t slot = a.slot_mapping[t];
    if (slot == -1) continue;
    if (slot < 0 || slot >= num_slots) {
      return OutOfRangeError(
          "paged attention: slot_mapping[{}] = {} outside the cache of {} slots ({} blocks of {})",
          t, slot, num_slots, a.num_blocks, a.block_size);
    }
  }
  if (a.max_num_reqs > 0) {
    const int32_t* qsl = a.query_start_loc;
    if (qsl[0] < 0) {
      return InvalidArgumentError("paged attention: query_start_loc[0] = {} is negative", qsl[0]);
    }
    for (int64_t r = 0; r < a.max_num_reqs; ++r) {
      if (qsl[r + 1] < qsl[r] || qsl[r + 1] > a.num_tokens) {
        return InvalidArgumentError(
            "paged attention: query_start_loc[{}..{}] = [{}, {}] is decreasing or past "
            "num_tokens {}",
            r, r + 1, qsl[r], qsl[r + 1], a.num_tokens);
      }
      const int64_t q_len = qsl[r + 1] - qsl[r];
      const int64_t seq_len = a.seq_lens[r];
      if (q_len == 0) continue;
      if (seq_len < q_len) {
        return InvalidArgumentError(
            "paged attention: request {} has {} query tokens but seq_len {}", r, q_len, seq_len);
      }
      const int64_t blocks = (seq_len + a.block_size - 1) / a.block_size;
      if (blocks > a.max_blocks_per_req) {
        return OutOfRangeError(
            "paged attention: request {} seq_len {} needs {} blocks of {}, block table has {}", r,
            seq_len, blocks, a.block_size, a.max_blocks_per_req);
      }
      const int32_t* table = a.block_tables + r * a.max_blocks_per_req;
      for (int64_t b = 0; b < blocks; ++b) {
        if (table[b] < 0 || table[b] >= a.num_blocks) {
          return OutOfRangeError(
              "paged attention: block_tables[{}][{}] = {} outside the cache of {} blocks", r, b,
              table[b], a.num_blocks);
        }
      }
    }
  }
  return Status::Ok();
}

void WriteKv(const PagedAttentionArgs& a) {
  const int64_t width = a.num_kv_heads * a.head_dim;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int64_t slot = a.slot_mapping[t];
    if (slot < 0) continue;
    std::memcpy(a.k_cache + slot * width, a.k + t * a.k_stride, width * sizeof(float));
    std::memcpy(a.v_cache + slot * width, a.v + t * a.v_stride, width * sizeof(float));
  }
}

// Attention for one token of `request` and the query heads of one kv head.
void AttendGroup(const PagedAttentionArgs& a, UpdateFn update, int64_t t, int64_t kvh,
                 int64_t request, std::vector<float>& scratch) {
  const int64_t dim = a.head_dim;
  const int64_t group = a.num_heads / a.num_kv_heads;
  const int64_t h0 = kvh * group;
  float* out = a.out + t * a.out_stride + h0 * dim;
  assert(request >= 0);  // padding tokens are zeroed by the caller
  const int32_t* qsl = a.query_start_loc;
  const int64_t q_len = qsl[request + 1] - qsl[request];
  const int64_t pos = a.seq_lens[request] - q_len + (t - qsl[request]);
  const int32_t* table = a.block_tables + request * a.max_blocks_per_req;
  const int64_t stride = a.num_kv_heads * dim;  // floats per cache slot

  // scratch: acc [group][dim], m [group], l [group], s [group][kChunk]
  scratch.resize(group * dim + 2 * group + group * kChunk);
  float* acc = scratch.data();
  float* m = acc + group * dim;
  float* l = m + group;
  float* s = l + group;
  std::fill(acc, acc + group * dim, 0.0f);
  std::fill(m, m + group, -std::numeric_limits<float>::infinity());
  std::fill(l, l + group, 0.0f);

  ChunkUpdate c;
  c.q = a.q + t * a.q_stride + h0 * dim;
  c.dim = dim;
  c.group = group;
  c.scale = a.scale;
  c.m = m;
  c.l = l;
  c.acc = acc;
  c.s = s;
  const float* kp[kChunk];
  const float* vp[kChunk];
  c.k = kp;
  c.v = vp;
  const int64_t num_keys = pos + 1;
  int64_t block = 0, offset = 0;  // cache position of key `start + j`
  for (int64_t start = 0; start < num_keys; start += kChunk) {
    c.n = static_cast<int>(std::min<int64_t>(kChunk, num_keys - start));
    for (int j = 0; j < c.n; ++j) {
      const int64_t slot = static_cast<int64_t>(table[block]) * a.block_size + offset;
      kp[j] = a.k_cache + slot * stride + kvh * dim;
      vp[j] = a.v_cache + slot * stride + kvh * dim;
      if (++offset == a.block_size) {
        offset = 0;
        ++block;
      }
    }
    // A decode step finds its K/V rows out of cache (a whole step of weights
    // went through since): ask for all of the chunk's lines at once rather
    // than one miss at a time as the scores reach them.
    for (int j = 0; j < c.n; ++j) {
      for (int64_t d = 0; d < dim; d += 16) {
        __builtin_prefetch(kp[j] + d);
        __builtin_prefetch(vp[j] + d);
      }
    }
    update(c);
  }
  for (int64_t g = 0; g < group; ++g) {
    const float inv = 1.0f / l[g];
    for (int64_t d = 0; d < dim; ++d) out[g * dim + d] = acc[g * dim + d] * inv;
  }
}

}  // namespace

Status PagedAttentionWithIsa(const PagedAttentionArgs& args, ThreadPool* pool, CpuIsa isa) {
  XRT_RETURN_IF_ERROR(Validate(args));
  if (args.num_tokens == 0) return Status::Ok();
  WriteKv(args);

  std::vector<int32_t> token_request(args.num_tokens, -1);
  for (int64_t r = 0; r < args.max_num_reqs; ++r) {
    for (int32_t t = args.query_start_loc[r]; t < args.query_start_loc[r + 1]; ++t) {
      token_request[t] = static_cast<int32_t>(r);
    }
  }

  // Tokens no request owns (a bucket's padding) get zeros here, so the work
  // items are the owned tokens' only: a decode step in a bucket of 16 hands
  // out num_kv_heads items, not 16 times as many.
  std::vector<int32_t> owned;
  owned.reserve(args.num_tokens);
  for (int64_t t = 0; t < args.num_tokens; ++t) {
    if (token_request[t] >= 0) {
      owned.push_back(static_cast<int32_t>(t));
    } else {
      std::memset(args.out + t * args.out_stride, 0,
                  args.num_heads * args.head_dim * sizeof(float));
    }
  }
  const UpdateFn update = UpdateFor(isa, args.head_dim);
  const int64_t items = static_cast<int64_t>(owned.size()) * args.num_kv_heads;
  auto run = [&](int64_t begin, int64_t end) {
    std::vector<float> scratch;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = owned[i / args.num_kv_heads], kvh = i % args.num_kv_heads;
      AttendGroup(args, update, t, kvh, token_request[t], scratch);
    }
  };
  const int threads = pool ? pool->num_threads() : 1;
  if (threads <= 1) {
    run(0, items);
  } else {
    pool->ParallelForGrain(items, std::max<int64_t>(1, items / (16 * threads)), run);
  }
  return Status::Ok();
}

Status PagedAttention(const PagedAttentionArgs& args, ThreadPool* pool) {
  return PagedAttentionWithIsa(args, pool, BestCpuIsa());
}

}  // namespace xrt
