// UTF-8 helpers shared by the tokenizer pieces: decoding code points, and the
// "lossy" conversion of arbitrary bytes to valid UTF-8 the way Rust's
// String::from_utf8_lossy (and so Hugging Face `tokenizers`) does it: every
// maximal invalid subpart becomes one U+FFFD.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace xrt::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Appends the UTF-8 encoding of `cp` (must be a valid scalar value).
void AppendCodePoint(uint32_t cp, std::string* out);

// Decodes the code point at s[pos] of a string known to be valid UTF-8 and
// advances `pos` past it.
uint32_t NextCodePoint(std::string_view s, size_t* pos);

// Length of the well-formed sequence starting at s[pos]:
//   > 0  a complete, valid sequence of that many bytes;
//   = 0  a valid but truncated prefix running to the end of `s`;
//   < 0  invalid: -n means the maximal invalid subpart is n bytes long.
int SequenceLength(std::string_view s, size_t pos);

bool IsValid(std::string_view s);

// Appends the valid UTF-8 decoding of `bytes` to `out`, replacing invalid
// subparts with U+FFFD. If `final` is false, an incomplete sequence at the end
// is left unconsumed. Returns the number of bytes consumed.
size_t AppendLossy(std::string_view bytes, bool final, std::string* out);

// Whole-string convenience form of AppendLossy(final = true).
std::string Lossy(std::string_view bytes);

// True if `s` is exactly one valid UTF-8 character.
bool IsOneCharacter(std::string_view s);

// `text` with every occurrence of the non-empty literal `pattern` (searched
// left to right, non-overlapping) replaced by `with`.
std::string ReplaceAll(std::string_view text, std::string_view pattern, std::string_view with);

}  // namespace xrt::utf8
