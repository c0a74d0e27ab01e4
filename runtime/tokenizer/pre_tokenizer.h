// PreTokenizer: splits normalized text into the words BPE runs on, the way
// Hugging Face `tokenizers` Digits / Split(behavior = Isolated) / ByteLevel
// pre-tokenizers do: each step splits every piece produced so far, and both
// the regex matches and the text between them become pieces.
//
// Regexes are PCRE2 in UTF + UCP mode (\p{L}, \s, case folding on Unicode),
// JIT-compiled when PCRE2 has a JIT.
//
// Immutable after Create; Split is thread-safe. Move-only.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace xrt {

class PreTokenizer {
 public:
  // `regexes` are applied in order; `individual_digits` adds a first step that
  // isolates every \p{N} character. An uncompilable regex is an
  // InvalidArgument error quoting it and PCRE2's message.
  static Expected<PreTokenizer> Create(bool individual_digits,
                                       const std::vector<std::string>& regexes);

  PreTokenizer(PreTokenizer&&) noexcept;
  PreTokenizer& operator=(PreTokenizer&&) noexcept;
  ~PreTokenizer();

  // Appends the words of `text` (valid UTF-8) to `words`, as views into
  // `text`. Empty input gives no words.
  void Split(std::string_view text, std::vector<std::string_view>* words) const;

 private:
  struct Regex;
  PreTokenizer() = default;
  std::vector<std::unique_ptr<Regex>> steps_;
};

}  // namespace xrt
