#include "runtime/kernels/weight_format.h"

#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "runtime/kernels/matmul.h"

// The quantizers below must round exactly like ggml's reference C code (and
// gguf-py's numpy port): every product and sum is its own f32 operation. This
// file is built for baseline x86-64 (no FMA), so the compiler cannot contract
// them into fused multiply-adds (and each is a separate statement, which is
// as far as clang's default -ffp-contract=on looks).

namespace xrt {

float HalfToFloat(uint16_t h) {
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in f32
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return (h & 0x8000u) ? -magnitude : magnitude;
  }
  uint32_t bits = static_cast<uint32_t>(h & 0x8000u) << 16;
  if (exponent == 0x1f) {
    bits |= 0x7f800000u | (mantissa << 13);  // inf / nan (payload kept)
  } else {
    bits |= ((exponent + 112u) << 23) | (mantissa << 13);  // rebias 15 -> 127
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // nan: quiet, top payload bits kept
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  }
  // 65520 (half way between 65504, the largest half, and 2^16) and above
  // round to infinity (ties to even: 65504's mantissa is odd).
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // normal half (>= 2^-14)
    uint32_t v = magnitude - (112u << 23);
    v += 0xfffu + ((v >> 13) & 1u);  // round to nearest even at bit 13
    return static_cast<uint16_t>(sign | (v >> 13));
  }
  // Subnormal half: the value in units of 2^-24 (an exact scaling), rounded
  // to the nearest even integer; 1024 becomes the smallest normal.
  const float units = std::fabs(f) * 16777216.0f;
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(units)));
}

// An e4m3 code's bits moved into a half's (sign to bit 15, exponent and
// mantissa to bits 13..7) make a half worth the e4m3 value times 2^-8, for
// normals and subnormals alike (the exponent's bias goes from 7 to 15).
float Fp8E4M3ToFloat(uint8_t x) {
  if ((x & 0x7fu) == 0x7fu) return (x & 0x80u) ? -NAN : NAN;
  const uint16_t h = static_cast<uint16_t>(((x & 0x80u) << 8) | ((x & 0x7fu) << 7));
  return HalfToFloat(h) * 256.0f;
}

uint8_t FloatToFp8E4M3(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7fu;   // nan
  if (magnitude >= 0x43e00000u) return sign | 0x7eu;  // 448 and above: 448
  if (magnitude >= 0x3c800000u) {                     // normal (>= 2^-6)
    uint32_t v = magnitude - (120u << 23);            // rebias 127 -> 7
    v += 0x7ffffu + ((v >> 20) & 1u);                 // round to nearest even at bit 20
    return static_cast<uint8_t>(sign | (v >> 20));
  }
  // Subnormal: the value in units of 2^-9 (an exact scaling), rounded to the
  // nearest even integer; 8 becomes the smallest normal.
  const float units = std::fabs(f) * 512.0f;
  return static_cast<uint8_t>(sign | static_cast<uint8_t>(std::nearbyint(units)));
}

float BFloat16ToFloat(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBFloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

const char* WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32:
      return "f32";
    case WeightFormat::kF16:
      return "f16";
    case WeightFormat::kBF16:
      return "bf16";
    case WeightFormat::kQ8_0:
      return "q8_0";
    case WeightFormat::kQ4_0:
      return "q4_0";
    case WeightFormat::kQ4_1:
      return "q4_1";
    case WeightFormat::kQ5_0:
      return "q5_0";
    case WeightFormat::kQ5_1:
      return "q5_1";
    case WeightFormat::kQ3_K:
      return "q3_k";
    case WeightFormat::kQ4_K:
      return "q4_k";
    case WeightFormat::kQ5_K:
      return "q5_k";
    case WeightFormat::kQ6_K:
      return "q6_k";
    case WeightFormat::kBF16Pairs:
      return "bf16_pairs";
    case WeightFormat::kBF16PairsAmx:
      return "bf16_pairs_amx";
    case WeightFormat::kIQ4_NL:
      return "iq4_nl";
    case WeightFormat::kIQ4_XS:
      return "iq4_xs";
  }
  return "?";
}

bool WeightFormatFromName(std::string_view name, WeightFormat* out) {
  for (WeightFormat f :
       {WeightFormat::kF32, WeightFormat::kF16, WeightFormat::kBF16, WeightFormat::kQ8_0,
        WeightFormat::kQ4_0, WeightFormat::kQ4_1, WeightFormat::kQ5_0, WeightFormat::kQ5_1,
        WeightFormat::kQ3_K, WeightFormat::kQ4_K, WeightFormat::kQ5_K, WeightFormat::kQ6_K,
        WeightFormat::kBF16Pairs, WeightFormat::kBF16PairsAmx, WeightFormat::kIQ4_NL,
        WeightFormat::kIQ4_XS}) {
    if (name == WeightFormatName(f)) {
      *out = f;
      return true;
    }
  }
  return false;
}

namespace {

// True for the K-quants with high bits stored apart from the low ones (q3_k,
// q5_k, q6_k).
constexpr bool HasKHighBits(WeightFormat f) { return HasK5HighBits(f) || f == WeightFormat::kQ6_K; }

// Where the high bits (bit 2 of q3_k, bit 4 of q5_k, bits 4-5 of q6_k) of
// column j's quant at k-row kk sit in a super-block: the byte's offset and
// the shift of the lowest bit (the layout in weight_format.h).
void KHighBitsAt(WeightFormat f, int kk, int j, int64_t* offset, int* shift) {
  if (HasK5HighBits(f)) {
    *offset = K5HighBitsOffset(f) + K5HighByte(kk, j);
    *shift = K5HighBit(j);
  } else {
    *offset = kK6HighOffset + K6HighByte(kk, j);
    *shift = K6HighShift(j);
  }
}

}  // namespace

int KQuantAt(WeightFormat f, const uint8_t* sb, int kk, int j) {
  const bool q3 = f == WeightFormat::kQ3_K;
  int q = q3 ? (sb[KLowQuantsOffset(f) + CrumbByte(kk, j)] >> CrumbShift(kk, j)) & 3
             : QuadNibbleAt(sb + KLowQuantsOffset(f), kk, j);
  if (HasKHighBits(f)) {
    int64_t at;
    int shift;
    KHighBitsAt(f, kk, j, &at, &shift);
    q |= ((sb[at] >> shift) & (f == WeightFormat::kQ6_K ? 3 : 1)) << (q3 ? 2 : 4);
  }
  return q;
}

void KScaleMin(const uint8_t* sb, int s, int j, int* sc, int* m) {
  const int lo = sb[kKScaleLoOffset + s * kPackNR + j];
  const int hi = sb[kKScaleHiOffset + s / 2 * kPackNR + j] >> (4 * (s % 2));
  *sc = (lo & 15) | (hi & 3) << 4;
  *m = (lo >> 4) | ((hi >> 2) & 3) << 4;
}

int WeightFormatBlockSize(WeightFormat f) {
  return IsQuantizedFormat(f) ? kQuantGroup : IsKQuantFormat(f) ? kSuperBlock : 1;
}

// A group: f16 scales (and q4_1's f16 mins) for the kPackNR columns, then
// kQuantGroup k-rows of quants (a byte or a nibble per column).
static_assert(QuantGroupBytes(WeightFormat::kQ8_0) == 64 + kQuantGroup * kPackNR);
static_assert(QuantGroupBytes(WeightFormat::kQ4_0) == 64 + kQuantGroup * kPackNR / 2);
static_assert(QuantGroupBytes(WeightFormat::kQ4_1) == 128 + kQuantGroup * kPackNR / 2);
static_assert(QuantGroupBytes(WeightFormat::kQ5_0) == FifthBitsOffset(WeightFormat::kQ5_0) +
                                                          kQuantGroup / 4 * 16 +
                                                          kQuantGroup * kPackNR / 2);
static_assert(QuantGroupBytes(WeightFormat::kQ5_1) == FifthBitsOffset(WeightFormat::kQ5_1) +
                                                          kQuantGroup / 4 * 16 +
                                                          kQuantGroup * kPackNR / 2);
static_assert(QuantGroupQuantsOffset(WeightFormat::kQ5_0) ==
              FifthBitsOffset(WeightFormat::kQ5_0) + kQuantGroup / 4 * 16);
static_assert(QuantGroupQuantsOffset(WeightFormat::kQ5_1) ==
              FifthBitsOffset(WeightFormat::kQ5_1) + kQuantGroup / 4 * 16);

int64_t PackedPanelBytes(WeightFormat f, int64_t K) {
  assert(K % WeightFormatBlockSize(f) == 0);
  switch (f) {
    case WeightFormat::kF32:
      return K * kPackNR * 4;
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
      return K * kPackNR * 2;
    case WeightFormat::kBF16Pairs:
    case WeightFormat::kBF16PairsAmx:
      return (K + 1) / 2 * kPackNR * 4;
    case WeightFormat::kQ3_K:
    case WeightFormat::kQ4_K:
    case WeightFormat::kQ5_K:
    case WeightFormat::kQ6_K:
    case WeightFormat::kIQ4_XS:
      return K / kSuperBlock * SuperBlockBytes(f);
    default:
      return K / kQuantGroup * QuantGroupBytes(f);
  }
}

int64_t PackedWeightBytes(WeightFormat f, int64_t N, int64_t K) {
  return (N + kPackNR - 1) / kPackNR * PackedPanelBytes(f, K);
}

int64_t GgmlRowBytes(WeightFormat f, int64_t K) {
  switch (f) {
    case WeightFormat::kF32:
      return K * 4;
    case WeightFormat::kF16:
    case WeightFormat::kBF16:
    case WeightFormat::kBF16Pairs:
    case WeightFormat::kBF16PairsAmx:
      return K * 2;
    case WeightFormat::kQ8_0:
      return K / kQuantGroup * (2 + 32);
    case WeightFormat::kQ4_0:
    case WeightFormat::kIQ4_NL:
      return K / kQuantGroup * (2 + 16);
    case WeightFormat::kQ4_1:
      return K / kQuantGroup * (4 + 16);
    case WeightFormat::kQ5_0:
      return K / kQuantGroup * (2 + 4 + 16);
    case WeightFormat::kQ5_1:
      return K / kQuantGroup * (4 + 4 + 16);
    case WeightFormat::kQ3_K:
      return K / kSuperBlock * kGgmlQ3KBlockBytes;
    case WeightFormat::kQ4_K:
    case WeightFormat::kQ5_K:
    case WeightFormat::kQ6_K:
      return K / kSuperBlock * (SuperBlockBytes(f) / kPackNR);
    case WeightFormat::kIQ4_XS:
      return K / kSuperBlock * kGgmlIQ4XSBlockBytes;
  }
  return 0;
}

namespace {

void StoreU16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
uint16_t LoadU16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// ggml's reference quantizers of one block of 32 values into its block
// encoding (quantize_row_{q8_0,q4_0,q4_1,q5_0,q5_1}_ref), written from their
// definition: the scale is computed in f32 and its reciprocal multiplies the
// values; only the stored scale (and min) are rounded to f16.
void QuantizeBlockQ8_0(const float* x, uint8_t* block) {
  float amax = 0.0f;
  for (int j = 0; j < kQuantGroup; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(block, FloatToHalf(d));
  for (int j = 0; j < kQuantGroup; ++j) {
    const float scaled = x[j] * id;
    block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(scaled)));
  }
}

// q4_0 / q5_0 (quantize_row_q{4,5}_0_ref): d = max / -offset where max is
// the first value of the largest magnitude, q = min(2 offset - 1, trunc(x *
// id + offset + 0.5)); stores d (f16 bits at `block`) and the 32 quants.
void QuantizeOffsetGroup(const float* x, int offset, uint8_t* block, int* q) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQuantGroup; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / static_cast<float>(-offset);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(block, FloatToHalf(d));
  const float bias = static_cast<float>(offset) + 0.5f;  // 8.5, 16.5: exact
  for (int j = 0; j < kQuantGroup; ++j) {
    const float scaled = x[j] * id;
    const float shifted = scaled + bias;
    q[j] = std::min(2 * offset - 1, static_cast<int>(std::trunc(shifted)));
  }
}

// q4_1 / q5_1 (quantize_row_q{4,5}_1_ref): d = (max - min) / levels, m =
// min, q = min(levels, trunc((x - min) * id + 0.5)); stores d and m (f16
// bits at `block`) and the 32 quants.
void QuantizeMinGroup(const float* x, int levels, uint8_t* block, int* q) {
  float min = FLT_MAX, max = -FLT_MAX;
  for (int j = 0; j < kQuantGroup; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
  const float d = (max - min) / static_cast<float>(levels);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  StoreU16(block, FloatToHalf(d));
  StoreU16(block + 2, FloatToHalf(min));
  for (int j = 0; j < kQuantGroup; ++j) {
    const float offset = x[j] - min;
    const float scaled = offset * id;
    const float shifted = scaled + 0.5f;
    q[j] = std::min(levels, static_cast<int>(std::trunc(shifted)));
  }
}

// ggml's qs: byte i holds value i (low nibble) and value i + 16 (high); with
// `fifth` (q5) a little-endian uint32 qh first, bit i = value i's bit 4.
void StoreGroupQuants(const int* q, bool fifth, uint8_t* out) {
  if (fifth) {
    uint32_t qh = 0;
    for (int j = 0; j < kQuantGroup; ++j) qh |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
    std::memcpy(out, &qh, 4);
    out += 4;
  }
  for (int j = 0; j < kQuantGroup / 2; ++j)
    out[j] = static_cast<uint8_t>((q[j] & 15) | (q[j + 16] & 15) << 4);
}

// One block of q4_0 / q4_1 / q5_0 / q5_1 in ggml's encoding.
void QuantizeBlockNibbles(WeightFormat f, const float* x, uint8_t* block) {
  int q[kQuantGroup];
  if (HasGroupMin(f)) {
    QuantizeMinGroup(x, MaxQuant(f), block, q);
  } else {
    QuantizeOffsetGroup(x, QuantGroupQuantOffset(f), block, q);
  }
  StoreGroupQuants(q, HasFifthBits(f), block + (HasGroupMin(f) ? 4 : 2));
}

// The SIMD paths' quad reads (LowQuadOffset / LowQuadShift) are q3_k's
// layout (CrumbByte / CrumbShift).
constexpr bool CrumbQuadsMatchTheLayout() {
  for (int kk = 0; kk < kSuperBlock; ++kk) {
    for (int j = 0; j < kPackNR; ++j) {
      const int kq = kk / 4;
      if (CrumbByte(kk, j) != LowQuadOffset(WeightFormat::kQ3_K, kq) + QuadNibbleByte(kk % 4, j) ||
          CrumbShift(kk, j) != LowQuadShift(WeightFormat::kQ3_K, kq) + 4 * (j / 16))
        return false;
    }
  }
  return true;
}
static_assert(CrumbQuadsMatchTheLayout());
static_assert(MaxQuant(WeightFormat::kQ3_K) == (1 << (LowQuantBits(WeightFormat::kQ3_K) + 1)) - 1);

// q3_k: d and scales as q6_k's, then 16 bytes of high bits per quad and 64
// bytes of crumbs per quad pair.
static_assert(kK3HighOffset == kK6ScalesOffset + 16 * kPackNR);
static_assert(KLowQuantsOffset(WeightFormat::kQ3_K) == kK3HighOffset + kSuperBlock / 4 * 16);
static_assert(SuperBlockBytes(WeightFormat::kQ3_K) ==
              KLowQuantsOffset(WeightFormat::kQ3_K) + kSuperBlock / 8 * 64);

// iq4_xs: d and scales as q6_k's, then q4_k's nibble quads; iq4_nl is q4_0's
// group.
static_assert(KLowQuantsOffset(WeightFormat::kIQ4_XS) == kK6ScalesOffset + 16 * kPackNR);
static_assert(SuperBlockBytes(WeightFormat::kIQ4_XS) ==
              KLowQuantsOffset(WeightFormat::kIQ4_XS) + kSuperBlock / 4 * 64);
static_assert(QuantGroupBytes(WeightFormat::kIQ4_NL) == QuantGroupBytes(WeightFormat::kQ4_0));
static_assert(SignedQuant(WeightFormat::kIQ4_NL, 0) == -127 &&
              SignedQuant(WeightFormat::kIQ4_XS, 15) == 113);

static_assert(Bf16PairsByte(WeightFormat::kBF16Pairs, 3, 1) == (kPackNR + 1) * 4 + 2,
              "a pair-row is kPackNR dwords");

// Bytes per value of the 16/32-bit formats.
int64_t ElementBytes(WeightFormat f) { return f == WeightFormat::kF32 ? 4 : 2; }

// ---- K-quants: one column's super-block, unpacked. ----
struct KQuantColumn {
  uint16_t d = 0, dmin = 0;  // f16 bits (dmin: q4_k / q5_k only)
  int scale[16] = {};        // 6-bit scales (8 sub-blocks) or int8 scales (q3_k, q6_k, iq4_xs: 16)
  int min[8] = {};           // 6-bit mins (q4_k / q5_k)
  uint8_t q[kSuperBlock] = {};  // quants: 0..7, 0..15, 0..31, 0..63 (iq4_xs: 0..15)
};

// The 16 6-bit scales of a Q3_K block (its 12 bytes at `s`): scale i's low 4
// bits are nibble i / 8 of byte i % 8, its high 2 bits bits 2 (i / 4) .. of
// byte 8 + i % 4 (ggml's kmask unpacking, written per scale).
int Q3KScale(const uint8_t* s, int i) {
  const int low = (s[i % 8] >> (4 * (i / 8))) & 15;
  const int high = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return low | high << 4;
}

// Decodes one ggml block (block_q3_K / block_q4_K / block_q5_K / block_q6_K /
// block_iq4_xs) of one row.
void ParseGgmlKBlock(WeightFormat f, const uint8_t* b, KQuantColumn* c) {
  if (f == WeightFormat::kIQ4_XS) {
    c->d = LoadU16(b);
    const int high = LoadU16(b + 2);
    const uint8_t* qs = b + 8;
    // Sub-block i (values 32i..32i+31): its 6-bit ls for both 16-row halves;
    // value 32i + l is the low nibble of qs[16i + l] (l < 16), else the high
    // nibble of qs[16i + l - 16].
    for (int i = 0; i < kSuperBlock / 32; ++i) {
      const int ls = ((b[4 + i / 2] >> (4 * (i % 2))) & 15) | ((high >> (2 * i)) & 3) << 4;
      c->scale[2 * i] = c->scale[2 * i + 1] = ls - 32;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = qs[16 * i + l % 16];
        c->q[32 * i + l] = static_cast<uint8_t>(l < 16 ? byte & 15 : byte >> 4);
      }
    }
    return;
  }
  if (f == WeightFormat::kQ3_K) {
    const uint8_t* hmask = b;
    const uint8_t* qs = b + 32;
    for (int s = 0; s < 16; ++s) c->scale[s] = Q3KScale(b + 96, s) - 32;
    c->d = LoadU16(b + 108);
    // Value i: half n = i / 128, shift t = (i % 128) / 32, l = i % 32: low
    // bits (qs[32 n + l] >> 2 t) & 3, bit 2 is bit 4 n + t of hmask[l].
    for (int i = 0; i < kSuperBlock; ++i) {
      const int n = i / 128, t = (i % 128) / 32, l = i % 32;
      const int low = (qs[32 * n + l] >> (2 * t)) & 3;
      const int high = (hmask[l] >> (4 * n + t)) & 1;
      c->q[i] = static_cast<uint8_t>(low | high << 2);
    }
    return;
  }
  if (f == WeightFormat::kQ6_K) {
    const uint8_t* ql = b;
    const uint8_t* qh = b + 128;
    for (int s = 0; s < 16; ++s) c->scale[s] = static_cast<int8_t>(b[192 + s]);
    c->d = LoadU16(b + 208);
    // Value i: half h = i / 128, quarter t = (i % 128) / 32, l = i % 32: low
    // bits in ql[64h + l + 32 (t & 1)] (high nibble for t >= 2), high bits
    // in qh[32h + l] at bit 2t.
    for (int i = 0; i < kSuperBlock; ++i) {
      const int h = i / 128, t = (i % 128) / 32, l = i % 32;
      const uint8_t lo_byte = ql[64 * h + l + 32 * (t & 1)];
      const int lo = t >= 2 ? lo_byte >> 4 : lo_byte & 15;
      const int hi = (qh[32 * h + l] >> (2 * t)) & 3;
      c->q[i] = static_cast<uint8_t>(lo | hi << 4);
    }
    return;
  }
  c->d = LoadU16(b);
  c->dmin = LoadU16(b + 2);
  const uint8_t* sc = b + 4;  // 12 bytes: 6-bit scales and mins of 8 sub-blocks
  for (int s = 0; s < 8; ++s) {
    if (s < 4) {
      c->scale[s] = sc[s] & 63;
      c->min[s] = sc[s + 4] & 63;
    } else {
      c->scale[s] = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
      c->min[s] = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
    }
  }
  // Value i: sub-block s = i / 32, l = i % 32: nibble s % 2 of qs[32 (s / 2)
  // + l]; q5_k adds bit s of qh[l] as bit 4.
  const bool five = f == WeightFormat::kQ5_K;
  const uint8_t* qh = b + 16;
  const uint8_t* qs = b + (five ? 48 : 16);
  for (int i = 0; i < kSuperBlock; ++i) {
    const int s = i / 32, l = i % 32;
    const uint8_t byte = qs[32 * (s / 2) + l];
    int q = s % 2 ? byte >> 4 : byte & 15;
    if (five) q |= ((qh[l] >> s) & 1) << 4;
    c->q[i] = static_cast<uint8_t>(q);
  }
}

// Writes column j of a panel's super-block `sb` (zeroed beforehand).
void StoreKColumn(WeightFormat f, const KQuantColumn& c, int j, uint8_t* sb) {
  StoreU16(sb + 2 * j, c.d);
  const int shift = j < 16 ? 0 : 4;
  if (HasKInt8Scales(f)) {
    for (int s = 0; s < 16; ++s)
      sb[kK6ScalesOffset + s * kPackNR + j] = static_cast<uint8_t>(c.scale[s]);
  } else {
    StoreU16(sb + kKDminOffset + 2 * j, c.dmin);
    for (int s = 0; s < 8; ++s) {
      sb[kKScaleLoOffset + s * kPackNR + j] =
          static_cast<uint8_t>((c.scale[s] & 15) | (c.min[s] & 15) << 4);
      const int hi = (c.scale[s] >> 4) | (c.min[s] >> 4) << 2;
      sb[kKScaleHiOffset + s / 2 * kPackNR + j] |= static_cast<uint8_t>(hi << (4 * (s % 2)));
    }
  }
  const int64_t quants = KLowQuantsOffset(f);
  const bool q3 = f == WeightFormat::kQ3_K;
  const int low_bits = q3 ? 2 : 4;
  for (int kk = 0; kk < kSuperBlock; ++kk) {
    const int low = c.q[kk] & ((1 << low_bits) - 1);
    if (q3) {
      sb[quants + CrumbByte(kk, j)] |= static_cast<uint8_t>(low << CrumbShift(kk, j));
    } else {
      sb[quants + QuadNibbleByte(kk, j)] |= static_cast<uint8_t>(low << shift);
    }
    if (HasKHighBits(f)) {
      int64_t at;
      int high_shift;
      KHighBitsAt(f, kk, j, &at, &high_shift);
      sb[at] |= static_cast<uint8_t>((c.q[kk] >> low_bits) << high_shift);
    }
  }
}

// Per-column f32 factors of sub-block `s` of a panel's super-block: w =
// mul[j] * q - sub[j] (q4_k / q5_k, sub = dmin * m) or mul[j] * (q -
// KQuantOffset) (q3_k / q6_k, sub unused), mul[j] * kIQ4Values[q] (iq4_xs).
void KSubBlockFactors(WeightFormat f, const uint8_t* sb, int s, float* mul, float* sub) {
  for (int j = 0; j < kPackNR; ++j) {
    const float d = HalfToFloat(LoadU16(sb + 2 * j));
    if (HasKInt8Scales(f)) {
      mul[j] = d * static_cast<float>(static_cast<int8_t>(sb[kK6ScalesOffset + s * kPackNR + j]));
      continue;
    }
    int sc, m;
    KScaleMin(sb, s, j, &sc, &m);
    mul[j] = d * static_cast<float>(sc);
    sub[j] = HalfToFloat(LoadU16(sb + kKDminOffset + 2 * j)) * static_cast<float>(m);
  }
}

// DequantizePanelRows for the K-quants (any k0).
void DequantizeKQuantRows(WeightFormat f, const uint8_t* panel, int64_t k0, int64_t rows,
                          float* out) {
  const int sub_rows = KSubBlockRows(f);
  const int64_t sb_bytes = SuperBlockBytes(f);
  float mul[kPackNR], sub[kPackNR];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t k = k0 + r;
    const uint8_t* sb = panel + k / kSuperBlock * sb_bytes;
    const int kk = static_cast<int>(k % kSuperBlock);
    if (r == 0 || kk % sub_rows == 0) KSubBlockFactors(f, sb, kk / sub_rows, mul, sub);
    float* dst = out + r * kPackNR;
    for (int j = 0; j < kPackNR; ++j) {
      const int q = KQuantAt(f, sb, kk, j);
      if (HasKInt8Scales(f)) {
        dst[j] = mul[j] * static_cast<float>(SignedQuant(f, q));
      } else {
        const float product = mul[j] * static_cast<float>(q);  // exact
        dst[j] = product - sub[j];
      }
    }
  }
}

}  // namespace

void QuantizeRowGgml(WeightFormat f, const float* x, int64_t K, uint8_t* out) {
  switch (f) {
    case WeightFormat::kF32:
      std::memcpy(out, x, K * 4);
      return;
    case WeightFormat::kF16:
      for (int64_t k = 0; k < K; ++k) StoreU16(out + 2 * k, FloatToHalf(x[k]));
      return;
    case WeightFormat::kBF16:
      for (int64_t k = 0; k < K; ++k) StoreU16(out + 2 * k, FloatToBFloat16(x[k]));
      return;
    case WeightFormat::kBF16Pairs:
    case WeightFormat::kBF16PairsAmx:
      for (int64_t k = 0; k < K; ++k)
        StoreU16(out + 2 * k, FloatToBFloat16(RoundToBf16Operand(x[k])));
      return;
    case WeightFormat::kQ8_0:
      for (int64_t g = 0; g < K / kQuantGroup; ++g) QuantizeBlockQ8_0(x + g * 32, out + g * 34);
      return;
    case WeightFormat::kQ4_0:
    case WeightFormat::kQ4_1:
    case WeightFormat::kQ5_0:
    case WeightFormat::kQ5_1: {
      const int64_t block = GgmlRowBytes(f, kQuantGroup);
      for (int64_t g = 0; g < K / kQuantGroup; ++g)
        QuantizeBlockNibbles(f, x + g * kQuantGroup, out + g * block);
      return;
    }
    case WeightFormat::kQ3_K:
    case WeightFormat::kQ4_K:
    case WeightFormat::kQ5_K:
    case WeightFormat::kQ6_K:
    case WeightFormat::kIQ4_NL:
    case WeightFormat::kIQ4_XS:
      assert(false && "K-quant and iq4 quantizers are not implemented");
      return;
  }
}

void PackWeightsFrom(WeightFormat f, const float* w, int64_t N, int64_t K, void* out) {
  assert(!IsKQuantFormat(f) && f != WeightFormat::kIQ4_NL);
  if (f == WeightFormat::kF32) {
    PackWeights(w, N, K, static_cast<float*>(out));
    return;
  }
  // Quantize one row at a time into ggml's encoding, then repack: the same
  // bytes as packing a ggml tensor quantized from `w`.
  const int64_t row_bytes = GgmlRowBytes(f, K);
  std::vector<uint8_t> rows(static_cast<size_t>(std::max<int64_t>(N * row_bytes, 1)));
  for (int64_t n = 0; n < N; ++n) QuantizeRowGgml(f, w + n * K, K, rows.data() + n * row_bytes);
  PackWeightsFromBlocks(f, rows.data(), N, K, static_cast<size_t>(row_bytes), out);
}

void PackWeightsFromBlocks(WeightFormat f, const uint8_t* blocks, int64_t N, int64_t K,
                           size_t row_bytes, void* out) {
  assert(K % WeightFormatBlockSize(f) == 0);
  uint8_t* dst = static_cast<uint8_t*>(out);
  std::memset(dst, 0, static_cast<size_t>(PackedWeightBytes(f, N, K)));
  const int64_t panel_bytes = PackedPanelBytes(f, K);
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* src = blocks + static_cast<size_t>(n) * row_bytes;
    uint8_t* panel = dst + n / kPackNR * panel_bytes;
    const int j = static_cast<int>(n % kPackNR);
    if (IsKQuantFormat(f)) {
      const int64_t sb_bytes = SuperBlockBytes(f), block_bytes = GgmlRowBytes(f, kSuperBlock);
      KQuantColumn column;
      for (int64_t b = 0; b < K / kSuperBlock; ++b) {
        ParseGgmlKBlock(f, src + b * block_bytes, &column);
        StoreKColumn(f, column, j, panel + b * sb_bytes);
      }
      continue;
    }
    if (IsBf16PairsFormat(f)) {
      for (int64_t k = 0; k < K; ++k) {
        std::memcpy(panel + Bf16PairsByte(f, k, j), src + 2 * k, 2);
      }
      continue;
    }
    if (!IsQuantizedFormat(f)) {
      const int64_t e = ElementBytes(f);
      for (int64_t k = 0; k < K; ++k) {
        std::memcpy(panel + (k * kPackNR + j) * e, src + k * e, static_cast<size_t>(e));
      }
      continue;
    }
    const int64_t group_bytes = QuantGroupBytes(f);
    const int64_t header = QuantGroupQuantsOffset(f);
    for (int64_t g = 0; g < K / kQuantGroup; ++g) {
      uint8_t* group = panel + g * group_bytes;
      uint8_t* quants = group + header;
      if (f == WeightFormat::kQ8_0) {
        const uint8_t* b = src + g * 34;
        std::memcpy(group + 2 * j, b, 2);
        for (int kk = 0; kk < kQuantGroup; ++kk) quants[kk * kPackNR + j] = b[2 + kk];
        continue;
      }
      // q4 / q5 / iq4_nl: ggml's byte i of qs holds value i (low nibble) and
      // value i + 16 (high); q5's qh (before qs) bit i value i's bit 4.
      const int scalars = HasGroupMin(f) ? 4 : 2;
      const bool five = HasFifthBits(f);
      const uint8_t* b = src + g * (scalars + (five ? 4 : 0) + 16);
      std::memcpy(group + 2 * j, b, 2);
      if (HasGroupMin(f)) std::memcpy(group + 64 + 2 * j, b + 2, 2);
      uint32_t qh = 0;
      if (five) std::memcpy(&qh, b + scalars, 4);
      const uint8_t* qs = b + scalars + (five ? 4 : 0);
      const int shift = j < 16 ? 0 : 4;
      for (int kk = 0; kk < kQuantGroup; ++kk) {
        const uint8_t q = (kk < 16 ? qs[kk] : qs[kk - 16] >> 4) & 0x0f;
        quants[QuadNibbleByte(kk, j)] |= static_cast<uint8_t>(q << shift);
        if (five && (qh >> kk & 1))
          group[FifthBitsOffset(f) + K5HighByte(kk, j)] |= static_cast<uint8_t>(1 << K5HighBit(j));
      }
    }
  }
}

void DequantizePanelRows(WeightFormat f, const void* panel_bytes, int64_t k0, int64_t rows,
                         float* out) {
  const uint8_t* panel = static_cast<const uint8_t*>(panel_bytes);
  if (IsKQuantFormat(f)) {
    DequantizeKQuantRows(f, panel, k0, rows, out);
    return;
  }
  if (IsBf16PairsFormat(f)) {
    for (int64_t r = 0; r < rows; ++r)
      for (int j = 0; j < kPackNR; ++j)
        out[r * kPackNR + j] = BFloat16ToFloat(LoadU16(panel + Bf16PairsByte(f, k0 + r, j)));
    return;
  }
  if (!IsQuantizedFormat(f)) {
    const int64_t e = ElementBytes(f);
    const uint8_t* src = panel + k0 * kPackNR * e;
    for (int64_t i = 0; i < rows * kPackNR; ++i) {
      if (f == WeightFormat::kF32) {
        std::memcpy(out + i, src + 4 * i, 4);
      } else {
        const uint16_t h = LoadU16(src + 2 * i);
        out[i] = f == WeightFormat::kF16 ? HalfToFloat(h) : BFloat16ToFloat(h);
      }
    }
    return;
  }
  assert(k0 % kQuantGroup == 0);
  const int64_t group_bytes = QuantGroupBytes(f);
  float scale[kPackNR], min[kPackNR];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t k = k0 + r;
    const uint8_t* group = panel + k / kQuantGroup * group_bytes;
    const int kk = static_cast<int>(k % kQuantGroup);
    if (r == 0 || kk == 0) {
      for (int j = 0; j < kPackNR; ++j) {
        scale[j] = HalfToFloat(LoadU16(group + 2 * j));
        min[j] = HasGroupMin(f) ? HalfToFloat(LoadU16(group + 64 + 2 * j)) : 0.0f;
      }
    }
    float* dst = out + r * kPackNR;
    if (f == WeightFormat::kQ8_0) {
      const uint8_t* q = group + 64 + kk * kPackNR;
      for (int j = 0; j < kPackNR; ++j) dst[j] = scale[j] * static_cast<int8_t>(q[j]);
      continue;
    }
    for (int j = 0; j < kPackNR; ++j) {
      const int q = GroupNibbleQuantAt(f, group, kk, j);
      dst[j] = HasGroupMin(f) ? std::fma(scale[j], static_cast<float>(q), min[j])
                              : scale[j] * static_cast<float>(SignedQuant(f, q));
    }
  }
}

void DequantizePackedRow(WeightFormat f, const void* packed, int64_t N, int64_t K, int64_t n,
                         float* out) {
  assert(n >= 0 && n < N);
  (void)N;
  const uint8_t* panel = static_cast<const uint8_t*>(packed) + n / kPackNR * PackedPanelBytes(f, K);
  const int j = static_cast<int>(n % kPackNR);
  float rows[kQuantGroup * kPackNR];
  for (int64_t k0 = 0; k0 < K; k0 += kQuantGroup) {
    const int64_t count = std::min<int64_t>(kQuantGroup, K - k0);
    DequantizePanelRows(f, panel, k0, count, rows);
    for (int64_t r = 0; r < count; ++r) out[k0 + r] = rows[r * kPackNR + j];
  }
}

}  // namespace xrt
