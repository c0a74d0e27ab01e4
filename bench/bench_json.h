// Output of the benchmark programs: the result JSON, pretty-printed, on stdout
// and (when a path is given) in a file.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

namespace xcc::bench {

// Prints `result` (2-space indent) to stdout and writes it to `path` unless
// `path` is empty. Returns false when the file cannot be written.
inline bool EmitJson(const nlohmann::json& result, const std::string& path) {
  const std::string text = result.dump(2);
  std::printf("%s\n", text.c_str());
  if (path.empty()) return true;
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "error: cannot write %s\n", path.c_str());
    return false;
  }
  std::fputs(text.c_str(), f);
  return std::fclose(f) == 0;
}

}  // namespace xcc::bench
