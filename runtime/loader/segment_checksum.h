// Segment checksums (schemas/artifact.fbs: Segment.checksum_algorithm / checksum).
//
// Integrity, not security: a checksum catches a bad disk, a truncated or half-overwritten
// copy, a flipped bit; it does not stop someone who can edit the file. The algorithm is
// XXH3-128 (libxxhash): non-cryptographic, seed 0, fast enough to be bounded by memory
// bandwidth. The writer (compiler/artifact/artifact_writer.cc) stores one per segment; the
// loader (artifact.cc) verifies code segments at Open(), the code module
// (runtime/executor/code_module.cc) verifies its sealed copy again before dlopen, and
// weights are verified on request (Artifact::VerifySegment).
//
// Pure functions; thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/base/status.h"

namespace xpk {
struct Segment;
}  // namespace xpk

namespace xrt {

// XXH3-128 digest size in bytes.
inline constexpr size_t kXxh3_128DigestSize = 16;
using Xxh3_128Digest = std::array<uint8_t, kXxh3_128DigestSize>;

// XXH3-128 (seed 0) of `size` bytes at `data`, in canonical big-endian byte order: its hex
// is what `xxh128sum` prints for the same bytes.
Xxh3_128Digest ComputeXxh3_128(const void* data, size_t size);

// Lowercase hex of `size` bytes.
std::string HexDigest(const uint8_t* data, size_t size);

// Whether segment `s` carries a checksum. An error (DataLoss, naming "segment `index`
// (kind)") when its checksum fields are malformed: an unknown algorithm, a digest of the
// wrong length, or digest bytes without an algorithm.
Expected<bool> SegmentHasChecksum(const xpk::Segment& s, uint32_t index);

// Recomputes the checksum of `size` bytes at `data` (segment `index`'s bytes) and compares
// it with the one `s` stores. Ok when they match; DataLoss naming the segment, its file
// range, the algorithm and the expected and actual digests when they differ;
// FailedPrecondition when `s` has no checksum. Validates `s` as SegmentHasChecksum does.
Status VerifySegmentChecksum(const xpk::Segment& s, uint32_t index, const uint8_t* data,
                             uint64_t size);

}  // namespace xrt
