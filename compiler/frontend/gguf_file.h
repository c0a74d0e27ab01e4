// Reader for GGUF (versions 2 and 3, little-endian): header, metadata
// key/values, tensor infos and the aligned data section.
//
//   magic "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | data
// Strings are u64 length + bytes; arrays are u32 element type + u64 count + elements.
//
// Loading validates everything: every read is bounds-checked, tensor data must
// lie inside the file, aligned and non-overlapping; errors name the file and the
// key or tensor. Nested arrays are rejected (Unimplemented). Thread-compatible;
// move-only; tensor data points into the mapping and lives as long as the GgufFile.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/frontend/model_source.h"
#include "runtime/base/mapped_file.h"

namespace xcc {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* GgufValueTypeName(GgufValueType t);

// One metadata value. Scalars: integers (and bools) in `i` (uint64 values keep
// their bit pattern), floats in `f`, strings in `s`. Arrays: `array_type` and
// the elements in `ints`, `floats` or `strings` according to it.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  int64_t i = 0;
  double f = 0;
  std::string s;
  GgufValueType array_type = GgufValueType::kUint8;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  bool is_integer() const;  // any integer type (not bool)
  bool is_float() const {
    return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
  }
};

struct GgufTensorInfo {
  std::string name;         // as stored (GGUF naming)
  std::vector<int64_t> ne;  // dims innermost first (ne[0] is the row length)
  uint32_t ggml_type = 0;
  SourceDType dtype = SourceDType::kF32;
  uint64_t offset = 0;  // relative to the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
};

// ggml type id -> SourceDType; Unimplemented for types we cannot convert (IQ*, ...).
Expected<SourceDType> GgufTypeToSourceDType(uint32_t ggml_type);

class GgufFile {
 public:
  static Expected<GgufFile> Open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  // In file order.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  bool Has(const std::string& key) const { return metadata_.count(key) != 0; }
  // Typed getters; NotFound if absent, InvalidArgument if of another type.
  // Errors read "<file>: key '<key>': missing" / "...: expected an integer, got string".
  Expected<const GgufValue*> Get(const std::string& key) const;
  Expected<int64_t> GetInt(const std::string& key) const;   // any integer type
  Expected<double> GetFloat(const std::string& key) const;  // float or integer
  Expected<bool> GetBool(const std::string& key) const;
  Expected<std::string> GetString(const std::string& key) const;
  Expected<std::vector<std::string>> GetStringArray(const std::string& key) const;
  Expected<std::vector<int64_t>> GetIntArray(const std::string& key) const;

 private:
  xrt::MappedFile file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
};

}  // namespace xcc
