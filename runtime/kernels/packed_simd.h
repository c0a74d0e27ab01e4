// Internal to runtime/kernels: SIMD pieces shared by the f32 kernels
// (matmul.cc) and the int8 kernels (matmul_int8.cc) on the packed panel
// layouts of weight_format.h: reading the f16 scales and the 6-bit K-quant
// scales / mins, storing one row of a panel's 32 outputs with the bias
// and accumulate semantics of MatmulArgs (c = [c +] (acc [+ bias])), and the
// 16 x 16 transpose that packs rows into panels (matmul.cc, attention.cc),
// and the software prefetch of a panel's blocks.
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/kernels/matmul.h"  // kPackNR
#include "runtime/kernels/simd.h"
#include "runtime/kernels/weight_format.h"

namespace xrt {
namespace packed_simd {

// The cache level a prefetch fills: L1 (prefetcht0, __builtin_prefetch's
// locality 3) or L2 (prefetcht1, 2).
enum class PrefetchTo { kL1, kL2 };

// One cache line's prefetch, as an asm volatile where __builtin_prefetch
// would do: GCC 12's dead-code elimination took whole loops of
// __builtin_prefetch out (PrefetchPart at -O2, and at -O3 a loop per level
// chosen at run time), the builtin having no effect it must keep. Off x86
// (the portable kernels, paged attention) the builtin.
inline void PrefetchLine(const uint8_t* p, PrefetchTo to) {
#if defined(__x86_64__)
  if (to == PrefetchTo::kL1) {
    asm volatile("prefetcht0 %0" : : "m"(*p));
  } else {
    asm volatile("prefetcht1 %0" : : "m"(*p));
  }
#else
  if (to == PrefetchTo::kL1) {
    __builtin_prefetch(p, 0, 3);
  } else {
    __builtin_prefetch(p, 0, 2);
  }
#endif
}

}  // namespace packed_simd
}  // namespace xrt

#if defined(__x86_64__)

namespace xrt {
namespace packed_simd {

// Prefetches part `part` of `parts` of a block's cache lines (the block
// `bytes` long at `blk`), kAhead bytes ahead (past the block's end: the next
// block's lines; a prefetch never faults), into L2 (kLocality 2: prefetcht1)
// or L1 (3: prefetcht0). A K-quant super-block (4.5-6.6 KiB a panel) is
// prefetched a sub-block's share at a time: its 72-105 prefetches issued at
// once at the super-block's start stalled the quad loop behind them (q4_k
// at M = 1 from L2: ~1.5x slower), and spread out they keep the line fill
// requests flowing through the whole super-block (from DRAM, two threads,
// 8192x2048: q4_k M = 1 16-18 -> 18-20 GB/s, M = 4 11-13 -> 16-19; q6_k
// M = 1 15.5 -> 18.5). The AVX-512 kernels do the same (Zen 5, avx512_vnni,
// M = 1 from DRAM, 2 threads, interleaved: q4_k 37-38 -> 40-42 GB/s, q6_k
// 34-38 -> 48), and the decode into bf16 pairs (matmul.cc).
// PrefetchPartTo chooses the level at run time.
template <int64_t kAhead>
inline void PrefetchPartTo(PrefetchTo to, const uint8_t* blk, int64_t bytes, int part, int parts) {
  const int64_t lines = (bytes + 63) / 64;
  for (int64_t line = part * lines / parts; line < (part + 1) * lines / parts; ++line) {
    PrefetchLine(blk + kAhead + 64 * line, to);
  }
}

template <int64_t kAhead, int kLocality = 2>
inline void PrefetchPart(const uint8_t* blk, int64_t bytes, int part, int parts) {
  static_assert(kLocality == 2 || kLocality == 3);
  PrefetchPartTo<kAhead>(kLocality == 3 ? PrefetchTo::kL1 : PrefetchTo::kL2, blk, bytes, part,
                         parts);
}

// ------------------------------------------------------------------ AVX2 --

// Eight f16 values at p, as f32.
XRT_TARGET_AVX2 inline __m256 Halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Eight bytes at p, zero-extended to int32.
XRT_TARGET_AVX2 inline __m256i U8x8(const uint8_t* p) {
  return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// q4_k / q5_k: the 6-bit scales (sc) and mins (m) of sub-block s, columns
// 8b .. 8b+7 of the super-block at sb.
XRT_TARGET_AVX2 inline void KScaleMin8(const uint8_t* sb, int s, int b, __m256i* sc, __m256i* m) {
  const __m256i lo = U8x8(sb + kKScaleLoOffset + s * kPackNR + 8 * b);
  const __m256i hi =
      _mm256_srli_epi32(U8x8(sb + kKScaleHiOffset + s / 2 * kPackNR + 8 * b), 4 * (s % 2));
  const __m256i low4 = _mm256_set1_epi32(15), two = _mm256_set1_epi32(3);
  *sc =
      _mm256_or_si256(_mm256_and_si256(lo, low4), _mm256_slli_epi32(_mm256_and_si256(hi, two), 4));
  *m = _mm256_or_si256(_mm256_srli_epi32(lo, 4),
                       _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hi, 2), two), 4));
}

// The first `cols` (<= 32) of one output row at c from acc[b] (columns
// 8b .. 8b+7).
XRT_TARGET_AVX2 inline void StoreRow32Avx2(float* c, const float* bias, bool accumulate, int cols,
                                           const __m256* acc) {
  for (int b = 0; b < 4; ++b) {
    const int n = std::min(8, cols - 8 * b);
    if (n <= 0) break;
    __m256 v = acc[b];
    if (n == 8) {  // vmaskmovps stores are microcoded on AMD: plain ones where they can be
      if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + 8 * b));
      if (accumulate) v = _mm256_add_ps(_mm256_loadu_ps(c + 8 * b), v);
      _mm256_storeu_ps(c + 8 * b, v);
      continue;
    }
    const __m256i mask = TailMask8(n);
    if (bias) v = _mm256_add_ps(v, _mm256_maskload_ps(bias + 8 * b, mask));
    if (accumulate) v = _mm256_add_ps(_mm256_maskload_ps(c + 8 * b, mask), v);
    _mm256_maskstore_ps(c + 8 * b, mask, v);
  }
}

// --------------------------------------------------------------- AVX-512 --

// Sixteen f16 values at p, as f32.
XRT_TARGET_AVX512 inline __m512 Halves16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// As KScaleMin8, for columns 16h .. 16h+15.
XRT_TARGET_AVX512 inline void KScaleMin16(const uint8_t* sb, int s, int h, __m512i* sc,
                                          __m512i* m) {
  const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(
      reinterpret_cast<const __m128i*>(sb + kKScaleLoOffset + s * kPackNR + 16 * h)));
  const __m512i hi = _mm512_srli_epi32(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(sb + kKScaleHiOffset + s / 2 * kPackNR + 16 * h))),
      4 * (s % 2));
  const __m512i low4 = _mm512_set1_epi32(15), two = _mm512_set1_epi32(3);
  *sc =
      _mm512_or_si512(_mm512_and_si512(lo, low4), _mm512_slli_epi32(_mm512_and_si512(hi, two), 4));
  *m = _mm512_or_si512(_mm512_srli_epi32(lo, 4),
                       _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hi, 2), two), 4));
}

// As StoreRow32Avx2, from v0 (columns 0-15) and v1 (16-31).
XRT_TARGET_AVX512 inline void StoreRow32Avx512(float* c, const float* bias, bool accumulate,
                                               int cols, __m512 v0, __m512 v1) {
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32  ? __mmask16(0xFFFF)
                       : cols > 16 ? __mmask16((1u << (cols - 16)) - 1)
                                   : __mmask16(0);
  if (bias) {
    v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, bias));
    v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, bias + 16));
  }
  if (accumulate) {
    v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c), v0);
    v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + 16), v1);
  }
  _mm512_mask_storeu_ps(c, m0, v0);
  _mm512_mask_storeu_ps(c + 16, m1, v1);
}

// r[0..15] (16 x 16 dwords) transposed in place: dword i of r[j] becomes dword
// j of r[i]. Two unpack stages interleave dwords and qwords within 128-bit
// lanes, two lane shuffles gather the lanes.
XRT_TARGET_AVX512 inline void Transpose16x16Epi32(__m512i* r) {
  __m512i t[16], u[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4g + c], lane l: rows 4g .. 4g + 3 of column 4l + c.
  for (int g = 0; g < 16; g += 4) {
    u[g] = _mm512_unpacklo_epi64(t[g], t[g + 2]);
    u[g + 1] = _mm512_unpackhi_epi64(t[g], t[g + 2]);
    u[g + 2] = _mm512_unpacklo_epi64(t[g + 1], t[g + 3]);
    u[g + 3] = _mm512_unpackhi_epi64(t[g + 1], t[g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512i x01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);
    const __m512i x23 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);
    const __m512i y01 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i y23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(x01, y01, 0x88);
    r[4 + c] = _mm512_shuffle_i32x4(x01, y01, 0xdd);
    r[8 + c] = _mm512_shuffle_i32x4(x23, y23, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(x23, y23, 0xdd);
  }
}

// ------------------------------------------------------ AVX-512 + BF16 --

// acc + the kBF16 chain of 16 lanes' pairs: vdpbf16ps, which adds a pair's
// high (odd) element's product first, with its flushes (matmul.h).
XRT_TARGET_AVX512_BF16 inline __m512 DotBf16Pairs(__m512 acc, __m512i a, __m512i w) {
#if defined(XRT_SIMD_EMULATE)
  return xrt_simd_emulate::DotBf16Pairs(acc, a, w);
#else
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)w);
#endif
}

// The bf16 operands of lo[0..15] and hi[0..15] as 32 words, lo's first:
// vcvtne2ps2bf16, which rounds as RoundToBf16Operand (nearest even,
// subnormals to signed zeros, NaNs quieted; MatmulBf16Test checks it).
XRT_TARGET_AVX512_BF16 inline __m512i Bf16Words(__m512 lo, __m512 hi) {
#if defined(XRT_SIMD_EMULATE)
  return xrt_simd_emulate::ConvertToBf16Words(lo, hi);
#else
  return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
#endif
}

// Dword j: the bf16 operands of even[j] (low half) and odd[j] (high half).
XRT_TARGET_AVX512_BF16 inline __m512i Bf16Pairs(__m512 even, __m512 odd) {
  alignas(64) static constexpr uint16_t kInterleave[32] = {
      0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  return _mm512_permutexvar_epi16(_mm512_load_si512(kInterleave), Bf16Words(even, odd));
}

}  // namespace packed_simd
}  // namespace xrt

#endif  // __x86_64__
