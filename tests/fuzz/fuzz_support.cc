#include "tests/fuzz/fuzz_support.h"

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "runtime/tokenizer/streaming_detokenizer.h"
#include "runtime/tokenizer/tokenizer.h"

namespace xrt {
namespace fuzz {

void CheckFailed(const char* cond, const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %s: %s\n", file, line, cond, message.c_str());
  std::abort();
}

void CheckNotInternal(const Status& status) {
  XCC_FUZZ_CHECK(status.code() != StatusCode::kInternal, status.ToString());
}

void ExerciseTokenizer(TokenizerSpec spec, std::string_view text) {
  Expected<Tokenizer> created = Tokenizer::Create(std::move(spec));
  CheckNotInternal(created.status());
  if (!created.ok()) return;
  const Tokenizer& tok = *created;
  for (bool add_special : {true, false}) {
    const std::vector<int32_t> ids = tok.Encode(text, add_special);
    for (int32_t id : ids) {
      XCC_FUZZ_CHECK(id >= 0 && id < tok.vocab_size(), "Encode gave id " + std::to_string(id) +
                                                           " outside the vocabulary of " +
                                                           std::to_string(tok.vocab_size()));
      (void)tok.IdToPiece(id);
    }
    for (bool skip_special : {false, true}) {
      const std::string decoded = tok.Decode(ids, skip_special);
      StreamingDetokenizer stream(&tok, skip_special);
      std::string streamed;
      for (int32_t id : ids) streamed += stream.Push(id);
      streamed += stream.Flush();
      XCC_FUZZ_CHECK(streamed == decoded,
                     "streamed text differs from Decode: '" + streamed + "' vs '" + decoded + "'");
    }
  }
}

}  // namespace fuzz
}  // namespace xrt
