#include "runtime/sampler/sampler.h"

#include <cmath>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>

namespace xrt {
namespace {

SamplingState MakeState(SamplingParams p, int32_t vocab) {
  auto s = SamplingState::Create(p, vocab);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

std::vector<double> Softmax(const std::vector<float>& logits, double temperature = 1.0) {
  double m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += p[i] = std::exp((logits[i] - m) / temperature);
  for (double& v : p) v /= z;
  return p;
}

// Draws `n` tokens (fresh history each time, so penalties stay off) and
// returns the observed frequencies.
std::vector<double> Frequencies(const SamplingParams& p, const std::vector<float>& logits, int n) {
  Sampler sampler;
  auto st = MakeState(p, static_cast<int32_t>(logits.size()));
  std::vector<double> freq(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    auto r = sampler.Sample(logits.data(), &st);
    EXPECT_TRUE(r.ok());
    freq[static_cast<size_t>(r->token)] += 1.0 / n;
  }
  return freq;
}

TEST(SamplingParams, ValidationNamesTheParameter) {
  struct Case {
    SamplingParams p;
    const char* name;
  };
  std::vector<Case> bad;
  SamplingParams p;
  p.temperature = -0.5f;
  bad.push_back({p, "temperature"});
  p = {};
  p.temperature = NAN;
  bad.push_back({p, "temperature"});
  p = {};
  p.top_p = 0.0f;
  bad.push_back({p, "top_p"});
  p = {};
  p.top_p = 1.5f;
  bad.push_back({p, "top_p"});
  p = {};
  p.top_k = -2;
  bad.push_back({p, "top_k"});
  p = {};
  p.min_p = 1.5f;
  bad.push_back({p, "min_p"});
  p = {};
  p.presence_penalty = 3;
  bad.push_back({p, "presence_penalty"});
  p = {};
  p.frequency_penalty = -2.5f;
  bad.push_back({p, "frequency_penalty"});
  p = {};
  p.repetition_penalty = 0;
  bad.push_back({p, "repetition_penalty"});
  p = {};
  p.logprobs = 21;
  bad.push_back({p, "logprobs"});
  p = {};
  p.logprobs = -2;
  bad.push_back({p, "logprobs"});
  p = {};
  for (const auto& c : bad) {
    Status s = ValidateSamplingParams(c.p);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(s.message().rfind(c.name, 0), 0u) << s.message();
    EXPECT_FALSE(SamplingState::Create(c.p, 10).ok());
  }
  EXPECT_TRUE(ValidateSamplingParams(SamplingParams{}).ok());
  p.top_k = 0;
  p.temperature = 0;
  p.logprobs = 20;
  EXPECT_TRUE(ValidateSamplingParams(p).ok());
  EXPECT_FALSE(SamplingState::Create(SamplingParams{}, 0).ok());
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  Sampler sampler;
  auto st = MakeState(p, 6);
  std::vector<float> logits = {0.1f, 3.0f, -1.0f, 3.0f, NAN, 2.9f};
  for (int i = 0; i < 3; ++i) {
    auto r = sampler.Sample(logits.data(), &st);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->token, 1);
  }
  EXPECT_EQ(st.OutputCount(1), 3);
}

TEST(Sampler, NoFiniteLogitIsAnError) {
  Sampler sampler;
  auto st = MakeState(SamplingParams{}, 3);
  std::vector<float> logits = {-INFINITY, NAN, -INFINITY};
  auto r = sampler.Sample(logits.data(), &st);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

std::vector<float> RandomLogits(int n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(static_cast<double>(g() >> 11) * 0x1.0p-53 * 8.0 - 4.0);
  return v;
}

TEST(Sampler, SameSeedSameTokensWhateverElseRuns) {
  const int k_vocab = 50000;
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  p.top_k = 1000;
  p.has_seed = true;
  p.seed = 1234;
  auto a = MakeState(p, k_vocab);
  auto b = MakeState(p, k_vocab);
  SamplingParams other = p;
  other.seed = 99;
  auto c = MakeState(other, k_vocab);
  Sampler s1, s2;
  std::vector<int32_t> ta, tb, tc;
  for (int step = 0; step < 50; ++step) {
    std::vector<float> logits = RandomLogits(k_vocab, static_cast<uint64_t>(step));
    ta.push_back(s1.Sample(logits.data(), &a)->token);
    // Another request sampled in between, on the other sampler and on this one.
    tc.push_back(s1.Sample(logits.data(), &c)->token);
    tc.push_back(s2.Sample(logits.data(), &c)->token);
    tb.push_back(s2.Sample(logits.data(), &b)->token);
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, std::vector<int32_t>(tc.begin(), tc.begin() + 50));
}

TEST(Sampler, RngSequenceIsPinned) {
  // mt19937_64's output is fixed by the standard; the 10000th output of the
  // default seed is 9981545732273789042. Our uniform is its top 53 bits.
  SamplingParams p;
  p.has_seed = true;
  p.seed = 5489;
  auto st = MakeState(p, 2);
  double u = 0;
  for (int i = 0; i < 10000; ++i) u = st.NextUniform();
  EXPECT_EQ(u, static_cast<double>(9981545732273789042ull >> 11) * 0x1.0p-53);
}

TEST(Sampler, TopKOneEqualsGreedy) {
  SamplingParams greedy;
  greedy.temperature = 0;
  SamplingParams k1;
  k1.top_k = 1;
  k1.temperature = 1.5f;
  SamplingParams tiny_p;
  tiny_p.top_p = 1e-6f;
  Sampler sampler;
  auto g = MakeState(greedy, 30000);
  auto s = MakeState(k1, 30000);
  auto t = MakeState(tiny_p, 30000);
  for (int step = 0; step < 20; ++step) {
    std::vector<float> logits = RandomLogits(30000, 100 + static_cast<uint64_t>(step));
    int32_t want = sampler.Sample(logits.data(), &g)->token;
    EXPECT_EQ(sampler.Sample(logits.data(), &s)->token, want);
    EXPECT_EQ(sampler.Sample(logits.data(), &t)->token, want);
  }
}

TEST(Sampler, FrequenciesMatchSoftmax) {
  const std::vector<float> logits = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
  SamplingParams p;
  p.has_seed = true;
  p.seed = 42;
  for (float temp : {1.0f, 0.7f, 2.0f}) {
    p.temperature = temp;
    std::vector<double> want = Softmax(logits, temp);
    std::vector<double> got = Frequencies(p, logits, 20000);
    for (size_t i = 0; i < logits.size(); ++i) {
      // std error <= sqrt(0.25 / 20000) = 0.0035; 0.015 is > 4 sigma.
      EXPECT_NEAR(got[i], want[i], 0.015) << "token " << i << " temperature " << temp;
    }
  }
}

TEST(Sampler, TopKAndTopPRenormalize) {
  // probabilities 0.5, 0.3, 0.15, 0.05
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f),
                                     std::log(0.05f)};
  SamplingParams p;
  p.has_seed = true;
  p.seed = 7;
  p.top_k = 3;  // 0.5, 0.3, 0.15 renormalized by 0.95
  std::vector<double> got = Frequencies(p, logits, 20000);
  EXPECT_NEAR(got[0], 0.5 / 0.95, 0.015);
  EXPECT_NEAR(got[1], 0.3 / 0.95, 0.015);
  EXPECT_NEAR(got[2], 0.15 / 0.95, 0.015);
  EXPECT_EQ(got[3], 0.0);

  p.top_k = -1;
  p.top_p = 0.7f;  // mass above token 1 is 0.5 < 0.7: kept; above token 2 is 0.8: dropped
  got = Frequencies(p, logits, 20000);
  EXPECT_NEAR(got[0], 0.5 / 0.8, 0.015);
  EXPECT_NEAR(got[1], 0.3 / 0.8, 0.015);
  EXPECT_EQ(got[2] + got[3], 0.0);
}

TEST(Sampler, TopPOnLargeVocabKeepsTheNucleus) {
  // A long tail forces top_p to sort several chunks.
  const int k_vocab = 100000;
  std::vector<float> logits(k_vocab, 0.0f);
  for (int i = 0; i < 500; ++i) logits[static_cast<size_t>(i * 7)] = 6.0f;
  SamplingParams p;
  p.top_p = 0.9f;
  p.logprobs = 0;
  p.has_seed = true;
  p.seed = 3;
  Sampler sampler;
  auto st = MakeState(p, k_vocab);
  // Mass of the 500 boosted tokens: 500 e^6 / (500 e^6 + 99500) = 0.669 < 0.9,
  // so the nucleus also takes some of the tail.
  int boosted = 0;
  for (int i = 0; i < 500; ++i) {
    auto r = sampler.Sample(logits.data(), &st);
    ASSERT_TRUE(r.ok());
    boosted += r->token % 7 == 0 && r->token < 3500 ? 1 : 0;
    ASSERT_LE(r->logprob, 0.0f);
  }
  // 0.669 / 0.9 = 0.74 expected; std error 0.02.
  EXPECT_GT(boosted, 500 * 0.65);
  EXPECT_LT(boosted, 500 * 0.83);
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  // p = 0.6, 0.25, 0.1, 0.05; min_p 0.2 keeps p >= 0.12: tokens 0, 1.
  const std::vector<float> logits = {std::log(0.6f), std::log(0.25f), std::log(0.1f),
                                     std::log(0.05f)};
  SamplingParams p;
  p.min_p = 0.2f;
  p.has_seed = true;
  p.seed = 11;
  std::vector<double> got = Frequencies(p, logits, 20000);
  EXPECT_NEAR(got[0], 0.6 / 0.85, 0.015);
  EXPECT_NEAR(got[1], 0.25 / 0.85, 0.015);
  EXPECT_EQ(got[2] + got[3], 0.0);
}

// With logprobs in processed mode at temperature 1 and no truncation, the
// reported logprobs are the log-softmax of the penalized logits.
std::vector<float> ProcessedLogprobs(SamplingState* st, const std::vector<float>& logits) {
  Sampler sampler;
  auto r = sampler.Sample(logits.data(), st);
  EXPECT_TRUE(r.ok());
  std::vector<float> lp(logits.size(), NAN);
  for (const auto& t : r->top_logprobs) lp[static_cast<size_t>(t.token)] = t.logprob;
  return lp;
}

std::vector<float> LogSoftmax(const std::vector<float>& x) {
  double m = *std::max_element(x.begin(), x.end()), z = 0;
  for (float v : x) z += std::exp(v - m);
  std::vector<float> out;
  for (float v : x) out.push_back(static_cast<float>(v - m - std::log(z)));
  return out;
}

TEST(Sampler, PenaltiesFollowVllm) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 1.0f};
  SamplingParams p;
  p.logprobs = 4;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  auto st = MakeState(p, 4);
  const int32_t prompt[] = {1};
  ASSERT_TRUE(st.SetPromptTokens(prompt, 1).ok());
  ASSERT_TRUE(st.AddOutputToken(0).ok());
  ASSERT_TRUE(st.AddOutputToken(0).ok());
  ASSERT_TRUE(st.AddOutputToken(2).ok());
  EXPECT_FALSE(st.AddOutputToken(4).ok());
  // token 0: 2 / 2 - 0.5 * 2 - 0.25 = -0.25; token 1 (prompt only): -1 * 2 = -2;
  // token 2: 0.5 / 2 - 0.5 - 0.25 = -0.5; token 3: untouched 1.0.
  std::vector<float> want = LogSoftmax({-0.25f, -2.0f, -0.5f, 1.0f});
  std::vector<float> got = ProcessedLogprobs(&st, logits);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;

  // Without penalties the same logits give the plain log-softmax.
  SamplingParams plain;
  plain.logprobs = 4;
  auto st2 = MakeState(plain, 4);
  ASSERT_TRUE(st2.AddOutputToken(0).ok());
  got = ProcessedLogprobs(&st2, logits);
  want = LogSoftmax(logits);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
}

TEST(Sampler, PenaltiesChangeTheGreedyChoice) {
  const std::vector<float> logits = {3.0f, 2.5f, 0.0f};
  SamplingParams p;
  p.temperature = 0;
  p.presence_penalty = 1.0f;
  Sampler sampler;
  auto st = MakeState(p, 3);
  EXPECT_EQ(sampler.Sample(logits.data(), &st)->token, 0);  // 3.0 vs 2.5
  EXPECT_EQ(sampler.Sample(logits.data(), &st)->token, 1);  // 2.0 vs 2.5
  EXPECT_EQ(sampler.Sample(logits.data(), &st)->token, 0);  // 2.0 vs 1.5
}

TEST(Sampler, LogprobsAreNormalized) {
  const int k_vocab = 1000;
  std::vector<float> logits = RandomLogits(k_vocab, 5);
  for (LogprobsMode mode : {LogprobsMode::kProcessed, LogprobsMode::kRaw}) {
    SamplingParams p;
    p.temperature = 0.7f;
    p.top_k = 15;
    p.logprobs = 20;
    p.logprobs_mode = mode;
    p.has_seed = true;
    p.seed = 1;
    Sampler sampler;
    auto st = MakeState(p, k_vocab);
    auto r = sampler.Sample(logits.data(), &st);
    ASSERT_TRUE(r.ok());
    ASSERT_EQ(r->top_logprobs.size(), 20u);
    for (size_t i = 1; i < r->top_logprobs.size(); ++i)
      EXPECT_GE(r->top_logprobs[i - 1].logprob, r->top_logprobs[i].logprob);
    bool found = false;
    for (const auto& t : r->top_logprobs) found |= t.token == r->token && t.logprob == r->logprob;
    EXPECT_TRUE(found);
    EXPECT_GE(r->rank, 1);
    if (mode == LogprobsMode::kProcessed) {
      // Only the 15 kept tokens have mass, and it sums to 1.
      double sum = 0;
      for (size_t i = 0; i < 15; ++i) sum += std::exp(r->top_logprobs[i].logprob);
      EXPECT_NEAR(sum, 1.0, 1e-5);
      for (size_t i = 15; i < 20; ++i) EXPECT_EQ(r->top_logprobs[i].logprob, -INFINITY);
      EXPECT_LE(r->rank, 15);
      std::vector<double> pr = Softmax(std::vector<float>(logits), 0.7);
      std::vector<size_t> idx(k_vocab);
      std::iota(idx.begin(), idx.end(), 0);
      std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
      double top15 = 0;
      for (size_t i = 0; i < 15; ++i) top15 += pr[idx[i]];
      EXPECT_EQ(static_cast<size_t>(r->top_logprobs[0].token), idx[0]);
      EXPECT_NEAR(std::exp(r->top_logprobs[0].logprob), pr[idx[0]] / top15, 1e-5);
    } else {
      // Raw: log-softmax of the logits over the whole vocabulary.
      std::vector<float> want = LogSoftmax(logits);
      for (const auto& t : r->top_logprobs)
        EXPECT_NEAR(t.logprob, want[static_cast<size_t>(t.token)], 1e-4);
      EXPECT_NEAR(r->logprob, want[static_cast<size_t>(r->token)], 1e-4);
    }
  }
  // Full-vocabulary logprobs sum to 1.
  SamplingParams g;
  g.temperature = 0;
  g.logprobs = 20;
  std::vector<float> small = {0.3f, -0.2f, 1.1f, 0.0f, 2.0f};
  Sampler sampler;
  auto st = MakeState(g, 5);
  auto r = sampler.Sample(small.data(), &st);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->top_logprobs.size(), 5u);
  double sum = 0;
  for (const auto& t : r->top_logprobs) sum += std::exp(t.logprob);
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_EQ(r->token, 4);
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->top_logprobs[0].token, 4);
}

}  // namespace
}  // namespace xrt
