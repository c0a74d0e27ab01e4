// ArtifactWriter: lays out and writes a .xpk file (docs/DESIGN.md §3, schemas/artifact.fbs).
//
//   [0, 64)                     FileHeader (runtime/loader/file_header.h), manifest_offset = 64
//   [64, 64 + manifest_size)    the manifest flatbuffer, finished with identifier "XPK1"
//   zero padding, then each segment in the order it was added, at an absolute offset that
//   is a multiple of its alignment (weights: 4096, others: 64 unless asked for more),
//   zero padding between segments.
//
// The manifest holds the final segment offsets, which depend on the manifest's size. The
// writer therefore asks the caller to build the manifest through a callback that receives
// the Segment table, and iterates to a fixed point: place segments after the manifest
// built with the previous guess, rebuild, until the placement no longer changes (two
// passes in practice: Segment fields are always stored, so the flatbuffer's size does not
// depend on the offset values). Every segment gets an XXH3-128 checksum of its bytes
// (runtime/loader/segment_checksum.h), computed once per layout.
//
// Output is a pure function of the inputs: no timestamps, nothing pointer- or
// hash-order-dependent, all padding zeroed. Files are written atomically (a temporary file
// in the same directory, fsync, rename). By default the result is re-validated with the
// runtime loader (xrt::Artifact) before it is committed, so the compiler never emits an
// artifact the runtime rejects.
//
// Where segment bytes wait until the write. By default the writer holds them in memory
// (small artifacts, WriteToBytes, tests). After StreamTo(path) it holds none: every
// segment's bytes go to the temporary file beside `path` as they are added, with their
// checksums and offsets computed on the fly, so compiling a model needs memory for one
// tensor, not for all of them. Since the manifest (which records the final offsets) comes
// first in the file and is only known at the end, streamed segments start at a guessed
// offset (ArtifactStreamOptions::reserve) and are shifted into place when the file is
// finished: with fallocate(FALLOC_FL_COLLAPSE_RANGE / INSERT_RANGE) where the filesystem
// supports it and the shift is a whole number of its blocks (no bytes move), else by
// copying them within the file in 1 MiB chunks. Either way the file is byte-for-byte the
// one the in-memory mode writes for the same inputs.
//
// Thread-compatible: one writer per artifact; not safe for concurrent mutation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "runtime/base/status.h"
#include "runtime/loader/artifact.h"
#include "runtime/loader/segment_checksum.h"
#include "schemas/artifact_generated.h"

namespace xcc {

using xrt::Expected;
using xrt::Status;

using SegmentTable = flatbuffers::Offset<flatbuffers::Vector<flatbuffers::Offset<xpk::Segment>>>;

// Builds the manifest into `fbb` and returns its root (the writer calls Finish). Must use
// `segments` as Manifest.segments and set format_major/format_minor to
// xrt::kXpkFormatMajor/kXpkFormatMinor. Called once per layout pass; must build the same
// manifest every time it is called.
using ManifestBuildFn = std::function<Expected<flatbuffers::Offset<xpk::Manifest>>(
    flatbuffers::FlatBufferBuilder& fbb, SegmentTable segments)>;

// Where a weight's bytes went, for xpk::Weight.segment/offset/size.
struct WeightPlacement {
  uint32_t segment = 0;
  uint64_t offset = 0;  // inside the segment, 64-byte aligned
  uint64_t size = 0;
};

// A segment's final place in the file.
struct SegmentPlacement {
  xpk::SegmentKind kind = xpk::SegmentKind::weights;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t alignment = 0;
};

struct ArtifactWriteOptions {
  // Re-validate the output with xrt::Artifact before returning / renaming it into place.
  bool validate = true;
};

// How ArtifactWriter::StreamTo lays segments out in the temporary file.
struct ArtifactStreamOptions {
  // Bytes left before the first segment for the header and manifest (a multiple of 4096).
  // A manifest that does not fit just means the segments move up at the end.
  uint64_t reserve = uint64_t{1} << 20;
  // Whether finishing may shift the segments with fallocate; false always copies them
  // (tests of the copying path).
  bool allow_fallocate = true;
};

class ArtifactWriter {
 public:
  ArtifactWriter();
  ~ArtifactWriter();  // removes an unfinished streamed temporary file
  ArtifactWriter(const ArtifactWriter&) = delete;
  ArtifactWriter& operator=(const ArtifactWriter&) = delete;

  // From now on, writes every segment's bytes to a temporary file beside `path` (created
  // here) as they are added instead of keeping them; WriteToFile(path) finishes that file
  // and renames it to `path`, WriteToBytes is then refused. Call before adding segments.
  Status StreamTo(const std::string& path, const ArtifactStreamOptions& options = {});

  // Adds a segment holding `bytes`; returns its index in Manifest.segments. `alignment`
  // 0 means the default (4096 for weights, 64 otherwise); otherwise a power of two >= 64
  // (>= 4096 for weights). Ends the current AppendWeight() segment.
  Expected<uint32_t> AddSegment(xpk::SegmentKind kind, std::vector<uint8_t> bytes,
                                uint64_t alignment = 0);

  // Appends one weight's bytes to the current weights segment (started on first use or
  // after AddSegment / StartWeightsSegment), 64-byte aligned inside it. When streaming, a
  // write error is kept in stream_status() and returned by WriteToFile.
  WeightPlacement AppendWeight(const void* data, size_t size);
  // Makes the next AppendWeight() start a new weights segment.
  void StartWeightsSegment();

  uint32_t num_segments() const { return static_cast<uint32_t>(segments_.size()); }
  // Segment bytes the writer holds in memory: all of them by default, none when streaming.
  uint64_t buffered_bytes() const;
  // The first error writing streamed bytes (Ok when not streaming or none happened).
  const Status& stream_status() const { return stream_status_; }

  // Lays out and serializes the artifact into memory. `name` names it in errors.
  // FailedPrecondition when streaming.
  Expected<std::vector<uint8_t>> WriteToBytes(const ManifestBuildFn& build,
                                              const ArtifactWriteOptions& options = {},
                                              const std::string& name = "<memory>") const;
  // Lays out and writes the artifact to `path` atomically. When streaming, `path` must be
  // StreamTo's, and the streamed file is consumed: a second call is FailedPrecondition.
  Status WriteToFile(const std::string& path, const ManifestBuildFn& build,
                     const ArtifactWriteOptions& options = {});

 private:
  struct PendingSegment {
    xpk::SegmentKind kind;
    uint64_t alignment;
    uint64_t size = 0;
    std::vector<uint8_t> bytes;    // in memory (not streaming)
    uint64_t stream_offset = 0;    // streaming: where the bytes start in the temporary file
    xrt::Xxh3_128Digest digest{};  // final once the segment is closed
  };
  struct Hasher;  // XXH3-128 state of the open weights segment
  struct Stream;  // the temporary file streamed segments go to
  struct Layout {
    std::vector<SegmentPlacement> segments;
    std::vector<uint8_t> manifest;  // the finished flatbuffer
    uint64_t file_size = 0;
  };
  Expected<Layout> ComputeLayout(const ManifestBuildFn& build, const std::string& name) const;
  // Streams header, manifest, padding and segments to `sink` in file order.
  Status Emit(const Layout& layout,
              const std::function<Status(const uint8_t*, size_t)>& sink) const;
  // Appends a new segment; when streaming, places it after the last one in the file.
  PendingSegment& NewSegment(xpk::SegmentKind kind, uint64_t alignment);
  // Adds `size` bytes (nullptr: zeros) to the end of the last segment.
  void AppendBytes(const uint8_t* data, size_t size);
  // Ends the open weights segment: its checksum becomes final.
  void CloseWeightsSegment();
  // Moves the streamed segments in the temporary file `fd` (named `tmp`) to their final
  // offsets, zeroes the padding, writes the header and manifest and sets the file size.
  Status FinishStream(const Layout& layout, int fd, const std::string& tmp) const;

  std::vector<PendingSegment> segments_;
  int64_t open_weights_segment_ = -1;
  std::unique_ptr<Hasher> open_hash_;
  std::unique_ptr<Stream> stream_;
  Status stream_status_ = Status::Ok();
};

// Builds Manifest.provenance with options sorted by key and inputs sorted by path (the
// order in `p` does not matter), so equal provenance gives equal bytes.
flatbuffers::Offset<xpk::Provenance> BuildProvenance(flatbuffers::FlatBufferBuilder& fbb,
                                                     const xrt::ArtifactProvenance& p);

}  // namespace xcc
