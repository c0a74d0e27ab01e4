// Test helpers: a self-deleting temp directory and writers for safetensors and
// GGUF bytes, so tests build their fixtures in C++ with no checked-in binaries;
// a one-line description of a DecoderConfig to compare whole configs.
#pragma once

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "compiler/frontend/model_source.h"

namespace xcc {
namespace testing {

// Every field of `c` on one line, floating-point values to 6 significant
// digits (GGUF stores them as f32), so a test can state a whole config:
//   "LlamaForCausalLM vocab 6 hidden 8 ... rope_theta 100000 rope_scaling none x1 ..."
inline std::string DescribeDecoderConfig(const DecoderConfig& c) {
  std::string out = c.architecture;
  auto add = [&out](const char* key, const std::string& value) {
    out += std::string(" ") + key + " " + value;
  };
  auto num = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  add("vocab", std::to_string(c.vocab_size));
  add("hidden", std::to_string(c.hidden_size));
  add("intermediate", std::to_string(c.intermediate_size));
  add("layers", std::to_string(c.num_hidden_layers));
  add("heads", std::to_string(c.num_attention_heads));
  add("kv_heads", std::to_string(c.num_key_value_heads));
  add("head_dim", std::to_string(c.head_dim));
  add("max_pos", std::to_string(c.max_position_embeddings));
  add("rms_eps", num(c.rms_norm_eps));
  add("rope_theta", num(c.rope_theta));
  add("rope_scaling", c.rope_scaling.type + " x" + num(c.rope_scaling.factor));
  add("tied", c.tie_word_embeddings ? "yes" : "no");
  add("qkv_bias", c.attention_bias ? "yes" : "no");
  add("o_bias", c.attention_output_bias ? "yes" : "no");
  add("act", c.hidden_act);
  add("sliding_window", std::to_string(c.sliding_window));
  return out;
}

class TempDir {
 public:
  TempDir() {
    const char* base = getenv("TEST_TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/xcc_frontend_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) != nullptr) path_ = buf.data();
  }
  ~TempDir() { RemoveTree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  static void RemoveTree(const std::string& p) {
    if (p.empty()) return;
    if (DIR* d = opendir(p.c_str())) {
      while (dirent* e = readdir(d)) {
        std::string n = e->d_name;
        if (n == "." || n == "..") continue;
        std::string c = p + "/" + n;
        struct stat st;
        if (lstat(c.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
          RemoveTree(c);
        } else {
          unlink(c.c_str());
        }
      }
      closedir(d);
    }
    rmdir(p.c_str());
  }
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

template <typename T>
void Append(std::string* s, T v) {
  s->append(reinterpret_cast<const char*>(&v), sizeof(T));
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// float -> IEEE half, round-to-nearest-even, for normal values and zero only
// (what the tests use).
inline uint16_t FloatToHalf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  int32_t exp = static_cast<int32_t>((b >> 23) & 0xff) - 127 + 15;
  uint32_t mant = b & 0x7fffff;
  if ((b & 0x7fffffff) == 0) return sign;
  if (exp <= 0 || exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);  // not needed by tests
  uint32_t m = mant >> 13, rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (m & 1))) ++m;
  uint32_t h = (static_cast<uint32_t>(exp) << 10) + m;  // carry into exponent is fine
  return static_cast<uint16_t>(sign | h);
}

// One safetensors file. Add tensors, then Build().
class SafetensorsWriter {
 public:
  void Add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
           const std::string& bytes) {
    header_[name] = {{"dtype", dtype},
                     {"shape", shape},
                     {"data_offsets", {data_.size(), data_.size() + bytes.size()}}};
    data_ += bytes;
  }
  void AddF32(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    Add(name, "F32", std::move(shape), Bytes(v));
  }
  nlohmann::json& header() { return header_; }
  std::string& data() { return data_; }
  std::string Build() const { return BuildWithHeader(header_.dump()); }
  std::string BuildWithHeader(const std::string& header_text) const {
    std::string out;
    Append<uint64_t>(&out, header_text.size());
    out += header_text;
    out += data_;
    return out;
  }

 private:
  nlohmann::json header_ = nlohmann::json::object();
  std::string data_;
};

// GGUF value type ids.
enum : uint32_t {
  kGU8 = 0,
  kGI8 = 1,
  kGU16 = 2,
  kGI16 = 3,
  kGU32 = 4,
  kGI32 = 5,
  kGF32 = 6,
  kGBool = 7,
  kGString = 8,
  kGArray = 9,
  kGU64 = 10,
  kGI64 = 11,
  kGF64 = 12,
};
// ggml type ids.
enum : uint32_t {
  kTF32 = 0,
  kTF16 = 1,
  kTQ4_0 = 2,
  kTQ4_1 = 3,
  kTQ5_0 = 6,
  kTQ5_1 = 7,
  kTQ8_0 = 8,
  kTQ2_K = 10,
  kTQ3_K = 11,
  kTQ4_K = 12,
  kTQ5_K = 13,
  kTQ6_K = 14,
  kTQ8_K = 15,
  kTIQ4_NL = 20,
  kTIQ4_XS = 23,
  kTBF16 = 30,
};

// One GGUF file. Add metadata and tensors, then Build().
class GgufWriter {
 public:
  static std::string Str(const std::string& s) {
    std::string out;
    Append<uint64_t>(&out, s.size());
    return out + s;
  }
  // Raw key with an already-encoded value.
  void KvRaw(const std::string& key, uint32_t type, const std::string& value) {
    kv_ += Str(key);
    Append<uint32_t>(&kv_, type);
    kv_ += value;
    ++n_kv_;
  }
  template <typename T>
  void Kv(const std::string& key, uint32_t type, T v) {
    std::string val;
    Append<T>(&val, v);
    KvRaw(key, type, val);
  }
  void KvU32(const std::string& k, uint32_t v) { Kv(k, kGU32, v); }
  void KvI32(const std::string& k, int32_t v) { Kv(k, kGI32, v); }
  void KvF32(const std::string& k, float v) { Kv(k, kGF32, v); }
  void KvBool(const std::string& k, bool v) { Kv<uint8_t>(k, kGBool, v ? 1 : 0); }
  void KvString(const std::string& k, const std::string& v) { KvRaw(k, kGString, Str(v)); }
  void KvStringArray(const std::string& k, const std::vector<std::string>& v) {
    std::string val;
    Append<uint32_t>(&val, kGString);
    Append<uint64_t>(&val, v.size());
    for (const std::string& s : v) val += Str(s);
    KvRaw(k, kGArray, val);
  }
  void KvI32Array(const std::string& k, const std::vector<int32_t>& v) {
    std::string val;
    Append<uint32_t>(&val, kGI32);
    Append<uint64_t>(&val, v.size());
    val += Bytes(v);
    KvRaw(k, kGArray, val);
  }
  // `ne` innermost first. Data is placed at the next aligned offset.
  void Tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t ggml_type,
              const std::string& bytes) {
    while (data_.size() % alignment_ != 0) data_.push_back('\0');
    infos_ += Str(name);
    Append<uint32_t>(&infos_, static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) Append<uint64_t>(&infos_, d);
    Append<uint32_t>(&infos_, ggml_type);
    Append<uint64_t>(&infos_, data_.size());
    data_ += bytes;
    ++n_tensors_;
  }
  void TensorF32(const std::string& name, std::vector<uint64_t> ne, const std::vector<float>& v) {
    Tensor(name, std::move(ne), kTF32, Bytes(v));
  }
  void set_alignment(uint64_t a) { alignment_ = a; }  // call before adding tensors
  void set_version(uint32_t v) { version_ = v; }

  std::string Build() const {
    std::string out = "GGUF";
    Append<uint32_t>(&out, version_);
    Append<uint64_t>(&out, n_tensors_);
    Append<uint64_t>(&out, n_kv_);
    out += kv_;
    out += infos_;
    while (out.size() % alignment_ != 0) out.push_back('\0');
    return out + data_;
  }

 private:
  uint32_t version_ = 3;
  uint64_t alignment_ = 32;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
  std::string kv_, infos_, data_;
};

}  // namespace testing
}  // namespace xcc
