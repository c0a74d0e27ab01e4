#include "runtime/kernels/dense_attention.h"

#include <cmath>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace xrt {
namespace {

// softmax(scale q k^T) v per sequence and head, in double.
std::vector<double> Reference(const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, int64_t stride, int64_t tokens,
                              int64_t seq, int64_t heads, int64_t hd, double scale) {
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

struct Case {
  int64_t seqs, seq, heads, hd, pad;
};

constexpr CpuIsa kIsas[] = {CpuIsa::kScalar,     CpuIsa::kAvx2,       CpuIsa::kAvx512,
                            CpuIsa::kAvx512Vnni, CpuIsa::kAvx512Bf16, CpuIsa::kAmx};

DenseAttentionArgs Args(const std::vector<float>& q, const std::vector<float>& k,
                        const std::vector<float>& v, std::vector<float>* out, int64_t stride,
                        int64_t tokens, int64_t seq, int64_t heads, int64_t hd, float scale) {
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
  return a;
}

// Odd shapes for every ISA path: one token; head_dim under, between and over
// the vector widths (4, 8, 16) and the 64-column value tiles (5, 20, 72, 136,
// 256); sequences shorter than a key block, a key block's tail, several work
// items per head (100, 577); padded row strides.
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
    std::vector<double> want = Reference(q, k, v, stride, tokens, c.seq, c.heads, c.hd, scale);
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool})
      for (CpuIsa isa : kIsas) {
        if (!CpuIsaSupported(isa)) continue;
        SCOPED_TRACE(CpuIsaName(isa));
        std::vector<float> out(tokens * stride, 123.0f);
        ASSERT_TRUE(DenseAttentionWithIsa(
                        Args(q, k, v, &out, stride, tokens, c.seq, c.heads, c.hd, scale), p, isa)
                        .ok());
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t j = 0; j < width; ++j)
            ASSERT_NEAR(out[t * stride + j], want[t * width + j], 2e-5)
                << "seq_len " << c.seq << " head_dim " << c.hd << " token " << t << " col " << j;
          for (int64_t j = width; j < stride; ++j) ASSERT_EQ(out[t * stride + j], 123.0f);
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
  for (CpuIsa isa : kIsas) {
    if (!CpuIsaSupported(isa)) continue;
    SCOPED_TRACE(CpuIsaName(isa));
    std::vector<float> all(q.size()), alone(seq * width);
    ASSERT_TRUE(
        DenseAttentionWithIsa(Args(q, k, v, &all, width, 3 * seq, seq, heads, hd, 0.2f), &pool, isa)
            .ok());
    for (int64_t n = 0; n < 3; ++n) {
      const int64_t at = n * seq * width;
      std::vector<float> qn(q.begin() + at, q.begin() + at + seq * width),
          kn(k.begin() + at, k.begin() + at + seq * width),
          vn(v.begin() + at, v.begin() + at + seq * width);
      ASSERT_TRUE(DenseAttentionWithIsa(Args(qn, kn, vn, &alone, width, seq, seq, heads, hd, 0.2f),
                                        nullptr, isa)
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
  a.head_dim = 0;
  EXPECT_FALSE(DenseAttention(a, nullptr).ok());
}

}  // namespace
}  // namespace xrt
