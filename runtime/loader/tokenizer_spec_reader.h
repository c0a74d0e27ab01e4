// Reading the manifest's tokenizer table (xpk::Tokenizer) into an xrt::TokenizerSpec.
// The write direction lives in the compiler (compiler/artifact/tokenizer_spec_writer.h).
#pragma once

#include <string>

#include "runtime/base/status.h"
#include "runtime/tokenizer/tokenizer_spec.h"

namespace xpk {
struct Tokenizer;
}  // namespace xpk

namespace xrt {

// Checks what a TokenizerSpec needs without copying: model name present, non-empty
// vocabulary, every merge has both sides, every added token has content and an id in
// [0, id_limit), special ids in [-1, id_limit). id_limit is the larger of the vocabulary
// size and `config_vocab_size` (the model's embedding rows may exceed the vocab list).
// Errors are "tokenizer: ..." (the caller adds the file name).
Status ValidateManifestTokenizer(const xpk::Tokenizer& t, int64_t config_vocab_size);

// Validates (as above) and converts.
Expected<TokenizerSpec> TokenizerSpecFromManifest(const xpk::Tokenizer& t,
                                                  int64_t config_vocab_size);

}  // namespace xrt
