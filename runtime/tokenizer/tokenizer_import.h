// Building a TokenizerSpec from the files models ship with.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/tokenizer/tokenizer_spec.h"

namespace xrt {

// Split regexes of well-known byte-level BPE tokenizers, as their
// tokenizer.json files spell them.
// GPT-2: the ByteLevel pre-tokenizer's own regex (use_regex = true).
inline constexpr const char* kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Llama 3 (also tiktoken's cl100k_base).
inline constexpr const char* kLlama3SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2: as Llama 3 but one digit at a time.
inline constexpr const char* kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Reads a Hugging Face tokenizer.json (model.type "BPE", byte-level or
// SentencePiece style) and, if `tokenizer_config_path` is non-empty, its
// tokenizer_config.json (bos/eos tokens, add_bos_token, added_tokens_decoder).
// Errors name the file and the field.
//
// Supported: model BPE (ignore_merges, unk_token, fuse_unk, byte_fallback;
// not dropout or subword affixes); normalizer null, NFC, Prepend, Replace
// (String pattern), or a Sequence of those (NFC first). Byte-level style:
// pre_tokenizer a ByteLevel, optionally preceded (in a Sequence) by
// Split(Regex|String, Isolated, invert false) and Digits steps,
// add_prefix_space only when ByteLevel is the first step, decoder ByteLevel,
// no byte_fallback. SentencePiece style (Llama 2, Mistral 7B v0.x):
// pre_tokenizer null or a single Metaspace (prepend_scheme always | first |
// never, or the older add_prefix_space; split), decoder a Sequence of (or a
// single) Replace (String pattern), ByteFallback, Fuse, Strip (stop 0),
// Metaspace, with ByteFallback before Fuse and only one-character Replace
// patterns after it (see DecoderChain). post_processor
// null, ByteLevel, TemplateProcessing whose "single" is
// [SpecialToken?, $A, SpecialToken?] (giving bos/add_bos and eos/add_eos),
// or a Sequence of those. Anything else is Unimplemented
// ("tokenizer.json: field 'model.type': unsupported 'Unigram'").
// tokenizer_config.json's add_bos_token / add_eos_token, when present,
// override what the post-processor implies. truncation/padding are ignored.
Expected<TokenizerSpec> LoadTokenizerJson(const std::string& tokenizer_json_path,
                                          const std::string& tokenizer_config_path);

// The tokenizer part of a GGUF file's metadata (tokenizer.ggml.*).
struct GgufTokenizerMetadata {
  std::string model;                // tokenizer.ggml.model, e.g. "gpt2"
  std::string pre;                  // tokenizer.ggml.pre, e.g. "smollm", "llama-bpe", "qwen2"
  std::vector<std::string> tokens;  // tokenizer.ggml.tokens
  std::vector<int32_t>
      token_types;  // tokenizer.ggml.token_type (1 normal, 3 control, 4 user defined, ...)
  std::vector<std::string> merges;  // tokenizer.ggml.merges, "a b"
  int32_t bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1;
  std::optional<bool> add_bos;  // absent: what llama.cpp assumes for `pre` (see below)
  bool add_eos = false;
  bool add_space_prefix = false;
};

// Maps GGUF tokenizer metadata to a spec; the pre-tokenizer name selects the
// split regexes the same way the model's original tokenizer.json did.
// Unknown `model` or `pre` values are an Unimplemented error naming the value.
// Supported `pre`: "default"/"gpt2"/"" (GPT-2 regex), "llama-bpe"/"llama3"/
// "llama-v3"/"smaug-bpe" (Llama 3), "qwen2"/"deepseek-r1-qwen" (Qwen2),
// "smollm"/"starcoder" (individual digits, then the GPT-2 regex).
// As in llama.cpp, the Llama 3 names ("llama-bpe", "llama3", "llama-v3") imply
// BPE ignore_merges and, when add_bos is absent, add_bos = true; every other
// name implies add_bos = false. "qwen2" gets the NFC normalizer of Qwen2's
// tokenizer.json. Control tokens (type 3) become special added tokens,
// user-defined ones (type 4) non-special added tokens, whatever their text.
Expected<TokenizerSpec> TokenizerSpecFromGguf(const GgufTokenizerMetadata& meta);

}  // namespace xrt
