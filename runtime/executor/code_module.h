// CodeModule: an artifact's generated dispatch code, loaded without compiling.
//
// The shared object stored in a code segment is written to an anonymous memory
// file (memfd), sealed, checked against the segment's checksum (the loader checked
// the file at Open(); this checks the very bytes that get mapped) and dlopen'ed
// from /proc/self/fd; every exported function the manifest lists is resolved up
// front. Before loading, the CPU features the
// code was compiled for are checked, so an artifact built for AVX-512 fails
// with a message on an older CPU instead of a SIGILL.
//
// Thread-safe after Load (read-only). Move-only; unloads on destruction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "schemas/abi.h"

namespace xrt {

class Artifact;

// A generated dispatch function (calling convention in schemas/abi.h).
using DispatchFn = xpk::abi::DispatchFn;

class CodeModule {
 public:
  // Loads code module `index` of `artifact`.
  static Expected<std::unique_ptr<CodeModule>> Load(const Artifact& artifact, uint32_t index);

  ~CodeModule();
  CodeModule(const CodeModule&) = delete;
  CodeModule& operator=(const CodeModule&) = delete;

  size_t num_functions() const { return functions_.size(); }
  DispatchFn function(size_t i) const { return functions_[i]; }

 private:
  CodeModule() = default;
  void* handle_ = nullptr;
  int fd_ = -1;
  std::vector<DispatchFn> functions_;
};

// Whether this CPU has `feature` (names as GCC's __builtin_cpu_supports).
// Unknown names are reported as unsupported.
bool CpuHasFeature(const std::string& feature);

}  // namespace xrt
