#include "compiler/frontend/safetensors.h"

#include <gtest/gtest.h>

#include "compiler/frontend/source_dtype.h"
#include "compiler/frontend/test_util.h"

namespace xcc {
namespace {

using testing::SafetensorsWriter;
using testing::TempDir;
using testing::WriteFile;

bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

TEST(SafetensorsTest, RoundTrip) {
  TempDir dir;
  SafetensorsWriter w;
  w.AddF32("b", {2, 3}, {1, 2, 3, 4, 5, 6});
  w.Add("a", "BF16", {2}, testing::Bytes(std::vector<uint16_t>{0x3f80, 0xc000}));
  w.header()["__metadata__"] = {{"format", "pt"}};
  const std::string path = dir.File("model.safetensors");
  WriteFile(path, w.Build());

  Expected<SafetensorsFile> f = SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_EQ(f->tensors().size(), 2u);
  const SourceTensor& a = f->tensors()[0];
  const SourceTensor& b = f->tensors()[1];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.dtype, SourceDType::kBF16);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(a.nbytes, 4u);
  EXPECT_EQ(b.name, "b");
  EXPECT_EQ(b.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b.file, path);
  std::vector<float> out(6);
  ASSERT_TRUE(ConvertToF32(b.dtype, b.data, b.nbytes, 6, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  ASSERT_TRUE(ConvertToF32(a.dtype, a.data, a.nbytes, 2, out.data()).ok());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(SafetensorsTest, EmptyTensorAndScalar) {
  TempDir dir;
  SafetensorsWriter w;
  w.AddF32("empty", {0, 4}, {});
  w.AddF32("scalar", {}, {3.5f});
  WriteFile(dir.File("m.safetensors"), w.Build());
  Expected<SafetensorsFile> f = SafetensorsFile::Open(dir.File("m.safetensors"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->tensors()[0].nbytes, 0u);
  EXPECT_EQ(f->tensors()[1].nbytes, 4u);
}

// Writes `bytes`, opens it and returns the error (expects failure).
Status OpenError(const std::string& bytes, const TempDir& dir) {
  const std::string path = dir.File("bad.safetensors");
  WriteFile(path, bytes);
  Expected<SafetensorsFile> f = SafetensorsFile::Open(path);
  EXPECT_FALSE(f.ok());
  if (f.ok()) return Status::Ok();
  EXPECT_TRUE(Contains(f.status().message(), path)) << f.status().message();
  return f.status();
}

TEST(SafetensorsTest, Truncated) {
  TempDir dir;
  SafetensorsWriter w;
  w.AddF32("w", {4}, {1, 2, 3, 4});
  std::string good = w.Build();
  // Shorter than the length prefix.
  EXPECT_EQ(OpenError(good.substr(0, 5), dir).code(), xrt::StatusCode::kDataLoss);
  // Header cut off.
  Status s = OpenError(good.substr(0, 20), dir);
  EXPECT_TRUE(Contains(s.message(), "header length")) << s.message();
  // Data cut off.
  s = OpenError(good.substr(0, good.size() - 1), dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s.message(), "tensor 'w'")) << s.message();
  // Empty file.
  EXPECT_EQ(OpenError("", dir).code(), xrt::StatusCode::kDataLoss);
}

TEST(SafetensorsTest, HugeHeaderLength) {
  TempDir dir;
  std::string bytes;
  testing::Append<uint64_t>(&bytes, ~0ull);
  bytes += "{}";
  Status s = OpenError(bytes, dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kDataLoss);
}

TEST(SafetensorsTest, BadJson) {
  TempDir dir;
  SafetensorsWriter w;
  Status s = OpenError(w.BuildWithHeader("{\"w\": [1, 2"), dir);
  EXPECT_TRUE(Contains(s.message(), "JSON")) << s.message();
  s = OpenError(w.BuildWithHeader("[1, 2]"), dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kDataLoss);
  s = OpenError(w.BuildWithHeader("{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}"), dir);
  EXPECT_TRUE(Contains(s.message(), "tensor 'w'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "data_offsets")) << s.message();
  s = OpenError(
      w.BuildWithHeader("{\"w\": {\"dtype\": \"F32\", \"shape\": [-1], \"data_offsets\": [0, 0]}}"),
      dir);
  EXPECT_TRUE(Contains(s.message(), "negative")) << s.message();
  s = OpenError(
      w.BuildWithHeader("{\"w\": {\"dtype\": 7, \"shape\": [1], \"data_offsets\": [0, 4]}}"), dir);
  EXPECT_TRUE(Contains(s.message(), "dtype")) << s.message();
}

TEST(SafetensorsTest, OffsetsOutOfOrder) {
  TempDir dir;
  SafetensorsWriter w;
  w.AddF32("lm_head.weight", {1}, {1});
  w.AddF32("x", {1}, {1});
  w.header()["lm_head.weight"]["data_offsets"] = {4, 0};
  Status s = OpenError(w.Build(), dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s.message(), "tensor 'lm_head.weight': data offsets [4, 0) out of order"))
      << s.message();
}

TEST(SafetensorsTest, OffsetsBeyondFile) {
  TempDir dir;
  SafetensorsWriter w;
  w.AddF32("w", {2}, {1, 2});
  w.header()["w"]["data_offsets"] = {0, 800};
  w.header()["w"]["shape"] = {200};
  Status s = OpenError(w.Build(), dir);
  EXPECT_TRUE(Contains(s.message(), "tensor 'w'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "beyond")) << s.message();
}

TEST(SafetensorsTest, Overlap) {
  TempDir dir;
  SafetensorsWriter w;
  w.AddF32("a", {2}, {1, 2});
  w.AddF32("b", {2}, {3, 4});
  w.header()["b"]["data_offsets"] = {4, 12};
  Status s = OpenError(w.Build(), dir);
  EXPECT_TRUE(Contains(s.message(), "overlap")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "'a'") && Contains(s.message(), "'b'")) << s.message();
}

TEST(SafetensorsTest, SizeMismatch) {
  TempDir dir;
  SafetensorsWriter w;
  w.AddF32("w", {2, 2}, {1, 2, 3, 4});
  w.header()["w"]["shape"] = {2, 3};
  Status s = OpenError(w.Build(), dir);
  EXPECT_TRUE(Contains(s.message(), "tensor 'w'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "needs 24")) << s.message();
}

TEST(SafetensorsTest, UnknownDType) {
  TempDir dir;
  SafetensorsWriter w;
  w.Add("w", "F8_E4M3", {4}, std::string(4, '\0'));
  Status s = OpenError(w.Build(), dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(s.message(), "tensor 'w'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "F8_E4M3")) << s.message();
}

// Random corruption of the header: an error or a valid file, never a crash.
TEST(SafetensorsTest, CorruptedHeaderNeverCrashes) {
  TempDir dir;
  SafetensorsWriter w;
  w.AddF32("a", {2, 2}, {1, 2, 3, 4});
  w.Add("b", "F16", {3}, std::string(6, '\x3c'));
  const std::string good = w.Build();
  uint64_t rng = 12345;
  int errors = 0;
  for (int iter = 0; iter < 300; ++iter) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    std::string bytes = good;
    size_t at = (rng >> 33) % good.size();
    bytes[at] = static_cast<char>((rng >> 20) & 0xff);
    WriteFile(dir.File("f.safetensors"), bytes);
    Expected<SafetensorsFile> f = SafetensorsFile::Open(dir.File("f.safetensors"));
    if (!f.ok()) {
      ++errors;
      continue;
    }
    // Touch every byte of every accepted tensor.
    for (const SourceTensor& t : f->tensors()) {
      Expected<int64_t> n = ShapeNumel(t.shape);
      ASSERT_TRUE(n.ok());
      std::vector<float> out(static_cast<size_t>(*n));
      EXPECT_TRUE(ConvertToF32(t.dtype, t.data, t.nbytes, *n, out.data()).ok()) << t.name;
    }
  }
  EXPECT_GT(errors, 0);
}

TEST(SafetensorsTest, MissingFile) {
  Expected<SafetensorsFile> f = SafetensorsFile::Open("/nonexistent/model.safetensors");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), xrt::StatusCode::kNotFound);
}

}  // namespace
}  // namespace xcc
