// xcc check: coverage gaps and staleness are findings naming what is wrong.
#include "compiler/check.h"

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/compile.h"

namespace xcc {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class CheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("xcc_check_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    model_ = dir_ / "model";
    fs::copy(fs::path(XCC_SOURCE_DIR) / "tests/fixtures/models/llama_gqa", model_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Compile(const std::string& name, std::vector<int64_t> buckets, int64_t budget,
                      int64_t seqs) {
    CompileOptions o;
    o.model_path = model_.string();
    o.output_path = (dir_ / name).string();
    o.quiet = true;
    o.token_buckets = std::move(buckets);
    o.limits.max_num_batched_tokens = budget;
    o.limits.max_num_seqs = seqs;
    o.limits.max_model_len = 256;
    auto s = xcc::Compile(o);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return o.output_path;
  }

  std::string WriteConfig(const std::string& json) {
    std::string p = (dir_ / "serving.json").string();
    std::ofstream(p) << json;
    return p;
  }

  fs::path dir_, model_;
};

TEST_F(CheckTest, DefaultBucketsCoverTheirLimits) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 100, 12);  // buckets 16..128, req buckets 8, 12
  o.inputs = {model_.string()};
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->findings.empty()) << r->ToText();
}

TEST_F(CheckTest, TokenBucketsBelowTheBudgetAreAGap) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {16, 32}, 32, 4);
  o.serving_config_path = WriteConfig(R"({"max-num-batched-tokens": 100})");
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 1u) << r->ToText();
  EXPECT_EQ(r->findings[0].kind, "coverage");
  EXPECT_THAT(r->findings[0].message, HasSubstr("num_tokens 33..100"));
  EXPECT_THAT(r->findings[0].message, HasSubstr("max_num_batched_tokens = 100"));
  EXPECT_THAT(r->findings[0].message, HasSubstr("largest compiled bucket 32"));
}

TEST_F(CheckTest, RaisingMaxNumSeqsIsAGap) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  o.serving_config_path = WriteConfig(R"({"max_num_seqs": 10})");
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->findings.empty());
  EXPECT_THAT(r->ToText(), HasSubstr("max_num_seqs 10 exceeds the 4 request rows"));
  EXPECT_THAT(r->ToText(), HasSubstr("5..10"));
}

TEST_F(CheckTest, OneChangedByteMakesTheArtifactStale) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  o.inputs = {model_.string()};
  auto fresh = RunCheck(o);
  ASSERT_TRUE(fresh.ok());
  EXPECT_TRUE(fresh->findings.empty()) << fresh->ToText();

  const fs::path weights = model_ / "model.safetensors";
  {
    std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-7, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 1);
    f.seekp(-7, std::ios::end);
    f.write(&c, 1);
  }
  auto stale = RunCheck(o);
  ASSERT_TRUE(stale.ok());
  ASSERT_EQ(stale->findings.size(), 1u) << stale->ToText();
  EXPECT_EQ(stale->findings[0].kind, "stale");
  EXPECT_THAT(stale->findings[0].message, HasSubstr("model.safetensors changed"));
}

TEST_F(CheckTest, AddedOrRemovedInputsAreStale) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  o.inputs = {model_.string()};
  fs::remove(model_ / "generation_config.json");
  std::ofstream(model_ / "extra.safetensors") << "x";
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->ToText(), HasSubstr("generation_config.json (generation_config) is no longer present"));
  EXPECT_THAT(r->ToText(), HasSubstr("extra.safetensors was not an input"));
}

TEST_F(CheckTest, BadServingConfigCannotRun) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  o.serving_config_path = WriteConfig(R"({"max-num-seq": 10})");
  auto r = RunCheck(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("unknown key 'max-num-seq'"));
  o.serving_config_path = (dir_ / "missing.json").string();
  EXPECT_FALSE(RunCheck(o).ok());
}

}  // namespace
}  // namespace xcc
