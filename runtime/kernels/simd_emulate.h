// Test-only (XRT_SIMD_EMULATE, see simd.h): the AVX-512 intrinsics the kernels
// use that Debian bookworm's SIMDe (0.7.4) lacks or aliases wrongly, written
// lane by lane from Intel's definitions. Included after SIMDe's headers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

typedef simde__mmask8 __mmask8;
typedef simde__mmask16 __mmask16;
typedef simde__mmask32 __mmask32;
typedef simde__mmask64 __mmask64;

namespace xrt_simd_emulate {

template <typename Lane, typename Vec>
inline void ToLanes(const Vec& v, Lane* out) {
  static_assert(sizeof(Vec) % sizeof(Lane) == 0);
  std::memcpy(out, &v, sizeof(Vec));
}

template <typename Vec, typename Lane>
inline Vec FromLanes(const Lane* in) {
  Vec v;
  std::memcpy(&v, in, sizeof(Vec));
  return v;
}

// The 16 lanes of type From in `a`, sign- or zero-extended to int32.
template <typename From, typename Vec>
inline __m512i Widen(Vec a) {
  static_assert(sizeof(Vec) == 16 * sizeof(From));
  From x[16];
  int32_t r[16];
  ToLanes(a, x);
  for (int i = 0; i < 16; ++i) r[i] = x[i];
  return FromLanes<__m512i>(r);
}

// Bit i set where pred(a[i], b[i]) holds for the 32-bit lanes.
template <typename Pred>
inline __mmask16 LaneMask32(__m512i a, __m512i b, Pred pred) {
  uint32_t x[16], y[16];
  ToLanes(a, x);
  ToLanes(b, y);
  __mmask16 m = 0;
  for (int i = 0; i < 16; ++i) m |= static_cast<__mmask16>((pred(x[i], y[i]) ? 1u : 0u) << i);
  return m;
}

// The f32 lanes of `src` with lane i replaced from p[i] where bit i of k is
// set; reads only those lanes' bytes.
template <typename Vec>
inline Vec MaskedLoadF32(Vec src, unsigned k, const void* p) {
  constexpr int kLanes = sizeof(Vec) / 4;
  float r[kLanes];
  ToLanes(src, r);
  for (int i = 0; i < kLanes; ++i) {
    if (k >> i & 1) std::memcpy(&r[i], static_cast<const char*>(p) + 4 * i, 4);
  }
  return FromLanes<Vec>(r);
}

// Stores the f32 lanes of `a` where bit i of k is set; writes nothing else.
template <typename Vec>
inline void MaskedStoreF32(void* p, unsigned k, Vec a) {
  constexpr int kLanes = sizeof(Vec) / 4;
  float x[kLanes];
  ToLanes(a, x);
  for (int i = 0; i < kLanes; ++i) {
    if (k >> i & 1) std::memcpy(static_cast<char*>(p) + 4 * i, &x[i], 4);
  }
}

}  // namespace xrt_simd_emulate

#ifndef _CMP_LT_OQ
#define _CMP_LT_OQ SIMDE_CMP_LT_OQ
#endif
#ifndef _CMP_GE_OQ
#define _CMP_GE_OQ SIMDE_CMP_GE_OQ
#endif
#ifndef _MM_FROUND_NO_EXC
#define _MM_FROUND_NO_EXC SIMDE_MM_FROUND_NO_EXC
#endif

// SIMDe 0.7.4 aliases _mm512_madd_epi16 with four arguments.
#undef _mm512_madd_epi16
inline __m512i _mm512_madd_epi16(__m512i a, __m512i b) { return simde_mm512_madd_epi16(a, b); }

inline __m512 _mm512_cvtepi32_ps(__m512i a) {
  int32_t x[16];
  float r[16];
  xrt_simd_emulate::ToLanes(a, x);
  for (int i = 0; i < 16; ++i) r[i] = static_cast<float>(x[i]);
  return xrt_simd_emulate::FromLanes<__m512>(r);
}

// Rounds in the current mode (nearest even by default); out of range or NaN
// gives the "integer indefinite" INT32_MIN, as the instruction does.
inline __m512i _mm512_cvtps_epi32(__m512 a) {
  float x[16];
  int32_t r[16];
  xrt_simd_emulate::ToLanes(a, x);
  for (int i = 0; i < 16; ++i) {
    const float v = std::nearbyint(x[i]);
    r[i] = (v >= -2147483648.0f && v < 2147483648.0f) ? static_cast<int32_t>(v) : INT32_MIN;
  }
  return xrt_simd_emulate::FromLanes<__m512i>(r);
}

inline __m512i _mm512_cvtepi8_epi32(__m128i a) { return xrt_simd_emulate::Widen<int8_t>(a); }
inline __m512i _mm512_cvtepu8_epi32(__m128i a) { return xrt_simd_emulate::Widen<uint8_t>(a); }

inline __m512 _mm512_cvtph_ps(__m256i a) {
  __m128i h[2];
  std::memcpy(h, &a, sizeof(a));
  __m256 f[2] = {simde_mm256_cvtph_ps(h[0]), simde_mm256_cvtph_ps(h[1])};
  __m512 r;
  std::memcpy(&r, f, sizeof(r));
  return r;
}

// imm bits: 0x01 QNaN, 0x02 +0, 0x04 -0, 0x08 +inf, 0x10 -inf, 0x20 denormal,
// 0x40 finite negative, 0x80 SNaN.
inline __mmask16 _mm512_fpclass_ps_mask(__m512 a, int imm) {
  uint32_t x[16];
  xrt_simd_emulate::ToLanes(a, x);
  __mmask16 m = 0;
  for (int i = 0; i < 16; ++i) {
    const uint32_t exp = (x[i] >> 23) & 0xff, frac = x[i] & 0x7fffff;
    const bool neg = x[i] >> 31;
    int cls = 0;
    if (exp == 0xff && frac != 0) {
      cls = (frac & 0x400000) ? 0x01 : 0x80;
    } else if (exp == 0xff) {
      cls = neg ? 0x10 : 0x08;
    } else if (exp == 0 && frac == 0) {
      cls = neg ? 0x04 : 0x02;
    } else {
      cls = (exp == 0 ? 0x20 : 0) | (neg ? 0x40 : 0);
    }
    if (cls & imm) m |= static_cast<__mmask16>(1u << i);
  }
  return m;
}

inline float _mm512_reduce_max_ps(__m512 a) {
  float x[16];
  xrt_simd_emulate::ToLanes(a, x);
  float m = x[0];
  for (int i = 1; i < 16; ++i) m = m > x[i] ? m : x[i];
  return m;
}

inline __m512 _mm512_maskz_loadu_ps(__mmask16 k, const void* p) {
  return xrt_simd_emulate::MaskedLoadF32(_mm512_setzero_ps(), k, p);
}

inline void _mm512_mask_storeu_ps(void* p, __mmask16 k, __m512 a) {
  xrt_simd_emulate::MaskedStoreF32(p, k, a);
}

inline __m512 _mm512_mask_loadu_ps(__m512 src, __mmask16 k, const void* p) {
  return xrt_simd_emulate::MaskedLoadF32(src, k, p);
}

inline void _mm_mask_storeu_ps(void* p, __mmask8 k, __m128 a) {
  xrt_simd_emulate::MaskedStoreF32(p, k, a);
}

inline __m512i _mm512_cvtepu16_epi32(__m256i a) { return xrt_simd_emulate::Widen<uint16_t>(a); }

namespace xrt_simd_emulate {
// The 16 lanes of type Lane at p under mask k, the others zero (nothing is
// read for them, as the instruction's fault suppression).
template <typename Vec, typename Lane>
inline Vec MaskedLoad16(unsigned k, const void* p) {
  Lane x[16] = {};
  for (int i = 0; i < 16; ++i) {
    if (k >> i & 1)
      std::memcpy(&x[i], static_cast<const char*>(p) + i * sizeof(Lane), sizeof(Lane));
  }
  return FromLanes<Vec>(x);
}
}  // namespace xrt_simd_emulate

inline __m256i _mm256_maskz_loadu_epi16(__mmask16 k, const void* p) {
  return xrt_simd_emulate::MaskedLoad16<__m256i, uint16_t>(k, p);
}

inline __m128i _mm_maskz_loadu_epi8(__mmask16 k, const void* p) {
  return xrt_simd_emulate::MaskedLoad16<__m128i, uint8_t>(k, p);
}

// SIMDe 0.7.4 has the 16-bit arithmetic shifts only. Counts above 31 fill
// with the sign, as the instruction does.
inline __m512i _mm512_srai_epi32(__m512i a, unsigned imm) {
  int32_t x[16];
  xrt_simd_emulate::ToLanes(a, x);
  const unsigned count = imm > 31 ? 31 : imm;
  for (int32_t& v : x) v = v < 0 ? ~(~v >> count) : v >> count;
  return xrt_simd_emulate::FromLanes<__m512i>(x);
}

inline __mmask16 _mm512_cmpgt_epu32_mask(__m512i a, __m512i b) {
  return xrt_simd_emulate::LaneMask32(a, b, [](uint32_t x, uint32_t y) { return x > y; });
}

inline __mmask16 _mm512_testn_epi32_mask(__m512i a, __m512i b) {
  return xrt_simd_emulate::LaneMask32(a, b, [](uint32_t x, uint32_t y) { return (x & y) == 0; });
}

inline float _mm512_cvtss_f32(__m512 a) {
  float x[16];
  xrt_simd_emulate::ToLanes(a, x);
  return x[0];
}

// Result lanes 0-1 are 128-bit lanes imm[1:0], imm[3:2] of a; lanes 2-3 are
// imm[5:4], imm[7:6] of b.
inline __m512 _mm512_shuffle_f32x4(__m512 a, __m512 b, int imm) {
  float x[16], y[16], r[16];
  xrt_simd_emulate::ToLanes(a, x);
  xrt_simd_emulate::ToLanes(b, y);
  for (int l = 0; l < 4; ++l) {
    const float* src = l < 2 ? x : y;
    const int sel = (imm >> (2 * l)) & 3;
    std::memcpy(r + 4 * l, src + 4 * sel, 16);
  }
  return xrt_simd_emulate::FromLanes<__m512>(r);
}

inline __m256 _mm512_maskz_extractf32x8_ps(__mmask8 k, __m512 a, int imm) {
  float x[16], r[8];
  xrt_simd_emulate::ToLanes(a, x);
  for (int i = 0; i < 8; ++i) r[i] = (k >> i & 1) ? x[8 * (imm & 1) + i] : 0.0f;
  return xrt_simd_emulate::FromLanes<__m256>(r);
}

// SIMDe emulates the FMA instructions as a multiply and an add (two
// roundings); the kernels' results depend on the single rounding.
namespace xrt_simd_emulate {
template <typename Vec, int N, bool Negate>
inline Vec Fma(Vec a, Vec b, Vec c) {
  float x[N], y[N], z[N];
  ToLanes(a, x);
  ToLanes(b, y);
  ToLanes(c, z);
  for (int i = 0; i < N; ++i) x[i] = std::fma(Negate ? -x[i] : x[i], y[i], z[i]);
  return FromLanes<Vec>(x);
}
}  // namespace xrt_simd_emulate

// vdpbf16ps (for XRT_TARGET_AVX512_BF16 code, which calls it through this
// name): SIMDe sums each lane's two products unfused and in another order.
// Lane by lane as the instruction computes it (Intel's pseudocode, and
// measured on a Zen 5): the bf16 inputs and the f32 sum read with denormals as
// zero, then per f32 lane the odd bf16 element's fused step and the even
// one's, each result below 2^-126 flushed to a zero of its sign.
namespace xrt_simd_emulate {
inline float DenormalAsZero(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}
// One bf16 pair dot product step on a sum: the bf16 words of x and y at bit
// `shift` (16: the pair's high element, 0: its low one) read with denormals
// as zero, multiplied and added with one rounding, a result below 2^-126
// flushed to a zero of its sign.
inline float Bf16PairStep(float sum, uint32_t x, uint32_t y, int shift) {
  uint32_t xb = (x >> shift & 0xffffu) << 16, yb = (y >> shift & 0xffffu) << 16;
  float xv, yv;
  std::memcpy(&xv, &xb, 4);
  std::memcpy(&yv, &yb, 4);
  sum = std::fma(DenormalAsZero(xv), DenormalAsZero(yv), sum);
  return std::fabs(sum) < std::numeric_limits<float>::min() ? std::copysign(0.0f, sum) : sum;
}

inline __m512 DotBf16Pairs(__m512 acc, __m512i a, __m512i b) {
  float s[16];
  uint32_t x[16], y[16];
  ToLanes(acc, s);
  ToLanes(a, x);
  ToLanes(b, y);
  for (int i = 0; i < 16; ++i) {
    float sum = DenormalAsZero(s[i]);
    for (int shift : {16, 0}) sum = Bf16PairStep(sum, x[i], y[i], shift);
    s[i] = sum;
  }
  return FromLanes<__m512>(s);
}

// vcvtne2ps2bf16 as Intel defines it (round to nearest even, denormals as
// signed zeros, NaNs quieted): lo's 16 lanes, then hi's, as 32 bf16 words.
inline __m512i ConvertToBf16Words(__m512 lo, __m512 hi) {
  uint32_t x[32];
  uint16_t r[32];
  ToLanes(lo, x);
  ToLanes(hi, x + 16);
  for (int i = 0; i < 32; ++i) {
    uint32_t b = x[i];
    if ((b & 0x7f800000u) == 0) {
      b &= 0x80000000u;
    } else if ((b & 0x7fffffffu) > 0x7f800000u) {
      b |= 0x00400000u;
    } else {
      b += 0x7fffu + ((b >> 16) & 1u);
    }
    r[i] = static_cast<uint16_t>(b >> 16);
  }
  return FromLanes<__m512i>(r);
}
}  // namespace xrt_simd_emulate

#undef _mm256_fmadd_ps
#undef _mm256_fnmadd_ps
#undef _mm512_fmadd_ps
#undef _mm512_fnmadd_ps
inline __m256 _mm256_fmadd_ps(__m256 a, __m256 b, __m256 c) {
  return xrt_simd_emulate::Fma<__m256, 8, false>(a, b, c);
}
inline __m256 _mm256_fnmadd_ps(__m256 a, __m256 b, __m256 c) {
  return xrt_simd_emulate::Fma<__m256, 8, true>(a, b, c);
}
inline __m512 _mm512_fmadd_ps(__m512 a, __m512 b, __m512 c) {
  return xrt_simd_emulate::Fma<__m512, 16, false>(a, b, c);
}
inline __m512 _mm512_fnmadd_ps(__m512 a, __m512 b, __m512 c) {
  return xrt_simd_emulate::Fma<__m512, 16, true>(a, b, c);
}

// SIMDe's AVX2 masked load reads the whole vector; the instruction reads (and
// may fault on) only the lanes whose mask sign bit is set.
#undef _mm256_maskload_ps
#undef _mm256_maskstore_ps
inline __m256 _mm256_maskload_ps(const float* p, __m256i mask) {
  const int k = _mm256_movemask_ps(_mm256_castsi256_ps(mask));  // the lanes' sign bits
  return xrt_simd_emulate::MaskedLoadF32(_mm256_setzero_ps(), k, p);
}
inline void _mm256_maskstore_ps(float* p, __m256i mask, __m256 a) {
  xrt_simd_emulate::MaskedStoreF32(p, _mm256_movemask_ps(_mm256_castsi256_ps(mask)), a);
}

// AMX (XRT_TARGET_AMX code): the tile configuration and the eight tile
// registers of this thread, and the instructions the kernels use, as Intel's
// SDM defines them (palette 1: tiles of up to 16 rows of up to 64 bytes). An
// instruction that would fault on hardware (no configuration, a shape the
// configuration does not allow, mismatched TDPBF16PS operands) aborts.
namespace xrt_simd_emulate {
struct AmxTiles {
  bool configured = false;
  int rows[8] = {};
  int colsb[8] = {};
  alignas(64) uint8_t data[8][16][64] = {};
};
inline AmxTiles& Amx() {
  thread_local AmxTiles tiles;
  return tiles;
}
inline void AmxCheck(bool ok) {
  if (!ok) std::abort();
}
inline void AmxCheckTile(int t) {
  AmxCheck(Amx().configured && t >= 0 && t < 8 && Amx().rows[t] > 0);
}
// A dot product instruction's operands: c [M][N dwords] += a [M][K dwords] *
// b [K][N dwords], three distinct configured tiles.
inline void AmxCheckDot(int c, int a, int b) {
  AmxCheckTile(c);
  AmxCheckTile(a);
  AmxCheckTile(b);
  const AmxTiles& amx = Amx();
  AmxCheck(amx.rows[a] == amx.rows[c] && amx.colsb[a] == 4 * amx.rows[b] &&
           amx.colsb[b] == amx.colsb[c] && c != a && c != b && a != b);
}
}  // namespace xrt_simd_emulate

// LDTILECFG: the 64-byte configuration (palette, start row, then colsb[16] as
// 16-bit words at byte 16 and rows[16] at byte 48); zeroes every tile.
inline void _tile_loadconfig(const void* config) {
  auto& amx = xrt_simd_emulate::Amx();
  const uint8_t* c = static_cast<const uint8_t*>(config);
  amx = xrt_simd_emulate::AmxTiles{};
  if (c[0] == 0) return;  // palette 0: the init state
  xrt_simd_emulate::AmxCheck(c[0] == 1 && c[1] == 0);
  for (int t = 0; t < 8; ++t) {
    uint16_t colsb;
    std::memcpy(&colsb, c + 16 + 2 * t, 2);
    amx.colsb[t] = colsb;
    amx.rows[t] = c[48 + t];
    xrt_simd_emulate::AmxCheck(colsb <= 64 && c[48 + t] <= 16 && (colsb == 0) == (c[48 + t] == 0));
  }
  amx.configured = true;
}
inline void _tile_release() { xrt_simd_emulate::Amx() = xrt_simd_emulate::AmxTiles{}; }
inline void _tile_zero(int t) {
  xrt_simd_emulate::AmxCheckTile(t);
  std::memset(xrt_simd_emulate::Amx().data[t], 0, sizeof(xrt_simd_emulate::Amx().data[t]));
}
// TILELOADD: rows[t] rows of colsb[t] bytes, row r from base + r * stride;
// the rest of the tile zeroed.
inline void _tile_loadd(int t, const void* base, long stride) {
  xrt_simd_emulate::AmxCheckTile(t);
  auto& amx = xrt_simd_emulate::Amx();
  std::memset(amx.data[t], 0, sizeof(amx.data[t]));
  for (int r = 0; r < amx.rows[t]; ++r)
    std::memcpy(amx.data[t][r], static_cast<const char*>(base) + r * stride, amx.colsb[t]);
}
inline void _tile_stored(int t, void* base, long stride) {
  xrt_simd_emulate::AmxCheckTile(t);
  auto& amx = xrt_simd_emulate::Amx();
  for (int r = 0; r < amx.rows[t]; ++r)
    std::memcpy(static_cast<char*>(base) + r * stride, amx.data[t][r], amx.colsb[t]);
}
// TDPBF16PS c += a * b: per row m of c and f32 column n, for each dword k of
// a's row (a bf16 pair), the pair's even (low) element's step with row k of
// b's dword n, then its odd (high) element's; inputs denormal as zero,
// results flushed to zero, round to nearest even.
// TDPBSUD c += a * b: per row m of c and int32 column n, for each dword k of
// a's row, the four products of its signed bytes with the unsigned bytes of
// row k of b's dword n, summed into c's int32 (wrapping, as the instruction
// does; the kernels' sums never come near).
inline void _tile_dpbsud(int c, int a, int b) {
  using namespace xrt_simd_emulate;
  AmxCheckDot(c, a, b);
  auto& amx = Amx();
  for (int m = 0; m < amx.rows[c]; ++m) {
    for (int n = 0; n < amx.colsb[c] / 4; ++n) {
      uint32_t sum;
      std::memcpy(&sum, amx.data[c][m] + 4 * n, 4);
      for (int k = 0; k < amx.colsb[a] / 4; ++k) {
        for (int i = 0; i < 4; ++i) {
          const int32_t x = static_cast<int8_t>(amx.data[a][m][4 * k + i]);
          const int32_t y = amx.data[b][k][4 * n + i];
          sum += static_cast<uint32_t>(x * y);
        }
      }
      std::memcpy(amx.data[c][m] + 4 * n, &sum, 4);
    }
  }
}

inline void _tile_dpbf16ps(int c, int a, int b) {
  using namespace xrt_simd_emulate;
  AmxCheckDot(c, a, b);
  auto& amx = Amx();
  for (int m = 0; m < amx.rows[c]; ++m) {
    for (int n = 0; n < amx.colsb[c] / 4; ++n) {
      float sum;
      std::memcpy(&sum, amx.data[c][m] + 4 * n, 4);
      sum = DenormalAsZero(sum);
      for (int k = 0; k < amx.colsb[a] / 4; ++k) {
        uint32_t x, y;
        std::memcpy(&x, amx.data[a][m] + 4 * k, 4);
        std::memcpy(&y, amx.data[b][k] + 4 * n, 4);
        for (int shift : {0, 16}) sum = Bf16PairStep(sum, x, y, shift);
      }
      std::memcpy(amx.data[c][m] + 4 * n, &sum, 4);
    }
  }
}
