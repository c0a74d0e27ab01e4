// TokenizerSpec: everything needed to build a Tokenizer, independent of where
// it came from (tokenizer.json, GGUF metadata, or an artifact's manifest).
// Plain data; the compiler fills it from a frontend and serializes it into the
// artifact, the runtime deserializes it and builds a Tokenizer from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace xrt {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;  // skipped by Decode(skip_special=true)
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched after normalization (rare for special tokens)
  bool single_word = false;
};

// One step of a tokenizer.json normalizer Sequence after NFC (SentencePiece
// style): "prepend" puts `content` before every non-empty text segment;
// "replace" replaces every occurrence of the literal `pattern` with `content`.
struct NormalizerStep {
  std::string type;
  std::string pattern;
  std::string content;
};

// One step of a tokenizer.json decoder Sequence (SentencePiece style), run in
// order as Hugging Face `tokenizers` runs them over the list of token strings:
//   "replace"        per token: every literal `pattern` -> `content`;
//   "byte_fallback"  runs of "<0xNN>" tokens -> the UTF-8 text of their bytes,
//                    or one U+FFFD per byte if the run is not valid UTF-8;
//   "fuse"           joins all tokens into one;
//   "strip"          per token: removes up to `start` leading `content` chars;
//   "metaspace"      per token: `content` (the replacement char) -> " ", except
//                    that in the first token it is removed when
//                    `prepend_scheme` is not "never".
struct DecoderStep {
  std::string type;
  std::string pattern;
  std::string content;
  int32_t start = 0;
  std::string prepend_scheme;
};

struct TokenizerSpec {
  // "bpe": BPE, byte-level (GPT-2 / Llama 3 / Qwen2 / SmolLM2 style) or, with
  // byte_level false, on characters (SentencePiece style: Llama 2, Mistral 7B
  // v0.x, TinyLlama, Vicuna).
  std::string model = "bpe";
  // true: the text's bytes are spelled in the byte-level alphabet before BPE
  // (ByteLevel pre-tokenizer and decoder). false: BPE starts from the
  // characters of each word, and `decoders` turns tokens back into text.
  bool byte_level = true;
  // id -> token text as stored in tokenizer.json's vocab (byte-level alphabet,
  // e.g. "Ġthe", or the text itself, e.g. "▁the", when not byte_level). Size == vocabulary size,
  // added tokens included (an added token's slot holds its content, or "" and Tokenizer::Create
  // fills it); ids with no entry hold "". Non-empty entries must be unique.
  std::vector<std::string> vocab;
  // Merge rules in rank order: {"Ġ", "t"} means "Ġ t".
  std::vector<std::pair<std::string, std::string>> merges;
  // Tokens matched verbatim before pre-tokenization (special tokens and others).
  std::vector<AddedToken> added_tokens;

  // Normalizer: "" (none) or "nfc", then `normalizer_steps` in order.
  std::string normalizer;
  std::vector<NormalizerStep> normalizer_steps;
  // Pre-tokenizer, applied in order: each regex (PCRE2 syntax, as in
  // tokenizer.json's Split pre-tokenizer / the ByteLevel default) splits the
  // pieces produced so far, keeping the matches ("isolated" behaviour).
  // tokenizer.json's Digits steps are stored here too, in sequence order, as
  // "\p{N}" (individual) or "\p{N}+".
  std::vector<std::string> split_regexes;
  bool individual_digits = false;  // Digits(individual_digits=true) before the regexes
  // ByteLevel(add_prefix_space): a space is prepended to each text segment
  // between added tokens (after normalization, before any splitting) unless it
  // already starts with one.
  bool add_prefix_space = false;
  bool ignore_merges = false;  // BPE(ignore_merges): whole-word vocab hits skip merging
  // BPE(byte_fallback): a character with no token becomes the tokens "<0xNN>"
  // of its UTF-8 bytes (if all exist; else unk). Only when not byte_level.
  bool byte_fallback = false;
  bool fuse_unk = false;  // BPE(fuse_unk): consecutive unknown pieces give one unk_id

  // Metaspace pre-tokenizer (only when not byte_level): spaces become
  // `metaspace_replacement`; the replacement is prepended to a segment not
  // starting with it ("always"), only to the segment at the start of the input
  // ("first"), or never ("never"); with `metaspace_split` each replacement
  // char starts a new word.
  bool metaspace = false;
  std::string metaspace_replacement;
  std::string metaspace_prepend_scheme;
  bool metaspace_split = true;

  // Decoder steps when not byte_level (see DecoderStep).
  std::vector<DecoderStep> decoders;

  // Special ids; -1 when absent.
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  bool add_bos = false;  // prepend bos_id when encoding a prompt
  bool add_eos = false;
};

}  // namespace xrt
