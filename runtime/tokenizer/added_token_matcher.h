// AddedTokenMatcher: finds added (and special) tokens in text before it is
// normalized and pre-tokenized, as `tokenizers`' AddedVocabulary does:
// leftmost-longest, non-overlapping matches; a single_word token only counts
// when not touching word characters; lstrip / rstrip extend the match over
// the whitespace on that side, so the whitespace is swallowed by the token.
//
// Immutable after construction; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tokenizer/tokenizer_spec.h"

namespace xrt {

class AddedTokenMatcher {
 public:
  struct Match {
    size_t begin;  // including stripped whitespace
    size_t end;
    int32_t id;
  };

  AddedTokenMatcher() = default;
  // `contents[i]` is the text matched for `tokens[i]` (the content, or its
  // normalized form for normalized tokens).
  AddedTokenMatcher(const std::vector<AddedToken>& tokens,
                    const std::vector<std::string>& contents);

  bool empty() const { return entries_.empty(); }

  // Matches in `text` (valid UTF-8), in order.
  std::vector<Match> FindAll(std::string_view text) const;

 private:
  struct Entry {
    std::string text;
    int32_t id;
    bool lstrip, rstrip, single_word;
  };
  std::vector<Entry> entries_;       // sorted by first byte, then longest first
  uint32_t bucket_begin_[257] = {};  // entries_[bucket_begin_[b] .. bucket_begin_[b+1])
};

}  // namespace xrt
