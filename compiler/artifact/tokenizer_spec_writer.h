// Writing an xrt::TokenizerSpec into the manifest (xpk::Tokenizer). The read direction
// is runtime/loader/tokenizer_spec_reader.h; the two round-trip exactly.
#pragma once

#include <flatbuffers/flatbuffers.h>

#include "runtime/tokenizer/tokenizer_spec.h"
#include "schemas/artifact_generated.h"

namespace xcc {

// Serializes `spec` into `fbb` (strings and vectors first, then the table) and returns
// the table for Manifest.tokenizer. Deterministic: same spec, same bytes.
flatbuffers::Offset<xpk::Tokenizer> BuildTokenizer(flatbuffers::FlatBufferBuilder& fbb,
                                                   const xrt::TokenizerSpec& spec);

}  // namespace xcc
