#include "compiler/artifact/artifact_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <linux/falloc.h>
#include <sys/statfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

// XXH3_state_t as a complete type (held by value below).
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "runtime/loader/file_header.h"
#include "runtime/loader/segment_checksum.h"

namespace xcc {
namespace {

constexpr int kMaxLayoutPasses = 8;

bool IsPowerOfTwo(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// Rounds `x` up to a multiple of `a` (a power of two); false on overflow.
bool AlignUp(uint64_t x, uint64_t a, uint64_t* out) {
  if (x > UINT64_MAX - (a - 1)) return false;
  *out = (x + a - 1) & ~(a - 1);
  return true;
}

// Closes an fd and removes a temporary file unless released.
class TempFile {
 public:
  TempFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  Status Close() {
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      return xrt::UnavailableError("{}: close failed: {}", path_, std::strerror(errno));
    }
    return Status::Ok();
  }
  void Release() { path_.clear(); }

 private:
  int fd_;
  std::string path_;
};

Status WriteAll(int fd, const uint8_t* data, size_t size, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return xrt::UnavailableError("{}: write failed: {}", path, std::strerror(errno));
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Writes `size` bytes at `offset` (nullptr: zeros).
Status PWriteAll(int fd, const uint8_t* data, uint64_t size, uint64_t offset,
                 const std::string& path) {
  static const uint8_t k_zeros[64 * 1024] = {};
  while (size > 0) {
    const size_t chunk = data ? static_cast<size_t>(std::min<uint64_t>(size, uint64_t{1} << 30))
                              : static_cast<size_t>(std::min<uint64_t>(size, sizeof(k_zeros)));
    ssize_t n = ::pwrite(fd, data ? data : k_zeros, chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return xrt::UnavailableError("{}: write of {} bytes at offset {} failed: {}", path, size,
                                   offset, std::strerror(errno));
    }
    if (data) data += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status PReadAll(int fd, uint8_t* data, size_t size, uint64_t offset, const std::string& path) {
  while (size > 0) {
    ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return xrt::UnavailableError("{}: read of {} bytes at offset {} failed: {}", path, size,
                                   offset, n < 0 ? std::strerror(errno) : "end of file");
    }
    data += n;
    offset += static_cast<uint64_t>(n);
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Copies `size` bytes from `from` to `to` inside the file, correct when the ranges
// overlap: front to back when moving down, back to front when moving up.
Status MoveWithinFile(int fd, uint64_t from, uint64_t to, uint64_t size, std::vector<uint8_t>* buf,
                      const std::string& path) {
  if (from == to || size == 0) return Status::Ok();
  const uint64_t chunk = buf->size();
  for (uint64_t done = 0; done < size;) {
    const uint64_t n = std::min(chunk, size - done);
    const uint64_t at = to < from ? done : size - done - n;
    XRT_RETURN_IF_ERROR(PReadAll(fd, buf->data(), n, from + at, path));
    XRT_RETURN_IF_ERROR(PWriteAll(fd, buf->data(), n, to + at, path));
    done += n;
  }
  return Status::Ok();
}

// fchmod 0644 (mkstemp creates 0600; artifacts are ordinary readable files), fsync,
// close, re-validate when asked, rename into place.
Status CommitTempFile(TempFile* tmp, const std::string& path, const ArtifactWriteOptions& options) {
  if (::fchmod(tmp->fd(), 0644) != 0 || ::fsync(tmp->fd()) != 0) {
    return xrt::UnavailableError("{}: cannot finish writing: {}", tmp->path(),
                                 std::strerror(errno));
  }
  XRT_RETURN_IF_ERROR(tmp->Close());
  if (options.validate) {
    auto loaded = xrt::Artifact::Open(tmp->path());
    if (!loaded.ok()) {
      return xrt::InternalError(
          "{}: the artifact writer produced an artifact the loader rejects: {}", path,
          loaded.status().message());
    }
  }
  if (::rename(tmp->path().c_str(), path.c_str()) != 0) {
    return xrt::UnavailableError("{}: cannot rename {} into place: {}", path, tmp->path(),
                                 std::strerror(errno));
  }
  tmp->Release();
  return Status::Ok();
}

Expected<std::unique_ptr<TempFile>> CreateTempFile(const std::string& path) {
  std::string tmpl = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) {
    return xrt::UnavailableError("{}: cannot create a temporary file: {}", path,
                                 std::strerror(errno));
  }
  return std::make_unique<TempFile>(fd, tmpl);
}

xrt::Xxh3_128Digest DigestOf(const XXH3_state_t* state) {
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(state));
  xrt::Xxh3_128Digest out;
  static_assert(sizeof(canonical.digest) == xrt::kXxh3_128DigestSize);
  std::memcpy(out.data(), canonical.digest, out.size());
  return out;
}

}  // namespace

struct ArtifactWriter::Hasher {
  Hasher() { XXH3_128bits_reset(&state); }
  XXH3_state_t state;
};

struct ArtifactWriter::Stream {
  std::string path;  // the artifact's final path
  ArtifactStreamOptions options;
  std::unique_ptr<TempFile> file;
  uint64_t end = 0;  // end of the last segment in the temporary file
};

ArtifactWriter::ArtifactWriter() = default;
ArtifactWriter::~ArtifactWriter() = default;

Status ArtifactWriter::StreamTo(const std::string& path, const ArtifactStreamOptions& options) {
  if (stream_ || !segments_.empty()) {
    return xrt::FailedPreconditionError(
        "{}: artifact writer: StreamTo must come before any segment and only once", path);
  }
  if (options.reserve % xrt::kXpkPageAlignment != 0) {
    return xrt::InvalidArgumentError(
        "{}: artifact writer: stream reserve {} is not a multiple of {}", path, options.reserve,
        xrt::kXpkPageAlignment);
  }
  auto stream = std::make_unique<Stream>();
  stream->path = path;
  stream->options = options;
  XRT_ASSIGN_OR_RETURN(stream->file, CreateTempFile(path));
  stream->end = options.reserve;
  stream_ = std::move(stream);
  return Status::Ok();
}

uint64_t ArtifactWriter::buffered_bytes() const {
  uint64_t n = 0;
  for (const PendingSegment& s : segments_) n += s.bytes.size();
  return n;
}

ArtifactWriter::PendingSegment& ArtifactWriter::NewSegment(xpk::SegmentKind kind,
                                                           uint64_t alignment) {
  CloseWeightsSegment();
  PendingSegment s;
  s.kind = kind;
  s.alignment = alignment;
  // The streamed layout is the final one with the manifest's place guessed: the
  // same alignment rule from a different start.
  if (stream_ && !AlignUp(stream_->end, alignment, &s.stream_offset) && stream_status_.ok()) {
    stream_status_ =
        xrt::InvalidArgumentError("{}: artifact layout overflows 64 bits", stream_->path);
  }
  segments_.push_back(std::move(s));
  return segments_.back();
}

void ArtifactWriter::AppendBytes(const uint8_t* data, size_t size) {
  PendingSegment& s = segments_.back();
  if (!stream_) {
    if (data) {
      s.bytes.insert(s.bytes.end(), data, data + size);
    } else {
      s.bytes.resize(s.bytes.size() + size, 0);
    }
  } else if (stream_status_.ok()) {
    stream_status_ =
        PWriteAll(stream_->file->fd(), data, size, s.stream_offset + s.size, stream_->file->path());
  }
  s.size += size;
  if (stream_) stream_->end = s.stream_offset + s.size;
}

void ArtifactWriter::CloseWeightsSegment() {
  if (open_weights_segment_ >= 0) {
    segments_[open_weights_segment_].digest = DigestOf(&open_hash_->state);
  }
  open_weights_segment_ = -1;
  open_hash_.reset();
}

void ArtifactWriter::StartWeightsSegment() { CloseWeightsSegment(); }

Expected<uint32_t> ArtifactWriter::AddSegment(xpk::SegmentKind kind, std::vector<uint8_t> bytes,
                                              uint64_t alignment) {
  if (*xpk::EnumNameSegmentKind(kind) == '\0') {
    return xrt::InvalidArgumentError("artifact writer: unknown segment kind {}",
                                     static_cast<int>(kind));
  }
  const uint64_t min_align =
      kind == xpk::SegmentKind::weights ? xrt::kXpkPageAlignment : xrt::kXpkSegmentAlignment;
  if (alignment == 0) alignment = min_align;
  if (!IsPowerOfTwo(alignment) || alignment < min_align) {
    return xrt::InvalidArgumentError(
        "artifact writer: {} segment alignment {} is not a power of two >= {}",
        xpk::EnumNameSegmentKind(kind), alignment, min_align);
  }
  PendingSegment& s = NewSegment(kind, alignment);
  s.digest = xrt::ComputeXxh3_128(bytes.data(), bytes.size());
  if (stream_) {
    AppendBytes(bytes.data(), bytes.size());
  } else {
    s.size = bytes.size();
    s.bytes = std::move(bytes);
  }
  return static_cast<uint32_t>(segments_.size() - 1);
}

WeightPlacement ArtifactWriter::AppendWeight(const void* data, size_t size) {
  if (open_weights_segment_ < 0) {
    NewSegment(xpk::SegmentKind::weights, xrt::kXpkPageAlignment);
    open_weights_segment_ = static_cast<int64_t>(segments_.size() - 1);
    open_hash_ = std::make_unique<Hasher>();
  }
  static const uint8_t k_zeros[xrt::kXpkSegmentAlignment] = {};
  const uint64_t end = segments_.back().size;
  const uint64_t offset =
      (end + xrt::kXpkSegmentAlignment - 1) / xrt::kXpkSegmentAlignment * xrt::kXpkSegmentAlignment;
  const auto* p = static_cast<const uint8_t*>(data);
  XXH3_128bits_update(&open_hash_->state, k_zeros, offset - end);
  XXH3_128bits_update(&open_hash_->state, p, size);
  AppendBytes(nullptr, offset - end);
  AppendBytes(p, size);
  return {static_cast<uint32_t>(open_weights_segment_), offset, size};
}

Expected<ArtifactWriter::Layout> ArtifactWriter::ComputeLayout(const ManifestBuildFn& build,
                                                               const std::string& name) const {
  // Places the segments after a manifest of `manifest_size` bytes.
  auto place = [&](uint64_t manifest_size, std::vector<SegmentPlacement>* out,
                   uint64_t* end) -> Status {
    out->clear();
    uint64_t cursor = xrt::kXpkHeaderSize + manifest_size;
    for (const PendingSegment& s : segments_) {
      uint64_t offset = 0;
      if (!AlignUp(cursor, s.alignment, &offset) || s.size > UINT64_MAX - offset) {
        return xrt::InvalidArgumentError("{}: artifact layout overflows 64 bits", name);
      }
      out->push_back({s.kind, offset, s.size, s.alignment});
      cursor = offset + s.size;
    }
    *end = cursor;
    return Status::Ok();
  };

  // The checksums were computed as the bytes came; the open weights segment's is final
  // once no more bytes come (the digest does not end the running hash).
  std::vector<xrt::Xxh3_128Digest> digests;
  digests.reserve(segments_.size());
  for (size_t i = 0; i < segments_.size(); ++i) {
    digests.push_back(static_cast<int64_t>(i) == open_weights_segment_
                          ? DigestOf(&open_hash_->state)
                          : segments_[i].digest);
  }

  Layout layout;
  uint64_t manifest_size = 0;
  std::vector<SegmentPlacement> placed;
  uint64_t end = 0;
  XRT_RETURN_IF_ERROR(place(manifest_size, &placed, &end));
  for (int pass = 0; pass < kMaxLayoutPasses; ++pass) {
    flatbuffers::FlatBufferBuilder fbb(16 * 1024);
    // Store every Segment field even when 0, so the manifest's size does not depend on
    // the offsets it records and the layout converges.
    fbb.ForceDefaults(true);
    std::vector<flatbuffers::Offset<xpk::Segment>> segs;
    segs.reserve(placed.size());
    for (size_t i = 0; i < placed.size(); ++i) {
      const SegmentPlacement& p = placed[i];
      auto checksum = fbb.CreateVector(digests[i].data(), digests[i].size());
      segs.push_back(xpk::CreateSegment(fbb, p.kind, p.offset, p.size, p.alignment,
                                        xpk::ChecksumAlgorithm::xxh3_128, checksum));
    }
    SegmentTable table = fbb.CreateVector(segs);
    fbb.ForceDefaults(false);
    Expected<flatbuffers::Offset<xpk::Manifest>> root = build(fbb, table);
    if (!root.ok()) return root.status();
    xpk::FinishManifestBuffer(fbb, *root);

    const uint64_t size = fbb.GetSize();
    std::vector<SegmentPlacement> next;
    uint64_t next_end = 0;
    XRT_RETURN_IF_ERROR(place(size, &next, &next_end));
    bool same = next.size() == placed.size();
    for (size_t i = 0; same && i < next.size(); ++i) same = next[i].offset == placed[i].offset;
    if (same) {
      // Sanity: the callback used our segment table and the right format version.
      const xpk::Manifest* m = xpk::GetManifest(fbb.GetBufferPointer());
      const uint32_t n = m->segments() ? m->segments()->size() : 0;
      if (n != placed.size()) {
        return xrt::InternalError("{}: manifest has {} segments, the writer holds {}", name, n,
                                  placed.size());
      }
      for (uint32_t i = 0; i < n; ++i) {
        if (m->segments()->Get(i)->offset() != placed[i].offset) {
          return xrt::InternalError("{}: manifest segment {} is not the writer's segment table",
                                    name, i);
        }
      }
      if (m->format_major() != xrt::kXpkFormatMajor) {
        return xrt::InternalError("{}: manifest format_major is {}, expected {}", name,
                                  m->format_major(), xrt::kXpkFormatMajor);
      }
      layout.segments = std::move(placed);
      layout.manifest.assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + size);
      layout.file_size = end;
      return layout;
    }
    placed = std::move(next);
    end = next_end;
    manifest_size = size;
  }
  return xrt::InternalError("{}: artifact layout did not converge in {} passes", name,
                            kMaxLayoutPasses);
}

Status ArtifactWriter::Emit(const Layout& layout,
                            const std::function<Status(const uint8_t*, size_t)>& sink) const {
  static const uint8_t k_zeros[4096] = {};
  uint64_t pos = 0;
  auto pad_to = [&](uint64_t target) -> Status {
    while (pos < target) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(target - pos, sizeof(k_zeros)));
      XRT_RETURN_IF_ERROR(sink(k_zeros, n));
      pos += n;
    }
    return Status::Ok();
  };

  xrt::FileHeader h;
  h.manifest_offset = xrt::kXpkHeaderSize;
  h.manifest_size = layout.manifest.size();
  h.file_size = layout.file_size;
  const std::string header = xrt::EncodeFileHeader(h);
  XRT_RETURN_IF_ERROR(sink(reinterpret_cast<const uint8_t*>(header.data()), header.size()));
  pos += header.size();
  XRT_RETURN_IF_ERROR(sink(layout.manifest.data(), layout.manifest.size()));
  pos += layout.manifest.size();
  for (size_t i = 0; i < segments_.size(); ++i) {
    XRT_RETURN_IF_ERROR(pad_to(layout.segments[i].offset));
    const std::vector<uint8_t>& bytes = segments_[i].bytes;
    if (!bytes.empty()) XRT_RETURN_IF_ERROR(sink(bytes.data(), bytes.size()));
    pos += bytes.size();
  }
  if (pos != layout.file_size) {
    return xrt::InternalError("artifact writer: wrote {} bytes, layout says {}", pos,
                              layout.file_size);
  }
  return Status::Ok();
}

Expected<std::vector<uint8_t>> ArtifactWriter::WriteToBytes(const ManifestBuildFn& build,
                                                            const ArtifactWriteOptions& options,
                                                            const std::string& name) const {
  if (stream_) {
    return xrt::FailedPreconditionError(
        "{}: the artifact writer streams to {}; WriteToBytes needs the in-memory mode", name,
        stream_->path);
  }
  XRT_ASSIGN_OR_RETURN(Layout layout, ComputeLayout(build, name));
  std::vector<uint8_t> out;
  out.reserve(layout.file_size);
  XRT_RETURN_IF_ERROR(Emit(layout, [&out](const uint8_t* p, size_t n) {
    out.insert(out.end(), p, p + n);
    return Status::Ok();
  }));
  if (options.validate) {
    auto loaded = xrt::Artifact::FromBytes(name, out.data(), out.size());
    if (!loaded.ok()) {
      return xrt::InternalError("the artifact writer produced an artifact the loader rejects: {}",
                                loaded.status().message());
    }
  }
  return out;
}

Status ArtifactWriter::FinishStream(const Layout& layout, int fd, const std::string& tmp) const {
  const std::vector<SegmentPlacement>& to = layout.segments;

  // One shift for all segments (the usual case: the first segment is a page-aligned
  // weights segment and none is aligned beyond the filesystem block) is done by the
  // filesystem, moving no bytes.
  bool moved = false;
  struct statfs fs;
  if (stream_->options.allow_fallocate && !to.empty() && ::fstatfs(fd, &fs) == 0 &&
      fs.f_bsize > 0) {
    const uint64_t from0 = segments_[0].stream_offset, to0 = to[0].offset;
    const uint64_t block = static_cast<uint64_t>(fs.f_bsize);
    bool uniform = to0 % block == 0 && from0 % block == 0;
    for (size_t i = 0; uniform && i < to.size(); ++i) {
      uniform = to[i].offset - to0 == segments_[i].stream_offset - from0;
    }
    if (uniform && from0 == to0) {
      moved = true;
    } else if (uniform && to0 < from0) {
      moved = ::fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, static_cast<off_t>(to0),
                          static_cast<off_t>(from0 - to0)) == 0;
    } else if (uniform) {
      moved = ::fallocate(fd, FALLOC_FL_INSERT_RANGE, static_cast<off_t>(from0),
                          static_cast<off_t>(to0 - from0)) == 0;
    }
  }
  if (!moved && !to.empty()) {
    // Both layouts place the segments with the same alignment rule from different
    // starts, so every segment moves the same direction: down (front to back) when the
    // manifest fit the reserve, up (back to front) when it did not.
    const bool down = to[0].offset <= segments_[0].stream_offset;
    std::vector<uint8_t> buf(size_t{1} << 20);
    for (size_t k = 0; k < to.size(); ++k) {
      const size_t i = down ? k : to.size() - 1 - k;
      const uint64_t from = segments_[i].stream_offset;
      if ((to[i].offset <= from) != down && to[i].offset != from) {
        return xrt::InternalError("{}: segment {} moves against the others ({} -> {})", tmp, i,
                                  from, to[i].offset);
      }
      XRT_RETURN_IF_ERROR(MoveWithinFile(fd, from, to[i].offset, to[i].size, &buf, tmp));
    }
  }

  // Header, manifest, then zeros in every gap (old bytes may be left there by a copy).
  xrt::FileHeader h;
  h.manifest_offset = xrt::kXpkHeaderSize;
  h.manifest_size = layout.manifest.size();
  h.file_size = layout.file_size;
  const std::string header = xrt::EncodeFileHeader(h);
  XRT_RETURN_IF_ERROR(
      PWriteAll(fd, reinterpret_cast<const uint8_t*>(header.data()), header.size(), 0, tmp));
  XRT_RETURN_IF_ERROR(
      PWriteAll(fd, layout.manifest.data(), layout.manifest.size(), header.size(), tmp));
  uint64_t cursor = header.size() + layout.manifest.size();
  for (const SegmentPlacement& p : to) {
    XRT_RETURN_IF_ERROR(PWriteAll(fd, nullptr, p.offset - cursor, cursor, tmp));
    cursor = p.offset + p.size;
  }
  if (::ftruncate(fd, static_cast<off_t>(layout.file_size)) != 0) {
    return xrt::UnavailableError("{}: cannot set the size to {}: {}", tmp, layout.file_size,
                                 std::strerror(errno));
  }
  return Status::Ok();
}

Status ArtifactWriter::WriteToFile(const std::string& path, const ManifestBuildFn& build,
                                   const ArtifactWriteOptions& options) {
  if (stream_) {
    if (path != stream_->path) {
      return xrt::FailedPreconditionError(
          "{}: the artifact writer streams to {}; WriteToFile must be given that path", path,
          stream_->path);
    }
    if (!stream_->file) {
      return xrt::FailedPreconditionError("{}: the streamed artifact was already written", path);
    }
    XRT_RETURN_IF_ERROR(stream_status_);
    XRT_ASSIGN_OR_RETURN(Layout layout, ComputeLayout(build, path));
    std::unique_ptr<TempFile> tmp = std::move(stream_->file);  // removed unless committed
    XRT_RETURN_IF_ERROR(FinishStream(layout, tmp->fd(), tmp->path()));
    return CommitTempFile(tmp.get(), path, options);
  }

  XRT_ASSIGN_OR_RETURN(Layout layout, ComputeLayout(build, path));
  XRT_ASSIGN_OR_RETURN(std::unique_ptr<TempFile> tmp, CreateTempFile(path));
  XRT_RETURN_IF_ERROR(Emit(layout, [&tmp](const uint8_t* p, size_t n) {
    return WriteAll(tmp->fd(), p, n, tmp->path());
  }));
  return CommitTempFile(tmp.get(), path, options);
}

flatbuffers::Offset<xpk::Provenance> BuildProvenance(flatbuffers::FlatBufferBuilder& fbb,
                                                     const xrt::ArtifactProvenance& p) {
  std::vector<std::pair<std::string, std::string>> options = p.options;
  std::sort(options.begin(), options.end());
  std::vector<xrt::ArtifactProvenance::Input> inputs = p.inputs;
  std::sort(inputs.begin(), inputs.end(), [](const auto& a, const auto& b) {
    return std::tie(a.path, a.role, a.size, a.sha256) < std::tie(b.path, b.role, b.size, b.sha256);
  });
  std::vector<flatbuffers::Offset<xpk::Option>> opts;
  for (const auto& [k, v] : options) {
    opts.push_back(xpk::CreateOptionDirect(fbb, k.c_str(), v.c_str()));
  }
  std::vector<flatbuffers::Offset<xpk::InputHash>> ins;
  for (const auto& in : inputs) {
    ins.push_back(xpk::CreateInputHashDirect(fbb, in.path.c_str(), in.role.c_str(), in.size,
                                             in.sha256.c_str()));
  }
  return xpk::CreateProvenanceDirect(fbb, p.compiler_version.c_str(), p.llvm_version.c_str(), &opts,
                                     &ins);
}

}  // namespace xcc
