#include "runtime/kernels/dense_attention.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/kernels/test_util.h"

namespace xrt {
namespace {

// softmax(scale q k^T) v per sequence and head, in double.
std::vector<double> Reference(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, int64_t stride, int64_t tokens,
                              int64_t seq, int64_t heads, int64_t hd, float scale) {
  std::vector<double> out(tokens * heads * hd);
  for (int64_t n = 0; n < tokens / seq; ++n)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t ti = n * seq + i;
        std::vector<double> p(seq);
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < seq; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d)
            dot += double(q[ti * stride + h * hd + d]) * k[(n * seq + j) * stride + h * hd + d];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        for (double& x : p) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < hd; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < seq; ++j)
            acc += p[j] / sum * v[(n * seq + j) * stride + h * hd + d];
          out[(ti * heads + h) * hd + d] = acc;
        }
      }
  return out;
}

using testing::Bf16ChainDot;

// dense_attention.h's kBF16 contract with the softmax in double: each score
// the kBF16 chain of q and k over d; numerators exp(scale * x - max) rounded
// to f32; each output the kBF16 chain of the numerators and a value column
// over the keys, divided by the numerators' sum.
std::vector<double> Bf16Reference(const std::vector<float>& q, const std::vector<float>& k,
                                  const std::vector<float>& v, int64_t stride, int64_t tokens,
                                  int64_t seq, int64_t heads, int64_t hd, float scale) {
  std::vector<double> out(tokens * heads * hd);
  std::vector<float> x(seq), p(seq);
  for (int64_t n = 0; n < tokens / seq; ++n)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < seq; ++i) {
        const int64_t ti = n * seq + i;
        float mx = -INFINITY;
        for (int64_t j = 0; j < seq; ++j) {
          x[j] = scale * Bf16ChainDot(&q[ti * stride + h * hd], 1,
                                      &k[(n * seq + j) * stride + h * hd], 1, hd);
          mx = std::max(mx, x[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < seq; ++j) sum += p[j] = static_cast<float>(std::exp(x[j] - mx));
        for (int64_t d = 0; d < hd; ++d)
          out[(ti * heads + h) * hd + d] =
              Bf16ChainDot(p.data(), 1, &v[n * seq * stride + h * hd + d], stride, seq) / sum;
      }
  return out;
}

struct Case {
  int64_t seqs, seq, heads, hd, pad;
};

constexpr CpuIsa kIsas[] = {CpuIsa::kScalar,     CpuIsa::kAvx2,       CpuIsa::kAvx512,
                            CpuIsa::kAvx512Vnni, CpuIsa::kAvx512Bf16, CpuIsa::kAmx};

DenseAttentionArgs Args(const std::vector<float>& q, const std::vector<float>& k,
                        const std::vector<float>& v, std::vector<float>* out, int64_t stride,
                        int64_t tokens, int64_t seq, int64_t heads, int64_t hd, float scale,
                        ComputeType compute = ComputeType::kF32) {
  DenseAttentionArgs a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.out = out->data();
  a.q_stride = a.k_stride = a.v_stride = a.out_stride = stride;
  a.num_tokens = tokens;
  a.seq_len = seq;
  a.num_heads = heads;
  a.head_dim = hd;
  a.scale = scale;
  a.compute = compute;
  return a;
}

// kBF16 against Bf16Reference: the one difference allowed is a numerator 1
// ulp from the reference's (the polynomial exp) rounding to the other bf16
// neighbour, which moves an output by 2^-8 of that key's share of it
// (measured at most 1.7e-5 here).
constexpr double kBf16Tol = 5e-4;
// Where kBF16 is not the chain (test_util.h's Bf16IsTheChain: TDPBF16PS's
// own sums on AMX hardware), more numerators land on the other bf16
// neighbour: measured 9.2e-4 on Bf16IsNotF32's case.
constexpr double kBf16HardwareTol = 2e-3;

// Odd shapes for every ISA path and both compute types: one token; head_dim
// under, between and over the vector widths (4, 8, 16) and the 64-column
// value tiles (5, 20, 72, 136, 256); sequences shorter than a key block, a key
// block's tail, several work items per head (100, 577); padded row strides.
TEST(DenseAttentionTest, MatchesReferenceWithStridesAndThreads) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  ThreadPool pool(2);
  for (Case c : {Case{1, 1, 1, 4, 0}, Case{2, 17, 2, 16, 3}, Case{3, 50, 3, 8, 5},
                 Case{1, 577, 1, 64, 0}, Case{2, 100, 2, 5, 1}, Case{1, 33, 3, 20, 0},
                 Case{1, 129, 2, 72, 7}, Case{2, 61, 1, 136, 0}, Case{1, 70, 1, 256, 2}}) {
    const int64_t tokens = c.seqs * c.seq, width = c.heads * c.hd, stride = width + c.pad;
    std::vector<float> q(tokens * stride), k(q.size()), v(q.size());
    for (auto* t : {&q, &k, &v})
      for (float& x : *t) x = nd(rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
    for (ComputeType compute : {ComputeType::kF32, ComputeType::kBF16}) {
      const bool bf16 = compute == ComputeType::kBF16;
      const std::vector<double> want =
          (bf16 ? Bf16Reference : Reference)(q, k, v, stride, tokens, c.seq, c.heads, c.hd, scale);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
        for (CpuIsa isa : kIsas) {
          if (!CpuIsaSupported(isa)) continue;
          SCOPED_TRACE(std::string(CpuIsaName(isa)) + " " + ComputeTypeName(compute));
          std::vector<float> out(tokens * stride, 123.0f);
          ASSERT_TRUE(
              DenseAttentionWithIsa(
                  Args(q, k, v, &out, stride, tokens, c.seq, c.heads, c.hd, scale, compute), p, isa)
                  .ok());
          for (int64_t t = 0; t < tokens; ++t) {
            for (int64_t j = 0; j < width; ++j)
              ASSERT_NEAR(out[t * stride + j], want[t * width + j],
                          !bf16                          ? 2e-5
                          : testing::Bf16IsTheChain(isa) ? kBf16Tol
                                                         : kBf16HardwareTol)
                  << "seq_len " << c.seq << " head_dim " << c.hd << " token " << t << " col " << j;
            for (int64_t j = width; j < stride; ++j) ASSERT_EQ(out[t * stride + j], 123.0f);
          }
        }
    }
  }
}

// Scores far apart (scale 40): most softmax weights underflow to 0, and the
// largest score's key dominates; a negative and a zero scale are plain
// arithmetic too (a zero scale averages the values).
TEST(DenseAttentionTest, ExtremeAndSignedScales) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int64_t seq = 37, heads = 2, hd = 24, width = heads * hd;
  std::vector<float> q(seq * width), k(q.size()), v(q.size());
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = nd(rng);
  for (float scale : {40.0f, -0.7f, 0.0f}) {
    std::vector<double> want = Reference(q, k, v, width, seq, seq, heads, hd, scale);
    for (CpuIsa isa : kIsas) {
      if (!CpuIsaSupported(isa)) continue;
      SCOPED_TRACE(CpuIsaName(isa));
      std::vector<float> out(seq * width);
      ASSERT_TRUE(DenseAttentionWithIsa(Args(q, k, v, &out, width, seq, seq, heads, hd, scale),
                                        nullptr, isa)
                      .ok());
      for (int64_t i = 0; i < seq * width; ++i)
        ASSERT_NEAR(out[i], want[i], 2e-5) << "scale " << scale << " at " << i;
    }
  }
}

// A row's bits do not depend on the thread count or on where the work items
// and row tiles fall: the same rows come out alike with a pool, without one,
// and as the only sequence of a batch.
TEST(DenseAttentionTest, BitsDoNotDependOnThreadsOrBatch) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd;
  const int64_t seq = 113, heads = 3, hd = 40, width = heads * hd;
  std::vector<float> q(3 * seq * width), k(q.size()), v(q.size());
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = nd(rng);
  ThreadPool pool(2);
  for (ComputeType compute : {ComputeType::kF32, ComputeType::kBF16})
    for (CpuIsa isa : kIsas) {
      if (!CpuIsaSupported(isa)) continue;
      SCOPED_TRACE(std::string(CpuIsaName(isa)) + " " + ComputeTypeName(compute));
      std::vector<float> all(q.size()), alone(seq * width);
      ASSERT_TRUE(
          DenseAttentionWithIsa(Args(q, k, v, &all, width, 3 * seq, seq, heads, hd, 0.2f, compute),
                                &pool, isa)
              .ok());
      for (int64_t n = 0; n < 3; ++n) {
        const int64_t at = n * seq * width;
        std::vector<float> qn(q.begin() + at, q.begin() + at + seq * width),
            kn(k.begin() + at, k.begin() + at + seq * width),
            vn(v.begin() + at, v.begin() + at + seq * width);
        ASSERT_TRUE(
            DenseAttentionWithIsa(
                Args(qn, kn, vn, &alone, width, seq, seq, heads, hd, 0.2f, compute), nullptr, isa)
                .ok());
        for (int64_t i = 0; i < seq * width; ++i) ASSERT_EQ(alone[i], all[at + i]) << n << " " << i;
      }
    }
}

TEST(DenseAttentionTest, SequencesDoNotSeeEachOther) {
  // The first sequence's output is bit-identical alone and batched with another.
  const int64_t seq = 9, heads = 2, hd = 8, width = heads * hd;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> q(2 * seq * width), k(q.size()), v(q.size());
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = nd(rng);
  auto run = [&](int64_t tokens) {
    std::vector<float> out(tokens * width);
    DenseAttentionArgs a{q.data(), k.data(), v.data(), out.data(), width, width, width,
                         width,    tokens,   seq,      heads,      hd,    0.3f};
    EXPECT_TRUE(DenseAttention(a, nullptr).ok());
    return out;
  };
  std::vector<float> alone = run(seq), both = run(2 * seq);
  for (int64_t i = 0; i < seq * width; ++i) ASSERT_EQ(alone[i], both[i]);
}

TEST(DenseAttentionTest, RejectsBadShapes) {
  float buf[64] = {};
  DenseAttentionArgs a{buf, buf, buf, buf, 8, 8, 8, 8, 6, 4, 2, 4, 1.0f};
  Status s = DenseAttention(a, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not a multiple of seq_len 4"), std::string::npos) << s.message();
  a.num_tokens = 4;
  a.q_stride = 7;
  s = DenseAttention(a, nullptr);
  EXPECT_NE(s.message().find("row stride 7 is shorter than 8"), std::string::npos) << s.message();
  a.q_stride = 8;
  a.compute = ComputeType::kInt8;
  s = DenseAttention(a, nullptr);
  EXPECT_NE(s.message().find("compute type int8 is not f32 or bf16"), std::string::npos)
      << s.message();
  a.compute = ComputeType::kF32;
  a.head_dim = 0;
  EXPECT_FALSE(DenseAttention(a, nullptr).ok());
}

// ---- kBF16: the scores and the outputs as kBF16 matmuls (dense_attention.h).

// The bf16 contract is not f32's: on MatchesReferenceWithStridesAndThreads'
// CLIP-L-shaped case, f32 compute lands over 10 x kBf16Tol from the bf16
// reference (0.016 here), bf16 compute within kBf16Tol.
TEST(DenseAttentionBf16Test, Bf16IsNotF32) {
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  const int64_t seq = 577, hd = 64;
  std::vector<float> q(seq * hd), k(q.size()), v(q.size());
  for (auto* t : {&q, &k, &v})
    for (float& x : *t) x = nd(rng);
  const float scale = 0.125f;
  const std::vector<double> want = Bf16Reference(q, k, v, hd, seq, seq, 1, hd, scale);
  auto off = [&](ComputeType compute) {
    std::vector<float> out(q.size());
    EXPECT_TRUE(
        DenseAttention(Args(q, k, v, &out, hd, seq, seq, 1, hd, scale, compute), nullptr).ok());
    double m = 0;
    for (size_t i = 0; i < out.size(); ++i) m = std::max(m, std::fabs(out[i] - want[i]));
    return m;
  };
  EXPECT_LE(off(ComputeType::kBF16),
            testing::Bf16IsTheChain(BestCpuIsa()) ? kBf16Tol : kBf16HardwareTol);
  EXPECT_GT(off(ComputeType::kF32), 10 * kBf16Tol)
      << "f32 compute is as close to the bf16 contract";
}

// With scale 0 every numerator is exactly 1 and the sum exactly seq_len, so
// each output is exactly its value column's kBF16 chain over the keys times
// 1 / seq_len: bit for bit on every ISA path where kBF16 is the chain, within
// 2^-20 of the values' magnitudes where it is not (Bf16IsTheChain). The values
// span 2^-20..2^20, so summing a pair's elements in the other order, or a
// value unrounded, shows.
TEST(DenseAttentionBf16Test, OutputsAreTheBf16ChainOverKeys) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd;
  std::uniform_int_distribution<int> ex(-20, 20);
  for (int64_t seq : {1, 2, 31, 64, 97}) {
    const int64_t heads = 2, hd = 24, width = heads * hd;
    std::vector<float> q(seq * width), k(q.size()), v(q.size());
    for (auto* t : {&q, &k}) std::generate(t->begin(), t->end(), [&] { return nd(rng); });
    for (float& x : v) x = std::ldexp(nd(rng), ex(rng));
    for (CpuIsa isa : kIsas) {
      if (!CpuIsaSupported(isa)) continue;
      SCOPED_TRACE(CpuIsaName(isa));
      std::vector<float> out(q.size());
      ASSERT_TRUE(DenseAttentionWithIsa(
                      Args(q, k, v, &out, width, seq, seq, heads, hd, 0.0f, ComputeType::kBF16),
                      nullptr, isa)
                      .ok());
      const std::vector<float> ones(seq, 1.0f);
      for (int64_t i = 0; i < seq; ++i)
        for (int64_t c = 0; c < width; ++c) {
          const float chain =
              Bf16ChainDot(ones.data(), 1, &v[c], width, seq) * (1.0f / static_cast<float>(seq));
          if (!testing::Bf16IsTheChain(isa)) {
            double magnitude = 0;
            for (int64_t j = 0; j < seq; ++j) magnitude += std::fabs(v[j * width + c]);
            ASSERT_NEAR(out[i * width + c], chain, std::ldexp(magnitude / seq, -20))
                << "seq_len " << seq << " row " << i << " col " << c;
            continue;
          }
          ASSERT_EQ(testing::Bits(out[i * width + c]), testing::Bits(chain))
              << "seq_len " << seq << " row " << i << " col " << c;
        }
    }
  }
}

}  // namespace
}  // namespace xrt
