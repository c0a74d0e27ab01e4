#include "compiler/artifact/artifact_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

}  // namespace

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
  segments_.push_back({kind, alignment, std::move(bytes)});
  open_weights_segment_ = -1;
  return static_cast<uint32_t>(segments_.size() - 1);
}

WeightPlacement ArtifactWriter::AppendWeight(const void* data, size_t size) {
  if (open_weights_segment_ < 0) {
    segments_.push_back({xpk::SegmentKind::weights, xrt::kXpkPageAlignment, {}});
    open_weights_segment_ = static_cast<int64_t>(segments_.size() - 1);
  }
  std::vector<uint8_t>& bytes = segments_[open_weights_segment_].bytes;
  const size_t offset = (bytes.size() + xrt::kXpkSegmentAlignment - 1) / xrt::kXpkSegmentAlignment *
                        xrt::kXpkSegmentAlignment;
  bytes.resize(offset, 0);
  const auto* p = static_cast<const uint8_t*>(data);
  bytes.insert(bytes.end(), p, p + size);
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
      if (!AlignUp(cursor, s.alignment, &offset) || s.bytes.size() > UINT64_MAX - offset) {
        return xrt::InvalidArgumentError("{}: artifact layout overflows 64 bits", name);
      }
      out->push_back({s.kind, offset, s.bytes.size(), s.alignment});
      cursor = offset + s.bytes.size();
    }
    *end = cursor;
    return Status::Ok();
  };

  // The checksums depend only on the bytes, not on the placement: hash once.
  std::vector<xrt::Xxh3_128Digest> digests;
  digests.reserve(segments_.size());
  for (const PendingSegment& s : segments_) {
    digests.push_back(xrt::ComputeXxh3_128(s.bytes.data(), s.bytes.size()));
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

Status ArtifactWriter::WriteToFile(const std::string& path, const ManifestBuildFn& build,
                                   const ArtifactWriteOptions& options) const {
  XRT_ASSIGN_OR_RETURN(Layout layout, ComputeLayout(build, path));

  std::string tmpl = path + ".tmp.XXXXXX";
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) {
    return xrt::UnavailableError("{}: cannot create a temporary file: {}", path,
                                 std::strerror(errno));
  }
  TempFile tmp(fd, tmpl);
  XRT_RETURN_IF_ERROR(Emit(
      layout, [&tmp](const uint8_t* p, size_t n) { return WriteAll(tmp.fd(), p, n, tmp.path()); }));
  // mkstemp creates 0600; artifacts are ordinary readable files.
  if (::fchmod(tmp.fd(), 0644) != 0 || ::fsync(tmp.fd()) != 0) {
    return xrt::UnavailableError("{}: cannot finish writing: {}", tmp.path(), std::strerror(errno));
  }
  XRT_RETURN_IF_ERROR(tmp.Close());
  if (options.validate) {
    auto loaded = xrt::Artifact::Open(tmp.path());
    if (!loaded.ok()) {
      return xrt::InternalError(
          "{}: the artifact writer produced an artifact the loader rejects: {}", path,
          loaded.status().message());
    }
  }
  if (::rename(tmp.path().c_str(), path.c_str()) != 0) {
    return xrt::UnavailableError("{}: cannot rename {} into place: {}", path, tmp.path(),
                                 std::strerror(errno));
  }
  tmp.Release();
  return Status::Ok();
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
