// DecoderChain: the decoder steps of a SentencePiece-style tokenizer.json
// (Replace, ByteFallback, Fuse, Strip, Metaspace; see DecoderStep in
// tokenizer_spec.h), run as Hugging Face `tokenizers` runs them over a list of
// token strings, but one token at a time: each Push returns the text that no
// later token can change any more. Tokenizer::Decode pushes every token and
// finishes; StreamingDetokenizer pushes as tokens are generated. Both use the
// same code, so streamed text always equals Decode.
//
// Held back until later tokens decide it: a run of byte tokens ("<0xNN>") that
// is valid UTF-8 so far (the run becomes one U+FFFD per byte if any byte of it
// turns out invalid, so nothing of it is emitted until the run ends, or until
// it is known to be invalid, from when on every byte is one U+FFFD at once).
//
// Immutable after Create; thread-safe. The per-stream State is
// thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/tokenizer/tokenizer_spec.h"

namespace xrt {

class DecoderChain {
 public:
  // Validates the steps: known types; "replace" with a non-empty pattern (one
  // character if after "fuse"); "strip" and "metaspace" with a one-character
  // `content`; "byte_fallback" before any "fuse"; metaspace prepend_scheme
  // "always", "first" or "never". Errors are InvalidArgument naming the step.
  static Expected<DecoderChain> Create(const std::vector<DecoderStep>& steps);

  // Decoding state of one stream.
  class State {
   public:
    State() = default;

   private:
    friend class DecoderChain;
    struct Step {
      int64_t received = 0;      // tokens this step has seen
      std::string bytes;         // byte_fallback: the pending run
      bool invalid_run = false;  // byte_fallback: the pending run is not UTF-8
      int32_t stripped = 0;      // strip after fuse: chars removed so far
      bool strip_done = false;   // strip after fuse: a non-stripped char was seen
    };
    std::vector<Step> steps_;
  };

  State NewState() const;

  // Feeds one token string (its vocabulary spelling or added-token content);
  // appends the text it settles to `out`.
  void Push(State* state, std::string_view token, std::string* out) const;
  // Ends the stream: appends what was held back. The state is then reset.
  void Finish(State* state, std::string* out) const;

  // What `token` decodes to on its own, not at the start of a text (per-token
  // replacements and metaspace; a byte token is its byte). For logprobs.
  std::string TokenText(std::string_view token) const;

  // The byte of a ByteFallback token ("<0x0A>" -> 10), or -1. Accepts what
  // `tokenizers` accepts: two hex digits of either case, or '+' and one digit.
  static int ParseByteToken(std::string_view token);

 private:
  struct Step {
    DecoderStep spec;
    bool after_fuse = false;
    bool drop_first = false;  // metaspace: prepend_scheme != "never"
  };
  void Feed(State* state, size_t step, std::string text, std::string* out) const;
  void FlushBytes(State* state, size_t step, std::string* out) const;

  std::vector<Step> steps_;
};

}  // namespace xrt
