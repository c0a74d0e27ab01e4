#include "runtime/base/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace xrt {
namespace {

std::string WriteFile(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path =
      ::testing::TempDir() + "/mapped_file_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> v(n);
  uint32_t x = 12345;
  for (uint8_t& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<uint8_t>(x >> 24);
  }
  return v;
}

TEST(AnonymousMappingTest, StartsOnAHugePageAndIsZeroFilled) {
  for (size_t bytes :
       {size_t{1}, size_t{4096}, kHugePageBytes, kHugePageBytes + 1, 3 * kHugePageBytes - 7}) {
    auto m = AnonymousMapping::Create(bytes);
    ASSERT_TRUE(m.ok()) << m.status().message();
    ASSERT_NE(m->data(), nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data()) % kHugePageBytes, 0u) << bytes;
    EXPECT_EQ(m->size(), bytes);
    EXPECT_EQ(m->data()[0], 0);
    EXPECT_EQ(m->data()[bytes - 1], 0);
    std::memset(m->data(), 0xab, bytes);  // all of it is writable until MakeReadOnly
    EXPECT_LE(m->HugePageBytes(), bytes);
  }
  auto empty = AnonymousMapping::Create(0);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->data(), nullptr);
  EXPECT_EQ(empty->HugePageBytes(), 0u);
}

TEST(AnonymousMappingTest, MoveHandsOverTheMemory) {
  auto m = AnonymousMapping::Create(10000);
  ASSERT_TRUE(m.ok());
  m->data()[9999] = 7;
  AnonymousMapping moved = std::move(*m);
  EXPECT_EQ(m->data(), nullptr);
  EXPECT_EQ(moved.data()[9999], 7);
}

TEST(MappedFileTest, ReadAndOpenGiveTheFilesBytes) {
  // Sizes around a huge page's end, one that spans several, and one of several of
  // Read's 32 MiB pieces (read by more than one thread) with a short last piece.
  for (size_t n : {size_t{1}, size_t{4095}, kHugePageBytes, kHugePageBytes + 3,
                   (size_t{5} << 20) + 123, (size_t{97} << 20) + 4097}) {
    const std::vector<uint8_t> bytes = Pattern(n);
    const std::string path = WriteFile("bytes", bytes);
    auto read = MappedFile::Read(path);
    ASSERT_TRUE(read.ok()) << read.status().message();
    auto mapped = MappedFile::Open(path);
    ASSERT_TRUE(mapped.ok()) << mapped.status().message();
    ASSERT_EQ(read->size(), n);
    ASSERT_EQ(mapped->size(), n);
    EXPECT_TRUE(read->is_copy());
    EXPECT_FALSE(mapped->is_copy());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(read->data()) % kHugePageBytes, 0u);
    EXPECT_EQ(std::memcmp(read->data(), bytes.data(), n), 0) << n;
    EXPECT_EQ(std::memcmp(mapped->data(), bytes.data(), n), 0) << n;
    EXPECT_EQ(mapped->HugePageBytes(), 0u);
    EXPECT_EQ(read->path(), path);
    ::unlink(path.c_str());
  }
}

TEST(MappedFileTest, ACopyOutlivesItsFileAndMovesWhole) {
  const std::vector<uint8_t> bytes = Pattern(100000);
  const std::string path = WriteFile("unlinked", bytes);
  auto read = MappedFile::Read(path);
  ASSERT_TRUE(read.ok());
  ::unlink(path.c_str());
  MappedFile moved = std::move(*read);
  EXPECT_EQ(read->data(), nullptr);
  EXPECT_EQ(read->size(), 0u);
  ASSERT_EQ(moved.size(), bytes.size());
  EXPECT_EQ(std::memcmp(moved.data(), bytes.data(), bytes.size()), 0);
  MappedFile assigned;
  assigned = std::move(moved);
  EXPECT_EQ(std::memcmp(assigned.data(), bytes.data(), bytes.size()), 0);
}

TEST(MappedFileTest, ACopyIsReadOnly) {
  const std::string path = WriteFile("readonly", Pattern(8192));
  auto read = MappedFile::Read(path);
  ASSERT_TRUE(read.ok());
  uint8_t* p = const_cast<uint8_t*>(read->data());
  EXPECT_DEATH(p[100] = 1, "");
  ::unlink(path.c_str());
}

Expected<MappedFile> Load(bool copy, const std::string& path) {
  return copy ? MappedFile::Read(path) : MappedFile::Open(path);
}

TEST(MappedFileTest, EmptyMissingAndNonRegularFiles) {
  const std::string empty = WriteFile("empty", {});
  for (bool copy : {true, false}) {
    auto f = Load(copy, empty);
    ASSERT_TRUE(f.ok()) << f.status().message();
    EXPECT_EQ(f->data(), nullptr);
    EXPECT_EQ(f->size(), 0u);
  }
  ::unlink(empty.c_str());
  const std::string missing = ::testing::TempDir() + "/mapped_file_no_such_file";
  for (bool copy : {true, false}) {
    auto f = Load(copy, missing);
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.status().message().find("mapped_file_no_such_file: cannot open"), std::string::npos)
        << f.status().message();
  }
  for (bool copy : {true, false}) {
    auto f = Load(copy, ::testing::TempDir());
    ASSERT_FALSE(f.ok());
    EXPECT_NE(f.status().message().find("not a regular file"), std::string::npos)
        << f.status().message();
  }
}

}  // namespace
}  // namespace xrt
