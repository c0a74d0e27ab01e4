#include "runtime/kernels/attention.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <type_traits>
#include <vector>

#include "runtime/kernels/packed_simd.h"
#include "runtime/kernels/simd.h"
#include "runtime/kernels/weight_format.h"

namespace xrt {
namespace {

using packed_simd::PrefetchLine;
using packed_simd::PrefetchTo;

// Keys per online-softmax step. Chunks are aligned to absolute positions
// ([0, 64), [64, 128), ...; the last one cut at the token's position), so a
// token always sees the same chunks whatever else is in the batch.
constexpr int kChunk = 64;

// kBF16 (attention.h): rows per call of the vdpbf16ps kernels that compute a
// few rows' products without packing matmul weights, the head_dim and keys
// they take at most, and the rows of a partition (its tile rows that see it)
// up to which AttendPartitionBf16 uses them.
constexpr int kBf16RowsMax = 4;
constexpr int64_t kBf16MaxDim = 256;
constexpr int64_t kBf16DirectRows = 8;

// One online-softmax step: `rows` query vectors (query heads of one kv head,
// of one or more tokens) against one chunk of keys that every row sees whole.
// k[j] / v[j] point at the head_dim floats of the chunk's j-th key / value,
// wherever its cache block is. A row's result depends only on its query, the
// chunk and n, never on the other rows.
struct ChunkUpdate {
  const float* const* q;  // [rows]
  const float* const* k;
  const float* const* v;
  // The chunk's rows of a kF16 / kFp8E4M3 cache, for an update that reads
  // them in place (ChunkKernels::update_halves / update_fp8); k and v are
  // then unused.
  const uint16_t* const* k_half;
  const uint16_t* const* v_half;
  const uint8_t* const* k_fp8;
  const uint8_t* const* v_fp8;
  int n;  // keys in the chunk, <= kChunk
  int64_t dim, rows;
  float scale;
  float* m;    // [rows] running max of the scores
  float* l;    // [rows] running sum of exp(score - m)
  float* acc;  // [rows][dim] running sum of exp(score - m) * v
  float* s;    // scratch, [rows][kChunk]
  // The next chunk's K and V cache rows (row_bytes each), asked for while
  // this one computes. The AVX2 update spreads them over its loops (keys
  // over the scores, values over the accumulation): a burst of 256 lines at
  // a chunk's start, with the fill buffers holding a few dozen, left the
  // loads waiting (16 decodes at 1024 keys ran 1.3-1.6x slower from DRAM).
  const char* const* ahead_k;
  const char* const* ahead_v;
  int n_ahead = 0;
  int64_t row_bytes = 0;
  PrefetchTo prefetch_to = PrefetchTo::kL1;  // PagedAttentionPrefetchesToL2
};
using UpdateFn = void (*)(const ChunkUpdate&);

// Prefetches rows [j0, j1) into `to`: all of their lines.
inline void PrefetchRows(const char* const* rows, int64_t row_bytes, int j0, int j1,
                         PrefetchTo to) {
  for (int j = j0; j < j1; ++j) {
    const uint8_t* row = reinterpret_cast<const uint8_t*>(rows[j]);
    for (int64_t byte = 0; byte < row_bytes; byte += 64) PrefetchLine(row + byte, to);
  }
}
inline void PrefetchAheadK(const ChunkUpdate& c, int j0, int j1) {
  PrefetchRows(c.ahead_k, c.row_bytes, j0, std::min(j1, c.n_ahead), c.prefetch_to);
}
inline void PrefetchAheadV(const ChunkUpdate& c, int j0, int j1) {
  PrefetchRows(c.ahead_v, c.row_bytes, j0, std::min(j1, c.n_ahead), c.prefetch_to);
}
// All of the next chunk's rows at once (the updates that do not spread them).
inline void PrefetchAhead(const ChunkUpdate& c) {
  PrefetchAheadK(c, 0, c.n_ahead);
  PrefetchAheadV(c, 0, c.n_ahead);
}

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

// x[j] *= scale for j < n (n >= 1); returns the largest (the same bits on
// every ISA: one rounding per product, and a max is exact in any order).
float ScaleMaxScalar(float* x, int n, float scale) {
  float m = -std::numeric_limits<float>::infinity();
  for (int j = 0; j < n; ++j) m = std::max(m, x[j] *= scale);
  return m;
}

void AccumulateScalar(float* acc, float corr, const float* p, const float* const* v, int n,
                      int64_t dim) {
  for (int64_t d = 0; d < dim; ++d) acc[d] *= corr;
  for (int j = 0; j < n; ++j) {
    const float* vj = v[j];
    for (int64_t d = 0; d < dim; ++d) acc[d] = std::fma(p[j], vj[d], acc[d]);
  }
}

// acc[d] = fma(add[d], c_from, acc[d] * c_to), d in [0, dim): a row of
// FoldPartition (every ISA's version gives these bits).
void FoldRowScalar(float* acc, const float* add, int64_t dim, float c_to, float c_from) {
  for (int64_t d = 0; d < dim; ++d) acc[d] = std::fma(add[d], c_from, acc[d] * c_to);
}

inline float LoadOne(const float* x) { return *x; }
inline float LoadOne(const uint16_t* x) { return HalfToFloat(*x); }
inline float LoadOne(const uint8_t* x) { return Fp8E4M3ToFloat(*x); }

// A kF16 or kFp8E4M3 cache's values: n of them to floats (exact), and
// floats to them (FloatToHalf's rounding, nearest even, which F16C's
// vcvtps2ph shares; FloatToFp8E4M3's).
template <typename T>
void ToFloatsScalar(const T* x, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = LoadOne(x + i);
}
void FloatsToHalvesScalar(const float* x, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToHalf(x[i]);
}
void FloatsToFp8Scalar(const float* x, int64_t n, uint8_t* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToFp8E4M3(x[i]);
}

#if defined(__x86_64__)

// ------------------------------------------------------------------ AVX2 --

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

// Eight floats at x, or eight halves or e4m3 codes as floats (exact, as
// LoadOne); the conversions of a kF16 / kFp8E4M3 cache on F16C.
XRT_TARGET_AVX2 inline __m256 Load8Avx2(const float* x) { return _mm256_loadu_ps(x); }
XRT_TARGET_AVX2 inline __m256 Load8Avx2(const uint16_t* x) {
  return packed_simd::Halves8(reinterpret_cast<const uint8_t*>(x));
}
// Fp8E4M3ToFloat's half on up to 16 lanes: each code in the high byte of a
// 16-bit lane of `high`, shifted right by one with the sign bit cleared from
// bit 14, is s 0eeee mmm0000000: the half worth the code times 2^-8; the NaN
// codes (magnitude 0x7f, 0x3f80 after the shift) made half NaNs. The
// conversions of Load8Avx2 and Load16 (then times 256).
XRT_TARGET_AVX2_INTEGER inline __m256i Fp8CodesAsHalves(__m256i high) {
  __m256i h =
      _mm256_and_si256(_mm256_srai_epi16(high, 1), _mm256_set1_epi16(static_cast<int16_t>(0xbfff)));
  const __m256i magnitude = _mm256_set1_epi16(0x7fff);
  const __m256i nan = _mm256_cmpeq_epi16(_mm256_and_si256(h, magnitude), _mm256_set1_epi16(0x3f80));
  return _mm256_or_si256(h, _mm256_and_si256(nan, magnitude));
}
XRT_TARGET_AVX2 inline __m256 Load8Avx2(const uint8_t* x) {
  const __m128i codes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x));
  const __m256i high = _mm256_zextsi128_si256(_mm_unpacklo_epi8(_mm_setzero_si128(), codes));
  return _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(Fp8CodesAsHalves(high))),
                       _mm256_set1_ps(256.0f));
}
template <typename T>
XRT_TARGET_AVX2 void ToFloatsAvx2(const T* x, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Load8Avx2(x + i));
  ToFloatsScalar(x + i, n - i, out + i);
}
XRT_TARGET_AVX2 void FoldRowAvx2(float* acc, const float* add, int64_t dim, float c_to,
                                 float c_from) {
  const __m256 to = _mm256_set1_ps(c_to), from = _mm256_set1_ps(c_from);
  int64_t d = 0;
  for (; d + 8 <= dim; d += 8) {
    const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(acc + d), to);
    _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(_mm256_loadu_ps(add + d), from, scaled));
  }
  for (; d < dim; ++d) {  // _mm_fmadd_ss: an fma without libm's call
    const __m128 scaled = _mm_mul_ss(_mm_set_ss(acc[d]), _mm_set_ss(c_to));
    acc[d] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(add[d]), _mm_set_ss(c_from), scaled));
  }
}
XRT_TARGET_AVX2 void FloatsToHalvesAvx2(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  FloatsToHalvesScalar(x + i, n - i, out + i);
}
// FloatToFp8E4M3 on 8 lanes: both the normal rounding (rebias, round to
// nearest even at bit 20) and the subnormal one (|x| * 2^9 by vcvtps2dq,
// nearest even under the default rounding mode, as std::nearbyint) are
// computed and the lane's range picks one, or 448 (saturated) or NaN.
XRT_TARGET_AVX2 void FloatsToFp8Avx2(const float* x, int64_t n, uint8_t* out) {
  const __m256i magnitude_mask = _mm256_set1_epi32(0x7fffffff), one = _mm256_set1_epi32(1);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(x + i));
    const __m256i magnitude = _mm256_and_si256(bits, magnitude_mask);
    __m256i v = _mm256_sub_epi32(magnitude, _mm256_set1_epi32(120 << 23));
    v = _mm256_add_epi32(v, _mm256_add_epi32(_mm256_set1_epi32(0x7ffff),
                                             _mm256_and_si256(_mm256_srli_epi32(v, 20), one)));
    __m256i code = _mm256_srli_epi32(v, 20);
    // (clamped to 2^-6 first, so that no lane converts out of int range)
    const __m256 small = _mm256_min_ps(_mm256_castsi256_ps(magnitude), _mm256_set1_ps(0x1p-6f));
    const __m256i units = _mm256_cvtps_epi32(_mm256_mul_ps(small, _mm256_set1_ps(512.0f)));
    code = _mm256_blendv_epi8(code, units,
                              _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3c800000), magnitude));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7e),
                              _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x43dfffff)));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7f),
                              _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000)));
    code = _mm256_or_si256(code,
                           _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80)));
    const __m128i words =
        _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), _mm_packus_epi16(words, words));
  }
  FloatsToFp8Scalar(x + i, n - i, out + i);
}

// The first `rem` (< 8) values of a cache row from x, the other lanes zero:
// a row's dim tail (a masked load would read past the end of a half row).
template <typename T>
XRT_TARGET_AVX2 inline __m256 LoadTailAvx2(const T* x, int64_t rem) {
  alignas(32) float t[8] = {};
  for (int64_t l = 0; l < rem; ++l) t[l] = LoadOne(x + l);
  return _mm256_load_ps(t);
}

// The scores of 4 keys from their accumulators (a[j]: key j's 8 lanes, lane
// l the fma chain over d = l, l + 8, ...): key j's lanes summed as
// ((l0 + l2) + (l1 + l3)) + ((l4 + l6) + (l5 + l7)), in lane j.
XRT_TARGET_AVX2 inline __m128 ReduceLanes4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 b0 = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
  const __m256 b1 = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
  const __m256d b0d = _mm256_castps_pd(b0), b1d = _mm256_castps_pd(b1);
  const __m256 c = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(b0d, b1d)),
                                 _mm256_castpd_ps(_mm256_unpackhi_pd(b0d, b1d)));
  return _mm_add_ps(_mm256_castps256_ps128(c), _mm256_extractf128_ps(c, 1));
}

// Scores of R rows against NK keys (kj[i]: key i's cache row, floats or
// halves read in place), row r's in s[r * kChunk + i]. A score is 8 fma
// chains, lane l over d = l, l + 8, ... (the dim tail's missing lanes add
// 0 * 0), reduced by ReduceLanes4 and multiplied by scale: it depends on
// nothing but its query and key, however the rows and keys are blocked.
// Each key vector is loaded (and converted) once for the R rows.
template <int R, int NK, typename T>
XRT_TARGET_AVX2 inline void ScoresTileAvx2(const float* const* q, const T* const* kj, int64_t dim,
                                           float scale, float* s) {
  static_assert(NK % 4 == 0);
  __m256 acc[R][NK];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int i = 0; i < NK; ++i) acc[r][i] = _mm256_setzero_ps();
  }
  const int64_t full = dim / 8 * 8;
  for (int64_t d = 0; d < full; d += 8) {
#pragma GCC unroll 8
    for (int i = 0; i < NK; ++i) {
      const __m256 kv = Load8Avx2(kj[i] + d);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        acc[r][i] = _mm256_fmadd_ps(_mm256_loadu_ps(q[r] + d), kv, acc[r][i]);
      }
    }
  }
  if (full < dim) {
    const __m256i mask = TailMask8(dim - full);
#pragma GCC unroll 8
    for (int i = 0; i < NK; ++i) {
      const __m256 kv = LoadTailAvx2(kj[i] + full, dim - full);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        acc[r][i] = _mm256_fmadd_ps(_mm256_maskload_ps(q[r] + full, mask), kv, acc[r][i]);
      }
    }
  }
  const __m128 sv = _mm_set1_ps(scale);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int i = 0; i < NK; i += 4) {
      const __m128 sums = ReduceLanes4(acc[r][i], acc[r][i + 1], acc[r][i + 2], acc[r][i + 3]);
      _mm_storeu_ps(s + r * kChunk + i, _mm_mul_ps(sums, sv));
    }
  }
}

// Scores of R rows against the chunk's n keys, NK at a time: 4 for several
// rows (R x 4 accumulators), 8 for one (enough independent chains). The
// keys of a last partial group are computed on copies of its first key and
// their scores (written up to a multiple of NK, within kChunk) never read.
template <int R, typename T>
XRT_TARGET_AVX2 inline void ScoresRowsAvx2(const float* const* q, const T* const* k, int n,
                                           int64_t dim, float scale, float* s,
                                           const ChunkUpdate* ahead) {
  constexpr int NK = R == 1 ? 8 : 4;
  static_assert(kChunk % NK == 0);
  // The next chunk's key rows, spread over the key groups (NK per group
  // when n = kChunk; more when this chunk is shorter).
  const int ahead_per_group = ahead ? std::max(NK, (ahead->n_ahead + n - 1) / n * NK) : 0;
  for (int j0 = 0, a0 = 0; j0 < n; j0 += NK, a0 += ahead_per_group) {
    if (ahead) PrefetchAheadK(*ahead, a0, a0 + ahead_per_group);
    const T* kj[NK];
    for (int i = 0; i < NK; ++i) kj[i] = k[j0 + i < n ? j0 + i : j0];
    ScoresTileAvx2<R, NK>(q, kj, dim, scale, s + j0);
  }
}

// The largest of s[0 .. n), n >= 1 (exact in any order).
XRT_TARGET_AVX2 inline float MaxAvx2(const float* s, int n) {
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int j = 0;
  for (; j + 8 <= n; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
  float m = HorizontalMax8(mx);
  for (; j < n; ++j) m = std::max(m, s[j]);
  return m;
}

XRT_TARGET_AVX2 float ScaleMaxAvx2(float* x, int n, float scale) {
  const __m256 sv = _mm256_set1_ps(scale);
  __m256 mx = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j), sv);
    _mm256_storeu_ps(x + j, v);
    mx = _mm256_max_ps(mx, v);
  }
  float m = HorizontalMax8(mx);
  for (; j < n; ++j) m = std::max(m, x[j] *= scale);
  return m;
}

// Eight values from x, or (NV = 0) the dim tail of `rem` values.
template <int NV, typename T>
XRT_TARGET_AVX2 inline __m256 LoadLanesAvx2(const T* x, int64_t rem) {
  if constexpr (NV == 0)
    return LoadTailAvx2(x, rem);
  else
    return Load8Avx2(x);
}

// acc[r][d .. d + 8NV) = acc * corr[r] + sum_j p[r][j] v[j] for R rows (p
// rows kChunk apart, v rows dim apart, floats or halves), each value vector
// loaded once for the R rows; one fma chain per lane in increasing j, as for
// one row alone. NV = 0: the dim tail of one masked vector. `ahead`: the
// next chunk's value rows are asked for, one per key.
template <int R, int NV, typename T>
XRT_TARGET_AVX2 inline void AccumulateRowsAvx2(float* acc, int64_t dim, const float* corr,
                                               const float* p, const T* const* v, int n, int64_t d,
                                               const ChunkUpdate* ahead = nullptr) {
  constexpr int kV = NV == 0 ? 1 : NV;
  const int64_t rem = dim - d;
  const __m256i mask = TailMask8(NV == 0 ? rem : 8);
  __m256 a[R][kV];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    const __m256 c = _mm256_set1_ps(corr[r]);
#pragma GCC unroll 4
    for (int i = 0; i < kV; ++i) {
      const float* x = acc + r * dim + d + 8 * i;
      a[r][i] = _mm256_mul_ps(NV == 0 ? _mm256_maskload_ps(x, mask) : _mm256_loadu_ps(x), c);
    }
  }
  for (int j = 0; j < n; ++j) {
    if (ahead) PrefetchAheadV(*ahead, j, j + 1);
    __m256 vv[kV];
#pragma GCC unroll 4
    for (int i = 0; i < kV; ++i) vv[i] = LoadLanesAvx2<NV>(v[j] + d + 8 * i, rem);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 pj = _mm256_set1_ps(p[r * kChunk + j]);
#pragma GCC unroll 4
      for (int i = 0; i < kV; ++i) a[r][i] = _mm256_fmadd_ps(pj, vv[i], a[r][i]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int i = 0; i < kV; ++i) {
      if constexpr (NV == 0) {
        _mm256_maskstore_ps(acc + r * dim + d, mask, a[r][i]);
      } else {
        _mm256_storeu_ps(acc + r * dim + d + 8 * i, a[r][i]);
      }
    }
  }
}

// The chunk's key (or value) rows as T: floats, a kF16 cache's halves or a
// kFp8E4M3 cache's codes.
template <typename T>
const T* const* RowsOf(const ChunkUpdate& c, bool values) {
  if constexpr (std::is_same_v<T, float>) {
    return values ? c.v : c.k;
  } else if constexpr (std::is_same_v<T, uint16_t>) {
    return values ? c.v_half : c.k_half;
  } else {
    static_assert(std::is_same_v<T, uint8_t>);
    return values ? c.v_fp8 : c.k_fp8;
  }
}

// The chunk step for R rows (from row r0): scores, each row's max, exp and
// sum, then the value accumulation, the keys and values read once for the R
// rows.
template <int R, typename T>
XRT_TARGET_AVX2 void UpdateRowsAvx2(const ChunkUpdate& c, int64_t r0) {
  float* s = c.s + r0 * kChunk;
  ScoresRowsAvx2<R>(c.q + r0, RowsOf<T>(c, false), c.n, c.dim, c.scale, s, r0 == 0 ? &c : nullptr);
  float corr[R];
  for (int r = 0; r < R; ++r) {
    const int64_t g = r0 + r;
    const float m_new = std::max(c.m[g], MaxAvx2(s + r * kChunk, c.n));
    corr[r] = std::exp(c.m[g] - m_new);  // 0 on the first chunk
    const float sum = ExpSumAvx2(s + r * kChunk, c.n, m_new);
    c.l[g] = c.l[g] * corr[r] + sum;
    c.m[g] = m_new;
  }
  // kWide vectors of d at a time: R x kWide accumulators, kWide values and a
  // broadcast in 16 registers.
  constexpr int kWide = R == 3 ? 3 : 4;
  const T* const* v = RowsOf<T>(c, true);
  float* acc = c.acc + r0 * c.dim;
  const int64_t full = c.dim / 8 * 8;
  int64_t d = 0;
  const ChunkUpdate* ahead = r0 == 0 ? &c : nullptr;
  for (; d + 8 * kWide <= full; d += 8 * kWide) {
    AccumulateRowsAvx2<R, kWide>(acc, c.dim, corr, s, v, c.n, d, d == 0 ? ahead : nullptr);
  }
  // What the loop did not ask for (all of it when dim < 8 * kWide).
  if (ahead) PrefetchAheadV(c, d == 0 ? 0 : c.n, c.n_ahead);
  if (d + 16 <= full) {
    AccumulateRowsAvx2<R, 2>(acc, c.dim, corr, s, v, c.n, d);
    d += 16;
  }
  if (d < full) {
    AccumulateRowsAvx2<R, 1>(acc, c.dim, corr, s, v, c.n, d);
    d += 8;
  }
  if (d < c.dim) AccumulateRowsAvx2<R, 0>(acc, c.dim, corr, s, v, c.n, d);
}

// Rows in blocks of 3 (12 score accumulators), a remainder of 1 taken as
// 2 + 2 (the 4 query heads of a Llama kv head, say). T: the cache rows'
// type: float, or (read in place) a kF16 cache's halves or a kFp8E4M3 cache's codes.
template <typename T>
XRT_TARGET_AVX2 void UpdateAvx2(const ChunkUpdate& c) {
  int64_t r = 0;
  for (; c.rows - r >= 5 || c.rows - r == 3; r += 3) UpdateRowsAvx2<3, T>(c, r);
  for (; c.rows - r >= 2; r += 2) UpdateRowsAvx2<2, T>(c, r);
  if (r < c.rows) UpdateRowsAvx2<1, T>(c, r);
}

// --------------------------------------------------------------- AVX-512 --

// GCC 12 reports the _mm512_undefined_*() placeholders inside several
// AVX-512 intrinsics (shuffles, unpacks) as uninitialized uses.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// Lanes [from, from + 16) of a row of `len` values: the mask of those below len.
inline __mmask16 LanesBelow(int64_t from, int64_t len) {
  const int64_t n = std::clamp<int64_t>(len - from, 0, 16);
  return static_cast<__mmask16>((1u << n) - 1);
}

// Sum of the 16 lanes of v, in a fixed order.
XRT_TARGET_AVX512 inline float ReduceAdd16(__m512 v) {
  const __m512 t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m256 t8 = _mm512_castps512_ps256(t);
  __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  t4 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
  t4 = _mm_add_ss(t4, _mm_movehdup_ps(t4));
  return _mm_cvtss_f32(t4);
}

// The reduction of the score accumulators (a key's 16 lanes, lane l the fma
// chain over d = l, l + 16, ...) to one sum per key, in a fixed tree: within
// each 128-bit lane (e0 + e2) + (e1 + e3), then the four lanes (L0 + L1) +
// (L2 + L3). UnpackAdd* and LaneAdd are its steps; KeySums16 takes 16 keys
// through them (Scores16Avx512's one row, each of ScoresRowsAvx512's rows)
// and Scores8x2Avx512 8 keys of two rows, so every key's sum is the same
// additions whichever it is.
//
// Pairs of keys x, y: per 128-bit lane [x0 + x2, y0 + y2, x1 + x3, y1 + y3].
XRT_TARGET_AVX512 inline __m512 UnpackAddPs(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_unpacklo_ps(x, y), _mm512_unpackhi_ps(x, y));
}
// Two such pairs (keys x, y and z, w): per 128-bit lane the four keys' sums.
XRT_TARGET_AVX512 inline __m512 UnpackAddPd(__m512 xy, __m512 zw) {
  const __m512d lo = _mm512_unpacklo_pd(_mm512_castps_pd(xy), _mm512_castps_pd(zw));
  const __m512d hi = _mm512_unpackhi_pd(_mm512_castps_pd(xy), _mm512_castps_pd(zw));
  return _mm512_add_ps(_mm512_castpd_ps(lo), _mm512_castpd_ps(hi));
}
// [x.L0 + x.L1, x.L2 + x.L3, y.L0 + y.L1, y.L2 + y.L3] (128-bit lanes).
XRT_TARGET_AVX512 inline __m512 LaneAdd(__m512 x, __m512 y) {
  return _mm512_add_ps(_mm512_shuffle_f32x4(x, y, 0x88), _mm512_shuffle_f32x4(x, y, 0xDD));
}
// The whole tree for 16 keys' accumulators: key j's sum in lane j.
XRT_TARGET_AVX512 inline __m512 KeySums16(const __m512 (&a)[16]) {
  __m512 b[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) b[i] = UnpackAddPs(a[2 * i], a[2 * i + 1]);
  __m512 c[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) c[i] = UnpackAddPd(b[2 * i], b[2 * i + 1]);
  return LaneAdd(LaneAdd(c[0], c[1]), LaneAdd(c[2], c[3]));
}

// The lanes of x under mask m as floats (the others 0): floats, or a kF16
// cache's halves or a kFp8E4M3 cache's codes converted exactly (as LoadOne),
// so that a decode reads a narrow cache's rows in place with the f32 path's
// arithmetic (Load8Avx2's conversions on 16 lanes).
XRT_TARGET_AVX512 inline __m512 Load16(const float* x, __mmask16 m) {
  return _mm512_maskz_loadu_ps(m, x);
}
XRT_TARGET_AVX512 inline __m512 Load16(const uint16_t* x, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x));
}
XRT_TARGET_AVX512 inline __m512 Load16(const uint8_t* x, __mmask16 m) {
  const __m256i high = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_maskz_loadu_epi8(m, x)), 8);
  return _mm512_mul_ps(_mm512_cvtph_ps(Fp8CodesAsHalves(high)), _mm512_set1_ps(256.0f));
}

// Key j's score accumulator: q (NV vectors, the last masked by `tail`)
// against the key at kj, one fma chain per lane.
template <int NV, typename T>
XRT_TARGET_AVX512 inline __m512 KeyLanes(const __m512* qv, const T* kj, __mmask16 tail) {
  __m512 acc = _mm512_mul_ps(qv[0], Load16(kj, NV == 1 ? tail : __mmask16(0xFFFF)));
#pragma GCC unroll 8
  for (int i = 1; i < NV; ++i) {
    acc = _mm512_fmadd_ps(qv[i], Load16(kj + 16 * i, i == NV - 1 ? tail : __mmask16(0xFFFF)), acc);
  }
  return acc;
}

template <int NV>
XRT_TARGET_AVX512 inline void LoadQuery(const float* q, __mmask16 tail, __m512* qv) {
#pragma GCC unroll 8
  for (int i = 0; i < NV; ++i) {
    qv[i] = _mm512_maskz_loadu_ps(i == NV - 1 ? tail : __mmask16(0xFFFF), q + 16 * i);
  }
}

// Scores of up to 16 keys at once with q held in registers: one accumulator
// per key, then the tree above, which leaves key j's sum in lane j. Key j's
// arithmetic depends only on j (its offset in the chunk, fixed by its
// absolute position), never on how many keys the chunk has: missing keys are
// computed on a copy of key 0 and dropped.
template <int NV, typename T>
XRT_TARGET_AVX512 void Scores16Avx512(const float* q, const T* const* k, int n, float scale,
                                      __mmask16 tail, float* s) {
  __m512 qv[NV];
  LoadQuery<NV>(q, tail, qv);
  const __m512 sv = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int cnt = std::min(16, n - j0);
    __m512 a[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) a[j] = KeyLanes<NV>(qv, k[j < cnt ? j0 + j : j0], tail);
    const __m512 e = KeySums16(a);
    const __mmask16 out = cnt == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << cnt) - 1);
    _mm512_mask_storeu_ps(s + j0, out, _mm512_mul_ps(e, sv));
  }
}

// Scores16Avx512 for two rows (q0 -> s0, q1 -> s1), 8 keys at a time: each
// key vector is loaded once for both rows (one row alone issues a load per
// fma, which bounds it). The same chains and tree, so the same bits per score.
// For NV <= 4 (2 x 8 accumulators, 2 x NV query vectors).
template <int NV, typename T>
XRT_TARGET_AVX512 void Scores8x2Avx512(const float* q0, const float* q1, const T* const* k, int n,
                                       float scale, __mmask16 tail, float* s0, float* s1) {
  static_assert(NV <= 4);
  __m512 qa[NV], qb[NV];
  LoadQuery<NV>(q0, tail, qa);
  LoadQuery<NV>(q1, tail, qb);
  const __m512 sv = _mm512_set1_ps(scale);
  for (int j0 = 0; j0 < n; j0 += 8) {
    const int cnt = std::min(8, n - j0);
    __m512 a[8], b[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const T* kj = k[j < cnt ? j0 + j : j0];
      __m512 kv = Load16(kj, NV == 1 ? tail : __mmask16(0xFFFF));
      XRT_KEEP_IN_REGISTER(kv);  // one load for both rows, not one folded into each fma
      __m512 x = _mm512_mul_ps(qa[0], kv), y = _mm512_mul_ps(qb[0], kv);
#pragma GCC unroll 4
      for (int i = 1; i < NV; ++i) {
        kv = Load16(kj + 16 * i, i == NV - 1 ? tail : __mmask16(0xFFFF));
        XRT_KEEP_IN_REGISTER(kv);
        x = _mm512_fmadd_ps(qa[i], kv, x);
        y = _mm512_fmadd_ps(qb[i], kv, y);
      }
      a[j] = x;
      b[j] = y;
    }
    __m512 pa[4], pb[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i) {
      pa[i] = UnpackAddPs(a[2 * i], a[2 * i + 1]);
      pb[i] = UnpackAddPs(b[2 * i], b[2 * i + 1]);
    }
    const __m512 da = LaneAdd(UnpackAddPd(pa[0], pa[1]), UnpackAddPd(pa[2], pa[3]));
    const __m512 db = LaneAdd(UnpackAddPd(pb[0], pb[1]), UnpackAddPd(pb[2], pb[3]));
    // Lanes 0-7: row 0's keys j0..j0+7; 8-15: row 1's.
    const __m512 e = _mm512_mul_ps(LaneAdd(da, db), sv);
    const __mmask16 out = static_cast<__mmask16>((1u << cnt) - 1);
    _mm512_mask_storeu_ps(s0 + j0, out, e);
    _mm512_mask_storeu_ps(s1 + j0, out, _mm512_shuffle_f32x4(e, e, 0x4E));  // lanes 8-15 down
  }
}

// Scores16Avx512 for R rows (q[r] -> s + r * kChunk), R * NV <= 16 query
// vectors held in registers: each key's NV vectors are loaded (and, from a
// narrow cache, converted) once for the R rows, where one row at a time
// loads them once per row (a load per fma, which bounds it). A key's R
// accumulators go to L1 and come back 16 keys at a time through
// Scores16Avx512's tree: the same chains and additions, so the same bits
// per score whatever R. For an f16 / fp8 cache's rows (converted per load)
// and head_dim > 64; a kF32 cache's head_dim <= 64 measured 5-27% slower
// this way than with Scores16Avx512 and Scores8x2Avx512 (bench/README.md).
template <int NV, int R, typename T>
XRT_TARGET_AVX512 void ScoresRowsAvx512(const float* const* q, const T* const* k, int n,
                                        float scale, __mmask16 tail, float* s) {
  static_assert(R * NV <= 16);
  __m512 qv[R][NV];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) LoadQuery<NV>(q[r], tail, qv[r]);
  const __m512 sv = _mm512_set1_ps(scale);
  __m512 lanes[R][16];  // in L1: R x 16 accumulators do not fit the registers
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int cnt = std::min(16, n - j0);
#pragma GCC unroll 2
    for (int j = 0; j < 16; ++j) {
      const T* kj = k[j < cnt ? j0 + j : j0];  // missing keys: copies of key 0, dropped
      __m512 kv[NV];
#pragma GCC unroll 8
      for (int i = 0; i < NV; ++i) {
        kv[i] = Load16(kj + 16 * i, i == NV - 1 ? tail : __mmask16(0xFFFF));
        XRT_KEEP_IN_REGISTER(kv[i]);  // one load for the R rows, not one folded into each fma
      }
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) {
        __m512 x = _mm512_mul_ps(qv[r][0], kv[0]);
#pragma GCC unroll 8
        for (int i = 1; i < NV; ++i) x = _mm512_fmadd_ps(qv[r][i], kv[i], x);
        lanes[r][j] = x;
      }
    }
    const __mmask16 out = cnt == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << cnt) - 1);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(s + r * kChunk + j0, out, _mm512_mul_ps(KeySums16(lanes[r]), sv));
    }
  }
}

// One key at a time, for head_dim > 128.
XRT_TARGET_AVX512 void ScoresWideAvx512(const float* q, const float* const* k, int n, int64_t dim,
                                        float scale, float* s) {
  for (int j = 0; j < n; ++j) {
    const float* kj = k[j];
    __m512 a = _mm512_setzero_ps();
    for (int64_t d = 0; d < dim; d += 16) {
      const __mmask16 m = LanesBelow(d, dim);
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
    const __mmask16 mask = LanesBelow(j, n);
    const __m512 p = _mm512_maskz_mov_ps(
        mask, ExpNonPositive16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), mv)));
    _mm512_mask_storeu_ps(s + j, mask, p);
    sum = _mm512_add_ps(sum, p);
  }
  return ReduceAdd16(sum);
}

XRT_TARGET_AVX512 float ScaleMaxAvx512(float* x, int n, float scale) {
  const __m512 sv = _mm512_set1_ps(scale);
  __m512 mx = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int j = 0; j < n; j += 16) {
    const __mmask16 mask = LanesBelow(j, n);
    const __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, x + j), sv);
    _mm512_mask_storeu_ps(x + j, mask, v);
    mx = _mm512_mask_max_ps(mx, mask, mx, v);
  }
  return _mm512_reduce_max_ps(mx);
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
// chains run side by side (one head alone is FMA-latency bound). `ahead`
// (if not null): the next chunk's K and V rows are asked for, key j's with
// value j's loads.
template <int NV, int G, typename T>
XRT_TARGET_AVX512 void AccumulateHeadsAvx512(float* acc, int64_t dim, const float* corr,
                                             const float* p, const T* const* v, int n,
                                             __mmask16 tail, const ChunkUpdate* ahead) {
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
  const int n_ahead = ahead ? ahead->n_ahead : 0;
  for (int j = 0; j < n; ++j) {
    if (j < n_ahead) {
      PrefetchAheadK(*ahead, j, j + 1);
      PrefetchAheadV(*ahead, j, j + 1);
    }
    const T* vj = v[j];
    __m512 vv[NV];
#pragma GCC unroll 8
    for (int i = 0; i < NV; ++i)
      vv[i] = Load16(vj + 16 * i, i == NV - 1 ? tail : __mmask16(0xFFFF));
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
  if (n < n_ahead) {
    PrefetchAheadK(*ahead, n, n_ahead);
    PrefetchAheadV(*ahead, n, n_ahead);
  }
}

// The whole chunk step for head_dim <= 16*NV: scores, max and exp per head,
// then the value accumulation for up to G_MAX heads at a time. T: the cache
// rows' type, floats or (a decode reading them in place) a kF16 cache's
// halves or a kFp8E4M3 cache's codes; the same arithmetic on the same
// values, so the same bits. (Where the rows were converted to floats first,
// that conversion took 47% of a 1024-key f16 decode's time, mostly waiting
// for the rows.) A narrow cache's next chunk is asked for over the first
// row group's value loop, a key's rows with each value row; a kF32 cache's
// (twice the lines) in one burst at the chunk's start, which measured
// faster for it and slower for f16 / fp8 rows (bench/README.md).
template <int NV, typename T>
XRT_TARGET_AVX512 void UpdateAvx512(const ChunkUpdate& c) {
  // Rows per group: their R * NV query vectors in registers for the scores
  // (ScoresRowsAvx512), G * NV accumulators for the values (<= 16).
  constexpr int k_max_heads = NV <= 4 ? 4 : 2;
  const int64_t last = c.dim - 16 * (NV - 1);
  const __mmask16 tail = last == 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << last) - 1);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  const T* const* k = RowsOf<T>(c, false);
  const T* const* v = RowsOf<T>(c, true);
  constexpr bool kSpreadPrefetch = !std::is_same_v<T, float>;
  if (!kSpreadPrefetch) PrefetchAhead(c);
  float corr[k_max_heads];
  for (int64_t g0 = 0; g0 < c.rows; g0 += k_max_heads) {
    const int heads = static_cast<int>(std::min<int64_t>(k_max_heads, c.rows - g0));
    const float* const* q = c.q + g0;
    if constexpr (std::is_same_v<T, float> && NV <= 4) {
      // A kF32 cache's rows: the chunk's first row alone, 16 keys at a time,
      // keeps the most loads in flight while the keys come from memory; the
      // rows after it find them in L1 and go in pairs.
      int h = 0;
      if (g0 == 0) Scores16Avx512<NV>(q[0], k, c.n, c.scale, tail, c.s), h = 1;
      for (; h + 1 < heads; h += 2) {
        Scores8x2Avx512<NV>(q[h], q[h + 1], k, c.n, c.scale, tail, c.s + h * kChunk,
                            c.s + (h + 1) * kChunk);
      }
      for (; h < heads; ++h) Scores16Avx512<NV>(q[h], k, c.n, c.scale, tail, c.s + h * kChunk);
    } else {
      switch (heads) {
        case 1:
          Scores16Avx512<NV>(q[0], k, c.n, c.scale, tail, c.s);
          break;
        case 2:
          ScoresRowsAvx512<NV, 2>(q, k, c.n, c.scale, tail, c.s);
          break;
        case 3:
          ScoresRowsAvx512<NV, k_max_heads >= 3 ? 3 : 1>(q, k, c.n, c.scale, tail, c.s);
          break;
        default:
          ScoresRowsAvx512<NV, k_max_heads>(q, k, c.n, c.scale, tail, c.s);
          break;
      }
    }
    for (int h = 0; h < heads; ++h) {
      const int64_t g = g0 + h;
      float* s = c.s + h * kChunk;
      __m512 mx = neg_inf;
      for (int j = 0; j < c.n; j += 16) {
        const __mmask16 m = LanesBelow(j, c.n);
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
    const ChunkUpdate* ahead = kSpreadPrefetch && g0 == 0 ? &c : nullptr;
    switch (heads) {
      case 1:
        AccumulateHeadsAvx512<NV, 1>(acc, c.dim, corr, c.s, v, c.n, tail, ahead);
        break;
      case 2:
        AccumulateHeadsAvx512<NV, k_max_heads >= 2 ? 2 : 1>(acc, c.dim, corr, c.s, v, c.n, tail,
                                                            ahead);
        break;
      case 3:
        AccumulateHeadsAvx512<NV, k_max_heads >= 3 ? 3 : 1>(acc, c.dim, corr, c.s, v, c.n, tail,
                                                            ahead);
        break;
      default:
        AccumulateHeadsAvx512<NV, k_max_heads>(acc, c.dim, corr, c.s, v, c.n, tail, ahead);
        break;
    }
  }
}

// ------------------------------------------------------ AVX-512 + BF16 --
// kBF16's two products for a few rows (a decode's heads of one kv head) on
// vdpbf16ps directly, without packing matmul weights: the same chains as the
// kBF16 matmul (one vdpbf16ps per pair, the odd element's product first, in
// increasing pair order), so the same bits as the rows of a prompt's tile.

// x[32c .. 32c + 32) (zeros past len) as 16 pairs (x[2i], x[2i + 1]).
XRT_TARGET_AVX512_BF16 inline __m512i PairsOf(const float* x, int64_t c, int64_t len) {
  return packed_simd::Bf16Words(
      _mm512_maskz_loadu_ps(LanesBelow(32 * c, len), x + 32 * c),
      _mm512_maskz_loadu_ps(LanesBelow(32 * c + 16, len), x + 32 * c + 16));
}

// f(std::integral_constant<int, N>) for N = n in 1 .. Max (Max for a larger n).
template <int Max, class F>
void WithCount(int n, F&& f) {
  if constexpr (Max > 1) {
    if (n < Max) return WithCount<Max - 1>(n, f);
  }
  f(std::integral_constant<int, Max>{});
}

// s[r * ld + j] = dot_bf16(q[r], key j), j < n (written up to a multiple of 16),
// over pairs of d; key j's values at k[j].
template <int R>
XRT_TARGET_AVX512_BF16 void ScoresBf16Rows(const float* const* q, const float* const* k, int n,
                                           int64_t dim, float* s, int64_t ld) {
  const int64_t pairs = (dim + 1) / 2, chunks = (dim + 31) / 32;
  alignas(64) uint32_t qp[R][kBf16MaxDim / 2];
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; c < chunks; ++c) _mm512_store_si512(qp[r] + 16 * c, PairsOf(q[r], c, dim));
  for (int j0 = 0; j0 < n; j0 += 16) {
    const int nb = std::min(16, n - j0);
    __m512 acc[R];
    for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      __m512i t[16];
      for (int j = 0; j < 16; ++j)
        t[j] = j < nb ? PairsOf(k[j0 + j], c, dim) : _mm512_setzero_si512();
      packed_simd::Transpose16x16Epi32(t);  // t[i]: pair 16c + i of the 16 keys
      const int64_t np = std::min<int64_t>(16, pairs - 16 * c);
      for (int64_t i = 0; i < np; ++i)
        for (int r = 0; r < R; ++r)
          acc[r] = packed_simd::DotBf16Pairs(
              acc[r], _mm512_set1_epi32(static_cast<int>(qp[r][16 * c + i])), t[i]);
    }
    for (int r = 0; r < R; ++r) _mm512_storeu_ps(s + r * ld + j0, acc[r]);
  }
}

// out[r * dim + d] = dot_bf16(p[r][0 .. n), v[.][d]) (pairs over the keys),
// for the NV vectors of d from d0 on.
template <int R, int NV>
XRT_TARGET_AVX512_BF16 void ValuesBf16Block(const uint32_t (*pp)[kBf16MaxDim / 2],
                                            const float* const* v, int n, int64_t dim, int64_t d0,
                                            float* out) {
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NV; ++b) acc[r][b] = _mm512_setzero_ps();
  for (int kk = 0; 2 * kk < n; ++kk) {
    const float* v0 = v[2 * kk];
    const float* v1 = 2 * kk + 1 < n ? v[2 * kk + 1] : nullptr;
    for (int b = 0; b < NV; ++b) {
      const __mmask16 m = LanesBelow(d0 + 16 * b, dim);
      const __m512 even = _mm512_maskz_loadu_ps(m, v0 + d0 + 16 * b);
      const __m512 odd = v1 ? _mm512_maskz_loadu_ps(m, v1 + d0 + 16 * b) : _mm512_setzero_ps();
      const __m512i vp = packed_simd::Bf16Pairs(even, odd);
      for (int r = 0; r < R; ++r)
        acc[r][b] = packed_simd::DotBf16Pairs(acc[r][b],
                                              _mm512_set1_epi32(static_cast<int>(pp[r][kk])), vp);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int b = 0; b < NV; ++b)
      _mm512_mask_storeu_ps(out + r * dim + d0 + 16 * b, LanesBelow(d0 + 16 * b, dim), acc[r][b]);
}

template <int R>
XRT_TARGET_AVX512_BF16 void ValuesBf16Rows(const float* const* p, const float* const* v, int n,
                                           int64_t dim, float* out) {
  alignas(64) uint32_t pp[R][kBf16MaxDim / 2];
  for (int r = 0; r < R; ++r)
    for (int64_t c = 0; 32 * c < n; ++c) _mm512_store_si512(pp[r] + 16 * c, PairsOf(p[r], c, n));
  for (int64_t d0 = 0; d0 < dim; d0 += 64) {
    WithCount<4>(static_cast<int>((dim - d0 + 15) / 16),
                 [&](auto nv) { ValuesBf16Block<R, decltype(nv)::value>(pp, v, n, dim, d0, out); });
  }
}

// The two for `rows` (<= kBf16RowsMax) rows.
void ScoresBf16Avx512(const float* const* q, int rows, const float* const* k, int n, int64_t dim,
                      float* s, int64_t ld) {
  WithCount<kBf16RowsMax>(rows,
                          [&](auto r) { ScoresBf16Rows<decltype(r)::value>(q, k, n, dim, s, ld); });
}
void ValuesBf16Avx512(const float* const* p, int rows, const float* const* v, int n, int64_t dim,
                      float* out) {
  WithCount<kBf16RowsMax>(rows,
                          [&](auto r) { ValuesBf16Rows<decltype(r)::value>(p, v, n, dim, out); });
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // __x86_64__

// The chunk step from the primitives of one ISA.
template <const Primitives& P>
void UpdateGeneric(const ChunkUpdate& c) {
  PrefetchAhead(c);
  for (int64_t g = 0; g < c.rows; ++g) {
    P.scores(c.q[g], c.k, c.n, c.dim, c.scale, c.s);
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
constexpr Primitives kAvx512Primitives{&ScoresAvx512, &ExpSumAvx512, &AccumulateAvx512};
#endif

// The chunk step of one ISA, the ones that read a kF16 / kFp8E4M3 cache's
// rows in place (if it has them), and the conversions of those caches.
struct ChunkKernels {
  UpdateFn update;
  UpdateFn update_halves = nullptr;  // null: the rows are converted to floats first
  UpdateFn update_fp8 = nullptr;     // the same
  void (*halves_to_floats)(const uint16_t*, int64_t, float*) = &ToFloatsScalar<uint16_t>;
  void (*fp8_to_floats)(const uint8_t*, int64_t, float*) = &ToFloatsScalar<uint8_t>;
  void (*to_halves)(const float*, int64_t, uint16_t*) = &FloatsToHalvesScalar;
  void (*to_fp8)(const float*, int64_t, uint8_t*) = &FloatsToFp8Scalar;
  void (*fold_row)(float*, const float*, int64_t, float, float) = &FoldRowScalar;
  // kBF16's: the ISA its matmuls run on and its softmax numerators.
  CpuIsa isa = CpuIsa::kScalar;
  float (*exp_sum)(float*, int, float) = &ExpSumScalar;
  float (*scale_max)(float*, int, float) = &ScaleMaxScalar;
  // kBF16's products for up to kBf16RowsMax rows without the matmul (null:
  // the ISA has no vdpbf16ps; the matmul then computes the same chains).
  void (*scores_bf16)(const float* const*, int, const float* const*, int, int64_t, float*,
                      int64_t) = nullptr;
  void (*values_bf16)(const float* const*, int, const float* const*, int, int64_t,
                      float*) = nullptr;
  // Where a decode's K/V rows are prefetched (PagedAttentionPrefetchesToL2).
  PrefetchTo prefetch_to = PrefetchTo::kL1;
};

#if defined(__x86_64__)
// UpdateAvx512<NV> on floats and, in place, on a kF16 / kFp8E4M3 cache's rows.
template <int NV>
ChunkKernels Avx512Updates() {
  return {&UpdateAvx512<NV, float>, &UpdateAvx512<NV, uint16_t>, &UpdateAvx512<NV, uint8_t>};
}
#endif

// The chunk step for `isa` and this head_dim.
ChunkKernels KernelsFor(CpuIsa isa, int64_t dim) {
#if defined(__x86_64__)
  if (IsaAtLeast(isa, CpuIsa::kAvx512)) {
    switch ((dim + 15) / 16) {
      case 1:
        return Avx512Updates<1>();
      case 2:
        return Avx512Updates<2>();
      case 3:
        return Avx512Updates<3>();
      case 4:
        return Avx512Updates<4>();
      case 5:
        return Avx512Updates<5>();
      case 6:
        return Avx512Updates<6>();
      case 7:
        return Avx512Updates<7>();
      case 8:
        return Avx512Updates<8>();
      default:
        return {&UpdateGeneric<kAvx512Primitives>};
    }
  }
  if (isa == CpuIsa::kAvx2)
    return {&UpdateAvx2<float>, &UpdateAvx2<uint16_t>, &UpdateAvx2<uint8_t>};
#endif
  return {&UpdateGeneric<kScalarPrimitives>};
}

// KernelsFor with the half conversions and the partition fold of the ISA
// (the results are the same on every path: the conversions are exact or
// correctly rounded, the fold's fma and multiply are single roundings).
ChunkKernels KernelsAndConversionsFor(CpuIsa isa, int64_t dim) {
  ChunkKernels k = KernelsFor(isa, dim);
  k.isa = isa;
#if defined(__x86_64__)
  // vdpbf16ps's direct products for a few rows; not on the amx tier, whose
  // kBF16 sums are TDPBF16PS's at every row count (matmul.h).
  if (IsaAtLeast(isa, CpuIsa::kAvx512Bf16) && !IsaAtLeast(isa, CpuIsa::kAmx)) {
    k.scores_bf16 = &ScoresBf16Avx512;
    k.values_bf16 = &ValuesBf16Avx512;
  }
  if (IsaAtLeast(isa, CpuIsa::kAvx512)) {
    k.exp_sum = &ExpSumAvx512;
    k.scale_max = &ScaleMaxAvx512;
  } else if (isa == CpuIsa::kAvx2) {
    k.exp_sum = &ExpSumAvx2;
    k.scale_max = &ScaleMaxAvx2;
  }
  if (isa != CpuIsa::kScalar) {
    k.halves_to_floats = &ToFloatsAvx2<uint16_t>;
    k.fp8_to_floats = &ToFloatsAvx2<uint8_t>;
    k.to_halves = &FloatsToHalvesAvx2;
    k.to_fp8 = &FloatsToFp8Avx2;
    k.fold_row = &FoldRowAvx2;
  }
#endif
  return k;
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
  if (a.kv_dtype != KvCacheDtype::kF32 && a.kv_dtype != KvCacheDtype::kF16 &&
      a.kv_dtype != KvCacheDtype::kFp8E4M3) {
    return InvalidArgumentError("paged attention: unknown kv cache dtype {}",
                                static_cast<int>(a.kv_dtype));
  }
  if (a.compute != ComputeType::kF32 && a.compute != ComputeType::kBF16) {
    return InvalidArgumentError("paged attention: compute type {} is not f32 or bf16",
                                ComputeTypeName(a.compute));
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

// Offset, in values, of the cache row of kv head kvh at position `offset`
// of block `block` (the header's layout).
inline int64_t CacheRow(const PagedAttentionArgs& a, int64_t block, int64_t kvh, int64_t offset) {
  return ((block * a.num_kv_heads + kvh) * a.block_size + offset) * a.head_dim;
}

void WriteKv(const PagedAttentionArgs& a, const ChunkKernels& kernels) {
  const int64_t dim = a.head_dim;
  for (int64_t t = 0; t < a.num_tokens; ++t) {
    const int64_t slot = a.slot_mapping[t];
    if (slot < 0) continue;
    for (int64_t kvh = 0; kvh < a.num_kv_heads; ++kvh) {
      const int64_t row = CacheRow(a, slot / a.block_size, kvh, slot % a.block_size);
      const float* k = a.k + t * a.k_stride + kvh * dim;
      const float* v = a.v + t * a.v_stride + kvh * dim;
      if (a.kv_dtype == KvCacheDtype::kF16) {
        kernels.to_halves(k, dim, static_cast<uint16_t*>(a.k_cache) + row);
        kernels.to_halves(v, dim, static_cast<uint16_t*>(a.v_cache) + row);
      } else if (a.kv_dtype == KvCacheDtype::kFp8E4M3) {
        kernels.to_fp8(k, dim, static_cast<uint8_t*>(a.k_cache) + row);
        kernels.to_fp8(v, dim, static_cast<uint8_t*>(a.v_cache) + row);
      } else {
        std::memcpy(static_cast<float*>(a.k_cache) + row, k, dim * sizeof(float));
        std::memcpy(static_cast<float*>(a.v_cache) + row, v, dim * sizeof(float));
      }
    }
  }
}

// Consecutive query tokens of one request, attended together.
struct Tile {
  int32_t t0, count, request;
};

// Where a tile's K/V rows are prefetched: a decode's (one token) come from
// DRAM, a step's weights having gone through the caches since, so the
// call's level; a prompt's tile reads each chunk for up to kTileRows rows,
// into L1 (into L2 its 512-token prompts ran up to 1.15x slower on Zen 4).
PrefetchTo KvPrefetchTo(const ChunkKernels& kernels, const Tile& tile) {
  return tile.count == 1 ? kernels.prefetch_to : PrefetchTo::kL1;
}

// Query rows per tile at most: tokens x query heads of a kv head. Rows of
// one tile share each chunk's K/V reads (and its block-table walk):
// 512-token prompts ran 10-15% faster with 48-96 rows than with 24.
constexpr int64_t kTileRows = 96;
// kBF16's: its tiles pack each partition's keys and values as matmul weights
// (once per tile), so more rows share one packing. 384 rows keep a
// partition's scores (384 KiB) in L2.
constexpr int64_t kTileRowsBf16 = 384;
// Work items ((tile, kv head) pairs) per thread at least, where the tokens
// allow it, so that a short prompt still keeps every thread busy.
constexpr int64_t kItemsPerThread = 4;
// Keys per partition (a multiple of kChunk): every row's keys are reduced
// partition by partition, [0, 256), [256, 512), ..., each from a fresh
// softmax state, and the partitions' states are folded in increasing order
// (flash-decoding's split-K). A long decode's partitions can then run on
// different threads, with the same arithmetic as on one.
constexpr int64_t kPartition = 4 * kChunk;
// The most floats of split partition states one call keeps (4 MiB).
constexpr int64_t kMaxPartialFloats = int64_t{1} << 20;

// Per-thread scratch, reused across items and calls (it only grows).
struct TileScratch {
  std::vector<float> s;         // the rows' scores of one chunk
  std::vector<float> state;     // a partition's state (RowStates) while folding
  std::vector<float> k32, v32;  // a kF16 cache's chunk as floats
  std::vector<const float*> q;
  // kBF16: the rows' queries [rows][dim], the partition's keys and transposed
  // values as matmul weights, its K / V rows (converted to floats in `row`;
  // on the amx tier, `zeros` past its last key).
  std::vector<float> qa, weights, row, zeros;
  std::vector<const float*> rows;
};

// One tile's rows (its tokens x the query heads of one kv head): token i
// sits at position pos0 + i and sees keys 0 .. pos0 + i.
struct TileRows {
  const Tile* tile;
  int64_t kvh, group, rows, pos0;

  TileRows(const PagedAttentionArgs& a, const Tile& t, int64_t kv_head)
      : tile(&t), kvh(kv_head), group(a.num_heads / a.num_kv_heads), rows(t.count * group) {
    const int32_t* qsl = a.query_start_loc;
    pos0 = a.seq_lens[t.request] - (qsl[t.request + 1] - qsl[t.request]) + (t.t0 - qsl[t.request]);
  }
  int64_t num_keys() const { return pos0 + tile->count; }  // the last token's
  int64_t num_partitions() const { return (num_keys() + kPartition - 1) / kPartition; }
  // The first token that sees a key of partition p.
  int64_t first_token(int64_t p) const { return std::max<int64_t>(0, p * kPartition - pos0); }
};

// The online-softmax state of a tile's rows, in one buffer of
// StateSize(rows, dim) floats: acc [rows][dim], m [rows] (running max of the
// scores), l [rows] (running sum of exp(score - m)).
int64_t StateSize(int64_t rows, int64_t dim) { return rows * (dim + 2); }
struct RowStates {
  float *acc, *m, *l;
  RowStates(float* buf, int64_t rows, int64_t dim)
      : acc(buf), m(buf + rows * dim), l(buf + rows * dim + rows) {}
};

// A chunk's n K and V rows (rows[0] / rows[1], as bytes) as typed pointers
// k / v (T: floats, halves or e4m3 codes); with to_floats, also converted to
// floats into k32 / v32 (rows dim apart), which kp / vp then point at. One
// loop per cache type, so that the pointer arrays stay in registers.
template <typename T>
void PlaceRows(const char* const (&rows)[2][kChunk], int n, int64_t dim,
               void (*to_floats)(const T*, int64_t, float*), const T** k, const T** v, float* k32,
               float* v32, const float** kp, const float** vp) {
  for (int j = 0; j < n; ++j) {
    k[j] = reinterpret_cast<const T*>(rows[0][j]);
    v[j] = reinterpret_cast<const T*>(rows[1][j]);
  }
  if (!to_floats) return;
  for (int j = 0; j < n; ++j) {
    to_floats(k[j], dim, k32 + j * dim);
    to_floats(v[j], dim, v32 + j * dim);
    kp[j] = k32 + j * dim;
    vp[j] = v32 + j * dim;
  }
}

// A cache row of `dim` values (floats, halves or e4m3 codes) as floats: in
// place for a kF32 cache, else converted into `buf`.
const float* RowAsFloats(const ChunkKernels& kernels, KvCacheDtype dtype, const char* row,
                         int64_t dim, float* buf) {
  switch (dtype) {
    case KvCacheDtype::kF16:
      kernels.halves_to_floats(reinterpret_cast<const uint16_t*>(row), dim, buf);
      return buf;
    case KvCacheDtype::kFp8E4M3:
      kernels.fp8_to_floats(reinterpret_cast<const uint8_t*>(row), dim, buf);
      return buf;
    case KvCacheDtype::kF32:
      break;
  }
  return reinterpret_cast<const float*>(row);
}

// kBF16's partition p of the tile's rows into `state` (see the header): the
// rows of the tokens that see one of its keys get the partition's own state,
// the other rows are not touched. Many rows (a prompt's tile): the keys and
// the transposed values are packed as matmul weights (matmul.h's panels) and
// the two products are kBF16 matmuls over all of those rows at once. A few
// (a decode's heads): ScoresBf16Rows / ValuesBf16Rows, the same chains. A
// row's arithmetic depends only on its query and the keys it sees, since a
// matmul's output depends only on its row and column and the numerators past
// a row's last key are +0.
void AttendPartitionBf16(const PagedAttentionArgs& a, const ChunkKernels& kernels,
                         const TileRows& t, int64_t p, TileScratch& scratch, float* state) {
  const Tile& tile = *t.tile;
  const int64_t dim = a.head_dim, group = t.group;
  const int64_t i0 = t.first_token(p), r0 = i0 * group, rows = t.rows - r0;
  const int64_t start = p * kPartition, keys = std::min(t.num_keys(), start + kPartition) - start;
  const int32_t* table = a.block_tables + tile.request * a.max_blocks_per_req;
  const int64_t elem = KvCacheElementBytes(a.kv_dtype);
  const char* k_cache = static_cast<const char*>(a.k_cache);
  const char* v_cache = static_cast<const char*>(a.v_cache);

  auto row_at = [&](int64_t pos) {
    return CacheRow(a, table[pos / a.block_size], t.kvh, pos % a.block_size) * elem;
  };
  const PrefetchTo to = KvPrefetchTo(kernels, tile);
  // The K and V rows kAhead keys on are asked for while a row is read (a
  // decode step's K/V come from DRAM).
  constexpr int64_t kAhead = 8;
  auto prefetch = [&](int64_t pos) {
    const char* rows[2] = {k_cache + row_at(pos), v_cache + row_at(pos)};
    PrefetchRows(rows, dim * elem, 0, 2, to);
  };
  for (int64_t j = 0; j < std::min(kAhead, keys); ++j) prefetch(start + j);
  // The keys of the products: on the amx tier every partition is a whole
  // kPartition, zero rows past its last key. TDPBF16PS's sums are not the
  // chain's (matmul.h), so the values product must run the same k-steps for
  // a row whatever the tile's last key is: over 256 keys, a row's sums are
  // the same instructions on the same operands alone or in any tile.
  const bool whole = IsaAtLeast(kernels.isa, CpuIsa::kAmx);
  const int64_t padded = whole ? kPartition : keys;
  // The rows as floats (a kF32 cache's in place, the others converted).
  scratch.row.resize(2 * keys * dim);  // (not touched for a kF32 cache)
  scratch.rows.resize(2 * padded);
  const float** k_rows = scratch.rows.data();
  const float** v_rows = k_rows + padded;
  if (whole) {
    scratch.zeros.assign(dim, 0.0f);
    std::fill(k_rows + keys, k_rows + padded, scratch.zeros.data());
    std::fill(v_rows + keys, v_rows + padded, scratch.zeros.data());
  }
  for (int64_t j = 0; j < keys; ++j) {
    const int64_t row = row_at(start + j);
    if (j + kAhead < keys) prefetch(start + j + kAhead);
    float* buf = scratch.row.data();
    k_rows[j] = RowAsFloats(kernels, a.kv_dtype, k_cache + row, dim, buf + j * dim);
    v_rows[j] = RowAsFloats(kernels, a.kv_dtype, v_cache + row, dim, buf + (keys + j) * dim);
  }
  // A few rows (a decode's heads) run the chains on vdpbf16ps directly where
  // the ISA has it; more share the packed weights through the matmul. The same
  // bits either way.
  const bool direct = kernels.scores_bf16 && rows <= kBf16DirectRows && dim <= kBf16MaxDim;
  HeadWeights w{};
  if (!direct) w = PackHeadWeightsBf16(k_rows, v_rows, padded, dim, kernels.isa, &scratch.weights);

  // The rows' queries, consecutive (token i's group of heads is already).
  scratch.qa.resize(rows * dim);
  const int64_t h0 = t.kvh * group;
  for (int64_t i = i0; i < tile.count; ++i) {
    std::memcpy(scratch.qa.data() + (i - i0) * group * dim,
                a.q + (tile.t0 + i) * a.q_stride + h0 * dim, group * dim * sizeof(float));
  }
  const int64_t ld = (padded + 15) / 16 * 16;
  scratch.s.resize(rows * ld);
  float* s = scratch.s.data();
  RowStates st(state, t.rows, dim);
  // Row r0 + r's query, scores / numerators and output.
  auto q_at = [&](int64_t r) { return scratch.qa.data() + r * dim; };
  auto s_at = [&](int64_t r) { return s + r * ld; };
  auto out_at = [&](int64_t r) { return st.acc + (r0 + r) * dim; };
  MatmulArgs m;
  m.compute = ComputeType::kBF16;
  m.w_format = w.format;
  if (direct) {
    for (int64_t r = 0; r < rows; r += kBf16RowsMax) {
      const int n = static_cast<int>(std::min<int64_t>(kBf16RowsMax, rows - r));
      const float* q[kBf16RowsMax];
      for (int i = 0; i < n; ++i) q[i] = q_at(r + i);
      kernels.scores_bf16(q, n, k_rows, static_cast<int>(keys), dim, s_at(r), ld);
    }
  } else {
    m.a = q_at(0);
    m.lda = dim;
    m.packed_w = w.keys;
    m.c = s;
    m.ldc = ld;
    m.m = rows;
    m.n = keys;
    m.k = dim;
    MatmulWithIsa(m, nullptr, kernels.isa);
  }

  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r / group;
    const int n = static_cast<int>(std::min(t.pos0 + i + 1 - start, keys));
    float* x = s_at(r);
    const float mx = kernels.scale_max(x, n, a.scale);
    st.m[r0 + r] = mx;
    st.l[r0 + r] = kernels.exp_sum(x, n, mx);
    std::fill(x + n, x + padded, 0.0f);
  }
  if (direct) {
    for (int64_t r = 0; r < rows; r += kBf16RowsMax) {
      const int n = static_cast<int>(std::min<int64_t>(kBf16RowsMax, rows - r));
      const float* p[kBf16RowsMax];
      for (int i = 0; i < n; ++i) p[i] = s_at(r + i);
      kernels.values_bf16(p, n, v_rows, static_cast<int>(keys), dim, out_at(r));
    }
    return;
  }
  m.a = s;
  m.lda = ld;
  m.packed_w = w.values;
  m.c = out_at(0);
  m.ldc = dim;
  m.n = dim;
  m.k = padded;
  MatmulWithIsa(m, nullptr, kernels.isa);
}

// Partition p of the tile's rows into `state`: the rows of the tokens that
// see one of its keys (from first_token(p) on) start from a fresh state and
// go through its 64-key chunks in order; the other rows are not touched.
// Each chunk is one update for all the rows whose tokens see it whole, and
// one per remaining token for its part of it, so every row goes through
// exactly the steps it would alone (see the header's batch invariance).
void AttendPartition(const PagedAttentionArgs& a, const ChunkKernels& kernels, const TileRows& t,
                     int64_t p, TileScratch& scratch, float* state) {
  if (a.compute == ComputeType::kBF16) return AttendPartitionBf16(a, kernels, t, p, scratch, state);
  const Tile& tile = *t.tile;
  const int64_t dim = a.head_dim, group = t.group, pos0 = t.pos0;
  const int64_t i0 = t.first_token(p);
  const int32_t* table = a.block_tables + tile.request * a.max_blocks_per_req;
  const KvCacheDtype dtype = a.kv_dtype;
  const int64_t elem = KvCacheElementBytes(dtype);
  const char* k_cache = static_cast<const char*>(a.k_cache);
  const char* v_cache = static_cast<const char*>(a.v_cache);

  RowStates st(state, t.rows, dim);
  std::fill(st.acc + i0 * group * dim, st.acc + t.rows * dim, 0.0f);
  std::fill(st.m + i0 * group, st.m + t.rows, -std::numeric_limits<float>::infinity());
  std::fill(st.l + i0 * group, st.l + t.rows, 0.0f);
  scratch.s.resize(t.rows * kChunk);
  scratch.q.resize(t.rows);
  const int64_t h0 = t.kvh * group;
  for (int64_t i = 0; i < tile.count; ++i) {
    for (int64_t g = 0; g < group; ++g) {
      scratch.q[i * group + g] = a.q + (tile.t0 + i) * a.q_stride + (h0 + g) * dim;
    }
  }

  const float* kp[kChunk];
  const float* vp[kChunk];
  const uint16_t* k_half[kChunk];
  const uint16_t* v_half[kChunk];
  const uint8_t* k_fp8[kChunk];
  const uint8_t* v_fp8[kChunk];
  // The K and V rows (as bytes) of a chunk and of the one after it.
  const char* rows[2][2][kChunk];
  // A kF16 / kFp8E4M3 cache's rows are read in place by a decode step (one
  // token: each row is read once, by its group's rows) where the ISA can;
  // otherwise (a prompt's rows read each one once per row block) converted
  // to floats once per chunk.
  const UpdateFn in_place = dtype == KvCacheDtype::kF16       ? kernels.update_halves
                            : dtype == KvCacheDtype::kFp8E4M3 ? kernels.update_fp8
                                                              : nullptr;
  const UpdateFn update = tile.count == 1 && in_place ? in_place : kernels.update;
  const bool to_floats = dtype != KvCacheDtype::kF32 && update == kernels.update;
  if (to_floats) {
    scratch.k32.resize(kChunk * dim);
    scratch.v32.resize(kChunk * dim);
  }
  ChunkUpdate c;
  c.k = kp;
  c.v = vp;
  c.k_half = k_half;
  c.v_half = v_half;
  c.k_fp8 = k_fp8;
  c.v_fp8 = v_fp8;
  c.dim = dim;
  c.scale = a.scale;
  c.row_bytes = dim * elem;
  c.prefetch_to = KvPrefetchTo(kernels, tile);
  // Rows [r0, r0 + n_rows) against the chunk's first n keys, asking for the
  // next chunk's n_ahead rows if it is the chunk's last update.
  auto run = [&](int64_t r0, int64_t n_rows, int n, int n_ahead) {
    c.q = scratch.q.data() + r0;
    c.n = n;
    c.rows = n_rows;
    c.m = st.m + r0;
    c.l = st.l + r0;
    c.acc = st.acc + r0 * dim;
    c.s = scratch.s.data() + r0 * kChunk;
    c.n_ahead = n_ahead;
    update(c);
  };
  // The K and V rows of keys [from, from + n) into k_rows / v_rows, a
  // block's run of consecutive rows at a time.
  auto find_rows = [&](int64_t from, int n, const char** k_rows, const char** v_rows) {
    for (int j = 0; j < n;) {
      const int64_t block = (from + j) / a.block_size, offset = (from + j) % a.block_size;
      const int64_t row = CacheRow(a, table[block], t.kvh, offset) * elem;
      const int run = static_cast<int>(std::min<int64_t>(n - j, a.block_size - offset));
      for (int i = 0; i < run; ++i, ++j) {
        k_rows[j] = k_cache + row + i * c.row_bytes;
        v_rows[j] = v_cache + row + i * c.row_bytes;
      }
    }
  };
  const int64_t end = std::min(t.num_keys(), (p + 1) * kPartition);
  // The first chunk's rows, all asked for at once: a decode step finds its
  // K/V out of cache (a whole step of weights went through since). Each
  // chunk then asks for the next one's (past the partition's end too, for
  // the next partition of the item) while it computes.
  int cur = 0;
  const int first = static_cast<int>(std::min<int64_t>(kChunk, end - p * kPartition));
  find_rows(p * kPartition, first, rows[cur][0], rows[cur][1]);
  PrefetchRows(rows[cur][0], c.row_bytes, 0, first, c.prefetch_to);
  PrefetchRows(rows[cur][1], c.row_bytes, 0, first, c.prefetch_to);
  for (int64_t start = p * kPartition; start < end; start += kChunk) {
    const int n = static_cast<int>(std::min<int64_t>(kChunk, end - start));
    const int n_ahead =
        static_cast<int>(std::clamp<int64_t>(t.num_keys() - start - kChunk, 0, kChunk));
    find_rows(start + kChunk, n_ahead, rows[1 - cur][0], rows[1 - cur][1]);
    c.ahead_k = rows[1 - cur][0];
    c.ahead_v = rows[1 - cur][1];
    float* k32 = scratch.k32.data();
    float* v32 = scratch.v32.data();
    switch (dtype) {
      case KvCacheDtype::kF16:
        PlaceRows(rows[cur], n, dim, to_floats ? kernels.halves_to_floats : nullptr, k_half, v_half,
                  k32, v32, kp, vp);
        break;
      case KvCacheDtype::kFp8E4M3:
        PlaceRows(rows[cur], n, dim, to_floats ? kernels.fp8_to_floats : nullptr, k_fp8, v_fp8, k32,
                  v32, kp, vp);
        break;
      case KvCacheDtype::kF32:
        PlaceRows<float>(rows[cur], n, dim, nullptr, kp, vp, k32, v32, kp, vp);
        break;
    }
    cur = 1 - cur;
    // Tokens from `whole` on see all kChunk keys (or, in the last chunk, all
    // n); the ones before see start .. their position, if anything.
    const int64_t whole = std::max<int64_t>(0, start + n - 1 - pos0);
    for (int64_t i = std::max<int64_t>(0, start - pos0); i < whole; ++i) {
      run(i * group, group, static_cast<int>(pos0 + i - start + 1), 0);
    }
    if (whole < tile.count) run(whole * group, (tile.count - whole) * group, n, n_ahead);
  }
}

// Folds partition p's state (`part`) into the running state of the
// partitions before it (`into`), for the rows of the tokens that see p:
// both rescaled to the larger max, then added. Always in increasing p, so
// the result does not depend on where each partition was computed.
void FoldPartition(const ChunkKernels& kernels, const TileRows& t, int64_t p, int64_t dim,
                   float* part, float* into) {
  RowStates from(part, t.rows, dim), to(into, t.rows, dim);
  for (int64_t r = t.first_token(p) * t.group; r < t.rows; ++r) {
    const float m = std::max(to.m[r], from.m[r]);
    const float c_to = std::exp(to.m[r] - m), c_from = std::exp(from.m[r] - m);
    to.l[r] = std::fma(from.l[r], c_from, to.l[r] * c_to);
    to.m[r] = m;
    kernels.fold_row(to.acc + r * dim, from.acc + r * dim, dim, c_to, c_from);
  }
}

// out = acc / l for the tile's rows.
void WriteRows(const PagedAttentionArgs& a, const TileRows& t, float* state) {
  const int64_t dim = a.head_dim;
  RowStates st(state, t.rows, dim);
  for (int64_t i = 0; i < t.tile->count; ++i) {
    float* out = a.out + (t.tile->t0 + i) * a.out_stride + t.kvh * t.group * dim;
    for (int64_t g = 0; g < t.group; ++g) {
      const int64_t r = i * t.group + g;
      const float inv = 1.0f / st.l[r];
      for (int64_t d = 0; d < dim; ++d) out[g * dim + d] = st.acc[r * dim + d] * inv;
    }
  }
}

// A work item: a tile's rows for one kv head, all of its partitions
// (part = -1: folded and written out by the item) or partition `part` alone
// (its state left in `state` for the caller to fold).
struct Item {
  int32_t tile, kvh, part;
  int64_t keys;   // the most keys one of its rows sees (for the schedule)
  int64_t state;  // a partition's: where in the call's partial states its state goes
};

}  // namespace

Status PagedAttentionWithIsa(const PagedAttentionArgs& args, ThreadPool* pool, CpuIsa isa) {
  XRT_RETURN_IF_ERROR(Validate(args));
  if (args.num_tokens == 0) return Status::Ok();
  ChunkKernels kernels = KernelsAndConversionsFor(isa, args.head_dim);
  kernels.prefetch_to = PagedAttentionPrefetchesToL2() ? PrefetchTo::kL2 : PrefetchTo::kL1;
  WriteKv(args, kernels);

  // Tokens no request owns (a bucket's padding) get zeros; the work items
  // are the owned tokens' tiles only, so a decode step in a bucket of 16
  // hands out num_kv_heads items, not 16 times as many.
  std::vector<bool> owned(args.num_tokens, false);
  std::vector<Tile> tiles;
  const int threads = pool ? pool->num_threads() : 1;
  const int64_t kv_heads = args.num_kv_heads, dim = args.head_dim;
  const int64_t group = args.num_heads / kv_heads;
  const int64_t min_tiles = (kItemsPerThread * threads + kv_heads - 1) / kv_heads;
  const int64_t tile_rows = args.compute == ComputeType::kBF16 ? kTileRowsBf16 : kTileRows;
  const int64_t queries =  // query_start_loc may be null with no request rows
      args.max_num_reqs > 0 ? args.query_start_loc[args.max_num_reqs] - args.query_start_loc[0] : 0;
  const int32_t tile_tokens =
      static_cast<int32_t>(std::max<int64_t>(1, std::min(tile_rows / group, queries / min_tiles)));
  for (int64_t r = 0; r < args.max_num_reqs; ++r) {
    const int32_t begin = args.query_start_loc[r], end = args.query_start_loc[r + 1];
    for (int32_t t = begin; t < end; t += tile_tokens) {
      tiles.push_back({t, std::min(tile_tokens, end - t), static_cast<int32_t>(r)});
    }
    std::fill(owned.begin() + begin, owned.begin() + end, true);
  }
  for (int64_t t = 0; t < args.num_tokens; ++t) {
    if (!owned[t]) {
      std::memset(args.out + t * args.out_stride, 0,
                  args.num_heads * args.head_dim * sizeof(float));
    }
  }

  // A tile whose rows carry more than a 2 * threads-th of the work (rows x
  // keys) has its partitions run as separate items (a long decode alone, or
  // next to short ones), the caller folding them afterwards; the others are
  // one item per kv head. The same arithmetic either way: a choice of speed.
  // The split states stay under kMaxPartialFloats (a 96-row prompt tile at
  // 32k keys would need 50 MB; a decode at 32k with 8 kv heads needs 2 MB).
  double total_work = 0;
  for (const Tile& tile : tiles)
    total_work += double(tile.count) * TileRows(args, tile, 0).num_keys();
  thread_local std::vector<float> partials;  // the split items' states
  int64_t partial_floats = 0;
  std::vector<Item> items;
  for (size_t i = 0; i < tiles.size(); ++i) {
    const TileRows t(args, tiles[i], 0);
    const int64_t parts = t.num_partitions(), size = StateSize(t.rows, dim);
    const bool split = threads > 1 && parts > 1 &&
                       2.0 * threads * tiles[i].count * t.num_keys() > total_work &&
                       partial_floats + kv_heads * parts * size <= kMaxPartialFloats;
    for (int32_t kvh = 0; kvh < kv_heads; ++kvh) {
      if (!split) {
        items.push_back({static_cast<int32_t>(i), kvh, -1, t.num_keys(), -1});
        continue;
      }
      for (int32_t p = 0; p < parts; ++p) {
        const int64_t keys = std::min(t.num_keys(), (p + 1) * kPartition) - p * kPartition;
        items.push_back({static_cast<int32_t>(i), kvh, p, keys, partial_floats});
        partial_floats += size;
      }
    }
  }
  partials.resize(partial_floats);
  // The caller's: `partials` named on a pool thread would be that thread's.
  float* const states = partials.data();
  // The items that see the most keys first, so that the threads' last
  // items are short ones.
  std::sort(items.begin(), items.end(), [](const Item& x, const Item& y) {
    if (x.keys != y.keys) return x.keys > y.keys;
    return std::tie(x.tile, x.kvh, x.part) < std::tie(y.tile, y.kvh, y.part);
  });

  auto run = [&](int64_t begin, int64_t end) {
    // Each thread's own, kept across calls: a decode step's attention is a
    // few microseconds, which allocating and zeroing the scratch would double.
    thread_local TileScratch scratch;
    for (int64_t i = begin; i < end; ++i) {
      const Item& item = items[i];
      const TileRows t(args, tiles[item.tile], item.kvh);
      if (item.part >= 0) {
        AttendPartition(args, kernels, t, item.part, scratch, states + item.state);
        continue;
      }
      const int64_t size = StateSize(t.rows, dim);
      scratch.state.resize(2 * size);
      float* total = scratch.state.data();
      AttendPartition(args, kernels, t, 0, scratch, total);
      for (int64_t p = 1; p < t.num_partitions(); ++p) {
        AttendPartition(args, kernels, t, p, scratch, total + size);
        FoldPartition(kernels, t, p, dim, total + size, total);
      }
      WriteRows(args, t, total);
    }
  };
  const int64_t num_items = static_cast<int64_t>(items.size());
  if (threads <= 1) {
    run(0, num_items);
  } else {
    pool->ParallelForGrain(num_items, std::max<int64_t>(1, num_items / (16 * threads)), run);
  }
  // The split tiles' partitions, folded in order (a tile's partitions for one
  // kv head are consecutive states, from its partition 0's).
  for (const Item& item : items) {
    if (item.part != 0) continue;
    const TileRows t(args, tiles[item.tile], item.kvh);
    const int64_t size = StateSize(t.rows, dim);
    float* state = states + item.state;
    for (int64_t p = 1; p < t.num_partitions(); ++p) {
      FoldPartition(kernels, t, p, dim, state + p * size, state);
    }
    WriteRows(args, t, state);
  }
  return Status::Ok();
}

Status PagedAttention(const PagedAttentionArgs& args, ThreadPool* pool) {
  return PagedAttentionWithIsa(args, pool, BestCpuIsa());
}

namespace {
std::atomic<StreamPrefetch> g_kv_prefetch{StreamPrefetch::kAuto};
}  // namespace

bool PagedAttentionPrefetchesToL2() {
  return StreamPrefetchIsL2(g_kv_prefetch.load(std::memory_order_relaxed));
}

void SetPagedAttentionPrefetch(StreamPrefetch where) {
  g_kv_prefetch.store(where, std::memory_order_relaxed);
}

}  // namespace xrt
