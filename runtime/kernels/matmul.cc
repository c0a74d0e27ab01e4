#include "runtime/kernels/matmul.h"

#include "runtime/kernels/matmul_int8.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/kernels/amx.h"
#include "runtime/kernels/packed_simd.h"
#include "runtime/kernels/simd.h"

namespace xrt {

int64_t PackedWeightFloats(int64_t N, int64_t K) {
  return (N + kPackNR - 1) / kPackNR * kPackNR * K;
}

namespace {

// The packers read rows or columns one after the other, each often KiBs past
// the last: the one kPackAhead on is asked for while one is copied.
constexpr int64_t kPackAhead = 8;

// Rows rows[0 .. n) (n <= 16) of K floats into columns [0, 16) of a panel's
// k-rows (out[k * kPackNR + j]), columns from n on zeros.
void PackRowBlockScalar(const float* const* rows, int n, int64_t K, float* out) {
  for (int j = 0; j < 16; ++j)
    for (int64_t k = 0; k < K; ++k) out[k * kPackNR + j] = j < n ? rows[j][k] : 0.0f;
}

#if defined(__x86_64__)
// (GCC 12 reports the _mm512_undefined_*() placeholders inside the
// transpose's shuffles as uninitialized uses, as in the kernels below.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The same on 16 x 16 blocks transposed in registers.
XRT_TARGET_AVX512 void PackRowBlockAvx512(const float* const* rows, int n, int64_t K, float* out) {
  for (int64_t k0 = 0; k0 < K; k0 += 16) {
    const int64_t cols = std::min<int64_t>(16, K - k0);
    const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1);
    __m512i r[16];
    for (int j = 0; j < 16; ++j)
      r[j] = _mm512_castps_si512(j < n ? _mm512_maskz_loadu_ps(mask, rows[j] + k0)
                                       : _mm512_setzero_ps());
    packed_simd::Transpose16x16Epi32(r);
    for (int64_t c = 0; c < cols; ++c)
      _mm512_storeu_ps(out + (k0 + c) * kPackNR, _mm512_castsi512_ps(r[c]));
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

}  // namespace

void PackWeightRows(const float* const* rows, int64_t N, int64_t K, float* out) {
  if (K == 0) return;  // nothing to write (and `out` may be null)
  auto block = &PackRowBlockScalar;
#if defined(__x86_64__)
  static const bool avx512 = IsaAtLeast(BestCpuIsa(), CpuIsa::kAvx512);
  if (avx512) block = &PackRowBlockAvx512;
#endif
  for (int64_t j0 = 0; j0 < (N + kPackNR - 1) / kPackNR * kPackNR; j0 += 16) {
    for (int64_t j = j0 + 16; j < std::min(N, j0 + 16 + kPackAhead); ++j)
      for (int64_t k = 0; k < K; k += 16) __builtin_prefetch(rows[j] + k);
    const int n = static_cast<int>(std::clamp<int64_t>(N - j0, 0, 16));
    block(rows + std::min(j0, N), n, K, out + j0 / kPackNR * kPackNR * K + j0 % kPackNR);
  }
}

void PackWeightColumns(const float* const* cols, int64_t N, int64_t K, float* out) {
  for (int64_t j0 = 0; j0 < N; j0 += kPackNR) {
    float* panel = out + j0 * K;
    const int64_t n = std::min<int64_t>(kPackNR, N - j0);
    for (int64_t k = 0; k < K; ++k) {
      if (k + kPackAhead < K)
        for (int64_t j = 0; j < n; j += 16) __builtin_prefetch(cols[k + kPackAhead] + j0 + j);
      if (n == kPackNR) {  // a whole panel: a copy of constant size, inlined
        std::memcpy(panel + k * kPackNR, cols[k] + j0, kPackNR * sizeof(float));
        continue;
      }
      std::memcpy(panel + k * kPackNR, cols[k] + j0, n * sizeof(float));
      std::fill(panel + k * kPackNR + n, panel + (k + 1) * kPackNR, 0.0f);
    }
  }
}

namespace {

// Room in `buf` (grown as needed) for PackHeadWeights(Bf16)'s two weights in
// `format`, keys [n][dim] and values [dim][n], each 64-byte aligned: returns
// where the keys go; the values go `*values_at` floats further.
float* HeadWeightsRoom(int64_t n, int64_t dim, WeightFormat format, std::vector<float>* buf,
                       int64_t* values_at) {
  constexpr int64_t kAlign = 64 / sizeof(float);
  *values_at = (PackedWeightBytes(format, n, dim) / 4 + kAlign - 1) / kAlign * kAlign;
  buf->resize(*values_at + PackedWeightBytes(format, dim, n) / 4 + kAlign);
  float* w = buf->data();
  return w + (kAlign - reinterpret_cast<uintptr_t>(w) / sizeof(float) % kAlign) % kAlign;
}

}  // namespace

HeadWeights PackHeadWeights(const float* const* k_rows, const float* const* v_rows, int64_t n,
                            int64_t dim, std::vector<float>* buf) {
  int64_t values_at;
  float* w = HeadWeightsRoom(n, dim, WeightFormat::kF32, buf, &values_at);
  PackWeightRows(k_rows, n, dim, w);
  PackWeightColumns(v_rows, dim, n, w + values_at);
  return {w, w + values_at};
}

void PackWeights(const float* w, int64_t N, int64_t K, float* out) {
  std::vector<const float*> rows(N);
  for (int64_t j = 0; j < N; ++j) rows[j] = w + j * K;
  PackWeightRows(rows.data(), N, K, out);
}

const char* ComputeTypeName(ComputeType c) {
  switch (c) {
    case ComputeType::kBF16:
      return "bf16";
    case ComputeType::kInt8:
      return "int8";
    default:
      return "f32";
  }
}

bool ComputeTypeFromName(const std::string& name, ComputeType* out) {
  if (name == "f32") {
    *out = ComputeType::kF32;
  } else if (name == "bf16") {
    *out = ComputeType::kBF16;
  } else if (name == "int8") {
    *out = ComputeType::kInt8;
  } else {
    return false;
  }
  return true;
}

namespace {

// kBF16's flush to zero (matmul.h) of a result: below 2^-126 in magnitude, a
// zero of its sign.
inline float FlushTiny(float x) {
  return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x;
}

// While alive, this thread's SSE / AVX arithmetic flushes tiny results to
// zero (MXCSR.FTZ, x86's tininess after rounding): how every kBF16 path but
// the scalar one (FlushTiny) meets the contract's flush. Restores MXCSR.
class FlushToZeroScope {
 public:
  explicit FlushToZeroScope(bool on) {
#if defined(__x86_64__)
    if (on) {
      saved_ = _mm_getcsr();
      _mm_setcsr(saved_ | 0x8000u);
      active_ = true;
    }
#else
    (void)on;
#endif
  }
  ~FlushToZeroScope() {
#if defined(__x86_64__)
    if (active_) _mm_setcsr(saved_);
#endif
  }
  FlushToZeroScope(const FlushToZeroScope&) = delete;
  FlushToZeroScope& operator=(const FlushToZeroScope&) = delete;

 private:
  unsigned saved_ = 0;
  bool active_ = false;
};

// The decoded block's k-rows [0, rows) in kBF16's chain order (rows is even:
// k-blocks start at even k): each pair of rows swapped, every value rounded
// to a bf16 operand.
void Bf16ChainOrderPortable(float* x, int64_t rows) {
  for (int64_t r = 0; r < rows; r += 2) {
    float* lo = x + r * kPackNR;
    float* hi = lo + kPackNR;
    for (int j = 0; j < kPackNR; ++j) {
      const float even = RoundToBf16Operand(lo[j]);
      lo[j] = RoundToBf16Operand(hi[j]);
      hi[j] = even;
    }
  }
}

// One call runs an R x kPackNR tile (R <= the ISA's MR) of C from R rows of A
// and one packed panel over one range of K (a k-block). The running sums of
// a tile live in registers within a k-block and in `partial` ([R][kPackNR])
// between k-blocks: an exact f32 store and reload, so every element still
// sees one unbroken FMA chain over k = 0..K-1. The R rows of A come packed
// k-major, a[kk*R + i] = A[row0 + i][kk], so the kernel reads one sequential
// stream (row-major A with a power-of-two stride would map all rows of a
// tile to the same L1 set). `ncols` (1..kPackNR) is how many of the panel's
// columns are real (and stored); `bias` points at the panel's first column
// (or is null) and is read only for real columns.
struct TileArgs {
  const float* a;      // packed [k][R], at this k-block
  const float* panel;  // packed [k][kPackNR], at this k-block
  int64_t k;           // length of the k-block
  float* partial;      // [R][kPackNR] running sums between k-blocks
  bool first;          // first k-block: start from 0, not from `partial`
  bool last;           // last k-block: finish into C, else save to `partial`
  // L2 prefetch of the next k-block (which follows this one in memory, the
  // next panel's first block after a panel's last): this tile's share of it,
  // [pf, pf_end), `pf_step` bytes (64 or 128) per k-step. Spreading the next
  // block over all row tiles keeps DRAM busy during every pass over the
  // block, not only the first (decode shapes are bandwidth bound).
  const char* pf;
  const char* pf_end;
  int pf_step;
  const float* bias;
  float* c;  // first row of the tile, first column of the panel
  int64_t ldc;
  int ncols;
  bool accumulate;
  bool flush;  // kBF16: results flushed to zero (the scalar path; MXCSR elsewhere)
  // TileAvx512Bf16Direct: the k-block's last pair-row has only its even k-row
  // (an odd K's last block; the panel holds nothing past it): paired with a zero.
  bool odd_tail;
  int rows;  // TileAmxBf16: the tile's rows of C (the others are pad)
};
using TileFn = void (*)(const TileArgs&);

// The AMX tile kernel's shape (TileAmxBf16).
constexpr int kAmxMR = 32;     // rows of C per call: two 16-row A tiles
constexpr int kAmxPairs = 16;  // k-pairs per TDPBF16PS (a 64-byte row of A)
// Padded height of a row tile of `rows` (<= kAmxMR) rows: whole A tiles.
constexpr int AmxTileRows(int rows) { return rows > 16 ? 32 : 16; }
// A's k-pairs per row, padded to whole chunks.
constexpr int64_t AmxPaddedPairs(int64_t k) {
  return ((k + 1) / 2 + kAmxPairs - 1) / kAmxPairs * kAmxPairs;
}
// Decodes k-rows [k0, k0 + rows) of a panel straight into bf16 pairs,
// out[ceil(rows / 2)][kPackNR] dwords (DecodePairsFor).
using DecodePairsFn = void (*)(const uint8_t* panel, int64_t k0, int64_t rows, float* out);

// ---------------------------------------------------------------- scalar --

constexpr int kScalarMR = 4;

template <int R>
void TileScalar(const TileArgs& t) {
  float acc[R][kPackNR];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < kPackNR; ++j) acc[i][j] = t.first ? 0.0f : t.partial[i * kPackNR + j];
  for (int64_t kk = 0; kk < t.k; ++kk) {
    const float* b = t.panel + kk * kPackNR;
    for (int i = 0; i < R; ++i) {
      const float av = t.a[kk * R + i];
      if (t.flush) {
        for (int j = 0; j < kPackNR; ++j) acc[i][j] = FlushTiny(std::fma(av, b[j], acc[i][j]));
      } else {
        for (int j = 0; j < kPackNR; ++j) acc[i][j] = std::fma(av, b[j], acc[i][j]);
      }
    }
  }
  if (!t.last) {
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < kPackNR; ++j) t.partial[i * kPackNR + j] = acc[i][j];
    return;
  }
  for (int i = 0; i < R; ++i) {
    float* c = t.c + i * t.ldc;
    for (int j = 0; j < t.ncols; ++j) {
      float v = acc[i][j];
      if (t.bias) v = v + t.bias[j];
      if (t.flush) v = FlushTiny(v);
      if (t.accumulate) v = c[j] + v;
      if (t.flush) v = FlushTiny(v);
      c[j] = v;
    }
  }
}

#if defined(__x86_64__)

// ------------------------------------------------------------------ AVX2 --
// R x 16 half-panel tiles (2 ymm per row, R <= 6 -> 12 accumulators), run
// twice per panel. The per-element FMA chain is the same as the other paths.

constexpr int kAvx2MR = 6;

using packed_simd::Bf16Pairs;
using packed_simd::Bf16Words;
using packed_simd::DotBf16Pairs;
using packed_simd::Halves16;
using packed_simd::Halves8;
using packed_simd::U8x8;

template <int R>
XRT_TARGET_AVX2 void TileAvx2(const TileArgs& t) {
  for (int half = 0; half < 2; ++half) {
    const int cols = std::min(16, t.ncols - half * 16);
    if (cols <= 0) break;
    const float* b = t.panel + half * 16;
    __m256 acc0[R], acc1[R];
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      if (t.first) {
        acc0[i] = _mm256_setzero_ps();
        acc1[i] = _mm256_setzero_ps();
      } else {
        acc0[i] = _mm256_loadu_ps(t.partial + i * kPackNR + half * 16);
        acc1[i] = _mm256_loadu_ps(t.partial + i * kPackNR + half * 16 + 8);
      }
    }
    const float* a = t.a;
    for (int64_t kk = 0; kk < t.k; ++kk) {
      const __m256 b0 = _mm256_loadu_ps(b + kk * kPackNR);
      const __m256 b1 = _mm256_loadu_ps(b + kk * kPackNR + 8);
#pragma GCC unroll 6
      for (int i = 0; i < R; ++i) {
        const __m256 av = _mm256_broadcast_ss(a + kk * R + i);
        acc0[i] = _mm256_fmadd_ps(av, b0, acc0[i]);
        acc1[i] = _mm256_fmadd_ps(av, b1, acc1[i]);
      }
    }
    if (!t.last) {
#pragma GCC unroll 6
      for (int i = 0; i < R; ++i) {
        _mm256_storeu_ps(t.partial + i * kPackNR + half * 16, acc0[i]);
        _mm256_storeu_ps(t.partial + i * kPackNR + half * 16 + 8, acc1[i]);
      }
      continue;
    }
    const __m256i m0 = TailMask8(std::min(cols, 8));
    const __m256i m1 = TailMask8(std::max(cols - 8, 0));
    __m256 bias0 = _mm256_setzero_ps(), bias1 = _mm256_setzero_ps();
    if (t.bias) {
      bias0 = _mm256_maskload_ps(t.bias + half * 16, m0);
      bias1 = _mm256_maskload_ps(t.bias + half * 16 + 8, m1);
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      float* c = t.c + i * t.ldc + half * 16;
      __m256 v0 = acc0[i], v1 = acc1[i];
      if (t.bias) {
        v0 = _mm256_add_ps(v0, bias0);
        v1 = _mm256_add_ps(v1, bias1);
      }
      if (t.accumulate) {
        v0 = _mm256_add_ps(_mm256_maskload_ps(c, m0), v0);
        v1 = _mm256_add_ps(_mm256_maskload_ps(c + 8, m1), v1);
      }
      if (cols == 16) {
        _mm256_storeu_ps(c, v0);
        _mm256_storeu_ps(c + 8, v1);
      } else {
        _mm256_maskstore_ps(c, m0, v0);
        _mm256_maskstore_ps(c + 8, m1, v1);
      }
    }
  }
}

// Decoding packed panel rows to f32 (DequantizePanelRows, same values: see
// the AVX-512 decoder below for why each fma rounds as the portable one):
// a k-row's 32 columns as four vectors of 8, c = 0..3 holding columns
// 8c .. 8c+7. The nibble formats (q4_0, q4_1, q5_0, q5_1, iq4_nl, iq4_xs,
// the K-quants' low bits) hold them in quads (QuadNibbleByte): c = 0, 1 are
// the low nibbles of the quad's halves 0 / 1 and c = 2, 3 their high ones, a
// k-row's bytes at 4m + t (the high bits in q5_k's layout likewise:
// K5HighBitsAvx2). q3_k's crumb quad pairs are read as such quads of nibbles
// 0..3 (QuadHalfAvx2). iq4_nl's and iq4_xs's nibbles then index kIQ4Values
// (IQ4ValuesAvx2) and take q4_0's / q6_k's scale paths with an offset of 0.

// Per 16-byte lane of a quad (QuadNibbleByte), [t]: the vpshufb control
// that zero-extends the four bytes of k-row t (bytes 4m + t) to dwords m,
// columns 4m (low nibbles) and 4m + 16 (high) of the lane's four; twice, for
// both lanes of a ymm.
#define XRT_SPREAD(t) \
  t, -128, -128, -128, 4 + t, -128, -128, -128, 8 + t, -128, -128, -128, 12 + t, -128, -128, -128
#define XRT_SPREAD2(t) XRT_SPREAD(t), XRT_SPREAD(t)
alignas(32) inline constexpr int8_t kQuadRowSpread[4][32] = {
    {XRT_SPREAD2(0)}, {XRT_SPREAD2(1)}, {XRT_SPREAD2(2)}, {XRT_SPREAD2(3)}};
#undef XRT_SPREAD2
#undef XRT_SPREAD

XRT_TARGET_AVX2 inline __m256i QuadRowSpreadAvx2(int kk) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kQuadRowSpread[kk % 4]));
}

// Half h (bytes 32h .. 32h+31) of the quad of k-row kk at q as q4 nibble
// bytes (QuadNibbleByte; weight_format.h's LowQuadOffset / LowQuadShift):
// the nibble formats' as stored; q3_k's shifted down to the quad's crumbs and
// masked to 0x33, each nibble then holding a crumb.
template <WeightFormat F>
XRT_TARGET_AVX2 inline __m256i QuadHalfAvx2(const uint8_t* q, int kk, int h) {
  __m256i x =
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + LowQuadOffset(F, kk / 4) + 32 * h));
  if constexpr (HasCrumbs(F)) {
    x = _mm256_and_si256(_mm256_srl_epi16(x, _mm_cvtsi32_si128(LowQuadShift(F, kk / 4))),
                         _mm256_set1_epi8(0x33));
  }
  return x;
}

// Columns 8c .. 8c+7 of k-row kk of the quads at q, as dwords.
template <WeightFormat F>
XRT_TARGET_AVX2 inline __m256i QuadNibbles8(const uint8_t* q, int kk, int c) {
  const __m256i x = _mm256_shuffle_epi8(QuadHalfAvx2<F>(q, kk, c % 2), QuadRowSpreadAvx2(kk));
  return c < 2 ? _mm256_and_si256(x, _mm256_set1_epi32(15)) : _mm256_srli_epi32(x, 4);
}

// HasIQ4Table: dwords q (0..15) as their signed values kIQ4Values[q].
// vpshufb looks every byte up in the table (in both lanes): a dword's byte 0
// gives kIQ4Values[q], its zero bytes kIQ4Values[0]; the shifts keep byte 0,
// sign-extended.
XRT_TARGET_AVX2 inline __m256i IQ4ValuesAvx2(__m256i q) {
  const __m256i table =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4Values)));
  return _mm256_srai_epi32(_mm256_slli_epi32(_mm256_shuffle_epi8(table, q), 24), 24);
}

// w = fma(mul, q, add) of one sub-block s: see KFactors.
template <WeightFormat F>
XRT_TARGET_AVX2 void LoadKFactorsAvx2(const uint8_t* sb, int s, __m256* mul, __m256* add) {
  for (int c = 0; c < 4; ++c) {
    const __m256 d = Halves8(sb + 16 * c);
    if constexpr (HasKInt8Scales(F)) {
      const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(
          reinterpret_cast<const __m128i*>(sb + kK6ScalesOffset + s * kPackNR + 8 * c)));
      mul[c] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
      add[c] = _mm256_mul_ps(mul[c], _mm256_set1_ps(-static_cast<float>(KQuantOffset(F))));
    } else {
      const __m256 dmin = Halves8(sb + kKDminOffset + 16 * c);
      __m256i sc, m;
      packed_simd::KScaleMin8(sb, s, c, &sc, &m);
      mul[c] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
      const __m256 dm = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(m));
      add[c] = _mm256_xor_ps(dm, _mm256_set1_ps(-0.0f));
    }
  }
}

// HasK5HighBits: the high bits of k-row kk from the 16 bytes per quad at
// K5HighBitsOffset of `block` (a group or super-block; K5HighByte /
// K5HighBit), dword m of lane L from the byte of column 8c + m (the quad's
// bytes 4m + t, spread like the nibbles), lane 1 shifted down by 4: vector
// c = h + 2n (half h, nibble n of the quad) then takes bit 2h + n
// (AddK5HighBitAvx2).
template <WeightFormat F>
XRT_TARGET_AVX2 inline __m256i K5HighBitsAvx2(const uint8_t* block, int kk) {
  const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(block + K5HighBitsOffset(F) + 16 * (kk / 4))));
  return _mm256_srlv_epi32(_mm256_shuffle_epi8(bytes, QuadRowSpreadAvx2(kk)),
                           _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
}

// Vector c's low bits `q` with its high bits (K5HighBitsAvx2's `bits`) at
// bit LowQuantBits(F) (q5: 4, q3_k: 2).
template <WeightFormat F>
XRT_TARGET_AVX2 inline __m256i AddK5HighBitAvx2(__m256i q, __m256i bits, int c) {
  constexpr int kAt = LowQuantBits(F);
  const int f = 2 * (c % 2) + c / 2;  // 2h + n
  const __m256i at = f <= kAt ? _mm256_slli_epi32(bits, kAt - f) : _mm256_srli_epi32(bits, f - kAt);
  return _mm256_add_epi32(q, _mm256_and_si256(at, _mm256_set1_epi32(1 << kAt)));
}

// A group's scales and added terms: q4_1, q5_1: the mins; q4_0, q5_0: -8 or
// -16 times the scale (exact); iq4_nl: a zero (-0 times the scale); q8_0:
// unused.
template <WeightFormat F>
XRT_TARGET_AVX2 inline void LoadGroupScalesAvx2(const uint8_t* group, __m256* scale, __m256* min) {
  for (int c = 0; c < 4; ++c) {
    scale[c] = Halves8(group + 16 * c);
    if constexpr (HasGroupMin(F)) {
      min[c] = Halves8(group + 64 + 16 * c);
    } else {
      min[c] =
          _mm256_mul_ps(scale[c], _mm256_set1_ps(-static_cast<float>(QuantGroupQuantOffset(F))));
    }
  }
}

// k-row `kk` (0..31) of the q-format group at `group`.
template <WeightFormat F>
XRT_TARGET_AVX2 inline void DecodeQuantRowAvx2(const uint8_t* group, int kk, const __m256* scale,
                                               const __m256* min, __m256* w) {
  const uint8_t* q = group + QuantGroupQuantsOffset(F);
  __m256i bits = _mm256_setzero_si256();
  if constexpr (HasK5HighBits(F)) bits = K5HighBitsAvx2<F>(group, kk);
  for (int c = 0; c < 4; ++c) {
    if constexpr (F == WeightFormat::kQ8_0) {
      const __m256i v = _mm256_cvtepi8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + kk * kPackNR + 8 * c)));
      w[c] = _mm256_mul_ps(scale[c], _mm256_cvtepi32_ps(v));
    } else {
      __m256i v = QuadNibbles8<F>(q, kk, c);
      if constexpr (HasK5HighBits(F)) v = AddK5HighBitAvx2<F>(v, bits, c);
      if constexpr (HasIQ4Table(F)) v = IQ4ValuesAvx2(v);
      w[c] = _mm256_fmadd_ps(scale[c], _mm256_cvtepi32_ps(v), min[c]);
    }
  }
}

// k-row `kk` (0..255) of the super-block at `sb`, with its sub-block's factors.
template <WeightFormat F>
XRT_TARGET_AVX2 inline void DecodeKRowAvx2(const uint8_t* sb, int kk, const __m256* mul,
                                           const __m256* add, __m256* w) {
  // The k-row's high bits: q3_k's and q5_k's from K5HighBitsAvx2; q6_k's
  // bytes, dword m of vector c from the byte of column 8c + m (K6HighByte:
  // the quad's bytes 4m + t, spread like the nibbles), vector c = h + 2n
  // (half h, nibble n of the quad) taking field 2h + n.
  __m256i bits = _mm256_setzero_si256(), fields = _mm256_setzero_si256();
  if constexpr (HasK5HighBits(F)) bits = K5HighBitsAvx2<F>(sb, kk);
  if constexpr (F == WeightFormat::kQ6_K) {
    fields = _mm256_shuffle_epi8(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + kK6HighOffset + 32 * (kk / 4))),
        QuadRowSpreadAvx2(kk));
  }
  for (int c = 0; c < 4; ++c) {
    __m256i q = QuadNibbles8<F>(sb + KLowQuantsOffset(F), kk, c);
    if constexpr (HasK5HighBits(F)) q = AddK5HighBitAvx2<F>(q, bits, c);
    if constexpr (F == WeightFormat::kQ6_K) {  // field f (bits 2f, 2f + 1) to bits 4, 5
      const int f = 2 * (c % 2) + c / 2;       // 2h + n
      const __m256i at4 =
          f < 2 ? _mm256_slli_epi32(fields, 4 - 2 * f) : _mm256_srli_epi32(fields, 2 * f - 4);
      q = _mm256_add_epi32(q, _mm256_and_si256(at4, _mm256_set1_epi32(48)));
    }
    if constexpr (HasIQ4Table(F)) q = IQ4ValuesAvx2(q);
    w[c] = _mm256_fmadd_ps(mul[c], _mm256_cvtepi32_ps(q), add[c]);
  }
}

// k-row `k` of a 16-bit format panel.
template <WeightFormat F>
XRT_TARGET_AVX2 inline void Decode16BitRowAvx2(const uint8_t* panel, int64_t k, __m256* w) {
  if constexpr (IsBf16PairsFormat(F)) {
    // The row's halves of its pair-row's dwords (Bf16PairsByte).
    const uint8_t* pair_row = panel + k / 2 * kPackNR * 4;
    const bool low = Bf16PairsLowHalf(F, k);
    for (int c = 0; c < 4; ++c) {
      const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pair_row + 32 * c));
      w[c] = _mm256_castsi256_ps(low ? _mm256_slli_epi32(d, 16)
                                     : _mm256_and_si256(d, _mm256_set1_epi32(-65536)));
    }
    return;
  }
  const uint8_t* row = panel + k * kPackNR * 2;
  for (int c = 0; c < 4; ++c) {
    if constexpr (F == WeightFormat::kF16) {
      w[c] = Halves8(row + 16 * c);
    } else {
      const __m256i h =
          _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16 * c)));
      w[c] = _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
    }
  }
}

XRT_TARGET_AVX2 inline void StoreRowAvx2(const __m256* w, float* out) {
  for (int c = 0; c < 4; ++c) _mm256_store_ps(out + 8 * c, w[c]);
}

// DequantizePanelRows on AVX2 (out is 64-byte aligned).
template <WeightFormat F>
XRT_TARGET_AVX2 void DequantRowsAvx2(const uint8_t* panel, int64_t k0, int64_t rows, float* out) {
  __m256 w[4];
  if constexpr (IsKQuantFormat(F)) {
    __m256 mul[4], add[4];
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t k = k0 + r;
      const uint8_t* sb = panel + k / kSuperBlock * SuperBlockBytes(F);
      const int kk = static_cast<int>(k % kSuperBlock);
      if (r == 0 || kk % KSubBlockRows(F) == 0) {
        LoadKFactorsAvx2<F>(sb, kk / KSubBlockRows(F), mul, add);
      }
      DecodeKRowAvx2<F>(sb, kk, mul, add, w);
      StoreRowAvx2(w, out + r * kPackNR);
    }
  } else if constexpr (Is16BitFormat(F)) {
    for (int64_t r = 0; r < rows; ++r) {
      Decode16BitRowAvx2<F>(panel, k0 + r, w);
      StoreRowAvx2(w, out + r * kPackNR);
    }
  } else {
    constexpr int64_t kGroupBytes = QuantGroupBytes(F);
    for (int64_t r = 0; r < rows; r += kQuantGroup) {  // k0 and rows: whole groups or the end
      const uint8_t* group = panel + (k0 + r) / kQuantGroup * kGroupBytes;
      __m256 scale[4], min[4];
      LoadGroupScalesAvx2<F>(group, scale, min);
      const int n = static_cast<int>(std::min<int64_t>(kQuantGroup, rows - r));
      for (int kk = 0; kk < n; ++kk) {
        DecodeQuantRowAvx2<F>(group, kk, scale, min, w);
        StoreRowAvx2(w, out + (r + kk) * kPackNR);
      }
    }
  }
}

// --------------------------------------------------------------- AVX-512 --
// R x 32 tiles (2 zmm per row, R <= 14 -> 28 accumulators); A values are
// broadcast straight from memory (embedded broadcast operands of the FMAs).

constexpr int kAvx512MR = 14;
// Software prefetch distances in k-steps (one k-step = 128 bytes of panel).
constexpr int kPrefetchL1Steps = 16;
constexpr int kPrefetchL2Steps = 128;  // single-tile blocks (M = 1 decode)

// The last k-block's store of a tile's rows into C: the dot sums (v0:
// columns 0-15, v1: 16-31) plus the bias, plus C's old value (accumulate),
// for the tile's real columns.
struct TileOutput {
  __mmask16 m0, m1;
  __m512 bias0, bias1;
  XRT_TARGET_AVX512 explicit TileOutput(const TileArgs& t) {
    const int ncols = t.ncols;
    m0 = ncols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << ncols) - 1);
    m1 = ncols >= 32  ? __mmask16(0xFFFF)
         : ncols > 16 ? __mmask16((1u << (ncols - 16)) - 1)
                      : __mmask16(0);
    bias0 = bias1 = _mm512_setzero_ps();
    if (t.bias) {
      bias0 = _mm512_maskz_loadu_ps(m0, t.bias);
      bias1 = _mm512_maskz_loadu_ps(m1, t.bias + 16);
    }
  }
  XRT_TARGET_AVX512 void Store(const TileArgs& t, int i, __m512 v0, __m512 v1) const {
    float* c = t.c + i * t.ldc;
    if (t.bias) {
      v0 = _mm512_add_ps(v0, bias0);
      v1 = _mm512_add_ps(v1, bias1);
    }
    if (t.accumulate) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + 16), v1);
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
  }
};

// A tile's running sums at the start of its k-block (zeros, or `partial`),
// and at its end saved to `partial` or finished into C.
template <int R>
XRT_TARGET_AVX512 inline void StartTileAvx512(const TileArgs& t, __m512* acc0, __m512* acc1) {
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) {
    if (t.first) {
      acc0[i] = _mm512_setzero_ps();
      acc1[i] = _mm512_setzero_ps();
    } else {
      acc0[i] = _mm512_loadu_ps(t.partial + i * kPackNR);
      acc1[i] = _mm512_loadu_ps(t.partial + i * kPackNR + 16);
    }
  }
}
template <int R>
XRT_TARGET_AVX512 inline void FinishTileAvx512(const TileArgs& t, const __m512* acc0,
                                               const __m512* acc1) {
  if (!t.last) {
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      _mm512_storeu_ps(t.partial + i * kPackNR, acc0[i]);
      _mm512_storeu_ps(t.partial + i * kPackNR + 16, acc1[i]);
    }
    return;
  }
  const TileOutput out(t);
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) out.Store(t, i, acc0[i], acc1[i]);
}

template <int R>
XRT_TARGET_AVX512 void TileAvx512(const TileArgs& t) {
  __m512 acc0[R], acc1[R];
  StartTileAvx512<R>(t, acc0, acc1);
  const float* a = t.a;
  const float* b = t.panel;
  const char* pf = t.pf;
  for (int64_t kk = 0; kk < t.k; ++kk) {
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = _mm512_loadu_ps(b + 16);
    // L1 prefetch a little ahead (not for one-row tiles: that loop is pure
    // streaming, the hardware prefetcher keeps up and extra requests only
    // take fill buffers), and this tile's share of the next k-block into L2.
    if (R > 1) {
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchL1Steps * kPackNR), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchL1Steps * kPackNR + 16), _MM_HINT_T0);
    }
    if (R == 1) {
      // Same as the single-tile plan below, without the bookkeeping: this
      // loop is short enough that the extra compare and branch cost ~10% of
      // DRAM bandwidth at M = 1.
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchL2Steps * kPackNR), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchL2Steps * kPackNR + 16), _MM_HINT_T1);
    } else if (pf < t.pf_end) {
      _mm_prefetch(pf, _MM_HINT_T1);
      if (t.pf_step > 64) _mm_prefetch(pf + 64, _MM_HINT_T1);
      pf += t.pf_step;
    }
    b += kPackNR;
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      const __m512 av = _mm512_set1_ps(a[i]);
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
    }
    a += R;
  }
  FinishTileAvx512<R>(t, acc0, acc1);
}

// ------------------------------------------------------ AVX-512 + BF16 --
// kBF16 tiles on vdpbf16ps, R x 32 as above: A comes as bf16 pairs
// ([steps / 2][R] dwords, PackRowPairs), the panel's k-block as [steps /
// 2][32] dwords, decoded into the block (DecodePairsAvx512, Bf16PairsAvx512)
// or, for bf16 and f32 weights, paired in registers (TileAvx512Bf16Direct). One
// instruction sums a k-pair per column, the odd element first with flushes:
// matmul.h's kBF16 chain.

// Each dword's two bf16 halves swapped: pairs from one order to the other.
XRT_TARGET_AVX512 inline __m512i SwapPairHalves(__m512i x) { return _mm512_rol_epi32(x, 16); }

// Bf16Pairs in the order of the unit that sums them: vdpbf16ps takes a pair's
// high element first, so it gets (even, odd); AMX's TDPBF16PS takes the low
// one first, so it gets them swapped (kOddLow). Either way the odd element's
// product is added first, as matmul.h's kBF16 chain has it.
template <bool kOddLow>
XRT_TARGET_AVX512_BF16 inline __m512i Bf16PairsFor(__m512 even, __m512 odd) {
  return kOddLow ? Bf16Pairs(odd, even) : Bf16Pairs(even, odd);
}

template <int R>
XRT_TARGET_AVX512_BF16 void TileAvx512Bf16(const TileArgs& t) {
  __m512 acc0[R], acc1[R];
  StartTileAvx512<R>(t, acc0, acc1);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(t.a);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(t.panel);
  for (int64_t kp = 0; kp < t.k / 2; ++kp) {
    const __m512i b0 = _mm512_loadu_si512(b);
    const __m512i b1 = _mm512_loadu_si512(b + 16);
    b += kPackNR;
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a[i]));
      acc0[i] = DotBf16Pairs(acc0[i], av, b0);
      acc1[i] = DotBf16Pairs(acc1[i], av, b1);
    }
    a += R;
  }
  FinishTileAvx512<R>(t, acc0, acc1);
}

// ------------------------------------------- AVX-512 packed-format decoding --
// (GCC 12 reports its own conversion intrinsics' undefined pass-through
// operands as maybe-uninitialized; a false positive.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// RoundToBf16Operand on 16 lanes.
XRT_TARGET_AVX512 inline __m512 RoundToBf16Avx512(__m512 x) {
  const __m512i b = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  const __m512i abs = _mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, b, _mm512_set1_epi32(0x00400000));
  const __mmask16 tiny = _mm512_testn_epi32_mask(b, _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_and_epi32(r, tiny, b, _mm512_set1_epi32(int(0x80000000u)));
  return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(int(0xffff0000u))));
}

// Bf16ChainOrderPortable on AVX-512.
XRT_TARGET_AVX512 void Bf16ChainOrderAvx512(float* x, int64_t rows) {
  for (int64_t r = 0; r < rows; r += 2) {
    float* lo = x + r * kPackNR;
    float* hi = lo + kPackNR;
    for (int j = 0; j < kPackNR; j += 16) {
      const __m512 even = RoundToBf16Avx512(_mm512_loadu_ps(lo + j));
      _mm512_storeu_ps(lo + j, RoundToBf16Avx512(_mm512_loadu_ps(hi + j)));
      _mm512_storeu_ps(hi + j, even);
    }
  }
}

// The decoded block's k-rows [0, rows) (rows even) as TileAvx512Bf16's bf16
// pairs, in place: dword j of pair-row p is the bf16 operands of rows 2p
// (low half) and 2p + 1 (high half) of column j, or (kOddLow, for AMX) the
// other way round.
template <bool kOddLow>
XRT_TARGET_AVX512_BF16 void Bf16PairsAvx512(float* x, int64_t rows) {
  for (int64_t r = 0; r < rows; r += 2) {
    const float* even = x + r * kPackNR;
    const float* odd = even + kPackNR;
    // Pair-row r / 2 ends at or before row r starts: both rows are loaded
    // before their columns' dwords are stored.
    float* out = x + r / 2 * kPackNR;
    for (int j = 0; j < kPackNR; j += 16) {
      _mm512_storeu_si512(
          out + j, Bf16PairsFor<kOddLow>(_mm512_loadu_ps(even + j), _mm512_loadu_ps(odd + j)));
    }
  }
}

// Pair-row p of a bf16 panel: k-rows 2p and 2p + 1 (`odd`: the latter is
// real, else a zero) interleaved, columns 0-15 in *lo and 16-31 in *hi; each
// pair's even element in the low half, or (kOddLow) its odd one.
template <bool kOddLow = false>
XRT_TARGET_AVX512 inline void Bf16PairRow(const uint8_t* panel, int64_t p, bool odd, __m512i* lo,
                                          __m512i* hi) {
  // Word w of half h: column 16h + w / 2 of the even row (w even, index <
  // 32) or of the odd row (index 32 + ...).
  alignas(64) static constexpr uint16_t kIdx[2][32] = {
      {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
       8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47},
      {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
       24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63}};
  const uint8_t* w = panel + p * 2 * kPackNR * 2;
  const __m512i e = _mm512_loadu_si512(w);
  const __m512i o = odd ? _mm512_loadu_si512(w + kPackNR * 2) : _mm512_setzero_si512();
  const __m512i first = kOddLow ? o : e, second = kOddLow ? e : o;
  *lo = _mm512_permutex2var_epi16(first, _mm512_load_si512(kIdx[0]), second);
  *hi = _mm512_permutex2var_epi16(first, _mm512_load_si512(kIdx[1]), second);
}

// Pair-row p of a bf16_pairs(_amx) panel, columns 0-15 in *lo and 16-31 in
// *hi, with each pair's odd element low (kOddLow: AMX's order) or high
// (vdpbf16ps's): as stored, or each dword's halves swapped.
template <WeightFormat F, bool kOddLow>
XRT_TARGET_AVX512 inline void Bf16PairsRow(const uint8_t* panel, int64_t p, __m512i* lo,
                                           __m512i* hi) {
  static_assert(IsBf16PairsFormat(F));
  const uint8_t* w = panel + p * kPackNR * 4;
  *lo = _mm512_loadu_si512(w);
  *hi = _mm512_loadu_si512(w + 64);
  if constexpr (kOddLow != Bf16PairsLowHalf(F, 1)) {
    *lo = SwapPairHalves(*lo);
    *hi = SwapPairHalves(*hi);
  }
}

// Pair-row kp of an f32 or bf16 panel as vdpbf16ps operands, columns 0-15
// in *b0 and 16-31 in *b1 (`odd`: k-row 2kp + 1 is real, else a zero).
template <WeightFormat F, bool kOddLow = false>
XRT_TARGET_AVX512_BF16 __attribute__((always_inline)) inline void DirectPairRow(
    const uint8_t* panel, int64_t kp, bool odd, __m512i* b0, __m512i* b1) {
  if constexpr (IsBf16PairsFormat(F)) {
    Bf16PairsRow<F, kOddLow>(panel, kp, b0, b1);  // an odd K's pad is stored
  } else if constexpr (F == WeightFormat::kBF16) {
    Bf16PairRow<kOddLow>(panel, kp, odd, b0, b1);
  } else {
    const float* w = reinterpret_cast<const float*>(panel) + kp * 2 * kPackNR;
    const __m512 zero = _mm512_setzero_ps();
    *b0 = Bf16PairsFor<kOddLow>(_mm512_loadu_ps(w), odd ? _mm512_loadu_ps(w + kPackNR) : zero);
    *b1 = Bf16PairsFor<kOddLow>(_mm512_loadu_ps(w + 16),
                                odd ? _mm512_loadu_ps(w + kPackNR + 16) : zero);
  }
}

// TileAvx512Bf16 reading a bf16, bf16_pairs(_amx) or f32 panel as stored
// (t.panel: its k-row k0; t.k even, an odd K's pad included, t.odd_tail), each
// pair-row paired in registers (DirectPairRow) instead of through the decoded
// block. Measured against the decoded block, interleaved: +10-17% at M = 16,
// +1-5% at M = 128 and 512 (every tile repeats the two vpermt2w per pair-row,
// which costs less than the block's store and reload). bf16_pairs, loaded as
// it is, is 1-3% faster than bf16 at M >= 128 and 4-12% at M = 16;
// bf16_pairs_amx, whose two rotates per pair-row compete with vdpbf16ps on
// Zen 5, 8-15% slower (interleaved, 2 threads).
template <WeightFormat F, int R>
XRT_TARGET_AVX512_BF16 void TileAvx512Bf16Direct(const TileArgs& t) {
  static_assert(F == WeightFormat::kBF16 || IsBf16PairsFormat(F) || F == WeightFormat::kF32);
  __m512 acc0[R], acc1[R];
  StartTileAvx512<R>(t, acc0, acc1);
  const uint32_t* a = reinterpret_cast<const uint32_t*>(t.a);
  const uint8_t* panel = reinterpret_cast<const uint8_t*>(t.panel);
  const char* pf = t.pf;
  const int64_t pair_rows = t.k / 2;
  for (int64_t kp = 0; kp < pair_rows; ++kp) {
    __m512i b0, b1;
    if (kp + 1 < pair_rows || !t.odd_tail) {
      DirectPairRow<F>(panel, kp, true, &b0, &b1);
    } else {
      DirectPairRow<F>(panel, kp, false, &b0, &b1);
    }
    // This tile's share of the next k-block, into L2 (TileArgs; pf_step up
    // to 256 bytes here).
    if (pf < t.pf_end) {
      for (int line = 0; line < t.pf_step; line += 64) _mm_prefetch(pf + line, _MM_HINT_T1);
      pf += t.pf_step;
    }
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a[i]));
      acc0[i] = DotBf16Pairs(acc0[i], av, b0);
      acc1[i] = DotBf16Pairs(acc1[i], av, b1);
    }
    a += R;
  }
  FinishTileAvx512<R>(t, acc0, acc1);
}

// `rows` (<= 16) rows (row i at row_at(i), k floats) as bf16 pairs,
// transposed: pair p of row i at out[p * ld + i], `cols` (>= rows) dwords
// stored per pair (the ones past `rows` zeros), each pair's odd element high
// (vdpbf16ps's order) or, `odd_low`, low (AMX's). Per 16 pairs: each row's 32
// floats to 16 pair dwords, a 16 x 16 transpose, and one store per pair. (It
// scattered each row's dwords until the commit after 3dae982: vpscatterdd was
// 6.6% of a bf16 vision encode.)
template <typename RowAt>
XRT_TARGET_AVX512_BF16 __attribute__((always_inline)) inline void PackPairsTransposedAvx512(
    RowAt row_at, int rows, int64_t k, uint32_t* out, int64_t ld, int cols, bool odd_low) {
  assert(rows >= 0 && rows <= cols && cols <= 16);
  const int64_t pairs = (k + 1) / 2;
  const __mmask16 col_mask = static_cast<__mmask16>((1u << cols) - 1);
  for (int64_t p0 = 0; p0 < pairs; p0 += 16) {
    const int64_t k0 = 2 * p0;
    const int64_t n0 = std::clamp<int64_t>(k - k0, 0, 16);
    const int64_t n1 = std::clamp<int64_t>(k - k0 - 16, 0, 16);
    const __mmask16 m0 = static_cast<__mmask16>((1u << n0) - 1);
    const __mmask16 m1 = static_cast<__mmask16>((1u << n1) - 1);
    __m512i r[16];
    for (int i = 0; i < 16; ++i) {
      // Floats k0 .. k0 + 31 of row i as 32 words in order: dword p is pair p0 + p.
      r[i] = _mm512_setzero_si512();
      if (i < rows) {
        const float* src = row_at(i) + k0;
        r[i] = Bf16Words(_mm512_maskz_loadu_ps(m0, src), _mm512_maskz_loadu_ps(m1, src + 16));
      }
    }
    packed_simd::Transpose16x16Epi32(r);  // r[p]: pair p0 + p of rows 0 .. 15
    const int np = static_cast<int>(std::min<int64_t>(16, pairs - p0));
    for (int p = 0; p < np; ++p) {
      const __m512i x = odd_low ? SwapPairHalves(r[p]) : r[p];
      _mm512_mask_storeu_ps(out + (p0 + p) * ld, col_mask, _mm512_castsi512_ps(x));
    }
  }
}

// PackRowPairs (below) of one row tile on AVX-512: `rows` (<= 16) rows of A
// from `a` (stride lda) into tile ([ceil(k / 2)][rows] dwords).
XRT_TARGET_AVX512_BF16 void PackTilePairsAvx512(const float* a, int64_t lda, int rows, int64_t k,
                                                uint32_t* tile) {
  assert(rows >= 1);
  PackPairsTransposedAvx512([&](int i) { return a + i * lda; }, rows, k, tile, rows, rows, false);
}

// PackHeadWeightsBf16's two packers (matmul.h). Keys: W [n][dim] from its
// rows, 16 columns of a panel at a time, transposed as the tiles' rows are.
XRT_TARGET_AVX512_BF16 void PackKeyPairsAvx512(const float* const* rows, int64_t n, int64_t dim,
                                               bool odd_low, uint32_t* out) {
  const int64_t panel_dwords = (dim + 1) / 2 * kPackNR;
  for (int64_t j0 = 0; j0 < (n + kPackNR - 1) / kPackNR * kPackNR; j0 += 16) {
    const int count = static_cast<int>(std::clamp<int64_t>(n - j0, 0, 16));
    PackPairsTransposedAvx512([&](int i) { return rows[j0 + i]; }, count, dim,
                              out + j0 / kPackNR * panel_dwords + j0 % kPackNR, kPackNR, 16,
                              odd_low);
  }
}

// Values: W [dim][n] (the values transposed) from the value rows: pair-row p
// of each panel is value rows 2p and 2p + 1 (a zero row past n) interleaved.
XRT_TARGET_AVX512_BF16 void PackValuePairsAvx512(const float* const* rows, int64_t n, int64_t dim,
                                                 bool odd_low, uint32_t* out) {
  const int64_t pairs = (n + 1) / 2, panel_dwords = pairs * kPackNR;
  for (int64_t p = 0; p < pairs; ++p) {
    const float* even = rows[2 * p];
    const float* odd = 2 * p + 1 < n ? rows[2 * p + 1] : nullptr;
    for (int64_t c0 = 0; c0 < (dim + kPackNR - 1) / kPackNR * kPackNR; c0 += 16) {
      const int lanes = static_cast<int>(std::clamp<int64_t>(dim - c0, 0, 16));
      const __mmask16 m = static_cast<__mmask16>((1u << lanes) - 1);
      const __m512 e = _mm512_maskz_loadu_ps(m, even + c0);
      const __m512 o = odd ? _mm512_maskz_loadu_ps(m, odd + c0) : _mm512_setzero_ps();
      _mm512_storeu_si512(out + c0 / kPackNR * panel_dwords + p * kPackNR + c0 % kPackNR,
                          odd_low ? Bf16Pairs(o, e) : Bf16Pairs(e, o));
    }
  }
}

// ------------------------------------------------------------- AMX BF16 --
// kBF16 prefill on AMX (the amx tier, kAmxMinRows rows or more): one call
// runs up to 32 rows x one panel over a k-block as 2 x 2 tiles of 16 x 16
// sums. TDPBF16PS takes 16 k-pairs per step: A's row tile is packed per chunk
// of 16 pairs as a 16- or 32-row tile of 64-byte rows (PackRowTilesAmx), the
// panel's k-block as decoded pairs ([pairs][32] dwords: the two column halves
// are 16 x 64-byte tiles at a stride of 128 bytes), or a bf16_pairs_amx weight's
// k-block as stored (weight_format.h: chosen at compile time). Both have each pair's
// elements swapped (Bf16PairsFor<true>), so TDPBF16PS's low-element-first
// order adds the odd element first: matmul.h's kBF16 chain, the same bits as
// vdpbf16ps. AMX always flushes tiny results to zero and reads bf16 denormals
// as zeros, as the chain does. A last chunk of fewer than 16 pairs is summed
// by vdpbf16ps on the stored sums (pairs unswapped in registers): padding it
// with zero pairs would turn a final -0 sum into +0.

// Tiles 0-7 all 16 rows x 64 bytes. Tiles 0-3: C, rows 16h and columns 16b
// of the call in tile 2h + b; 4 + h: A's rows 16h; 6 + b: B's columns 16b.
// With `one_row` (a matmul of one row: a decode's), the C and A tiles are one
// row high: TDPBF16PS's time goes with A's rows, and the row's sums are the
// same bits (BatchInvariantOnEveryTier, run on the hardware too). Measured
// (2 threads, interleaved): the 1B-shaped Q4_K_M's bf16 decode 11.4 -> 12.7
// tokens/s; M = 1 from DRAM, 8192 x 2048: q4_0 +7-18%, q4_k +4-12%, q6_k
// -4-0%, q8_0 -8%.
AmxTileConfig AmxBf16Tiles(int rows) {
  AmxTileConfig c;
  for (int t = 0; t < 6; ++t) c.Tile(t, rows, 64);  // C and A
  for (int t = 6; t < 8; ++t) c.Tile(t, 16, 64);    // B
  return c;
}
const AmxTileConfig& AmxBf16Config(bool one_row) {
  static const AmxTileConfig full = AmxBf16Tiles(16), row = AmxBf16Tiles(1);
  return one_row ? row : full;
}

// One call of the AMX kernel on t.rows (<= 16 * H) rows: t.a is the row
// tile's first chunk of this k-block ([chunk][16 * H][16] dwords), t.panel the
// decoded pairs or a bf16_pairs_amx panel's k-block as stored (both [t.k /
// 2][32] dwords), t.partial [16 * H][32] running sums.
template <int H>
XRT_TARGET_AMX void TileAmxBf16(const TileArgs& t) {
  static_assert(H == 1 || H == 2);
  // The tile instructions are asm statements that do not name the memory
  // they read: A and the block, written just before, must be in memory.
  __asm__ volatile("" ::: "memory");
  constexpr int kChunkDwords = 16 * H * kAmxPairs;
  constexpr long kRowBytes = kPackNR * 4;  // a row of the block and of partial
  const uint32_t* a = reinterpret_cast<const uint32_t*>(t.a);
  const uint32_t* b = reinterpret_cast<const uint32_t*>(t.panel);
  const int64_t pairs = t.k / 2, chunks = pairs / kAmxPairs;
  float* upper = t.partial + 16 * kPackNR;  // rows 16-31
  if (t.first) {
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (H == 2) {
      _tile_zero(2);
      _tile_zero(3);
    }
  } else {
    _tile_loadd(0, t.partial, kRowBytes);
    _tile_loadd(1, t.partial + 16, kRowBytes);
    if constexpr (H == 2) {
      _tile_loadd(2, upper, kRowBytes);
      _tile_loadd(3, upper + 16, kRowBytes);
    }
  }
  // This tile's share of the next k-block (TileArgs; a bf16_pairs_amx panel
  // read in place), into L2 over the chunks: a decode's weights stream from
  // DRAM.
  const char* pf = t.pf;
  const int64_t pf_lines = t.pf ? (t.pf_end - t.pf) / 64 : 0;
  const int64_t pf_per_chunk = chunks > 0 ? (pf_lines + chunks - 1) / chunks : 0;
  for (int64_t c = 0; c < chunks; ++c) {
    const uint32_t* ac = a + c * kChunkDwords;
    const uint32_t* bc = b + c * kAmxPairs * kPackNR;
    for (int64_t line = 0; line < pf_per_chunk && pf < t.pf_end; ++line, pf += 64)
      _mm_prefetch(pf, _MM_HINT_T1);
    _tile_loadd(4, ac, 64);
    _tile_loadd(6, bc, kRowBytes);
    _tile_loadd(7, bc + 16, kRowBytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (H == 2) {
      _tile_loadd(5, ac + 16 * kAmxPairs, 64);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  // The sums so far, to partial (not the last k-block: whole chunks only).
  float* sums = t.partial;
  alignas(64) float last_sums[kAmxMR * kPackNR];
  if (t.last) sums = last_sums;
  _tile_stored(0, sums, kRowBytes);
  _tile_stored(1, sums + 16, kRowBytes);
  if constexpr (H == 2) {
    _tile_stored(2, sums + 16 * kPackNR, kRowBytes);
    _tile_stored(3, sums + 16 * kPackNR + 16, kRowBytes);
  }
  if (!t.last) return;
  // The tail's pairs on vdpbf16ps (elements back in its order), then C.
  const int tail = static_cast<int>(pairs - chunks * kAmxPairs);
  const uint32_t* at = a + chunks * kChunkDwords;
  const uint32_t* bt = b + chunks * kAmxPairs * kPackNR;
  const TileOutput out(t);
  for (int i = 0; i < t.rows; ++i) {
    __m512 v0 = _mm512_load_ps(sums + i * kPackNR);
    __m512 v1 = _mm512_load_ps(sums + i * kPackNR + 16);
    for (int p = 0; p < tail; ++p) {
      const uint32_t x = at[i * kAmxPairs + p];
      const __m512i av = _mm512_set1_epi32(static_cast<int>(x << 16 | x >> 16));
      v0 = DotBf16Pairs(v0, av, SwapPairHalves(_mm512_loadu_si512(bt + p * kPackNR)));
      v1 = DotBf16Pairs(v1, av, SwapPairHalves(_mm512_loadu_si512(bt + p * kPackNR + 16)));
    }
    out.Store(t, i, v0, v1);
  }
}

// Per k-row of a panel: the 32 column values as two zmm (columns 0-15, 16-31),
// equal to DequantizePanelRows' values (see matmul.h on zeros' signs).

// Per group of a q format: scale (and the added term: min for q4_1 and q5_1,
// -8 or -16 times the scale for q4_0 and q5_0, exact; a zero for iq4_nl, whose
// quants are looked up: IQ4Values16) of columns 0-15 and 16-31.
struct GroupScales {
  __m512 s0, s1, m0, m1;
};

template <WeightFormat F>
XRT_TARGET_AVX512 inline GroupScales LoadGroupScales(const uint8_t* group) {
  GroupScales g;
  g.s0 = Halves16(group);
  g.s1 = Halves16(group + 32);
  if constexpr (HasGroupMin(F)) {
    g.m0 = Halves16(group + 64);
    g.m1 = Halves16(group + 96);
  } else {
    const __m512 offset = _mm512_set1_ps(-static_cast<float>(QuantGroupQuantOffset(F)));
    g.m0 = _mm512_mul_ps(g.s0, offset);
    g.m1 = _mm512_mul_ps(g.s1, offset);
  }
  return g;
}

// The vpshufb control of kQuadRowSpread[kk % 4] in every 128-bit lane.
XRT_TARGET_AVX512 inline __m512i QuadRowSpread(int kk) {
  return _mm512_broadcast_i32x4(
      _mm_load_si128(reinterpret_cast<const __m128i*>(kQuadRowSpread[kk % 4])));
}

// The quad of k-row kk at q as q4 nibble bytes (QuadHalfAvx2's two halves).
template <WeightFormat F>
XRT_TARGET_AVX512 inline __m512i QuadBytes(const uint8_t* q, int kk) {
  __m512i x = _mm512_loadu_si512(q + LowQuadOffset(F, kk / 4));
  if constexpr (HasCrumbs(F)) {
    x = _mm512_and_si512(_mm512_srl_epi16(x, _mm_cvtsi32_si128(LowQuadShift(F, kk / 4))),
                         _mm512_set1_epi8(0x33));
  }
  return x;
}

// k-row kk of the quads at q (QuadNibbleByte), columns 0-15 in *lo and 16-31
// in *hi as dwords.
template <WeightFormat F>
XRT_TARGET_AVX512 inline void QuadNibbles16(const uint8_t* q, int kk, __m512i* lo, __m512i* hi) {
  const __m512i x = _mm512_shuffle_epi8(QuadBytes<F>(q, kk), QuadRowSpread(kk));
  *lo = _mm512_and_si512(x, _mm512_set1_epi32(15));
  *hi = _mm512_srli_epi32(x, 4);
}

// HasIQ4Table: dwords q (0..15) as their signed values kIQ4Values[q]: one
// vpermd from the table widened to dwords (one instruction per vector, where
// vpshufb's bytes need sign-extending).
XRT_TARGET_AVX512 inline __m512i IQ4Values16(__m512i q) {
  const __m512i table =
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4Values)));
  return _mm512_permutexvar_epi32(q, table);
}

// HasK5HighBits: QuadNibbles16's *lo, *hi of k-row kk with the high bit
// added at bit LowQuantBits(F) from the 16 bytes per quad at
// K5HighBitsOffset of `block` (K5HighByte / K5HighBit). Dword m of lane l
// (column 4l + m, + 16 for *hi) takes the same byte as its nibble; lane
// l = 2h + L (half h's lane L) holds its bit at 4L + 2h + n, n = 1 for *hi:
// shifted down by 4L + 2h per lane.
template <WeightFormat F>
XRT_TARGET_AVX512 inline void AddK5HighBits16(const uint8_t* block, int kk, __m512i* lo,
                                              __m512i* hi) {
  constexpr int kAt = LowQuantBits(F);
  const __m512i bytes = _mm512_broadcast_i32x4(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(block + K5HighBitsOffset(F) + 16 * (kk / 4))));
  const __m512i bits =
      _mm512_srlv_epi32(_mm512_shuffle_epi8(bytes, QuadRowSpread(kk)),
                        _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 2, 2, 2, 2, 6, 6, 6, 6));
  const __m512i bit = _mm512_set1_epi32(1 << kAt);
  *lo = _mm512_add_epi32(*lo, _mm512_and_si512(_mm512_slli_epi32(bits, kAt), bit));
  *hi = _mm512_add_epi32(*hi, _mm512_and_si512(_mm512_slli_epi32(bits, kAt - 1), bit));
}

// k-row `kk` (0..31) of the q-format group at `group`.
template <WeightFormat F>
XRT_TARGET_AVX512 inline void DecodeQuantRow(const uint8_t* group, int kk, const GroupScales& g,
                                             __m512* w0, __m512* w1) {
  const uint8_t* q = group + QuantGroupQuantsOffset(F);
  if constexpr (F == WeightFormat::kQ8_0) {
    const uint8_t* row = q + kk * kPackNR;
    const __m512i q0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row)));
    const __m512i q1 =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 16)));
    *w0 = _mm512_mul_ps(g.s0, _mm512_cvtepi32_ps(q0));
    *w1 = _mm512_mul_ps(g.s1, _mm512_cvtepi32_ps(q1));
  } else {
    __m512i lo, hi;
    QuadNibbles16<F>(q, kk, &lo, &hi);
    if constexpr (HasK5HighBits(F)) AddK5HighBits16<F>(group, kk, &lo, &hi);
    if constexpr (HasIQ4Table(F)) {
      lo = IQ4Values16(lo);
      hi = IQ4Values16(hi);
    }
    *w0 = _mm512_fmadd_ps(g.s0, _mm512_cvtepi32_ps(lo), g.m0);
    *w1 = _mm512_fmadd_ps(g.s1, _mm512_cvtepi32_ps(hi), g.m1);
  }
}

// k-row `k` of a 16-bit format panel.
template <WeightFormat F>
XRT_TARGET_AVX512 inline void Decode16BitRow(const uint8_t* panel, int64_t k, __m512* w0,
                                             __m512* w1) {
  if constexpr (IsBf16PairsFormat(F)) {
    // The row's halves of its pair-row's dwords (Bf16PairsByte).
    const uint8_t* pair_row = panel + k / 2 * kPackNR * 4;
    const __m512i d0 = _mm512_loadu_si512(pair_row), d1 = _mm512_loadu_si512(pair_row + 64);
    if (Bf16PairsLowHalf(F, k)) {
      *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(d0, 16));
      *w1 = _mm512_castsi512_ps(_mm512_slli_epi32(d1, 16));
    } else {
      *w0 = _mm512_castsi512_ps(_mm512_and_si512(d0, _mm512_set1_epi32(-65536)));
      *w1 = _mm512_castsi512_ps(_mm512_and_si512(d1, _mm512_set1_epi32(-65536)));
    }
    return;
  }
  const __m256i* row = reinterpret_cast<const __m256i*>(panel + k * kPackNR * 2);
  const __m256i h0 = _mm256_loadu_si256(row), h1 = _mm256_loadu_si256(row + 1);
  if constexpr (F == WeightFormat::kF16) {
    *w0 = _mm512_cvtph_ps(h0);
    *w1 = _mm512_cvtph_ps(h1);
  } else {
    *w0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h0), 16));
    *w1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16));
  }
}

// K-quants: the factors of one sub-block for columns 0-15 / 16-31, w =
// fma(mul, q, add). q4_k, q5_k: mul = d * sc and add = -(dmin * m), both
// exact products (and d * sc * q exact), so the one rounding is the sum's, as
// in the portable decoder's product - sub. q3_k, q6_k, iq4_xs: mul = d * sc
// (exact) and add = -KQuantOffset * mul (4, 32 or 0: exact), so the fma
// rounds mul * (q - KQuantOffset) once, as the portable decoder's product does
// (a zero weight's sign may differ; see matmul.h); iq4_xs's q is its looked-up
// kIQ4Values[q] (IQ4Values16), the product exact.
struct KFactors {
  __m512 mul0, mul1, add0, add1;
};

// Sub-block `s` of the super-block at `sb`.
template <WeightFormat F>
XRT_TARGET_AVX512 inline KFactors LoadKFactors(const uint8_t* sb, int s) {
  KFactors k;
  const __m512 d0 = Halves16(sb);
  const __m512 d1 = Halves16(sb + 32);
  if constexpr (HasKInt8Scales(F)) {
    const uint8_t* sc = sb + kK6ScalesOffset + s * kPackNR;
    const __m512i sc0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
    const __m512i sc1 =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16)));
    k.mul0 = _mm512_mul_ps(d0, _mm512_cvtepi32_ps(sc0));
    k.mul1 = _mm512_mul_ps(d1, _mm512_cvtepi32_ps(sc1));
    const __m512 offset = _mm512_set1_ps(-static_cast<float>(KQuantOffset(F)));
    k.add0 = _mm512_mul_ps(k.mul0, offset);
    k.add1 = _mm512_mul_ps(k.mul1, offset);
  } else {
    const __m512 dmin0 = Halves16(sb + kKDminOffset);
    const __m512 dmin1 = Halves16(sb + kKDminOffset + 32);
    const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
    __m512 mul[2], add[2];
    const __m512 d[2] = {d0, d1}, dmin[2] = {dmin0, dmin1};
    for (int h = 0; h < 2; ++h) {
      __m512i sc, m;
      packed_simd::KScaleMin16(sb, s, h, &sc, &m);
      mul[h] = _mm512_mul_ps(d[h], _mm512_cvtepi32_ps(sc));
      const __m512 dm = _mm512_mul_ps(dmin[h], _mm512_cvtepi32_ps(m));
      add[h] = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(dm), sign));
    }
    k.mul0 = mul[0];
    k.mul1 = mul[1];
    k.add0 = add[0];
    k.add1 = add[1];
  }
  return k;
}

// k-row `kk` (0..255) of the super-block at `sb`.
template <WeightFormat F>
XRT_TARGET_AVX512 inline void DecodeKRow(const uint8_t* sb, int kk, const KFactors& k, __m512* w0,
                                         __m512* w1) {
  __m512i q0, q1;
  QuadNibbles16<F>(sb + KLowQuantsOffset(F), kk, &q0, &q1);
  if constexpr (HasK5HighBits(F)) {
    AddK5HighBits16<F>(sb, kk, &q0, &q1);
  } else if constexpr (F == WeightFormat::kQ6_K) {
    // The high bits of dword m of lane l (column 4l + m, + 16 for q1) from
    // the same bytes of the quad's high bits (K6HighByte), spread as the
    // nibbles; lane l = 2h + L holds half h's lane L. Field 2h + n at bits
    // 2 (2h + n): shifted down by 4h per half.
    const __m512i spread = QuadRowSpread(kk);
    const __m512i bytes = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + kK6HighOffset + 32 * (kk / 4))));
    const __m512i fields =
        _mm512_srlv_epi32(_mm512_shuffle_epi8(bytes, spread),
                          _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4));
    const __m512i high = _mm512_set1_epi32(48);
    q0 = _mm512_add_epi32(q0, _mm512_and_si512(_mm512_slli_epi32(fields, 4), high));
    q1 = _mm512_add_epi32(q1, _mm512_and_si512(_mm512_slli_epi32(fields, 2), high));
  } else if constexpr (HasIQ4Table(F)) {
    q0 = IQ4Values16(q0);
    q1 = IQ4Values16(q1);
  }
  *w0 = _mm512_fmadd_ps(k.mul0, _mm512_cvtepi32_ps(q0), k.add0);
  *w1 = _mm512_fmadd_ps(k.mul1, _mm512_cvtepi32_ps(q1), k.add1);
}

// DequantizePanelRows on AVX-512 (out is 64-byte aligned).
template <WeightFormat F>
XRT_TARGET_AVX512 void DequantRowsAvx512(const uint8_t* panel, int64_t k0, int64_t rows,
                                         float* out) {
  __m512 w0, w1;
  if constexpr (IsKQuantFormat(F)) {
    KFactors fac{};
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t k = k0 + r;
      const uint8_t* sb = panel + k / kSuperBlock * SuperBlockBytes(F);
      const int kk = static_cast<int>(k % kSuperBlock);
      if (r == 0 || kk % KSubBlockRows(F) == 0) fac = LoadKFactors<F>(sb, kk / KSubBlockRows(F));
      DecodeKRow<F>(sb, kk, fac, &w0, &w1);
      _mm512_store_ps(out + r * kPackNR, w0);
      _mm512_store_ps(out + r * kPackNR + 16, w1);
    }
  } else if constexpr (Is16BitFormat(F)) {
    for (int64_t r = 0; r < rows; ++r) {
      Decode16BitRow<F>(panel, k0 + r, &w0, &w1);
      _mm512_store_ps(out + r * kPackNR, w0);
      _mm512_store_ps(out + r * kPackNR + 16, w1);
    }
  } else {
    constexpr int64_t kGroupBytes = QuantGroupBytes(F);
    for (int64_t r = 0; r < rows; r += kQuantGroup) {  // k0 and rows: whole groups or the end
      const uint8_t* group = panel + (k0 + r) / kQuantGroup * kGroupBytes;
      const GroupScales g = LoadGroupScales<F>(group);
      const int n = static_cast<int>(std::min<int64_t>(kQuantGroup, rows - r));
      for (int kk = 0; kk < n; ++kk) {
        DecodeQuantRow<F>(group, kk, g, &w0, &w1);
        _mm512_store_ps(out + (r + kk) * kPackNR, w0);
        _mm512_store_ps(out + (r + kk) * kPackNR + 16, w1);
      }
    }
  }
}

// ------------------------------------------------ a quad at a time --
// DecodePairsAvx512 on the formats read as quads (HasQuads): one load of a
// quad (QuadNibbleByte) is a zmm whose dword m holds column m's quants at
// the quad's four k-rows t in its byte t (low nibble) and column m + 16's
// (high nibble). So k-row t's quants of columns 16n .. 16n + 15 are the low
// bits of that vector shifted down by 8t + 4n: no shuffle per k-row, where
// QuadNibbles16 spreads each k-row's bytes with a vpshufb. The high bits
// (q5_0, q5_1, q5_k, q3_k, q6_k) are shifted per 128-bit lane once per quad
// so that every (t, n) finds its own at a fixed bit of the same dword, and
// merged in with one vpternlogd. The quant's f32 value is then looked up
// from its low bits (vpermps reads 4 bits of each index, vpermt2ps 5) in
// place of a mask and a convert: the q4 formats' 0..15, iq4's kIQ4Values,
// q3_k's 0..7 (bit 3 ignored: the table twice over), q5's 0..31; q6_k's
// 0..63 is masked and converted. Same values, then the same fma as
// DecodeKRow / DecodeQuantRow, so the same pairs.

// A quad's bits: the low ones (q3_k: its crumb pair shifted down to the
// quad's crumbs) and the high ones shifted per lane (HasK5HighBits: the bit
// of (t, n) at bit 8t + n; q6_k: the 2-bit field of (t, n) at 8t + 2n).
struct QuadBits {
  __m512i low, high;
};

// Quad `quad` of the group or super-block at `block`.
template <WeightFormat F>
XRT_TARGET_AVX512 inline QuadBits LoadQuadBits(const uint8_t* block, int quad) {
  QuadBits b;
  const uint8_t* quants =
      block + (IsKQuantFormat(F) ? KLowQuantsOffset(F) : QuantGroupQuantsOffset(F));
  b.low = _mm512_loadu_si512(quants + LowQuadOffset(F, quad));
  if constexpr (HasCrumbs(F)) {
    b.low = _mm512_srl_epi32(b.low, _mm_cvtsi32_si128(LowQuadShift(F, quad)));
  }
  if constexpr (HasK5HighBits(F)) {
    // Byte 4c + t of the 16 holds the bit of (t, n) for column 8h + 4L + c
    // (+ 16n) at bit 4L + 2h + n (AddK5HighBits16); lane 2h + L of the
    // broadcast shifts it down by 4L + 2h.
    const __m512i bytes = _mm512_broadcast_i32x4(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + K5HighBitsOffset(F) + 16 * quad)));
    b.high =
        _mm512_srlv_epi32(bytes, _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 2, 2, 2, 2, 6, 6, 6, 6));
  } else if constexpr (F == WeightFormat::kQ6_K) {
    // Byte 16L + 4c + t of the 32 holds the field of (h, n) at bits
    // 2 (2h + n) (DecodeKRow): lanes 2 and 3 (h = 1) shifted down by 4.
    const __m512i bytes = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + kK6HighOffset + 32 * quad)));
    b.high =
        _mm512_srlv_epi32(bytes, _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4, 4, 4, 4));
  } else {
    b.high = _mm512_setzero_si512();
  }
  return b;
}

// x shifted down by kBits (up by -kBits when negative).
template <int kBits>
XRT_TARGET_AVX512 inline __m512i ShiftDown(__m512i x) {
  if constexpr (kBits > 0) return _mm512_srli_epi32(x, kBits);
  if constexpr (kBits < 0) return _mm512_slli_epi32(x, -kBits);
  return x;
}

// The f32 values a format's quants look up (QuadQuantFloats).
struct QuantTable {
  __m512 lo, hi;  // entries 0-15, 16-31 (vpermt2ps; q5 only)
};

template <WeightFormat F>
XRT_TARGET_AVX512 inline QuantTable LoadQuantTable() {
  const __m512 count = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  QuantTable t{count, _mm512_add_ps(count, _mm512_set1_ps(16))};
  if constexpr (HasIQ4Table(F)) {
    alignas(64) static constexpr float kValues[16] = {
        kIQ4Values[0],  kIQ4Values[1],  kIQ4Values[2],  kIQ4Values[3],
        kIQ4Values[4],  kIQ4Values[5],  kIQ4Values[6],  kIQ4Values[7],
        kIQ4Values[8],  kIQ4Values[9],  kIQ4Values[10], kIQ4Values[11],
        kIQ4Values[12], kIQ4Values[13], kIQ4Values[14], kIQ4Values[15]};
    t.lo = _mm512_load_ps(kValues);
  } else if constexpr (HasCrumbs(F)) {
    t.lo = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
  }
  return t;
}

// The f32 quants of k-row kT (0..3) of a quad, columns 16n .. 16n + 15.
template <WeightFormat F, int kT, int kN>
XRT_TARGET_AVX512 inline __m512 QuadQuantFloats(const QuadBits& b, const QuantTable& table) {
  const __m512i low = ShiftDown<8 * kT + 4 * kN>(b.low);
  if constexpr (HasK5HighBits(F)) {
    // Bits below LowQuantBits from the low quants, the rest from the high
    // bits moved to LowQuantBits (above it: ignored by the lookup).
    constexpr int kAt = LowQuantBits(F);
    const __m512i q = _mm512_ternarylogic_epi32(low, ShiftDown<8 * kT + kN - kAt>(b.high),
                                                _mm512_set1_epi32((1 << kAt) - 1), 0xe4);
    if constexpr (HasCrumbs(F)) return _mm512_permutexvar_ps(q, table.lo);
    return _mm512_permutex2var_ps(table.lo, q, table.hi);
  } else if constexpr (F == WeightFormat::kQ6_K) {
    const __m512i q = _mm512_ternarylogic_epi32(low, ShiftDown<8 * kT + 2 * kN - 4>(b.high),
                                                _mm512_set1_epi32(15), 0xe4);
    return _mm512_cvtepi32_ps(_mm512_and_si512(q, _mm512_set1_epi32(63)));
  } else {
    return _mm512_permutexvar_ps(low, table.lo);
  }
}

// The quad's two pair-rows (k-rows 0, 1 and 2, 3) at out, [2][kPackNR] dwords:
// w = fma(mul, q, add) per column half as DecodeKRow / DecodeQuantRow.
template <WeightFormat F, bool kOddLow, int kPair>
XRT_TARGET_AVX512_BF16 inline void StoreQuadPairRow(const QuadBits& b, const QuantTable& table,
                                                    const __m512 mul[2], const __m512 add[2],
                                                    float* out) {
  const __m512 e0 = _mm512_fmadd_ps(mul[0], QuadQuantFloats<F, 2 * kPair, 0>(b, table), add[0]);
  const __m512 o0 = _mm512_fmadd_ps(mul[0], QuadQuantFloats<F, 2 * kPair + 1, 0>(b, table), add[0]);
  const __m512 e1 = _mm512_fmadd_ps(mul[1], QuadQuantFloats<F, 2 * kPair, 1>(b, table), add[1]);
  const __m512 o1 = _mm512_fmadd_ps(mul[1], QuadQuantFloats<F, 2 * kPair + 1, 1>(b, table), add[1]);
  _mm512_storeu_si512(out + kPair * kPackNR, Bf16PairsFor<kOddLow>(e0, o0));
  _mm512_storeu_si512(out + kPair * kPackNR + 16, Bf16PairsFor<kOddLow>(e1, o1));
}

// How far ahead of its reads DecodePairsAvx512 prefetches the panel (into
// L1, a block's share per mul / add): the decode of a row's k-blocks runs
// from DRAM at M = 1 (AMX, 8192 x 2048 from DRAM, 2 threads: q4_k 6.8-7.2 ->
// 9.3-9.9 GB/s, q6_k 6.6-6.9 -> 9.0-9.4; 2 KiB ahead about the same, 8 KiB
// or into L2 a little less).
constexpr int64_t kDecodePairsPrefetchBytes = 4096;

// DequantRowsAvx512 and Bf16PairsAvx512 in one pass, for the formats with
// integer quants: k-rows [k0, k0 + rows) (whole groups or super-blocks, so
// whole quads) decoded and stored as bf16 pairs ([rows / 2][32] dwords): a
// quad at a time (above), q8_0 two k-rows at a time.
template <WeightFormat F, bool kOddLow>
XRT_TARGET_AVX512_BF16 void DecodePairsAvx512(const uint8_t* panel, int64_t k0, int64_t rows,
                                              float* out) {
  if constexpr (F == WeightFormat::kQ8_0) {
    __m512 e0, e1, o0, o1;
    for (int64_t r = 0; r < rows; r += kQuantGroup) {
      const uint8_t* group = panel + (k0 + r) / kQuantGroup * QuantGroupBytes(F);
      packed_simd::PrefetchPart<kDecodePairsPrefetchBytes, 3>(group, QuantGroupBytes(F), 0, 1);
      const GroupScales g = LoadGroupScales<F>(group);
      for (int kk = 0; kk < kQuantGroup; kk += 2) {
        DecodeQuantRow<F>(group, kk, g, &e0, &e1);
        DecodeQuantRow<F>(group, kk + 1, g, &o0, &o1);
        _mm512_storeu_si512(out + (r + kk) / 2 * kPackNR, Bf16PairsFor<kOddLow>(e0, o0));
        _mm512_storeu_si512(out + (r + kk) / 2 * kPackNR + 16, Bf16PairsFor<kOddLow>(e1, o1));
      }
    }
  } else {
    static_assert(HasQuads(F));
    const QuantTable table = LoadQuantTable<F>();
    // Rows that share one mul / add, the block holding them and its quads.
    constexpr int kRows = IsKQuantFormat(F) ? KSubBlockRows(F) : kQuantGroup;
    constexpr int64_t kBlockRows = IsKQuantFormat(F) ? kSuperBlock : kQuantGroup;
    constexpr int64_t kBlockBytes = IsKQuantFormat(F) ? SuperBlockBytes(F) : QuantGroupBytes(F);
    for (int64_t r = 0; r < rows; r += kRows) {
      const int64_t k = k0 + r;
      const uint8_t* block = panel + k / kBlockRows * kBlockBytes;
      const int kk = static_cast<int>(k % kBlockRows);
      packed_simd::PrefetchPart<kDecodePairsPrefetchBytes, 3>(block, kBlockBytes, kk / kRows,
                                                              kBlockRows / kRows);
      __m512 mul[2], add[2];
      if constexpr (IsKQuantFormat(F)) {
        const KFactors fac = LoadKFactors<F>(block, kk / kRows);
        mul[0] = fac.mul0, mul[1] = fac.mul1, add[0] = fac.add0, add[1] = fac.add1;
      } else {
        const GroupScales g = LoadGroupScales<F>(block);
        mul[0] = g.s0, mul[1] = g.s1, add[0] = g.m0, add[1] = g.m1;
      }
      float* o = out + r / 2 * kPackNR;
      for (int q = 0; q < kRows / 4; ++q, o += 2 * kPackNR) {
        const QuadBits b = LoadQuadBits<F>(block, kk / 4 + q);
        StoreQuadPairRow<F, kOddLow, 0>(b, table, mul, add, o);
        StoreQuadPairRow<F, kOddLow, 1>(b, table, mul, add, o);
      }
    }
  }
}

// The bf16, bf16_pairs, f16 and f32 panels' k-rows [k0, k0 + rows) as AMX's pairs
// (kOddLow), out[ceil(rows / 2)][kPackNR] dwords; an odd `rows`' last row
// pairs with a zero (kBF16's pad).
template <WeightFormat F>
XRT_TARGET_AVX512_BF16 void DecodeFloatPairsAmx(const uint8_t* panel, int64_t k0, int64_t rows,
                                                float* out) {
  if constexpr (F == WeightFormat::kF16) {
    DequantRowsAvx512<F>(panel, k0, rows, out);
    if (rows % 2 == 1) std::fill_n(out + rows * kPackNR, kPackNR, 0.0f);
    Bf16PairsAvx512<true>(out, (rows + 1) / 2 * 2);
  } else {
    // k0 is even (a k-block start): pair-row k0 / 2 + p of the panel.
    for (int64_t p = 0; p < (rows + 1) / 2; ++p) {
      __m512i b0, b1;
      DirectPairRow<F, true>(panel, k0 / 2 + p, 2 * p + 1 < rows, &b0, &b1);
      _mm512_storeu_si512(out + p * kPackNR, b0);
      _mm512_storeu_si512(out + p * kPackNR + 16, b1);
    }
  }
}

// k-rows [k0, k0 + rows) of a panel as bf16 pairs, out[ceil(rows / 2)][kPackNR]
// dwords: for vdpbf16ps (the formats with integer quants only, whose blocks
// are whole pairs; nullptr for the others), or for AMX (kOddLow, every format).
template <bool kOddLow>
DecodePairsFn DecodePairsFor(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQ8_0:
      return &DecodePairsAvx512<WeightFormat::kQ8_0, kOddLow>;
    case WeightFormat::kQ4_0:
      return &DecodePairsAvx512<WeightFormat::kQ4_0, kOddLow>;
    case WeightFormat::kQ4_1:
      return &DecodePairsAvx512<WeightFormat::kQ4_1, kOddLow>;
    case WeightFormat::kQ5_0:
      return &DecodePairsAvx512<WeightFormat::kQ5_0, kOddLow>;
    case WeightFormat::kQ5_1:
      return &DecodePairsAvx512<WeightFormat::kQ5_1, kOddLow>;
    case WeightFormat::kQ3_K:
      return &DecodePairsAvx512<WeightFormat::kQ3_K, kOddLow>;
    case WeightFormat::kQ4_K:
      return &DecodePairsAvx512<WeightFormat::kQ4_K, kOddLow>;
    case WeightFormat::kQ5_K:
      return &DecodePairsAvx512<WeightFormat::kQ5_K, kOddLow>;
    case WeightFormat::kQ6_K:
      return &DecodePairsAvx512<WeightFormat::kQ6_K, kOddLow>;
    case WeightFormat::kIQ4_NL:
      return &DecodePairsAvx512<WeightFormat::kIQ4_NL, kOddLow>;
    case WeightFormat::kIQ4_XS:
      return &DecodePairsAvx512<WeightFormat::kIQ4_XS, kOddLow>;
    case WeightFormat::kF32:
      return kOddLow ? &DecodeFloatPairsAmx<WeightFormat::kF32> : nullptr;
    case WeightFormat::kF16:
      return kOddLow ? &DecodeFloatPairsAmx<WeightFormat::kF16> : nullptr;
    case WeightFormat::kBF16:
      return kOddLow ? &DecodeFloatPairsAmx<WeightFormat::kBF16> : nullptr;
    case WeightFormat::kBF16Pairs:
      return kOddLow ? &DecodeFloatPairsAmx<WeightFormat::kBF16Pairs> : nullptr;
    case WeightFormat::kBF16PairsAmx:
      break;  // read as stored by both units (AMX in place)
  }
  return nullptr;
}

// Fused decode GEMV: R (<= kGemvMaxRows) rows of A against P consecutive
// panels over the whole of K, each k-row decoded in registers and used at
// once; one fma chain per output in increasing k like every tile kernel.
// Two panels in flight for R <= 2 keep 4 * R independent chains, enough to
// hide the FMA latency behind the decoding.
struct GemvArgs {
  const float* a;  // row 0 of the R rows of A, row stride lda
  int64_t lda;
  const uint8_t* panel;  // the first of the P panels
  int64_t panel_bytes;
  int64_t k;
  const float* bias;  // at the first panel's first column, or null
  float* c;           // row 0, first panel's first column
  int64_t ldc;
  int ncols;  // real columns of the P panels together (1 .. P * kPackNR)
  bool accumulate;
};
using GemvFn = void (*)(const GemvArgs&);

// Software prefetch distance of the fused kernel, in bytes of each panel's
// stream (into L2; the next lines into L1 come from the hardware prefetcher).
constexpr int64_t kGemvPrefetchBytes = 8192;

XRT_TARGET_AVX512 inline void StoreOutputs(const GemvArgs& g, int i, int col0, __m512 v0,
                                           __m512 v1) {
  packed_simd::StoreRow32Avx512(g.c + i * g.ldc + col0, g.bias ? g.bias + col0 : nullptr,
                                g.accumulate, std::min(kPackNR, g.ncols - col0), v0, v1);
}

// The fused decode kernels' walk over the P panels (GemvAvx512,
// GemvAvx512Bf16). K-quants: the P panels' super-block `blk` (*sb) and its
// sub-block s's factors (*fac), with that sub-block's share of the
// super-block's lines prefetched ahead.
template <WeightFormat F, int P>
__attribute__((always_inline)) XRT_TARGET_AVX512 inline void StartSubBlock(const GemvArgs& g,
                                                                           int64_t blk, int s,
                                                                           const uint8_t** sb,
                                                                           KFactors* fac) {
  constexpr int kSubs = kSuperBlock / KSubBlockRows(F);
  constexpr int64_t kBytes = SuperBlockBytes(F), kLines = kBytes / 64;
#pragma GCC unroll 2
  for (int p = 0; p < P; ++p) {
    sb[p] = g.panel + p * g.panel_bytes + blk * kBytes;
    const char* pf = reinterpret_cast<const char*>(sb[p]) + kGemvPrefetchBytes;
    for (int64_t line = s * kLines / kSubs; line < (s + 1) * kLines / kSubs; ++line) {
      _mm_prefetch(pf + line * 64, _MM_HINT_T1);
    }
    fac[p] = LoadKFactors<F>(sb[p], s);
  }
}

// The q formats: the P panels' group `grp` (*group) and its scales (*sc), its
// lines prefetched ahead.
template <WeightFormat F, int P>
__attribute__((always_inline)) XRT_TARGET_AVX512 inline void StartGroup(const GemvArgs& g,
                                                                        int64_t grp,
                                                                        GroupScales* sc,
                                                                        const uint8_t** group) {
  constexpr int64_t kGroupBytes = QuantGroupBytes(F);
#pragma GCC unroll 2
  for (int p = 0; p < P; ++p) {
    group[p] = g.panel + p * g.panel_bytes + grp * kGroupBytes;
    const char* pf = reinterpret_cast<const char*>(group[p]) + kGemvPrefetchBytes;
    for (int64_t line = 0; line < kGroupBytes; line += 64) _mm_prefetch(pf + line, _MM_HINT_T1);
    sc[p] = LoadGroupScales<F>(group[p]);
  }
}

// Bf16: kBF16's chain (matmul.h): the k-rows in pair order, the decoded
// weights rounded to bf16 operands in registers (A comes rounded), run under
// FlushToZeroScope.
template <WeightFormat F, int R, int P, bool Bf16>
XRT_TARGET_AVX512 void GemvAvx512(const GemvArgs& g) {
  __m512 acc[P][R][2];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[p][i][0] = acc[p][i][1] = _mm512_setzero_ps();
  __m512 w0[P], w1[P];
  if constexpr (IsKQuantFormat(F)) {
    constexpr int kSub = KSubBlockRows(F), kSubs = kSuperBlock / kSub;
    for (int64_t blk = 0; blk < g.k / kSuperBlock; ++blk) {
      for (int s = 0; s < kSubs; ++s) {
        KFactors fac[P];
        const uint8_t* sb[P];
        StartSubBlock<F, P>(g, blk, s, sb, fac);
        const float* a = g.a + blk * kSuperBlock + s * kSub;
#pragma GCC unroll 2
        for (int kk = 0; kk < kSub; ++kk) {
          const int row = Bf16 ? kk ^ 1 : kk;
#pragma GCC unroll 2
          for (int p = 0; p < P; ++p) {
            DecodeKRow<F>(sb[p], s * kSub + row, fac[p], &w0[p], &w1[p]);
            if constexpr (Bf16) {
              w0[p] = RoundToBf16Avx512(w0[p]);
              w1[p] = RoundToBf16Avx512(w1[p]);
            }
#pragma GCC unroll 4
            for (int i = 0; i < R; ++i) {
              const __m512 av = _mm512_set1_ps(a[i * g.lda + row]);
              acc[p][i][0] = _mm512_fmadd_ps(av, w0[p], acc[p][i][0]);
              acc[p][i][1] = _mm512_fmadd_ps(av, w1[p], acc[p][i][1]);
            }
          }
        }
      }
    }
  } else if constexpr (Is16BitFormat(F)) {
    // kBF16: K padded to whole pairs (matmul.h).
    const int64_t steps = Bf16 ? (g.k + 1) / 2 * 2 : g.k;
    for (int64_t k = 0; k < steps; ++k) {
      const int64_t row = Bf16 ? k ^ 1 : k;
      if (Bf16 && row == g.k) {
        // The zero after an odd K, first in its pair: -0 sums become +0.
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
          for (int i = 0; i < R; ++i) {
            acc[p][i][0] = _mm512_add_ps(acc[p][i][0], _mm512_setzero_ps());
            acc[p][i][1] = _mm512_add_ps(acc[p][i][1], _mm512_setzero_ps());
          }
        continue;
      }
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        const uint8_t* panel = g.panel + p * g.panel_bytes;
        _mm_prefetch(reinterpret_cast<const char*>(panel + row * kPackNR * 2 + kGemvPrefetchBytes),
                     _MM_HINT_T1);
        Decode16BitRow<F>(panel, row, &w0[p], &w1[p]);
        if constexpr (Bf16) {
          w0[p] = RoundToBf16Avx512(w0[p]);
          w1[p] = RoundToBf16Avx512(w1[p]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < R; ++i) {
          const __m512 av = _mm512_set1_ps(g.a[i * g.lda + row]);
          acc[p][i][0] = _mm512_fmadd_ps(av, w0[p], acc[p][i][0]);
          acc[p][i][1] = _mm512_fmadd_ps(av, w1[p], acc[p][i][1]);
        }
      }
    }
  } else {
    for (int64_t grp = 0; grp < g.k / kQuantGroup; ++grp) {
      GroupScales sc[P];
      const uint8_t* group[P];
      StartGroup<F, P>(g, grp, sc, group);
      const float* a = g.a + grp * kQuantGroup;
#pragma GCC unroll 2
      for (int kk = 0; kk < kQuantGroup; ++kk) {
        const int row = Bf16 ? kk ^ 1 : kk;
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) {
          DecodeQuantRow<F>(group[p], row, sc[p], &w0[p], &w1[p]);
          if constexpr (Bf16) {
            w0[p] = RoundToBf16Avx512(w0[p]);
            w1[p] = RoundToBf16Avx512(w1[p]);
          }
#pragma GCC unroll 4
          for (int i = 0; i < R; ++i) {
            const __m512 av = _mm512_set1_ps(a[i * g.lda + row]);
            acc[p][i][0] = _mm512_fmadd_ps(av, w0[p], acc[p][i][0]);
            acc[p][i][1] = _mm512_fmadd_ps(av, w1[p], acc[p][i][1]);
          }
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int p = 0; p < P; ++p) {
    if (p * kPackNR >= g.ncols) break;
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) StoreOutputs(g, i, p * kPackNR, acc[p][i][0], acc[p][i][1]);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Panels per fused-kernel call for R rows.
constexpr int GemvPanels(int rows) { return rows <= 2 ? 2 : 1; }

// acc[i] += row i's bf16 pair (a[i]) times the pair-row lo (columns 0-15) /
// hi (16-31), i < R.
template <int R>
XRT_TARGET_AVX512_BF16 inline void AddPairRow(const uint32_t* a, __m512i lo, __m512i hi,
                                              __m512 (*acc)[2]) {
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    const __m512i av = _mm512_set1_epi32(static_cast<int>(a[i]));
    acc[i][0] = DotBf16Pairs(acc[i][0], av, lo);
    acc[i][1] = DotBf16Pairs(acc[i][1], av, hi);
  }
}

// GemvAvx512<F, R, P, true> on the avx512_bf16 tier, same bits: a pair of
// k-rows per step, decoded and paired in registers (bf16: as stored; the
// others rounded to bf16 operands by Bf16Pairs) and summed by vdpbf16ps
// against A packed as bf16 pairs (PackTilePairsAvx512: a[q * R + i] is row
// i's pair q).
template <WeightFormat F, int R, int P>
XRT_TARGET_AVX512_BF16 void GemvAvx512Bf16(const GemvArgs& g) {
  __m512 acc[P][R][2];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[p][i][0] = acc[p][i][1] = _mm512_setzero_ps();
  const uint32_t* a = reinterpret_cast<const uint32_t*>(g.a);
  if constexpr (IsKQuantFormat(F)) {
    constexpr int kSub = KSubBlockRows(F), kSubs = kSuperBlock / kSub;
    for (int64_t blk = 0; blk < g.k / kSuperBlock; ++blk) {
      for (int s = 0; s < kSubs; ++s) {
        KFactors fac[P];
        const uint8_t* sb[P];
        StartSubBlock<F, P>(g, blk, s, sb, fac);
        const uint32_t* as = a + (blk * kSuperBlock + s * kSub) / 2 * R;
        for (int kk = 0; kk < kSub; kk += 2) {
#pragma GCC unroll 2
          for (int p = 0; p < P; ++p) {
            __m512 e0, e1, o0, o1;
            DecodeKRow<F>(sb[p], s * kSub + kk, fac[p], &e0, &e1);
            DecodeKRow<F>(sb[p], s * kSub + kk + 1, fac[p], &o0, &o1);
            AddPairRow<R>(as + kk / 2 * R, Bf16Pairs(e0, o0), Bf16Pairs(e1, o1), acc[p]);
          }
        }
      }
    }
  } else if constexpr (Is16BitFormat(F)) {
    const int64_t pairs = (g.k + 1) / 2;
    for (int64_t q = 0; q < pairs; ++q) {
      const bool odd = 2 * q + 1 < g.k;
#pragma GCC unroll 2
      for (int p = 0; p < P; ++p) {
        const uint8_t* panel = g.panel + p * g.panel_bytes;
        const char* pf =
            reinterpret_cast<const char*>(panel + q * 4 * kPackNR) + kGemvPrefetchBytes;
        _mm_prefetch(pf, _MM_HINT_T1);
        _mm_prefetch(pf + 64, _MM_HINT_T1);
        __m512i lo, hi;
        if constexpr (IsBf16PairsFormat(F)) {
          Bf16PairsRow<F, false>(panel, q, &lo, &hi);
        } else if constexpr (F == WeightFormat::kBF16) {
          Bf16PairRow(panel, q, odd, &lo, &hi);
        } else {
          __m512 e0, e1, o0 = _mm512_setzero_ps(), o1 = _mm512_setzero_ps();
          Decode16BitRow<F>(panel, 2 * q, &e0, &e1);
          if (odd) Decode16BitRow<F>(panel, 2 * q + 1, &o0, &o1);
          lo = Bf16Pairs(e0, o0);
          hi = Bf16Pairs(e1, o1);
        }
        AddPairRow<R>(a + q * R, lo, hi, acc[p]);
      }
    }
  } else {
    for (int64_t grp = 0; grp < g.k / kQuantGroup; ++grp) {
      GroupScales sc[P];
      const uint8_t* group[P];
      StartGroup<F, P>(g, grp, sc, group);
      const uint32_t* ag = a + grp * kQuantGroup / 2 * R;
      for (int kk = 0; kk < kQuantGroup; kk += 2) {
#pragma GCC unroll 2
        for (int p = 0; p < P; ++p) {
          __m512 e0, e1, o0, o1;
          DecodeQuantRow<F>(group[p], kk, sc[p], &e0, &e1);
          DecodeQuantRow<F>(group[p], kk + 1, sc[p], &o0, &o1);
          AddPairRow<R>(ag + kk / 2 * R, Bf16Pairs(e0, o0), Bf16Pairs(e1, o1), acc[p]);
        }
      }
    }
  }
#pragma GCC unroll 2
  for (int p = 0; p < P; ++p) {
    if (p * kPackNR >= g.ncols) break;
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) StoreOutputs(g, i, p * kPackNR, acc[p][i][0], acc[p][i][1]);
  }
}

template <WeightFormat F>
GemvFn GemvBf16For(int rows, int panels) {
  switch (rows * 4 + panels) {
    case 1 * 4 + 1:
      return &GemvAvx512Bf16<F, 1, 1>;
    case 1 * 4 + 2:
      return &GemvAvx512Bf16<F, 1, 2>;
    case 2 * 4 + 1:
      return &GemvAvx512Bf16<F, 2, 1>;
    case 2 * 4 + 2:
      return &GemvAvx512Bf16<F, 2, 2>;
    case 3 * 4 + 1:
      return &GemvAvx512Bf16<F, 3, 1>;
    case 4 * 4 + 1:
      return &GemvAvx512Bf16<F, 4, 1>;
  }
  return nullptr;
}

template <WeightFormat F, bool Bf16>
GemvFn GemvFor(int rows, int panels) {
  switch (rows * 4 + panels) {
    case 1 * 4 + 1:
      return &GemvAvx512<F, 1, 1, Bf16>;
    case 1 * 4 + 2:
      return &GemvAvx512<F, 1, 2, Bf16>;
    case 2 * 4 + 1:
      return &GemvAvx512<F, 2, 1, Bf16>;
    case 2 * 4 + 2:
      return &GemvAvx512<F, 2, 2, Bf16>;
    case 3 * 4 + 1:
      return &GemvAvx512<F, 3, 1, Bf16>;
    case 4 * 4 + 1:
      return &GemvAvx512<F, 4, 1, Bf16>;
  }
  return nullptr;
}

template <WeightFormat F>
GemvFn GemvFor(int rows, int panels, ComputeType compute) {
  return compute == ComputeType::kBF16 ? GemvFor<F, true>(rows, panels)
                                       : GemvFor<F, false>(rows, panels);
}

// GemvKernel's twin on the avx512_bf16 tier (kBF16).
GemvFn GemvBf16Kernel(WeightFormat f, int rows, int panels) {
  switch (f) {
    case WeightFormat::kF16:
      return GemvBf16For<WeightFormat::kF16>(rows, panels);
    case WeightFormat::kBF16:
      return GemvBf16For<WeightFormat::kBF16>(rows, panels);
    case WeightFormat::kBF16Pairs:
      return GemvBf16For<WeightFormat::kBF16Pairs>(rows, panels);
    case WeightFormat::kBF16PairsAmx:
      return GemvBf16For<WeightFormat::kBF16PairsAmx>(rows, panels);
    case WeightFormat::kQ8_0:
      return GemvBf16For<WeightFormat::kQ8_0>(rows, panels);
    case WeightFormat::kQ4_0:
      return GemvBf16For<WeightFormat::kQ4_0>(rows, panels);
    case WeightFormat::kQ4_1:
      return GemvBf16For<WeightFormat::kQ4_1>(rows, panels);
    case WeightFormat::kQ5_0:
      return GemvBf16For<WeightFormat::kQ5_0>(rows, panels);
    case WeightFormat::kQ5_1:
      return GemvBf16For<WeightFormat::kQ5_1>(rows, panels);
    case WeightFormat::kQ3_K:
      return GemvBf16For<WeightFormat::kQ3_K>(rows, panels);
    case WeightFormat::kQ4_K:
      return GemvBf16For<WeightFormat::kQ4_K>(rows, panels);
    case WeightFormat::kQ5_K:
      return GemvBf16For<WeightFormat::kQ5_K>(rows, panels);
    case WeightFormat::kQ6_K:
      return GemvBf16For<WeightFormat::kQ6_K>(rows, panels);
    case WeightFormat::kIQ4_NL:
      return GemvBf16For<WeightFormat::kIQ4_NL>(rows, panels);
    case WeightFormat::kIQ4_XS:
      return GemvBf16For<WeightFormat::kIQ4_XS>(rows, panels);
    case WeightFormat::kF32:
      break;
  }
  return nullptr;
}

GemvFn GemvKernel(WeightFormat f, int rows, int panels, ComputeType c) {
  switch (f) {
    case WeightFormat::kF16:
      return GemvFor<WeightFormat::kF16>(rows, panels, c);
    case WeightFormat::kBF16:
      return GemvFor<WeightFormat::kBF16>(rows, panels, c);
    case WeightFormat::kBF16Pairs:
      return GemvFor<WeightFormat::kBF16Pairs>(rows, panels, c);
    case WeightFormat::kBF16PairsAmx:
      return GemvFor<WeightFormat::kBF16PairsAmx>(rows, panels, c);
    case WeightFormat::kQ8_0:
      return GemvFor<WeightFormat::kQ8_0>(rows, panels, c);
    case WeightFormat::kQ4_0:
      return GemvFor<WeightFormat::kQ4_0>(rows, panels, c);
    case WeightFormat::kQ4_1:
      return GemvFor<WeightFormat::kQ4_1>(rows, panels, c);
    case WeightFormat::kQ5_0:
      return GemvFor<WeightFormat::kQ5_0>(rows, panels, c);
    case WeightFormat::kQ5_1:
      return GemvFor<WeightFormat::kQ5_1>(rows, panels, c);
    case WeightFormat::kQ3_K:
      return GemvFor<WeightFormat::kQ3_K>(rows, panels, c);
    case WeightFormat::kQ4_K:
      return GemvFor<WeightFormat::kQ4_K>(rows, panels, c);
    case WeightFormat::kQ5_K:
      return GemvFor<WeightFormat::kQ5_K>(rows, panels, c);
    case WeightFormat::kQ6_K:
      return GemvFor<WeightFormat::kQ6_K>(rows, panels, c);
    case WeightFormat::kIQ4_NL:
      return GemvFor<WeightFormat::kIQ4_NL>(rows, panels, c);
    case WeightFormat::kIQ4_XS:
      return GemvFor<WeightFormat::kIQ4_XS>(rows, panels, c);
    case WeightFormat::kF32:
      break;
  }
  return nullptr;
}

// The work units of a fused GEMV: groups of `per_unit` consecutive panels,
// kernel_for_count[p] computing p of them.
void RunGemvUnits(const MatmulArgs& args, ThreadPool* pool, const float* a, int64_t lda,
                  int per_unit, const GemvFn* kernel_for_count) {
  const int64_t panels = (args.n + kPackNR - 1) / kPackNR;
  const int64_t units = (panels + per_unit - 1) / per_unit;
  const int64_t panel_bytes = PackedPanelBytes(args.w_format, args.k);
  auto run_units = [&](int64_t u0, int64_t u1) {
    const FlushToZeroScope ftz(args.compute == ComputeType::kBF16);
    GemvArgs g;
    g.a = a;
    g.lda = lda;
    g.panel_bytes = panel_bytes;
    g.k = args.k;
    g.ldc = args.ldc;
    g.accumulate = args.accumulate;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t p0 = u * per_unit;
      const int count = static_cast<int>(std::min<int64_t>(per_unit, panels - p0));
      const int64_t col0 = p0 * kPackNR;
      g.panel = static_cast<const uint8_t*>(args.packed_w) + p0 * panel_bytes;
      g.bias = args.bias ? args.bias + col0 : nullptr;
      g.c = args.c + col0;
      g.ncols = static_cast<int>(std::min<int64_t>(count * kPackNR, args.n - col0));
      kernel_for_count[count](g);
    }
  };
  ParallelForUnits(pool, units, run_units);
}

// C = A·Wᵀ for m <= kGemvMaxRows on a non-f32 format: work units are groups
// of GemvPanels(m) consecutive panels.
void GemvFusedAvx512(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa) {
  const int rows = static_cast<int>(args.m);
  const float* a = args.a;
  int64_t lda = args.lda;
  const bool bf16 = args.compute == ComputeType::kBF16;
  if (bf16 && IsaAtLeast(isa, CpuIsa::kAvx512Bf16)) {
    // vdpbf16ps on A's rows as bf16 pairs.
    thread_local std::vector<uint32_t> pairs;
    pairs.resize(rows * ((args.k + 1) / 2));
    PackTilePairsAvx512(args.a, args.lda, rows, args.k, pairs.data());
    const GemvFn kernel_for_count[3] = {
        nullptr, GemvBf16Kernel(args.w_format, rows, 1),
        GemvPanels(rows) > 1 ? GemvBf16Kernel(args.w_format, rows, 2) : nullptr};
    RunGemvUnits(args, pool, reinterpret_cast<const float*>(pairs.data()), 0, GemvPanels(rows),
                 kernel_for_count);
    return;
  }
  if (bf16) {
    // The rows of A rounded once here rather than per panel in the kernel.
    thread_local std::vector<float> rounded;
    rounded.resize(rows * args.k);
    for (int i = 0; i < rows; ++i)
      for (int64_t kk = 0; kk < args.k; ++kk)
        rounded[i * args.k + kk] = RoundToBf16Operand(args.a[i * args.lda + kk]);
    a = rounded.data();
    lda = args.k;
  }
  const GemvFn kernel_for_count[3] = {
      nullptr, GemvKernel(args.w_format, rows, 1, args.compute),
      GemvPanels(rows) > 1 ? GemvKernel(args.w_format, rows, 2, args.compute) : nullptr};
  RunGemvUnits(args, pool, a, lda, GemvPanels(rows), kernel_for_count);
}

// The fused decode GEMV on AVX2, for one row of A in f32 compute: P panels'
// k-rows decoded in registers (DecodeQuantRowAvx2, ...) and used at once, one
// fma chain per output in increasing k as in every tile kernel, so the
// results equal the tile path's on the decoded block.
XRT_TARGET_AVX2 inline void StoreOutputsAvx2(const GemvArgs& g, int col0, const __m256* acc) {
  packed_simd::StoreRow32Avx2(g.c + col0, g.bias ? g.bias + col0 : nullptr, g.accumulate,
                              std::min(kPackNR, g.ncols - col0), acc);
}

// acc[b] += a * w[b], b = 0..3.
XRT_TARGET_AVX2 inline void FmaRowAvx2(const __m256* w, float a, __m256* acc) {
  const __m256 av = _mm256_set1_ps(a);
  for (int b = 0; b < 4; ++b) acc[b] = _mm256_fmadd_ps(av, w[b], acc[b]);
}

template <WeightFormat F, int P>
XRT_TARGET_AVX2 void GemvAvx2(const GemvArgs& g) {
  __m256 acc[P][4], w[P][4];
  for (int p = 0; p < P; ++p)
    for (int b = 0; b < 4; ++b) acc[p][b] = _mm256_setzero_ps();
  if constexpr (IsKQuantFormat(F)) {
    constexpr int kSub = KSubBlockRows(F), kSubs = kSuperBlock / kSub;
    constexpr int64_t kBytes = SuperBlockBytes(F), kLines = kBytes / 64;
    for (int64_t blk = 0; blk < g.k / kSuperBlock; ++blk) {
      for (int s = 0; s < kSubs; ++s) {
        __m256 mul[P][4], add[P][4];
        const uint8_t* sb[P];
        for (int p = 0; p < P; ++p) {
          sb[p] = g.panel + p * g.panel_bytes + blk * kBytes;
          const char* pf = reinterpret_cast<const char*>(sb[p]) + kGemvPrefetchBytes;
          for (int64_t line = s * kLines / kSubs; line < (s + 1) * kLines / kSubs; ++line) {
            _mm_prefetch(pf + line * 64, _MM_HINT_T1);
          }
          LoadKFactorsAvx2<F>(sb[p], s, mul[p], add[p]);
        }
        const float* a = g.a + blk * kSuperBlock + s * kSub;
        // By quads, k-row t of a quad unrolled (as below).
        for (int kq = 0; kq < kSub; kq += 4) {
#pragma GCC unroll 4
          for (int t = 0; t < 4; ++t) {
            for (int p = 0; p < P; ++p) {
              DecodeKRowAvx2<F>(sb[p], s * kSub + kq + t, mul[p], add[p], w[p]);
              FmaRowAvx2(w[p], a[kq + t], acc[p]);
            }
          }
        }
      }
    }
  } else if constexpr (Is16BitFormat(F)) {
    for (int64_t k = 0; k < g.k; ++k) {
      for (int p = 0; p < P; ++p) {
        const uint8_t* panel = g.panel + p * g.panel_bytes;
        _mm_prefetch(reinterpret_cast<const char*>(panel + k * kPackNR * 2 + kGemvPrefetchBytes),
                     _MM_HINT_T1);
        Decode16BitRowAvx2<F>(panel, k, w[p]);
        FmaRowAvx2(w[p], g.a[k], acc[p]);
      }
    }
  } else {
    constexpr int64_t kGroupBytes = QuantGroupBytes(F);
    for (int64_t grp = 0; grp < g.k / kQuantGroup; ++grp) {
      __m256 scale[P][4], min[P][4];
      const uint8_t* group[P];
      for (int p = 0; p < P; ++p) {
        group[p] = g.panel + p * g.panel_bytes + grp * kGroupBytes;
        const char* pf = reinterpret_cast<const char*>(group[p]) + kGemvPrefetchBytes;
        for (int64_t line = 0; line < kGroupBytes; line += 64) _mm_prefetch(pf + line, _MM_HINT_T1);
        LoadGroupScalesAvx2<F>(group[p], scale[p], min[p]);
      }
      const float* a = g.a + grp * kQuantGroup;
      // By quads of k-rows, k-row t of a quad unrolled (q4: the quads'
      // shuffle controls are then constants).
      for (int kq = 0; kq < kQuantGroup; kq += 4) {
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          for (int p = 0; p < P; ++p) {
            DecodeQuantRowAvx2<F>(group[p], kq + t, scale[p], min[p], w[p]);
            FmaRowAvx2(w[p], a[kq + t], acc[p]);
          }
        }
      }
    }
  }
  for (int p = 0; p < P; ++p) {
    if (p * kPackNR >= g.ncols) break;
    StoreOutputsAvx2(g, p * kPackNR, acc[p]);
  }
}

template <WeightFormat F>
void GemvAvx2Kernels(GemvFn* kernel_for_count) {
  kernel_for_count[1] = &GemvAvx2<F, 1>;
  kernel_for_count[2] = &GemvAvx2<F, 2>;
}

// C = A·Wᵀ for one row of A on a non-f32 format in f32 compute: units of
// two panels (eight fma chains), one for the quad formats (HasQuads: two
// panels' factors and accumulators spill, measured 4-13% slower on the
// nibble formats; q3_k's factors are q6_k's).
void GemvFusedAvx2(const MatmulArgs& args, ThreadPool* pool) {
  GemvFn kernel_for_count[3] = {nullptr, nullptr, nullptr};
  switch (args.w_format) {
    case WeightFormat::kF16:
      GemvAvx2Kernels<WeightFormat::kF16>(kernel_for_count);
      break;
    case WeightFormat::kBF16:
      GemvAvx2Kernels<WeightFormat::kBF16>(kernel_for_count);
      break;
    case WeightFormat::kBF16Pairs:
      GemvAvx2Kernels<WeightFormat::kBF16Pairs>(kernel_for_count);
      break;
    case WeightFormat::kBF16PairsAmx:
      GemvAvx2Kernels<WeightFormat::kBF16PairsAmx>(kernel_for_count);
      break;
    case WeightFormat::kQ8_0:
      GemvAvx2Kernels<WeightFormat::kQ8_0>(kernel_for_count);
      break;
    case WeightFormat::kQ4_0:
      GemvAvx2Kernels<WeightFormat::kQ4_0>(kernel_for_count);
      break;
    case WeightFormat::kQ4_1:
      GemvAvx2Kernels<WeightFormat::kQ4_1>(kernel_for_count);
      break;
    case WeightFormat::kQ5_0:
      GemvAvx2Kernels<WeightFormat::kQ5_0>(kernel_for_count);
      break;
    case WeightFormat::kQ5_1:
      GemvAvx2Kernels<WeightFormat::kQ5_1>(kernel_for_count);
      break;
    case WeightFormat::kQ3_K:
      GemvAvx2Kernels<WeightFormat::kQ3_K>(kernel_for_count);
      break;
    case WeightFormat::kQ4_K:
      GemvAvx2Kernels<WeightFormat::kQ4_K>(kernel_for_count);
      break;
    case WeightFormat::kQ5_K:
      GemvAvx2Kernels<WeightFormat::kQ5_K>(kernel_for_count);
      break;
    case WeightFormat::kQ6_K:
      GemvAvx2Kernels<WeightFormat::kQ6_K>(kernel_for_count);
      break;
    case WeightFormat::kIQ4_NL:
      GemvAvx2Kernels<WeightFormat::kIQ4_NL>(kernel_for_count);
      break;
    case WeightFormat::kIQ4_XS:
      GemvAvx2Kernels<WeightFormat::kIQ4_XS>(kernel_for_count);
      break;
    case WeightFormat::kF32:
      return;
  }
  RunGemvUnits(args, pool, args.a, args.lda, HasQuads(args.w_format) ? 1 : 2, kernel_for_count);
}

#endif  // __x86_64__

// Per-ISA table: tile functions indexed by row count 1..MR.
struct IsaKernels {
  int mr;
  TileFn tiles[16];  // tiles[r] computes r rows; [0] unused
};

IsaKernels MakeScalarKernels() {
  IsaKernels k{kScalarMR, {}};
  k.tiles[1] = &TileScalar<1>;
  k.tiles[2] = &TileScalar<2>;
  k.tiles[3] = &TileScalar<3>;
  k.tiles[4] = &TileScalar<4>;
  return k;
}

#if defined(__x86_64__)
IsaKernels MakeAvx2Kernels() {
  IsaKernels k{kAvx2MR, {}};
  k.tiles[1] = &TileAvx2<1>;
  k.tiles[2] = &TileAvx2<2>;
  k.tiles[3] = &TileAvx2<3>;
  k.tiles[4] = &TileAvx2<4>;
  k.tiles[5] = &TileAvx2<5>;
  k.tiles[6] = &TileAvx2<6>;
  return k;
}

IsaKernels MakeAvx512Bf16Kernels() {
  IsaKernels k{kAvx512MR, {}};
  k.tiles[1] = &TileAvx512Bf16<1>;
  k.tiles[2] = &TileAvx512Bf16<2>;
  k.tiles[3] = &TileAvx512Bf16<3>;
  k.tiles[4] = &TileAvx512Bf16<4>;
  k.tiles[5] = &TileAvx512Bf16<5>;
  k.tiles[6] = &TileAvx512Bf16<6>;
  k.tiles[7] = &TileAvx512Bf16<7>;
  k.tiles[8] = &TileAvx512Bf16<8>;
  k.tiles[9] = &TileAvx512Bf16<9>;
  k.tiles[10] = &TileAvx512Bf16<10>;
  k.tiles[11] = &TileAvx512Bf16<11>;
  k.tiles[12] = &TileAvx512Bf16<12>;
  k.tiles[13] = &TileAvx512Bf16<13>;
  k.tiles[14] = &TileAvx512Bf16<14>;
  return k;
}

template <WeightFormat F>
IsaKernels MakeAvx512Bf16DirectKernels() {
  IsaKernels k{kAvx512MR, {}};
  k.tiles[1] = &TileAvx512Bf16Direct<F, 1>;
  k.tiles[2] = &TileAvx512Bf16Direct<F, 2>;
  k.tiles[3] = &TileAvx512Bf16Direct<F, 3>;
  k.tiles[4] = &TileAvx512Bf16Direct<F, 4>;
  k.tiles[5] = &TileAvx512Bf16Direct<F, 5>;
  k.tiles[6] = &TileAvx512Bf16Direct<F, 6>;
  k.tiles[7] = &TileAvx512Bf16Direct<F, 7>;
  k.tiles[8] = &TileAvx512Bf16Direct<F, 8>;
  k.tiles[9] = &TileAvx512Bf16Direct<F, 9>;
  k.tiles[10] = &TileAvx512Bf16Direct<F, 10>;
  k.tiles[11] = &TileAvx512Bf16Direct<F, 11>;
  k.tiles[12] = &TileAvx512Bf16Direct<F, 12>;
  k.tiles[13] = &TileAvx512Bf16Direct<F, 13>;
  k.tiles[14] = &TileAvx512Bf16Direct<F, 14>;
  return k;
}

IsaKernels MakeAvx512Kernels() {
  IsaKernels k{kAvx512MR, {}};
  k.tiles[1] = &TileAvx512<1>;
  k.tiles[2] = &TileAvx512<2>;
  k.tiles[3] = &TileAvx512<3>;
  k.tiles[4] = &TileAvx512<4>;
  k.tiles[5] = &TileAvx512<5>;
  k.tiles[6] = &TileAvx512<6>;
  k.tiles[7] = &TileAvx512<7>;
  k.tiles[8] = &TileAvx512<8>;
  k.tiles[9] = &TileAvx512<9>;
  k.tiles[10] = &TileAvx512<10>;
  k.tiles[11] = &TileAvx512<11>;
  k.tiles[12] = &TileAvx512<12>;
  k.tiles[13] = &TileAvx512<13>;
  k.tiles[14] = &TileAvx512<14>;
  return k;
}
#endif

// The tile kernels of `isa`; `bf16_pairs`: kBF16's on bf16 pairs (the
// avx512_bf16 tier).
const IsaKernels& KernelsFor(CpuIsa isa, bool bf16_pairs) {
  static const IsaKernels scalar = MakeScalarKernels();
#if defined(__x86_64__)
  static const IsaKernels avx2 = MakeAvx2Kernels();
  static const IsaKernels avx512 = MakeAvx512Kernels();
  static const IsaKernels avx512_bf16 = MakeAvx512Bf16Kernels();
  if (bf16_pairs) return avx512_bf16;
  if (IsaAtLeast(isa, CpuIsa::kAvx512)) return avx512;
  if (isa == CpuIsa::kAvx2) return avx2;
#endif
  return scalar;
}

// Decodes k-rows [k0, k0 + rows) of a non-f32 panel into out[rows][kPackNR]
// (64-byte aligned).
using DequantFn = void (*)(const uint8_t* panel, int64_t k0, int64_t rows, float* out);

template <WeightFormat F>
void DequantRowsPortable(const uint8_t* panel, int64_t k0, int64_t rows, float* out) {
  DequantizePanelRows(F, panel, k0, rows, out);
}

// f32 panel rows copied out (kBF16 rounds them in the decoded block).
void CopyRowsF32(const uint8_t* panel, int64_t k0, int64_t rows, float* out) {
  std::memcpy(out, panel + k0 * kPackNR * sizeof(float), rows * kPackNR * sizeof(float));
}

template <WeightFormat F>
DequantFn DequantForFormat(CpuIsa isa) {
#if defined(__x86_64__)
  if (IsaAtLeast(isa, CpuIsa::kAvx512)) return &DequantRowsAvx512<F>;
  if (isa == CpuIsa::kAvx2) return &DequantRowsAvx2<F>;
#endif
  (void)isa;
  return &DequantRowsPortable<F>;
}

DequantFn DequantFor(CpuIsa isa, WeightFormat f) {
  switch (f) {
    case WeightFormat::kF16:
      return DequantForFormat<WeightFormat::kF16>(isa);
    case WeightFormat::kBF16:
      return DequantForFormat<WeightFormat::kBF16>(isa);
    case WeightFormat::kBF16Pairs:
      return DequantForFormat<WeightFormat::kBF16Pairs>(isa);
    case WeightFormat::kBF16PairsAmx:
      return DequantForFormat<WeightFormat::kBF16PairsAmx>(isa);
    case WeightFormat::kQ8_0:
      return DequantForFormat<WeightFormat::kQ8_0>(isa);
    case WeightFormat::kQ4_0:
      return DequantForFormat<WeightFormat::kQ4_0>(isa);
    case WeightFormat::kQ4_1:
      return DequantForFormat<WeightFormat::kQ4_1>(isa);
    case WeightFormat::kQ5_0:
      return DequantForFormat<WeightFormat::kQ5_0>(isa);
    case WeightFormat::kQ5_1:
      return DequantForFormat<WeightFormat::kQ5_1>(isa);
    case WeightFormat::kQ3_K:
      return DequantForFormat<WeightFormat::kQ3_K>(isa);
    case WeightFormat::kQ4_K:
      return DequantForFormat<WeightFormat::kQ4_K>(isa);
    case WeightFormat::kQ5_K:
      return DequantForFormat<WeightFormat::kQ5_K>(isa);
    case WeightFormat::kQ6_K:
      return DequantForFormat<WeightFormat::kQ6_K>(isa);
    case WeightFormat::kIQ4_NL:
      return DequantForFormat<WeightFormat::kIQ4_NL>(isa);
    case WeightFormat::kIQ4_XS:
      return DequantForFormat<WeightFormat::kIQ4_XS>(isa);
    case WeightFormat::kF32:
      return &CopyRowsF32;
  }
  return nullptr;
}

// Rows of A kept hot in L2 while the panels stream past them: a block of
// rows_per_block x K floats is sized to about half of a 2 MiB L2.
constexpr int64_t kABlockBytes = 1 << 20;

// Row tiles of a block: ceil(rows / mr) tiles whose heights differ by at
// most one (128 rows with mr = 14 are 8 tiles of 13 and 2 of 12, not 9 of 14
// and a slow tile of 2). Tile heights do not affect results: each element's
// FMA chain is the same in every tile kernel.
struct RowTiling {
  RowTiling(int64_t rows, int mr)
      : count((rows + mr - 1) / mr), base(rows / count), extra(rows % count) {}
  int Height(int64_t j) const { return static_cast<int>(base + (j < extra ? 1 : 0)); }
  int64_t Start(int64_t j) const { return j * base + std::min(j, extra); }
  int64_t count, base, extra;
};

// Packs rows [r0, r1) of A into the row tiles of RowTiling(r1 - r0, mr):
// tile j starts at out + Start(j)*steps and is [steps][Height(j)]. f32: steps
// = k, in order. `bf16`: kBF16's chain order (matmul.h), steps = k rounded up
// to even, each pair swapped, the values rounded to bf16 operands and the pad
// after an odd k a zero.
void PackRows(const float* a, int64_t lda, int64_t r0, int64_t r1, int64_t k, int mr, bool bf16,
              float* out) {
  const RowTiling tiling(r1 - r0, mr);
  const int64_t steps = bf16 ? (k + 1) / 2 * 2 : k;
  for (int64_t j = 0; j < tiling.count; ++j) {
    const int rows = tiling.Height(j);
    const int64_t r = r0 + tiling.Start(j);
    float* tile = out + (r - r0) * steps;
    // 16 columns (one cache line of each row) at a time.
    for (int64_t k0 = 0; k0 < k; k0 += 16) {
      const int64_t k1 = std::min(k, k0 + 16);
      for (int i = 0; i < rows; ++i) {
        const float* src = a + (r + i) * lda;
        if (bf16) {
          for (int64_t kk = k0; kk < k1; ++kk)
            tile[(kk ^ 1) * rows + i] = RoundToBf16Operand(src[kk]);
        } else {
          for (int64_t kk = k0; kk < k1; ++kk) tile[kk * rows + i] = src[kk];
        }
      }
    }
    if (steps > k)
      for (int i = 0; i < rows; ++i) tile[(k ^ 1) * rows + i] = 0.0f;
  }
}

#if defined(__x86_64__)
// PackRows for TileAvx512Bf16: tile j starts at out + Start(j) * pairs and is
// [pairs][Height(j)] dwords, pairs = ceil(k / 2); dword p holds the bf16
// operands of k = 2p (low half) and 2p + 1 (high half, a zero past k).
void PackRowPairs(const float* a, int64_t lda, int64_t r0, int64_t r1, int64_t k, int mr,
                  uint32_t* out) {
  const RowTiling tiling(r1 - r0, mr);
  const int64_t pairs = (k + 1) / 2;
  for (int64_t j = 0; j < tiling.count; ++j) {
    const int64_t start = tiling.Start(j);
    PackTilePairsAvx512(a + (r0 + start) * lda, lda, tiling.Height(j), k, out + start * pairs);
  }
}

// (GCC 12: its intrinsics' undefined pass-through operands; see above.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// PackRows for TileAmxBf16: the row tiles of RowTiling(r1 - r0, kAmxMR);
// tile j at out + j * kAmxMR * AmxPaddedPairs(k) dwords is, per chunk c of 16
// k-pairs, AmxTileRows(height) rows of 16 dwords: dword p of row i holds the
// bf16 operands of A[i][32c + 2p + 1] (low half) and A[i][32c + 2p] (high),
// zeros past k and past the tile's rows.
XRT_TARGET_AVX512_BF16 void PackRowTilesAmx(const float* a, int64_t lda, int64_t r0, int64_t r1,
                                            int64_t k, uint32_t* out) {
  const RowTiling tiling(r1 - r0, kAmxMR);
  const int64_t chunks = AmxPaddedPairs(k) / kAmxPairs;
  for (int64_t j = 0; j < tiling.count; ++j) {
    const int rows = tiling.Height(j), padded = AmxTileRows(rows);
    const float* src = a + (r0 + tiling.Start(j)) * lda;
    uint32_t* tile = out + j * kAmxMR * chunks * kAmxPairs;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t k0 = 2 * kAmxPairs * c;
      const int64_t n0 = std::clamp<int64_t>(k - k0, 0, 16);
      const int64_t n1 = std::clamp<int64_t>(k - k0 - 16, 0, 16);
      const __mmask16 m0 = static_cast<__mmask16>((1u << n0) - 1);
      const __mmask16 m1 = static_cast<__mmask16>((1u << n1) - 1);
      for (int i = 0; i < padded; ++i) {
        __m512i words = _mm512_setzero_si512();
        if (i < rows) {
          const float* row = src + i * lda + k0;
          words = SwapPairHalves(
              Bf16Words(_mm512_maskz_loadu_ps(m0, row), _mm512_maskz_loadu_ps(m1, row + 16)));
        }
        _mm512_storeu_si512(tile + (c * padded + i) * kAmxPairs, words);
      }
    }
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif

// k-block length: one k-block of a panel (kKBlock x 128 bytes) stays in L1
// while every row tile of the block runs over it, so the panel comes from
// L2 (or DRAM) once per block instead of once per row tile.
constexpr int64_t kKBlock = 256;

// Per-thread packed row block of A (grows to the largest block seen, about
// kABlockBytes, and lives as long as the thread). Tagged with the Matmul call
// and block it holds, so a thread that runs several chunks of one call packs
// each block once.
struct PackedBlock {
  uint64_t call = 0;
  int64_t block = -1;
  std::vector<float> data;
};
PackedBlock& ThreadPackedBlock() {
  thread_local PackedBlock packed;
  return packed;
}
std::atomic<uint64_t> g_matmul_calls{0};

// Per-thread decoded k-block of a panel (non-f32 formats, or kBF16).
float* DecodedBlock() {
  alignas(64) thread_local float block[kKBlock * kPackNR];
  return block;
}

// Per-thread running sums of the row tiles between k-blocks.
std::vector<float>& PartialBuffer() {
  thread_local std::vector<float> buffer;
  return buffer;
}

}  // namespace

void MatmulWithIsa(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa) {
  assert(CpuIsaSupported(isa));
  assert(args.m >= 0 && args.n >= 0 && args.k >= 0);
  assert(args.lda >= args.k || args.m <= 1);
  assert(args.ldc >= args.n || args.m <= 1);
  assert(args.k % WeightFormatBlockSize(args.w_format) == 0);
  if (args.m <= 0 || args.n <= 0) return;
  if (args.compute == ComputeType::kInt8 && Int8ComputeApplies(args.w_format) && args.k > 0) {
    MatmulInt8WithIsa(args, pool, isa);
    return;
  }
#if defined(__x86_64__)
  // kBF16 on AMX runs every row count on the tiles (matmul.h), so the
  // fused GEMVs below serve the other cases.
  const bool amx = args.compute == ComputeType::kBF16 && IsaAtLeast(isa, CpuIsa::kAmx);
  if (IsaAtLeast(isa, CpuIsa::kAvx512) && args.w_format != WeightFormat::kF32 &&
      args.m <= kGemvMaxRows && args.k > 0 && !amx) {
    GemvFusedAvx512(args, pool, isa);
    return;
  }
  if (isa == CpuIsa::kAvx2 && args.w_format != WeightFormat::kF32 && args.m == 1 &&
      args.compute == ComputeType::kF32 && args.k > 0) {
    GemvFusedAvx2(args, pool);
    return;
  }
#endif

  const WeightFormat format = args.w_format;
  const bool bf16 = args.compute == ComputeType::kBF16;
  // kBF16 on vdpbf16ps: A and the decoded blocks as bf16 pairs; on AMX
  // (TileAmxBf16: A in tiles, bf16_pairs_amx in place, the other formats
  // decoded).
  const bool pairs = bf16 && IsaAtLeast(isa, CpuIsa::kAvx512Bf16);
  const IsaKernels& kern = KernelsFor(isa, pairs);
  // The weights through the decoded block: packed formats, and f32 rounded.
  const DequantFn dequant =
      format == WeightFormat::kF32 && !bf16 ? nullptr : DequantFor(isa, format);
  void (*chain_order)(float*, int64_t) = nullptr;
  if (bf16) {
    chain_order = &Bf16ChainOrderPortable;
#if defined(__x86_64__)
    if (IsaAtLeast(isa, CpuIsa::kAvx512)) chain_order = &Bf16ChainOrderAvx512;
    if (pairs) chain_order = &Bf16PairsAvx512<false>;
#endif
  }
  // Weights paired straight from the panel, without the f32 block.
  DecodePairsFn direct_pairs = nullptr;
#if defined(__x86_64__)
  if (pairs) direct_pairs = amx ? DecodePairsFor<true>(format) : DecodePairsFor<false>(format);
#endif
  const int64_t panel_bytes = PackedPanelBytes(format, args.k);
  const int mr = amx ? kAmxMR : kern.mr;
  const int64_t m = args.m, n = args.n, k = args.k;
  // bf16, bf16_pairs(_amx) and f32 weights read as stored by the tiles
  // (TileAvx512Bf16Direct), `direct_row_bytes` per k-row; an odd k's pad
  // pairs with the last row there. On AMX, bf16_pairs_amx panels are the B
  // tiles.
  const bool direct_tiles =
      pairs && !amx &&
      (format == WeightFormat::kBF16 || IsBf16PairsFormat(format) || format == WeightFormat::kF32);
  const bool amx_in_place = amx && format == WeightFormat::kBF16PairsAmx;
  const int64_t direct_row_bytes = format == WeightFormat::kF32 ? kPackNR * 4 : kPackNR * 2;
  const IsaKernels* direct_kern = nullptr;
#if defined(__x86_64__)
  static const IsaKernels direct_bf16 = MakeAvx512Bf16DirectKernels<WeightFormat::kBF16>();
  static const IsaKernels direct_bf16_pairs =
      MakeAvx512Bf16DirectKernels<WeightFormat::kBF16Pairs>();
  static const IsaKernels direct_bf16_pairs_amx =
      MakeAvx512Bf16DirectKernels<WeightFormat::kBF16PairsAmx>();
  static const IsaKernels direct_f32 = MakeAvx512Bf16DirectKernels<WeightFormat::kF32>();
  direct_kern = format == WeightFormat::kBF16           ? &direct_bf16
                : format == WeightFormat::kBF16Pairs    ? &direct_bf16_pairs
                : format == WeightFormat::kBF16PairsAmx ? &direct_bf16_pairs_amx
                                                        : &direct_f32;
#endif
  // Length of each output's chain: k, or kBF16's whole pairs; A's packed
  // values (floats or dwords) per step: 1, or 1/2 in pairs.
  const int64_t steps = bf16 ? (k + 1) / 2 * 2 : k;
  const int64_t per_step_div = pairs ? 2 : 1;
  // AMX: a row tile's packed A (in dwords) and running sums, padded.
  const int64_t amx_tile_dwords = kAmxMR * AmxPaddedPairs(k);
  const int64_t panels = (n + kPackNR - 1) / kPackNR;

  // Row blocks: whole multiples of mr, sized so a block of A fits in L2, and
  // as even as that allows (512 rows in blocks of at most 252: 3 x 182 or
  // less, not 252, 252 and 8).
  const int64_t row_bytes = std::max<int64_t>(steps, 1) * 4 / per_step_div;
  int64_t block_rows = std::max<int64_t>(1, kABlockBytes / row_bytes);
  block_rows = std::max<int64_t>(mr, block_rows / mr * mr);
  if (block_rows >= m) {
    block_rows = m;
  } else {
    const int64_t count = (m + block_rows - 1) / block_rows;
    block_rows = ((m + count - 1) / count + mr - 1) / mr * mr;
  }
  const int64_t blocks = (m + block_rows - 1) / block_rows;

  // Work unit = (row block, panel), panel-fastest so consecutive units of a
  // chunk reuse the packed row block from L2.
  const int64_t units = blocks * panels;
  const uint64_t call = g_matmul_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  auto run_units = [&](int64_t u0, int64_t u1) {
    const FlushToZeroScope ftz(bf16);
#if defined(__x86_64__)
    const AmxTileScope tiles(amx ? &AmxBf16Config(m == 1) : nullptr);
#endif
    TileArgs t;
    t.ldc = args.ldc;
    t.accumulate = args.accumulate;
    t.flush = bf16;
    int64_t current_block = -1;
    const float* block_a = nullptr;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t blk = u / panels, p = u % panels;
      const int64_t r0 = blk * block_rows;
      const int64_t r1 = std::min(m, r0 + block_rows);
      if (blk != current_block) {
        if (r1 - r0 == 1 && !bf16) {
          block_a = args.a + r0 * args.lda;  // one row is already [K][1]
        } else {
          PackedBlock& packed = ThreadPackedBlock();
          if (packed.call != call || packed.block != blk) {
            const int64_t size = amx ? RowTiling(r1 - r0, mr).count * amx_tile_dwords
                                     : (r1 - r0) * steps / per_step_div;
            if (packed.data.size() < static_cast<size_t>(size)) packed.data.resize(size);
#if defined(__x86_64__)
            if (amx) {
              PackRowTilesAmx(args.a, args.lda, r0, r1, k,
                              reinterpret_cast<uint32_t*>(packed.data.data()));
            } else if (pairs) {
              PackRowPairs(args.a, args.lda, r0, r1, k, mr,
                           reinterpret_cast<uint32_t*>(packed.data.data()));
            } else
#endif
            {
              PackRows(args.a, args.lda, r0, r1, k, mr, bf16, packed.data.data());
            }
            packed.call = call;
            packed.block = blk;
          }
          block_a = packed.data.data();
        }
        current_block = blk;
      }
      const int64_t col0 = p * kPackNR;
      t.bias = args.bias ? args.bias + col0 : nullptr;
      t.ncols = static_cast<int>(std::min<int64_t>(kPackNR, n - col0));
      const uint8_t* panel_bytes_p = static_cast<const uint8_t*>(args.packed_w) + p * panel_bytes;
      const float* panel = reinterpret_cast<const float*>(panel_bytes_p);  // f32 only
      const RowTiling tiling(r1 - r0, mr);
      // One row tile on bf16_pairs_amx panels (nothing decoded): the whole K
      // in one call, the sums in the tiles throughout.
      const int64_t k_block =
          amx_in_place && tiling.count == 1 ? std::max(kKBlock, steps) : kKBlock;
      const int64_t k_blocks = std::max<int64_t>(1, (steps + k_block - 1) / k_block);
      float* partial = nullptr;
      if (k_blocks > 1 || amx) {
        const int64_t size = amx ? tiling.count * kAmxMR * kPackNR : (r1 - r0) * kPackNR;
        std::vector<float>& buf = PartialBuffer();
        if (buf.size() < static_cast<size_t>(size)) buf.resize(size);
        partial = buf.data();
      }
      // L2 prefetch plan. One row tile: a fixed distance ahead of its loads
      // (measured best for M = 1). Several: each prefetches 1/count of the
      // next k-block (kKBlock*128 bytes), one or two lines per k-step.
      const int64_t next_lines = kKBlock * kPackNR * 4 / 64;
      const int64_t share = (next_lines + tiling.count - 1) / tiling.count;
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        const int64_t k0 = kb * k_block;
        t.k = std::min(k_block, steps - k0);
        t.first = kb == 0;
        t.last = kb == k_blocks - 1;
        t.odd_tail = t.last && k % 2 == 1;
        const char* next = nullptr;
        if (direct_tiles) {
          t.panel = reinterpret_cast<const float*>(panel_bytes_p + k0 * direct_row_bytes);
          next = reinterpret_cast<const char*>(panel_bytes_p + (k0 + t.k) * direct_row_bytes);
        } else if (amx_in_place) {
          t.panel = reinterpret_cast<const float*>(panel_bytes_p + k0 * direct_row_bytes);
          next = reinterpret_cast<const char*>(panel_bytes_p + (k0 + t.k) * direct_row_bytes);
        } else if (dequant) {
          // Decoded once per panel block for all row tiles; the packed bytes
          // stream sequentially (hardware prefetch), so no L2 plan.
          float* decoded = DecodedBlock();
          const int64_t rows = std::min(t.k, k - k0);
          if (direct_pairs) {
            direct_pairs(panel_bytes_p, k0, rows, decoded);  // odd rows: AMX only
          } else {
            dequant(panel_bytes_p, k0, rows, decoded);
            if (rows < t.k) std::fill_n(decoded + rows * kPackNR, kPackNR, 0.0f);  // kBF16's pad
            if (chain_order) chain_order(decoded, t.k);
          }
          t.panel = decoded;
        } else {
          t.panel = panel + k0 * kPackNR;
          next = reinterpret_cast<const char*>(t.panel + t.k * kPackNR);
        }
        t.pf_step = tiling.count == 1 || share > t.k ? 128 : 64;
        // Direct tiles: the next block's lines over half the k-steps.
        const int64_t direct_share =
            (kKBlock * direct_row_bytes / 64 + tiling.count - 1) / tiling.count;
        if (direct_tiles) {
          const int64_t per_step = (direct_share + t.k / 2 - 1) / std::max<int64_t>(1, t.k / 2);
          t.pf_step = static_cast<int>(std::clamp<int64_t>(per_step, 1, 4) * 64);
        }
        for (int64_t j = 0; j < tiling.count; ++j) {
          const int64_t start = tiling.Start(j);
          const int rows = tiling.Height(j);
          t.a = block_a + (start * steps + k0 * rows) / per_step_div;
          t.partial = partial ? partial + start * kPackNR : nullptr;
          t.rows = rows;
          if (amx) {
            t.a = block_a + j * amx_tile_dwords + k0 / 2 * AmxTileRows(rows);
            t.partial = partial + j * kAmxMR * kPackNR;
          }
          t.c = args.c + (r0 + start) * args.ldc + col0;
          if (!next) {
            t.pf = t.pf_end = nullptr;
          } else if (direct_tiles || amx_in_place) {
            t.pf = next + j * direct_share * 64;
            t.pf_end = t.pf + direct_share * 64;
          } else if (tiling.count == 1) {
            t.pf = reinterpret_cast<const char*>(t.panel + kPrefetchL2Steps * kPackNR);
            t.pf_end = t.pf + t.k * kPackNR * 4;
          } else {
            t.pf = next + j * share * 64;
            t.pf_end = t.pf + share * 64;
          }
#if defined(__x86_64__)
          if (amx) {
            (rows > 16 ? &TileAmxBf16<2> : &TileAmxBf16<1>)(t);
            continue;
          }
#endif
          (direct_tiles ? direct_kern->tiles[rows] : kern.tiles[rows])(t);
        }
      }
    }
  };

  ParallelForUnits(pool, units, run_units);
}

HeadWeights PackHeadWeightsBf16(const float* const* k_rows, const float* const* v_rows, int64_t n,
                                int64_t dim, CpuIsa isa, std::vector<float>* buf) {
  if (!IsaAtLeast(isa, CpuIsa::kAvx512Bf16)) return PackHeadWeights(k_rows, v_rows, n, dim, buf);
#if defined(__x86_64__)
  const WeightFormat pairs =
      IsaAtLeast(isa, CpuIsa::kAmx) ? WeightFormat::kBF16PairsAmx : WeightFormat::kBF16Pairs;
  int64_t values_at;
  float* w = HeadWeightsRoom(n, dim, pairs, buf, &values_at);
  const bool odd_low = Bf16PairsLowHalf(pairs, 1);  // k-row 1 is an odd one
  PackKeyPairsAvx512(k_rows, n, dim, odd_low, reinterpret_cast<uint32_t*>(w));
  PackValuePairsAvx512(v_rows, n, dim, odd_low, reinterpret_cast<uint32_t*>(w + values_at));
  return {w, w + values_at, pairs};
#else
  return PackHeadWeights(k_rows, v_rows, n, dim, buf);  // no tier above avx2 here
#endif
}

bool AmxBf16MatchesTheChain() {
  static const bool matches = [] {
    if (!CpuIsaSupported(CpuIsa::kAmx)) return false;
    // 16 rows x 32 columns over 6 chunks of 16 k-pairs (no vdpbf16ps tail):
    // values of both signs over 2^-8 .. 2^8, where a pair's two products
    // round differently in either order; every fourth row scaled by 2^-120
    // so that operands, products and sums fall around 2^-126 (subnormal
    // operands read as zeros, tiny results flush); row 5 by 2^-130.
    constexpr int64_t m = 16, n = 32, k = 192;
    std::vector<float> a(m * k), w(n * k), packed(PackedWeightFloats(n, k)), want(m * n),
        got(m * n);
    uint32_t state = 12345;
    const auto next = [&state] {
      state = state * 1664525u + 1013904223u;
      const int sign = (state >> 31) ? -1 : 1;
      const int exponent = static_cast<int>(state >> 8 & 15) - 8;
      return sign * std::ldexp(1.0f + static_cast<float>(state & 0xff) / 256.0f, exponent);
    };
    for (int64_t i = 0; i < m; ++i)
      for (int64_t kk = 0; kk < k; ++kk) a[i * k + kk] = std::ldexp(next(), i % 4 == 3 ? -120 : 0);
    for (int64_t kk = 0; kk < k; ++kk) a[5 * k + kk] = std::ldexp(next(), -130);
    for (float& x : w) x = next();
    PackWeights(w.data(), n, k, packed.data());
    MatmulArgs args;
    args.a = a.data();
    args.lda = k;
    args.packed_w = packed.data();
    args.ldc = n;
    args.m = m;
    args.n = n;
    args.k = k;
    args.compute = ComputeType::kBF16;
    args.c = want.data();
    MatmulWithIsa(args, nullptr, CpuIsa::kScalar);
    args.c = got.data();
    MatmulWithIsa(args, nullptr, CpuIsa::kAmx);
    return std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0;
  }();
  return matches;
}

void Matmul(const MatmulArgs& args, ThreadPool* pool) { MatmulWithIsa(args, pool, BestCpuIsa()); }

}  // namespace xrt
