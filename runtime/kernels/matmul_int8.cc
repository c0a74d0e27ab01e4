#include "runtime/kernels/matmul_int8.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "runtime/kernels/amx.h"
#include "runtime/kernels/packed_simd.h"
#include "runtime/kernels/simd.h"

namespace xrt {

bool Int8ComputeApplies(WeightFormat f) { return IsQuantizedFormat(f) || IsKQuantFormat(f); }

int Int8ActivationBlock(WeightFormat f) { return IsKQuantFormat(f) ? kSuperBlock : kQuantGroup; }

namespace {
std::atomic<bool> g_avx_vnni_allowed{true};
std::atomic<bool> g_gfni_allowed{true};
std::atomic<Int8DecodePrefetch> g_decode_prefetch{Int8DecodePrefetch::kAuto};
}  // namespace

bool Int8AvxVnniEnabled() {
  return g_avx_vnni_allowed.load(std::memory_order_relaxed) && CpuHasAvxVnni();
}

void SetInt8AvxVnniAllowed(bool allowed) {
  g_avx_vnni_allowed.store(allowed, std::memory_order_relaxed);
}

bool Int8GfniEnabled() { return g_gfni_allowed.load(std::memory_order_relaxed) && CpuHasGfni(); }

void SetInt8GfniAllowed(bool allowed) { g_gfni_allowed.store(allowed, std::memory_order_relaxed); }

bool Int8DecodePrefetchesToL2() {
  return StreamPrefetchIsL2(g_decode_prefetch.load(std::memory_order_relaxed));
}

void SetInt8DecodePrefetch(Int8DecodePrefetch where) {
  g_decode_prefetch.store(where, std::memory_order_relaxed);
}

namespace {

constexpr int kSumRows = 16;  // k-values per entry of sum16

// Rows of A per work unit: one decode of the weight quads serves them all
// (each ISA has kernels for 1..kGroupRows rows; the avx512_vnni kernels of
// the group formats for up to kVnniGroupRows, GroupRowsFor).
constexpr int64_t kGroupRows = 4;
constexpr int64_t kVnniGroupRows = 6;
constexpr int kAmxInt8Rows = 16;  // rows per work unit on AMX (PanelRowsAmx)
constexpr int kAmxInt8Pass = 8;   // groups of K whose sums PanelRowsAmx scales at once

// The formats whose quants have high bits stored apart, merged into the low
// ones on every read (q5_0, q5_1, q5_k, q3_k, q6_k): the most decoding work
// per quad, which a decoded panel saves (DecodedPanelMinRowBlocks).
constexpr bool HasSeparateHighBits(WeightFormat f) {
  return HasK5HighBits(f) || f == WeightFormat::kQ6_K;
}

// The formats whose weights are signed bytes where the kernels multiply them:
// q8_0's stored int8 and iq4_nl / iq4_xs's kIQ4Values (-127..113). vpmaddubsw
// takes them by sign transfer (|w| against the activations with w's sign:
// w + 128 up to 241 would overflow its int16 pair sums), vpdpbusd as w + 128
// (its unsigned operand: q8_0's byte ^ 0x80, iq4's table of kIQ4Values + 128)
// with 128 times the activations' quant sum taken back out
// (kSignedWeightBias).
constexpr bool HasSignedWeights(WeightFormat f) {
  return f == WeightFormat::kQ8_0 || HasIQ4Table(f);
}
constexpr int kSignedWeightBias = 128;

// The K-quants whose sub-block quant sums the vpmaddubsw kernels need
// (AddSubBlockMins): q4_k / q5_k for their mins, q3_k / q6_k for their quant
// offset; not iq4_xs, whose signed weights need neither.
constexpr bool HasSubBlockSums(WeightFormat f) {
  return IsKQuantFormat(f) && (!HasKInt8Scales(f) || KQuantOffset(f) != 0);
}

// iq4_nl / iq4_xs: kIQ4Values as the bytes the kernels multiply (vpshufb's
// table, indexed by the nibbles): signed, or with kBiased + 128 (1..241,
// vpdpbusd's unsigned operand).
template <bool kBiased>
struct IQ4Bytes {
  alignas(16) uint8_t table[16];
  constexpr IQ4Bytes() : table() {
    for (int q = 0; q < 16; ++q)
      table[q] = static_cast<uint8_t>(kIQ4Values[q] + (kBiased ? kSignedWeightBias : 0));
  }
};
template <bool kBiased>
inline constexpr IQ4Bytes<kBiased> kIQ4Bytes{};
static_assert(kIQ4Bytes<false>.table[0] == 0x81 && kIQ4Bytes<true>.table[0] == 1 &&
              kIQ4Bytes<true>.table[15] == 241);

// log2 of a K-quant's quant offset (KQuantOffset: 4 or 32), the shift that
// multiplies a quant sum by it.
template <WeightFormat F>
constexpr int KQuantOffsetShift() {
  constexpr int kShift = KQuantOffset(F) == 32 ? 5 : 2;
  static_assert(HasKInt8Scales(F) && KQuantOffset(F) == 1 << kShift);
  return kShift;
}

// Step 1's scale for a block of n values whose largest magnitude is amax
// (`finite`: no inf or NaN among them): *d, and *id = 127 / amax to multiply
// the values by. False when the block quantizes to zeros (q is zeroed): d is
// 0 for an all-zero or subnormal-tiny block, NaN for a non-finite one.
bool BlockScale(float amax, bool finite, int n, int8_t* q, float* d, float* id) {
  *id = finite ? 127.0f / amax : 0.0f;
  if (!finite || !std::isfinite(*id)) {
    *d = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
    std::memset(q, 0, n);
    return false;
  }
  *d = amax / 127.0f;
  return true;
}

// Step 1 of the contract for one block: d, and the quants in q.
void QuantizeBlockPortable(const float* a, int n, int8_t* q, float* d) {
  float amax = 0.0f;
  bool finite = true;
  for (int k = 0; k < n; ++k) {
    finite = finite && std::isfinite(a[k]);
    amax = std::max(amax, std::fabs(a[k]));
  }
  float id;
  if (!BlockScale(amax, finite, n, q, d, &id)) return;
  for (int k = 0; k < n; ++k) q[k] = static_cast<int8_t>(std::nearbyint(a[k] * id));
}

// k-values per SubBlockSumPairs entry: two 32-value sub-blocks.
constexpr int64_t kSubBlockPairRows = 64;

// q4_k / q5_k: the quant sums of the row's 32-value sub-blocks 2p and
// 2p + 1 as one int16 pair (low, high), so that vpmaddwd against the two
// sub-blocks' mins gives both terms of the min correction in one int32.
void SubBlockSumPairs(const int32_t* sum16, int64_t k, int32_t* pairs) {
  static_assert(kSumRows == 16 && kSubBlockPairRows == 4 * kSumRows);
  for (int64_t p = 0; p < k / kSubBlockPairRows; ++p) {
    const int32_t lo = sum16[4 * p] + sum16[4 * p + 1], hi = sum16[4 * p + 2] + sum16[4 * p + 3];
    pairs[p] = static_cast<int32_t>((static_cast<uint32_t>(lo) & 0xffff) |
                                    (static_cast<uint32_t>(hi) << 16));
  }
}

// q4_1, q5_1 (HasGroupMin): each 32-value block's activation scale times its
// quant sum, d * s (one f32 rounding; s is exact in f32), the factor of the
// block's m_w term.
void ScaledBlockSums(const float* d, const int32_t* sum16, int64_t k, float* ds) {
  for (int64_t b = 0; b < k / kQuantGroup; ++b) {
    ds[b] = d[b] * static_cast<float>(sum16[2 * b] + sum16[2 * b + 1]);
  }
}

void SumQuants(const int8_t* q, int64_t k, int32_t* sum16) {
  for (int64_t s = 0; s < k / kSumRows; ++s) {
    int32_t sum = 0;
    for (int t = 0; t < kSumRows; ++t) sum += q[s * kSumRows + t];
    sum16[s] = sum;
  }
}

// ---------------------------------------------------------------- portable --

// The f16 value at p, as f32.
float HalfAt(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

// The integer quant of column j at k-row kk of a q-format group starting at
// `grp`, as step 2 multiplies it: q8_0's signed byte, q4_0 / q5_0's with their
// offset off, iq4_nl's kIQ4Values entry, q4_1 / q5_1's unsigned one.
int GroupQuantAt(WeightFormat f, const uint8_t* grp, int kk, int j) {
  if (f == WeightFormat::kQ8_0) return static_cast<int8_t>(grp[64 + kk * kPackNR + j]);
  return SignedQuant(f, GroupNibbleQuantAt(f, grp, kk, j));
}

// One output's sum over K (step 2) for column j of `panel`, row (q, d).
float DotPortable(WeightFormat f, const uint8_t* panel, int j, int64_t k, const int8_t* q,
                  const float* d) {
  float acc = 0.0f;
  if (IsKQuantFormat(f)) {
    const int sub = KSubBlockRows(f);
    for (int64_t b = 0; b < k / kSuperBlock; ++b) {
      const uint8_t* sb = panel + b * SuperBlockBytes(f);
      const int8_t* qa = q + b * kSuperBlock;
      int32_t isum = 0, imin = 0;
      for (int s = 0; s < kSuperBlock / sub; ++s) {
        int32_t dot = 0, sum = 0;
        for (int t = 0; t < sub; ++t) {
          const int kk = s * sub + t;
          const int qw = SignedQuant(f, KQuantAt(f, sb, kk, j));
          dot += qw * qa[kk];
          sum += qa[kk];
        }
        if (HasKInt8Scales(f)) {
          isum += static_cast<int8_t>(sb[kK6ScalesOffset + s * kPackNR + j]) * dot;
        } else {
          int sc, m;
          KScaleMin(sb, s, j, &sc, &m);
          isum += sc * dot;
          imin += m * sum;
        }
      }
      const float dw = HalfAt(sb + 2 * j);
      acc = std::fma(dw * d[b], static_cast<float>(isum), acc);
      if (!HasKInt8Scales(f)) {
        const float dmin = HalfAt(sb + kKDminOffset + 2 * j);
        acc = std::fma(-(dmin * d[b]), static_cast<float>(imin), acc);
      }
    }
    return acc;
  }
  const int64_t group_bytes = QuantGroupBytes(f);
  for (int64_t b = 0; b < k / kQuantGroup; ++b) {
    const uint8_t* grp = panel + b * group_bytes;
    const int8_t* qa = q + b * kQuantGroup;
    int32_t dot = 0, sum = 0;
    for (int kk = 0; kk < kQuantGroup; ++kk) {
      const int qw = GroupQuantAt(f, grp, kk, j);
      dot += qw * qa[kk];
      sum += qa[kk];
    }
    const float dw = HalfAt(grp + 2 * j);
    acc = std::fma(dw * d[b], static_cast<float>(dot), acc);
    if (HasGroupMin(f)) {
      const float mw = HalfAt(grp + 64 + 2 * j);
      acc = std::fma(mw, d[b] * static_cast<float>(sum), acc);
    }
  }
  return acc;
}

// Bytes per weight quad (4 k-rows x 32 columns) of a decoded panel, and a
// panel's (DecodeQuadPanelAvx2, DecodeQ8PanelAvx2, DecodeQuadPanelAvx512Vnni).
constexpr int64_t kDecodedQuadBytes = 128;
constexpr int64_t DecodedPanelBytes(int64_t k) { return k / 4 * kDecodedQuadBytes; }

// What each work unit needs: the quantized rows and where C goes.
struct Int8Problem {
  const MatmulArgs* args;
  const int8_t* q;               // [m][k]
  const float* d;                // [m][k / block]
  const int32_t* sum16;          // [m][k / 16]
  const int32_t* sub_sum_pairs;  // [m][k / kSubBlockPairRows] (q4_k, q5_k): SubBlockSumPairs
  const float* ds;               // [m][k / 32] (q4_1, q5_1): ScaledBlockSums
  int64_t blocks;                // k / block
  int64_t panel_bytes;
  // The panel being run, decoded by this thread (DecodeFnFor), or null.
  const uint8_t* decoded = nullptr;
};

void StorePortable(const MatmulArgs& a, int64_t i, int64_t col, float acc) {
  float v = acc;
  if (a.bias) v = v + a.bias[col];
  float* c = a.c + i * a.ldc + col;
  *c = a.accumulate ? *c + v : v;
}

// Rows [r0, r1) of one panel.
void PanelRowsPortable(const Int8Problem& p, int64_t panel, int64_t r0, int64_t r1) {
  const MatmulArgs& a = *p.args;
  const uint8_t* w = static_cast<const uint8_t*>(a.packed_w) + panel * p.panel_bytes;
  const int cols = static_cast<int>(std::min<int64_t>(kPackNR, a.n - panel * kPackNR));
  for (int64_t i = r0; i < r1; ++i) {
    for (int j = 0; j < cols; ++j) {
      const float acc = DotPortable(a.w_format, w, j, a.k, p.q + i * a.k, p.d + i * p.blocks);
      StorePortable(a, i, panel * kPackNR + j, acc);
    }
  }
}

#if defined(__x86_64__)

// R rows of quantized A: each row's quants, block scales and sums of
// kSumRows quants.
template <int R>
struct QuantRows {
  const int8_t* q[R];
  const float* d[R];
  const int32_t* sum16[R];
  const float* ds[R];               // q4_1, q5_1
  const int32_t* sub_sum_pairs[R];  // q4_k, q5_k: SubBlockSumPairs
};

// Rows i0 .. i0 + R - 1 of the problem's quantized A. Always inlined into
// the SIMD kernels: compiled for baseline x86-64, a call from AVX-512 code
// with live zmm values runs its SSE moves on a dirty upper state, which cost
// the AMX-INT8 kernel (a call per group) 7x its time on a Sapphire
// Rapids-class CPU.
template <int R>
__attribute__((always_inline)) inline QuantRows<R> QuantRowsAt(const Int8Problem& p, int64_t i0) {
  const int64_t k = p.args->k;
  QuantRows<R> rows;
  for (int i = 0; i < R; ++i) {
    rows.q[i] = p.q + (i0 + i) * k;
    rows.d[i] = p.d + (i0 + i) * p.blocks;
    rows.sum16[i] = p.sum16 + (i0 + i) * (k / kSumRows);
    rows.ds[i] = p.ds ? p.ds + (i0 + i) * (k / kQuantGroup) : nullptr;
    rows.sub_sum_pairs[i] =
        p.sub_sum_pairs ? p.sub_sum_pairs + (i0 + i) * (k / kSubBlockPairRows) : nullptr;
  }
  return rows;
}

// ----------------------------------------------------------------- AVX-512 --

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// Step 1 for one block of n (a multiple of 16) values.
XRT_TARGET_AVX512 void QuantizeBlockAvx512(const float* a, int n, int8_t* q, float* d) {
  __m512 amax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (int k = 0; k < n; k += 16) {
    const __m512 x = _mm512_loadu_ps(a + k);
    bad |= _mm512_fpclass_ps_mask(x, 0x99);  // QNaN, +inf, -inf, SNaN
    amax = _mm512_max_ps(amax, _mm512_abs_ps(x));
  }
  float id;
  if (!BlockScale(_mm512_reduce_max_ps(amax), !bad, n, q, d, &id)) return;
  const __m512 idv = _mm512_set1_ps(id);
  for (int k = 0; k < n; k += 16) {
    const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(a + k), idv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + k), _mm512_cvtsepi32_epi8(v));
  }
}

// Step 1 for one block of n (a multiple of 32) values.
XRT_TARGET_AVX2 void QuantizeBlockAvx2(const float* a, int n, int8_t* q, float* d) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff);  // |x|'s bits above: inf or NaN
  __m256 amax = _mm256_setzero_ps();
  int bad = 0;
  for (int k = 0; k < n; k += 8) {
    const __m256 x = _mm256_andnot_ps(sign, _mm256_loadu_ps(a + k));
    bad |= _mm256_movemask_ps(
        _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_castps_si256(x), max_finite)));
    amax = _mm256_max_ps(amax, x);
  }
  float id;
  if (!BlockScale(HorizontalMax8(amax), !bad, n, q, d, &id)) return;
  const __m256 idv = _mm256_set1_ps(id);
  // vpackssdw / vpacksswb work per lane: dword j of the packed bytes holds
  // values 4j .. 4j + 3 of vector j % 4, lane j / 4.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int k = 0; k < n; k += 32) {
    __m256i v[4];
    for (int j = 0; j < 4; ++j) {
      v[j] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(a + k + 8 * j), idv));
    }
    const __m256i bytes =
        _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k),
                        _mm256_permutevar8x32_epi32(bytes, order));
  }
}

// SumQuants for k a multiple of 32: vpsadbw sums each 8 quants + 128.
XRT_TARGET_AVX2 void SumQuantsAvx2(const int8_t* q, int64_t k, int32_t* sum16) {
  static_assert(kSumRows == 16);
  const __m256i flip = _mm256_set1_epi8(-128);
  for (int64_t s = 0; s < k; s += 32) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + s));
    const __m256i eights = _mm256_sad_epu8(_mm256_xor_si256(x, flip), _mm256_setzero_si256());
    const __m256i sums = _mm256_add_epi64(eights, _mm256_shuffle_epi32(eights, 0x4E));
    sum16[s / kSumRows] = _mm256_cvtsi256_si32(sums) - kSumRows * 128;
    sum16[s / kSumRows + 1] = _mm256_extract_epi32(sums, 4) - kSumRows * 128;
  }
}

// Four k-rows as "quads": byte 4c + t of 128-bit lane L holds column 4L + c
// at k-row t, so vpmaddubsw + vpmaddwd against four activation bytes
// broadcast per dword give each column's 4-term dot product in its dword.
// The nibble formats are stored so (QuadNibbleByte: columns 0-15 in the low
// nibbles, 16-31 in the high ones); q8_0's k-rows are shuffled into them.

// Four 32-byte signed k-rows (q8_0) as quads.
XRT_TARGET_AVX512 inline void ByteQuads(const uint8_t* rows, __m512i* lo, __m512i* hi) {
  const __m512i x = _mm512_loadu_si512(rows), y = _mm512_loadu_si512(rows + 64);
  const __m512i pick_lo =
      _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
  const __m512i pick_hi = _mm512_add_epi32(pick_lo, _mm512_set1_epi32(4));
  const __m512i transpose = _mm512_set4_epi32(0x0f0b0703, 0x0e0a0602, 0x0d090501, 0x0c080400);
  *lo = _mm512_shuffle_epi8(_mm512_permutex2var_epi32(x, pick_lo, y), transpose);
  *hi = _mm512_shuffle_epi8(_mm512_permutex2var_epi32(x, pick_hi, y), transpose);
}

// The formats whose quants are a bare nibble (no high bits, no table):
// q4_0, q4_1, q4_k. Their columns 16-31 are the high nibbles of the bytes
// whose low nibbles are columns 0-15, so those can be taken as they sit,
// 16 times the quant (WeightQuads' kHighTimes16).
constexpr bool HasBareNibbles(WeightFormat f) {
  return HasQuadNibbles(f) && !HasK5HighBits(f) && f != WeightFormat::kQ6_K && !HasIQ4Table(f);
}

// The bytes of quad kq's low bits (nibbles, or q3_k's crumbs shifted to bits
// 0-1 and 4-5): columns 0-15 at bits 0-3 of each byte, 16-31 at bits 4-7.
template <WeightFormat F>
XRT_TARGET_AVX512 inline __m512i LowQuadBytes(const uint8_t* blk, int kq) {
  constexpr int64_t kLow = IsKQuantFormat(F) ? KLowQuantsOffset(F) : QuantGroupQuantsOffset(F);
  __m512i x = _mm512_loadu_si512(blk + kLow + LowQuadOffset(F, kq));
  if constexpr (HasCrumbs(F)) {  // kq may not be a constant: a shift by register
    x = _mm512_srl_epi16(x, _mm_cvtsi32_si128(LowQuadShift(F, kq)));
  }
  return x;
}

// The weight quads of k-rows 4*kq .. 4*kq+3 of a group / super-block:
// columns 0-15 in *lo, 16-31 in *hi. The unsigned quants, or the signed
// weights (HasSignedWeights), with kBiased as w + 128 (vpdpbusd's operand).
// kHighTimes16 (HasBareNibbles): *hi is 16 times the quants, the high
// nibbles left in place, one shift fewer per quad.
template <WeightFormat F, bool kBiased = false, bool kHighTimes16 = false>
XRT_TARGET_AVX512 inline void WeightQuads(const uint8_t* blk, int kq, __m512i* lo, __m512i* hi) {
  static_assert(!kHighTimes16 || HasBareNibbles(F));
  if constexpr (F == WeightFormat::kQ8_0) {
    ByteQuads(blk + 64 + kq * 4 * kPackNR, lo, hi);
    if constexpr (kBiased) {  // w ^ 0x80 = w + 128 as a byte
      const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
      *lo = _mm512_xor_si512(*lo, bias);
      *hi = _mm512_xor_si512(*hi, bias);
    }
    return;
  }
  const __m512i x = LowQuadBytes<F>(blk, kq);
  const __m512i low = _mm512_set1_epi8((1 << LowQuantBits(F)) - 1);
  *lo = _mm512_and_si512(x, low);
  if constexpr (kHighTimes16) {
    *hi = _mm512_and_si512(x, _mm512_set1_epi8(static_cast<char>(0xf0)));
    return;
  }
  *hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), low);
  // Lane l of the quad is lane L = l % 2 of its half h = l / 2; the high
  // bits of its bytes are at the same bytes of the quad's 16 (q5_0, q5_1,
  // q5_k, q3_k: bit 4L + 2h + n for nibble n) or of its 32 bytes' half L
  // (q6_k, the field at bits 4h + 2n) (K5HighBit, K6HighShift).
  if constexpr (HasK5HighBits(F)) {
    const __m512i bits = _mm512_broadcast_i32x4(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + K5HighBitsOffset(F) + kq * 16)));
    const __m512i pick_lo =
        _mm512_setr_epi32(0x01010101, 0x01010101, 0x01010101, 0x01010101, 0x10101010, 0x10101010,
                          0x10101010, 0x10101010, 0x04040404, 0x04040404, 0x04040404, 0x04040404,
                          0x40404040, 0x40404040, 0x40404040, 0x40404040);
    const __m512i pick_hi = _mm512_slli_epi32(pick_lo, 1);
    const __m512i high = _mm512_set1_epi8(1 << LowQuantBits(F));  // 16, q3_k 4
    *lo = _mm512_mask_add_epi8(*lo, _mm512_test_epi8_mask(bits, pick_lo), *lo, high);
    *hi = _mm512_mask_add_epi8(*hi, _mm512_test_epi8_mask(bits, pick_hi), *hi, high);
  } else if constexpr (F == WeightFormat::kQ6_K) {
    const __m512i fields = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kK6HighOffset + kq * 32)));
    const __m512i high = _mm512_set1_epi8(48);
    // Bits 4h + 2n to 4, 5 (shifts within each qword keep a byte's bits).
    const __m512i fields_lo = _mm512_sllv_epi64(fields, _mm512_setr_epi64(4, 4, 4, 4, 0, 0, 0, 0));
    const __m512i fields_hi =
        _mm512_srlv_epi64(_mm512_sllv_epi64(fields, _mm512_setr_epi64(2, 2, 2, 2, 0, 0, 0, 0)),
                          _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2));
    *lo = _mm512_add_epi8(*lo, _mm512_and_si512(fields_lo, high));
    *hi = _mm512_add_epi8(*hi, _mm512_and_si512(fields_hi, high));
  } else if constexpr (HasIQ4Table(F)) {  // the nibbles index the table in every lane
    const __m512i table = _mm512_broadcast_i32x4(
        _mm_load_si128(reinterpret_cast<const __m128i*>(kIQ4Bytes<kBiased>.table)));
    *lo = _mm512_shuffle_epi8(table, *lo);
    *hi = _mm512_shuffle_epi8(table, *hi);
  }
}

// vgf2p8affineqb's matrix (one per qword) that moves bit `from` of each byte
// to bit `to`: row `to` of the 8 x 8 bit matrix is its byte 7 - to.
constexpr int64_t AffineBit(int from, int to) {
  return static_cast<int64_t>(uint64_t{1} << from << (8 * (7 - to)));
}

// WeightQuads of the formats whose high bits are stored apart
// (HasSeparateHighBits) on GFNI: one vgf2p8affineqb per half moves each
// byte's high bits, picked per lane (a matrix per qword), to where they
// belong in the quant, alone in the byte, and one vpternlogd puts them beside
// the low bits, where WeightQuads takes a vptestmb and a masked vpaddb per
// half for q5_0 / q5_1 / q5_k / q3_k, and two variable shifts, two vpandd
// and two vpaddb for q6_k. The same bytes.
template <WeightFormat F>
XRT_TARGET_AVX512_GFNI inline void WeightQuadsGfni(const uint8_t* blk, int kq, __m512i* lo,
                                                   __m512i* hi) {
  static_assert(HasSeparateHighBits(F) && !HasSignedWeights(F));
  const __m512i x = LowQuadBytes<F>(blk, kq);
  __m512i bits, pick_lo, pick_hi;
  if constexpr (F == WeightFormat::kQ6_K) {
    // Half L of the quad's 32 bytes in lanes L and 2 + L; lane l's field is
    // at bits 4h + 2n (h = l / 2, n: lo 0, hi 1), to bits 4-5 (K6HighShift).
    bits = _mm512_broadcast_i64x4(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kK6HighOffset + kq * 32)));
    constexpr int64_t kLo0 = AffineBit(0, 4) | AffineBit(1, 5);
    constexpr int64_t kLo1 = AffineBit(4, 4) | AffineBit(5, 5);
    constexpr int64_t kHi0 = AffineBit(2, 4) | AffineBit(3, 5);
    constexpr int64_t kHi1 = AffineBit(6, 4) | AffineBit(7, 5);
    pick_lo = _mm512_setr_epi64(kLo0, kLo0, kLo0, kLo0, kLo1, kLo1, kLo1, kLo1);
    pick_hi = _mm512_setr_epi64(kHi0, kHi0, kHi0, kHi0, kHi1, kHi1, kHi1, kHi1);
  } else {
    // The quad's 16 bytes in every lane; lane l's bit is 4L + 2h + n (L = l
    // % 2, h = l / 2), to bit LowQuantBits (K5HighBit).
    bits = _mm512_broadcast_i32x4(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + K5HighBitsOffset(F) + kq * 16)));
    constexpr int kTo = LowQuantBits(F);
    pick_lo = _mm512_setr_epi64(AffineBit(0, kTo), AffineBit(0, kTo), AffineBit(4, kTo),
                                AffineBit(4, kTo), AffineBit(2, kTo), AffineBit(2, kTo),
                                AffineBit(6, kTo), AffineBit(6, kTo));
    pick_hi = _mm512_setr_epi64(AffineBit(1, kTo), AffineBit(1, kTo), AffineBit(5, kTo),
                                AffineBit(5, kTo), AffineBit(3, kTo), AffineBit(3, kTo),
                                AffineBit(7, kTo), AffineBit(7, kTo));
  }
  const __m512i low = _mm512_set1_epi8((1 << LowQuantBits(F)) - 1);
  constexpr int kLowOrHigh = 0xEA;  // (a & b) | c
  *lo = _mm512_ternarylogic_epi32(x, low, _mm512_gf2p8affine_epi64_epi8(bits, pick_lo, 0),
                                  kLowOrHigh);
  *hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(x, 4), low,
                                  _mm512_gf2p8affine_epi64_epi8(bits, pick_hi, 0), kLowOrHigh);
}

// Per-column pair sums of unsigned weight quads `w` times the four
// activation quants broadcast in `a`: int16 lanes 2c, 2c + 1 of a dword hold
// column c's products of k-rows 0-1 and 2-3. Exact while |w| * 127 * 2 fits
// (always: |w| <= 128; the signed weights' |w|, never their w + 128).
XRT_TARGET_AVX512 inline __m512i PairProducts(__m512i w, __m512i a) {
  return _mm512_maddubs_epi16(w, a);
}

// How many PairProducts of one format add up exactly in int16: each lane
// is at most 2 * wmax * 127, and the sum must stay within 32767.
template <WeightFormat F>
constexpr int PairSumsPerInt16() {
  constexpr int wmax = HasSignedWeights(F) ? 128 : MaxQuant(F);
  return 32767 / (2 * wmax * 127);
}
static_assert(PairSumsPerInt16<WeightFormat::kQ4_0>() == 8);
static_assert(PairSumsPerInt16<WeightFormat::kQ4_1>() == 8);
static_assert(PairSumsPerInt16<WeightFormat::kQ5_0>() == 4);
static_assert(PairSumsPerInt16<WeightFormat::kQ5_1>() == 4);
static_assert(PairSumsPerInt16<WeightFormat::kQ5_K>() == 4);
static_assert(PairSumsPerInt16<WeightFormat::kQ6_K>() == 2);
static_assert(PairSumsPerInt16<WeightFormat::kQ3_K>() == 18);  // a whole sub-block (4 quads)
static_assert(PairSumsPerInt16<WeightFormat::kQ8_0>() == 1);
static_assert(PairSumsPerInt16<WeightFormat::kIQ4_NL>() == 1);
static_assert(PairSumsPerInt16<WeightFormat::kIQ4_XS>() == 1);

// Each dword's value v (in int16 range) as the int16 pair (v, v): vpmaddwd
// of pair sums against it gives v times the column's 4-term dot product.
XRT_TARGET_AVX512 inline __m512i PairOf(__m512i v) {
  const __m512i low = _mm512_and_si512(v, _mm512_set1_epi32(0xffff));
  return _mm512_or_si512(low, _mm512_slli_epi32(v, 16));
}

// v (an int16 value, broadcast) as (v, 0) pairs: vpmaddwd against (x, 0)
// pairs gives x * v in int32, one uop where vpmulld takes two.
XRT_TARGET_AVX512 inline __m512i LowHalf(int32_t v) { return _mm512_set1_epi32(v & 0xffff); }

XRT_TARGET_AVX512 inline __m512i BroadcastQuad(const int8_t* q) {
  int32_t v;
  std::memcpy(&v, q, 4);
  return _mm512_set1_epi32(v);
}

using packed_simd::PrefetchPart;
using packed_simd::PrefetchPartTo;
using packed_simd::PrefetchTo;
constexpr int64_t kPrefetchBytes = 8192;  // PrefetchPart's distance ahead

// Adds the pair products of weight quads kq0 .. kq0 + Q - 1 of `blk` with
// each row's activation quads (at qrow[i] + kq0 * 4) to the int16 sums.
template <WeightFormat F, int R, int Q>
XRT_TARGET_AVX512 inline void AddPairSums(const uint8_t* blk, int kq0, const int8_t* const* qrow,
                                          __m512i (&sum16)[R][2]) {
  static_assert(Q <= PairSumsPerInt16<F>());
#pragma GCC unroll 8
  for (int kq = kq0; kq < kq0 + Q; ++kq) {
    __m512i lo, hi;
    WeightQuads<F>(blk, kq, &lo, &hi);
    __mmask64 neg_lo = 0, neg_hi = 0;
    if constexpr (HasSignedWeights(F)) {
      // Signed x signed: |w| against the activations with w's sign.
      neg_lo = _mm512_movepi8_mask(lo);
      neg_hi = _mm512_movepi8_mask(hi);
      lo = _mm512_abs_epi8(lo);
      hi = _mm512_abs_epi8(hi);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      __m512i a_lo = BroadcastQuad(qrow[i] + kq * 4), a_hi = a_lo;
      if constexpr (HasSignedWeights(F)) {
        const __m512i zero = _mm512_setzero_si512();
        a_lo = _mm512_mask_sub_epi8(a_lo, neg_lo, zero, a_lo);
        a_hi = _mm512_mask_sub_epi8(a_hi, neg_hi, zero, a_hi);
      }
      sum16[i][0] = _mm512_add_epi16(sum16[i][0], PairProducts(lo, a_lo));
      sum16[i][1] = _mm512_add_epi16(sum16[i][1], PairProducts(hi, a_hi));
    }
  }
}

// Sub-block s of a K-quant super-block, per column of each half: the scale
// (int32 lanes) and the multiplier of the sub-block's activation sum as
// (x, 0) int16 pairs: the min for q4_k / q5_k, the scale for q3_k / q6_k
// (whose quants are stored offset by KQuantOffset) and iq4_xs (unused:
// HasSubBlockSums).
template <WeightFormat F>
XRT_TARGET_AVX512 inline void SubBlockScales(const uint8_t* sb, int s, __m512i (&scale)[2],
                                             __m512i (&by_qsum)[2]) {
  for (int h = 0; h < 2; ++h) {
    if constexpr (HasKInt8Scales(F)) {
      scale[h] = _mm512_cvtepi8_epi32(_mm_loadu_si128(
          reinterpret_cast<const __m128i*>(sb + kK6ScalesOffset + s * kPackNR + 16 * h)));
      by_qsum[h] = _mm512_and_si512(scale[h], _mm512_set1_epi32(0xffff));
    } else {
      packed_simd::KScaleMin16(sb, s, h, &scale[h], &by_qsum[h]);
    }
  }
}

// imin[i][h] += by_qsum[h] * (row i's sum of the activation quants of
// sub-block s of super-block b).
template <WeightFormat F, int R>
XRT_TARGET_AVX512 inline void AddSubBlockMins(const QuantRows<R>& rows, int64_t b, int s,
                                              const __m512i (&by_qsum)[2], __m512i (&imin)[R][2]) {
  constexpr int kSub = KSubBlockRows(F);
  for (int i = 0; i < R; ++i) {
    const int32_t* s16 = rows.sum16[i] + (b * kSuperBlock + s * kSub) / kSumRows;
    int32_t qsum = 0;
    for (int j = 0; j < kSub / kSumRows; ++j) qsum += s16[j];
    const __m512i q = LowHalf(qsum);
    for (int h = 0; h < 2; ++h)
      imin[i][h] = _mm512_add_epi32(imin[i][h], _mm512_madd_epi16(by_qsum[h], q));
  }
}

// Step 2's scale step for super-block b (at sb) of every row, from its
// integer sums: isum (sum of scale * dot) and imin (AddSubBlockMins; iq4_xs:
// unused, its dots are of the signed weights).
template <WeightFormat F, int R>
XRT_TARGET_AVX512 inline void AddSuperBlock(const uint8_t* sb, const QuantRows<R>& rows, int64_t b,
                                            const __m512i (&isum)[R][2],
                                            const __m512i (&imin)[R][2], __m512 (&acc)[R][2]) {
  for (int h = 0; h < 2; ++h) {
    const __m512 dw = packed_simd::Halves16(sb + 32 * h);
    const __m512 dmin =
        HasKInt8Scales(F) ? _mm512_setzero_ps() : packed_simd::Halves16(sb + kKDminOffset + 32 * h);
    for (int i = 0; i < R; ++i) {
      const __m512 da = _mm512_set1_ps(rows.d[i][b]);
      __m512i sum = isum[i][h];
      if constexpr (KQuantOffset(F) != 0) {  // imin: sum of sc * qsum, times the offset
        sum = _mm512_sub_epi32(sum, _mm512_slli_epi32(imin[i][h], KQuantOffsetShift<F>()));
      }
      acc[i][h] = _mm512_fmadd_ps(_mm512_mul_ps(dw, da), _mm512_cvtepi32_ps(sum), acc[i][h]);
      if constexpr (!HasKInt8Scales(F)) {
        const __m512 neg = _mm512_castsi512_ps(_mm512_xor_si512(
            _mm512_castps_si512(_mm512_mul_ps(dmin, da)), _mm512_set1_epi32(INT32_MIN)));
        acc[i][h] = _mm512_fmadd_ps(neg, _mm512_cvtepi32_ps(imin[i][h]), acc[i][h]);
      }
    }
  }
}

// Step 2's scale step for group b (at grp) of every row, from the integer
// dot products of its quants.
template <WeightFormat F, int R>
XRT_TARGET_AVX512 inline void AddGroup(const uint8_t* grp, const QuantRows<R>& rows, int64_t b,
                                       const __m512i (&dot)[R][2], __m512 (&acc)[R][2]) {
  for (int h = 0; h < 2; ++h) {
    const __m512 dw = packed_simd::Halves16(grp + 32 * h);
    for (int i = 0; i < R; ++i) {
      const float da = rows.d[i][b];
      const int32_t qsum = rows.sum16[i][2 * b] + rows.sum16[i][2 * b + 1];
      __m512i isum = dot[i][h];
      if constexpr (QuantGroupQuantOffset(F) != 0) {  // q4_0, q5_0
        isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(QuantGroupQuantOffset(F) * qsum));
      }
      acc[i][h] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(da)), _mm512_cvtepi32_ps(isum),
                                  acc[i][h]);
      if constexpr (HasGroupMin(F)) {
        const __m512 mw = packed_simd::Halves16(grp + 64 + 32 * h);
        acc[i][h] = _mm512_fmadd_ps(mw, _mm512_set1_ps(rows.ds[i][b]), acc[i][h]);
      }
    }
  }
}

// Rows i0 .. i0 + R - 1 of the panel's columns of C from their sums.
template <int R>
XRT_TARGET_AVX512 inline void StoreRowsAvx512(const Int8Problem& p, int64_t col0, int64_t i0,
                                              const __m512 (&acc)[R][2]) {
  const MatmulArgs& a = *p.args;
  const int cols = static_cast<int>(std::min<int64_t>(kPackNR, a.n - col0));
  const float* bias = a.bias ? a.bias + col0 : nullptr;
  for (int i = 0; i < R; ++i) {
    packed_simd::StoreRow32Avx512(a.c + (i0 + i) * a.ldc + col0, bias, a.accumulate, cols,
                                  acc[i][0], acc[i][1]);
  }
}

// R rows (i0 .. i0+R-1) of one panel over the whole of K: the weight quads
// decoded once per four k-rows and used by every row. Products are summed
// in int16 as far as PairSumsPerInt16 allows, then widened by one vpmaddwd
// (with the sub-block scale as the multiplier for the K-quants): port 0,
// the only one for vpmaddubsw / vpmaddwd on zmm, does half the work of a
// widen per product pair. Every integer sum is exact, so the order of the
// additions does not change the result.
template <WeightFormat F, int R>
XRT_TARGET_AVX512 void PanelRowsAvx512(const Int8Problem& p, const uint8_t* panel, int64_t col0,
                                       int64_t i0) {
  const int64_t k = p.args->k;
  // Row groups after the first read the panel the first one brought in.
  const bool prefetch = i0 < kGroupRows;
  __m512 acc[R][2];
  for (int i = 0; i < R; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  const QuantRows<R> rows = QuantRowsAt<R>(p, i0);
  if constexpr (IsKQuantFormat(F)) {
    constexpr int kSubs = kSuperBlock / KSubBlockRows(F);
    constexpr int kSubQuads = KSubBlockRows(F) / 4;
    constexpr int kChunk = std::min(kSubQuads, PairSumsPerInt16<F>());
    constexpr int64_t kBytes = SuperBlockBytes(F);
    for (int64_t b = 0; b < k / kSuperBlock; ++b) {
      const uint8_t* sb = panel + b * kBytes;
      const int8_t* qsb[R];
      for (int i = 0; i < R; ++i) qsb[i] = rows.q[i] + b * kSuperBlock;
      __m512i isum[R][2], imin[R][2];
      for (int i = 0; i < R; ++i)
        for (int h = 0; h < 2; ++h) isum[i][h] = imin[i][h] = _mm512_setzero_si512();
#pragma GCC unroll 1
      for (int s = 0; s < kSubs; ++s) {
        if (prefetch) PrefetchPart<kPrefetchBytes>(sb, kBytes, s, kSubs);
        __m512i scale[2], by_qsum[2];
        SubBlockScales<F>(sb, s, scale, by_qsum);
        for (int h = 0; h < 2; ++h) scale[h] = PairOf(scale[h]);  // as (sc, sc) pairs
#pragma GCC unroll 4
        for (int c = 0; c < kSubQuads / kChunk; ++c) {
          __m512i sum16[R][2];
          for (int i = 0; i < R; ++i) sum16[i][0] = sum16[i][1] = _mm512_setzero_si512();
          AddPairSums<F, R, kChunk>(sb, s * kSubQuads + c * kChunk, qsb, sum16);
          for (int i = 0; i < R; ++i)
            for (int h = 0; h < 2; ++h)
              isum[i][h] = _mm512_add_epi32(isum[i][h], _mm512_madd_epi16(sum16[i][h], scale[h]));
        }
        if constexpr (HasSubBlockSums(F)) AddSubBlockMins<F, R>(rows, b, s, by_qsum, imin);
      }
      AddSuperBlock<F, R>(sb, rows, b, isum, imin, acc);
    }
  } else {
    constexpr int kGroupQuads = kQuantGroup / 4;
    constexpr int kChunk = std::min(kGroupQuads, PairSumsPerInt16<F>());
    const int64_t group_bytes = QuantGroupBytes(F);
    const __m512i ones = _mm512_set1_epi16(1);
    for (int64_t b = 0; b < k / kQuantGroup; ++b) {
      const uint8_t* grp = panel + b * group_bytes;
      if (prefetch) PrefetchPart<kPrefetchBytes>(grp, group_bytes, 0, 1);
      const int8_t* qg[R];
      for (int i = 0; i < R; ++i) qg[i] = rows.q[i] + b * kQuantGroup;
      __m512i dot[R][2];
      for (int i = 0; i < R; ++i) dot[i][0] = dot[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
      for (int c = 0; c < kGroupQuads / kChunk; ++c) {
        __m512i sum16[R][2];
        for (int i = 0; i < R; ++i) sum16[i][0] = sum16[i][1] = _mm512_setzero_si512();
        AddPairSums<F, R, kChunk>(grp, c * kChunk, qg, sum16);
        for (int i = 0; i < R; ++i)
          for (int h = 0; h < 2; ++h)
            dot[i][h] = _mm512_add_epi32(dot[i][h], _mm512_madd_epi16(sum16[i][h], ones));
      }
      AddGroup<F, R>(grp, rows, b, dot, acc);
    }
  }
  StoreRowsAvx512<R>(p, col0, i0, acc);
}

// ----------------------------------------------------------- AVX512_VNNI --

// The signed weights of q8_0 / iq4_nl offset by 128 (AddQuadDots,
// DecodeQuadPanelAvx512Vnni): 128 times each row's quant sum over group b off
// its dot products.
template <int R>
XRT_TARGET_AVX512 inline void SubtractSignedWeightBias(const QuantRows<R>& rows, int64_t b,
                                                       __m512i (&dot)[R][2]) {
  static_assert(kQuantGroup == 2 * kSumRows);
  for (int i = 0; i < R; ++i) {
    const int32_t* s16 = rows.sum16[i] + b * (kQuantGroup / kSumRows);
    const __m512i excess = _mm512_set1_epi32(kSignedWeightBias * (s16[0] + s16[1]));
    for (int h = 0; h < 2; ++h) dot[i][h] = _mm512_sub_epi32(dot[i][h], excess);
  }
}

// A K-quant super-block's integer sums while its sub-blocks are added:
// isum, imin as AddSuperBlock takes them.
template <int R>
struct SuperBlockSums {
  __m512i isum[R][2], imin[R][2];
};

// q4_k / q5_k: one super-block's 6-bit scales and mins (KScaleMin) as a byte
// each, every sub-block's 32 columns, unpacked once per super-block
// (UnpackKScaleMinAvx512: about 10 vector ops per two sub-blocks) where the
// VNNI kernels unpacked 16 columns of a step's scale and min in about 10 per
// half and step (KScaleMin16), and kept the even sub-block's mins in
// registers until the odd one's.
struct KScaleMinBytes {
  alignas(64) uint8_t scale[8][kPackNR];  // [sub-block][column]
  alignas(64) uint8_t min[8][kPackNR];
};

XRT_TARGET_AVX512 inline void UnpackKScaleMinAvx512(const uint8_t* sb, KScaleMinBytes* out) {
  static_assert(kSuperBlock / 32 == 8 && kPackNR == 32);
  const __m512i low4 = _mm512_set1_epi8(15), bits45 = _mm512_set1_epi8(0x30);
  // Sub-blocks 2p and 2p + 1 side by side: their high bits are nibbles 0 and
  // 1 of the same scale_hi bytes, so the upper half is shifted by 4 (16-bit
  // lanes: a byte's nibble 1 to its nibble 0, which is all that is used).
  const __m512i nibble = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
  for (int p = 0; p < 4; ++p) {
    const __m512i lo = _mm512_loadu_si512(sb + kKScaleLoOffset + 2 * p * kPackNR);
    const __m512i hi = _mm512_srlv_epi16(
        _mm512_broadcast_i64x4(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(sb + kKScaleHiOffset + p * kPackNR))),
        nibble);
    // scale = lo's low nibble | hi's bits 0-1 at 4-5, min = lo's high nibble
    // | hi's bits 2-3 at 4-5 (the 16-bit shifts move no kept bit across bytes).
    const __m512i sc = _mm512_ternarylogic_epi32(
        lo, low4, _mm512_and_si512(_mm512_slli_epi16(hi, 4), bits45), 0xEA);  // (a & b) | c
    const __m512i m = _mm512_ternarylogic_epi32(
        _mm512_srli_epi16(lo, 4), low4, _mm512_and_si512(_mm512_slli_epi16(hi, 2), bits45), 0xEA);
    _mm512_store_si512(out->scale[2 * p], sc);
    _mm512_store_si512(out->min[2 * p], m);
  }
}

// The scales of sub-block s, columns 0-15 and 16-31, as int32.
XRT_TARGET_AVX512 inline void KScalesAt(const KScaleMinBytes& bytes, int s, __m512i (&scale)[2]) {
  for (int h = 0; h < 2; ++h) {
    scale[h] = _mm512_cvtepu8_epi32(
        _mm_load_si128(reinterpret_cast<const __m128i*>(bytes.scale[s] + 16 * h)));
  }
}

// q4_k / q5_k: imin of super-block b (the sum over its sub-blocks of min
// times the row's quant sum) for every row: the mins of sub-blocks 2p and
// 2p + 1 as int16 pairs, against the rows' quant sums of the two as pairs
// (SubBlockSumPairs), one vpdpwssd per row, half and pair.
template <int R>
XRT_TARGET_AVX512_VNNI inline void AddKMinPairs(const KScaleMinBytes& bytes,
                                                const QuantRows<R>& rows, int64_t b,
                                                __m512i (&imin)[R][2]) {
  constexpr int kPairs = kSuperBlock / kSubBlockPairRows;
  static_assert(kPairs == 4, "KScaleMinBytes' 8 sub-blocks");
  for (int p = 0; p < kPairs; ++p) {
    for (int h = 0; h < 2; ++h) {
      const __m512i even = _mm512_cvtepu8_epi32(
          _mm_load_si128(reinterpret_cast<const __m128i*>(bytes.min[2 * p] + 16 * h)));
      const __m512i odd = _mm512_cvtepu8_epi32(
          _mm_load_si128(reinterpret_cast<const __m128i*>(bytes.min[2 * p + 1] + 16 * h)));
      const __m512i min_pairs = _mm512_or_si512(even, _mm512_slli_epi32(odd, 16));
      for (int i = 0; i < R; ++i) {
        const __m512i pair_sums = _mm512_set1_epi32(rows.sub_sum_pairs[i][b * kPairs + p]);
        imin[i][h] = _mm512_dpwssd_epi32(imin[i][h], min_pairs, pair_sums);
      }
    }
  }
}

template <int R>
XRT_TARGET_AVX512 inline void ZeroSums(SuperBlockSums<R>& sums) {
  for (int i = 0; i < R; ++i)
    for (int h = 0; h < 2; ++h) sums.isum[i][h] = sums.imin[i][h] = _mm512_setzero_si512();
}

// k-rows per step of a K-quant super-block: one scale each (KScaleRows;
// iq4_xs's equal pairs of 16-row scales take one multiply by the pair's
// first where 16-row steps took two: M = 128, 2 threads, bench/README.md's
// iq4 section).
template <WeightFormat F>
constexpr int KSteps() {
  return kSuperBlock / KScaleRows(F);
}

// Whether a K-quant step's dot products, with the quants' offset taken out
// (AddKStepDots), fit in int16: KScaleRows(F) products of a centered quant
// (at most max(offset, MaxQuant - offset) in magnitude) and an activation
// quant (at most 127). q3_k's: 16 * 4 * 127 = 8128; q6_k's reach 65024,
// iq4_xs's 32 * 128 * 127.
template <WeightFormat F>
constexpr bool CenteredStepDotsFitInt16() {
  if constexpr (!HasKInt8Scales(F) || HasSignedWeights(F)) {
    return false;
  } else {
    constexpr int kOffset = KQuantOffset(F);
    constexpr int kMaxCentered = std::max(kOffset, MaxQuant(F) - kOffset);
    return KScaleRows(F) * kMaxCentered * 127 <= 32767;
  }
}
static_assert(CenteredStepDotsFitInt16<WeightFormat::kQ3_K>());
static_assert(!CenteredStepDotsFitInt16<WeightFormat::kQ6_K>());
static_assert(!CenteredStepDotsFitInt16<WeightFormat::kIQ4_XS>());

// Step s of super-block b (at sb) added to the rows' sums, from the step's
// integer dot products of the rows' quants with the weight's quants (as
// AddQuadDots makes them: the signed weights offset by 128). q4_k / q5_k
// take their scales from `kbytes` (UnpackKScaleMinAvx512) and their mins'
// terms once per super-block (AddKMinPairs).
template <WeightFormat F, int R>
XRT_TARGET_AVX512_VNNI inline void AddKStepDots(const uint8_t* sb, const QuantRows<R>& rows,
                                                int64_t b, int s, const __m512i (&dot)[R][2],
                                                SuperBlockSums<R>& sums,
                                                const KScaleMinBytes* kbytes) {
  constexpr int kStepRows = KScaleRows(F);
  __m512i scale[2];
  if constexpr (HasKInt8Scales(F)) {
    __m512i by_qsum[2];
    SubBlockScales<F>(sb, s * (kStepRows / KSubBlockRows(F)), scale, by_qsum);
    // The quants' offset (KQuantOffset: q6_k 32, q3_k 4; iq4_xs: its
    // weights' bias, kSignedWeightBias) comes off each sub-block's dot
    // products before the scale (sum (q - o) a = dot - o qsum, exact),
    // so no imin sums hold registers: isum is AddSuperBlock's whole sum.
    static_assert(kStepRows % kSumRows == 0);
    constexpr int kOffset = HasSignedWeights(F) ? kSignedWeightBias : KQuantOffset(F);
    for (int i = 0; i < R; ++i) {
      const int32_t* s16 = rows.sum16[i] + (b * kSuperBlock + s * kStepRows) / kSumRows;
      int32_t qsum = 0;
      for (int e = 0; e < kStepRows / kSumRows; ++e) qsum += s16[e];
      const __m512i offset = _mm512_set1_epi32(kOffset * qsum);
      for (int h = 0; h < 2; ++h) {
        const __m512i centered = _mm512_sub_epi32(dot[i][h], offset);
        if constexpr (CenteredStepDotsFitInt16<F>()) {
          // centered's high half is its sign: against by_qsum's (scale, 0)
          // pairs vpdpwssd adds centered * scale, one uop where vpmulld
          // and vpaddd take three (not measurable alone: q3_k M = 1 hot in
          // L2, 2048 x 2048, 43.6-45.5 GB/s either way).
          sums.isum[i][h] = _mm512_dpwssd_epi32(sums.isum[i][h], centered, by_qsum[h]);
        } else {
          sums.isum[i][h] =
              _mm512_add_epi32(sums.isum[i][h], _mm512_mullo_epi32(centered, scale[h]));
        }
      }
    }
  } else {
    static_assert(kStepRows == KSubBlockRows(F));
    KScalesAt(*kbytes, s, scale);
    for (int i = 0; i < R; ++i)
      for (int h = 0; h < 2; ++h)
        sums.isum[i][h] =
            _mm512_add_epi32(sums.isum[i][h], _mm512_mullo_epi32(dot[i][h], scale[h]));
  }
}

// K's blocks: groups, or the K-quants' super-blocks.
template <WeightFormat F>
constexpr int64_t KBlock() {
  return IsKQuantFormat(F) ? kSuperBlock : kQuantGroup;
}

// A decode step's row (M = 1) reads each panel once, from DRAM when the
// weights outgrow the caches. One panel after another is one stream of
// reads per thread, and on a Sapphire Rapids-class CPU one core's stream
// reads 14 GB/s where four read 16.7 (`shared/measure/readbw`, one thread;
// two threads 27.7 against 32.3): the line fill requests one stream keeps
// in flight do not cover the memory's latency. So PanelsRowAvx512Vnni reads
// kDecodeStreams panels side by side, a block (group or K-quant sub-block
// step) of each in turn, each prefetched kStreamPrefetchBytes ahead into L1
// (16 KiB in flight in all, where the one stream had 8 KiB into L2). From
// DRAM, two threads, 8192 x 2048, geometric mean of q8_0, q4_0, q5_0, q4_k,
// q6_k, iq4_xs and q3_k, interleaved runs: one stream 21.5-22.5 GB/s, two
// 23.5, four 25.1-25.9 (2 KiB or 8 KiB ahead, or into L2: 24.0-25.6), with
// readbw at 30.1-30.5 in the same runs. On AMD's Zen 4 the same four streams
// into L1 read 0.6-0.8 of the probe, into L2 0.9-1.1 (one stream into L2 as
// fast): the prefetch's level is chosen per vendor (Int8DecodePrefetchesToL2,
// matmul_int8.h).
//
// Into L1 (Intel's CPUs) a stream's prefetches are spread over the block's
// quad loads, a line or two before each (PrefetchQuadShare), kStreamSpreadBytes
// ahead, rather than issued a block step's share at a time at the step's
// start, kStreamPrefetchBytes ahead, as into L2 (AMD's, where the burst was
// measured at the probe's rate and the spread has not been). On the Sapphire
// Rapids-class machine, M = 1 from DRAM, 8192 x 2048, 2 threads, two series
// of four rounds against the burst (bench/README.md, "The decode's L1
// prefetches spread over its quad loads"): the spread reads 0.82-0.90 of the
// read probe per format where the burst read 0.77-0.87 (q5_k, q3_k, iq4_nl,
// q8_0 up the most; q4_k flat at 0.80-0.82), and in cache 1.02-1.10x (q3_k
// 0.97-0.99x). Four streams' bursts of 9-17 prefetcht0 at once likely take
// the line fill buffers the quads' own loads need (no PMU counters to tell);
// `bench/read_pattern_probe.cc` showed the same without the arithmetic (each
// line 512 B or 1 KiB ahead 35.9-36.2 GB/s, the step's share at once
// 32.5-33.3). 1.5-4 KiB ahead read alike; 2 KiB is the distance kept.
constexpr int kDecodeStreams = 4;
constexpr int64_t kStreamPrefetchBytes = 4096;
constexpr int64_t kStreamSpreadBytes = 2048;

// The first of the lines one stream prefetches during part `part` of `parts`
// of the `bytes`-long block at `blk` (a group, parts 1, or a K-quant step),
// kStreamSpreadBytes ahead. Past its panel's end (`end`) they are taken
// `jump` bytes further: the same panel of the next set of kDecodeStreams,
// which the next call streams (AddBlockAvx512Vnni), not the next panel,
// which this set is reading already (decided for the part as a whole).
inline const uint8_t* SpreadFirstLine(const uint8_t* blk, int64_t bytes, int part, int parts,
                                      const uint8_t* end, int64_t jump) {
  const uint8_t* first = blk + kStreamSpreadBytes + 64 * (part * ((bytes + 63) / 64) / parts);
  return first < end ? first : first + jump;
}

// Lines per part, rounded up (the last line of a part may be the next one's
// first: asked twice, harmless), so that each quad's share is a constant.
constexpr int SpreadLinesPerPart(int64_t bytes, int parts) {
  return static_cast<int>(((bytes + 63) / 64 + parts - 1) / parts);
}

// Quad i's share of a part's kLines lines from `first`, spread over its Q
// quads: lines [i * kLines / Q, (i + 1) * kLines / Q), one or two
// prefetcht0 with i known at compile time (a run-time count per quad cost
// a third of the decode's speed in L2).
template <int Q, int kLines>
inline void PrefetchQuadShare(const uint8_t* first, int i) {
  for (int l = i * kLines / Q; l < (i + 1) * kLines / Q; ++l)
    packed_simd::PrefetchLine(first + 64 * l, PrefetchTo::kL1);
}

// The AVX512_VNNI tier's kernels that read the weight quads, compiled twice
// (matmul_int8_avx512_vnni.inc): as they are (namespace vnni), and with
// GFNI's vgf2p8affineqb merging the high bits of the formats that store them
// apart (WeightQuadsGfni; namespace vnni_gfni) where the CPU has it
// (Int8GfniEnabled). A function's target cannot depend on a template
// argument, and the first copy must run on CPUs without GFNI (Skylake-X to
// Cooper Lake).
namespace vnni {
#define XRT_INT8_VNNI_TARGET XRT_TARGET_AVX512_VNNI
#define XRT_INT8_GFNI 0
#include "runtime/kernels/matmul_int8_avx512_vnni.inc"
#undef XRT_INT8_VNNI_TARGET
#undef XRT_INT8_GFNI
}  // namespace vnni
namespace vnni_gfni {
#define XRT_INT8_VNNI_TARGET XRT_TARGET_AVX512_VNNI_GFNI
#define XRT_INT8_GFNI 1
#include "runtime/kernels/matmul_int8_avx512_vnni.inc"
#undef XRT_INT8_VNNI_TARGET
#undef XRT_INT8_GFNI
}  // namespace vnni_gfni

// -------------------------------------------------------------------- AVX2 --

// A row's four activation quants at q in every dword.
XRT_TARGET_AVX2 inline __m256i BroadcastQuadAvx2(const int8_t* q) {
  int32_t quad;
  std::memcpy(&quad, q, 4);
  return _mm256_set1_epi32(quad);
}

// q4_k / q5_k: the 6-bit scales and mins of one super-block, unpacked from
// the panel's 12 bytes per column (ggml's packing, kept so that the weights
// stay at ggml's size) to a byte each, for all 32 columns at once: about 10
// instructions per sub-block, where unpacking them per 8-column vector took
// about 12 per vector.
struct KScaleBytes {
  alignas(32) uint8_t scales[8][32];  // [sub-block][column]
  // [p]: the mins of sub-blocks 2p and 2p + 1 as byte pairs, columns in the
  // order vpunpck{l,h}bw leave them: 0-7, 16-23, 8-15, 24-31 (MinPairsAt).
  alignas(32) uint8_t min_pairs[4][64];
};

// Where the min pairs of columns 8b .. 8b+7 start in KScaleBytes::min_pairs[p].
constexpr int MinPairsAt(int b) { return 32 * (b % 2) + 16 * (b / 2); }

XRT_TARGET_AVX2 inline void UnpackKScalesAvx2(const uint8_t* sb, KScaleBytes* out) {
  const __m256i low4 = _mm256_set1_epi8(15), bits45 = _mm256_set1_epi8(0x30);
  for (int p = 0; p < 4; ++p) {
    // Sub-block 2p + e's high bits are nibble e of scale_hi[p]: the scale's
    // two in bits 0-1, the min's in bits 2-3 (KScaleMin).
    const __m256i hi =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + kKScaleHiOffset + p * kPackNR));
    __m256i mins[2];
    for (int e = 0; e < 2; ++e) {
      const int s = 2 * p + e;
      const __m256i lo =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + kKScaleLoOffset + s * kPackNR));
      const __m256i h = e == 0 ? hi : _mm256_srli_epi16(hi, 4);
      const __m256i sc = _mm256_or_si256(_mm256_and_si256(lo, low4),
                                         _mm256_and_si256(_mm256_slli_epi16(h, 4), bits45));
      mins[e] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), low4),
                                _mm256_and_si256(_mm256_slli_epi16(h, 2), bits45));
      _mm256_store_si256(reinterpret_cast<__m256i*>(out->scales[s]), sc);
    }
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->min_pairs[p]),
                       _mm256_unpacklo_epi8(mins[0], mins[1]));
    _mm256_store_si256(reinterpret_cast<__m256i*>(out->min_pairs[p] + 32),
                       _mm256_unpackhi_epi8(mins[0], mins[1]));
  }
}

// The eight unsigned bytes at p as (v, v) int16 pairs, dword c from byte c.
XRT_TARGET_AVX2 inline __m256i BytePairs(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  const __m256i twice = _mm256_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1,  //
                                         4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7, -1);
  return _mm256_shuffle_epi8(_mm256_set1_epi64x(v), twice);
}

// ---- The nibble formats on AVX2: quads (QuadNibbleByte) ----
// Half h (32 bytes) of a quad, masked, is the vpmaddubsw operand of columns
// 8h .. 8h+7 (low nibbles: vector h) and 8h+16 .. 8h+23 (high: vector h + 2)
// as it is, and a row's four activation bytes are one dword broadcast: no
// shuffle of either operand. The int16 sums of a chunk of quads
// (PairSumsPerInt16) are widened by one vpmaddwd per vector (against ones or
// the sub-block's scales).
//
// Registers by construction (AVX2 has 16): a pass holds the R x V int16
// sums, V weight vectors, one broadcast and a constant or two, V = 4 for one
// row (one pass) and 2 for more (a pass per half): at most 13 for q4_0 /
// q4_1, 14 for q5_0 / q5_1 / q5_k / q6_k (their high bits). The f32
// accumulators (and the K-quants' and q5 groups' int32 sums and scale pairs)
// stay in memory: a load and a store per vector and block, on the load /
// store ports, not the vector ALUs.

// Passes over a quad's halves for R rows, and vectors per pass.
template <int R>
constexpr int kQuadPasses = R == 1 ? 1 : 2;
template <int R>
constexpr int kQuadVectors = 4 / kQuadPasses<R>;

// The column block (vector of 8 columns) of vector j of pass h.
template <int R>
constexpr int QuadVectorBlock(int h, int j) {
  return (kQuadPasses<R> == 1 ? j / 2 : h) + 2 * (j % 2);
}

// The weights of quad kq as unsigned bytes, the vectors of pass h (of every
// half with one pass): w[2e + n] is half (one pass ? e : h), nibble n, plus
// the high bits of q5_0 / q5_1 / a K-quant from `sb` (the group or
// super-block). Low bits (nibbles, q3_k's crumbs) at `low_quants`. iq4_nl /
// iq4_xs: the nibbles looked up, as signed bytes (kIQ4Values) or with kBiased
// as those + 128 (vpdpbusd's operand).
template <WeightFormat F, int kV, bool kBiased = false>
XRT_TARGET_AVX2 inline void QuadWeightsAvx2(const uint8_t* low_quants, const uint8_t* sb, int kq,
                                            int h, __m256i (&w)[kV]) {
  constexpr int kLowBits = LowQuantBits(F);
  const __m256i low = _mm256_set1_epi8((1 << kLowBits) - 1);
  // q5_0 / q5_1 / q5_k / q3_k: the quad's 16 bytes in both lanes, lane 0
  // shifted up by 4, so that vector (half, n) takes bit 4 + 2 half + n
  // (K5HighBit); q6_k: the quad's 32 bytes, vector (half, n) takes the field
  // at bits 2 (2 half + n).
  __m256i high = _mm256_setzero_si256();
  if constexpr (HasK5HighBits(F)) {
    high = _mm256_sllv_epi32(
        _mm256_broadcastsi128_si256(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(sb + K5HighBitsOffset(F) + kq * 16))),
        _mm256_setr_epi32(4, 4, 4, 4, 0, 0, 0, 0));
  } else if constexpr (F == WeightFormat::kQ6_K) {
    high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + kK6HighOffset + kq * 32));
  }
#pragma GCC unroll 2
  for (int e = 0; e < kV / 2; ++e) {
    const int half = kV == 4 ? e : h;
    __m256i x = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(low_quants + LowQuadOffset(F, kq) + 32 * half));
    if constexpr (HasCrumbs(F)) x = _mm256_srl_epi16(x, _mm_cvtsi32_si128(LowQuadShift(F, kq)));
    w[2 * e] = _mm256_and_si256(x, low);
    w[2 * e + 1] = _mm256_and_si256(_mm256_srli_epi16(x, 4), low);
    if constexpr (HasIQ4Table(F)) {
      const __m256i table = _mm256_broadcastsi128_si256(
          _mm_load_si128(reinterpret_cast<const __m128i*>(kIQ4Bytes<kBiased>.table)));
      w[2 * e] = _mm256_shuffle_epi8(table, w[2 * e]);
      w[2 * e + 1] = _mm256_shuffle_epi8(table, w[2 * e + 1]);
    }
#pragma GCC unroll 2
    for (int n = 0; n < 2; ++n) {
      const int f = 2 * half + n;
      if constexpr (HasK5HighBits(F)) {
        // Bit 4 + f to bit kLowBits (4, q3_k 2); the bits a 16-bit shift
        // brings in from the next byte land above it.
        const __m256i bit = _mm256_srli_epi16(high, f + 4 - kLowBits);
        w[2 * e + n] =
            _mm256_or_si256(w[2 * e + n], _mm256_and_si256(bit, _mm256_set1_epi8(1 << kLowBits)));
      } else if constexpr (F == WeightFormat::kQ6_K) {
        const __m256i at4 =
            f < 2 ? _mm256_slli_epi16(high, 4 - 2 * f) : _mm256_srli_epi16(high, 2 * f - 4);
        w[2 * e + n] = _mm256_or_si256(w[2 * e + n], _mm256_and_si256(at4, _mm256_set1_epi8(48)));
      }
    }
  }
}

// A panel's quads decoded once for all its row blocks: quad q's weights as
// bytes at dst + 128 q, vector (half, nibble n) at 32 (2 half + n) (iq4's
// signed, as vpmaddubsw's sign transfer takes them; its vpdpbusd kernels add
// the bias after the load). The rows then load each vector instead of
// decoding it again (3 to 8 vector ALU operations per quad and pass fewer in
// the loop that bounds prefill).

template <WeightFormat F>
XRT_TARGET_AVX2 void DecodeQuadPanelAvx2(const uint8_t* panel, int64_t k, uint8_t* dst) {
  constexpr int64_t kBlock = IsKQuantFormat(F) ? kSuperBlock : kQuantGroup;
  constexpr int64_t kBytes = IsKQuantFormat(F) ? SuperBlockBytes(F) : QuantGroupBytes(F);
  constexpr int64_t kLow = IsKQuantFormat(F) ? KLowQuantsOffset(F) : QuantGroupQuantsOffset(F);
  for (int64_t blk = 0; blk < k / kBlock; ++blk) {
    const uint8_t* src = panel + blk * kBytes;
    uint8_t* out = dst + blk * (kBlock / 4) * kDecodedQuadBytes;
    for (int kq = 0; kq < kBlock / 4; ++kq) {
      __m256i w[4];
      QuadWeightsAvx2<F, 4>(src + kLow, src, kq, 0, w);
      for (int v = 0; v < 4; ++v) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + kq * kDecodedQuadBytes + 32 * v), w[v]);
      }
    }
  }
}

// The rows' quants of block `blk` (kBlock values), each pointer opaque: else
// GCC keeps one pass's broadcasts for the next and spills them.
template <int R, int kBlock>
XRT_TARGET_AVX2 inline void OpaqueBlockRows(const int8_t* const* q, int64_t blk,
                                            const int8_t* (&qa)[R]) {
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    qa[i] = q[i] + blk * kBlock;
    XRT_OPAQUE_POINTER(qa[i]);
  }
}

// acc = 0 by vector stores: `= {}` became a rep stosq, whose start-up cost
// showed in the profile of short-K matmuls (one per panel and row block).
template <int R>
XRT_TARGET_AVX2 inline void ZeroAccAvx2(float (&acc)[R][kPackNR]) {
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 4
    for (int b = 0; b < kPackNR / 8; ++b) _mm256_store_ps(acc[i] + 8 * b, _mm256_setzero_ps());
  }
}

// Stores the R rows' 32 outputs from acc[R][kPackNR].
template <int R>
XRT_TARGET_AVX2 inline void StoreQuadRowsAvx2(const Int8Problem& p, int64_t col0, int64_t i0,
                                              const float (&acc)[R][kPackNR]) {
  const MatmulArgs& a = *p.args;
  const int cols = static_cast<int>(std::min<int64_t>(kPackNR, a.n - col0));
  const float* bias = a.bias ? a.bias + col0 : nullptr;
  for (int i = 0; i < R; ++i) {
    __m256 v[4];
    for (int b = 0; b < 4; ++b) v[b] = _mm256_load_ps(acc[i] + 8 * b);
    packed_simd::StoreRow32Avx2(a.c + (i0 + i) * a.ldc + col0, bias, a.accumulate, cols, v);
  }
}

// ---- q8_0 on AVX2: quads formed in registers ----
// A q8_0 group stores 32 k-rows of 32 signed bytes. vpunpck{l,h}bw of
// k-rows (0, 1) and (2, 3) of a quad, then vpunpck{l,h}wd of the two, give
// four vectors whose dword c is one column's four k-rows (the operand order
// of the nibble formats' quads): vector s = 2 half + j holds columns
// 4s .. 4s+3 in its low lane and 16+4s .. 16+4s+3 in its high one
// (Q8SlotColumn), and a row's four activation bytes are one dword broadcast.
// vpmaddubsw takes |w| against the activations with w's sign (vpsignb:
// exact for w = -128 too) and one vpmaddwd against ones widens every quad
// (two quads' pair sums, 2 * 128 * 127 each, would not add exactly in
// int16). Four vector operations per row, vector and quad, against about two
// for the nibble formats; the quads are formed once for all the rows, or once
// per panel (DecodeQ8PanelAvx2).

// Where vector s's columns are: column 4s + c (low lane) and 16 + 4s + c.
constexpr int Q8SlotColumn(int s, int lane, int c) { return 16 * lane + 4 * s + c; }

// The vector of pass h's j-th (Q8SlotColumn's s).
template <int R>
constexpr int Q8Slot(int h, int j) {
  return kQuadPasses<R> == 1 ? j : 2 * h + j;
}

// Quad kq of the k-rows at `quants` (32 bytes each), the vectors of pass h:
// w[j] = vector (one pass ? j : 2h + j).
template <int kV>
XRT_TARGET_AVX2 inline void Q8QuadsAvx2(const uint8_t* quants, int kq, int h, __m256i (&w)[kV]) {
  const uint8_t* r = quants + kq * 4 * kPackNR;
  __m256i k[4];
  for (int t = 0; t < 4; ++t) {
    k[t] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + t * kPackNR));
  }
#pragma GCC unroll 2
  for (int e = 0; e < kV / 2; ++e) {
    const int half = kV == 4 ? e : h;  // columns 8 half .. +7 and 16 + 8 half .. +7
    const __m256i k01 =
        half == 0 ? _mm256_unpacklo_epi8(k[0], k[1]) : _mm256_unpackhi_epi8(k[0], k[1]);
    const __m256i k23 =
        half == 0 ? _mm256_unpacklo_epi8(k[2], k[3]) : _mm256_unpackhi_epi8(k[2], k[3]);
    w[2 * e] = _mm256_unpacklo_epi16(k01, k23);
    w[2 * e + 1] = _mm256_unpackhi_epi16(k01, k23);
  }
}

// A q8_0 panel's quads formed once for all its row blocks: quad q's vector
// s at dst + 128 q + 32 s (the same bytes as the panel's quants, reordered).
XRT_TARGET_AVX2 void DecodeQ8PanelAvx2(const uint8_t* panel, int64_t k, uint8_t* dst) {
  constexpr int64_t kBytes = QuantGroupBytes(WeightFormat::kQ8_0);
  constexpr int64_t kQuants = QuantGroupQuantsOffset(WeightFormat::kQ8_0);
  for (int64_t blk = 0; blk < k / kQuantGroup; ++blk) {
    const uint8_t* quants = panel + blk * kBytes + kQuants;
    uint8_t* out = dst + blk * (kQuantGroup / 4) * kDecodedQuadBytes;
    for (int kq = 0; kq < kQuantGroup / 4; ++kq) {
      __m256i w[4];
      Q8QuadsAvx2<4>(quants, kq, 0, w);
      for (int s = 0; s < 4; ++s) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + kq * kDecodedQuadBytes + 32 * s), w[s]);
      }
    }
  }
}

// The f16 scales of vector s's columns, as f32.
XRT_TARGET_AVX2 inline __m256 Q8SlotScales(const uint8_t* grp, int s) {
  const __m128i lo =
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(grp + 2 * Q8SlotColumn(s, 0, 0)));
  const __m128i hi =
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(grp + 2 * Q8SlotColumn(s, 1, 0)));
  return _mm256_cvtph_ps(_mm_unpacklo_epi64(lo, hi));
}

// q6_k: the eight signed bytes at p as (v, v) int16 pairs, dword c from
// byte c (each byte to both halves' high bytes, then an arithmetic shift).
XRT_TARGET_AVX2 inline __m256i SignedBytePairs(const uint8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  const __m256i high = _mm256_setr_epi8(-1, 0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3,  //
                                        -1, 4, -1, 4, -1, 5, -1, 5, -1, 6, -1, 6, -1, 7, -1, 7);
  return _mm256_srai_epi16(_mm256_shuffle_epi8(_mm256_set1_epi64x(v), high), 8);
}

using PanelFn = void (*)(const Int8Problem&, const uint8_t*, int64_t, int64_t);

// vpdpbusd on ymm (AVX-VNNI): acc + the four u8 x s8 products of each dword,
// exact in int32.
XRT_TARGET_AVX2_VNNI inline __m256i DotBytesAvxVnni(__m256i acc, __m256i u8, __m256i s8) {
#if defined(XRT_SIMD_EMULATE)
  return _mm256_dpbusd_epi32(acc, u8, s8);  // SIMDe's AVX512_VL form: the same sums
#else
  return _mm256_dpbusd_avx_epi32(acc, u8, s8);
#endif
}

// The AVX2 tier's int8 kernels, compiled twice (matmul_int8_avx2.inc): with
// vpmaddubsw + vpmaddwd, and with AVX-VNNI's vpdpbusd where the CPU has it
// (Int8AvxVnniEnabled). A function's target cannot depend on a template
// argument, and the plain variant must not be built with AVX-VNNI enabled:
// GCC then fuses its vpmaddwd + vpaddd into vpdpwssd, which faults on CPUs
// without it.
namespace maddubs {
#define XRT_INT8_AVX2_TARGET XRT_TARGET_AVX2
#define XRT_INT8_AVX_VNNI 0
#include "runtime/kernels/matmul_int8_avx2.inc"
#undef XRT_INT8_AVX2_TARGET
#undef XRT_INT8_AVX_VNNI
}  // namespace maddubs
namespace avx_vnni {
#define XRT_INT8_AVX2_TARGET XRT_TARGET_AVX2_VNNI
#define XRT_INT8_AVX_VNNI 1
#include "runtime/kernels/matmul_int8_avx2.inc"
#undef XRT_INT8_AVX2_TARGET
#undef XRT_INT8_AVX_VNNI
}  // namespace avx_vnni

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// The panel kernels of one ISA, by format and row count.
struct Avx512Panels {
  static constexpr int kMaxRows = kGroupRows;
  template <WeightFormat F, int R>
  static constexpr PanelFn kFn = &PanelRowsAvx512<F, R>;
};
struct Avx512VnniPanels {
  static constexpr int kMaxRows = kVnniGroupRows;
  template <WeightFormat F, int R>
  static constexpr PanelFn kFn = &vnni::PanelRowsAvx512Vnni<F, R>;
};
// Their GFNI copy where it has anything to merge (WeightQuadsGfni).
template <WeightFormat F, int R>
constexpr PanelFn GfniPanelFn() {
  if constexpr (HasSeparateHighBits(F)) {
    return &vnni_gfni::PanelRowsAvx512Vnni<F, R>;
  } else {
    return &vnni::PanelRowsAvx512Vnni<F, R>;
  }
}
struct Avx512VnniGfniPanels {
  static constexpr int kMaxRows = kVnniGroupRows;
  template <WeightFormat F, int R>
  static constexpr PanelFn kFn = GfniPanelFn<F, R>();
};

// Up to 4 rows on every path; 5 and 6 where GroupRowsFor gives 6 (the
// K-quants keep 4: six rows' super-block sums (isum, and imin for q4_k /
// q5_k) beside their dot products and f32 accumulators would need more than
// the 32 zmm registers).
template <class Panels, WeightFormat F>
PanelFn PanelFnFor(int rows) {
  static_assert(kGroupRows == 4 && kVnniGroupRows == 6);
  if constexpr (Panels::kMaxRows == kVnniGroupRows && !IsKQuantFormat(F)) {
    if (rows == 5) return Panels::template kFn<F, 5>;
    if (rows >= 6) return Panels::template kFn<F, 6>;
  }
  switch (rows) {
    case 1:
      return Panels::template kFn<F, 1>;
    case 2:
      return Panels::template kFn<F, 2>;
    case 3:
      return Panels::template kFn<F, 3>;
    default:
      return Panels::template kFn<F, 4>;
  }
}

// fn(std::integral_constant<WeightFormat, F>{}) for f, a format with integer
// quants (Int8ComputeApplies): the one switch from a run-time format to the
// kernels and decoders instantiated per format. Every format is listed, so
// that a new one is a -Wswitch warning here rather than another format's
// kernels; the float formats (never passed) are taken as q6_k.
template <class Fn>
auto WithInt8Format(WeightFormat f, Fn&& fn) {
  assert(Int8ComputeApplies(f));
  using F = WeightFormat;
  switch (f) {
    case F::kQ8_0:
      return fn(std::integral_constant<F, F::kQ8_0>{});
    case F::kQ4_0:
      return fn(std::integral_constant<F, F::kQ4_0>{});
    case F::kQ4_1:
      return fn(std::integral_constant<F, F::kQ4_1>{});
    case F::kQ5_0:
      return fn(std::integral_constant<F, F::kQ5_0>{});
    case F::kQ5_1:
      return fn(std::integral_constant<F, F::kQ5_1>{});
    case F::kQ4_K:
      return fn(std::integral_constant<F, F::kQ4_K>{});
    case F::kQ5_K:
      return fn(std::integral_constant<F, F::kQ5_K>{});
    case F::kQ3_K:
      return fn(std::integral_constant<F, F::kQ3_K>{});
    case F::kIQ4_NL:
      return fn(std::integral_constant<F, F::kIQ4_NL>{});
    case F::kIQ4_XS:
      return fn(std::integral_constant<F, F::kIQ4_XS>{});
    case F::kQ6_K:
    case F::kF32:
    case F::kF16:
    case F::kBF16:
    case F::kBF16Pairs:
    case F::kBF16PairsAmx:
      break;
  }
  return fn(std::integral_constant<F, F::kQ6_K>{});
}

template <class Panels>
PanelFn PanelFnFor(WeightFormat f, int rows) {
  return WithInt8Format(f, [rows](auto format) { return PanelFnFor<Panels, format()>(rows); });
}

// PanelsRowAvx512Vnni: one row against kDecodeStreams panels from `panel`,
// prefetched into L2 (`to_l2`: Int8DecodePrefetchesToL2) or L1.
using PanelsFn = void (*)(const Int8Problem&, const uint8_t* panel, int64_t col0);

PanelsFn DecodeStreamsFn(WeightFormat f, bool gfni, bool to_l2) {
  return WithInt8Format(f, [gfni, to_l2](auto format) -> PanelsFn {
    constexpr WeightFormat F = format();
    if constexpr (HasSeparateHighBits(F)) {
      if (gfni) {
        return to_l2 ? &vnni_gfni::PanelsRowAvx512Vnni<F, kDecodeStreams, PrefetchTo::kL2>
                     : &vnni_gfni::PanelsRowAvx512Vnni<F, kDecodeStreams, PrefetchTo::kL1>;
      }
    }
    return to_l2 ? &vnni::PanelsRowAvx512Vnni<F, kDecodeStreams, PrefetchTo::kL2>
                 : &vnni::PanelsRowAvx512Vnni<F, kDecodeStreams, PrefetchTo::kL1>;
  });
}

using DecodeFn = void (*)(const uint8_t*, int64_t, uint8_t*);

// Row blocks from which decoding a panel once pays (measured, one thread,
// 2048x2048 and SmolLM2's 576-wide shapes). A decoded panel is 32 bytes per
// k-row, past L1 from k = 1024, so the rows then read twice the packed
// bytes from L2: q5_k and q6_k, whose high bits take the most work to
// decode, win from 2 row blocks (q5_k M = 32: 80 -> 99 GMAC/s); q4_k, the
// q4 groups and q8_0 only from many (q4_k M = 16: 105 -> 101, M = 128: 104
// -> 111; q4_1 at k = 576, M = 128: 88 -> 91; q8_0 at k = 2048, M = 8:
// ~15% slower, M = 128: +2-3%).
//
// On AVX512_VNNI (DecodeQuadPanelAvx512Vnni), 2
// threads, 2048 x 2048 and 8192 x 2048 (q8_0 also 576 x 1536 and 1536 x 576),
// row groups of 6 rows (q8_0) or 4 (K-quants): q8_0 from 5 groups (3 lose
// 10-25%, 4 are mixed, 5 win 0-40%, 22 win 15-20%); q6_k from 5 (4 lose 20%,
// 5 win 10-20%, 32 win 28-46%); q5_k from 6 (5 even, 6 win 2-10%, 32 win
// 12-25%); q4_k and the q4 groups never (q4_k: 8 groups lose 7-12%, 32 even;
// their nibbles are stored as quads and take 3 operations per quad).
// q5_0 / q5_1 merge q5_k's high bits per quad and take its thresholds,
// checked on a Zen 5 (2 threads, interleaved, decoding forced on and off):
// on avx2 one row block (M = 4) loses 1.6-2x decoded, M = 128 wins 1.2-1.3x;
// on AVX512_VNNI one group (M = 4) loses 1.3-1.5x, 22 groups (M = 128) win
// 0-10% (q5_0 2048 x 2048: 812-830 -> 750-754 us, q5_1 even).
// q3_k (crumbs shifted and masked, its bit 2 merged as q5_k's bit 4),
// measured on a Zen 5 (2 threads, 2048 x 2048, two interleaved rounds,
// decoding forced on and off): on AVX512_VNNI 4 groups (M = 16) lose 1.25x,
// 5 (M = 18, 20) win 1.1-1.2x, 6 (M = 24) 1.35x, M = 128 1.35x: q6_k's 5;
// on avx2 (with and without AVX-VNNI) 2 row blocks lose 1.25-1.45x, 3
// 1.15-1.2x, 4 are even, 5 (M = 18, 20) win 1.05-1.4x, M = 128 1.35-1.4x:
// from 5, where q6_k's 2 would lose.
// iq4_nl / iq4_xs take q4_0's and q4_k's thresholds (not measured): their
// nibbles are read as those formats', plus one vpshufb per vector.
int64_t DecodedPanelMinRowBlocks(CpuIsa isa, WeightFormat f) {
  if (IsaAtLeast(isa, CpuIsa::kAvx512Vnni)) {
    switch (f) {
      case WeightFormat::kQ8_0:
      case WeightFormat::kQ3_K:
      case WeightFormat::kQ6_K:
        return 5;
      case WeightFormat::kQ5_0:
      case WeightFormat::kQ5_1:
      case WeightFormat::kQ5_K:
        return 6;
      default:
        return std::numeric_limits<int64_t>::max();
    }
  }
  if (isa != CpuIsa::kAvx2) return std::numeric_limits<int64_t>::max();
  if (f == WeightFormat::kQ3_K) return 5;
  return HasSeparateHighBits(f) ? 2 : 16;
}

// DecodeQuadPanelAvx512Vnni of a format with integer quants: the decoder of
// the avx512_vnni and amx int8 kernels (its GFNI copy if `gfni`).
DecodeFn QuadPanelDecoderAvx512(WeightFormat f, bool gfni) {
  return WithInt8Format(f, [gfni](auto format) -> DecodeFn {
    if constexpr (HasSeparateHighBits(format())) {
      if (gfni) return &vnni_gfni::DecodeQuadPanelAvx512Vnni<format()>;
    }
    return &vnni::DecodeQuadPanelAvx512Vnni<format()>;
  });
}

// The panel decoder of each format on `isa` (where DecodedPanelMinRowBlocks
// is finite).
DecodeFn DecodeFnFor(CpuIsa isa, WeightFormat f, bool gfni) {
  if (IsaAtLeast(isa, CpuIsa::kAvx512Vnni)) return QuadPanelDecoderAvx512(f, gfni);
  return WithInt8Format(f, [](auto format) -> DecodeFn {
    if constexpr (format() == WeightFormat::kQ8_0) {
      return &DecodeQ8PanelAvx2;
    } else {
      return &DecodeQuadPanelAvx2<format()>;
    }
  });
}

// ---------------------------------------------------------------- AMX-INT8 --
// kInt8 prefill on AMX (the amx tier, kAmxInt8Rows rows or more) for the
// formats with 32-value groups (AmxInt8Applies). Per 16-row group and panel,
// per group b of K: TDPBSUD sums the rows' signed activation quants (one tile
// of 16 rows x 32 bytes, straight from the quantized rows) against the
// panel's unsigned quads (the thread's decoded panel: q8_0's weights and
// iq4_nl's table values offset by 128 as for vpdpbusd, the q4 / q5 quants as
// bytes) into two 16 x 16 tiles of exact int32 sums; AddGroup then scales
// them into the f32 sums as every path does, so the results are the same
// bits.

// The K-quants whose scales cover 32 k-rows (q4_k, q5_k, iq4_xs: KScaleRows)
// too: a step per TDPBSUD, as a group. q6_k's and q3_k's 16-row steps would
// halve each TDPBSUD's work and double the sums stored and scaled per k-row:
// on AMX they ran 13-22% slower than VNNI (M = 128, 8192 x 2048, 2 threads),
// where the 32-row ones ran 16-31% faster.
bool AmxInt8Applies(WeightFormat f) {
  return IsQuantizedFormat(f) || (IsKQuantFormat(f) && KScaleRows(f) == kQuantGroup);
}

// Rows from which AMX-INT8 runs: a 16-row tile, but two for the K-quants,
// whose panel AMX must decode first where the VNNI kernel reads q4_k's and
// iq4_xs's quads in place (the 1B-shaped Q4_K_M's 16-token prefill: 174 ->
// 161-167 tokens/s with AMX from 16 rows; 32 tokens 205 -> 220).
constexpr int64_t AmxInt8MinRows(WeightFormat f) {
  return IsKQuantFormat(f) ? 2 * kAmxInt8Rows : kAmxInt8Rows;
}

// Tiles 0, 1: the int32 sums of columns 0-15, 16-31; 4: the rows' quants of
// a group (or K-quant step); 6, 7: its 8 quads of columns 0-15, 16-31.
const AmxTileConfig& AmxInt8Config() {
  static const AmxTileConfig config =
      AmxTileConfig().Tile(0, 16, 64).Tile(1, 16, 64).Tile(4, 16, 32).Tile(6, 8, 64).Tile(7, 8, 64);
  return config;
}

// Rows r0 .. r0 + R - 1 of a 16-row group's f32 sums (acc, [16][kPackNR])
// stored into C (the group at i0, the panel at col0).
template <int R>
XRT_TARGET_AVX512 void StoreAmxRows(const Int8Problem& p, const float* acc, int64_t col0,
                                    int64_t i0, int r0) {
  __m512 sums[R][2];
  for (int i = 0; i < R; ++i)
    for (int h = 0; h < 2; ++h) sums[i][h] = _mm512_load_ps(acc + (r0 + i) * kPackNR + 16 * h);
  StoreRowsAvx512<R>(p, col0, i0 + r0, sums);
}

// StoreAmxRows over the group's `rows` rows, four at a time. This switch and
// its two twins below (AmxInt8AllRows, PanelRowsAmxK) stay switches. Through
// attention.cc's WithCount the row kernels are called from a generic lambda,
// which does not carry this function's target attribute, and that measured
// slower (M = 128, 8192 x 2048, 2 threads, three interleaved rounds: q4_0 /
// q8_0 7-10%, iq4_xs 2-9%), most likely because GCC no longer inlines them.
XRT_TARGET_AVX512 void StoreAmxGroup(const Int8Problem& p, const float* acc, int64_t col0,
                                     int64_t i0, int rows) {
  for (int r = 0; r < rows; r += 4) {
    switch (std::min(4, rows - r)) {
      case 1:
        StoreAmxRows<1>(p, acc, col0, i0, r);
        break;
      case 2:
        StoreAmxRows<2>(p, acc, col0, i0, r);
        break;
      case 3:
        StoreAmxRows<3>(p, acc, col0, i0, r);
        break;
      default:
        StoreAmxRows<4>(p, acc, col0, i0, r);
    }
  }
}

// Rows r0 .. r0 + R - 1 of a 16-row group (at i0): `count` groups of K from
// b0 (their int32 sums dots[g], [16][kPackNR] each) scaled into the f32 sums
// (acc, [16][kPackNR]) in order.
template <WeightFormat F, int R>
XRT_TARGET_AVX512 void AmxInt8Rows(const Int8Problem& p, const uint8_t* panel, int64_t b0,
                                   int count, int64_t i0, int r0, const int32_t* dots, float* acc) {
  __m512 sums[R][2];
  for (int i = 0; i < R; ++i)
    for (int h = 0; h < 2; ++h) sums[i][h] = _mm512_load_ps(acc + (r0 + i) * kPackNR + 16 * h);
  const QuantRows<R> rows = QuantRowsAt<R>(p, i0 + r0);
  for (int g = 0; g < count; ++g) {
    const int32_t* group_dots = dots + g * kAmxInt8Rows * kPackNR;
    __m512i dot[R][2];
    for (int i = 0; i < R; ++i)
      for (int h = 0; h < 2; ++h)
        dot[i][h] = _mm512_load_si512(group_dots + (r0 + i) * kPackNR + 16 * h);
    if constexpr (HasSignedWeights(F)) SubtractSignedWeightBias<R>(rows, b0 + g, dot);
    AddGroup<F, R>(panel + (b0 + g) * QuantGroupBytes(F), rows, b0 + g, dot, sums);
  }
  for (int i = 0; i < R; ++i)
    for (int h = 0; h < 2; ++h) _mm512_store_ps(acc + (r0 + i) * kPackNR + 16 * h, sums[i][h]);
}

// AmxInt8Rows over the group's `rows` rows, four at a time.
template <WeightFormat F>
XRT_TARGET_AVX512 void AmxInt8AllRows(const Int8Problem& p, const uint8_t* panel, int64_t b0,
                                      int count, int64_t i0, int rows, const int32_t* dots,
                                      float* acc) {
  for (int r = 0; r < rows; r += 4) {
    switch (std::min(4, rows - r)) {
      case 1:
        AmxInt8Rows<F, 1>(p, panel, b0, count, i0, r, dots, acc);
        break;
      case 2:
        AmxInt8Rows<F, 2>(p, panel, b0, count, i0, r, dots, acc);
        break;
      case 3:
        AmxInt8Rows<F, 3>(p, panel, b0, count, i0, r, dots, acc);
        break;
      default:
        AmxInt8Rows<F, 4>(p, panel, b0, count, i0, r, dots, acc);
    }
  }
}

// The int32 sums of a 16-row group's (at i0) quants at k-rows k0 .. k0 + 31
// with the thread's decoded panel's quads there (TDPBSUD, AmxInt8Config's
// tiles), stored to dots ([16][kPackNR]).
XRT_TARGET_AMX inline void AmxInt8Dots(const Int8Problem& p, int64_t i0, int64_t k0,
                                       int32_t* dots) {
  const int64_t k = p.args->k;
  const uint8_t* quads = p.decoded + k0 / 4 * kDecodedQuadBytes;
  constexpr long kRowBytes = kPackNR * 4;
  _tile_zero(0);
  _tile_zero(1);
  _tile_loadd(4, p.q + i0 * k + k0, k);
  _tile_loadd(6, quads, kDecodedQuadBytes);
  _tile_loadd(7, quads + 64, kDecodedQuadBytes);
  _tile_dpbsud(0, 4, 6);
  _tile_dpbsud(1, 4, 7);
  _tile_stored(0, dots, kRowBytes);
  _tile_stored(1, dots + 16, kRowBytes);
}

// Rows i0 .. min(m, i0 + 16) - 1 of one panel over the whole of K. p.q holds
// zero rows up to a multiple of 16 past m (the last group's tile loads them).
// In passes of kAmxInt8Pass groups: their sums first, then the scaling with
// each row's f32 sums in registers over the pass.
template <WeightFormat F>
XRT_TARGET_AMX void PanelRowsAmx(const Int8Problem& p, const uint8_t* panel, int64_t col0,
                                 int64_t i0) {
  const int64_t k = p.args->k, groups = k / kQuantGroup;
  const int rows = static_cast<int>(std::min<int64_t>(kAmxInt8Rows, p.args->m - i0));
  alignas(64) int32_t dots[kAmxInt8Pass * kAmxInt8Rows * kPackNR];
  alignas(64) float acc[kAmxInt8Rows * kPackNR] = {};
  for (int64_t b0 = 0; b0 < groups; b0 += kAmxInt8Pass) {
    const int count = static_cast<int>(std::min<int64_t>(kAmxInt8Pass, groups - b0));
    // The tile instructions are asm statements that do not name the memory
    // they touch: the quantized rows and the decoded panel must be in memory
    // before them, their sums after.
    __asm__ volatile("" ::: "memory");
    for (int g = 0; g < count; ++g) {
      AmxInt8Dots(p, i0, (b0 + g) * kQuantGroup, dots + g * kAmxInt8Rows * kPackNR);
    }
    __asm__ volatile("" ::: "memory");
    AmxInt8AllRows<F>(p, panel, b0, count, i0, rows, dots, acc);
  }
  StoreAmxGroup(p, acc, col0, i0, rows);
}

// K-quants: rows r0 .. r0 + R - 1 of a 16-row group (at i0) take
// super-block b's step sums (dots [KSteps][16][kPackNR]) into their f32 sums
// (acc [16][kPackNR]): AddKStepDots per step and AddSuperBlock, as the VNNI
// kernel does with its own dot products. q4_k / q5_k: the super-block's
// scales and mins in `kbytes` (UnpackKScaleMinAvx512, once for all the
// group's rows).
template <WeightFormat F, int R>
XRT_TARGET_AVX512_VNNI void AmxInt8KRows(const Int8Problem& p, const uint8_t* sb, int64_t b,
                                         int64_t i0, int r0, const int32_t* dots,
                                         const KScaleMinBytes& kbytes, float* acc) {
  const QuantRows<R> rows = QuantRowsAt<R>(p, i0 + r0);
  SuperBlockSums<R> sums;
  ZeroSums(sums);
  for (int s = 0; s < KSteps<F>(); ++s) {
    const int32_t* step_dots = dots + s * kAmxInt8Rows * kPackNR;
    __m512i dot[R][2];
    for (int i = 0; i < R; ++i)
      for (int h = 0; h < 2; ++h)
        dot[i][h] = _mm512_load_si512(step_dots + (r0 + i) * kPackNR + 16 * h);
    AddKStepDots<F, R>(sb, rows, b, s, dot, sums, &kbytes);
  }
  if constexpr (!HasKInt8Scales(F)) AddKMinPairs<R>(kbytes, rows, b, sums.imin);
  __m512 f32_sums[R][2];
  for (int i = 0; i < R; ++i)
    for (int h = 0; h < 2; ++h) f32_sums[i][h] = _mm512_load_ps(acc + (r0 + i) * kPackNR + 16 * h);
  AddSuperBlock<F, R>(sb, rows, b, sums.isum, sums.imin, f32_sums);
  for (int i = 0; i < R; ++i)
    for (int h = 0; h < 2; ++h) _mm512_store_ps(acc + (r0 + i) * kPackNR + 16 * h, f32_sums[i][h]);
}

// Rows i0 .. min(m, i0 + 16) - 1 of one K-quant panel over the whole of K,
// a super-block at a time: its steps' int32 sums on the tiles (TDPBSUD of
// the rows' quants with the decoded panel's quads: the K-quants' whole
// quants, iq4_xs's table values offset by 128), then the rows' arithmetic of
// each step on them, four rows at a time.
template <WeightFormat F>
XRT_TARGET_AMX void PanelRowsAmxK(const Int8Problem& p, const uint8_t* panel, int64_t col0,
                                  int64_t i0) {
  constexpr int kSteps = KSteps<F>(), kStepRows = KScaleRows(F);
  static_assert(kStepRows == kQuantGroup, "AmxInt8Config's tiles");
  const int64_t k = p.args->k;
  const int rows = static_cast<int>(std::min<int64_t>(kAmxInt8Rows, p.args->m - i0));
  alignas(64) int32_t dots[kSteps * kAmxInt8Rows * kPackNR];
  alignas(64) float acc[kAmxInt8Rows * kPackNR] = {};
  for (int64_t b = 0; b < k / kSuperBlock; ++b) {
    // As PanelRowsAmx: the tile asm statements name no memory.
    __asm__ volatile("" ::: "memory");
    for (int s = 0; s < kSteps; ++s) {
      AmxInt8Dots(p, i0, b * kSuperBlock + s * kStepRows, dots + s * kAmxInt8Rows * kPackNR);
    }
    __asm__ volatile("" ::: "memory");
    const uint8_t* sb = panel + b * SuperBlockBytes(F);
    KScaleMinBytes kbytes;
    if constexpr (!HasKInt8Scales(F)) UnpackKScaleMinAvx512(sb, &kbytes);
    for (int r = 0; r < rows; r += 4) {
      switch (std::min(4, rows - r)) {
        case 1:
          AmxInt8KRows<F, 1>(p, sb, b, i0, r, dots, kbytes, acc);
          break;
        case 2:
          AmxInt8KRows<F, 2>(p, sb, b, i0, r, dots, kbytes, acc);
          break;
        case 3:
          AmxInt8KRows<F, 3>(p, sb, b, i0, r, dots, kbytes, acc);
          break;
        default:
          AmxInt8KRows<F, 4>(p, sb, b, i0, r, dots, kbytes, acc);
      }
    }
  }
  StoreAmxGroup(p, acc, col0, i0, rows);
}

// The panel kernel of an AmxInt8Applies format.
PanelFn AmxInt8PanelFn(WeightFormat f) {
  assert(AmxInt8Applies(f));
  return WithInt8Format(f, [](auto format) -> PanelFn {
    if constexpr (IsQuantizedFormat(format())) {
      return &PanelRowsAmx<format()>;
    } else if constexpr (KScaleRows(format()) == kQuantGroup) {
      return &PanelRowsAmxK<format()>;
    } else {
      return nullptr;  // not AmxInt8Applies
    }
  });
}
#endif  // __x86_64__

// Rows per work unit of format `f` on `isa`: more rows share each decoded
// weight quad where the registers hold their sums (vpdpbusd needs no int16
// partial sums), which moves the kernel from issue-bound towards vpdpbusd's
// own throughput.
int64_t GroupRowsFor(CpuIsa isa, WeightFormat f) {
  return IsaAtLeast(isa, CpuIsa::kAvx512Vnni) && !IsKQuantFormat(f) ? kVnniGroupRows : kGroupRows;
}

// The caller's quantized rows of A, reused across calls.
struct QuantizedRows {
  std::vector<int8_t> q;
  std::vector<float> d;
  std::vector<int32_t> sum16;
  std::vector<int32_t> sub_sum_pairs;
  std::vector<float> ds;
};

void QuantizeRowWithIsa(const float* a, int64_t k, int block, int8_t* q, float* d, int32_t* sum16,
                        CpuIsa isa) {
  assert(k % block == 0 && block % kSumRows == 0);
#if defined(__x86_64__)
  if (isa == CpuIsa::kAvx2 && block % 32 == 0) {
    for (int64_t b = 0; b < k / block; ++b) {
      QuantizeBlockAvx2(a + b * block, block, q + b * block, d + b);
    }
    SumQuantsAvx2(q, k, sum16);
    return;
  }
#endif
  for (int64_t b = 0; b < k / block; ++b) {
#if defined(__x86_64__)
    if (IsaAtLeast(isa, CpuIsa::kAvx512)) {
      QuantizeBlockAvx512(a + b * block, block, q + b * block, d + b);
      continue;
    }
#endif
    QuantizeBlockPortable(a + b * block, block, q + b * block, d + b);
  }
  SumQuants(q, k, sum16);
}

}  // namespace

void QuantizeActivationRow(const float* a, int64_t k, int block, int8_t* q, float* d,
                           int32_t* sum16) {
  QuantizeRowWithIsa(a, k, block, q, d, sum16, BestCpuIsa());
}

bool Int8GfniApplies(WeightFormat f) { return HasSeparateHighBits(f); }

void MatmulInt8WithIsa(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa) {
  assert(Int8ComputeApplies(args.w_format));
  const int64_t m = args.m, k = args.k;
  if (m <= 0 || args.n <= 0) return;
  const int block = Int8ActivationBlock(args.w_format);
  // AMX-INT8 (PanelRowsAmx, PanelRowsAmxK) from AmxInt8MinRows rows.
  bool amx = false;
  // The avx2 tier on a CPU with AVX-VNNI: vpdpbusd on ymm.
  const bool avx_vnni_kernels = isa == CpuIsa::kAvx2 && Int8AvxVnniEnabled();
  // From the avx512_vnni tier on a CPU with GFNI: the kernels' GFNI copy.
  const bool gfni = IsaAtLeast(isa, CpuIsa::kAvx512Vnni) && Int8GfniEnabled();
#if defined(__x86_64__)
  amx = IsaAtLeast(isa, CpuIsa::kAmx) && m >= AmxInt8MinRows(args.w_format) &&
        AmxInt8Applies(args.w_format);
#endif
  thread_local QuantizedRows rows;
  // AMX: zero rows past m up to a whole 16-row tile.
  const int64_t padded_m = amx ? (m + kAmxInt8Rows - 1) / kAmxInt8Rows * kAmxInt8Rows : m;
  rows.q.resize(padded_m * k);
  std::fill(rows.q.begin() + m * k, rows.q.begin() + padded_m * k, int8_t{0});
  rows.d.resize(m * (k / block));
  rows.sum16.resize(m * (k / kSumRows));
  const bool has_mins = IsKQuantFormat(args.w_format) && !HasKInt8Scales(args.w_format);
  rows.sub_sum_pairs.resize(has_mins ? m * (k / kSubBlockPairRows) : 0);
  const bool has_ds = HasGroupMin(args.w_format);
  rows.ds.resize(has_ds ? m * (k / kQuantGroup) : 0);
  // The pool's threads quantize rows into this thread's buffers (a lambda
  // naming `rows` would see each worker's own thread_local).
  int8_t* q = rows.q.data();
  float* d = rows.d.data();
  int32_t* sum16 = rows.sum16.data();
  int32_t* pairs = rows.sub_sum_pairs.data();
  float* ds = rows.ds.data();
  ParallelForUnits(pool, m, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      QuantizeRowWithIsa(args.a + i * args.lda, k, block, q + i * k, d + i * (k / block),
                         sum16 + i * (k / kSumRows), isa);
      if (has_mins)
        SubBlockSumPairs(sum16 + i * (k / kSumRows), k, pairs + i * (k / kSubBlockPairRows));
      if (has_ds) {
        ScaledBlockSums(d + i * (k / block), sum16 + i * (k / kSumRows), k,
                        ds + i * (k / kQuantGroup));
      }
    }
  });
  Int8Problem p{&args,     q,
                d,         sum16,
                pairs,     has_ds ? ds : nullptr,
                k / block, PackedPanelBytes(args.w_format, k)};

  // Units: (panel, group of up to group_rows rows), row groups fastest, so a
  // panel stays in cache while every row group reads it.
  const int64_t panels = (args.n + kPackNR - 1) / kPackNR;
  const int64_t group_rows = amx ? kAmxInt8Rows : GroupRowsFor(isa, args.w_format);
  const int64_t groups = (m + group_rows - 1) / group_rows;
#if defined(__x86_64__)
  // AMX, or enough row blocks (DecodedPanelMinRowBlocks): each thread decodes
  // a panel once before running its row blocks on it.
  const DecodeFn decode = amx ? QuadPanelDecoderAvx512(args.w_format, gfni)
                          : groups >= DecodedPanelMinRowBlocks(isa, args.w_format)
                              ? DecodeFnFor(isa, args.w_format, gfni)
                              : nullptr;
  // One row on AVX512_VNNI (the amx tier's too): kDecodeStreams panels at a
  // time while a thread has that many left.
  const PanelsFn streams_fn = m == 1 && !amx && !decode && IsaAtLeast(isa, CpuIsa::kAvx512Vnni)
                                  ? DecodeStreamsFn(args.w_format, gfni, Int8DecodePrefetchesToL2())
                                  : nullptr;
#endif
  auto run_units = [&](int64_t u0, int64_t u1) {
#if defined(__x86_64__)
    Int8Problem pt = p;
    int64_t decoded_panel = -1;
    const AmxTileScope tiles(amx ? &AmxInt8Config() : nullptr);
    if (streams_fn) {
      for (; u0 + kDecodeStreams <= u1; u0 += kDecodeStreams) {
        streams_fn(p, static_cast<const uint8_t*>(args.packed_w) + u0 * p.panel_bytes,
                   u0 * kPackNR);
      }
    }
#endif
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t panel = u / groups, r0 = u % groups * group_rows;
      const int64_t r1 = std::min(m, r0 + group_rows);
#if defined(__x86_64__)
      if (IsaAtLeast(isa, CpuIsa::kAvx2)) {
        const uint8_t* w = static_cast<const uint8_t*>(args.packed_w) + panel * p.panel_bytes;
        if (decode && panel != decoded_panel) {
          thread_local std::vector<uint8_t> buffer;
          buffer.resize(DecodedPanelBytes(k) + 63);
          uint8_t* decoded = buffer.data() + (-reinterpret_cast<uintptr_t>(buffer.data()) & 63);
          decode(w, k, decoded);
          pt.decoded = decoded;
          decoded_panel = panel;
        }
        const int rows = static_cast<int>(r1 - r0);
        const PanelFn fn = amx    ? AmxInt8PanelFn(args.w_format)
                           : gfni ? PanelFnFor<Avx512VnniGfniPanels>(args.w_format, rows)
                           : IsaAtLeast(isa, CpuIsa::kAvx512Vnni)
                               ? PanelFnFor<Avx512VnniPanels>(args.w_format, rows)
                           : isa == CpuIsa::kAvx512 ? PanelFnFor<Avx512Panels>(args.w_format, rows)
                           : avx_vnni_kernels
                               ? PanelFnFor<avx_vnni::Avx2Panels>(args.w_format, rows)
                               : PanelFnFor<maddubs::Avx2Panels>(args.w_format, rows);
        fn(pt, w, panel * kPackNR, r0);
        continue;
      }
#endif
      PanelRowsPortable(p, panel, r0, r1);
    }
  };
  int64_t chunk_multiple = 1;  // whole sets of streams_fn's panels
#if defined(__x86_64__)
  if (streams_fn) chunk_multiple = kDecodeStreams;
#endif
  ParallelForUnits(pool, panels * groups, run_units, chunk_multiple);
}

}  // namespace xrt
