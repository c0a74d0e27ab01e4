// Human- and machine-readable views of a loaded artifact, for `xcc inspect`.
//
// Text: config, limits, a tokenizer summary (sizes and special ids, not the vocabulary),
// segments, weight totals, code modules, executables (bucket parameters, io tensors,
// io/arena sizes, command counts by kind), the LoRA config (slots, rank, target
// modules, number of targets, packed adapters with name, rank, modules and size)
// and provenance.
// JSON: the same, plus every weight, every LoRA target and every executable's
// full command list.
// Strings that are not valid UTF-8 are shown with U+FFFD in place of the bad bytes, so
// the JSON always serializes. Both read only validated data; pure functions of the artifact, safe
// to call from any thread while the Artifact lives.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/loader/artifact.h"

namespace xrt {

std::string ManifestToText(const Artifact& artifact);
nlohmann::json ManifestToJson(const Artifact& artifact);

}  // namespace xrt
