#include "runtime/tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "runtime/tokenizer/utf8.h"

namespace xrt {

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

namespace {

struct MatchDataDeleter {
  void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

std::string Pcre2Message(int error_code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(error_code, buffer, sizeof(buffer));
  return n < 0 ? "unknown PCRE2 error" : std::string(reinterpret_cast<char*>(buffer), n);
}

}  // namespace

PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;
PreTokenizer::~PreTokenizer() = default;

Expected<PreTokenizer> PreTokenizer::Create(bool individual_digits,
                                            const std::vector<std::string>& regexes) {
  PreTokenizer pre;
  std::vector<std::string> patterns;
  if (individual_digits) patterns.push_back("\\p{N}");
  patterns.insert(patterns.end(), regexes.begin(), regexes.end());
  for (const std::string& pattern : patterns) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    auto regex = std::make_unique<Regex>();
    regex->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                PCRE2_UTF | PCRE2_UCP, &error_code, &error_offset, nullptr);
    if (regex->code == nullptr) {
      return InvalidArgumentError("pre-tokenizer regex '{}': {} at offset {}", pattern,
                                  Pcre2Message(error_code), error_offset);
    }
    // Without a JIT (or if it fails) pcre2_match falls back to the interpreter.
    (void)pcre2_jit_compile(regex->code, PCRE2_JIT_COMPLETE);
    pre.steps_.push_back(std::move(regex));
  }
  return pre;
}

void PreTokenizer::Split(std::string_view text, std::vector<std::string_view>* words) const {
  if (text.empty()) return;
  std::vector<std::string_view> pieces{text}, next;
  std::unique_ptr<pcre2_match_data, MatchDataDeleter> md(pcre2_match_data_create(1, nullptr));
  for (const auto& step : steps_) {
    next.clear();
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t emitted = 0, start = 0;
      while (start < piece.size()) {
        const int rc = pcre2_match(step->code, subject, piece.size(), start, PCRE2_NO_UTF_CHECK,
                                   md.get(), nullptr);
        if (rc < 0) break;  // no (more) matches
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t m_begin = ov[0], m_end = ov[1];
        if (m_end == m_begin) {  // empty match: not a piece; step over one character
          size_t pos = m_begin;
          if (pos >= piece.size()) break;
          utf8::NextCodePoint(piece, &pos);
          start = pos;
          continue;
        }
        if (m_begin > emitted) next.push_back(piece.substr(emitted, m_begin - emitted));
        next.push_back(piece.substr(m_begin, m_end - m_begin));
        emitted = start = m_end;
      }
      if (emitted < piece.size()) next.push_back(piece.substr(emitted));
    }
    pieces.swap(next);
  }
  words->insert(words->end(), pieces.begin(), pieces.end());
}

}  // namespace xrt
