#include "runtime/loader/file_header.h"

namespace xrt {
namespace {

// Field offsets inside the fixed header (see file_header.h).
constexpr size_t kOffMagic = 0;
constexpr size_t kOffMajor = 8;
constexpr size_t kOffMinor = 12;
constexpr size_t kOffHeaderSize = 16;
constexpr size_t kOffManifestOffset = 24;
constexpr size_t kOffManifestSize = 32;
constexpr size_t kOffFileSize = 40;

// The flatbuffer holds 8-byte scalars; its start must keep them aligned.
constexpr uint64_t kManifestAlignment = 8;

void PutU32(std::string& out, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
void PutU64(std::string& out, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t GetU32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::string EncodeFileHeader(const FileHeader& h) {
  std::string out(kXpkHeaderSize, '\0');
  std::memcpy(&out[kOffMagic], kXpkMagic, sizeof(kXpkMagic));
  PutU32(out, kOffMajor, h.format_major);
  PutU32(out, kOffMinor, h.format_minor);
  PutU32(out, kOffHeaderSize, h.header_size);
  PutU64(out, kOffManifestOffset, h.manifest_offset);
  PutU64(out, kOffManifestSize, h.manifest_size);
  PutU64(out, kOffFileSize, h.file_size);
  return out;
}

Expected<FileHeader> DecodeFileHeader(const uint8_t* data, uint64_t size, const std::string& what) {
  // Magic first: a file that is not an artifact at all should say so, even when short.
  const uint64_t magic_len = sizeof(kXpkMagic);
  const uint64_t have = size < magic_len ? size : magic_len;
  if (have > 0 && data == nullptr) {
    return InternalError("{}: header decode given a null buffer of {} bytes", what, size);
  }
  if (have == 0 || std::memcmp(data, kXpkMagic, have) != 0) {
    return InvalidArgumentError("{}: not an xpk artifact (bad magic)", what);
  }
  if (size < kXpkHeaderSize) {
    return DataLossError("{}: truncated: file has {} bytes, the fixed header needs {}", what, size,
                         kXpkHeaderSize);
  }

  FileHeader h;
  h.format_major = GetU32(data + kOffMajor);
  h.format_minor = GetU32(data + kOffMinor);
  if (h.format_major != kXpkFormatMajor) {
    return UnimplementedError(
        "{}: format version {}.{} is not supported by this runtime (supports {}.x)", what,
        h.format_major, h.format_minor, kXpkFormatMajor);
  }
  h.header_size = GetU32(data + kOffHeaderSize);
  h.manifest_offset = GetU64(data + kOffManifestOffset);
  h.manifest_size = GetU64(data + kOffManifestSize);
  h.file_size = GetU64(data + kOffFileSize);

  if (h.file_size > size) {
    return DataLossError("{}: truncated: header says {} bytes, file has {}", what, h.file_size,
                         size);
  }
  if (h.file_size < size) {
    return DataLossError("{}: header says {} bytes, file has {} (trailing data)", what, h.file_size,
                         size);
  }
  if (h.header_size < kXpkHeaderSize) {
    return DataLossError("{}: header size {} is smaller than the minimum {}", what, h.header_size,
                         kXpkHeaderSize);
  }
  if (h.header_size > size) {
    return DataLossError("{}: truncated: header size {} exceeds file size {}", what, h.header_size,
                         size);
  }
  if (h.manifest_size == 0) {
    return DataLossError("{}: manifest is empty", what);
  }
  if (h.manifest_offset < h.header_size) {
    return DataLossError("{}: manifest offset {} overlaps the {}-byte header", what,
                         h.manifest_offset, h.header_size);
  }
  if (h.manifest_offset % kManifestAlignment != 0) {
    return DataLossError("{}: manifest offset {} is not {}-byte aligned", what, h.manifest_offset,
                         kManifestAlignment);
  }
  // Overflow-safe form of manifest_offset + manifest_size <= size.
  if (h.manifest_offset > size || h.manifest_size > size - h.manifest_offset) {
    return DataLossError("{}: truncated: manifest range [{}, +{}) exceeds file size {}", what,
                         h.manifest_offset, h.manifest_size, size);
  }
  return h;
}

}  // namespace xrt
