// The fixed .xpk header: encoding, decoding and every rejection, without the writer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "runtime/loader/file_header.h"

namespace xrt {
namespace {

using ::testing::HasSubstr;

TEST(FileHeader, RoundTrip) {
  FileHeader h;
  h.format_minor = 3;
  h.header_size = 64;
  h.manifest_offset = 64;
  h.manifest_size = 0x0102030405ull;
  h.file_size = 0x0102030405ull + 64 + 100;
  std::string enc = EncodeFileHeader(h);
  ASSERT_EQ(enc.size(), 64u);
  EXPECT_EQ(std::memcmp(enc.data(), "XPK\0ART\0", 8), 0);
  EXPECT_EQ(static_cast<uint8_t>(enc[32]), 0x05);  // little-endian
  EXPECT_EQ(static_cast<uint8_t>(enc[36]), 0x01);
  for (int i : {20, 21, 22, 23, 48, 55, 63}) EXPECT_EQ(enc[i], '\0') << i;
  auto d = DecodeFileHeader(reinterpret_cast<const uint8_t*>(enc.data()), h.file_size, "x");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->format_major, 1u);
  EXPECT_EQ(d->format_minor, 3u);
  EXPECT_EQ(d->manifest_offset, 64u);
  EXPECT_EQ(d->manifest_size, h.manifest_size);
  EXPECT_EQ(d->file_size, h.file_size);
}

TEST(FileHeader, Errors) {
  FileHeader h;
  h.manifest_offset = 64;
  h.manifest_size = 100;
  h.file_size = 164;
  auto decode = [](const FileHeader& hh, uint64_t size) {
    std::string enc = EncodeFileHeader(hh);
    enc.resize(std::max<uint64_t>(size, 64), '\0');
    auto r = DecodeFileHeader(reinterpret_cast<const uint8_t*>(enc.data()), size, "m.xpk");
    return r.ok() ? std::string("ok") : r.status().message();
  };
  EXPECT_EQ(decode(h, 164), "ok");
  EXPECT_EQ(decode(h, 1000), "m.xpk: header says 164 bytes, file has 1000 (trailing data)");
  FileHeader big = h;
  big.file_size = 123456;
  EXPECT_EQ(decode(big, 1000), "m.xpk: truncated: header says 123456 bytes, file has 1000");
  EXPECT_THAT(decode(h, 10), HasSubstr("truncated: file has 10 bytes"));
  EXPECT_THAT(decode(h, 0), HasSubstr("bad magic"));
  FileHeader v2 = h;
  v2.format_major = 2;
  v2.format_minor = 0;
  EXPECT_EQ(decode(v2, 164),
            "m.xpk: format version 2.0 is not supported by this runtime (supports 1.x)");
  FileHeader overlap = h;
  overlap.manifest_offset = 32;
  EXPECT_THAT(decode(overlap, 164), HasSubstr("overlaps the 64-byte header"));
  FileHeader unaligned = h;
  unaligned.manifest_offset = 68;
  unaligned.manifest_size = 96;
  EXPECT_THAT(decode(unaligned, 164), HasSubstr("not 8-byte aligned"));
  FileHeader huge = h;
  huge.manifest_size = UINT64_MAX - 10;  // offset + size overflows
  EXPECT_THAT(decode(huge, 164), HasSubstr("exceeds file size 164"));
  FileHeader small_header = h;
  small_header.header_size = 32;
  EXPECT_THAT(decode(small_header, 164), HasSubstr("header size 32"));
  FileHeader empty = h;
  empty.manifest_size = 0;
  EXPECT_THAT(decode(empty, 164), HasSubstr("manifest is empty"));
}

TEST(FileHeader, MagicPrefixOfShortFile) {
  const uint8_t partial[4] = {'X', 'P', 'K', '\0'};
  auto r = DecodeFileHeader(partial, sizeof(partial), "m.xpk");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_EQ(r.status().message(), "m.xpk: truncated: file has 4 bytes, the fixed header needs 64");
  const uint8_t other[4] = {'G', 'G', 'U', 'F'};
  r = DecodeFileHeader(other, sizeof(other), "m.xpk");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "m.xpk: not an xpk artifact (bad magic)");
}

}  // namespace
}  // namespace xrt
