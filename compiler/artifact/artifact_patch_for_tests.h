// Test helpers that patch a written .xpk artifact in place, to make corrupt files and files
// of an older format. For tests only (uses gtest assertions).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "runtime/loader/file_header.h"
#include "schemas/artifact_generated.h"

namespace xcc {

// The manifest of a whole artifact held in `bytes` (its header says it starts at 64).
inline const xpk::Manifest* ManifestOf(std::vector<uint8_t>& bytes) {
  return xpk::GetManifest(bytes.data() + xrt::kXpkHeaderSize);
}

// Address of a table's field inside the buffer (generated tables inherit Table privately).
template <typename T>
const uint8_t* FieldAddr(const T* table, flatbuffers::voffset_t field) {
  const uint8_t* p = reinterpret_cast<const flatbuffers::Table*>(table)->GetAddressOf(field);
  EXPECT_NE(p, nullptr) << "field " << field << " not stored";
  return p;
}

// Overwrites a scalar that lives inside `bytes` (found through a parsed view of them).
template <typename T>
void Poke(const void* where, T value) {
  std::memcpy(const_cast<void*>(where), &value, sizeof(T));
}

// Removes field `field` of `table`, as if it had never been written, by zeroing its vtable
// entry (tables of the same layout share one vtable, so they lose it too).
template <typename T>
void DropField(const T* table, flatbuffers::voffset_t field) {
  const auto* t = reinterpret_cast<const uint8_t*>(table);
  const uint8_t* vtable = t - flatbuffers::ReadScalar<flatbuffers::soffset_t>(t);
  ASSERT_LT(field, flatbuffers::ReadScalar<flatbuffers::voffset_t>(vtable));
  Poke<flatbuffers::voffset_t>(vtable + field, 0);
}

// Removes every segment's checksum fields, as a format 1.0 writer (before checksums)
// would have written them. `format_minor` goes into the header: 0 makes a genuine 1.0
// artifact, >= 1 a corrupt one.
inline void StripSegmentChecksums(std::vector<uint8_t>& bytes, uint32_t format_minor) {
  const auto* segments = ManifestOf(bytes)->segments();
  for (uint32_t i = 0; segments && i < segments->size(); ++i) {
    DropField(segments->Get(i), xpk::Segment::VT_CHECKSUM_ALGORITHM);
    DropField(segments->Get(i), xpk::Segment::VT_CHECKSUM);
  }
  Poke<uint32_t>(&bytes[12], format_minor);  // FileHeader.format_minor
}

}  // namespace xcc
