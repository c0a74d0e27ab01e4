// Shared by the xrt_vision tests: the fixtures of tests/fixtures/images (made by
// tests/gen_image_fixtures.py from Pillow and transformers).
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xrt {
namespace vision_test {

inline std::string FixturePath(const std::string& name) {
  return std::string(XCC_SOURCE_DIR) + "/tests/fixtures/images/" + name;
}

// The whole file; empty if it cannot be read (the tests then fail on the content).
inline std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// expected.json: per image its size, Pillow mode and per config HF's outputs.
inline const nlohmann::json& Expected() {
  static const nlohmann::json j = ReadJson(FixturePath("expected.json"));
  return j;
}

}  // namespace vision_test
}  // namespace xrt
