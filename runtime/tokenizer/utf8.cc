#include "runtime/tokenizer/utf8.h"

namespace xrt::utf8 {

void AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t NextCodePoint(std::string_view s, size_t* pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + *pos;
  uint32_t c = p[0];
  if (c < 0x80) {
    *pos += 1;
    return c;
  }
  if (c < 0xE0) {
    *pos += 2;
    return ((c & 0x1F) << 6) | (p[1] & 0x3F);
  }
  if (c < 0xF0) {
    *pos += 3;
    return ((c & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  }
  *pos += 4;
  return ((c & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) | (p[3] & 0x3F);
}

int SequenceLength(std::string_view s, size_t pos) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  const unsigned c = p[pos];
  if (c < 0x80) return 1;
  int len;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlongs
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;  // no overlongs
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return -1;
  }
  for (int i = 1; i < len; ++i) {
    if (pos + i >= n) return 0;
    const unsigned b = p[pos + i];
    const unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) return -i;
  }
  return len;
}

bool IsValid(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const int len = SequenceLength(s, i);
    if (len <= 0) return false;
    i += len;
  }
  return true;
}

size_t AppendLossy(std::string_view bytes, bool final, std::string* out) {
  size_t i = 0, run = 0;  // [run, i) is valid text not yet appended
  while (i < bytes.size()) {
    const int len = SequenceLength(bytes, i);
    if (len > 0) {
      i += len;
      continue;
    }
    out->append(bytes.data() + run, i - run);
    if (len == 0) {
      if (!final) return i;
      out->append(kReplacement);
      return bytes.size();
    }
    out->append(kReplacement);
    i += -len;
    run = i;
  }
  out->append(bytes.data() + run, i - run);
  return i;
}

std::string Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  AppendLossy(bytes, /*final=*/true, &out);
  return out;
}

bool IsOneCharacter(std::string_view s) {
  if (s.empty() || !IsValid(s)) return false;
  size_t pos = 0;
  NextCodePoint(s, &pos);
  return pos == s.size();
}

std::string ReplaceAll(std::string_view text, std::string_view pattern, std::string_view with) {
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = text.find(pattern, pos)) != std::string_view::npos;
       pos = hit + pattern.size()) {
    out.append(text.substr(pos, hit - pos));
    out.append(with);
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace xrt::utf8
