// xcc check: coverage gaps and staleness are findings naming what is wrong.
#include "compiler/check.h"

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "compiler/artifact/artifact_patch_for_tests.h"
#include "compiler/compile.h"
#include "runtime/loader/artifact.h"
#include "runtime/loader/segment_checksum.h"

namespace xcc {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Flips the lowest bit of the byte at `offset` of the file at `path`, in place.
void FlipByte(const fs::path& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 1);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(&c, 1);
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Index of the first segment of `kind` in the artifact at `path`.
uint32_t SegmentOfKind(const std::string& path, xpk::SegmentKind kind) {
  std::vector<uint8_t> bytes = ReadBytes(path);
  const auto* segments = ManifestOf(bytes)->segments();
  for (uint32_t i = 0; i < segments->size(); ++i)
    if (segments->Get(i)->kind() == kind) return i;
  ADD_FAILURE() << path << " has no " << xpk::EnumNameSegmentKind(kind) << " segment";
  return 0;
}

// `r` ran and has exactly one finding, of `kind`, saying `message`.
void ExpectOneFinding(const xrt::Expected<CheckReport>& r, const std::string& kind,
                      const std::string& message) {
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 1u) << r->ToText();
  EXPECT_EQ(r->findings[0].kind, kind);
  EXPECT_EQ(r->findings[0].message, message);
}

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
  FlipByte(weights, fs::file_size(weights) - 7);
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
  EXPECT_THAT(r->ToText(),
              HasSubstr("generation_config.json (generation_config) is no longer present"));
  EXPECT_THAT(r->ToText(), HasSubstr("extra.safetensors was not an input"));
}

TEST_F(CheckTest, VerifyWeightsFindsAFlippedWeightByte) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  o.verify_weights = true;
  auto clean = RunCheck(o);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_TRUE(clean->findings.empty()) << clean->ToText();
  EXPECT_THAT(clean->ToText(), HasSubstr("recomputed the checksums of 1 weights segment(s)"));
  EXPECT_THAT(clean->ToText(), HasSubstr("(code): checksum verified when the artifact was opened"));

  const uint32_t index = SegmentOfKind(o.artifact_path, xpk::SegmentKind::weights);
  std::vector<uint8_t> bytes = ReadBytes(o.artifact_path);
  const xpk::Segment* seg = ManifestOf(bytes)->segments()->Get(index);
  const uint64_t begin = seg->offset(), end = seg->offset() + seg->size();
  const std::string expected = xrt::HexDigest(seg->checksum()->data(), seg->checksum()->size());
  FlipByte(o.artifact_path, begin + seg->size() / 2);
  bytes = ReadBytes(o.artifact_path);
  const xrt::Xxh3_128Digest actual = xrt::ComputeXxh3_128(bytes.data() + begin, end - begin);

  ExpectOneFinding(RunCheck(o), "integrity",
                   fmt::format("{}: segment {} (weights): checksum mismatch, the bytes [{}, {}) "
                               "are corrupt: expected xxh3_128 {}, actual {}",
                               o.artifact_path, index, begin, end, expected,
                               xrt::HexDigest(actual.data(), actual.size())));
  // Without the flag the weights are not read.
  o.verify_weights = false;
  auto unchecked = RunCheck(o);
  ASSERT_TRUE(unchecked.ok());
  EXPECT_TRUE(unchecked->findings.empty()) << unchecked->ToText();
}

TEST_F(CheckTest, CorruptCodeCannotBeChecked) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  const uint32_t index = SegmentOfKind(o.artifact_path, xpk::SegmentKind::code);
  std::vector<uint8_t> bytes = ReadBytes(o.artifact_path);
  FlipByte(o.artifact_path, ManifestOf(bytes)->segments()->Get(index)->offset() + 100);
  auto r = RunCheck(o);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(),
              HasSubstr(fmt::format("segment {} (code): checksum mismatch", index)));
}

TEST_F(CheckTest, Format10ArtifactWithoutChecksumsIsAFinding) {
  CheckOptions o;
  o.artifact_path = Compile("a.xpk", {}, 64, 4);
  std::vector<uint8_t> bytes = ReadBytes(o.artifact_path);
  StripSegmentChecksums(bytes, 0);
  std::ofstream(o.artifact_path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  const uint32_t code = SegmentOfKind(o.artifact_path, xpk::SegmentKind::code);
  const uint32_t weights = SegmentOfKind(o.artifact_path, xpk::SegmentKind::weights);
  ExpectOneFinding(RunCheck(o), "integrity",
                   fmt::format("segment {} (code) has no checksum (artifact format 1.0): its "
                               "code is loaded unverified; recompile",
                               code));
  o.verify_weights = true;
  auto r = RunCheck(o);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->findings.size(), 2u) << r->ToText();
  EXPECT_THAT(r->ToText(),
              HasSubstr(fmt::format("FAIL [integrity] segment {} (weights) has no checksum "
                                    "(artifact format 1.0): its bytes cannot be verified; "
                                    "recompile",
                                    weights)));
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
