// Reading the committed reference fixtures (tests/fixtures), for the numerics tests.
#pragma once

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xcc::testing {

inline nlohmann::json ReadJson(const std::filesystem::path& p) {
  std::ifstream in(p);
  return nlohmann::json::parse(in);
}

// A raw little-endian float32 file (reference logits, pixel values).
inline std::vector<float> ReadF32(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// The decoder fixtures: "gguf/<name>" is tests/fixtures/gguf/<name>/ (model.gguf),
// any other name tests/fixtures/models/<name>/ (an HF directory).
inline const std::vector<std::string> kDecoderFixtures = {
    "llama_gqa",    "llama_tied", "llama_attn_bias", "qwen2_bias",
    "mistral",      "gguf/mixed", "gguf/tied_q4_1",  "gguf/llama3_rope",
    "gguf/kquants", "gguf/q5",    "gguf/q3_k",       "gguf/iq4"};

inline bool IsGgufFixture(const std::string& name) { return name.rfind("gguf/", 0) == 0; }

inline std::filesystem::path DecoderFixtureDir(const std::string& name) {
  const std::filesystem::path fixtures = std::filesystem::path(XCC_SOURCE_DIR) / "tests/fixtures";
  return IsGgufFixture(name) ? fixtures / name : fixtures / "models" / name;
}

// What the compiler is given: the HF directory, or the GGUF file in it.
inline std::filesystem::path DecoderModelPath(const std::string& name) {
  return IsGgufFixture(name) ? DecoderFixtureDir(name) / "model.gguf" : DecoderFixtureDir(name);
}

// A fixture name as a gtest parameter / file name: "gguf/mixed" -> "gguf_mixed".
inline std::string FixtureParamName(std::string name) {
  for (char& c : name)
    if (c == '/') c = '_';
  return name;
}

}  // namespace xcc::testing
