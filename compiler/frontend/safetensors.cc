#include "compiler/frontend/safetensors.h"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>

#include "compiler/frontend/source_dtype.h"

namespace xcc {
namespace {

// safetensors itself refuses headers above 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

}  // namespace

Expected<SourceDType> SafetensorsDType(const std::string& s) {
  static const std::map<std::string, SourceDType> k_map = {
      {"F32", SourceDType::kF32},   {"F16", SourceDType::kF16}, {"BF16", SourceDType::kBF16},
      {"F64", SourceDType::kF64},   {"I8", SourceDType::kI8},   {"I16", SourceDType::kI16},
      {"I32", SourceDType::kI32},   {"I64", SourceDType::kI64}, {"U8", SourceDType::kU8},
      {"BOOL", SourceDType::kBool},
  };
  auto it = k_map.find(s);
  if (it == k_map.end()) {
    return xrt::UnimplementedError(
        "unsupported dtype '{}' (supported: F32, F16, BF16, F64, "
        "I8, I16, I32, I64, U8, BOOL)",
        s);
  }
  return it->second;
}

Expected<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile st;
  XRT_ASSIGN_OR_RETURN(st.file_, xrt::MappedFile::Open(path));
  const uint8_t* base = st.file_.data();
  const size_t size = st.file_.size();
  if (size < 8) {
    return xrt::DataLossError("{}: file is {} bytes, too short for the 8-byte header length", path,
                              size);
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  if (header_len > size - 8) {
    return xrt::DataLossError("{}: header length {} extends beyond the file ({} bytes)", path,
                              header_len, size);
  }
  if (header_len > kMaxHeaderBytes) {
    return xrt::DataLossError("{}: header length {} exceeds the {} byte limit", path, header_len,
                              kMaxHeaderBytes);
  }
  const uint8_t* data = base + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;

  nlohmann::json header = nlohmann::json::parse(base + 8, base + 8 + header_len, nullptr,
                                                /*allow_exceptions=*/false);
  if (header.is_discarded()) return xrt::DataLossError("{}: header is not valid JSON", path);
  if (!header.is_object()) return xrt::DataLossError("{}: header is not a JSON object", path);

  struct Span {
    uint64_t begin, end;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return xrt::DataLossError("{}: '__metadata__' is not an object", path);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return xrt::DataLossError("{}: '__metadata__' value '{}' is not a string", path, m.key());
        }
        st.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto fail = [&](const std::string& what) {
      return xrt::DataLossError("{}: tensor '{}': {}", path, name, what);
    };
    if (!v.is_object()) return fail("entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return fail("'dtype' missing or not a string");
    if (sh == v.end() || !sh->is_array()) return fail("'shape' missing or not an array");
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      // nlohmann reports non-negative integers as unsigned.
      if (off != v.end() && off->is_array() && off->size() == 2 && (*off)[0].is_number_integer() &&
          (*off)[1].is_number_integer() &&
          ((*off)[0].get<int64_t>() < 0 || (*off)[1].get<int64_t>() < 0)) {
        return fail("negative data offset");
      }
      return fail("'data_offsets' missing or not two non-negative integers");
    }
    Expected<SourceDType> dtype = SafetensorsDType(dt->get<std::string>());
    if (!dtype.ok()) {
      return dtype.status().WithContext(fmt::format("{}: tensor '{}'", path, name));
    }
    SourceTensor t;
    t.name = name;
    t.dtype = *dtype;
    t.file = path;
    for (const nlohmann::json& d : *sh) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) {
        return fail(fmt::format("shape {} has a non-integer or negative dimension", sh->dump()));
      }
      t.shape.push_back(d.get<int64_t>());
    }
    uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end) return fail(fmt::format("data offsets [{}, {}) out of order", begin, end));
    if (end > data_size) {
      return fail(fmt::format("data offsets [{}, {}) beyond the data section ({} bytes)", begin,
                              end, data_size));
    }
    Expected<int64_t> numel = ShapeNumel(t.shape);
    if (!numel.ok()) return fail(numel.status().message());
    Expected<size_t> nbytes = DTypeNBytes(t.dtype, *numel);
    if (!nbytes.ok()) return fail(nbytes.status().message());
    if (end - begin != *nbytes) {
      return fail(fmt::format("data offsets [{}, {}) hold {} bytes, but {} {} needs {}", begin, end,
                              end - begin, SourceDTypeName(t.dtype), sh->dump(), *nbytes));
    }
    t.data = data + begin;
    t.nbytes = *nbytes;
    st.tensors_.push_back(std::move(t));
  }
  std::sort(st.tensors_.begin(), st.tensors_.end(),
            [](const SourceTensor& a, const SourceTensor& b) { return a.name < b.name; });
  for (const SourceTensor& t : st.tensors_) {
    if (t.nbytes == 0) continue;  // empty tensors occupy no bytes
    uint64_t b = static_cast<uint64_t>(t.data - data);
    spans.push_back({b, b + t.nbytes, &t.name});
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < spans.size(); ++i) {
    const Span& p = spans[i - 1];
    const Span& c = spans[i];
    if (c.begin < p.end) {
      return xrt::DataLossError(
          "{}: tensor '{}': data offsets [{}, {}) overlap tensor '{}' [{}, {})", path, *c.name,
          c.begin, c.end, *p.name, p.begin, p.end);
    }
  }
  return st;
}

}  // namespace xcc
