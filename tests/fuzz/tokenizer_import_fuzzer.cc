// libFuzzer target: tokenizer.json (+ tokenizer_config.json) -> TokenizerSpec
// (runtime/tokenizer/tokenizer_import.h) -> Tokenizer, then encode/decode a text.
//
// Input layout: tokenizer.json bytes, optionally followed by a NUL byte and the
// tokenizer_config.json bytes, optionally followed by another NUL byte and the text to
// encode (JSON text holds no raw NUL, so the split is unambiguous). Without a text part
// the last 256 bytes of the tokenizer.json part are encoded. Importing must never crash;
// a spec that imports is checked by ExerciseTokenizer (fuzz_support.h).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include "runtime/tokenizer/tokenizer_import.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul1 = input.find('\0');
  const std::string_view tokenizer_json = input.substr(0, nul1);
  const bool has_config = nul1 != std::string_view::npos;
  std::string_view config_json;
  std::string_view text =
      tokenizer_json.substr(tokenizer_json.size() > 256 ? tokenizer_json.size() - 256 : 0);
  if (has_config) {
    const std::string_view after = input.substr(nul1 + 1);
    const size_t nul2 = after.find('\0');
    config_json = after.substr(0, nul2);
    if (nul2 != std::string_view::npos) text = after.substr(nul2 + 1);
  }

  xrt::fuzz::FuzzInputFile json_file(reinterpret_cast<const uint8_t*>(tokenizer_json.data()),
                                     tokenizer_json.size());
  xrt::fuzz::FuzzInputFile config_file(reinterpret_cast<const uint8_t*>(config_json.data()),
                                       config_json.size());
  auto spec = xrt::LoadTokenizerJson(json_file.path(), has_config ? config_file.path() : "");
  xrt::fuzz::CheckNotInternal(spec.status());
  if (!spec.ok()) return 0;
  xrt::fuzz::ExerciseTokenizer(std::move(*spec), text);
  return 0;
}
