// The contract between xcc (which emits an artifact) and xrt (which loads and
// runs it), beyond the manifest's schema (schemas/artifact.fbs): what both
// sides must agree on is written here once and included by both, never
// re-derived from positions or assembled strings.
//
// Header-only, plain C++17; depends only on the generated schema header.
#pragma once

#include <cstdint>
#include <string>

#include "schemas/artifact_generated.h"

namespace xpk::abi {

// The name of an executable in the manifest, in metrics and in reports:
// "<kind>_<bucket letter><bucket>", e.g. "lm_step_t64" (num_tokens 64),
// "lm_logits_r16" (num_reqs 16), "vision_encode_i4" (num_images 4).
inline char BucketLetter(ExecutableKind kind) {
  switch (kind) {
    case ExecutableKind::lm_step: return 't';
    case ExecutableKind::lm_logits: return 'r';
    case ExecutableKind::vision_encode: return 'i';
  }
  return '?';
}

inline std::string ExecutableName(ExecutableKind kind, int64_t bucket) {
  return std::string(EnumNameExecutableKind(kind)) + "_" + BucketLetter(kind) +
         std::to_string(bucket);
}

}  // namespace xpk::abi
