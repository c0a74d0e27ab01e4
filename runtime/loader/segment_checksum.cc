#include "runtime/loader/segment_checksum.h"

#include <cstring>

#include <xxhash.h>

#include "schemas/artifact_generated.h"

namespace xrt {
namespace {

std::string SegmentLabel(const xpk::Segment& s, uint32_t index) {
  const char* kind = xpk::EnumNameSegmentKind(s.kind());
  return fmt::format("segment {} ({})", index, *kind ? kind : "unknown kind");
}

}  // namespace

Xxh3_128Digest ComputeXxh3_128(const void* data, size_t size) {
  const XXH128_hash_t h = XXH3_128bits(data, size);
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, h);
  Xxh3_128Digest out;
  static_assert(sizeof(canonical.digest) == kXxh3_128DigestSize);
  std::memcpy(out.data(), canonical.digest, out.size());
  return out;
}

std::string HexDigest(const uint8_t* data, size_t size) {
  static const char k_hex[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * size);
  for (size_t i = 0; i < size; ++i) {
    s += k_hex[data[i] >> 4];
    s += k_hex[data[i] & 15];
  }
  return s;
}

Expected<bool> SegmentHasChecksum(const xpk::Segment& s, uint32_t index) {
  const uint32_t digest_size = s.checksum() ? s.checksum()->size() : 0;
  switch (s.checksum_algorithm()) {
    case xpk::ChecksumAlgorithm::none:
      if (digest_size != 0) {
        return DataLossError("{}: {} checksum bytes but no checksum algorithm",
                             SegmentLabel(s, index), digest_size);
      }
      return false;
    case xpk::ChecksumAlgorithm::xxh3_128:
      if (digest_size != kXxh3_128DigestSize) {
        return DataLossError("{}: xxh3_128 checksum has {} bytes, expected {}",
                             SegmentLabel(s, index), digest_size, kXxh3_128DigestSize);
      }
      return true;
  }
  return DataLossError("{}: unknown checksum algorithm {} (this runtime knows xxh3_128)",
                       SegmentLabel(s, index), static_cast<int>(s.checksum_algorithm()));
}

Status VerifySegmentChecksum(const xpk::Segment& s, uint32_t index, const uint8_t* data,
                             uint64_t size) {
  XRT_ASSIGN_OR_RETURN(bool has_checksum, SegmentHasChecksum(s, index));
  if (!has_checksum) {
    return FailedPreconditionError("{}: no checksum to verify against (artifact format 1.0)",
                                   SegmentLabel(s, index));
  }
  const Xxh3_128Digest actual = ComputeXxh3_128(data, static_cast<size_t>(size));
  const uint8_t* expected = s.checksum()->data();
  if (std::memcmp(actual.data(), expected, actual.size()) != 0) {
    return DataLossError(
        "{}: checksum mismatch, the bytes [{}, {}) are corrupt: expected xxh3_128 {}, actual {}",
        SegmentLabel(s, index), s.offset(), s.offset() + size,
        HexDigest(expected, kXxh3_128DigestSize), HexDigest(actual.data(), actual.size()));
  }
  return Status::Ok();
}

}  // namespace xrt
