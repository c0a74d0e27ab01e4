// ParseJsonBounded: nlohmann's parse, refusing text that nests too deeply.
//
// nlohmann parses iteratively, but copying, comparing and printing its values
// recurse once per level: a request body or a model file nested 100000 levels
// deep would overflow the stack of whatever touched it next. Nesting past the
// limit is detected while parsing, and nothing below it is built.
//
// Header-only: include it from targets that link nlohmann_json.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace xrt {

// Request bodies, model configs, tokenizer files: real ones nest under 20.
inline constexpr int kMaxJsonDepth = 128;

// The parsed value, or a discarded value (is_discarded()) when `text` is not
// JSON or nests deeper than `max_depth` (then *too_deep is set, if given).
template <typename Json = nlohmann::json>
Json ParseJsonBounded(std::string_view text, bool* too_deep = nullptr,
                      int max_depth = kMaxJsonDepth) {
  bool deep = false;
  Json j = Json::parse(
      text.begin(), text.end(),
      [&](int depth, typename Json::parse_event_t, Json&) {
        deep = deep || depth >= max_depth;  // the top level is depth 0
        return !deep;                       // past the limit: build nothing more
      },
      /*allow_exceptions=*/false);
  if (too_deep) *too_deep = deep;
  if (deep) return Json(Json::value_t::discarded);
  return j;
}

}  // namespace xrt
