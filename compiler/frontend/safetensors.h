// Reader for the safetensors format: an 8-byte little-endian header length N,
// N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {...}}, then the data; offsets are relative to the data start.
//
// Loading validates everything (header bounds, JSON, dtypes, offsets in order,
// inside the file and non-overlapping, byte size == numel * itemsize); errors
// name the file and the tensor. Thread-compatible; move-only; tensor data
// points into the mapping and stays valid while the SafetensorsFile lives.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compiler/frontend/model_source.h"
#include "runtime/base/mapped_file.h"

namespace xcc {

class SafetensorsFile {
 public:
  static Expected<SafetensorsFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // Tensors sorted by name; SourceTensor::file is the path.
  const std::vector<SourceTensor>& tensors() const { return tensors_; }
  // The "__metadata__" string map (may be empty).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  xrt::MappedFile file_;
  std::vector<SourceTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Maps a safetensors dtype string ("F32", "BF16", ...) to SourceDType;
// Unimplemented for dtypes we do not read (F8_E4M3, U16, ...).
Expected<SourceDType> SafetensorsDType(const std::string& s);

}  // namespace xcc
