// kInt8 compute (matmul_int8.h) against a reference written from ggml's block
// encodings (not from the packed panels the kernels read): every format, ISA
// path, thread count and odd shape must give the reference's bits.
#include "runtime/kernels/matmul_int8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/kernels/matmul.h"
#if defined(XRT_SIMD_EMULATE)
#include "runtime/kernels/simd.h"  // the emulated AMX instructions
#endif
#include "runtime/kernels/test_util.h"

namespace xrt {
namespace {

using testing::SupportedIsas;

using testing::Bits;

constexpr WeightFormat kFormats[] = {
    WeightFormat::kQ8_0, WeightFormat::kQ4_0,   WeightFormat::kQ4_1,  WeightFormat::kQ5_0,
    WeightFormat::kQ5_1, WeightFormat::kQ3_K,   WeightFormat::kQ4_K,  WeightFormat::kQ5_K,
    WeightFormat::kQ6_K, WeightFormat::kIQ4_NL, WeightFormat::kIQ4_XS};

// ggml's kvalues_iq4nl (ggml-common.h), written out here rather than taken
// from weight_format.h so that the reference does not share the kernels'
// table.
constexpr int kGgmlIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                    1,    13,   25,  38,  53,  69,  89,  113};

// Bytes of a ggml group block before its quants qs (q8_0's int8, the
// others' nibbles): f16 d; f16 m (HasGroupMin: q4_1, q5_1); uint32 qh, bit i
// = value i's bit 4 (HasFifthBits: q5_0, q5_1).
int64_t BytesBeforeQs(WeightFormat f) {
  return 2 + (HasGroupMin(f) ? 2 : 0) + (HasFifthBits(f) ? 4 : 0);
}

float Half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return HalfToFloat(h);
}

// n rows of random ggml blocks of `format`: random quants (q8_0's include
// -128), f16 scales (and q4_1 / q5_1 mins, K-quant dmins) in [-0.02, 0.02].
std::vector<uint8_t> RandomGgmlRows(WeightFormat format, int64_t n, int64_t k, uint32_t seed) {
  if (IsKQuantFormat(format) || HasIQ4Table(format)) {
    return testing::RandomKQuantRows(format, n, k, seed);
  }
  std::mt19937 rng(seed);
  const int64_t row_bytes = GgmlRowBytes(format, k), block_bytes = row_bytes / (k / 32);
  std::vector<uint8_t> rows(n * row_bytes);
  for (auto& b : rows) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  for (int64_t b = 0; b < n * row_bytes / block_bytes; ++b) {
    const uint16_t d = FloatToHalf(scale(rng)), m = FloatToHalf(scale(rng));
    std::memcpy(rows.data() + b * block_bytes, &d, 2);
    if (HasGroupMin(format)) std::memcpy(rows.data() + b * block_bytes + 2, &m, 2);
  }
  return rows;
}

// One weight row decoded from ggml blocks into what the contract multiplies:
// per k the integer quant (offsets applied: q4_0 - 8, q5_0 - 16, q3_k - 4,
// q6_k - 32; iq4_nl, iq4_xs: kvalues_iq4nl's value), per sub-block (32 k;
// q3_k, q6_k, iq4_xs 16) the integer scale and min, per block (32 k or a 256
// super-block) the f32 scale and min / dmin.
struct IntRow {
  std::vector<int> q, sc, mn;
  std::vector<float> d, m;
};

IntRow DecodeGgmlRow(WeightFormat f, const uint8_t* row, int64_t k) {
  IntRow r;
  r.q.resize(k);
  if (!IsKQuantFormat(f)) {
    const int64_t bb = GgmlRowBytes(f, k) / (k / 32);
    for (int64_t b = 0; b < k / 32; ++b) {
      const uint8_t* blk = row + b * bb;
      r.d.push_back(Half(blk));
      r.m.push_back(HasGroupMin(f) ? Half(blk + 2) : 0.0f);
      uint32_t qh = 0;
      if (HasFifthBits(f)) std::memcpy(&qh, blk + BytesBeforeQs(f) - 4, 4);
      const uint8_t* qs = blk + BytesBeforeQs(f);
      for (int e = 0; e < 32; ++e) {
        int q;
        if (f == WeightFormat::kQ8_0) {
          q = static_cast<int8_t>(qs[e]);
        } else if (f == WeightFormat::kIQ4_NL) {  // dequantize_row_iq4_nl
          q = kGgmlIQ4Values[e < 16 ? qs[e] & 15 : qs[e - 16] >> 4];
        } else {
          q = e < 16 ? qs[e] & 15 : qs[e - 16] >> 4;
          q |= static_cast<int>((qh >> e) & 1) << 4;
          if (f == WeightFormat::kQ4_0) q -= 8;
          if (f == WeightFormat::kQ5_0) q -= 16;
        }
        r.q[b * 32 + e] = q;
      }
    }
    return r;
  }
  const int64_t bb = GgmlRowBytes(f, k) / (k / 256);
  for (int64_t b = 0; b < k / 256; ++b) {
    const uint8_t* blk = row + b * bb;
    int* q = r.q.data() + b * 256;
    if (f == WeightFormat::kQ3_K) {
      // ggml's dequantize_row_q3_K: block_q3_K {hmask[32], qs[64],
      // scales[12], d}; the scales as ggml unpacks them.
      const uint8_t* hm = blk;
      const uint8_t* qs = blk + 32;
      int scales[16];
      testing::GgmlQ3KScales(blk + 96, scales);
      for (int s = 0; s < 16; ++s) r.sc.push_back(scales[s]);
      r.d.push_back(Half(blk + 108));
      int at = 0;
      uint8_t m = 1;
      for (int half = 0; half < 2; ++half) {
        for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
          for (int l = 0; l < 32; ++l) {
            q[at++] = ((qs[32 * half + l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
          }
        }
      }
      continue;
    }
    if (f == WeightFormat::kIQ4_XS) {
      // ggml's dequantize_row_iq4_xs: block_iq4_xs {d, scales_h, scales_l[4],
      // qs[128]}; 32-value sub-block ib's scale ls - 32 (pushed for both of
      // its 16-value halves, the contract's sub-blocks).
      r.d.push_back(Half(blk));
      uint16_t scales_h;
      std::memcpy(&scales_h, blk + 2, 2);
      const uint8_t* scales_l = blk + 4;
      const uint8_t* qs = blk + 8;
      for (int ib = 0; ib < 8; ++ib) {
        const int ls =
            ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
        r.sc.push_back(ls - 32);
        r.sc.push_back(ls - 32);
        for (int j = 0; j < 16; ++j) {
          q[32 * ib + j] = kGgmlIQ4Values[qs[16 * ib + j] & 0xf];
          q[32 * ib + j + 16] = kGgmlIQ4Values[qs[16 * ib + j] >> 4];
        }
      }
      continue;
    }
    if (f == WeightFormat::kQ6_K) {
      const uint8_t* ql = blk;
      const uint8_t* qh = blk + 128;
      const int8_t* scales = reinterpret_cast<const int8_t*>(blk + 192);
      r.d.push_back(Half(blk + 208));
      for (int s = 0; s < 16; ++s) r.sc.push_back(scales[s]);
      for (int half = 0; half < 2; ++half) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t* L = ql + 64 * half;
          const uint8_t h = qh[32 * half + l];
          q[128 * half + l] = ((L[l] & 15) | (h & 3) << 4) - 32;
          q[128 * half + l + 32] = ((L[l + 32] & 15) | ((h >> 2) & 3) << 4) - 32;
          q[128 * half + l + 64] = ((L[l] >> 4) | ((h >> 4) & 3) << 4) - 32;
          q[128 * half + l + 96] = ((L[l + 32] >> 4) | ((h >> 6) & 3) << 4) - 32;
        }
      }
      continue;
    }
    r.d.push_back(Half(blk));
    r.m.push_back(Half(blk + 2));
    const uint8_t* sc = blk + 4;
    for (int j = 0; j < 8; ++j) {
      if (j < 4) {
        r.sc.push_back(sc[j] & 63);
        r.mn.push_back(sc[j + 4] & 63);
      } else {
        r.sc.push_back((sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4);
        r.mn.push_back((sc[j + 4] >> 4) | (sc[j] >> 6) << 4);
      }
    }
    const uint8_t* qh = blk + 16;
    const uint8_t* qs = blk + (f == WeightFormat::kQ5_K ? 48 : 16);
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        int lo = qs[32 * j + l] & 15, hi = qs[32 * j + l] >> 4;
        if (f == WeightFormat::kQ5_K) {
          lo += ((qh[l] >> (2 * j)) & 1) << 4;
          hi += ((qh[l] >> (2 * j + 1)) & 1) << 4;
        }
        q[64 * j + l] = lo;
        q[64 * j + 32 + l] = hi;
      }
    }
  }
  return r;
}

// Step 1 of the contract, written out: quants and scale per block.
void ReferenceQuantize(const float* a, int64_t k, int block, std::vector<int>* q,
                       std::vector<float>* d) {
  q->assign(k, 0);
  d->clear();
  for (int64_t b = 0; b < k / block; ++b) {
    float amax = 0.0f;
    bool finite = true;
    for (int e = 0; e < block; ++e) {
      const float x = a[b * block + e];
      if (!std::isfinite(x)) finite = false;
      if (std::fabs(x) > amax) amax = std::fabs(x);
    }
    if (!finite) {
      d->push_back(std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const float id = 127.0f / amax;
    if (!std::isfinite(id)) {
      d->push_back(0.0f);
      continue;
    }
    d->push_back(amax / 127.0f);
    for (int e = 0; e < block; ++e) {
      const float x = a[b * block + e] * id;
      float r = std::floor(x);  // nearest, ties to even
      const float frac = x - r;
      if (frac > 0.5f || (frac == 0.5f && std::fmod(r, 2.0f) != 0.0f)) r += 1.0f;
      (*q)[b * block + e] = static_cast<int>(r);
    }
  }
}

// Step 2 for one output.
float ReferenceDot(WeightFormat f, const IntRow& w, const std::vector<int>& q,
                   const std::vector<float>& d, int64_t k) {
  float acc = 0.0f;
  if (!IsKQuantFormat(f)) {
    for (int64_t b = 0; b < k / 32; ++b) {
      int32_t dot = 0, sum = 0;
      for (int e = 0; e < 32; ++e) {
        dot += w.q[b * 32 + e] * q[b * 32 + e];
        sum += q[b * 32 + e];
      }
      acc = std::fma(w.d[b] * d[b], static_cast<float>(dot), acc);
      if (HasGroupMin(f)) acc = std::fma(w.m[b], d[b] * static_cast<float>(sum), acc);
    }
    return acc;
  }
  // No mins, a scale per 16 values.
  const bool int8_scales =
      f == WeightFormat::kQ3_K || f == WeightFormat::kQ6_K || f == WeightFormat::kIQ4_XS;
  const int sub = int8_scales ? 16 : 32;
  for (int64_t b = 0; b < k / 256; ++b) {
    int32_t isum = 0, imin = 0;
    for (int s = 0; s < 256 / sub; ++s) {
      int32_t dot = 0, sum = 0;
      for (int e = 0; e < sub; ++e) {
        const int64_t kk = b * 256 + s * sub + e;
        dot += w.q[kk] * q[kk];
        sum += q[kk];
      }
      isum += w.sc[b * (256 / sub) + s] * dot;
      if (!int8_scales) imin += w.mn[b * 8 + s] * sum;
    }
    acc = std::fma(w.d[b] * d[b], static_cast<float>(isum), acc);
    if (!int8_scales) acc = std::fma(-(w.m[b] * d[b]), static_cast<float>(imin), acc);
  }
  return acc;
}

struct Weight {
  std::vector<uint8_t> packed;
  std::vector<IntRow> rows;
};

Weight MakeWeight(WeightFormat f, int64_t n, int64_t k, uint32_t seed) {
  Weight w;
  const std::vector<uint8_t> ggml = RandomGgmlRows(f, n, k, seed);
  const int64_t row_bytes = GgmlRowBytes(f, k);
  w.packed.assign(PackedWeightBytes(f, n, k) + 64, 0);
  PackWeightsFromBlocks(f, ggml.data(), n, k, row_bytes, w.packed.data());
  for (int64_t r = 0; r < n; ++r)
    w.rows.push_back(DecodeGgmlRow(f, ggml.data() + r * row_bytes, k));
  return w;
}

// C [m][n] (ldc n + 3) with A's row stride k + 5, bias and accumulate as asked.
// An int8 path: an ISA tier, for the avx2 tier whether it may use AVX-VNNI
// (SetInt8AvxVnniAllowed), and from avx512_vnni whether it may use GFNI
// (SetInt8GfniAllowed).
struct Int8Path {
  CpuIsa isa;
  bool avx_vnni = true;
  bool gfni = true;
  std::string Name() const {
    std::string name = CpuIsaName(isa);
    if (isa == CpuIsa::kAvx2) name += avx_vnni && CpuHasAvxVnni() ? " (avx_vnni)" : " (maddubs)";
    if (IsaAtLeast(isa, CpuIsa::kAvx512Vnni)) name += gfni && CpuHasGfni() ? " (gfni)" : "";
    return name;
  }
};

// Every path this CPU runs for format f: each supported tier, the avx2 tier
// a second time without AVX-VNNI where the CPU has it, and the avx512_vnni
// tier a second time without GFNI where the CPU has it and f's kernels use
// it (the tiers above run the same VNNI kernels, and AMX's CPUs have GFNI).
std::vector<Int8Path> Int8Paths(WeightFormat f) {
  std::vector<Int8Path> paths;
  for (CpuIsa isa : SupportedIsas()) {
    paths.push_back({isa});
    if (isa == CpuIsa::kAvx2 && CpuHasAvxVnni()) paths.push_back({isa, false});
    if (isa == CpuIsa::kAvx512Vnni && CpuHasGfni() && Int8GfniApplies(f)) {
      paths.push_back({isa, true, false});
    }
  }
  return paths;
}

std::vector<float> RunInt8(const std::vector<float>& a, int64_t m, int64_t n, int64_t k,
                           const Weight& w, WeightFormat f, const float* bias, bool accumulate,
                           ThreadPool* pool, Int8Path path,
                           ComputeType compute = ComputeType::kInt8) {
  const CpuIsa isa = path.isa;
  SetInt8AvxVnniAllowed(path.avx_vnni);
  SetInt8GfniAllowed(path.gfni);
  std::vector<float> c(m * (n + 3), 0.25f);
  MatmulArgs args;
  args.a = a.data();
  args.lda = k + 5;
  args.packed_w = w.packed.data();
  args.w_format = f;
  args.bias = bias;
  args.c = c.data();
  args.ldc = n + 3;
  args.m = m;
  args.n = n;
  args.k = k;
  args.accumulate = accumulate;
  args.compute = compute;
  MatmulWithIsa(args, pool, isa);
  SetInt8AvxVnniAllowed(true);
  SetInt8GfniAllowed(true);
  return c;
}

std::vector<float> RandomA(int64_t m, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> a(m * (k + 5), 1e30f);  // the stride padding must not be read
  for (int64_t i = 0; i < m; ++i)
    for (int64_t kk = 0; kk < k; ++kk) a[i * (k + 5) + kk] = dist(rng);
  return a;
}

void ExpectMatchesReference(WeightFormat f, const std::vector<float>& a, int64_t m, int64_t n,
                            int64_t k, const Weight& w, const std::vector<float>& bias,
                            bool accumulate, const std::vector<float>& c, const std::string& what) {
  const int block = Int8ActivationBlock(f);
  int bad = 0;
  for (int64_t i = 0; i < m; ++i) {
    std::vector<int> q;
    std::vector<float> d;
    ReferenceQuantize(a.data() + i * (k + 5), k, block, &q, &d);
    for (int64_t j = 0; j < n; ++j) {
      float want = ReferenceDot(f, w.rows[j], q, d, k);
      if (!bias.empty()) want = want + bias[j];
      if (accumulate) want = 0.25f + want;
      const float got = c[i * (n + 3) + j];
      if (Bits(got) != Bits(want) && !(std::isnan(got) && std::isnan(want)) && ++bad <= 3) {
        ADD_FAILURE() << what << " c[" << i << "][" << j << "] = " << got << ", reference " << want;
      }
    }
    for (int64_t j = n; j < n + 3; ++j) {
      ASSERT_EQ(c[i * (n + 3) + j], 0.25f) << what << ": wrote past n";
    }
  }
  EXPECT_EQ(bad, 0) << what;
}

TEST(MatmulInt8Test, BitIdenticalToTheGgmlBlockReferenceOnEveryPathAndShape) {
  ThreadPool pool(2);
  for (WeightFormat f : kFormats) {
    const int64_t b = WeightFormatBlockSize(f);
    for (int64_t k : {b, 3 * b}) {
      // 165 and 250 (6 and 8 panels, the last one short): one row reads
      // kDecodeStreams panels side by side on AVX512_VNNI while a thread
      // has four left, then one at a time.
      for (int64_t n : {1, 37, 70, 165, 250}) {
        const Weight w = MakeWeight(f, n, k, static_cast<uint32_t>(k * 131 + n));
        std::vector<float> bias(n);
        for (int64_t j = 0; j < n; ++j) bias[j] = 0.01f * static_cast<float>(j % 7) - 0.03f;
        // 67: 17 row blocks, where the AVX2 path decodes every nibble
        // format's panels once (DecodedPanelMinRowBlocks; iq4_nl / iq4_xs
        // too); 5 to 29: only the formats with high bits (q5_0, q5_1, q3_k,
        // q5_k, q6_k). On AVX512_VNNI, q8_0's are decoded at 29 and 67 (5 and
        // 12 groups of 6 rows), q5_0's and q5_1's at 67 (12 groups of 6),
        // q3_k's, q5_k's and q6_k's at 29 and 67 (8 and 17 groups of 4), none
        // at 13. On AMX, 29 and 67 run the group formats (q8_0, q4_0, q4_1,
        // q5_0, q5_1, iq4_nl) and the K-quants with 32-row scales (q4_k,
        // q5_k, iq4_xs) in 16-row tiles, the last one short (q3_k and q6_k
        // run the AVX512_VNNI kernels there).
        for (int64_t m : {1, 2, 3, 4, 5, 13, 29, 67}) {
          if (n > 70 && m > 2) continue;
          const std::vector<float> a = RandomA(m, k, static_cast<uint32_t>(m * 7 + k));
          for (Int8Path isa : Int8Paths(f)) {
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              const bool extras = (m + n) % 2 == 0;  // bias + accumulate on half the cases
              const std::string what = std::string(WeightFormatName(f)) + " " + isa.Name() +
                                       (p ? " 2 threads" : "") + " m=" + std::to_string(m) +
                                       " n=" + std::to_string(n) + " k=" + std::to_string(k);
              const std::vector<float> c =
                  RunInt8(a, m, n, k, w, f, extras ? bias.data() : nullptr, extras, p, isa);
              ExpectMatchesReference(f, a, m, n, k, w, extras ? bias : std::vector<float>{}, extras,
                                     c, what);
            }
          }
        }
      }
    }
  }
}

// Where a ggml block of `f` keeps its quants, [begin, end) bytes, and its
// sub-block scales (K-quants), with the scale byte that gives the largest
// magnitudes: q3_k's and iq4_xs's 6-bit scales all 0 (sc = -32), q4_k /
// q5_k's all 63 (scales and mins), q6_k's int8 -128.
struct ExtremeBlock {
  int64_t quants_begin, quants_end;
  int64_t scales_begin = 0, scales_end = 0;
  uint8_t scale_byte = 0;
};

ExtremeBlock ExtremeBlockOf(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQ3_K:  // {hmask[32], qs[64], scales[12], d}
      return {0, 96, 96, 108, 0x00};
    case WeightFormat::kQ4_K:  // {d, dmin, scales[12], qs[128]}
      return {16, 144, 4, 16, 0xff};
    case WeightFormat::kQ5_K:  // {d, dmin, scales[12], qh[32], qs[128]}
      return {16, 176, 4, 16, 0xff};
    case WeightFormat::kQ6_K:  // {ql[128], qh[64], scales[16], d}
      return {0, 192, 192, 208, 0x80};
    case WeightFormat::kIQ4_XS:  // {d, scales_h, scales_l[4], qs[128]}: ls = 0, sc = -32
      return {8, 136, 2, 8, 0x00};
    default:  // {d, (m,) (qh,) qs}: everything after d and m
      return {HasGroupMin(f) ? 4 : 2, GgmlRowBytes(f, kQuantGroup)};
  }
}

// Every quant at an extreme (q8_0 all -128 or all 127, the other formats
// all 0 or all at MaxQuant: q3_k 0 / 7, q4 0 / 15, q5 0 / 31, q6_k 0 / 63,
// iq4_nl / iq4_xs 0 / 15, the values -127 / 113), the K-quants' scales at
// their largest magnitude, against activations all at +-127: the largest
// sums each path's integer arithmetic must carry exactly (vpmaddubsw's int16
// pairs, vpdpbusd with q8_0's and iq4's weights offset by 128 (iq4: up to
// 241), the K-quants' offsets taken off with the activation sums), on row
// groups of every height the paths use.
TEST(MatmulInt8Test, ExtremeQuantsSumExactlyOnEveryPath) {
  ThreadPool pool(2);
  // 3 rows: one row group on every path; 7: two (decoded on avx2 for the
  // formats with high bits); 21: AMX's 16-row groups, and 6 K-quant groups
  // of 4 (decoded on AVX512_VNNI for q3_k, q5_k, q6_k); 65: 17 row blocks,
  // decoded on avx2 for every format (iq4's table values stored signed,
  // biased after the load for vpdpbusd). One row against 136 columns: a
  // decode step's kernel on AVX512_VNNI, four panels side by side, then the
  // fifth (8 columns) alone.
  struct Case {
    int64_t n;
    std::vector<int64_t> rows;
  };
  for (const Case& shape : {Case{40, {3, 7, 21, 65}}, Case{136, {1}}})
    for (WeightFormat f : kFormats) {
      const int64_t block = WeightFormatBlockSize(f);
      const int64_t n = shape.n, k = (IsKQuantFormat(f) ? 2 : 4) * block;
      std::vector<uint8_t> ggml = RandomGgmlRows(f, n, k, 3);
      const int64_t row_bytes = GgmlRowBytes(f, k), block_bytes = GgmlRowBytes(f, block);
      const ExtremeBlock at = ExtremeBlockOf(f);
      for (int64_t b = 0; b < n * (k / block); ++b) {
        // Alternate blocks: the lowest quants, then the highest.
        const uint8_t low = f == WeightFormat::kQ8_0 ? 0x80 : 0x00;
        const uint8_t high = f == WeightFormat::kQ8_0 ? 0x7f : 0xff;
        uint8_t* bytes = ggml.data() + b * block_bytes;
        std::fill(bytes + at.quants_begin, bytes + at.quants_end, b % 2 ? high : low);
        std::fill(bytes + at.scales_begin, bytes + at.scales_end, at.scale_byte);
      }
      Weight w;
      w.packed.assign(PackedWeightBytes(f, n, k) + 64, 0);
      PackWeightsFromBlocks(f, ggml.data(), n, k, row_bytes, w.packed.data());
      for (int64_t r = 0; r < n; ++r)
        w.rows.push_back(DecodeGgmlRow(f, ggml.data() + r * row_bytes, k));
      const int64_t a_block = Int8ActivationBlock(f);
      for (int64_t m : shape.rows) {
        std::vector<float> a(m * (k + 5), 1e30f);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t kk = 0; kk < k; ++kk)
            a[i * (k + 5) + kk] = (i + kk / a_block) % 2 ? 3.0f : -3.0f;
        for (Int8Path isa : Int8Paths(f)) {
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            const std::vector<float> c = RunInt8(a, m, n, k, w, f, nullptr, false, p, isa);
            ExpectMatchesReference(f, a, m, n, k, w, {}, false, c,
                                   std::string(WeightFormatName(f)) + " " + isa.Name() +
                                       " m=" + std::to_string(m) + " n=" + std::to_string(n));
          }
        }
      }
    }
}

// A decode row's streams are prefetched into L1 or L2 (Int8DecodePrefetch;
// by default L2 exactly on AMD's CPUs, which CpuIsAmd reads from CPUID's
// vendor string, as /proc/cpuinfo shows it): the reference's bits either
// way, on every tier that streams panels (avx512_vnni and up).
TEST(MatmulInt8Test, DecodePrefetchLevelKeepsTheBitsAndIsL2OnAmdByDefault) {
  EXPECT_EQ(Int8DecodePrefetchesToL2(), CpuIsAmd());
#if defined(__linux__) && defined(__x86_64__) && !defined(XRT_SIMD_EMULATE)
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line) && line.rfind("vendor_id", 0) != 0) {
  }
  if (!line.empty()) {
    const bool amd = line.find("AuthenticAMD") != std::string::npos ||
                     line.find("HygonGenuine") != std::string::npos;
    EXPECT_EQ(CpuIsAmd(), amd) << line;
  }
#endif
  ThreadPool pool(2);
  for (Int8DecodePrefetch where : {Int8DecodePrefetch::kL1, Int8DecodePrefetch::kL2}) {
    SetInt8DecodePrefetch(where);
    EXPECT_EQ(Int8DecodePrefetchesToL2(), where == Int8DecodePrefetch::kL2);
    for (WeightFormat f : kFormats) {
      const int64_t k = 2 * WeightFormatBlockSize(f), n = 250;  // 8 panels, the last short
      const Weight w = MakeWeight(f, n, k, 7);
      const std::vector<float> a = RandomA(1, k, 11);
      for (CpuIsa isa : SupportedIsas()) {
        if (!IsaAtLeast(isa, CpuIsa::kAvx512Vnni)) continue;
        for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
          const std::vector<float> c = RunInt8(a, 1, n, k, w, f, nullptr, false, p, {isa});
          ExpectMatchesReference(f, a, 1, n, k, w, {}, false, c,
                                 std::string(WeightFormatName(f)) + " " + CpuIsaName(isa) +
                                     (where == Int8DecodePrefetch::kL2 ? " into L2" : " into L1"));
        }
      }
    }
  }
  SetInt8DecodePrefetch(Int8DecodePrefetch::kAuto);
}

TEST(MatmulInt8Test, NonFiniteZeroAndTinyActivationBlocks) {
  for (WeightFormat f : kFormats) {
    const int64_t k = 2 * WeightFormatBlockSize(f) * (IsKQuantFormat(f) ? 1 : 4), n = 33, m = 4;
    const Weight w = MakeWeight(f, n, k, 99);
    std::vector<float> a = RandomA(m, k, 5);
    a[0 * (k + 5) + 3] = std::numeric_limits<float>::quiet_NaN();     // row 0: NaN
    a[1 * (k + 5) + k - 1] = std::numeric_limits<float>::infinity();  // row 1: inf
    for (int64_t kk = 0; kk < k; ++kk) {
      a[2 * (k + 5) + kk] = 0.0f;     // row 2: zeros
      a[3 * (k + 5) + kk] *= 1e-41f;  // row 3: subnormals, 127 / amax overflows
    }
    for (Int8Path isa : Int8Paths(f)) {
      const std::vector<float> c = RunInt8(a, m, n, k, w, f, nullptr, false, nullptr, isa);
      ExpectMatchesReference(f, a, m, n, k, w, {}, false, c,
                             std::string(WeightFormatName(f)) + " " + isa.Name());
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_TRUE(std::isnan(c[0 * (n + 3) + j]));
        EXPECT_TRUE(std::isnan(c[1 * (n + 3) + j]));
        EXPECT_EQ(c[2 * (n + 3) + j], 0.0f);
        EXPECT_EQ(c[3 * (n + 3) + j], 0.0f);
      }
    }
  }
}

// The kernels' name in logs: the best tier's, with "+avx_vnni" exactly where
// the avx2 tier has AVX-VNNI (its int8 kernels then use vpdpbusd) and
// "+gfni" exactly where the avx512_vnni tier or one above has GFNI.
TEST(MatmulInt8Test, BestKernelsNameSaysWhenTheAvx2TierUsesAvxVnni) {
  const std::string name = BestKernelsName();
  EXPECT_EQ(name.rfind(CpuIsaName(BestCpuIsa()), 0), 0u) << name;
  EXPECT_EQ(name.find("+avx_vnni") != std::string::npos,
            BestCpuIsa() == CpuIsa::kAvx2 && CpuHasAvxVnni())
      << name;
  EXPECT_EQ(name.find("+gfni") != std::string::npos,
            IsaAtLeast(BestCpuIsa(), CpuIsa::kAvx512Vnni) && CpuHasGfni())
      << name;
}

TEST(MatmulInt8Test, QuantizeRoundsToNearestEvenAndSumsExactly) {
  // amax 127 makes id = 1: the quants are the values rounded.
  std::vector<float> a(32, 0.0f);
  const float values[] = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.4999999f, -126.5f, 100.0f};
  std::copy(std::begin(values), std::end(values), a.begin());
  std::vector<int8_t> q(32);
  float d = 0.0f;
  int32_t sums[2];
  QuantizeActivationRow(a.data(), 32, 32, q.data(), &d, sums);
  EXPECT_EQ(d, 1.0f);
  const int want[] = {127, 2, 4, -2, 0, 0, 1, -126, 100};
  for (int e = 0; e < 9; ++e) EXPECT_EQ(q[e], want[e]) << "value " << values[e];
  int32_t s0 = 0, s1 = 0;
  for (int e = 0; e < 16; ++e) s0 += q[e];
  for (int e = 16; e < 32; ++e) s1 += q[e];
  EXPECT_EQ(sums[0], s0);
  EXPECT_EQ(sums[1], s1);
}

TEST(MatmulInt8Test, CloseToF32OnTheSameWeight) {
  // The only error is the activation rounding (at most d / 2 per value) plus
  // f32 rounding: |int8 - f32| <= sum_k |w_k| * d_block(k) / 2 (+ a little).
  for (WeightFormat f : kFormats) {
    const int64_t k = 2 * WeightFormatBlockSize(f) * (IsKQuantFormat(f) ? 1 : 8), n = 40, m = 3;
    const Weight w = MakeWeight(f, n, k, 7);
    const std::vector<float> a = RandomA(m, k, 11);
    const std::vector<float> c8 =
        RunInt8(a, m, n, k, w, f, nullptr, false, nullptr, {BestCpuIsa()});
    const std::vector<float> c32 =
        RunInt8(a, m, n, k, w, f, nullptr, false, nullptr, {BestCpuIsa()}, ComputeType::kF32);
    const int block = Int8ActivationBlock(f);
    double worst = 0.0, differs = 0.0;
    for (int64_t i = 0; i < m; ++i) {
      std::vector<int> q;
      std::vector<float> d;
      ReferenceQuantize(a.data() + i * (k + 5), k, block, &q, &d);
      std::vector<float> wrow(k);
      for (int64_t j = 0; j < n; ++j) {
        DequantizePackedRow(f, w.packed.data(), n, k, j, wrow.data());
        double bound = 0.0, mag = 0.0;
        for (int64_t kk = 0; kk < k; ++kk) {
          bound += std::fabs(wrow[kk]) * d[kk / block] / 2;
          mag += std::fabs(wrow[kk] * a[i * (k + 5) + kk]);
        }
        const double err = std::fabs(c8[i * (n + 3) + j] - c32[i * (n + 3) + j]);
        EXPECT_LE(err, bound * 1.001 + 1e-5 * mag) << WeightFormatName(f) << " " << i << "," << j;
        worst = std::max(worst, err / bound);
        differs += err > 0.0;
      }
    }
    EXPECT_GT(differs, 0) << "int8 compute gave the f32 results: the mode is not on";
    std::printf("%s: worst |int8 - f32| / bound = %.3f\n", WeightFormatName(f), worst);
  }
}

#if defined(XRT_SIMD_EMULATE)
// The emulated TDPBSUD (simd_emulate.h), which the amx tier's int8 tests run
// on, against Intel's definition: a's bytes signed, b's unsigned, four
// products per dword summed into the int32 of c, tiles loaded by rows of
// `stride` bytes.
TEST(EmulatedAmxTest, TdpbsudMultipliesSignedByUnsignedBytes) {
  alignas(64) uint8_t config[64] = {1};
  for (int t = 0; t < 3; ++t) {
    const uint16_t colsb = 8;  // C: 2 int32; A: 2 dwords; B: 2 dwords
    std::memcpy(config + 16 + 2 * t, &colsb, 2);
    config[48 + t] = 2;  // C, A: 2 rows; B: 2 rows (dwords of A)
  }
  _tile_loadconfig(config);
  const int32_t c_in[2][2] = {{1000, 0}, {0, -7}};
  // A rows 12 bytes apart (8 read); B rows 8 apart.
  const int8_t a[2][12] = {{-1, 2, -128, 127, 0, 0, 0, 1, 99, 99, 99, 99},
                           {1, 1, 1, 1, -1, -1, -1, -1, 99, 99, 99, 99}};
  const uint8_t b[2][8] = {{255, 3, 1, 2, 1, 1, 1, 1}, {0, 0, 0, 200, 255, 255, 255, 255}};
  _tile_loadd(0, c_in, 8);
  _tile_loadd(1, a, 12);
  _tile_loadd(2, b, 8);
  _tile_dpbsud(0, 1, 2);
  int32_t c[2][2];
  _tile_stored(0, c, 8);
  _tile_release();
  // Row 0: 1000 + (-255 + 6 - 128 + 254) + (0 + 0 + 0 + 200) = 1077;
  // column 1: (-1 + 2 - 128 + 127) + 255 = 255.
  EXPECT_EQ(c[0][0], 1077);
  EXPECT_EQ(c[0][1], 255);
  // Row 1: (255 + 3 + 1 + 2) - 200 = 61; column 1: -7 + 4 - 1020 = -1023.
  EXPECT_EQ(c[1][0], 61);
  EXPECT_EQ(c[1][1], -1023);
}
#endif

}  // namespace
}  // namespace xrt
