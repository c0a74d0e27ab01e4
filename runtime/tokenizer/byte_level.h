// The GPT-2 byte-level alphabet: each of the 256 byte values is spelled as one
// printable Unicode character, so that a vocabulary of byte strings can be
// stored as text ("Ġthe" is the bytes " the").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace xrt::byte_level {

// The code point that spells byte `b`.
uint32_t ByteToCodePoint(uint8_t b);

// The byte spelled by code point `cp`, or -1 if `cp` is not in the alphabet.
int CodePointToByte(uint32_t cp);

// "Ġthe" -> " the". Returns nullopt if `text` (valid UTF-8) holds a character
// outside the alphabet.
std::optional<std::string> Decode(std::string_view text);

// " the" -> "Ġthe".
std::string Encode(std::string_view bytes);

}  // namespace xrt::byte_level
