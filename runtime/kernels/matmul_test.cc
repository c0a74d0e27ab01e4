#include "runtime/kernels/matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernels/test_util.h"
#if defined(XRT_SIMD_EMULATE)
#include "runtime/kernels/simd.h"  // the emulated AMX instructions
#endif

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace xrt {
namespace {

using testing::SupportedIsas;

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<float> Pack(const std::vector<float>& w, int64_t n, int64_t k) {
  std::vector<float> packed(PackedWeightFloats(n, k), -7.0f);
  PackWeights(w.data(), n, k, packed.data());
  return packed;
}

TEST(PackWeightsTest, LayoutAndZeroPadding) {
  const int64_t n = 37, k = 5;
  std::vector<float> w(n * k);
  for (int64_t i = 0; i < n * k; ++i) w[i] = static_cast<float>(i + 1);
  ASSERT_EQ(PackedWeightFloats(n, k), 2 * kPackNR * k);
  std::vector<float> packed = Pack(w, n, k);
  for (int64_t p = 0; p < 2; ++p) {
    for (int64_t kk = 0; kk < k; ++kk) {
      for (int j = 0; j < kPackNR; ++j) {
        const int64_t row = p * kPackNR + j;
        const float want = row < n ? w[row * k + kk] : 0.0f;
        EXPECT_EQ(packed[(p * k + kk) * kPackNR + j], want) << p << " " << kk << " " << j;
      }
    }
  }
  EXPECT_EQ(PackedWeightFloats(0, 10), 0);
  EXPECT_EQ(PackedWeightFloats(32, 3), 32 * 3);
  EXPECT_EQ(PackedWeightFloats(33, 3), 64 * 3);
}

// PackWeights (16 x 16 transposes where the CPU has AVX-512), PackWeightRows on
// rows scattered a stride apart and PackWeightColumns on the transpose's rows
// all write the layout above, element by element, on shapes around the 16-row
// blocks, 32-column panels and 16-value k-blocks.
TEST(PackWeightsTest, RowsAndColumnsGiveTheSameLayout) {
  for (int64_t n : {1, 15, 16, 17, 32, 33, 70}) {
    for (int64_t k : {1, 15, 16, 33, 64}) {
      const std::vector<float> w = RandomVector(n * k, static_cast<uint32_t>(n * 100 + k));
      std::vector<float> want(PackedWeightFloats(n, k), 0.0f);
      for (int64_t j = 0; j < n; ++j)
        for (int64_t kk = 0; kk < k; ++kk)
          want[(j / kPackNR * k + kk) * kPackNR + j % kPackNR] = w[j * k + kk];
      EXPECT_EQ(Pack(w, n, k), want) << n << " x " << k;

      const int64_t stride = k + 3;  // rows 3 floats apart, then backwards
      std::vector<float> spread(n * stride, NAN), wt(k * n);
      std::vector<const float*> rows(n), cols(k);
      for (int64_t j = 0; j < n; ++j) {
        std::copy(&w[j * k], &w[(j + 1) * k], &spread[(n - 1 - j) * stride]);
        rows[j] = &spread[(n - 1 - j) * stride];
        for (int64_t kk = 0; kk < k; ++kk) wt[kk * n + j] = w[j * k + kk];
      }
      for (int64_t kk = 0; kk < k; ++kk) cols[kk] = &wt[kk * n];
      std::vector<float> got(want.size(), -7.0f);
      PackWeightRows(rows.data(), n, k, got.data());
      EXPECT_EQ(got, want) << "rows " << n << " x " << k;
      std::fill(got.begin(), got.end(), -7.0f);
      PackWeightColumns(cols.data(), n, k, got.data());
      EXPECT_EQ(got, want) << "columns " << n << " x " << k;
    }
  }
}

struct Case {
  int64_t m, n, k;
  bool bias, accumulate;
  int64_t lda_pad, ldc_pad;
};

std::string CaseName(const Case& c, CpuIsa isa, int threads) {
  return std::string(CpuIsaName(isa)) + " m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
         " k=" + std::to_string(c.k) + " bias=" + std::to_string(c.bias) +
         " acc=" + std::to_string(c.accumulate) + " threads=" + std::to_string(threads);
}

// Runs one case on `isa` and checks it against a double-precision reference
// with an error bound of a K-term f32 dot product. Stores C in `out` (if not
// null) for cross-checks.
void RunAndCheck(const Case& cs, CpuIsa isa, ThreadPool* pool, uint32_t seed,
                 std::vector<float>* out = nullptr) {
  const int64_t lda = cs.k + cs.lda_pad, ldc = cs.n + cs.ldc_pad;
  std::vector<float> a = RandomVector(std::max<int64_t>(cs.m * lda, 1), seed);
  std::vector<float> w = RandomVector(std::max<int64_t>(cs.n * cs.k, 1), seed + 1);
  std::vector<float> bias = RandomVector(cs.n, seed + 2);
  std::vector<float> c0 = RandomVector(cs.m * ldc, seed + 3);
  std::vector<float> packed = Pack(w, cs.n, cs.k);
  packed.push_back(0.0f);  // keep data() valid when empty

  std::vector<float> c = c0;
  MatmulArgs args;
  args.a = a.data();
  args.lda = lda;
  args.packed_w = packed.data();
  args.bias = cs.bias ? bias.data() : nullptr;
  args.c = c.data();
  args.ldc = ldc;
  args.m = cs.m;
  args.n = cs.n;
  args.k = cs.k;
  args.accumulate = cs.accumulate;
  MatmulWithIsa(args, pool, isa);

  const std::string name = CaseName(cs, isa, pool ? pool->num_threads() : 1);
  for (int64_t i = 0; i < cs.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const float got = c[i * ldc + j];
      if (j >= cs.n) {  // padding columns of C are untouched
        ASSERT_EQ(got, c0[i * ldc + j]) << name << " wrote past N at " << i << "," << j;
        continue;
      }
      double ref = 0.0, mag = 0.0;
      for (int64_t kk = 0; kk < cs.k; ++kk) {
        const double p = static_cast<double>(a[i * lda + kk]) * w[j * cs.k + kk];
        ref += p;
        mag += std::fabs(p);
      }
      if (cs.bias) {
        ref += bias[j];
        mag += std::fabs(bias[j]);
      }
      if (cs.accumulate) {
        ref += c0[i * ldc + j];
        mag += std::fabs(c0[i * ldc + j]);
      }
      const double tol = 2.0 * (cs.k + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
      ASSERT_NEAR(got, ref, tol) << name << " at " << i << "," << j;
    }
  }
  if (out) *out = std::move(c);
}

TEST(MatmulTest, MatchesReferenceOnEveryIsa) {
  std::vector<Case> cases;
  for (int64_t m : {1, 2, 5, 11, 12, 13, 25, 37})
    for (int64_t n : {1, 7, 16, 31, 32, 33, 65, 100})
      for (int64_t k : {0, 1, 3, 17, 64, 129, 300}) {
        const int variant = static_cast<int>((m * 7 + n * 3 + k) % 4);
        cases.push_back(
            {m, n, k, (variant & 1) != 0, (variant & 2) != 0, (m + k) % 3, (n + m) % 2 * 5});
      }
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (const Case& cs : cases) {
    std::vector<float> first;
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> c1, c2;
      RunAndCheck(cs, isa, nullptr, seed, &c1);
      RunAndCheck(cs, isa, &pool, seed, &c2);
      ASSERT_EQ(0, std::memcmp(c1.data(), c2.data(), c1.size() * sizeof(float)))
          << CaseName(cs, isa, 2) << ": 1 thread vs 2 threads differ";
      // All paths use the same fma chain per element, so they agree bitwise.
      if (first.empty()) {
        first = c1;
      } else {
        ASSERT_EQ(0, std::memcmp(first.data(), c1.data(), c1.size() * sizeof(float)))
            << CaseName(cs, isa, 1) << ": differs from the scalar path";
      }
    }
    if (HasFailure()) return;
    seed += 4;
  }
}

TEST(MatmulTest, PrefillShapesMatchReference) {
  ThreadPool pool(2);
  for (CpuIsa isa : SupportedIsas()) {
    RunAndCheck({128, 576, 576, true, false, 0, 0}, isa, &pool, 11);
    RunAndCheck({200, 100, 1536, false, true, 3, 1}, isa, &pool, 12);
    // K large enough that a row block holds fewer rows than M.
    RunAndCheck({300, 40, 4000, true, true, 0, 0}, isa, &pool, 13);
  }
}

// Row `row` of the product of `rows` (an M x K matrix) with W, via Matmul.
std::vector<float> ProductRow(const std::vector<float>& rows, int64_t m, int64_t row,
                              const std::vector<float>& packed, const std::vector<float>& bias,
                              int64_t n, int64_t k, ThreadPool* pool, CpuIsa isa) {
  std::vector<float> c(m * n, 0.5f);
  MatmulArgs args;
  args.a = rows.data();
  args.lda = k;
  args.packed_w = packed.data();
  args.bias = bias.data();
  args.c = c.data();
  args.ldc = n;
  args.m = m;
  args.n = n;
  args.k = k;
  args.accumulate = true;
  MatmulWithIsa(args, pool, isa);
  return std::vector<float>(c.begin() + row * n, c.begin() + (row + 1) * n);
}

TEST(MatmulTest, BatchInvariance) {
  ThreadPool pool1(1), pool2(2);
  for (auto [n, k] : {std::pair<int64_t, int64_t>{576, 576}, {100, 77}, {65, 2048}}) {
    std::vector<float> w = RandomVector(n * k, 21);
    std::vector<float> packed = Pack(w, n, k);
    std::vector<float> bias = RandomVector(n, 22);
    std::vector<float> x = RandomVector(k, 23);  // the row under test
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> alone = ProductRow(x, 1, 0, packed, bias, n, k, &pool1, isa);
      for (int64_t m : {37, 200}) {
        std::vector<float> batch = RandomVector(m * k, 24 + m);
        for (int64_t row : {int64_t{0}, int64_t{5}, int64_t{12}, m - 1}) {
          std::vector<float> b = batch;
          std::copy(x.begin(), x.end(), b.begin() + row * k);
          for (ThreadPool* pool : {&pool1, &pool2}) {
            std::vector<float> got = ProductRow(b, m, row, packed, bias, n, k, pool, isa);
            ASSERT_EQ(0, std::memcmp(alone.data(), got.data(), n * sizeof(float)))
                << CpuIsaName(isa) << " n=" << n << " k=" << k << " m=" << m << " row=" << row
                << " threads=" << pool->num_threads();
          }
        }
      }
    }
  }
}

// ---- Packed weight formats (weight_format.h): the result on a packed weight
// is bit-identical to the f32 Matmul on its dequantized values, on every ISA
// path, for every M (so batch invariance carries over).

constexpr WeightFormat kPackedFormats[] = {
    WeightFormat::kF16,    WeightFormat::kBF16,      WeightFormat::kQ8_0,
    WeightFormat::kQ4_0,   WeightFormat::kQ4_1,      WeightFormat::kQ5_0,
    WeightFormat::kQ5_1,   WeightFormat::kIQ4_NL,    WeightFormat::kQ3_K,
    WeightFormat::kQ4_K,   WeightFormat::kQ5_K,      WeightFormat::kQ6_K,
    WeightFormat::kIQ4_XS, WeightFormat::kBF16Pairs, WeightFormat::kBF16PairsAmx};

// The formats without a quantizer (PackWeightsFrom): the K-quants and iq4_nl
// (a group format).
bool HasNoQuantizer(WeightFormat f) { return IsKQuantFormat(f) || HasIQ4Table(f); }

// A weight W [n][k] packed in `format` (quantized from random values; the
// formats without a quantizer from random ggml blocks) and
// the same weight dequantized and packed as f32.
struct FormatWeights {
  std::vector<uint8_t> packed;
  std::vector<float> dequantized_f32;  // PackWeights of the dequantized rows
};

FormatWeights MakeFormatWeights(WeightFormat format, int64_t n, int64_t k, uint32_t seed) {
  FormatWeights fw;
  fw.packed.assign(PackedWeightBytes(format, n, k) + 64, 0);
  if (HasNoQuantizer(format)) {
    testing::PackRandomKQuant(format, n, k, seed, fw.packed.data());
  } else {
    const std::vector<float> w = RandomVector(std::max<int64_t>(n * k, 1), seed);
    PackWeightsFrom(format, w.data(), n, k, fw.packed.data());
  }
  std::vector<float> rows(std::max<int64_t>(n * k, 1));
  for (int64_t r = 0; r < n; ++r) {
    DequantizePackedRow(format, fw.packed.data(), n, k, r, rows.data() + r * k);
  }
  fw.dequantized_f32 = Pack(rows, n, k);
  fw.dequantized_f32.push_back(0.0f);
  return fw;
}

// C [m][ldc] (+)= A [m][k] (row stride k + 1) times the packed weight.
void RunFormatInto(const float* a, int64_t m, int64_t n, int64_t k, const void* packed,
                   WeightFormat format, const float* bias, bool accumulate, float* c, int64_t ldc,
                   ThreadPool* pool, CpuIsa isa, ComputeType compute = ComputeType::kF32) {
  MatmulArgs args;
  args.a = a;
  args.lda = k + 1;
  args.packed_w = packed;
  args.w_format = format;
  args.bias = bias;
  args.c = c;
  args.ldc = ldc;
  args.m = m;
  args.n = n;
  args.k = k;
  args.accumulate = accumulate;
  args.compute = compute;
  MatmulWithIsa(args, pool, isa);
}

TEST(MatmulFormatsTest, BitIdenticalToDequantizedF32) {
  ThreadPool pool(2);
  uint32_t seed = 100;
  for (WeightFormat format : kPackedFormats) {
    const int block = WeightFormatBlockSize(format);
    const std::vector<int64_t> ks = block == kSuperBlock ? std::vector<int64_t>{256, 512, 768}
                                    : block > 1          ? std::vector<int64_t>{32, 96, 288}
                                                         : std::vector<int64_t>{1, 7, 32, 300};
    for (int64_t k : ks) {
      for (int64_t n : {1, 31, 33, 70}) {
        const FormatWeights fw = MakeFormatWeights(format, n, k, seed++);
        const std::vector<float> bias = RandomVector(n, seed++);
        for (int64_t m : {1, 2, 13, 29}) {
          const std::vector<float> a = RandomVector(m * (k + 1), seed++);
          const int64_t ldc = n + 3;
          const std::vector<float> c0 = RandomVector(m * ldc, seed++);
          for (int variant = 0; variant < 4; ++variant) {
            const bool with_bias = (variant & 1) != 0, accumulate = (variant & 2) != 0;
            const float* b = with_bias ? bias.data() : nullptr;
            for (CpuIsa isa : SupportedIsas()) {
              std::vector<float> want = c0;
              RunFormatInto(a.data(), m, n, k, fw.dequantized_f32.data(), WeightFormat::kF32, b,
                            accumulate, want.data(), ldc, nullptr, isa);
              for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
                std::vector<float> got = c0;
                RunFormatInto(a.data(), m, n, k, fw.packed.data(), format, b, accumulate,
                              got.data(), ldc, p, isa);
                ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                    << WeightFormatName(format) << " " << CpuIsaName(isa) << " m=" << m
                    << " n=" << n << " k=" << k << " bias=" << with_bias << " acc=" << accumulate
                    << " threads=" << (p ? 2 : 1);
              }
            }
          }
        }
      }
    }
  }
}

// A row computed alone equals the same row in a batch (fused decode kernel
// for up to kGemvMaxRows rows, decoded tiles above), any thread count.
TEST(MatmulFormatsTest, BatchInvariance) {
  ThreadPool pool(2);
  const int64_t n = 70;
  for (WeightFormat format : kPackedFormats) {
    const int64_t k = IsKQuantFormat(format) ? 512 : 288;
    const FormatWeights fw = MakeFormatWeights(format, n, k, 7);
    const std::vector<float> bias = RandomVector(n, 8);
    const std::vector<float> x = RandomVector(k + 1, 9);
    const std::vector<float> c_start = RandomVector(n, 10);
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> alone = c_start;
      RunFormatInto(x.data(), 1, n, k, fw.packed.data(), format, bias.data(), true, alone.data(), n,
                    nullptr, isa);
      for (int64_t rows : {int64_t{2}, int64_t{4}, int64_t{5}, int64_t{29}}) {
        for (int64_t row : {int64_t{0}, rows - 1}) {
          std::vector<float> a = RandomVector(rows * (k + 1), 11);
          std::copy(x.begin(), x.end(), a.begin() + row * (k + 1));
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> c = RandomVector(rows * n, 12);
            std::copy(c_start.begin(), c_start.end(), c.begin() + row * n);
            RunFormatInto(a.data(), rows, n, k, fw.packed.data(), format, bias.data(), true,
                          c.data(), n, p, isa);
            ASSERT_EQ(0, std::memcmp(alone.data(), c.data() + row * n, n * sizeof(float)))
                << WeightFormatName(format) << " " << CpuIsaName(isa) << " rows=" << rows
                << " row=" << row << " threads=" << (p ? 2 : 1);
          }
        }
      }
    }
  }
}

// ---- kBF16 compute: bit-identical to the scalar chain on bf16 operands.

using testing::Bf16ChainDot;
using testing::Bf16IsTheChain;
using testing::Bits;
using testing::FlushToZero;
using testing::FromBits;

TEST(RoundToBf16OperandTest, RoundsToNearestEvenAndFlushesSubnormals) {
  const float one = 1.0f, ulp = std::ldexp(1.0f, -7);  // bf16 spacing at 1
  EXPECT_EQ(RoundToBf16Operand(one), one);
  EXPECT_EQ(RoundToBf16Operand(one + ulp / 2), one);                // tie to even (down)
  EXPECT_EQ(RoundToBf16Operand(one + 3 * ulp / 2), one + 2 * ulp);  // tie to even (up)
  EXPECT_EQ(RoundToBf16Operand(std::nextafter(one + ulp / 2, 2.0f)), one + ulp);
  EXPECT_EQ(RoundToBf16Operand(-(one + 3 * ulp / 2)), -(one + 2 * ulp));
  EXPECT_EQ(Bits(RoundToBf16Operand(-0.0f)), 0x80000000u);
  EXPECT_EQ(RoundToBf16Operand(std::numeric_limits<float>::min()),
            std::numeric_limits<float>::min());
  // Subnormals read as zeros of their sign, however close to 2^-126.
  EXPECT_EQ(Bits(RoundToBf16Operand(FromBits(0x007fffffu))), 0u);
  EXPECT_EQ(Bits(RoundToBf16Operand(FromBits(0x80000001u))), 0x80000000u);
  // The largest bf16 stays; halfway above it, and FLT_MAX, round to infinity.
  EXPECT_EQ(Bits(RoundToBf16Operand(FromBits(0x7f7f0000u))), 0x7f7f0000u);
  EXPECT_EQ(Bits(RoundToBf16Operand(FromBits(0x7f7f8000u))), 0x7f800000u);
  EXPECT_EQ(Bits(RoundToBf16Operand(std::numeric_limits<float>::max())), 0x7f800000u);
  EXPECT_EQ(Bits(RoundToBf16Operand(-std::numeric_limits<float>::infinity())), 0xff800000u);
  // NaNs stay NaNs, whatever their payload (no carry into the sign).
  for (uint32_t nan : {0x7f800001u, 0x7fffffffu, 0xff800001u, 0x7fc00000u})
    EXPECT_TRUE(std::isnan(RoundToBf16Operand(FromBits(nan)))) << std::hex << nan;
  EXPECT_EQ(Bits(RoundToBf16Operand(FromBits(0xff800001u))) >> 31, 1u);
  // Every normal finite value: the weight converter's rounding (FloatToBFloat16).
  std::mt19937 rng(5);
  for (int i = 0; i < 200000; ++i) {
    const float x = FromBits(rng());
    if (!std::isfinite(x) || std::fpclassify(x) == FP_SUBNORMAL) continue;
    ASSERT_EQ(Bits(RoundToBf16Operand(x)), Bits(BFloat16ToFloat(FloatToBFloat16(x))))
        << std::hex << Bits(x);
  }
}

// matmul.h's kBF16 contract computed directly from W's dequantized rows: per
// output the chain of Bf16ChainDot; then the bias and the accumulate, each
// flushed too.
std::vector<float> Bf16Reference(const std::vector<float>& a, int64_t lda,
                                 const std::vector<float>& w_rows, const float* bias,
                                 const std::vector<float>& c0, int64_t ldc, int64_t m, int64_t n,
                                 int64_t k, bool accumulate) {
  std::vector<float> c = c0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const float dot = Bf16ChainDot(a.data() + i * lda, 1, w_rows.data() + j * k, 1, k);
      float v = bias ? FlushToZero(dot + bias[j]) : dot;
      c[i * ldc + j] = accumulate ? FlushToZero(c0[i * ldc + j] + v) : v;
    }
  return c;
}

// `got` against the chain's `want` where kBF16 on `isa` is not the chain
// (Bf16IsTheChain): each output within 2^-18 of its products' magnitudes
// (sum |a w|, the bias and the accumulated C), or 2^-120 near the flushes.
// TDPBF16PS's sums measured 4e-8 of that on random data (the chain's own
// error 1e-7), 1.1e-6 where one product of -3e5 dominates.
void ExpectNearTheBf16Chain(const std::vector<float>& want, const std::vector<float>& got,
                            const std::vector<float>& a, int64_t lda,
                            const std::vector<float>& w_rows, const float* bias,
                            const std::vector<float>& c0, int64_t ldc, int64_t m, int64_t n,
                            int64_t k, bool accumulate, const std::string& what) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double magnitude =
          (bias ? std::fabs(bias[j]) : 0.0) + (accumulate ? std::fabs(c0[i * ldc + j]) : 0.0);
      for (int64_t kk = 0; kk < k; ++kk)
        magnitude += std::fabs(static_cast<double>(a[i * lda + kk]) * w_rows[j * k + kk]);
      ASSERT_NEAR(got[i * ldc + j], want[i * ldc + j],
                  std::max(std::ldexp(magnitude, -18), std::ldexp(1.0, -120)))
          << what << " row " << i << " column " << j;
    }
  }
}

TEST(MatmulBf16Test, BitIdenticalToTheBf16ChainOnEveryPathAndFormat) {
  ThreadPool pool(2);
  uint32_t seed = 300;
  std::vector<WeightFormat> formats = {WeightFormat::kF32};
  formats.insert(formats.end(), std::begin(kPackedFormats), std::end(kPackedFormats));
  for (WeightFormat format : formats) {
    const int block = WeightFormatBlockSize(format);
    const std::vector<int64_t> ks = block == kSuperBlock ? std::vector<int64_t>{256, 512}
                                    : block > 1          ? std::vector<int64_t>{32, 288}
                                                         : std::vector<int64_t>{1, 7, 300, 601};
    for (int64_t k : ks) {
      for (int64_t n : {1, 33, 70}) {
        std::vector<uint8_t> packed;
        std::vector<float> w_rows(std::max<int64_t>(n * k, 1));
        if (format == WeightFormat::kF32) {
          w_rows = RandomVector(std::max<int64_t>(n * k, 1), seed++);
          std::vector<float> p = Pack(w_rows, n, k);
          packed.assign(reinterpret_cast<uint8_t*>(p.data()),
                        reinterpret_cast<uint8_t*>(p.data() + p.size()));
        } else {
          packed = MakeFormatWeights(format, n, k, seed++).packed;
          for (int64_t r = 0; r < n; ++r)
            DequantizePackedRow(format, packed.data(), n, k, r, w_rows.data() + r * k);
        }
        const std::vector<float> bias = RandomVector(n, seed++);
        for (int64_t m : {1, 2, 3, 4, 5, 13, 29}) {
          const int64_t lda = k + 1, ldc = n + 3;  // RunFormatInto's lda
          std::vector<float> a = RandomVector(m * lda, seed++);
          // Operands whose rounding matters: subnormals (read as zero), values
          // halfway between two bf16s, and a large magnitude.
          a[0] = FromBits(0x00400000u);
          if (a.size() > 2) a[1] = 1.0f + std::ldexp(1.0f, -8);
          if (a.size() > 3) a[2] = -3.0e5f;
          std::vector<float> c0 = RandomVector(m * ldc, seed++);
          const bool with_bias = (m + n) % 2 == 0, accumulate = (m + k) % 2 == 1;
          std::vector<float> bias_m = bias;
          // Every other m near 2^-126, so that products, sums, the bias and
          // the accumulate all flush to zero in places.
          if (m % 2 == 1) {
            for (float& x : a) x = std::ldexp(x, -124);
            for (float& x : c0) x = std::ldexp(x, -125);
            for (float& x : bias_m) x = std::ldexp(x, -125);
          }
          const float* b = with_bias ? bias_m.data() : nullptr;
          const std::vector<float> want =
              Bf16Reference(a, lda, w_rows, b, c0, ldc, m, n, k, accumulate);
          for (CpuIsa isa : SupportedIsas()) {
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              std::vector<float> got = c0;
              RunFormatInto(a.data(), m, n, k, packed.data(), format, b, accumulate, got.data(),
                            ldc, p, isa, ComputeType::kBF16);
              const std::string what =
                  std::string(WeightFormatName(format)) + " " + CpuIsaName(isa) +
                  " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                  " k=" + std::to_string(k) + " bias=" + std::to_string(with_bias) +
                  " acc=" + std::to_string(accumulate) + " threads=" + std::to_string(p ? 2 : 1);
              if (!Bf16IsTheChain(isa)) {
                ExpectNearTheBf16Chain(want, got, a, lda, w_rows, b, c0, ldc, m, n, k, accumulate,
                                       what);
                continue;
              }
              ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                  << what;
            }
          }
        }
      }
    }
  }
}

// Prefill shapes: row tiles of exactly 16 rows and of 17 (on AMX: one and
// two A tiles), several row blocks and k-blocks, and K with a last chunk of
// 16 k-pairs that is full, short or a lone odd k.
TEST(MatmulBf16Test, PrefillShapesMatchTheBf16Chain) {
  ThreadPool pool(2);
  uint32_t seed = 700;
  struct Shape {
    int64_t m, n, k;
    WeightFormat format;
  };
  const Shape shapes[] = {
      {16, 40, 512, WeightFormat::kF32},    {33, 33, 544, WeightFormat::kBF16},
      {48, 65, 64, WeightFormat::kQ4_0},    {300, 40, 4001, WeightFormat::kF32},
      {64, 32, 512, WeightFormat::kQ4_K},   {17, 70, 33, WeightFormat::kF16},
      {33, 40, 96, WeightFormat::kQ5_0},    {20, 33, 288, WeightFormat::kQ5_1},
      {17, 45, 768, WeightFormat::kQ3_K},   {40, 33, 160, WeightFormat::kIQ4_NL},
      {20, 65, 512, WeightFormat::kIQ4_XS},
  };
  for (const Shape& s : shapes) {
    std::vector<uint8_t> packed;
    std::vector<float> w_rows(s.n * s.k);
    if (s.format == WeightFormat::kF32) {
      w_rows = RandomVector(s.n * s.k, seed++);
      std::vector<float> p = Pack(w_rows, s.n, s.k);
      packed.assign(reinterpret_cast<uint8_t*>(p.data()),
                    reinterpret_cast<uint8_t*>(p.data() + p.size()));
    } else {
      packed = MakeFormatWeights(s.format, s.n, s.k, seed++).packed;
      for (int64_t r = 0; r < s.n; ++r)
        DequantizePackedRow(s.format, packed.data(), s.n, s.k, r, w_rows.data() + r * s.k);
    }
    const std::vector<float> bias = RandomVector(s.n, seed++);
    const std::vector<float> a = RandomVector(s.m * (s.k + 1), seed++);
    const std::vector<float> c0 = RandomVector(s.m * s.n, seed++);
    const bool accumulate = s.m % 2 == 1;
    const std::vector<float> want =
        Bf16Reference(a, s.k + 1, w_rows, bias.data(), c0, s.n, s.m, s.n, s.k, accumulate);
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> got = c0;
      RunFormatInto(a.data(), s.m, s.n, s.k, packed.data(), s.format, bias.data(), accumulate,
                    got.data(), s.n, &pool, isa, ComputeType::kBF16);
      const std::string what = std::string(WeightFormatName(s.format)) + " " + CpuIsaName(isa) +
                               " m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                               " k=" + std::to_string(s.k);
      if (!Bf16IsTheChain(isa)) {
        ExpectNearTheBf16Chain(want, got, a, s.k + 1, w_rows, bias.data(), c0, s.n, s.m, s.n, s.k,
                               accumulate, what);
        continue;
      }
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float))) << what;
    }
  }
}

// kBF16 is batch invariant on every tier: a row's outputs are the same bits
// alone and at any place in a batch, on one or two threads, also where they
// are not the chain's (Bf16IsTheChain: the amx tier runs every row count on
// the tiles, so its sums do not depend on M).
TEST(MatmulBf16Test, BatchInvariantOnEveryTier) {
  ThreadPool pool(2);
  const int64_t n = 70;
  for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kBF16PairsAmx,
                              WeightFormat::kQ4_K, WeightFormat::kIQ4_NL}) {
    // An odd K with a tail of pairs past AMX's last whole 16 where the format allows.
    const int64_t k = IsKQuantFormat(format) ? 512 : WeightFormatBlockSize(format) == 1 ? 301 : 352;
    const FormatWeights fw = MakeFormatWeights(format, n, k, 31);
    const std::vector<float> bias = RandomVector(n, 32);
    const std::vector<float> x = RandomVector(k + 1, 33);
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> alone(n);
      RunFormatInto(x.data(), 1, n, k, fw.packed.data(), format, bias.data(), false, alone.data(),
                    n, nullptr, isa, ComputeType::kBF16);
      for (int64_t rows : {int64_t{3}, int64_t{16}, int64_t{17}, int64_t{40}}) {
        for (int64_t row : {int64_t{0}, rows - 1}) {
          std::vector<float> a = RandomVector(rows * (k + 1), 34);
          std::copy(x.begin(), x.end(), a.begin() + row * (k + 1));
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> c(rows * n);
            RunFormatInto(a.data(), rows, n, k, fw.packed.data(), format, bias.data(), false,
                          c.data(), n, p, isa, ComputeType::kBF16);
            ASSERT_EQ(0, std::memcmp(alone.data(), c.data() + row * n, n * sizeof(float)))
                << WeightFormatName(format) << " " << CpuIsaName(isa) << " rows=" << rows
                << " row=" << row << " threads=" << (p ? 2 : 1);
          }
        }
      }
    }
  }
}

// The chain's order and flushes on hand-picked values (the f32 chain and an
// increasing-k chain give other bits), for the tile kernels (f32 weights, and
// 20 rows) and the fused decode (bf16 weights, 1 row). Each case also runs
// after leading zeros that fill 16 k-pairs, so that its pairs end a whole
// chunk of AMX's TDPBF16PS (shorter ones run on vdpbf16ps there); zeros added
// to the +0 start leave it +0.
TEST(MatmulBf16Test, PairsOddElementFirstFlushesTinyAndPadsOddK) {
  struct Case {
    std::vector<float> a, w;
    uint32_t want;
  };
  const float tiny_a = std::ldexp(1.0f, -100), tiny_w = -std::ldexp(1.0f, -30);
  const Case cases[] = {
      // Odd first: 0, 1, -1, 2^-24 gives 2^-24; increasing k gives 0.
      {{1.0f, 0.0f, std::ldexp(1.0f, -24), -1.0f}, {1, 1, 1, 1}, Bits(std::ldexp(1.0f, -24))},
      // Products of 2^-130 flush to -0 (f32: -2^-129).
      {{tiny_a, tiny_a}, {tiny_w, tiny_w}, 0x80000000u},
      // Odd k: the pad's zero turns the -0 into +0 before the last element's
      // -0 product (a lone last step would leave -0).
      {{tiny_a, tiny_a, 0.0f}, {tiny_w, tiny_w, -1.0f}, 0x00000000u},
  };
  for (const Case& base : cases) {
    for (bool whole_chunk : {false, true}) {
      Case c = base;
      if (whole_chunk) {
        const size_t zeros = 32 - (base.a.size() + 1) / 2 * 2;
        c.a.insert(c.a.begin(), zeros, 0.0f);
        c.w.insert(c.w.begin(), zeros, 1.0f);
      }
      const int64_t k = c.a.size();
      for (WeightFormat format : {WeightFormat::kF32, WeightFormat::kBF16}) {
        std::vector<uint8_t> packed(PackedWeightBytes(format, 1, k) + 64);
        PackWeightsFrom(format, c.w.data(), 1, k, packed.data());
        const int64_t m = format == WeightFormat::kF32 ? 20 : 1;
        std::vector<float> a;
        for (int64_t i = 0; i < m; ++i) {
          a.insert(a.end(), c.a.begin(), c.a.end());
          a.push_back(0.0f);  // RunFormatInto's lda = k + 1
        }
        for (CpuIsa isa : SupportedIsas()) {
          if (!Bf16IsTheChain(isa)) continue;  // the chain's order: not the hardware's
          std::vector<float> got(m, 1.0f);
          RunFormatInto(a.data(), m, 1, k, packed.data(), format, nullptr, false, got.data(), 1,
                        nullptr, isa, ComputeType::kBF16);
          for (int64_t i = 0; i < m; ++i)
            EXPECT_EQ(Bits(got[i]), c.want)
                << CpuIsaName(isa) << " " << WeightFormatName(format) << " k=" << k << " row " << i;
        }
      }
    }
  }
}

// The kernels' own roundings of A and of W (vcvtne2ps2bf16 on the
// avx512_bf16 tier, integer code on the others) are RoundToBf16Operand on
// every kind of value: with the other operand 1, each output is one rounded
// operand (k = 2: the pair's other product a zero).
TEST(MatmulBf16Test, OperandsRoundAsRoundToBf16Operand) {
  std::mt19937 rng(9);
  std::vector<float> values;
  for (int i = 0; i < 3000; ++i) {
    const float x = FromBits(rng());
    if (!std::isnan(x)) values.push_back(x);
  }
  // Ties (to even, both ways), a tie that rounds to infinity, the largest
  // finite values, the normal / subnormal boundary, signed zeros, infinities.
  for (uint32_t b : {0x3f808000u, 0x3f818000u, 0xbf808000u, 0x7f7f8000u, 0xff7f8000u, 0x7f7f7fffu,
                     0x7f7fffffu, 0x00800000u, 0x007fffffu, 0x80000001u, 0x807fffffu, 0x0u,
                     0x80000000u, 0x7f800000u, 0xff800000u, 0x3f80ffffu})
    values.push_back(FromBits(b));
  const int64_t count = values.size();
  for (int64_t k : {1, 2}) {
    // A: row i is (values[i], 0); W: one column of ones.
    std::vector<float> a(count * (k + 1), 0.0f), ones(k, 1.0f);
    for (int64_t i = 0; i < count; ++i) a[i * (k + 1)] = values[i];
    // W: column j is (values[j], 0); A: one row of ones.
    std::vector<float> w_rows(count * k, 0.0f), one_row(k + 1, 1.0f);
    for (int64_t j = 0; j < count; ++j) w_rows[j * k] = values[j];
    if (k == 2) one_row[1] = 0.0f;
    const std::vector<float> want_a =
        Bf16Reference(a, k + 1, ones, nullptr, std::vector<float>(count), 1, count, 1, k, false);
    const std::vector<float> want_w = Bf16Reference(
        one_row, k + 1, w_rows, nullptr, std::vector<float>(count), count, 1, count, k, false);
    const std::vector<float> packed_ones = Pack(ones, 1, k), packed_w = Pack(w_rows, count, k);
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> got(count);
      RunFormatInto(a.data(), count, 1, k, packed_ones.data(), WeightFormat::kF32, nullptr, false,
                    got.data(), 1, nullptr, isa, ComputeType::kBF16);
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(Bits(got[i]), Bits(want_a[i]))
            << CpuIsaName(isa) << " k=" << k << " a=" << std::hex << Bits(values[i]);
      RunFormatInto(one_row.data(), 1, count, k, packed_w.data(), WeightFormat::kF32, nullptr,
                    false, got.data(), count, nullptr, isa, ComputeType::kBF16);
      for (int64_t j = 0; j < count; ++j)
        ASSERT_EQ(Bits(got[j]), Bits(want_w[j]))
            << CpuIsaName(isa) << " k=" << k << " w=" << std::hex << Bits(values[j]);
    }
  }
  // Every f16 weight but the NaNs, through the decoders (one row: the fused
  // decode kernel; 20: the tiles).
  std::vector<float> halves;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float x = HalfToFloat(static_cast<uint16_t>(h));
    if (!std::isnan(x)) halves.push_back(x);
  }
  const int64_t n = halves.size(), k = 2;
  std::vector<float> w_rows(n * k, 0.0f);
  for (int64_t j = 0; j < n; ++j) w_rows[j * k] = halves[j];
  std::vector<uint8_t> packed(PackedWeightBytes(WeightFormat::kF16, n, k) + 64);
  PackWeightsFrom(WeightFormat::kF16, w_rows.data(), n, k, packed.data());
  for (int64_t m : {1, 20}) {
    std::vector<float> a(m * (k + 1), 0.0f);
    for (int64_t i = 0; i < m; ++i) a[i * (k + 1)] = 1.0f;
    const std::vector<float> want =
        Bf16Reference(a, k + 1, w_rows, nullptr, std::vector<float>(m * n), n, m, n, k, false);
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> got(m * n);
      RunFormatInto(a.data(), m, n, k, packed.data(), WeightFormat::kF16, nullptr, false,
                    got.data(), n, nullptr, isa, ComputeType::kBF16);
      ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << CpuIsaName(isa) << " f16 weights, m=" << m;
    }
  }
}

#if defined(__x86_64__)
// kBF16's flush to zero is MXCSR.FTZ for the duration of the call only: the
// caller's and the pool threads' f32 arithmetic afterwards (attention, norms)
// must not flush.
TEST(MatmulBf16Test, LeavesEveryThreadsMxcsrAsItWas) {
  // MXCSR's control bits (FTZ, rounding, masks, DAZ), not its sticky flags.
  const auto control = [] { return _mm_getcsr() & ~0x3Fu; };
  ThreadPool pool(2);
  const unsigned before = control();
  ASSERT_EQ(before & 0x8040u, 0u) << "FTZ / DAZ already set";
  const int64_t n = 70, k = 300;
  const FormatWeights fw = MakeFormatWeights(WeightFormat::kBF16, n, k, 11);
  for (int64_t m : {1, 29}) {
    const std::vector<float> a = RandomVector(m * (k + 1), 12);
    for (CpuIsa isa : SupportedIsas()) {
      std::vector<float> c(m * n);
      RunFormatInto(a.data(), m, n, k, fw.packed.data(), WeightFormat::kBF16, nullptr, false,
                    c.data(), n, &pool, isa, ComputeType::kBF16);
      EXPECT_EQ(control(), before) << CpuIsaName(isa) << " m=" << m;
      std::vector<unsigned> seen(64, before);
      pool.ParallelFor(64, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) seen[i] = control();
      });
      for (unsigned csr : seen) EXPECT_EQ(csr, before) << CpuIsaName(isa) << " m=" << m;
    }
  }
}
#endif

// The once-per-process probe that says whether the amx tier's kBF16 is the
// chain's bits (Bf16IsTheChain). On the emulated tiles, which follow Intel's
// definition of TDPBF16PS (a rounding per product), it holds (a TDPBF16PS
// that took a pair's odd element first would break it); without AMX it is
// false. On AMX hardware it answers for the hardware: the Sapphire
// Rapids-class CPU it first ran on sums a step's products with fewer
// roundings than the definition (bench/README.md), so there it is false and
// the tests above compare that tier with the chain within a bound.
TEST(MatmulBf16Test, AmxProbeHoldsOnTheEmulatedTilesAndNeverWithoutAmx) {
#if defined(XRT_SIMD_EMULATE)
  EXPECT_TRUE(AmxBf16MatchesTheChain());
#else
  if (!CpuIsaSupported(CpuIsa::kAmx)) {
    EXPECT_FALSE(AmxBf16MatchesTheChain());
  } else {
    ::testing::Test::RecordProperty("amx_bf16_matches_the_chain",
                                    AmxBf16MatchesTheChain() ? "yes" : "no");
  }
#endif
}

#if defined(XRT_SIMD_EMULATE)
// The emulated TDPBF16PS (simd_emulate.h) against Intel's definition on
// hand-picked values, since the amx tier's tests run on it: per C
// element, a pair's low element first, the k-pairs in order, tiles loaded by
// rows of `stride` bytes; tiny results flushed, bf16 denormals read as zero.
TEST(EmulatedAmxTest, Tdpbf16psTakesEachPairsLowElementFirst) {
  const auto bf16 = [](float x) { return static_cast<uint32_t>(FloatToBFloat16(x)); };
  const auto pair = [&](float low, float high) { return bf16(low) | bf16(high) << 16; };
  alignas(64) uint8_t config[64] = {1};
  for (int t = 0; t < 3; ++t) {
    const uint16_t colsb = t == 1 ? 8 : 12;  // C, B: 3 f32 / pairs wide; A: 2 pairs
    std::memcpy(config + 16 + 2 * t, &colsb, 2);
    config[48 + t] = t == 2 ? 2 : 1;  // B: 2 rows (k-pairs); A, C: 1 row
  }
  _tile_loadconfig(config);
  // C column 0: 1, then pair 0 (2^-24 low, -1 high): low first leaves 1 +
  // 2^-24 -> 1, then 0, where high first would give 2^-24. Column 1: a
  // product of -2^-130 flushes to -0. Column 2: 2^100 times the smallest bf16
  // denormal (2^-133) is a zero, not 2^-33.
  const float c_in[3] = {1.0f, 0.0f, 0.0f};
  const float tiny = std::ldexp(1.0f, -65);
  const uint32_t a[2] = {pair(1.0f, 1.0f), pair(std::ldexp(1.0f, 100), tiny)};
  const uint32_t denormal = 0x0001u;
  // B: k-pair rows 16 bytes apart, of which 12 are the tile's.
  const uint32_t b[2][4] = {{pair(std::ldexp(1.0f, -24), -1.0f), 0u, 0u, 0xdeadbeefu},
                            {0u, pair(0.0f, -tiny), denormal, 0xdeadbeefu}};
  _tile_loadd(0, c_in, 12);
  _tile_loadd(1, a, 8);
  _tile_loadd(2, b, 16);
  _tile_dpbf16ps(0, 1, 2);
  float c[3];
  _tile_stored(0, c, 12);
  _tile_release();
  EXPECT_EQ(Bits(c[0]), 0u);
  EXPECT_EQ(Bits(c[1]), 0x80000000u);
  EXPECT_EQ(Bits(c[2]), 0u);
}
#endif

// kBF16 is a different computation: on random data it differs from kF32,
// by about bf16's relative precision.
TEST(MatmulBf16Test, DiffersFromF32ByBf16Precision) {
  const int64_t m = 3, n = 40, k = 256;
  const std::vector<float> a = RandomVector(m * k, 1), w = RandomVector(n * k, 2);
  const std::vector<float> packed = Pack(w, n, k);
  std::vector<float> c32(m * n), c16(m * n);
  MatmulArgs args;
  args.a = a.data();
  args.lda = k;
  args.packed_w = packed.data();
  args.ldc = n;
  args.m = m;
  args.n = n;
  args.k = k;
  args.c = c32.data();
  Matmul(args, nullptr);
  args.c = c16.data();
  args.compute = ComputeType::kBF16;
  Matmul(args, nullptr);
  double max_rel = 0;
  int differ = 0;
  for (int64_t i = 0; i < m * n; ++i) {
    differ += c32[i] != c16[i];
    double mag = 0;
    for (int64_t kk = 0; kk < k; ++kk) mag += std::fabs(a[i / n * k + kk] * w[i % n * k + kk]);
    max_rel = std::max(max_rel, std::fabs(c32[i] - c16[i]) / mag);
  }
  EXPECT_GT(differ, m * n * 9 / 10);
  EXPECT_LE(max_rel, 2 * std::ldexp(1.0, -8));  // two operands, each within 2^-9
}

TEST(MatmulTest, ZeroSizedIsNoOp) {
  float c = 3.0f;
  float a = 1.0f, w = 1.0f;
  MatmulArgs args;
  args.a = &a;
  args.packed_w = &w;
  args.c = &c;
  args.lda = 1;
  args.ldc = 1;
  args.m = 0;
  args.n = 1;
  args.k = 1;
  Matmul(args, nullptr);
  EXPECT_EQ(c, 3.0f);
}

}  // namespace
}  // namespace xrt
