#include "compiler/frontend/gguf_file.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "compiler/frontend/source_dtype.h"

namespace xcc {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint64_t kMaxDims = 4;             // GGML_MAX_DIMS
constexpr uint64_t kMaxStringBytes = 1ull << 30;

// Bounds-checked little-endian reader over the mapped file.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  bool Read(void* out, size_t n) {
    if (n > remaining()) return false;
    std::memcpy(out, data_ + pos_, n);
    pos_ += n;
    return true;
  }
  template <typename T>
  bool Get(T* v) {
    return Read(v, sizeof(T));
  }  // host is little-endian
  bool GetString(std::string* s) {
    uint64_t n;
    if (!Get(&n) || n > remaining() || n > kMaxStringBytes) return false;
    s->assign(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

bool IsValidValueType(uint32_t t) { return t <= 12; }

// Smallest encoded size of one value of type t (for sanity-checking counts).
size_t MinEncodedSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kString:
      return 8;
    case GgufValueType::kArray:
      return 12;
  }
  return 1;
}

// Reads one scalar of type t into v's scalar fields; false if truncated.
bool ReadScalar(Cursor& c, GgufValueType t, int64_t* i, double* f, std::string* s) {
  switch (t) {
    case GgufValueType::kUint8: {
      uint8_t x;
      if (!c.Get(&x)) return false;
      *i = x;
      return true;
    }
    case GgufValueType::kInt8: {
      int8_t x;
      if (!c.Get(&x)) return false;
      *i = x;
      return true;
    }
    case GgufValueType::kUint16: {
      uint16_t x;
      if (!c.Get(&x)) return false;
      *i = x;
      return true;
    }
    case GgufValueType::kInt16: {
      int16_t x;
      if (!c.Get(&x)) return false;
      *i = x;
      return true;
    }
    case GgufValueType::kUint32: {
      uint32_t x;
      if (!c.Get(&x)) return false;
      *i = x;
      return true;
    }
    case GgufValueType::kInt32: {
      int32_t x;
      if (!c.Get(&x)) return false;
      *i = x;
      return true;
    }
    case GgufValueType::kUint64: {
      uint64_t x;
      if (!c.Get(&x)) return false;
      *i = static_cast<int64_t>(x);
      return true;
    }
    case GgufValueType::kInt64: {
      int64_t x;
      if (!c.Get(&x)) return false;
      *i = x;
      return true;
    }
    case GgufValueType::kBool: {
      uint8_t x;
      if (!c.Get(&x)) return false;
      *i = x != 0;
      return true;
    }
    case GgufValueType::kFloat32: {
      float x;
      if (!c.Get(&x)) return false;
      *f = x;
      return true;
    }
    case GgufValueType::kFloat64: {
      double x;
      if (!c.Get(&x)) return false;
      *f = x;
      return true;
    }
    case GgufValueType::kString:
      return c.GetString(s);
    case GgufValueType::kArray:
      return false;
  }
  return false;
}

}  // namespace

const char* GgufValueTypeName(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
      return "uint8";
    case GgufValueType::kInt8:
      return "int8";
    case GgufValueType::kUint16:
      return "uint16";
    case GgufValueType::kInt16:
      return "int16";
    case GgufValueType::kUint32:
      return "uint32";
    case GgufValueType::kInt32:
      return "int32";
    case GgufValueType::kFloat32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kUint64:
      return "uint64";
    case GgufValueType::kInt64:
      return "int64";
    case GgufValueType::kFloat64:
      return "float64";
  }
  return "?";
}

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

Expected<SourceDType> GgufTypeToSourceDType(uint32_t t) {
  switch (t) {
    case 0:
      return SourceDType::kF32;
    case 1:
      return SourceDType::kF16;
    case 2:
      return SourceDType::kQ4_0;
    case 3:
      return SourceDType::kQ4_1;
    case 6:
      return SourceDType::kQ5_0;
    case 7:
      return SourceDType::kQ5_1;
    case 8:
      return SourceDType::kQ8_0;
    case 9:
      return SourceDType::kQ8_1;
    case 10:
      return SourceDType::kQ2_K;
    case 11:
      return SourceDType::kQ3_K;
    case 12:
      return SourceDType::kQ4_K;
    case 13:
      return SourceDType::kQ5_K;
    case 14:
      return SourceDType::kQ6_K;
    case 15:
      return SourceDType::kQ8_K;
    case 20:
      return SourceDType::kIQ4_NL;
    case 23:
      return SourceDType::kIQ4_XS;
    case 24:
      return SourceDType::kI8;
    case 25:
      return SourceDType::kI16;
    case 26:
      return SourceDType::kI32;
    case 27:
      return SourceDType::kI64;
    case 28:
      return SourceDType::kF64;
    case 30:
      return SourceDType::kBF16;
    default:
      return xrt::UnimplementedError(
          "unsupported ggml type {} (supported: F32, F16, BF16, F64, I8-I64, Q4_0, Q4_1, Q5_0, "
          "Q5_1, Q8_0, Q8_1, Q2_K-Q8_K, IQ4_NL, IQ4_XS)",
          t);
  }
}

Expected<GgufFile> GgufFile::Open(const std::string& path) {
  GgufFile g;
  XRT_ASSIGN_OR_RETURN(g.file_, xrt::MappedFile::Open(path));
  Cursor c(g.file_.data(), g.file_.size());
  auto truncated = [&](const std::string& what) {
    return xrt::DataLossError("{}: truncated at byte {} while reading {}", path, c.pos(), what);
  };

  uint32_t magic = 0;
  if (!c.Get(&magic)) return truncated("the magic");
  if (magic != kGgufMagic) {
    return xrt::DataLossError("{}: bad magic 0x{:08x} (not a GGUF file)", path, magic);
  }
  if (!c.Get(&g.version_)) return truncated("the version");
  if (g.version_ != 2 && g.version_ != 3) {
    return xrt::UnimplementedError("{}: GGUF version {} (supported: 2, 3)", path, g.version_);
  }
  uint64_t n_tensors = 0, n_kv = 0;
  if (!c.Get(&n_tensors)) return truncated("the tensor count");
  if (!c.Get(&n_kv)) return truncated("the metadata count");
  // Each kv needs >= 8 + 4 + 1 bytes, each tensor info >= 8 + 4 + 4 + 8.
  if (n_kv > c.remaining() / 13) {
    return xrt::DataLossError("{}: metadata count {} exceeds what the file can hold", path, n_kv);
  }
  if (n_tensors > c.remaining() / 24) {
    return xrt::DataLossError("{}: tensor count {} exceeds what the file can hold", path,
                              n_tensors);
  }

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key;
    if (!c.GetString(&key)) return truncated(fmt::format("metadata key #{}", k));
    auto fail = [&](const std::string& what) {
      return xrt::DataLossError("{}: key '{}': {}", path, key, what);
    };
    uint32_t type_raw;
    if (!c.Get(&type_raw)) return fail("truncated value type");
    if (!IsValidValueType(type_raw)) return fail(fmt::format("unknown value type {}", type_raw));
    GgufValue v;
    v.type = static_cast<GgufValueType>(type_raw);
    if (v.type == GgufValueType::kArray) {
      uint32_t et;
      uint64_t count;
      if (!c.Get(&et) || !c.Get(&count)) return fail("truncated array header");
      if (!IsValidValueType(et)) return fail(fmt::format("unknown array element type {}", et));
      v.array_type = static_cast<GgufValueType>(et);
      if (v.array_type == GgufValueType::kArray) {
        return xrt::UnimplementedError("{}: key '{}': nested arrays are not supported", path, key);
      }
      if (count > c.remaining() / MinEncodedSize(v.array_type)) {
        return fail(fmt::format("array of {} {} elements extends beyond the file", count,
                                GgufValueTypeName(v.array_type)));
      }
      if (v.array_type == GgufValueType::kString) {
        v.strings.resize(count);
      } else if (v.array_type == GgufValueType::kFloat32 ||
                 v.array_type == GgufValueType::kFloat64) {
        v.floats.resize(count);
      } else {
        v.ints.resize(count);
      }
      for (uint64_t j = 0; j < count; ++j) {
        int64_t iv = 0;
        double fv = 0;
        std::string* sv = v.strings.empty() ? &v.s : &v.strings[j];
        if (!ReadScalar(c, v.array_type, &iv, &fv, sv)) {
          return fail(fmt::format("truncated at array element {}", j));
        }
        if (!v.floats.empty()) v.floats[j] = fv;
        if (!v.ints.empty()) v.ints[j] = iv;
      }
    } else if (!ReadScalar(c, v.type, &v.i, &v.f, &v.s)) {
      return fail(fmt::format("truncated {} value", GgufValueTypeName(v.type)));
    }
    if (!g.metadata_.emplace(key, std::move(v)).second) {
      return xrt::DataLossError("{}: key '{}': duplicate", path, key);
    }
  }

  if (g.Has("general.alignment")) {
    XRT_ASSIGN_OR_RETURN(int64_t a, g.GetInt("general.alignment"));
    if (a <= 0 || (a & (a - 1)) != 0) {
      return xrt::DataLossError("{}: key 'general.alignment': {} is not a power of two", path, a);
    }
    g.alignment_ = static_cast<uint64_t>(a);
  }

  std::set<std::string> names;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    if (!c.GetString(&t.name)) return truncated(fmt::format("the name of tensor #{}", k));
    auto fail = [&](const std::string& what) {
      return xrt::DataLossError("{}: tensor '{}': {}", path, t.name, what);
    };
    uint32_t n_dims;
    if (!c.Get(&n_dims)) return fail("truncated tensor info");
    if (n_dims == 0 || n_dims > kMaxDims) {
      return fail(fmt::format("{} dimensions (expected 1..{})", n_dims, kMaxDims));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t ne;
      if (!c.Get(&ne)) return fail("truncated tensor info");
      if (ne > static_cast<uint64_t>(INT64_MAX))
        return fail(fmt::format("dimension {} too large", ne));
      t.ne.push_back(static_cast<int64_t>(ne));
    }
    if (!c.Get(&t.ggml_type) || !c.Get(&t.offset)) return fail("truncated tensor info");
    Expected<SourceDType> dt = GgufTypeToSourceDType(t.ggml_type);
    if (!dt.ok()) return dt.status().WithContext(fmt::format("{}: tensor '{}'", path, t.name));
    t.dtype = *dt;
    Expected<int64_t> numel = ShapeNumel(t.ne);
    if (!numel.ok()) return fail(numel.status().message());
    int64_t block = GetDTypeLayout(t.dtype).block_elems;
    if (t.ne[0] % block != 0) {
      return fail(fmt::format("row length {} is not a multiple of the {} block size {}", t.ne[0],
                              SourceDTypeName(t.dtype), block));
    }
    Expected<size_t> nbytes = DTypeNBytes(t.dtype, *numel);
    if (!nbytes.ok()) return fail(nbytes.status().message());
    t.nbytes = *nbytes;
    if (t.offset % g.alignment_ != 0) {
      return fail(fmt::format("data offset {} is not a multiple of the alignment {}", t.offset,
                              g.alignment_));
    }
    if (!names.insert(t.name).second) return fail("duplicate tensor name");
    g.tensors_.push_back(std::move(t));
  }

  uint64_t data_start = (c.pos() + g.alignment_ - 1) / g.alignment_ * g.alignment_;
  uint64_t file_size = g.file_.size();
  if (data_start > file_size && !g.tensors_.empty()) {
    return xrt::DataLossError("{}: data section starts at {} beyond the file ({} bytes)", path,
                              data_start, file_size);
  }
  uint64_t data_size = data_start <= file_size ? file_size - data_start : 0;
  std::vector<const GgufTensorInfo*> order;
  for (GgufTensorInfo& t : g.tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      return xrt::DataLossError(
          "{}: tensor '{}': data [{}, {}) extends beyond the data section ({} bytes)", path, t.name,
          t.offset, t.offset + t.nbytes, data_size);
    }
    t.data = g.file_.data() + data_start + t.offset;
    if (t.nbytes > 0) order.push_back(&t);
  }
  std::sort(order.begin(), order.end(),
            [](const GgufTensorInfo* a, const GgufTensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < order.size(); ++i) {
    const GgufTensorInfo* p = order[i - 1];
    const GgufTensorInfo* q = order[i];
    if (q->offset < p->offset + p->nbytes) {
      return xrt::DataLossError("{}: tensor '{}': data [{}, {}) overlaps tensor '{}' [{}, {})",
                                path, q->name, q->offset, q->offset + q->nbytes, p->name, p->offset,
                                p->offset + p->nbytes);
    }
  }
  return g;
}

Expected<const GgufValue*> GgufFile::Get(const std::string& key) const {
  auto it = metadata_.find(key);
  if (it == metadata_.end()) return xrt::NotFoundError("{}: key '{}': missing", path(), key);
  return &it->second;
}

Expected<int64_t> GgufFile::GetInt(const std::string& key) const {
  XRT_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (!v->is_integer()) {
    return xrt::InvalidArgumentError("{}: key '{}': expected an integer, got {}", path(), key,
                                     GgufValueTypeName(v->type));
  }
  return v->i;
}

Expected<double> GgufFile::GetFloat(const std::string& key) const {
  XRT_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (v->is_float()) return v->f;
  if (v->is_integer()) return static_cast<double>(v->i);
  return xrt::InvalidArgumentError("{}: key '{}': expected a number, got {}", path(), key,
                                   GgufValueTypeName(v->type));
}

Expected<bool> GgufFile::GetBool(const std::string& key) const {
  XRT_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (v->type != GgufValueType::kBool) {
    return xrt::InvalidArgumentError("{}: key '{}': expected a bool, got {}", path(), key,
                                     GgufValueTypeName(v->type));
  }
  return v->i != 0;
}

Expected<std::string> GgufFile::GetString(const std::string& key) const {
  XRT_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (v->type != GgufValueType::kString) {
    return xrt::InvalidArgumentError("{}: key '{}': expected a string, got {}", path(), key,
                                     GgufValueTypeName(v->type));
  }
  return v->s;
}

Expected<std::vector<std::string>> GgufFile::GetStringArray(const std::string& key) const {
  XRT_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  if (v->type != GgufValueType::kArray || v->array_type != GgufValueType::kString) {
    return xrt::InvalidArgumentError(
        "{}: key '{}': expected an array of strings, got {}", path(), key,
        v->type == GgufValueType::kArray
            ? fmt::format("an array of {}", GgufValueTypeName(v->array_type))
            : std::string(GgufValueTypeName(v->type)));
  }
  return v->strings;
}

Expected<std::vector<int64_t>> GgufFile::GetIntArray(const std::string& key) const {
  XRT_ASSIGN_OR_RETURN(const GgufValue* v, Get(key));
  bool int_array = v->type == GgufValueType::kArray && v->array_type != GgufValueType::kString &&
                   v->array_type != GgufValueType::kFloat32 &&
                   v->array_type != GgufValueType::kFloat64 &&
                   v->array_type != GgufValueType::kBool;
  if (!int_array) {
    return xrt::InvalidArgumentError(
        "{}: key '{}': expected an array of integers, got {}", path(), key,
        v->type == GgufValueType::kArray
            ? fmt::format("an array of {}", GgufValueTypeName(v->array_type))
            : std::string(GgufValueTypeName(v->type)));
  }
  return v->ints;
}

}  // namespace xcc
