#include "runtime/tokenizer/tokenizer.h"

#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include <utf8proc.h>

#include "runtime/tokenizer/added_token_matcher.h"
#include "runtime/tokenizer/bpe_model.h"
#include "runtime/tokenizer/byte_level.h"
#include "runtime/tokenizer/decoder_chain.h"
#include "runtime/tokenizer/pre_tokenizer.h"
#include "runtime/tokenizer/utf8.h"

namespace xrt {
namespace {

// NFC of valid UTF-8 text.
std::string Nfc(std::string_view text) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out,
                   static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) return std::string(text);  // cannot happen for valid UTF-8
  std::string result(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

// The spec's normalizer applied to one text segment (valid UTF-8).
std::string Normalize(const TokenizerSpec& spec, std::string_view text) {
  std::string out = spec.normalizer == "nfc" ? Nfc(text) : std::string(text);
  for (const NormalizerStep& step : spec.normalizer_steps) {
    if (step.type == "prepend") {
      if (!out.empty()) out.insert(0, step.content);
    } else {  // "replace"
      out = utf8::ReplaceAll(out, step.pattern, step.content);
    }
  }
  return out;
}

}  // namespace

struct Tokenizer::Impl {
  PreTokenizer pre_tokenizer;
  BpeModel bpe;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher;  // normalized == true
  std::vector<std::string> token_bytes;
  std::vector<bool> special;
  std::unordered_map<std::string_view, int32_t> piece_to_id;  // views into spec_.vocab
  bool normalizes = false;
  std::optional<DecoderChain> decoder;  // when not byte_level
  // Normalized added tokens whose normalized form differs from their content:
  // `tokenizers` (>= 0.23) decodes them from that form.
  std::unordered_map<int32_t, std::string> normalized_pieces;

  Impl(PreTokenizer p, BpeModel b) : pre_tokenizer(std::move(p)), bpe(std::move(b)) {}
};

Tokenizer::Tokenizer(TokenizerSpec spec, std::unique_ptr<Impl> impl)
    : spec_(std::move(spec)), impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Expected<Tokenizer> Tokenizer::Create(TokenizerSpec spec) {
  if (spec.model != "bpe") {
    return UnimplementedError("tokenizer model '{}' (only 'bpe' is supported)", spec.model);
  }
  if (!spec.normalizer.empty() && spec.normalizer != "nfc") {
    return UnimplementedError("normalizer '{}' (only none or 'nfc' are supported)",
                              spec.normalizer);
  }
  for (size_t i = 0; i < spec.normalizer_steps.size(); ++i) {
    const NormalizerStep& step = spec.normalizer_steps[i];
    if (step.type != "prepend" && step.type != "replace") {
      return UnimplementedError("normalizer step {}: type '{}' (only 'prepend' or 'replace')", i,
                                step.type);
    }
    if (step.type == "replace" && step.pattern.empty()) {
      return InvalidArgumentError("normalizer step {}: empty replace pattern", i);
    }
    if (!utf8::IsValid(step.pattern) || !utf8::IsValid(step.content)) {
      return InvalidArgumentError("normalizer step {}: not valid UTF-8", i);
    }
  }
  std::optional<DecoderChain> decoder;
  if (spec.byte_level) {
    if (spec.byte_fallback || spec.metaspace || !spec.decoders.empty()) {
      return InvalidArgumentError(
          "byte_fallback, metaspace and decoder steps need a tokenizer that is not byte-level");
    }
  } else {
    if (spec.add_prefix_space || spec.individual_digits || !spec.split_regexes.empty()) {
      return InvalidArgumentError(
          "add_prefix_space, digits and split regexes need a byte-level tokenizer");
    }
    if (spec.metaspace) {
      if (!utf8::IsOneCharacter(spec.metaspace_replacement)) {
        return InvalidArgumentError("metaspace replacement '{}' is not one character",
                                    spec.metaspace_replacement);
      }
      const std::string& scheme = spec.metaspace_prepend_scheme;
      if (scheme != "always" && scheme != "first" && scheme != "never") {
        return InvalidArgumentError(
            "metaspace prepend_scheme '{}' (expected always, first or never)", scheme);
      }
    }
    XRT_ASSIGN_OR_RETURN(decoder, DecoderChain::Create(spec.decoders));
  }
  const size_t n = spec.vocab.size();
  if (n == 0) return InvalidArgumentError("empty vocabulary");
  if (n > static_cast<size_t>(INT32_MAX)) return InvalidArgumentError("vocabulary too large");

  // Added tokens: ids in range and unique; their content fills vocabulary holes.
  std::vector<bool> special(n, false);
  std::unordered_set<int32_t> added_ids;
  for (const AddedToken& t : spec.added_tokens) {
    if (t.id < 0 || static_cast<size_t>(t.id) >= n) {
      return InvalidArgumentError("added token '{}': id {} outside the vocabulary [0, {})",
                                  t.content, t.id, n);
    }
    if (t.content.empty()) return InvalidArgumentError("added token {}: empty content", t.id);
    if (!utf8::IsValid(t.content)) {
      return InvalidArgumentError("added token {}: content is not valid UTF-8", t.id);
    }
    if (!added_ids.insert(t.id).second) {
      return InvalidArgumentError("added token '{}': duplicate id {}", t.content, t.id);
    }
    std::string& slot = spec.vocab[t.id];
    if (slot.empty()) {
      slot = t.content;
    } else if (slot != t.content) {
      return InvalidArgumentError("added token {}: content '{}' but the vocabulary has '{}'", t.id,
                                  t.content, slot);
    }
    special[t.id] = t.special;
  }

  std::unordered_map<std::string_view, int32_t> piece_to_id;
  piece_to_id.reserve(n);
  std::vector<std::string> token_bytes(n);
  for (size_t id = 0; id < n; ++id) {
    const std::string& piece = spec.vocab[id];
    if (piece.empty()) continue;
    if (!utf8::IsValid(piece)) {
      return InvalidArgumentError("token {}: not valid UTF-8", id);
    }
    auto [it, inserted] = piece_to_id.emplace(piece, static_cast<int32_t>(id));
    if (!inserted) {
      return InvalidArgumentError("tokens {} and {} are both '{}'", it->second, id, piece);
    }
    if (decoder) {
      token_bytes[id] = decoder->TokenText(piece);
    } else {
      std::optional<std::string> bytes = byte_level::Decode(piece);
      token_bytes[id] = bytes ? std::move(*bytes) : piece;
    }
  }

  for (const auto& [name, id] : {std::pair<const char*, int32_t>{"bos", spec.bos_id},
                                 {"eos", spec.eos_id},
                                 {"pad", spec.pad_id},
                                 {"unk", spec.unk_id}}) {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return InvalidArgumentError("{}_id {} outside the vocabulary [0, {})", name, id, n);
    }
  }
  if (spec.add_bos && spec.bos_id < 0) return InvalidArgumentError("add_bos without a bos_id");
  if (spec.add_eos && spec.eos_id < 0) return InvalidArgumentError("add_eos without an eos_id");

  XRT_ASSIGN_OR_RETURN(PreTokenizer pre,
                       PreTokenizer::Create(spec.individual_digits, spec.split_regexes));
  XRT_ASSIGN_OR_RETURN(BpeModel bpe, BpeModel::Create(spec, token_bytes));

  auto impl = std::make_unique<Impl>(std::move(pre), std::move(bpe));
  impl->normalizes = !spec.normalizer.empty() || !spec.normalizer_steps.empty();
  impl->decoder = std::move(decoder);
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_text, normalized_text;
  for (const AddedToken& t : spec.added_tokens) {
    if (t.normalized) {
      // As `tokenizers` does, a normalized token is matched in its normalized
      // form (with a Prepend normalizer, "▁" + content).
      normalized.push_back(t);
      normalized_text.push_back(Normalize(spec, t.content));
      if (normalized_text.back() != t.content) {
        impl->normalized_pieces[t.id] = normalized_text.back();
        token_bytes[t.id] = impl->decoder ? impl->decoder->TokenText(normalized_text.back())
                                          : normalized_text.back();
      }
    } else {
      raw.push_back(t);
      raw_text.push_back(t.content);
    }
  }
  impl->raw_matcher = AddedTokenMatcher(raw, raw_text);
  impl->normalized_matcher = AddedTokenMatcher(normalized, normalized_text);
  impl->token_bytes = std::move(token_bytes);
  impl->special = std::move(special);

  // Moving the vocabulary vector keeps its strings in place, so the views stay valid.
  impl->piece_to_id = std::move(piece_to_id);
  Tokenizer tokenizer(std::move(spec), std::move(impl));
  return tokenizer;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_special_tokens && spec_.add_bos) ids.push_back(spec_.bos_id);
  std::string sanitized;
  if (!utf8::IsValid(text)) {
    sanitized = utf8::Lossy(text);
    text = sanitized;
  }
  EncodeRaw(text, &ids);
  if (add_special_tokens && spec_.add_eos) ids.push_back(spec_.eos_id);
  return ids;
}

void Tokenizer::EncodeRaw(std::string_view text, std::vector<int32_t>* ids) const {
  size_t pos = 0;
  for (const AddedTokenMatcher::Match& m : impl_->raw_matcher.FindAll(text)) {
    if (m.begin > pos) EncodeNormalized(text.substr(pos, m.begin - pos), pos == 0, ids);
    ids->push_back(m.id);
    pos = m.end;
  }
  if (pos < text.size()) EncodeNormalized(text.substr(pos), pos == 0, ids);
}

void Tokenizer::EncodeNormalized(std::string_view text, bool at_start,
                                 std::vector<int32_t>* ids) const {
  std::string normalized;
  if (impl_->normalizes) {
    normalized = Normalize(spec_, text);
    text = normalized;
  }
  if (impl_->normalized_matcher.empty()) {
    EncodeSegment(text, at_start, ids);
    return;
  }
  size_t pos = 0;
  for (const AddedTokenMatcher::Match& m : impl_->normalized_matcher.FindAll(text)) {
    if (m.begin > pos) EncodeSegment(text.substr(pos, m.begin - pos), at_start && pos == 0, ids);
    ids->push_back(m.id);
    pos = m.end;
  }
  if (pos < text.size()) EncodeSegment(text.substr(pos), at_start && pos == 0, ids);
}

void Tokenizer::EncodeSegment(std::string_view text, bool at_start,
                              std::vector<int32_t>* ids) const {
  if (text.empty()) return;
  if (!spec_.byte_level) {
    EncodeMetaspace(text, at_start, ids);
    return;
  }
  std::string prefixed;
  if (spec_.add_prefix_space && text[0] != ' ') {
    prefixed.reserve(text.size() + 1);
    prefixed.push_back(' ');
    prefixed.append(text);
    text = prefixed;
  }
  std::vector<std::string_view> words;
  impl_->pre_tokenizer.Split(text, &words);
  for (std::string_view word : words) impl_->bpe.Encode(word, ids);
}

void Tokenizer::EncodeMetaspace(std::string_view text, bool at_start,
                                std::vector<int32_t>* ids) const {
  if (!spec_.metaspace) {  // no pre-tokenizer: the segment is one word
    impl_->bpe.Encode(text, ids);
    return;
  }
  const std::string& repl = spec_.metaspace_replacement;
  std::string word = utf8::ReplaceAll(text, " ", repl);
  const std::string& scheme = spec_.metaspace_prepend_scheme;
  // "first": only the segment that starts the input (not one after an added token).
  if (word.compare(0, repl.size(), repl) != 0 &&
      (scheme == "always" || (scheme == "first" && at_start))) {
    word.insert(0, repl);
  }
  if (!spec_.metaspace_split) {
    impl_->bpe.Encode(word, ids);
    return;
  }
  // Split before every replacement char (merged with what follows it).
  const std::string_view w = word;
  size_t begin = 0;
  for (size_t hit = w.find(repl, repl.size()); hit != std::string_view::npos;
       hit = w.find(repl, hit + repl.size())) {
    if (hit > begin) impl_->bpe.Encode(w.substr(begin, hit - begin), ids);
    begin = hit;
  }
  impl_->bpe.Encode(w.substr(begin), ids);
}

const std::string& Tokenizer::DecoderPiece(int32_t id) const {
  auto it = impl_->normalized_pieces.find(id);
  return it != impl_->normalized_pieces.end() ? it->second : IdToPiece(id);
}

const DecoderChain* Tokenizer::decoder_chain() const {
  return impl_->decoder ? &*impl_->decoder : nullptr;
}

std::string Tokenizer::Decode(const int32_t* ids, size_t count, bool skip_special_tokens) const {
  if (impl_->decoder) {
    DecoderChain::State state = impl_->decoder->NewState();
    std::string text;
    for (size_t i = 0; i < count; ++i) {
      const int32_t id = ids[i];
      if (id < 0 || id >= vocab_size()) continue;
      if (skip_special_tokens && impl_->special[id]) continue;
      impl_->decoder->Push(&state, DecoderPiece(id), &text);
    }
    impl_->decoder->Finish(&state, &text);
    return text;
  }
  std::string bytes;
  for (size_t i = 0; i < count; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size()) continue;
    if (skip_special_tokens && impl_->special[id]) continue;
    bytes += impl_->token_bytes[id];
  }
  if (utf8::IsValid(bytes)) return bytes;
  return utf8::Lossy(bytes);
}

const std::string& Tokenizer::IdToPiece(int32_t id) const {
  static const std::string k_empty;
  return id >= 0 && id < vocab_size() ? spec_.vocab[id] : k_empty;
}

const std::string& Tokenizer::TokenBytes(int32_t id) const {
  static const std::string k_empty;
  return id >= 0 && id < vocab_size() ? impl_->token_bytes[id] : k_empty;
}

std::optional<int32_t> Tokenizer::PieceToId(std::string_view piece) const {
  auto it = impl_->piece_to_id.find(piece);
  if (it == impl_->piece_to_id.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}

}  // namespace xrt
