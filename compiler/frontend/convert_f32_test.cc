#include <cmath>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "compiler/frontend/model_source.h"
#include "compiler/frontend/source_dtype.h"
#include "compiler/frontend/test_util.h"
#include "tests/fixtures/quant/ggml_blocks.h"

namespace xcc {
namespace {

using testing::Append;

std::vector<float> Convert(SourceDType t, const std::string& bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n), NAN);
  Status s =
      ConvertToF32(t, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), n, out.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST(ConvertToF32Test, Half) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x0200), std::ldexp(1.0f, -15));  // subnormal
  EXPECT_EQ(HalfToFloat(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_TRUE(std::isinf(HalfToFloat(0xfc00)) && HalfToFloat(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
}

TEST(ConvertToF32Test, PlainTypes) {
  std::string f16;
  for (uint16_t h : {0x3c00, 0xc000, 0x3800}) Append<uint16_t>(&f16, h);
  EXPECT_EQ(Convert(SourceDType::kF16, f16, 3), (std::vector<float>{1, -2, 0.5}));

  std::string bf16;
  for (uint16_t h : {0x3f80, 0xc040, 0x4120}) Append<uint16_t>(&bf16, h);
  EXPECT_EQ(Convert(SourceDType::kBF16, bf16, 3), (std::vector<float>{1, -3, 10}));

  EXPECT_EQ(Convert(SourceDType::kF32, testing::Bytes(std::vector<float>{1.5f, -7}), 2),
            (std::vector<float>{1.5f, -7}));
  EXPECT_EQ(Convert(SourceDType::kF64, testing::Bytes(std::vector<double>{0.25, -1e3}), 2),
            (std::vector<float>{0.25f, -1000}));
  EXPECT_EQ(Convert(SourceDType::kI32, testing::Bytes(std::vector<int32_t>{-5, 7}), 2),
            (std::vector<float>{-5, 7}));
  EXPECT_EQ(Convert(SourceDType::kI8, testing::Bytes(std::vector<int8_t>{-128, 127}), 2),
            (std::vector<float>{-128, 127}));
  EXPECT_EQ(Convert(SourceDType::kU8, testing::Bytes(std::vector<uint8_t>{255, 3}), 2),
            (std::vector<float>{255, 3}));
  EXPECT_EQ(Convert(SourceDType::kBool, testing::Bytes(std::vector<uint8_t>{0, 2}), 2),
            (std::vector<float>{0, 1}));
}

TEST(ConvertToF32Test, Q8_0) {
  std::string b;
  Append<uint16_t>(&b, 0x3800);  // d = 0.5
  for (int j = 0; j < 32; ++j) Append<int8_t>(&b, static_cast<int8_t>(j * 8 - 128));
  std::vector<float> y = Convert(SourceDType::kQ8_0, b, 32);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[31], 60.0f);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 8 - 128) * 0.5f) << j;
}

TEST(ConvertToF32Test, Q4_0) {
  std::string b;
  Append<uint16_t>(&b, 0x4000);  // d = 2
  for (int j = 0; j < 16; ++j) Append<uint8_t>(&b, static_cast<uint8_t>(j | ((15 - j) << 4)));
  std::vector<float> y = Convert(SourceDType::kQ4_0, b, 32);
  EXPECT_EQ(y[0], -16.0f);   // (0 - 8) * 2
  EXPECT_EQ(y[15], 14.0f);   // (15 - 8) * 2
  EXPECT_EQ(y[16], 14.0f);   // high nibble of byte 0: 15
  EXPECT_EQ(y[31], -16.0f);  // high nibble of byte 15: 0
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 2.0f);
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 2.0f);
  }
}

TEST(ConvertToF32Test, Q4_1TwoBlocks) {
  std::string b;
  for (int blk = 0; blk < 2; ++blk) {
    Append<uint16_t>(&b, blk == 0 ? 0x3800 : 0x3c00);  // d = 0.5, 1
    Append<uint16_t>(&b, 0xbc00);                      // m = -1
    for (int j = 0; j < 16; ++j) Append<uint8_t>(&b, static_cast<uint8_t>(j | (3 << 4)));
  }
  std::vector<float> y = Convert(SourceDType::kQ4_1, b, 64);
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[15], 6.5f);     // 15 * 0.5 - 1
  EXPECT_EQ(y[16], 0.5f);     // 3 * 0.5 - 1
  EXPECT_EQ(y[32 + 15], 14);  // 15 * 1 - 1
  EXPECT_EQ(y[32 + 31], 2);   // 3 - 1
}

TEST(ConvertToF32Test, Q5_0AndQ5_1) {
  std::string b;
  Append<uint16_t>(&b, 0x3c00);                            // d = 1
  Append<uint32_t>(&b, (1u << 0) | (1u << 17));            // 5th bit of values 0 and 17
  for (int j = 0; j < 16; ++j) Append<uint8_t>(&b, 0x21);  // low 1, high 2
  std::vector<float> y = Convert(SourceDType::kQ5_0, b, 32);
  EXPECT_EQ(y[0], 1.0f);     // (1 | 16) - 16
  EXPECT_EQ(y[1], -15.0f);   // 1 - 16
  EXPECT_EQ(y[16], -14.0f);  // 2 - 16
  EXPECT_EQ(y[17], 2.0f);    // (2 | 16) - 16

  std::string c;
  Append<uint16_t>(&c, 0x4000);  // d = 2
  Append<uint16_t>(&c, 0x3800);  // m = 0.5
  Append<uint32_t>(&c, (1u << 3) | (1u << 31));
  for (int j = 0; j < 16; ++j) Append<uint8_t>(&c, 0xf0);  // low 0, high 15
  y = Convert(SourceDType::kQ5_1, c, 32);
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[3], 32.5f);   // 16 * 2 + 0.5
  EXPECT_EQ(y[16], 30.5f);  // 15 * 2 + 0.5
  EXPECT_EQ(y[31], 62.5f);  // 31 * 2 + 0.5
}

TEST(ConvertToF32Test, Q2_K) {
  std::string b;
  // Sub-block i: scale (i % 8) + 1, min 1.
  for (int i = 0; i < 16; ++i) Append<uint8_t>(&b, static_cast<uint8_t>((i % 8 + 1) | (1 << 4)));
  for (int i = 0; i < 64; ++i) Append<uint8_t>(&b, 0xe4);  // planes 0,1,2,3 hold 0,1,2,3
  Append<uint16_t>(&b, 0x3c00);                            // d = 1
  Append<uint16_t>(&b, 0x3800);                            // dmin = 0.5
  std::vector<float> y = Convert(SourceDType::kQ2_K, b, 256);
  EXPECT_EQ(y[0], -0.5f);  // scale 1 * 0 - 0.5
  EXPECT_EQ(y[16], -0.5f);
  EXPECT_EQ(y[32], 2.5f);    // plane 1, sub-block 2 (scale 3): 3 * 1 - 0.5
  EXPECT_EQ(y[112], 23.5f);  // plane 3, sub-block 7 (scale 8): 8 * 3 - 0.5
  EXPECT_EQ(y[160], 2.5f);   // second half, plane 1, sub-block 10 (scale 3)
  EXPECT_EQ(y[255], 23.5f);  // second half, plane 3, sub-block 15 (scale 8)
}

TEST(ConvertToF32Test, Q3_K) {
  std::string b;
  for (int i = 0; i < 32; ++i) Append<uint8_t>(&b, i == 0 ? 0xfe : 0xff);  // hmask
  for (int i = 0; i < 64; ++i) Append<uint8_t>(&b, 0xe4);                  // qs
  // Scales: all 33 (effective 1) except scale 15 = 37 (effective 5).
  for (int i = 0; i < 8; ++i) Append<uint8_t>(&b, i == 7 ? 0x51 : 0x11);
  for (int i = 0; i < 4; ++i) Append<uint8_t>(&b, 0xaa);
  Append<uint16_t>(&b, 0x3c00);  // d = 1
  std::vector<float> y = Convert(SourceDType::kQ3_K, b, 256);
  EXPECT_EQ(y[0], -4.0f);  // 0 with the high bit clear: 0 - 4
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[32], 1.0f);  // plane 1, hmask[0] bit 1 set
  EXPECT_EQ(y[96], 3.0f);
  EXPECT_EQ(y[239], 3.0f);   // scale 14: 1 * 3
  EXPECT_EQ(y[255], 15.0f);  // scale 15: 5 * 3
}

std::string K4Scales() {
  std::string s;
  // sub-blocks 0..3: scale 2, min 1; 4..7: scale 3 | (top bits) , min 1.
  for (int i = 0; i < 4; ++i)
    Append<uint8_t>(&s, i == 0 ? 0x42 : 0x02);  // byte 0 top bits -> sub 4 scale + 16
  for (int i = 0; i < 4; ++i) Append<uint8_t>(&s, 0x01);
  for (int i = 0; i < 4; ++i) Append<uint8_t>(&s, 0x13);
  return s;
}

TEST(ConvertToF32Test, Q4_K) {
  std::string b;
  Append<uint16_t>(&b, 0x3c00);  // d = 1
  Append<uint16_t>(&b, 0x3c00);  // dmin = 1
  b += K4Scales();
  for (int i = 0; i < 128; ++i) Append<uint8_t>(&b, 0x21);
  std::vector<float> y = Convert(SourceDType::kQ4_K, b, 256);
  EXPECT_EQ(y[0], 1.0f);     // 2 * 1 - 1
  EXPECT_EQ(y[32], 3.0f);    // 2 * 2 - 1
  EXPECT_EQ(y[128], 18.0f);  // sub 4: scale 19 * 1 - 1
  EXPECT_EQ(y[160], 5.0f);   // sub 5: 3 * 2 - 1
  EXPECT_EQ(y[255], 5.0f);
}

TEST(ConvertToF32Test, Q5_K) {
  std::string b;
  Append<uint16_t>(&b, 0x3c00);
  Append<uint16_t>(&b, 0x3c00);
  b += K4Scales();
  for (int i = 0; i < 32; ++i) Append<uint8_t>(&b, i == 0 ? 0x09 : 0x00);  // bits 0 and 3 of qh[0]
  for (int i = 0; i < 128; ++i) Append<uint8_t>(&b, 0x21);
  std::vector<float> y = Convert(SourceDType::kQ5_K, b, 256);
  EXPECT_EQ(y[0], 33.0f);  // 2 * (1 + 16) - 1
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[32], 3.0f);
  EXPECT_EQ(y[96], 35.0f);  // sub 3 (high nibbles of chunk 1): 2 * (2 + 16) - 1
  EXPECT_EQ(y[128], 18.0f);
}

TEST(ConvertToF32Test, Q6_K) {
  std::string b;
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 32; ++i) Append<uint8_t>(&b, 0x21);
    for (int i = 0; i < 32; ++i) Append<uint8_t>(&b, 0x43);
  }
  for (int i = 0; i < 64; ++i) Append<uint8_t>(&b, 0xe4);
  for (int i = 0; i < 16; ++i) Append<int8_t>(&b, static_cast<int8_t>(i - 8));
  Append<uint16_t>(&b, 0x3800);  // d = 0.5
  std::vector<float> y = Convert(SourceDType::kQ6_K, b, 256);
  EXPECT_EQ(y[0], 124.0f);   // 0.5 * -8 * (1 - 32)
  EXPECT_EQ(y[48], 32.5f);   // 0.5 * -5 * ((3 | 1 << 4) - 32)
  EXPECT_EQ(y[64], -4.0f);   // 0.5 * -4 * ((2 | 2 << 4) - 32)
  EXPECT_EQ(y[255], 70.0f);  // 0.5 * 7 * ((4 | 3 << 4) - 32)
}

TEST(ConvertToF32Test, Q8_K) {
  std::string b;
  Append<float>(&b, 0.25f);
  for (int i = 0; i < 256; ++i) Append<int8_t>(&b, static_cast<int8_t>(i));
  for (int i = 0; i < 16; ++i) Append<int16_t>(&b, 0);
  std::vector<float> y = Convert(SourceDType::kQ8_K, b, 256);
  EXPECT_EQ(y[1], 0.25f);
  EXPECT_EQ(y[127], 31.75f);
  EXPECT_EQ(y[128], -32.0f);
  EXPECT_EQ(y[255], -0.25f);
}

TEST(ConvertToF32Test, WrongByteSizeIsAnError) {
  std::vector<float> out(64);
  std::string b(35, '\0');
  Status s = ConvertToF32(SourceDType::kQ8_0, reinterpret_cast<const uint8_t*>(b.data()), b.size(),
                          32, out.data());
  EXPECT_EQ(s.code(), xrt::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("Q8_0"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("34"), std::string::npos) << s.message();
  // Not a multiple of the block size.
  s = ConvertToF32(SourceDType::kQ4_1, reinterpret_cast<const uint8_t*>(b.data()), 20, 31,
                   out.data());
  EXPECT_FALSE(s.ok());
  s = ConvertToF32(SourceDType::kF32, reinterpret_cast<const uint8_t*>(b.data()), 12, 2,
                   out.data());
  EXPECT_FALSE(s.ok());
}

TEST(ConvertToF32Test, LayoutSizes) {
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ4_0).block_bytes, 18u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ4_1).block_bytes, 20u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ5_0).block_bytes, 22u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ5_1).block_bytes, 24u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ8_0).block_bytes, 34u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ2_K).block_bytes, 84u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ3_K).block_bytes, 110u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ4_K).block_bytes, 144u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ5_K).block_bytes, 176u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ6_K).block_bytes, 210u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kQ8_K).block_bytes, 292u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kIQ4_NL).block_bytes, 18u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kIQ4_NL).block_elems, 32);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kIQ4_XS).block_bytes, 136u);
  EXPECT_EQ(GetDTypeLayout(SourceDType::kIQ4_XS).block_elems, 256);
}

TEST(ConvertToF32Test, IQ4_NL) {
  std::string b;
  Append<uint16_t>(&b, 0x4000);                                         // d = 2
  for (int j = 0; j < 16; ++j) Append<uint8_t>(&b, j | (15 - j) << 4);  // value j, then 15 - j
  std::vector<float> y = Convert(SourceDType::kIQ4_NL, b, 32);
  EXPECT_EQ(y[0], -254.0f);  // index 0: -127
  EXPECT_EQ(y[8], 2.0f);     // index 8: 1
  EXPECT_EQ(y[15], 226.0f);  // index 15: 113
  EXPECT_EQ(y[16], 226.0f);  // high nibble of byte 0: index 15
  EXPECT_EQ(y[31], -254.0f);
}

TEST(ConvertToF32Test, IQ4_XS) {
  std::string b;
  Append<uint16_t>(&b, 0x3800);  // d = 0.5
  // ls of sub-block i: the low nibble from scales_l, the high 2 bits from bits 2i of
  // scales_h. Sub-block 0: low 1, high 2: 33 (dl = 0.5); sub-block 3: low 15, high 1:
  // 31 (dl = -0.5); sub-block 7: low 0, high 3: 48 (dl = 8).
  Append<uint16_t>(&b, static_cast<uint16_t>(2 << 0 | 1 << 6 | 3 << 14));
  Append<uint8_t>(&b, 0x01);  // scales_l[0]: sub-block 0 low 1, sub-block 1 low 0
  Append<uint8_t>(&b, 0xf0);  // sub-block 3 low nibble f
  Append<uint8_t>(&b, 0x00);
  Append<uint8_t>(&b, 0x00);                                // sub-block 7 low nibble 0
  for (int i = 0; i < 128; ++i) Append<uint8_t>(&b, 0x9f);  // low index 15 (113), high 9 (13)
  std::vector<float> y = Convert(SourceDType::kIQ4_XS, b, 256);
  EXPECT_EQ(y[0], 0.5f * 113);
  EXPECT_EQ(y[16], 0.5f * 13);
  EXPECT_EQ(y[96], -0.5f * 113);  // sub-block 3: ls 31
  EXPECT_EQ(y[224], 8.0f * 113);  // sub-block 7: ls 48
  EXPECT_EQ(y[255], 8.0f * 13);
}

// ConvertToF32 gives gguf-py's dequantization of random IQ4_NL / IQ4_XS blocks
// bit for bit (tests/gen_quant_fixtures.py).
TEST(ConvertToF32Test, IQ4MatchesGguf) {
  const int64_t n = quant_fixture::kKqN * quant_fixture::kKqK;
  for (auto [t, blocks, values] :
       {std::tuple{SourceDType::kIQ4_NL, quant_fixture::kIQ4_NL, quant_fixture::kIQ4_NLValues},
        std::tuple{SourceDType::kIQ4_XS, quant_fixture::kIQ4_XS, quant_fixture::kIQ4_XSValues}}) {
    const size_t bytes = *DTypeNBytes(t, n);
    std::vector<float> y(static_cast<size_t>(n));
    ASSERT_TRUE(ConvertToF32(t, blocks, bytes, n, y.data()).ok());
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &y[i], 4);
      ASSERT_EQ(bits, values[i]) << SourceDTypeName(t) << " value " << i;
    }
  }
}

}  // namespace
}  // namespace xcc
