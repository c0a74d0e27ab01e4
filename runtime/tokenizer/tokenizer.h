// Tokenizer: BPE text <-> token ids, matching Hugging Face `tokenizers` for
// byte-level (GPT-2 / Llama 3 / Qwen2 / SmolLM2) and SentencePiece-style
// (Llama 2 / Mistral 7B v0.x / TinyLlama: "▁" for spaces, byte fallback)
// tokenizer.json files.
//
// Encode: (1) added tokens are split out of the raw text (non-normalized
// ones), (2) each remaining segment is normalized on its own (NFC, then
// Prepend / Replace steps) and normalized added tokens are split out, then
// byte-level: (3) a prefix space is added to each remaining segment if
// add_prefix_space, (4) the segment is pre-tokenized (Digits and Split
// regexes), (5) each word's bytes are merged by BPE; SentencePiece style:
// (3) the Metaspace pre-tokenizer (if any) spells spaces as "▁", prepends one
// and splits, (4) each word's characters are merged by BPE (byte fallback).
// Decode, byte-level: each token's bytes (the byte-level spelling mapped back
// to bytes; added tokens spelled outside the byte-level alphabet are taken as
// their UTF-8 text) are concatenated and invalid UTF-8 is replaced with
// U+FFFD. SentencePiece style: the tokens go through the decoder steps
// (DecoderChain).
//
// Built once from a TokenizerSpec; immutable afterwards. All const methods
// are thread-safe (the BPE word cache is internally synchronized). Move-only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/tokenizer/tokenizer_spec.h"

namespace xrt {

class DecoderChain;

class Tokenizer {
 public:
  // Validates `spec`: model "bpe", byte-level options only with byte_level and
  // SentencePiece ones (byte_fallback, metaspace, decoders) only without,
  // known normalizer and decoder steps, vocabulary entries valid UTF-8 and unique,
  // added tokens with in-range unique ids consistent with the vocabulary,
  // merges naming known tokens, compilable regexes, normalizer "" or "nfc",
  // special ids in range. Errors are InvalidArgument (Unimplemented for an
  // unknown model or normalizer).
  static Expected<Tokenizer> Create(TokenizerSpec spec);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`. Invalid UTF-8 in `text` is first replaced by U+FFFD.
  // With `add_special_tokens`, bos_id is prepended if add_bos() and eos_id
  // appended if add_eos() (what tokenizer.encode(text, add_special_tokens=True)
  // does with a TemplateProcessing post-processor).
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens = true) const;

  // Text of `ids`. Out-of-range ids are ignored (as `tokenizers` does);
  // with `skip_special_tokens`, added tokens marked special are left out.
  std::string Decode(const int32_t* ids, size_t count, bool skip_special_tokens = false) const;
  std::string Decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const {
    return Decode(ids.data(), ids.size(), skip_special_tokens);
  }

  // The token as the vocabulary spells it ("Ġthe", "<|eot_id|>"); "" for an
  // out-of-range id or a hole in the vocabulary.
  const std::string& IdToPiece(int32_t id) const;
  // The raw bytes the token decodes to (" the"; for a SentencePiece-style
  // tokenizer the token alone, not at the start of a text: "▁the" -> " the",
  // "<0x0A>" -> "\n"); may be partial UTF-8.
  const std::string& TokenBytes(int32_t id) const;
  // The id of a vocabulary spelling or added token content.
  std::optional<int32_t> PieceToId(std::string_view piece) const;

  bool IsSpecial(int32_t id) const;
  int32_t vocab_size() const { return static_cast<int32_t>(spec_.vocab.size()); }
  int32_t bos_id() const { return spec_.bos_id; }
  int32_t eos_id() const { return spec_.eos_id; }
  int32_t pad_id() const { return spec_.pad_id; }
  int32_t unk_id() const { return spec_.unk_id; }
  bool add_bos() const { return spec_.add_bos; }
  bool add_eos() const { return spec_.add_eos; }
  const TokenizerSpec& spec() const { return spec_; }
  // The decoder steps of a tokenizer that is not byte-level; null for a
  // byte-level one (whose tokens decode to TokenBytes).
  const DecoderChain* decoder_chain() const;
  // The string the decoder steps receive for `id`: IdToPiece, except for a
  // normalized added token, which `tokenizers` (>= 0.23) decodes from its
  // normalized form ("<tool>" -> "▁<tool>" under a Prepend("▁") normalizer).
  const std::string& DecoderPiece(int32_t id) const;

 private:
  struct Impl;
  Tokenizer(TokenizerSpec spec, std::unique_ptr<Impl> impl);
  void EncodeRaw(std::string_view text, std::vector<int32_t>* ids) const;
  // `at_start`: the segment starts at the beginning of the input text.
  void EncodeNormalized(std::string_view text, bool at_start, std::vector<int32_t>* ids) const;
  void EncodeSegment(std::string_view text, bool at_start, std::vector<int32_t>* ids) const;
  void EncodeMetaspace(std::string_view text, bool at_start, std::vector<int32_t>* ids) const;

  TokenizerSpec spec_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xrt
