#include "runtime/tokenizer/tokenizer.h"

#include <cstdlib>
#include <unordered_map>
#include <unordered_set>

#include <utf8proc.h>

#include "runtime/tokenizer/added_token_matcher.h"
#include "runtime/tokenizer/bpe_model.h"
#include "runtime/tokenizer/byte_level.h"
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

}  // namespace

struct Tokenizer::Impl {
  PreTokenizer pre_tokenizer;
  BpeModel bpe;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized == false
  AddedTokenMatcher normalized_matcher;  // normalized == true
  std::vector<std::string> token_bytes;
  std::vector<bool> special;
  std::unordered_map<std::string_view, int32_t> piece_to_id;  // views into spec_.vocab
  bool nfc = false;

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
    std::optional<std::string> bytes = byte_level::Decode(piece);
    token_bytes[id] = bytes ? std::move(*bytes) : piece;
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
  impl->nfc = spec.normalizer == "nfc";
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_text, normalized_text;
  for (const AddedToken& t : spec.added_tokens) {
    if (t.normalized) {
      normalized.push_back(t);
      normalized_text.push_back(impl->nfc ? Nfc(t.content) : t.content);
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
    if (m.begin > pos) EncodeNormalized(text.substr(pos, m.begin - pos), ids);
    ids->push_back(m.id);
    pos = m.end;
  }
  if (pos < text.size()) EncodeNormalized(text.substr(pos), ids);
}

void Tokenizer::EncodeNormalized(std::string_view text, std::vector<int32_t>* ids) const {
  std::string normalized;
  if (impl_->nfc) {
    normalized = Nfc(text);
    text = normalized;
  }
  if (impl_->normalized_matcher.empty()) {
    EncodeSegment(text, ids);
    return;
  }
  size_t pos = 0;
  for (const AddedTokenMatcher::Match& m : impl_->normalized_matcher.FindAll(text)) {
    if (m.begin > pos) EncodeSegment(text.substr(pos, m.begin - pos), ids);
    ids->push_back(m.id);
    pos = m.end;
  }
  if (pos < text.size()) EncodeSegment(text.substr(pos), ids);
}

void Tokenizer::EncodeSegment(std::string_view text, std::vector<int32_t>* ids) const {
  if (text.empty()) return;
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

std::string Tokenizer::Decode(const int32_t* ids, size_t count, bool skip_special_tokens) const {
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
