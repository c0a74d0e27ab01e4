#include "compiler/frontend/gguf_file.h"

#include <gtest/gtest.h>

#include "compiler/frontend/test_util.h"

namespace xcc {
namespace {

using namespace testing;  // NOLINT: test helpers

bool Contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

GgufWriter SmallFile() {
  GgufWriter w;
  w.KvString("general.architecture", "llama");
  w.KvU32("llama.block_count", 2);
  w.Kv<int8_t>("i8", kGI8, -3);
  w.Kv<uint16_t>("u16", kGU16, 65535);
  w.Kv<int16_t>("i16", kGI16, -300);
  w.Kv<uint64_t>("u64", kGU64, 1ull << 40);
  w.Kv<int64_t>("i64", kGI64, -(1ll << 40));
  w.Kv<double>("f64", kGF64, 0.125);
  w.KvF32("f32", 1.5f);
  w.KvBool("flag", true);
  w.Kv<uint8_t>("u8", kGU8, 200);
  w.KvStringArray("strs", {"a", "", "ccc"});
  w.KvI32Array("ints", {1, -2, 3});
  std::string fa;
  Append<uint32_t>(&fa, kGF32);
  Append<uint64_t>(&fa, 2);
  Append<float>(&fa, 0.5f);
  Append<float>(&fa, -1.0f);
  w.KvRaw("floats", kGArray, fa);
  w.TensorF32("t0", {3, 2}, {1, 2, 3, 4, 5, 6});
  w.TensorF32("t1", {1}, {7});
  return w;
}

TEST(GgufFileTest, ReadsMetadataAndTensors) {
  TempDir dir;
  WriteFile(dir.File("m.gguf"), SmallFile().Build());
  Expected<GgufFile> f = GgufFile::Open(dir.File("m.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->GetString("general.architecture").value(), "llama");
  EXPECT_EQ(f->GetInt("llama.block_count").value(), 2);
  EXPECT_EQ(f->GetInt("i8").value(), -3);
  EXPECT_EQ(f->GetInt("u16").value(), 65535);
  EXPECT_EQ(f->GetInt("i16").value(), -300);
  EXPECT_EQ(f->GetInt("u64").value(), 1ll << 40);
  EXPECT_EQ(f->GetInt("i64").value(), -(1ll << 40));
  EXPECT_EQ(f->GetInt("u8").value(), 200);
  EXPECT_EQ(f->GetFloat("f64").value(), 0.125);
  EXPECT_EQ(f->GetFloat("f32").value(), 1.5);
  EXPECT_EQ(f->GetFloat("u8").value(), 200.0);  // integers read as numbers
  EXPECT_TRUE(f->GetBool("flag").value());
  EXPECT_EQ(f->GetStringArray("strs").value(), (std::vector<std::string>{"a", "", "ccc"}));
  EXPECT_EQ(f->GetIntArray("ints").value(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(f->metadata().at("floats").floats, (std::vector<double>{0.5, -1.0}));

  ASSERT_EQ(f->tensors().size(), 2u);
  const GgufTensorInfo& t0 = f->tensors()[0];
  EXPECT_EQ(t0.name, "t0");
  EXPECT_EQ(t0.ne, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(t0.dtype, SourceDType::kF32);
  EXPECT_EQ(t0.nbytes, 24u);
  std::vector<float> out(6);
  ASSERT_TRUE(ConvertToF32(t0.dtype, t0.data, t0.nbytes, 6, out.data()).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  const GgufTensorInfo& t1 = f->tensors()[1];
  EXPECT_EQ(t1.offset, 32u);  // aligned
  float v;
  std::memcpy(&v, t1.data, 4);
  EXPECT_EQ(v, 7.0f);
}

TEST(GgufFileTest, TypedGetterErrorsNameFileAndKey) {
  TempDir dir;
  WriteFile(dir.File("m.gguf"), SmallFile().Build());
  Expected<GgufFile> f = GgufFile::Open(dir.File("m.gguf"));
  ASSERT_TRUE(f.ok());
  Expected<int64_t> i = f->GetInt("general.architecture");
  ASSERT_FALSE(i.ok());
  EXPECT_TRUE(Contains(i.status().message(),
                       "m.gguf: key 'general.architecture': expected an integer, got string"))
      << i.status().message();
  Expected<std::string> s = f->GetString("nope");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), xrt::StatusCode::kNotFound);
  EXPECT_TRUE(Contains(s.status().message(), "key 'nope': missing"));
  EXPECT_FALSE(f->GetStringArray("ints").ok());
  EXPECT_FALSE(f->GetIntArray("strs").ok());
  EXPECT_FALSE(f->GetBool("u8").ok());
}

TEST(GgufFileTest, Version2AndCustomAlignment) {
  TempDir dir;
  GgufWriter w;
  w.set_version(2);
  w.set_alignment(64);
  w.KvU32("general.alignment", 64);
  w.TensorF32("a", {1}, {1});
  w.TensorF32("b", {2}, {2, 3});
  WriteFile(dir.File("m.gguf"), w.Build());
  Expected<GgufFile> f = GgufFile::Open(dir.File("m.gguf"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->tensors()[1].offset, 64u);
}

Status OpenError(const std::string& bytes, const TempDir& dir) {
  const std::string path = dir.File("bad.gguf");
  WriteFile(path, bytes);
  Expected<GgufFile> f = GgufFile::Open(path);
  EXPECT_FALSE(f.ok());
  if (f.ok()) return Status::Ok();
  EXPECT_TRUE(Contains(f.status().message(), path)) << f.status().message();
  return f.status();
}

TEST(GgufFileTest, BadMagicAndVersion) {
  TempDir dir;
  std::string good = SmallFile().Build();
  std::string bad = good;
  bad[0] = 'X';
  Status s = OpenError(bad, dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s.message(), "magic")) << s.message();
  bad = good;
  bad[4] = 1;  // version 1
  s = OpenError(bad, dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(s.message(), "version 1")) << s.message();
}

TEST(GgufFileTest, EveryTruncationFailsCleanly) {
  TempDir dir;
  std::string good = SmallFile().Build();
  // Every prefix that cuts into the header, metadata or tensor infos or data.
  for (size_t n = 0; n < good.size(); n += (n < 400 ? 1 : 7)) {
    Status s = OpenError(good.substr(0, n), dir);
    EXPECT_EQ(s.code(), xrt::StatusCode::kDataLoss) << n << ": " << s.ToString();
  }
}

TEST(GgufFileTest, TruncationNamesTheKey) {
  TempDir dir;
  GgufWriter w;
  w.KvStringArray("tokenizer.ggml.tokens", {"aaaa", "bbbb", "cccc"});
  std::string bytes = w.Build();
  // Cut inside the last string of the array (before alignment padding).
  size_t end = 4 + 4 + 8 + 8 + (8 + 21) + 4 + 4 + 8 + 3 * 12;
  Status s = OpenError(bytes.substr(0, end - 2), dir);
  EXPECT_TRUE(Contains(s.message(), "key 'tokenizer.ggml.tokens'")) << s.message();
}

TEST(GgufFileTest, HugeCountsAreRejected) {
  TempDir dir;
  std::string bytes = "GGUF";
  Append<uint32_t>(&bytes, 3);
  Append<uint64_t>(&bytes, 0);
  Append<uint64_t>(&bytes, ~0ull);  // kv count
  Status s = OpenError(bytes, dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kDataLoss);

  GgufWriter w;
  std::string arr;
  Append<uint32_t>(&arr, kGU64);
  Append<uint64_t>(&arr, 1ull << 60);
  w.KvRaw("big", kGArray, arr);
  s = OpenError(w.Build(), dir);
  EXPECT_TRUE(Contains(s.message(), "key 'big'")) << s.message();

  GgufWriter w2;
  std::string str;
  Append<uint64_t>(&str, 1ull << 62);
  w2.KvRaw("s", kGString, str);
  s = OpenError(w2.Build(), dir);
  EXPECT_TRUE(Contains(s.message(), "key 's'")) << s.message();
}

TEST(GgufFileTest, NestedArrayRejected) {
  TempDir dir;
  GgufWriter w;
  std::string arr;
  Append<uint32_t>(&arr, kGArray);
  Append<uint64_t>(&arr, 0);
  w.KvRaw("nested", kGArray, arr);
  Status s = OpenError(w.Build(), dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(s.message(), "key 'nested'")) << s.message();
}

TEST(GgufFileTest, UnknownValueType) {
  TempDir dir;
  GgufWriter w;
  w.KvRaw("weird", 99, "");
  Status s = OpenError(w.Build(), dir);
  EXPECT_TRUE(Contains(s.message(), "key 'weird'")) << s.message();
}

TEST(GgufFileTest, TensorOutOfRange) {
  TempDir dir;
  GgufWriter w;
  w.TensorF32("blk.0.attn_q.weight", {4, 4}, {1, 2, 3});  // 12 of 64 bytes
  Status s = OpenError(w.Build(), dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kDataLoss);
  EXPECT_TRUE(Contains(s.message(), "tensor 'blk.0.attn_q.weight'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "beyond")) << s.message();
}

TEST(GgufFileTest, TensorOffsetOverflow) {
  TempDir dir;
  GgufWriter w;
  w.TensorF32("a", {1}, {1});
  std::string bytes = w.Build();
  // The offset is the last 8 bytes of the tensor info, right before the padding.
  size_t info_end = 4 + 4 + 8 + 8 + (8 + 1) + 4 + 8 + 4 + 8;
  uint64_t off = ~0ull - 31;  // aligned, near 2^64
  std::memcpy(&bytes[info_end - 8], &off, 8);
  Status s = OpenError(bytes, dir);
  EXPECT_TRUE(Contains(s.message(), "tensor 'a'")) << s.message();
}

TEST(GgufFileTest, MisalignedAndOverlappingTensors) {
  TempDir dir;
  GgufWriter w;
  w.TensorF32("a", {8}, std::vector<float>(8, 1));
  w.TensorF32("b", {8}, std::vector<float>(8, 2));
  std::string bytes = w.Build();
  size_t a_off = 4 + 4 + 8 + 8 + (8 + 1) + 4 + 8 + 4;
  size_t b_off = a_off + 8 + (8 + 1) + 4 + 8 + 4;
  std::string mis = bytes;
  uint64_t four = 4;
  std::memcpy(&mis[b_off], &four, 8);
  Status s = OpenError(mis, dir);
  EXPECT_TRUE(Contains(s.message(), "alignment")) << s.message();

  GgufWriter w2;
  w2.TensorF32("a", {16}, std::vector<float>(16, 1));
  w2.TensorF32("b", {8}, std::vector<float>(8, 2));
  std::string ov = w2.Build();
  uint64_t thirty_two = 32;
  std::memcpy(&ov[b_off], &thirty_two, 8);  // a spans [0, 64)
  s = OpenError(ov, dir);
  EXPECT_TRUE(Contains(s.message(), "overlaps")) << s.message();
}

TEST(GgufFileTest, BadTensorInfo) {
  TempDir dir;
  GgufWriter w;
  w.Tensor("q", {31, 2}, kTQ8_0, std::string(68, '\0'));  // row not a block multiple
  Status s = OpenError(w.Build(), dir);
  EXPECT_TRUE(Contains(s.message(), "tensor 'q'")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "block size")) << s.message();

  GgufWriter w2;
  w2.Tensor("iq", {256}, 16 /* IQ2_XXS */, std::string(66, '\0'));
  s = OpenError(w2.Build(), dir);
  EXPECT_EQ(s.code(), xrt::StatusCode::kUnimplemented);
  EXPECT_TRUE(Contains(s.message(), "tensor 'iq'")) << s.message();

  GgufWriter w3;
  w3.Tensor("d", {1, 1, 1, 1, 1}, kTF32, std::string(4, '\0'));
  s = OpenError(w3.Build(), dir);
  EXPECT_TRUE(Contains(s.message(), "dimensions")) << s.message();

  GgufWriter w4;
  w4.TensorF32("dup", {1}, {1});
  w4.TensorF32("dup", {1}, {1});
  s = OpenError(w4.Build(), dir);
  EXPECT_TRUE(Contains(s.message(), "duplicate")) << s.message();
}

}  // namespace
}  // namespace xcc
