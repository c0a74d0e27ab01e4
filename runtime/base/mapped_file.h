// A read-only memory mapping of a whole file, either the file itself mapped in
// place (Open) or a private copy read into anonymous memory on transparent huge
// pages (Read), and that anonymous memory (AnonymousMapping).
//
// Thread-compatible: const methods may be called concurrently; the mapping
// lives until the object is destroyed. Move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/base/status.h"

namespace xrt {

// The size of a transparent huge page on x86-64 (a PMD mapping).
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Private anonymous memory, zero-filled and committed page by page on first
// touch, starting on a kHugePageBytes boundary and spanning whole huge pages,
// advised (MADV_HUGEPAGE) for transparent huge pages. Reading weights far
// larger than the caches, one huge page's TLB entry covers what 512 small
// pages' did, and the hardware prefetchers, which stop at a 4 KiB page's end,
// run on: on a Sapphire Rapids-class machine (2 threads) a sequential read
// went from 27.4-28.3 to 30.0-30.5 GB/s and a 1B-shaped Q4_K_M decode's
// weight reads from 23.0-23.3 to 24.3-25.9. Whether the kernel grants huge
// pages depends on /sys/kernel/mm/transparent_hugepage (HugePageBytes tells).
class AnonymousMapping {
 public:
  static Expected<AnonymousMapping> Create(size_t bytes);

  AnonymousMapping() = default;
  AnonymousMapping(AnonymousMapping&& other) noexcept;
  AnonymousMapping& operator=(AnonymousMapping&& other) noexcept;
  AnonymousMapping(const AnonymousMapping&) = delete;
  AnonymousMapping& operator=(const AnonymousMapping&) = delete;
  ~AnonymousMapping();

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  // Makes the whole mapping read-only (it keeps its huge pages).
  Status MakeReadOnly();
  // Bytes of the mapping's first size() backed by huge pages now (AnonHugePages
  // of its entries in /proc/self/smaps); 0 when that cannot be read.
  size_t HugePageBytes() const;

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;    // as asked
  size_t mapped_ = 0;  // whole huge pages from data_
};

class MappedFile {
 public:
  // Maps `path` read-only in place: pages come from the page cache as they are
  // first touched and are shared with every other mapping of the file. An
  // empty file maps to data() == nullptr, size() == 0.
  static Expected<MappedFile> Open(const std::string& path);
  // Reads `path` whole into an AnonymousMapping and makes it read-only: the
  // load reads every byte once, and then the contents sit on huge pages
  // where the kernel grants them (see AnonymousMapping).
  static Expected<MappedFile> Read(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Read(): bytes of the copy on huge pages now (AnonymousMapping::
  // HugePageBytes); Open(): 0.
  size_t HugePageBytes() const { return copy_.HugePageBytes(); }
  bool is_copy() const { return copy_.data() != nullptr; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;  // the file mapping, or copy_.data()
  size_t size_ = 0;
  AnonymousMapping copy_;  // Read() only
};

}  // namespace xrt
