// The fixed header at the start of every .xpk artifact.
//
//   offset size  field
//   0      8     magic            "XPK\0ART\0"
//   8      4     format_major     u32 LE; the loader rejects any other major
//   12     4     format_minor     u32 LE; newer minors only add fields
//   16     4     header_size      u32 LE; >= 64, lets the header grow
//   20     4     reserved         0
//   24     8     manifest_offset  u64 LE; the flatbuffer (schemas/artifact.fbs)
//   32     8     manifest_size    u64 LE
//   40     8     file_size        u64 LE; the whole file, to detect truncation
//   48     16    reserved         0
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include "runtime/base/status.h"

namespace xrt {

inline constexpr char kXpkMagic[8] = {'X', 'P', 'K', '\0', 'A', 'R', 'T', '\0'};
inline constexpr uint32_t kXpkFormatMajor = 1;
inline constexpr uint32_t kXpkFormatMinor = 17;
// From this minor on every segment carries a checksum (schemas/artifact.fbs, Segment).
inline constexpr uint32_t kXpkFirstMinorWithChecksums = 1;
inline constexpr uint32_t kXpkHeaderSize = 64;
// Data segments start at multiples of this; weights at multiples of kXpkPageAlignment.
inline constexpr uint64_t kXpkSegmentAlignment = 64;
inline constexpr uint64_t kXpkPageAlignment = 4096;

struct FileHeader {
  uint32_t format_major = kXpkFormatMajor;
  uint32_t format_minor = kXpkFormatMinor;
  uint32_t header_size = kXpkHeaderSize;
  uint64_t manifest_offset = 0;
  uint64_t manifest_size = 0;
  uint64_t file_size = 0;
};

// Serializes `h` into exactly kXpkHeaderSize bytes.
std::string EncodeFileHeader(const FileHeader& h);

// Parses and checks the header of a file of `size` bytes: magic, major version,
// header size, manifest range, recorded file size. `what` names the file in errors.
Expected<FileHeader> DecodeFileHeader(const uint8_t* data, uint64_t size, const std::string& what);

}  // namespace xrt
