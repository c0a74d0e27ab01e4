// ArtifactWriter's streaming mode (StreamTo): the file it writes is byte-for-byte the one
// the in-memory mode writes for the same segments, whichever way the streamed segments
// get to their final offsets (fallocate collapse / insert, or copying down / up), the
// checksums it records are those of the bytes, and it keeps no segment bytes in memory.
// Round trips through the loader are runtime/loader/artifact_test.cc.
#include "compiler/artifact/artifact_writer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/loader/file_header.h"
#include "runtime/loader/segment_checksum.h"

namespace xcc {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint32_t x = seed;
  for (uint8_t& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  std::vector<uint8_t> bytes(static_cast<size_t>(f.tellg()));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return bytes;
}

// A minimal manifest (the loader is not asked: validate = false) whose size is set by a
// padding string, so a test can make it fit the stream reserve or not.
ManifestBuildFn Builder(size_t manifest_padding) {
  return [manifest_padding](flatbuffers::FlatBufferBuilder& fbb,
                            SegmentTable segments) -> Expected<flatbuffers::Offset<xpk::Manifest>> {
    auto config = xpk::CreateModelConfig(fbb, fbb.CreateString("LlamaForCausalLM"), 0, 0, 0, 0, 0,
                                         0, 0, 0, 0.0, 0.0, 0, false, false,
                                         fbb.CreateString(std::string(manifest_padding, 'x')));
    return xpk::CreateManifest(fbb, xrt::kXpkFormatMajor, xrt::kXpkFormatMinor, config, 0, 0,
                               segments);
  };
}

struct Case {
  bool code_first = false;  // first segment 64-aligned: the shift is not uniform
  bool big_align = false;   // a segment aligned beyond the page: the shift is not uniform
  bool allow_fallocate = true;
  size_t manifest_padding = 100;  // > reserve: the segments move up
  uint64_t reserve = uint64_t{1} << 20;
};

// Adds the same segments to `w`: weights (a 4 MiB tensor, so copies take several
// chunks, and a 3-byte one), code, a second weights segment, adapters (aligned to
// 64 KiB when `big_align`).
std::vector<WeightPlacement> AddSegments(ArtifactWriter& w, bool code_first, bool big_align) {
  std::vector<WeightPlacement> placed;
  if (code_first) {
    EXPECT_TRUE(w.AddSegment(xpk::SegmentKind::code, Pattern(100, 1)).ok());
  }
  static const std::vector<uint8_t> big = Pattern((size_t{4} << 20) + 1, 2);
  const std::vector<uint8_t> small = Pattern(3, 3), other = Pattern(5000, 4);
  placed.push_back(w.AppendWeight(big.data(), big.size()));
  placed.push_back(w.AppendWeight(small.data(), small.size()));
  EXPECT_TRUE(w.AddSegment(xpk::SegmentKind::code, Pattern(77, 5)).ok());
  placed.push_back(w.AppendWeight(other.data(), other.size()));
  w.StartWeightsSegment();
  placed.push_back(w.AppendWeight(small.data(), small.size()));
  EXPECT_TRUE(
      w.AddSegment(xpk::SegmentKind::adapters, Pattern(300, 6), big_align ? 65536 : 0).ok());
  return placed;
}

class ArtifactWriterStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/xpk_stream_test_" + std::to_string(::getpid());
    fs::remove_all(dir_);
    ASSERT_TRUE(fs::create_directories(dir_));
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Files in dir_ besides `keep`.
  int OtherFiles(const std::string& keep) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir_)) n += e.path().filename() != keep;
    return n;
  }
  std::string dir_;
};

TEST_F(ArtifactWriterStreamTest, StreamedFileEqualsInMemoryBytes) {
  ArtifactWriteOptions no_validate;
  no_validate.validate = false;
  std::vector<Case> cases;
  for (bool code_first : {false, true})
    for (bool big_align : {false, true})
      for (bool fallocate : {true, false})
        for (size_t padding : {size_t{100}, size_t{20000}})
          cases.push_back(
              {code_first, big_align, fallocate, padding, padding > 4096 ? 4096u : 1u << 20});
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "code_first " << c.code_first << " big_align " << c.big_align << " fallocate "
                 << c.allow_fallocate << " manifest padding " << c.manifest_padding << " reserve "
                 << c.reserve);
    ArtifactWriter memory;
    const std::vector<WeightPlacement> expected_placed =
        AddSegments(memory, c.code_first, c.big_align);
    EXPECT_GT(memory.buffered_bytes(), uint64_t{4} << 20);
    auto expected = memory.WriteToBytes(Builder(c.manifest_padding), no_validate);
    ASSERT_TRUE(expected.ok()) << expected.status().ToString();

    const std::string path = dir_ + "/model.xpk";
    ArtifactWriter streamed;
    ArtifactStreamOptions so;
    so.reserve = c.reserve;
    so.allow_fallocate = c.allow_fallocate;
    ASSERT_TRUE(streamed.StreamTo(path, so).ok());
    const std::vector<WeightPlacement> placed = AddSegments(streamed, c.code_first, c.big_align);
    EXPECT_EQ(streamed.buffered_bytes(), 0u);  // nothing kept in memory
    for (size_t i = 0; i < placed.size(); ++i) {
      EXPECT_EQ(placed[i].segment, expected_placed[i].segment);
      EXPECT_EQ(placed[i].offset, expected_placed[i].offset);
    }
    Status s = streamed.WriteToFile(path, Builder(c.manifest_padding), no_validate);
    ASSERT_TRUE(s.ok()) << s.ToString();
    const std::vector<uint8_t> got = ReadFile(path);
    ASSERT_EQ(got.size(), expected->size());
    EXPECT_TRUE(got == *expected) << "streamed file differs from the in-memory bytes";
    EXPECT_EQ(OtherFiles("model.xpk"), 0);  // the temporary file was renamed
    // The segments really moved up in the cases whose manifest exceeds the reserve.
    const xpk::Manifest* m = xpk::GetManifest(got.data() + xrt::kXpkHeaderSize);
    EXPECT_EQ(m->segments()->Get(0)->offset() > c.reserve, c.manifest_padding > c.reserve);

    // Every recorded checksum is the XXH3-128 of the segment's bytes in the file.
    ASSERT_EQ(m->segments()->size(), c.code_first ? 6u : 5u);
    for (uint32_t i = 0; i < m->segments()->size(); ++i) {
      const xpk::Segment* seg = m->segments()->Get(i);
      ASSERT_LE(seg->offset() + seg->size(), got.size());
      EXPECT_TRUE(xrt::VerifySegmentChecksum(*seg, i, got.data() + seg->offset(), seg->size()).ok())
          << "segment " << i;
    }
  }
}

TEST_F(ArtifactWriterStreamTest, MisuseIsRefused) {
  const std::string path = dir_ + "/model.xpk";
  ArtifactWriter late;
  ASSERT_TRUE(late.AddSegment(xpk::SegmentKind::code, {1, 2, 3}).ok());
  Status s = late.StreamTo(path);
  EXPECT_EQ(s.code(), xrt::StatusCode::kFailedPrecondition);

  ArtifactWriter w;
  ArtifactStreamOptions odd;
  odd.reserve = 1000;
  EXPECT_EQ(w.StreamTo(path, odd).code(), xrt::StatusCode::kInvalidArgument);
  ASSERT_TRUE(w.StreamTo(path).ok());
  EXPECT_EQ(w.StreamTo(path).code(), xrt::StatusCode::kFailedPrecondition);
  const std::vector<uint8_t> b = Pattern(100, 7);
  w.AppendWeight(b.data(), b.size());
  auto bytes = w.WriteToBytes(Builder(10));
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(bytes.status().message(), HasSubstr("in-memory mode"));
  ArtifactWriteOptions no_validate;
  no_validate.validate = false;
  s = w.WriteToFile(dir_ + "/other.xpk", Builder(10), no_validate);
  EXPECT_THAT(s.message(), HasSubstr("must be given that path"));
  ASSERT_TRUE(w.WriteToFile(path, Builder(10), no_validate).ok());
  s = w.WriteToFile(path, Builder(10), no_validate);
  EXPECT_THAT(s.message(), HasSubstr("already written"));

  ArtifactWriter missing_dir;
  s = missing_dir.StreamTo(dir_ + "/no/such/dir/model.xpk");
  EXPECT_EQ(s.code(), xrt::StatusCode::kUnavailable);
}

TEST_F(ArtifactWriterStreamTest, AbandonedStreamLeavesNoFile) {
  {
    ArtifactWriter w;
    ASSERT_TRUE(w.StreamTo(dir_ + "/model.xpk").ok());
    const std::vector<uint8_t> b = Pattern(4096, 8);
    w.AppendWeight(b.data(), b.size());
    EXPECT_EQ(OtherFiles(""), 1);  // the temporary file, while streaming
  }
  EXPECT_EQ(OtherFiles(""), 0);
}

}  // namespace
}  // namespace xcc
