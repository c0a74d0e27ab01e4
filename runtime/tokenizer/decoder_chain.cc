#include "runtime/tokenizer/decoder_chain.h"

#include "runtime/tokenizer/utf8.h"

namespace xrt {
namespace {

// True once `bytes` holds an invalid UTF-8 subpart (not merely a truncated
// last character): no continuation can make the run valid.
bool HasInvalidSubpart(std::string_view bytes) {
  for (size_t pos = 0; pos < bytes.size();) {
    const int len = utf8::SequenceLength(bytes, pos);
    if (len < 0) return true;
    if (len == 0) return false;
    pos += static_cast<size_t>(len);
  }
  return false;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

int DecoderChain::ParseByteToken(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return -1;
  // u8::from_str_radix(token[3..5], 16): an optional '+', then hex digits.
  if (token[3] == '+') return HexDigit(token[4]);
  const int hi = HexDigit(token[3]), lo = HexDigit(token[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

Expected<DecoderChain> DecoderChain::Create(const std::vector<DecoderStep>& steps) {
  DecoderChain chain;
  bool fused = false;
  for (size_t i = 0; i < steps.size(); ++i) {
    const DecoderStep& s = steps[i];
    Step step{s, fused, false};
    if (s.type == "replace") {
      if (s.pattern.empty())
        return InvalidArgumentError("decoder step {}: empty replace pattern", i);
      if (fused && !utf8::IsOneCharacter(s.pattern)) {
        return InvalidArgumentError(
            "decoder step {}: replace of '{}' after fuse (only one character is supported there)",
            i, s.pattern);
      }
    } else if (s.type == "byte_fallback") {
      if (fused) return InvalidArgumentError("decoder step {}: byte_fallback after fuse", i);
    } else if (s.type == "fuse") {
      fused = true;
    } else if (s.type == "strip" || s.type == "metaspace") {
      if (!utf8::IsOneCharacter(s.content)) {
        return InvalidArgumentError("decoder step {}: {} content '{}' is not one character", i,
                                    s.type, s.content);
      }
      if (s.type == "strip" && s.start < 0) {
        return InvalidArgumentError("decoder step {}: strip start {} is negative", i, s.start);
      }
      if (s.type == "metaspace") {
        if (s.prepend_scheme != "always" && s.prepend_scheme != "first" &&
            s.prepend_scheme != "never") {
          return InvalidArgumentError("decoder step {}: metaspace prepend_scheme '{}'", i,
                                      s.prepend_scheme);
        }
        step.drop_first = s.prepend_scheme != "never";
      }
    } else {
      return InvalidArgumentError("decoder step {}: unknown type '{}'", i, s.type);
    }
    chain.steps_.push_back(std::move(step));
  }
  return chain;
}

DecoderChain::State DecoderChain::NewState() const {
  State state;
  state.steps_.resize(steps_.size());
  return state;
}

void DecoderChain::Push(State* state, std::string_view token, std::string* out) const {
  if (state->steps_.size() != steps_.size()) state->steps_.resize(steps_.size());
  Feed(state, 0, std::string(token), out);
}

void DecoderChain::Finish(State* state, std::string* out) const {
  if (state->steps_.size() != steps_.size()) state->steps_.resize(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    if (steps_[i].spec.type == "byte_fallback") FlushBytes(state, i, out);
  }
  *state = NewState();
}

void DecoderChain::FlushBytes(State* state, size_t step, std::string* out) const {
  State::Step& ss = state->steps_[step];
  std::string bytes = std::move(ss.bytes);
  ss.bytes.clear();
  ss.invalid_run = false;
  if (bytes.empty()) return;
  if (utf8::IsValid(bytes)) {
    Feed(state, step + 1, std::move(bytes), out);
    return;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    Feed(state, step + 1, std::string(utf8::kReplacement), out);
  }
}

void DecoderChain::Feed(State* state, size_t step, std::string text, std::string* out) const {
  if (step == steps_.size()) {
    out->append(text);
    return;
  }
  const Step& st = steps_[step];
  State::Step& ss = state->steps_[step];
  // After "fuse" every piece belongs to the single, first token.
  const bool first = st.after_fuse || ss.received == 0;
  ++ss.received;
  const std::string& type = st.spec.type;
  if (type == "replace") {
    text = utf8::ReplaceAll(text, st.spec.pattern, st.spec.content);
  } else if (type == "metaspace") {
    text = utf8::ReplaceAll(text, st.spec.content, first && st.drop_first ? "" : " ");
  } else if (type == "strip") {
    const std::string_view c = st.spec.content;
    size_t cut = 0;
    int32_t stripped = st.after_fuse ? ss.stripped : 0;
    const bool done = st.after_fuse && ss.strip_done;
    while (!done && stripped < st.spec.start && text.compare(cut, c.size(), c) == 0) {
      cut += c.size();
      ++stripped;
    }
    if (st.after_fuse) {
      ss.stripped = stripped;
      if (cut < text.size() || stripped >= st.spec.start) ss.strip_done = true;
    }
    text.erase(0, cut);
  } else if (type == "byte_fallback") {
    const int byte = ParseByteToken(text);
    if (byte < 0) {
      FlushBytes(state, step, out);
    } else if (ss.invalid_run) {
      text = std::string(utf8::kReplacement);
    } else {
      ss.bytes.push_back(static_cast<char>(byte));
      if (!HasInvalidSubpart(ss.bytes)) return;  // held until the run ends
      const size_t n = ss.bytes.size();
      ss.bytes.clear();
      ss.invalid_run = true;
      for (size_t i = 0; i < n; ++i) {
        Feed(state, step + 1, std::string(utf8::kReplacement), out);
      }
      return;
    }
  }
  // "fuse": nothing to do here; the steps after it treat every piece as part
  // of one token.
  Feed(state, step + 1, std::move(text), out);
}

std::string DecoderChain::TokenText(std::string_view token) const {
  std::string text(token);
  for (const Step& st : steps_) {
    const std::string& type = st.spec.type;
    if (type == "replace") {
      text = utf8::ReplaceAll(text, st.spec.pattern, st.spec.content);
    } else if (type == "metaspace") {
      text = utf8::ReplaceAll(text, st.spec.content, " ");
    } else if (type == "byte_fallback") {
      const int byte = ParseByteToken(text);
      if (byte >= 0) return std::string(1, static_cast<char>(byte));
    }
  }
  return text;
}

}  // namespace xrt
