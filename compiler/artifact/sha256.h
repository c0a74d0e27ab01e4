// SHA-256 content hashes (OpenSSL EVP) for artifact provenance (Provenance.inputs[].sha256).
// Results are lowercase hex, 64 characters. Thread-safe.
#pragma once

#include <cstddef>
#include <string>

#include "runtime/base/status.h"

namespace xcc {

// Hashes the file at `path`, streaming it in chunks. Errors name the file.
xrt::Expected<std::string> Sha256File(const std::string& path);

// Hashes `size` bytes at `data`.
xrt::Expected<std::string> Sha256Bytes(const void* data, size_t size);

}  // namespace xcc
