// StreamingDetokenizer: turns generated token ids, one at a time, into text
// that is always complete, valid UTF-8. A token that ends inside a multi-byte
// character is held back until the character completes; bytes that can never
// become valid UTF-8 are emitted as U+FFFD right away, and Flush() turns a
// still incomplete tail into U+FFFD. The concatenation of everything emitted
// equals Tokenizer::Decode of all the ids.
//
// For a SentencePiece-style tokenizer the tokens go through its DecoderChain
// as Decode does (the leading space of the text is stripped once, at the
// start; a run of "<0xNN>" byte tokens is held until the run ends or is known
// to be invalid UTF-8, since one invalid byte turns the whole run into U+FFFDs).
//
// Holds a pointer to the Tokenizer, which must outlive it. One per stream;
// thread-compatible (externally synchronized).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tokenizer/decoder_chain.h"
#include "runtime/tokenizer/tokenizer.h"

namespace xrt {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens = false)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
    if (const DecoderChain* chain = tokenizer_->decoder_chain()) chain_state_ = chain->NewState();
  }

  // Adds `id`; returns the text it completes (often empty for partial
  // characters).
  std::string Push(int32_t id);

  // Ends the stream: returns U+FFFD if bytes of an incomplete character are
  // pending (for a SentencePiece-style tokenizer: the decoding of the pending
  // byte tokens), else "". The detokenizer is then empty and can be reused.
  std::string Flush();

  // Bytes held back, waiting for the rest of a character (0..3; byte-level
  // tokenizers only).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
  DecoderChain::State chain_state_;  // SentencePiece style
};

}  // namespace xrt
