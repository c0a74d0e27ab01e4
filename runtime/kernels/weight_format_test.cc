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
#include "tests/fixtures/quant/ggml_blocks.h"

namespace xrt {
namespace {

constexpr WeightFormat kAllFormats[] = {WeightFormat::kF32,  WeightFormat::kF16,
                                        WeightFormat::kBF16, WeightFormat::kQ8_0,
                                        WeightFormat::kQ4_0, WeightFormat::kQ4_1};

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// ---- An independent decoder of ggml's row-major encodings (block layouts as
// in ggml-common.h: q8_0 {f16 d; int8 qs[32]}, q4_0 {f16 d; uint8 qs[16]},
// q4_1 {f16 d; f16 m; uint8 qs[16]}, nibble i of a q4 block: low nibble of
// byte i for i < 16, high nibble of byte i - 16 otherwise), with its own f16
// decoding by arithmetic.
float DecodeHalf(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 31) return m ? std::numeric_limits<float>::quiet_NaN() : sign * INFINITY;
  if (e == 0) return sign * static_cast<float>(m) * 0x1p-24f;
  return sign * std::ldexp(1.0f + static_cast<float>(m) / 1024.0f, e - 15);
}
uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

std::vector<float> DecodeGgmlRow(WeightFormat f, const uint8_t* row, int64_t k) {
  std::vector<float> out(k);
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
      case WeightFormat::kQ4_1: {
        const uint8_t* blk = row + b * 20;
        const int q = j < 16 ? blk[4 + j] & 15 : blk[4 + j - 16] >> 4;
        const float product = static_cast<float>(q) * DecodeHalf(U16(blk));  // exact
        out[i] = product + DecodeHalf(U16(blk + 2));
        break;
      }
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
    case WeightFormat::kF16:
      return quant_fixture::kF16;
    case WeightFormat::kBF16:
      return quant_fixture::kBF16;
    case WeightFormat::kF32:
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
  EXPECT_FALSE(WeightFormatFromName("q4_k", &out));
  EXPECT_FALSE(WeightFormatFromName("", &out));
  EXPECT_EQ(out, WeightFormat::kQ8_0);
  EXPECT_STREQ(WeightFormatName(WeightFormat::kQ4_1), "q4_1");
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
  EXPECT_EQ(GgmlRowBytes(WeightFormat::kBF16, 5), 10);
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
  // Panel 0, group 1: scale (col 20) at 40, min at 64 + 40; k-row 3 byte 4
  // holds column 4 (low: value 3 of row 4, i.e. qs[3] & 15 = 3) and column
  // 20 (high: value 3 of row 20 = 3); k-row 17 takes high nibbles: qs[1] >> 4 = row & 15.
  const uint8_t* p = q41.data() + 640;
  EXPECT_EQ(p[40], 20);
  EXPECT_EQ(p[41], 0x3c);
  EXPECT_EQ(p[64 + 40], 1);
  EXPECT_EQ(p[64 + 41], 20);
  EXPECT_EQ(p[128 + 3 * 16 + 4], 0x33);
  EXPECT_EQ(p[128 + 17 * 16 + 4], (4 & 15) | ((20 & 15) << 4));
  // Panel 1 has only column 0 (row 32): k-row 3 byte 0 is its value 3 in the
  // low nibble and padding (column 16) in the high one; byte 1 is padding.
  EXPECT_EQ(q41[2 * 640 + 128 + 3 * 16], 3);
  EXPECT_EQ(q41[2 * 640 + 128 + 3 * 16 + 1], 0);
  EXPECT_EQ(q41[2 * 640 + 2], 0);  // scale of column 1

  std::vector<uint8_t> bf(PackedWeightBytes(WeightFormat::kBF16, n, 3), 0xEE);
  PackWeightsFromBlocks(WeightFormat::kBF16, rows_bf.data(), n, 3, 6, bf.data());
  EXPECT_EQ(bf[(2 * 32 + 7) * 2], 7);  // k 2, column 7
  EXPECT_EQ(bf[(2 * 32 + 7) * 2 + 1], 2);
  EXPECT_EQ(bf[3 * 64 + (1 * 32 + 0) * 2], 32);  // panel 1, k 1, column 0
  EXPECT_EQ(bf[3 * 64 + (1 * 32 + 1) * 2], 0);
}

// ggml blocks -> panels -> DequantizePackedRow equals the independent decoder
// on random block bytes (every bit pattern of quants and finite scales).
TEST(WeightFormatTest, BlocksRoundTrip) {
  std::mt19937 rng(5);
  for (WeightFormat f : kAllFormats) {
    for (auto [n, k] : {std::pair<int64_t, int64_t>{1, 32}, {31, 64}, {33, 96}, {70, 32}}) {
      const int64_t row_bytes = GgmlRowBytes(f, k);
      std::vector<uint8_t> blocks(n * row_bytes);
      for (auto& b : blocks) b = static_cast<uint8_t>(rng());
      // Keep 16-bit values finite (NaN payloads are not the point here).
      const bool sixteen = f == WeightFormat::kF16 || f == WeightFormat::kBF16;
      const bool f32 = f == WeightFormat::kF32;
      for (int64_t r = 0; r < n; ++r) {
        uint8_t* row = blocks.data() + r * row_bytes;
        if (sixteen) {
          for (int64_t i = 0; i < k; ++i) row[2 * i + 1] &= 0x3f;
        } else if (f32) {
          for (int64_t i = 0; i < k; ++i) row[4 * i + 3] &= 0x3f;
        } else {
          const int64_t bb = row_bytes / (k / 32);
          for (int64_t b = 0; b < k / 32; ++b) {
            row[b * bb + 1] &= 0x3f;
            if (f == WeightFormat::kQ4_1) row[b * bb + 3] &= 0x3f;
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

// PackWeightsFrom quantizes exactly as gguf-py (= ggml's reference) does.
TEST(WeightFormatTest, QuantizationMatchesGguf) {
  const std::vector<float> w = FixtureMatrix();
  const int64_t n = quant_fixture::kN, k = quant_fixture::kK;
  for (WeightFormat f : {WeightFormat::kQ8_0, WeightFormat::kQ4_0, WeightFormat::kQ4_1,
                         WeightFormat::kF16, WeightFormat::kBF16}) {
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
  for (WeightFormat f : {WeightFormat::kQ8_0, WeightFormat::kQ4_0, WeightFormat::kQ4_1}) {
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
        const float step = f == WeightFormat::kQ8_0   ? amax / 127
                           : f == WeightFormat::kQ4_0 ? amax / 8
                                                      : (hi - lo) / 15;
        for (int i = 0; i < 32; ++i) {
          const float x = w[r * k + b * 32 + i];
          // Half a step, the f16 rounding of the scale (and min) over up to
          // 16 steps, and q4_0's one-sided clamp at +8 (a full step).
          const float tol = (f == WeightFormat::kQ4_0 ? 1.0f : 0.5f) * step + 17 * step * 0x1p-10f +
                            std::fabs(lo) * 0x1p-10f;
          ASSERT_NEAR(row[b * 32 + i], x, tol) << WeightFormatName(f) << " " << r << " " << b;
        }
      }
    }
  }
}

}  // namespace
}  // namespace xrt
