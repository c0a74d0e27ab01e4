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

struct TokenizerSpec {
  // "bpe": byte-level BPE (GPT-2 / Llama 3 / Qwen2 / SmolLM2 style).
  std::string model = "bpe";
  // id -> token text as stored in tokenizer.json's vocab (byte-level alphabet,
  // e.g. "Ġthe"). Size == vocabulary size, added tokens included (an added
  // token's slot holds its content, or "" and Tokenizer::Create fills it);
  // ids with no entry hold "". Non-empty entries must be unique.
  std::vector<std::string> vocab;
  // Merge rules in rank order: {"Ġ", "t"} means "Ġ t".
  std::vector<std::pair<std::string, std::string>> merges;
  // Tokens matched verbatim before pre-tokenization (special tokens and others).
  std::vector<AddedToken> added_tokens;

  // Normalizer: "" (none) or "nfc".
  std::string normalizer;
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

  // Special ids; -1 when absent.
  int32_t bos_id = -1;
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  int32_t unk_id = -1;
  bool add_bos = false;  // prepend bos_id when encoding a prompt
  bool add_eos = false;
};

}  // namespace xrt
