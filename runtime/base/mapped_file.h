// A read-only memory mapping of a whole file.
//
// Thread-compatible: const methods may be called concurrently; the mapping
// lives until the object is destroyed. Move-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/base/status.h"

namespace xrt {

class MappedFile {
 public:
  // Maps `path` read-only. An empty file maps to data() == nullptr, size() == 0.
  static Expected<MappedFile> Open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace xrt
