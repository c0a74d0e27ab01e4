#include "runtime/kernels/weight_format.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernels/matmul.h"
#include "runtime/kernels/test_util.h"
#include "tests/fixtures/quant/ggml_blocks.h"

namespace xrt {
namespace {

constexpr WeightFormat kAllFormats[] = {
    WeightFormat::kF32,          WeightFormat::kF16,  WeightFormat::kBF16,
    WeightFormat::kQ8_0,         WeightFormat::kQ4_0, WeightFormat::kQ4_1,
    WeightFormat::kQ5_0,         WeightFormat::kQ5_1, WeightFormat::kQ4_K,
    WeightFormat::kQ5_K,         WeightFormat::kQ6_K, WeightFormat::kBF16Pairs,
    WeightFormat::kBF16PairsAmx, WeightFormat::kQ3_K, WeightFormat::kIQ4_NL,
    WeightFormat::kIQ4_XS};
// The formats with a quantizer (QuantizeRowGgml).
constexpr WeightFormat kGroupFormats[] = {WeightFormat::kQ8_0, WeightFormat::kQ4_0,
                                          WeightFormat::kQ4_1, WeightFormat::kQ5_0,
                                          WeightFormat::kQ5_1};
constexpr WeightFormat kKQuants[] = {WeightFormat::kQ4_K, WeightFormat::kQ5_K, WeightFormat::kQ6_K};

using testing::Bits;
using testing::FromBits;

// ---- An independent decoder of ggml's row-major encodings (block layouts as
// in ggml-common.h: q8_0 {f16 d; int8 qs[32]}, q4_0 {f16 d; uint8 qs[16]},
// q4_1 {f16 d; f16 m; uint8 qs[16]}, nibble i of a q4 block: low nibble of
// byte i for i < 16, high nibble of byte i - 16 otherwise; q5_0 {f16 d; uint8
// qh[4]; uint8 qs[16]}, q5_1 {f16 d; f16 m; uint8 qh[4]; uint8 qs[16]}: the
// q4 nibbles plus bit i of the little-endian qh as value i's bit 4), with its
// own f16 decoding by arithmetic.
float DecodeHalf(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 31) return m ? std::numeric_limits<float>::quiet_NaN() : sign * INFINITY;
  if (e == 0) return sign * static_cast<float>(m) * 0x1p-24f;
  return sign * std::ldexp(1.0f + static_cast<float>(m) / 1024.0f, e - 15);
}
uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// K-quants, following the loops of ggml's dequantize_row_q{4,5,6}_K: per
// super-block of 256, q4_k / q5_k walk 4 chunks of 64 values (two sub-blocks:
// low then high nibbles of 32 bytes; q5_k's 5th bit from qh at bit 2c / 2c+1),
// q6_k 2 halves of 128 (4 quarters of 32 from 64 ql bytes and 32 qh bytes).
void ScaleMinK4(int j, const uint8_t* q, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q3_K {hmask[32], qs[64], scales[12], d} as dequantize_row_q3_K: the
// scales as ggml unpacks them (testing::GgmlQ3KScales), then 2 halves of 128
// values, each 4 shifts of 2 bits over 32 qs bytes (two runs of 16 with their
// own scale), minus 4 where the hmask bit (bit 4 half + shift) is clear.
void DecodeGgmlQ3KBlock(const uint8_t* blk, float* y) {
  const uint8_t* hm = blk;
  const uint8_t* q = blk + 32;
  int scales[16];
  testing::GgmlQ3KScales(blk + 96, scales);
  const float d_all = DecodeHalf(U16(blk + 108));
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < 256; n += 128) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int run = 0; run < 2; ++run) {
        const float dl = d_all * static_cast<float>(scales[is++]);
        for (int l = 16 * run; l < 16 * run + 16; ++l) {
          const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
      m = static_cast<uint8_t>(m << 1);
    }
    q += 32;
  }
}

// ggml's kvalues_iq4nl, spelled out again for the independent decoders.
constexpr int kIQ4Table[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                               1,    13,   25,  38,  53,  69,  89,  113};

// IQ4_XS {d; scales_h; scales_l[4]; qs[128]} as dequantize_row_iq4_xs: 8
// runs of 32, dl = d * (ls - 32), then 16 bytes: low nibbles are values
// 0..15 of the run, high nibbles 16..31.
void DecodeGgmlIQ4XSBlock(const uint8_t* blk, float* y) {
  const float d = DecodeHalf(U16(blk));
  const int scales_h = U16(blk + 2);
  const uint8_t* qs = blk + 8;
  for (int ib = 0; ib < 8; ++ib) {
    const int ls = ((blk[4 + ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
    const float dl = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * static_cast<float>(kIQ4Table[qs[j] & 0xf]);
      y[j + 16] = dl * static_cast<float>(kIQ4Table[qs[j] >> 4]);
    }
    y += 32;
    qs += 16;
  }
}

void DecodeGgmlKBlock(WeightFormat f, const uint8_t* blk, float* y) {
  if (f == WeightFormat::kIQ4_XS) {
    DecodeGgmlIQ4XSBlock(blk, y);
    return;
  }
  if (f == WeightFormat::kQ3_K) {
    DecodeGgmlQ3KBlock(blk, y);
    return;
  }
  if (f == WeightFormat::kQ6_K) {
    const uint8_t* ql = blk;
    const uint8_t* qh = blk + 128;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192);
    const float d = DecodeHalf(U16(blk + 208));
    for (int half = 0; half < 2; ++half) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        const float d1 = d * static_cast<float>(sc[is]), d2 = d * static_cast<float>(sc[is + 2]);
        const float d3 = d * static_cast<float>(sc[is + 4]),
                    d4 = d * static_cast<float>(sc[is + 6]);
        y[l] = d1 * static_cast<float>(q1);
        y[l + 32] = d2 * static_cast<float>(q2);
        y[l + 64] = d3 * static_cast<float>(q3);
        y[l + 96] = d4 * static_cast<float>(q4);
      }
      y += 128;
      ql += 64;
      qh += 32;
      sc += 8;
    }
    return;
  }
  const bool five = f == WeightFormat::kQ5_K;
  const float d = DecodeHalf(U16(blk)), dmin = DecodeHalf(U16(blk + 2));
  const uint8_t* scales = blk + 4;
  const uint8_t* qh = blk + 16;
  const uint8_t* q = blk + (five ? 48 : 16);
  for (int c = 0; c < 4; ++c) {
    int sc, m;
    ScaleMinK4(2 * c, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    ScaleMinK4(2 * c + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      const int hi1 = five && (qh[l] & (1 << (2 * c))) ? 16 : 0;
      const int hi2 = five && (qh[l] & (2 << (2 * c))) ? 16 : 0;
      const float p1 = d1 * static_cast<float>((q[l] & 0xF) + hi1);
      const float p2 = d2 * static_cast<float>((q[l] >> 4) + hi2);
      y[64 * c + l] = p1 - m1;
      y[64 * c + 32 + l] = p2 - m2;
    }
    q += 32;
  }
}

std::vector<float> DecodeGgmlRow(WeightFormat f, const uint8_t* row, int64_t k) {
  std::vector<float> out(k);
  if (IsKQuantFormat(f)) {
    const int64_t bytes = f == WeightFormat::kQ3_K     ? 110
                          : f == WeightFormat::kQ4_K   ? 144
                          : f == WeightFormat::kQ5_K   ? 176
                          : f == WeightFormat::kIQ4_XS ? 136
                                                       : 210;
    for (int64_t b = 0; b < k / 256; ++b) DecodeGgmlKBlock(f, row + b * bytes, &out[b * 256]);
    return out;
  }
  for (int64_t i = 0; i < k; ++i) {
    const int64_t b = i / 32, j = i % 32;
    switch (f) {
      case WeightFormat::kF32:
        std::memcpy(&out[i], row + 4 * i, 4);
        break;
      case WeightFormat::kF16:
        out[i] = DecodeHalf(U16(row + 2 * i));
        break;
      case WeightFormat::kBF16:
      case WeightFormat::kBF16Pairs:
      case WeightFormat::kBF16PairsAmx:
        out[i] = FromBits(static_cast<uint32_t>(U16(row + 2 * i)) << 16);
        break;
      case WeightFormat::kQ8_0: {
        const uint8_t* blk = row + b * 34;
        out[i] = static_cast<float>(static_cast<int8_t>(blk[2 + j])) * DecodeHalf(U16(blk));
        break;
      }
      case WeightFormat::kQ4_0: {
        const uint8_t* blk = row + b * 18;
        const int q = j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4;
        out[i] = static_cast<float>(q - 8) * DecodeHalf(U16(blk));
        break;
      }
      case WeightFormat::kIQ4_NL: {
        const uint8_t* blk = row + b * 18;
        const int q = j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4;
        out[i] = DecodeHalf(U16(blk)) * static_cast<float>(kIQ4Table[q]);
        break;
      }
      case WeightFormat::kQ4_1: {
        const uint8_t* blk = row + b * 20;
        const int q = j < 16 ? blk[4 + j] & 15 : blk[4 + j - 16] >> 4;
        const float product = static_cast<float>(q) * DecodeHalf(U16(blk));  // exact
        out[i] = product + DecodeHalf(U16(blk + 2));
        break;
      }
      case WeightFormat::kQ5_0:
      case WeightFormat::kQ5_1: {
        const bool min = f == WeightFormat::kQ5_1;
        const uint8_t* blk = row + b * (min ? 24 : 22);
        const uint8_t* qh = blk + (min ? 4 : 2);
        const uint8_t* qs = qh + 4;
        const int low = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
        const int q = low + ((qh[j / 8] >> (j % 8)) & 1) * 16;
        const float d = DecodeHalf(U16(blk));
        out[i] = min ? static_cast<float>(q) * d + DecodeHalf(U16(blk + 2))  // product exact
                     : static_cast<float>(q - 16) * d;
        break;
      }
      default:
        break;
    }
  }
  return out;
}

std::vector<float> FixtureMatrix() {
  std::vector<float> w(quant_fixture::kN * quant_fixture::kK);
  for (size_t i = 0; i < w.size(); ++i) w[i] = FromBits(quant_fixture::kW[i]);
  return w;
}

const uint8_t* FixtureBlocks(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQ8_0:
      return quant_fixture::kQ8_0;
    case WeightFormat::kQ4_0:
      return quant_fixture::kQ4_0;
    case WeightFormat::kQ4_1:
      return quant_fixture::kQ4_1;
    case WeightFormat::kQ5_0:
      return quant_fixture::kQ5_0;
    case WeightFormat::kQ5_1:
      return quant_fixture::kQ5_1;
    case WeightFormat::kF16:
      return quant_fixture::kF16;
    case WeightFormat::kBF16:
    case WeightFormat::kBF16Pairs:
    case WeightFormat::kBF16PairsAmx:
      return quant_fixture::kBF16;
    default:
      break;
  }
  return nullptr;
}

std::vector<uint8_t> PackFrom(WeightFormat f, const std::vector<float>& w, int64_t n, int64_t k) {
  std::vector<uint8_t> out(PackedWeightBytes(f, n, k) + 1, 0xAB);
  PackWeightsFrom(f, w.data(), n, k, out.data());
  EXPECT_EQ(out.back(), 0xAB) << WeightFormatName(f) << " wrote past its size";
  out.pop_back();
  return out;
}

TEST(WeightFormatTest, NamesRoundTrip) {
  for (WeightFormat f : kAllFormats) {
    WeightFormat back = WeightFormat::kF32;
    ASSERT_TRUE(WeightFormatFromName(WeightFormatName(f), &back)) << WeightFormatName(f);
    EXPECT_EQ(back, f);
  }
  WeightFormat out = WeightFormat::kQ8_0;
  EXPECT_FALSE(WeightFormatFromName("q2_k", &out));
  EXPECT_FALSE(WeightFormatFromName("Q4_K", &out));
  EXPECT_FALSE(WeightFormatFromName("", &out));
  EXPECT_EQ(out, WeightFormat::kQ8_0);
  EXPECT_STREQ(WeightFormatName(WeightFormat::kQ4_1), "q4_1");
}

// bf16 pairs hold kBF16's operands: f32 subnormals become signed zeros (bf16
// keeps the nearest bf16, which for 0x007fffff is 2^-126, a normal number).
TEST(WeightFormatTest, Bf16PairsStoreTheBf16ComputeOperands) {
  const std::vector<float> w = {FromBits(0x007fffffu), FromBits(0x80000001u), 1.0f + 0x1p-8f,
                                -3.0f};
  const std::vector<float> operands = {0.0f, -0.0f, 1.0f, -3.0f};
  for (WeightFormat f : {WeightFormat::kBF16Pairs, WeightFormat::kBF16PairsAmx}) {
    const std::vector<uint8_t> packed = PackFrom(f, w, 1, 4);
    std::vector<float> row(4);
    DequantizePackedRow(f, packed.data(), 1, 4, 0, row.data());
    for (int k = 0; k < 4; ++k)
      EXPECT_EQ(Bits(row[k]), Bits(operands[k])) << WeightFormatName(f) << " k=" << k;
  }
  const std::vector<uint8_t> bf16 = PackFrom(WeightFormat::kBF16, w, 1, 4);
  std::vector<float> row(4);
  DequantizePackedRow(WeightFormat::kBF16, bf16.data(), 1, 4, 0, row.data());
  EXPECT_EQ(Bits(row[0]), 0x00800000u);
}

TEST(WeightFormatTest, Sizes) {
  EXPECT_EQ(WeightFormatBlockSize(WeightFormat::kF32), 1);
  EXPECT_EQ(WeightFormatBlockSize(WeightFormat::kBF16), 1);
  EXPECT_EQ(WeightFormatBlockSize(WeightFormat::kQ4_0), 32);
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kF32, 3), 3 * 32 * 4);
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kF16, 3), 3 * 32 * 2);
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kQ8_0, 64), 2 * 1088);
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kQ4_0, 64), 2 * 576);
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kQ4_1, 96), 3 * 640);
  EXPECT_EQ(PackedWeightBytes(WeightFormat::kQ4_1, 33, 32), 2 * 640);
  EXPECT_EQ(PackedWeightBytes(WeightFormat::kBF16, 0, 32), 0);
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kQ8_0, 64), 68);
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kQ4_0, 64), 36);
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kQ4_1, 64), 40);
  // q5_0 / q5_1: ggml's bits per weight (5.5, 6) in both encodings.
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kQ5_0, 64), 44);
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kQ5_1, 64), 48);
  for (WeightFormat f : {WeightFormat::kQ5_0, WeightFormat::kQ5_1}) {
    EXPECT_EQ(PackedPanelBytes(f, 96), kPackNR * GgmlRowBytes(f, 96)) << WeightFormatName(f);
    EXPECT_EQ(WeightFormatBlockSize(f), 32);
    EXPECT_TRUE(IsQuantizedFormat(f));
    EXPECT_TRUE(HasFifthBits(f));
  }
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kQ5_0, 32), 704);
  EXPECT_EQ(PackedWeightBytes(WeightFormat::kQ5_1, 33, 32), 2 * 768);
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kBF16, 5), 10);
  // K-quants: ggml's bits per weight (4.5, 5.5, 6.5625) in both encodings.
  EXPECT_EQ(WeightFormatBlockSize(WeightFormat::kQ4_K), 256);
  EXPECT_EQ(WeightFormatBlockSize(WeightFormat::kQ6_K), 256);
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kQ4_K, 512), 2 * 144);
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kQ5_K, 256), 176);
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kQ6_K, 768), 3 * 210);
  for (WeightFormat f : kKQuants) {
    EXPECT_EQ(PackedPanelBytes(f, 512), kPackNR * GgmlRowBytes(f, 512)) << WeightFormatName(f);
    EXPECT_EQ(SuperBlockBytes(f) % 64, 0);
  }
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kQ4_K, 256), 4608);
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kQ5_K, 256), 5632);
  EXPECT_EQ(PackedWeightBytes(WeightFormat::kQ6_K, 33, 256), 2 * 6720);
  // q3_k: 114 bytes per 256 values of a column (ggml's 110 with its 6-bit
  // scales as int8): 3.5625 bits per weight.
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kQ3_K, 512), 2 * 110);
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kQ3_K, 512), 2 * 3648);
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kQ3_K, 256), kPackNR * 114);
  EXPECT_EQ(WeightFormatBlockSize(WeightFormat::kQ3_K), 256);
  EXPECT_TRUE(IsKQuantFormat(WeightFormat::kQ3_K));
  EXPECT_FALSE(HasQuadNibbles(WeightFormat::kQ3_K));
  // iq4_nl: ggml's 4.5 bits per weight (q4_0's group); iq4_xs: 146 bytes
  // per 256 values of a column (ggml's 136 with the 6-bit scales as int8,
  // one per 16 rows): 4.5625 bits per weight.
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kIQ4_NL, 64), 36);
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kIQ4_NL, 96),
            kPackNR * GgmlRowBytes(WeightFormat::kIQ4_NL, 96));
  EXPECT_EQ(WeightFormatBlockSize(WeightFormat::kIQ4_NL), 32);
  EXPECT_TRUE(IsQuantizedFormat(WeightFormat::kIQ4_NL));
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kIQ4_XS, 512), 2 * 136);
  EXPECT_EQ(PackedPanelBytes(WeightFormat::kIQ4_XS, 256), kPackNR * 146);
  EXPECT_EQ(WeightFormatBlockSize(WeightFormat::kIQ4_XS), 256);
  EXPECT_TRUE(IsKQuantFormat(WeightFormat::kIQ4_XS));
  EXPECT_TRUE(HasKInt8Scales(WeightFormat::kIQ4_XS));
  EXPECT_EQ(SuperBlockBytes(WeightFormat::kIQ4_XS) % 64, 0);
  EXPECT_TRUE(IsKQuantFormat(WeightFormat::kQ5_K));
  EXPECT_FALSE(IsKQuantFormat(WeightFormat::kQ4_1));
  EXPECT_FALSE(IsQuantizedFormat(WeightFormat::kQ4_K));
}

TEST(WeightFormatTest, HalfConversions) {
  // Exact values, rounding to nearest even, overflow, subnormals, NaN.
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);             // tie -> even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);         // tie -> even (up)
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // above the tie
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);                    // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);                    // tie -> even (0)
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);                // tie -> even (2)
  EXPECT_EQ(FloatToHalf(-0x1p-14f + 0x1p-26f), 0x8400);        // rounds up to normal
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(INFINITY), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    const float ref = DecodeHalf(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f)) << h;
      continue;
    }
    ASSERT_EQ(Bits(f), Bits(ref)) << h;
    ASSERT_EQ(FloatToHalf(f), static_cast<uint16_t>(h)) << h;  // every half survives the round trip
  }
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3f808000u)), 0x3f80);  // tie -> even
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(FloatToBFloat16(FromBits(0x3f808001u)), 0x3f81);
  EXPECT_EQ(FloatToBFloat16(FromBits(0x7f7fffffu)), 0x7f80);  // overflows to inf
  EXPECT_EQ(BFloat16ToFloat(0xc040), -3.0f);
}

// e4m3 by its definition: (-1)^s 2^(e-7) (1 + m/8), subnormals 2^-6 m/8.
double DecodeFp8E4M3(uint8_t x) {
  const int e = (x >> 3) & 0xf, m = x & 7;
  if ((x & 0x7f) == 0x7f) return NAN;
  const double mag = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return (x & 0x80) ? -mag : mag;
}

TEST(WeightFormatTest, Fp8E4M3Conversions) {
  EXPECT_EQ(FloatToFp8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToFp8E4M3(-0.5f), 0xb0);
  EXPECT_EQ(FloatToFp8E4M3(448.0f), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(464.0f), 0x7e);  // saturates (would round to 480)
  EXPECT_EQ(FloatToFp8E4M3(-1e30f), 0xfe);
  EXPECT_EQ(FloatToFp8E4M3(INFINITY), 0x7e);
  EXPECT_EQ(FloatToFp8E4M3(1.0625f), 0x38);  // tie -> even
  EXPECT_EQ(FloatToFp8E4M3(1.1875f), 0x3a);  // tie -> even (up)
  EXPECT_EQ(FloatToFp8E4M3(1.0625f + 0x1p-20f), 0x39);
  EXPECT_EQ(FloatToFp8E4M3(0x1p-9f), 0x01);              // smallest subnormal
  EXPECT_EQ(FloatToFp8E4M3(0x1p-10f), 0x00);             // tie -> even (0)
  EXPECT_EQ(FloatToFp8E4M3(3 * 0x1p-10f), 0x02);         // tie -> even (2)
  EXPECT_EQ(FloatToFp8E4M3(-0x1p-6f + 0x1p-11f), 0x88);  // rounds up to normal
  EXPECT_EQ(FloatToFp8E4M3(-0.0f), 0x80);
  EXPECT_EQ(FloatToFp8E4M3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
  for (int x = 0; x < 256; ++x) {
    const float f = Fp8E4M3ToFloat(static_cast<uint8_t>(x));
    const double ref = DecodeFp8E4M3(static_cast<uint8_t>(x));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f)) << x;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), ref) << x;
    ASSERT_EQ(Bits(f), Bits(static_cast<float>(ref))) << x;  // -0 too
    ASSERT_EQ(FloatToFp8E4M3(f), x) << x;                    // every code survives the round trip
  }
  // Any float in range rounds to the nearest code, ties to the even one.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-12.0f, 9.0f), mantissa(1.0f, 2.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::ldexp(mantissa(rng), static_cast<int>(exponent(rng))) * (i % 2 ? -1 : 1);
    if (std::fabs(x) > 448.0f) continue;
    int best = -1;
    for (int c = 0; c < 256; ++c) {
      const double d = DecodeFp8E4M3(static_cast<uint8_t>(c));
      if (std::isnan(d) || std::signbit(d) != std::signbit(x)) continue;
      const double err = std::fabs(d - x);
      const double best_err = best < 0 ? INFINITY : std::fabs(DecodeFp8E4M3(best) - x);
      if (err < best_err || (err == best_err && (c & 1) == 0)) best = c;
    }
    ASSERT_EQ(FloatToFp8E4M3(x), best) << x;
  }
}

// Hand-checked bytes of each layout, N not a multiple of 32: padding is zero.
TEST(WeightFormatTest, LayoutBytes) {
  const int64_t n = 33, k = 64;
  std::vector<uint8_t> rows_q8(n * 68, 0), rows_q41(n * 40, 0), rows_bf(n * 2 * 3, 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int b = 0; b < 2; ++b) {
      uint8_t* q8 = rows_q8.data() + r * 68 + b * 34;
      q8[0] = static_cast<uint8_t>(r);  // d bits: r + 256 * b
      q8[1] = static_cast<uint8_t>(b);
      for (int i = 0; i < 32; ++i) q8[2 + i] = static_cast<uint8_t>(r * 3 + i + b * 100);
      uint8_t* q41 = rows_q41.data() + r * 40 + b * 20;
      q41[0] = static_cast<uint8_t>(r);
      q41[1] = 0x3c;
      q41[2] = static_cast<uint8_t>(b);
      q41[3] = static_cast<uint8_t>(r);
      for (int i = 0; i < 16; ++i) q41[4 + i] = static_cast<uint8_t>((i & 15) | ((r & 15) << 4));
    }
    for (int kk = 0; kk < 3; ++kk) {
      rows_bf[r * 6 + kk * 2] = static_cast<uint8_t>(r);
      rows_bf[r * 6 + kk * 2 + 1] = static_cast<uint8_t>(kk);
    }
  }
  std::vector<uint8_t> q8(PackedWeightBytes(WeightFormat::kQ8_0, n, k), 0xEE);
  PackWeightsFromBlocks(WeightFormat::kQ8_0, rows_q8.data(), n, k, 68, q8.data());
  // Panel 1, group 1: scale of column 0 (row 32) at bytes [0, 2).
  const uint8_t* g = q8.data() + 2 * 1088 + 1088;
  EXPECT_EQ(g[0], 32);
  EXPECT_EQ(g[1], 1);
  EXPECT_EQ(g[2], 0);                                                     // column 1 is padding
  EXPECT_EQ(g[64 + 5 * 32 + 0], static_cast<uint8_t>(32 * 3 + 5 + 100));  // k-row 5, column 0
  EXPECT_EQ(g[64 + 5 * 32 + 1], 0);
  // Panel 0, group 0, k-row 7, column 9.
  EXPECT_EQ(q8[64 + 7 * 32 + 9], static_cast<uint8_t>(9 * 3 + 7));
  EXPECT_EQ(q8[2 * 9], 9);

  std::vector<uint8_t> q41(PackedWeightBytes(WeightFormat::kQ4_1, n, k), 0xEE);
  PackWeightsFromBlocks(WeightFormat::kQ4_1, rows_q41.data(), n, k, 40, q41.data());
  // Panel 0, group 1: scale (col 20) at 40, min at 64 + 40. The quants are
  // quads of 4 k-rows, 64 bytes each, byte 4j + t = column j (low nibble) and
  // j + 16 (high) at k-row t of the quad. k-row 3 (quad 0, byte 4 * 4 + 3)
  // holds column 4 (value 3 of row 4, i.e. qs[3] & 15 = 3) and column 20
  // (value 3 of row 20 = 3); k-row 17 (quad 4, byte 4 * 4 + 1) takes high
  // nibbles: qs[1] >> 4 = row & 15.
  const uint8_t* p = q41.data() + 640;
  EXPECT_EQ(p[40], 20);
  EXPECT_EQ(p[41], 0x3c);
  EXPECT_EQ(p[64 + 40], 1);
  EXPECT_EQ(p[64 + 41], 20);
  EXPECT_EQ(p[128 + 19], 0x33);
  EXPECT_EQ(p[128 + 4 * 64 + 17], (4 & 15) | ((20 & 15) << 4));
  // Panel 1 has only column 0 (row 32): k-row 3 (byte 3) is its value 3 in
  // the low nibble and padding (column 16) in the high one; column 1's byte
  // (7) is padding.
  EXPECT_EQ(q41[2 * 640 + 128 + 3], 3);
  EXPECT_EQ(q41[2 * 640 + 128 + 7], 0);
  EXPECT_EQ(q41[2 * 640 + 2], 0);  // scale of column 1

  std::vector<uint8_t> bf(PackedWeightBytes(WeightFormat::kBF16, n, 3), 0xEE);
  PackWeightsFromBlocks(WeightFormat::kBF16, rows_bf.data(), n, 3, 6, bf.data());
  EXPECT_EQ(bf[(2 * 32 + 7) * 2], 7);  // k 2, column 7
  EXPECT_EQ(bf[(2 * 32 + 7) * 2 + 1], 2);
  EXPECT_EQ(bf[3 * 64 + (1 * 32 + 0) * 2], 32);  // panel 1, k 1, column 0
  EXPECT_EQ(bf[3 * 64 + (1 * 32 + 1) * 2], 0);

  // bf16_pairs(_amx): dword j of pair-row p is column j at k-rows 2p and
  // 2p + 1, k-row 2p low (bf16_pairs) or high (bf16_pairs_amx); K = 3 pads
  // pair-row 1's k-row 3 with zeros.
  for (WeightFormat f : {WeightFormat::kBF16Pairs, WeightFormat::kBF16PairsAmx}) {
    SCOPED_TRACE(WeightFormatName(f));
    ASSERT_EQ(PackedWeightBytes(f, n, 3), 2 * 2 * 32 * 4);
    std::vector<uint8_t> bp(PackedWeightBytes(f, n, 3), 0xEE);
    PackWeightsFromBlocks(f, rows_bf.data(), n, 3, 6, bp.data());
    auto word = [&](int64_t at) { return bp[at] | bp[at + 1] << 8; };
    const int even = f == WeightFormat::kBF16Pairs ? 0 : 2, odd = 2 - even;
    EXPECT_EQ(word((0 * 32 + 7) * 4 + even), 0 << 8 | 7);        // k 0, column 7
    EXPECT_EQ(word((0 * 32 + 7) * 4 + odd), 1 << 8 | 7);         // k 1
    EXPECT_EQ(word((1 * 32 + 7) * 4 + even), 2 << 8 | 7);        // k 2
    EXPECT_EQ(word((1 * 32 + 7) * 4 + odd), 0);                  // the pad of an odd K
    EXPECT_EQ(word(256 + (0 * 32 + 0) * 4 + odd), 1 << 8 | 32);  // panel 1, k 1, column 0
    EXPECT_EQ(word(256 + (0 * 32 + 1) * 4), 0);                  // a padding column
    for (int64_t r = 0; r < n; ++r)
      for (int64_t k = 0; k < 3; ++k)
        EXPECT_EQ(word(r / 32 * 256 + Bf16PairsByte(f, k, static_cast<int>(r % 32))),
                  rows_bf[2 * (3 * r + k)] | rows_bf[2 * (3 * r + k) + 1] << 8);
  }
}

// Hand-checked bytes of the q5 layouts: the nibbles as q4's, bit 4 at q5_k's
// positions (K5HighByte / K5HighBit) after the scales (and mins).
TEST(WeightFormatTest, Q5LayoutBytes) {
  for (WeightFormat f : {WeightFormat::kQ5_0, WeightFormat::kQ5_1}) {
    SCOPED_TRACE(WeightFormatName(f));
    const int64_t n = 22, k = 32, block = GgmlRowBytes(f, k);
    const int64_t qh = HasGroupMin(f) ? 4 : 2;
    std::vector<uint8_t> rows(n * block, 0);
    // Row 21: d = 1.0 (0x3c00), value 17 = 16 + 1 (bit 17 of qh, nibble 1 in
    // the high half of qs[1]), value 2 = 5 (low nibble of qs[2]).
    uint8_t* row = rows.data() + 21 * block;
    row[1] = 0x3c;
    row[qh + 2] = 0x02;      // qh bit 17: byte 2, bit 1
    row[qh + 4 + 1] = 0x10;  // value 17's nibble
    row[qh + 4 + 2] = 0x05;  // value 2's nibble
    std::vector<uint8_t> packed(PackedWeightBytes(f, n, k), 0xEE);
    PackWeightsFromBlocks(f, rows.data(), n, k, block, packed.data());
    const int64_t high = FifthBitsOffset(f), quants = QuantGroupQuantsOffset(f);
    EXPECT_EQ(high, HasGroupMin(f) ? 128 : 64);
    EXPECT_EQ(packed[2 * 21 + 1], 0x3c);
    // Column 21 at k-row 17: quad 4, t = 1: fifth-bit byte 16 * 4 + 4 * (21 %
    // 4) + 1 = 69, bit 4 * (21 % 8 / 4) + 2 * (21 % 16 / 8) + 21 / 16 = 5;
    // nibble byte 64 * 4 + 4 * 5 + 1, high nibble (column >= 16).
    EXPECT_EQ(packed[high + 69], 1 << 5);
    EXPECT_EQ(packed[quants + 64 * 4 + 4 * 5 + 1], 0x10);
    EXPECT_EQ(packed[quants + 4 * 5 + 2], 0x50);  // k-row 2: quad 0, t = 2
    for (int64_t i = high; i < quants; ++i)
      if (i != high + 69) EXPECT_EQ(packed[i], 0) << i;
    EXPECT_EQ(GroupNibbleQuantAt(f, packed.data(), 17, 21), 17);
    EXPECT_EQ(GroupNibbleQuantAt(f, packed.data(), 2, 21), 5);
    std::vector<float> values(k);
    DequantizePackedRow(f, packed.data(), n, k, 21, values.data());
    EXPECT_EQ(values[17], HasGroupMin(f) ? 17.0f : 1.0f);
    EXPECT_EQ(values[2], HasGroupMin(f) ? 5.0f : -11.0f);
  }
}

// ggml blocks -> panels -> DequantizePackedRow equals the independent decoder
// on random block bytes (every bit pattern of quants and finite scales).
TEST(WeightFormatTest, BlocksRoundTrip) {
  std::mt19937 rng(5);
  using Shapes = std::vector<std::pair<int64_t, int64_t>>;
  for (WeightFormat f : kAllFormats) {
    const bool kquant = IsKQuantFormat(f);
    const Shapes shapes = kquant ? Shapes{{1, 256}, {31, 512}, {33, 768}, {70, 256}}
                                 : Shapes{{1, 32}, {31, 64}, {33, 96}, {70, 32}};
    for (auto [n, k] : shapes) {
      const int64_t row_bytes = GgmlRowBytes(f, k);
      std::vector<uint8_t> blocks(n * row_bytes);
      for (auto& b : blocks) b = static_cast<uint8_t>(rng());
      // Keep 16-bit values finite (NaN payloads are not the point here).
      const bool sixteen = Is16BitFormat(f);
      const bool f32 = f == WeightFormat::kF32;
      for (int64_t r = 0; r < n; ++r) {
        uint8_t* row = blocks.data() + r * row_bytes;
        if (sixteen) {
          for (int64_t i = 0; i < k; ++i) row[2 * i + 1] &= 0x3f;
        } else if (f32) {
          for (int64_t i = 0; i < k; ++i) row[4 * i + 3] &= 0x3f;
        } else if (kquant) {
          const int64_t bb = row_bytes / (k / 256);
          for (int64_t b = 0; b < k / 256; ++b) {
            if (f == WeightFormat::kQ6_K) {
              row[b * bb + 209] &= 0xbf;  // d finite (any sign)
            } else if (f == WeightFormat::kQ3_K) {
              row[b * bb + 109] &= 0xbf;
            } else if (f == WeightFormat::kIQ4_XS) {
              row[b * bb + 1] &= 0xbf;
            } else {
              row[b * bb + 1] &= 0xbf;  // d, dmin finite
              row[b * bb + 3] &= 0xbf;
            }
          }
        } else {
          const int64_t bb = row_bytes / (k / 32);
          for (int64_t b = 0; b < k / 32; ++b) {
            row[b * bb + 1] &= 0x3f;
            if (HasGroupMin(f)) row[b * bb + 3] &= 0x3f;
          }
        }
      }
      std::vector<uint8_t> packed(PackedWeightBytes(f, n, k));
      PackWeightsFromBlocks(f, blocks.data(), n, k, static_cast<size_t>(row_bytes), packed.data());
      std::vector<float> got(k);
      for (int64_t r = 0; r < n; ++r) {
        const std::vector<float> want = DecodeGgmlRow(f, blocks.data() + r * row_bytes, k);
        DequantizePackedRow(f, packed.data(), n, k, r, got.data());
        for (int64_t i = 0; i < k; ++i) {
          ASSERT_EQ(Bits(got[i]), Bits(want[i]))
              << WeightFormatName(f) << " n=" << n << " k=" << k << " row " << r << " k " << i;
        }
      }
      // Padding columns of the last panel decode to zero.
      if (n % kPackNR != 0) {
        const int64_t panel_bytes = PackedPanelBytes(f, k);
        std::vector<float> block(k * kPackNR);
        DequantizePanelRows(f, packed.data() + (n / kPackNR) * panel_bytes, 0, k, block.data());
        for (int64_t kk = 0; kk < k; ++kk) {
          for (int j = static_cast<int>(n % kPackNR); j < kPackNR; ++j) {
            ASSERT_EQ(block[kk * kPackNR + j], 0.0f) << WeightFormatName(f);
          }
        }
      }
    }
  }
}

// A one-super-block ggml row `block` (256 values of K-quant `f`) as row /
// column `column` of a W [column + 1][256] whose other rows are zero, packed.
std::vector<uint8_t> PackAsColumn(WeightFormat f, const std::vector<uint8_t>& block, int column) {
  const int64_t n = column + 1, bytes = GgmlRowBytes(f, 256);
  EXPECT_EQ(static_cast<int64_t>(block.size()), bytes);
  std::vector<uint8_t> rows(n * bytes, 0);
  std::memcpy(rows.data() + column * bytes, block.data(), bytes);
  std::vector<uint8_t> packed(PackedWeightBytes(f, n, 256), 0xEE);
  PackWeightsFromBlocks(f, rows.data(), n, 256, static_cast<size_t>(bytes), packed.data());
  return packed;
}

// Hand-checked bytes of the K-quant layouts: one row (column 0) and a padded
// panel.
TEST(WeightFormatTest, KQuantLayoutBytes) {
  // q4_k: d = 0x3c00, dmin = 0x3800; sub-block 5's scale 0x2b (lo 0xb, hi 2)
  // and min 0x1d (lo 0xd, hi 1): scales[9] = 0xdb, scales[1] holds the scale
  // high bits (bits 6-7 = 2), scales[5] the min high bits (bits 6-7 = 1).
  std::vector<uint8_t> q4(144, 0);
  q4[1] = 0x3c;
  q4[3] = 0x38;
  q4[4 + 9] = 0xdb;
  q4[4 + 1] = 0x80;
  q4[4 + 5] = 0x40;
  q4[16 + 32 * 2 + 7] = 0x9e;  // values 128 + 7 (low nibble e) and 160 + 7 (high 9)
  std::vector<uint8_t> p4(PackedWeightBytes(WeightFormat::kQ4_K, 1, 256), 0xEE);
  PackWeightsFromBlocks(WeightFormat::kQ4_K, q4.data(), 1, 256, 144, p4.data());
  EXPECT_EQ(p4[1], 0x3c);
  EXPECT_EQ(p4[64 + 1], 0x38);
  EXPECT_EQ(p4[2], 0);                             // column 1: padding
  EXPECT_EQ(p4[128 + 5 * 32], 0xdb);               // scale_lo[5][0]: sc & 15 | (m & 15) << 4
  EXPECT_EQ(p4[384 + 2 * 32], (2 | 1 << 2) << 4);  // scale_hi[2][0], sub-block 5 (odd)
  // The quants are quads of 4 k-rows, 64 bytes each, byte 4j + t = column j
  // (low nibble) and j + 16 (high) at k-row t of the quad: k-row 135 is
  // quad 33, t = 3; k-row 167 quad 41, t = 3.
  EXPECT_EQ(p4[512 + 33 * 64 + 3], 0x0e);
  EXPECT_EQ(p4[512 + 41 * 64 + 3], 0x09);
  float row[256];
  DequantizePackedRow(WeightFormat::kQ4_K, p4.data(), 1, 256, 0, row);
  EXPECT_EQ(row[167], 1.0f * 0x2b * 9 - 0.5f * 0x1d);
  EXPECT_EQ(row[135], 0.0f);  // sub-block 4: scale and min 0

  // q5_k: value 101 (sub-block 3, l = 5) has bit 4 from qh[5] bit 3. Row 9
  // of W is column 9: half 1 of a quad (columns 8-15), its lane 0 (8-11),
  // c = 1, low nibble (n = 0); k-row 101 is quad 25, t = 1. So its bit is
  // byte 4c + t = 5 of the quad's 16, bit 4L + 2h + n = 2.
  std::vector<uint8_t> rows5(10 * 176, 0);
  rows5[9 * 176 + 16 + 5] = 1 << 3;
  std::vector<uint8_t> p5(PackedWeightBytes(WeightFormat::kQ5_K, 10, 256), 0xEE);
  PackWeightsFromBlocks(WeightFormat::kQ5_K, rows5.data(), 10, 256, 176, p5.data());
  for (int i = 0; i < 1024; ++i) {
    EXPECT_EQ(p5[512 + i], i == 25 * 16 + 5 ? 1 << 2 : 0) << "q5_k high-bit byte " << i;
  }
  EXPECT_EQ(KQuantAt(WeightFormat::kQ5_K, p5.data(), 101, 9), 16);
  EXPECT_EQ(KQuantAt(WeightFormat::kQ5_K, p5.data(), 100, 9), 0);

  // q6_k: d = 0x4000 (2); scales[3] = -5; value 100 (half 0, quarter 3,
  // l = 4) = 0x2a: low nibble a in ql[32 + 4] >> 4, high bits 2 in qh[4]
  // bits 6-7; value 200 (half 1, quarter 2, l = 8) = 0x11: ql[64 + 8] low
  // bits... high nibble 1, qh[32 + 8] bits 4-5 = 1.
  std::vector<uint8_t> q6(210, 0);
  q6[209] = 0x40;
  q6[192 + 6] = static_cast<uint8_t>(-5);
  q6[192 + 12] = 7;
  q6[32 + 4] = 0xa0;
  q6[128 + 4] = 0x80;
  q6[64 + 8] = 0x10;
  q6[128 + 32 + 8] = 0x10;
  const std::vector<uint8_t> p6 = PackAsColumn(WeightFormat::kQ6_K, q6, 16);
  EXPECT_EQ(p6[2 * 16 + 1], 0x40);
  EXPECT_EQ(static_cast<int8_t>(p6[64 + 6 * 32 + 16]), -5);
  EXPECT_EQ(p6[64 + 12 * 32 + 16], 7);
  // k-row 100: quad 25, t = 0; column 16 is the high nibble of byte 0.
  EXPECT_EQ(p6[2624 + 25 * 64], 0xa0);
  // High bits: 32 bytes per quad; column 16 (half 0, lane 0, c = 0, n = 1)
  // is byte 4c + t = 0's field 2h + n = 1 (bits 2-3). k-row 200: quad 50.
  std::vector<uint8_t> expected(32, 0);
  expected[0] = 2 << 2;
  EXPECT_EQ(std::vector<uint8_t>(p6.begin() + 576 + 25 * 32, p6.begin() + 576 + 26 * 32), expected);
  expected[0] = 1 << 2;
  EXPECT_EQ(std::vector<uint8_t>(p6.begin() + 576 + 50 * 32, p6.begin() + 576 + 51 * 32), expected);
  DequantizePackedRow(WeightFormat::kQ6_K, p6.data(), 17, 256, 16, row);
  EXPECT_EQ(row[100], 2.0f * -5 * (0x2a - 32));
  EXPECT_EQ(row[200], 2.0f * 7 * (0x11 - 32));
  EXPECT_EQ(row[0], 0.0f);

  // q3_k: d = 0x4000 (2). Scale i's low nibble is nibble i / 8 of byte i % 8
  // of the 12, its high 2 bits bits 2 (i / 4) of byte 8 + i % 4: scale 9 =
  // 0x25 (5 after - 32: byte 1's high nibble 5, byte 9 bits 4-5 = 2), scale
  // 0 = 0x22 (2: byte 0's low nibble, byte 8 bits 0-1), scale 1 = 0 (-32).
  // Value 147 (half 1, shift 0, l = 19) = 6: low bits 2 in qs[32 + 19], bit
  // 2 from hmask[19] bit 4. Value 5 (half 0, l = 5) = 1, its hmask clear.
  std::vector<uint8_t> q3(110, 0);
  q3[108 + 1] = 0x40;
  q3[96 + 1] = 0x50;
  q3[96 + 9] = 0x02 << 4;
  q3[96 + 8] = 0x02;
  q3[96 + 0] = 0x02;
  q3[32 + 32 + 19] = 0x02;
  q3[19] = 1 << 4;
  q3[32 + 5] = 0x01;
  const std::vector<uint8_t> p3 = PackAsColumn(WeightFormat::kQ3_K, q3, 20);
  EXPECT_EQ(p3[2 * 20 + 1], 0x40);
  EXPECT_EQ(static_cast<int8_t>(p3[64 + 9 * 32 + 20]), 5);
  EXPECT_EQ(static_cast<int8_t>(p3[64 + 0 * 32 + 20]), 2);
  EXPECT_EQ(static_cast<int8_t>(p3[64 + 1 * 32 + 20]), -32);
  // Crumbs: k-row 147 is quad pair 18 (quad 36, e = 0), t = 3; column 20 is
  // byte 4 (20 % 16) + 3 = 19 of the pair, bits 4 + 2e = 4-5. k-row 5: pair
  // 0, quad 1 (e = 1), t = 1, byte 17, bits 6-7.
  for (int i = 0; i < 2048; ++i) {
    const int want = i == 18 * 64 + 19 ? 2 << 4 : i == 17 ? 1 << 6 : 0;
    EXPECT_EQ(p3[1600 + i], want) << "q3_k crumb byte " << i;
  }
  // Bit 2: column 20 is lane 1 (20 % 8 / 4), half 0, n = 1: bit 4 + 1 = 5 of
  // byte 4 (20 % 4) + t = 3 of quad 36's 16.
  for (int i = 0; i < 1024; ++i) {
    EXPECT_EQ(p3[576 + i], i == 36 * 16 + 3 ? 1 << 5 : 0) << "q3_k high-bit byte " << i;
  }
  EXPECT_EQ(KQuantAt(WeightFormat::kQ3_K, p3.data(), 147, 20), 6);
  EXPECT_EQ(KQuantAt(WeightFormat::kQ3_K, p3.data(), 5, 20), 1);
  DequantizePackedRow(WeightFormat::kQ3_K, p3.data(), 21, 256, 20, row);
  EXPECT_EQ(row[147], 2.0f * 5 * (6 - 4));
  EXPECT_EQ(row[5], 2.0f * 2 * (1 - 4));
  EXPECT_EQ(row[6], 2.0f * 2 * -4);     // quant 0
  EXPECT_EQ(row[16], 2.0f * -32 * -4);  // scale 1, quant 0

  // iq4_xs: d = 0x4000 (2); sub-block 5's ls = 0x2b (scales_l[2] high
  // nibble 0xb, scales_h bits 10-11 = 2): 43 - 32 = 11 for 16-row
  // sub-blocks 10 and 11; the others ls 0: -32. Value 165 (sub-block 5,
  // l = 5): low nibble of qs[16 * 5 + 5] = 14; value 181 (l = 21): high
  // nibble of qs[85] = 3.
  std::vector<uint8_t> x4(136, 0);
  x4[1] = 0x40;
  x4[2 + 1] = 2 << 2;
  x4[4 + 2] = 0xb0;
  x4[8 + 85] = 0x3e;
  const std::vector<uint8_t> px = PackAsColumn(WeightFormat::kIQ4_XS, x4, 20);
  EXPECT_EQ(px[2 * 20 + 1], 0x40);
  for (int s = 0; s < 16; ++s) {
    EXPECT_EQ(static_cast<int8_t>(px[64 + s * 32 + 20]), s / 2 == 5 ? 11 : -32) << s;
  }
  // k-row 165: quad 41, t = 1; column 20: byte 4 (20 % 16) + 1 = 17 of the
  // quad, high nibble. k-row 181: quad 45, t = 1, byte 17, high nibble.
  for (int i = 0; i < 4096; ++i) {
    const int want = i == 41 * 64 + 17 ? 14 << 4 : i == 45 * 64 + 17 ? 3 << 4 : 0;
    EXPECT_EQ(px[576 + i], want) << "iq4_xs quad byte " << i;
  }
  EXPECT_EQ(KQuantAt(WeightFormat::kIQ4_XS, px.data(), 165, 20), 14);
  DequantizePackedRow(WeightFormat::kIQ4_XS, px.data(), 21, 256, 20, row);
  EXPECT_EQ(row[165], 2.0f * 11 * 89);
  EXPECT_EQ(row[181], 2.0f * 11 * -65);
  EXPECT_EQ(row[180], 2.0f * 11 * -127);
  EXPECT_EQ(row[0], 2.0f * -32 * -127);  // ls 0, quant 0
}

// The K-quants dequantize as gguf-py does (committed fixture blocks), both
// through the packed layout and through the independent decoder.
TEST(WeightFormatTest, KQuantDequantizationMatchesGguf) {
  const int64_t n = quant_fixture::kKqN, k = quant_fixture::kKqK;
  const struct {
    WeightFormat f;
    const uint8_t* blocks;
    const uint32_t* values;
  } cases[] = {
      {WeightFormat::kQ4_K, quant_fixture::kQ4_K, quant_fixture::kQ4_KValues},
      {WeightFormat::kQ5_K, quant_fixture::kQ5_K, quant_fixture::kQ5_KValues},
      {WeightFormat::kQ6_K, quant_fixture::kQ6_K, quant_fixture::kQ6_KValues},
      {WeightFormat::kQ3_K, quant_fixture::kQ3_K, quant_fixture::kQ3_KValues},
      {WeightFormat::kIQ4_NL, quant_fixture::kIQ4_NL, quant_fixture::kIQ4_NLValues},
      {WeightFormat::kIQ4_XS, quant_fixture::kIQ4_XS, quant_fixture::kIQ4_XSValues},
  };
  for (const auto& c : cases) {
    const int64_t row_bytes = GgmlRowBytes(c.f, k);
    std::vector<uint8_t> packed(PackedWeightBytes(c.f, n, k));
    PackWeightsFromBlocks(c.f, c.blocks, n, k, static_cast<size_t>(row_bytes), packed.data());
    std::vector<float> got(k);
    for (int64_t r = 0; r < n; ++r) {
      DequantizePackedRow(c.f, packed.data(), n, k, r, got.data());
      const std::vector<float> independent = DecodeGgmlRow(c.f, c.blocks + r * row_bytes, k);
      for (int64_t i = 0; i < k; ++i) {
        ASSERT_EQ(Bits(got[i]), c.values[r * k + i])
            << WeightFormatName(c.f) << " " << r << " " << i;
        ASSERT_EQ(Bits(independent[i]), c.values[r * k + i]) << WeightFormatName(c.f);
      }
    }
  }
}

// PackWeightsFrom quantizes exactly as gguf-py (= ggml's reference) does.
TEST(WeightFormatTest, QuantizationMatchesGguf) {
  const std::vector<float> w = FixtureMatrix();
  const int64_t n = quant_fixture::kN, k = quant_fixture::kK;
  for (WeightFormat f :
       {WeightFormat::kQ8_0, WeightFormat::kQ4_0, WeightFormat::kQ4_1, WeightFormat::kQ5_0,
        WeightFormat::kQ5_1, WeightFormat::kF16, WeightFormat::kBF16}) {
    const int64_t row_bytes = GgmlRowBytes(f, k);
    const uint8_t* want = FixtureBlocks(f);
    std::vector<uint8_t> row(row_bytes);
    for (int64_t r = 0; r < n; ++r) {
      QuantizeRowGgml(f, w.data() + r * k, k, row.data());
      for (int64_t i = 0; i < row_bytes; ++i) {
        ASSERT_EQ(row[i], want[r * row_bytes + i])
            << WeightFormatName(f) << " row " << r << " byte " << i;
      }
    }
    std::vector<uint8_t> from_blocks(PackedWeightBytes(f, n, k));
    PackWeightsFromBlocks(f, want, n, k, static_cast<size_t>(row_bytes), from_blocks.data());
    EXPECT_EQ(PackFrom(f, w, n, k), from_blocks) << WeightFormatName(f);
  }
}

TEST(WeightFormatTest, F32FormatIsPackWeights) {
  const int64_t n = 37, k = 5;
  std::vector<float> w(n * k);
  for (int64_t i = 0; i < n * k; ++i) w[i] = static_cast<float>(i) * 0.5f - 3.0f;
  std::vector<float> want(PackedWeightFloats(n, k));
  PackWeights(w.data(), n, k, want.data());
  std::vector<uint8_t> got = PackFrom(WeightFormat::kF32, w, n, k);
  ASSERT_EQ(got.size(), want.size() * 4);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size()));
  std::vector<float> row(k);
  DequantizePackedRow(WeightFormat::kF32, got.data(), n, k, 36, row.data());
  for (int64_t i = 0; i < k; ++i) EXPECT_EQ(row[i], w[36 * k + i]);
}

// Quantization error bounds: what a q format loses is at most half a step.
TEST(WeightFormatTest, QuantizationError) {
  std::mt19937 rng(9);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  const int64_t n = 40, k = 128;
  std::vector<float> w(n * k);
  for (auto& x : w) x = dist(rng);
  for (WeightFormat f : kGroupFormats) {
    std::vector<uint8_t> packed = PackFrom(f, w, n, k);
    std::vector<float> row(k);
    for (int64_t r = 0; r < n; ++r) {
      DequantizePackedRow(f, packed.data(), n, k, r, row.data());
      for (int64_t b = 0; b < k / 32; ++b) {
        float lo = INFINITY, hi = -INFINITY, amax = 0.0f;
        for (int i = 0; i < 32; ++i) {
          const float x = w[r * k + b * 32 + i];
          lo = std::min(lo, x);
          hi = std::max(hi, x);
          amax = std::max(amax, std::fabs(x));
        }
        const bool offset = QuantGroupQuantOffset(f) != 0;  // q4_0, q5_0
        const float step = f == WeightFormat::kQ8_0 ? amax / 127
                           : offset                 ? amax / QuantGroupQuantOffset(f)
                                                    : (hi - lo) / MaxQuant(f);
        for (int i = 0; i < 32; ++i) {
          const float x = w[r * k + b * 32 + i];
          // Half a step, the f16 rounding of the scale (and min) over up to
          // 32 steps, and q4_0's / q5_0's one-sided clamp at the top (a full
          // step).
          const float tol =
              (offset ? 1.0f : 0.5f) * step + 33 * step * 0x1p-10f + std::fabs(lo) * 0x1p-10f;
          ASSERT_NEAR(row[b * 32 + i], x, tol) << WeightFormatName(f) << " " << r << " " << b;
        }
      }
    }
  }
}

}  // namespace
}  // namespace xrt
