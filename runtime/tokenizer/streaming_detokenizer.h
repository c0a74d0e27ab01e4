// StreamingDetokenizer: turns generated token ids, one at a time, into text
// that is always complete, valid UTF-8. A token that ends inside a multi-byte
// character is held back until the character completes; bytes that can never
// become valid UTF-8 are emitted as U+FFFD right away, and Flush() turns a
// still incomplete tail into U+FFFD. The concatenation of everything emitted
// equals Tokenizer::Decode of all the ids.
//
// Holds a pointer to the Tokenizer, which must outlive it. One per stream;
// thread-compatible (externally synchronized).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tokenizer/tokenizer.h"

namespace xrt {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer* tokenizer, bool skip_special_tokens = false)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // Adds `id`; returns the text it completes (often empty for partial
  // characters).
  std::string Push(int32_t id);

  // Ends the stream: returns U+FFFD if bytes of an incomplete character are
  // pending, else "". The detokenizer is then empty and can be reused.
  std::string Flush();

  // Bytes held back, waiting for the rest of a character (0..3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace xrt
