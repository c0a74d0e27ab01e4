// xcc tune-buckets: the DP is exact (checked against brute force) and beats the
// default bucket set on the committed trace at the same executable count.
#include "compiler/tune_buckets.h"

#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "compiler/compile.h"

namespace xcc {
namespace {

namespace fs = std::filesystem;

// Best padding over every subset of candidate sizes (plus `cover`) of size <= k.
int64_t BruteForce(const std::vector<int64_t>& steps, int64_t cover, int64_t k) {
  std::vector<int64_t> cands(steps.begin(), steps.end());
  std::sort(cands.begin(), cands.end());
  cands.erase(std::unique(cands.begin(), cands.end()), cands.end());
  cands.erase(std::remove(cands.begin(), cands.end(), cover), cands.end());
  int64_t best = INT64_MAX;
  for (uint32_t mask = 0; mask < (1u << cands.size()); ++mask) {
    if (__builtin_popcount(mask) > k - 1) continue;
    std::vector<int64_t> b;
    for (size_t i = 0; i < cands.size(); ++i)
      if (mask & (1u << i)) b.push_back(cands[i]);
    b.push_back(cover);
    best = std::min(best, PaddingFor(steps, b));
  }
  return best;
}

TEST(OptimalBuckets, MatchesBruteForce) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t cover = 8 + rng() % 60;
    std::vector<int64_t> steps(1 + rng() % 25);
    for (int64_t& s : steps) s = 1 + rng() % cover;
    const int64_t k = 1 + rng() % 4;
    auto b = OptimalBuckets(steps, cover, k);
    ASSERT_TRUE(b.ok());
    ASSERT_LE(static_cast<int64_t>(b->size()), k);
    EXPECT_EQ(b->back(), cover);
    EXPECT_TRUE(std::is_sorted(b->begin(), b->end()));
    EXPECT_EQ(PaddingFor(steps, *b), BruteForce(steps, cover, k)) << "trial " << trial;
  }
}

TEST(OptimalBuckets, RejectsStepsBeyondTheBudget) {
  EXPECT_FALSE(OptimalBuckets({5, 70}, 64, 3).ok());
  EXPECT_FALSE(OptimalBuckets({5}, 64, 0).ok());
}

// Options compiling the fixture `model` into `dir`/m.xpk with a token budget of 64.
CompileOptions FixtureOptions(const std::string& model, const fs::path& dir, int64_t seqs) {
  fs::create_directories(dir);
  CompileOptions o;
  o.model_path = (fs::path(XCC_SOURCE_DIR) / "tests/fixtures" / model).string();
  o.output_path = (dir / "m.xpk").string();
  o.quiet = true;
  o.limits.max_num_seqs = seqs;
  o.limits.max_num_batched_tokens = 64;
  o.limits.max_model_len = 256;
  return o;
}

TuneOptions TraceOptions(const CompileOptions& o, const std::string& trace) {
  TuneOptions t;
  t.artifact_path = o.output_path;
  t.trace_path = (fs::path(XCC_SOURCE_DIR) / "tests/fixtures/traces" / trace).string();
  return t;
}

TEST(TuneBuckets, BeatsTheDefaultSetOnTheCommittedTrace) {
  const fs::path dir = fs::temp_directory_path() / "xcc_tune_test";
  CompileOptions o = FixtureOptions("models/llama_gqa", dir, 8);
  ASSERT_TRUE(Compile(o).ok());
  TuneOptions t = TraceOptions(o, "mixed.jsonl");
  auto r = TuneBuckets(t);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->proposed.size(), r->defaults.size());
  EXPECT_EQ(r->proposed.back(), 64);
  EXPECT_LT(r->proposed_padding, r->default_padding) << r->ToText();
  EXPECT_NE(r->flags.find("--token-buckets"), std::string::npos);
  fs::remove_all(dir);
}

TEST(TuneBuckets, KeepsAVisionEncodeBucketForEveryImageCount) {
  const fs::path dir = fs::temp_directory_path() / "xcc_tune_vision_test";
  // 16 tokens per image: 4 images per step.
  CompileOptions o = FixtureOptions("llava/llava_clip_llama", dir, 4);
  o.image_buckets = {1};
  ASSERT_TRUE(Compile(o).ok());
  TuneOptions t = TraceOptions(o, "images.jsonl");
  auto r = TuneBuckets(t);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->images_per_step, 4);
  EXPECT_EQ(r->image_buckets, (std::vector<int64_t>{1, 2, 4}));
  EXPECT_NE(r->flags.find("--image-buckets 1,2,4"), std::string::npos) << r->flags;
  // Compiled with a bucket for every count: those are kept.
  o.image_buckets = {3, 4};
  ASSERT_TRUE(Compile(o).ok());
  r = TuneBuckets(t);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->image_buckets, (std::vector<int64_t>{3, 4}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xcc
