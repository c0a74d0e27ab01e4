#include "runtime/tokenizer/added_token_matcher.h"

#include <algorithm>

#include <utf8proc.h>

#include "runtime/tokenizer/utf8.h"

namespace xrt {
namespace {

// Rust's char::is_whitespace: the Unicode White_Space property.
bool IsWhitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// A word character for single_word, as Hugging Face `tokenizers` decides it:
// the Unicode regex \w of Rust's `regex` crate (UTS #18 Annex C), i.e.
// Alphabetic, Mark, Decimal_Number, Connector_Punctuation and Join_Control.
// Letter numbers (Nl, e.g. 'Ⅻ') are Alphabetic; other numbers (No, e.g. '²',
// '½') are not word characters. Alphabetic also takes in the Other_Alphabetic
// symbols: circled and squared Latin letters.
bool IsWordChar(uint32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC:
      return true;
    case UTF8PROC_CATEGORY_CF:
      return c == 0x200C || c == 0x200D;  // Join_Control
    case UTF8PROC_CATEGORY_SO:
      return (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
             (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189);
    default:
      return false;
  }
}

// The code point ending just before `pos` (pos > 0, valid UTF-8).
uint32_t PrevCodePoint(std::string_view s, size_t* pos) {
  size_t p = *pos - 1;
  while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
  *pos = p;
  size_t q = p;
  return utf8::NextCodePoint(s, &q);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens,
                                     const std::vector<std::string>& contents) {
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (contents[i].empty()) continue;
    entries_.push_back(
        {contents[i], tokens[i].id, tokens[i].lstrip, tokens[i].rstrip, tokens[i].single_word});
  }
  std::stable_sort(entries_.begin(), entries_.end(), [](const Entry& a, const Entry& b) {
    const auto fa = static_cast<unsigned char>(a.text[0]),
               fb = static_cast<unsigned char>(b.text[0]);
    return fa != fb ? fa < fb : a.text.size() > b.text.size();
  });
  size_t e = 0;
  for (int b = 0; b <= 256; ++b) {
    while (e < entries_.size() && static_cast<unsigned char>(entries_[e].text[0]) < b) ++e;
    bucket_begin_[b] = static_cast<uint32_t>(e);
  }
}

std::vector<AddedTokenMatcher::Match> AddedTokenMatcher::FindAll(std::string_view text) const {
  std::vector<Match> matches;
  if (entries_.empty()) return matches;
  size_t prev_end = 0;  // matches may not reach back before this
  for (size_t pos = 0; pos < text.size();) {
    const auto b = static_cast<unsigned char>(text[pos]);
    const Entry* hit = nullptr;
    for (uint32_t k = bucket_begin_[b]; k < bucket_begin_[b + 1]; ++k) {
      const Entry& e = entries_[k];
      if (text.compare(pos, e.text.size(), e.text) == 0) {
        hit = &e;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos, end = pos + hit->text.size();
    if (hit->single_word) {
      size_t p = begin;
      const bool left_ok = begin == 0 || !IsWordChar(PrevCodePoint(text, &p));
      p = end;
      const bool right_ok = end == text.size() || !IsWordChar(utf8::NextCodePoint(text, &p));
      if (!left_ok || !right_ok) {  // rejected; scanning resumes after it
        pos = end;
        continue;
      }
    }
    if (hit->lstrip) {
      while (begin > prev_end) {
        size_t p = begin;
        if (!IsWhitespace(PrevCodePoint(text, &p))) break;
        begin = p;
      }
    }
    if (hit->rstrip) {
      while (end < text.size()) {
        size_t p = end;
        if (!IsWhitespace(utf8::NextCodePoint(text, &p))) break;
        end = p;
      }
    }
    matches.push_back({begin, end, hit->id});
    prev_end = pos = end;
  }
  return matches;
}

}  // namespace xrt
