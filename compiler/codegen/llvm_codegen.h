// LLVM code generation: the LLVM-dialect dispatch module -> one shared object.
#pragma once

#include <string>
#include <vector>

#include "mlir/IR/BuiltinOps.h"
#include "runtime/base/status.h"

namespace xcc {

struct CodegenOptions {
  // "host" (this machine's CPU and features), "x86-64-v3", "x86-64-v4", or any
  // LLVM x86 CPU name.
  std::string target = "host";
  // Path of ld.lld; empty: the one found at build time, then PATH.
  std::string lld_path;
};

struct CodegenResult {
  std::string shared_object;  // ELF bytes
  std::string triple;
  std::string cpu;
  std::string features;                        // the LLVM feature string used
  std::vector<std::string> required_features;  // CPU features the runtime must have
};

// True if the CPU of `target` (CodegenOptions::target) has `feature` (an LLVM
// x86 feature name such as "amx-bf16").
xrt::Expected<bool> TargetHasFeature(const std::string& target, const std::string& feature);

// Translates `module` (LLVM dialect) to LLVM IR, optimizes it at O3 for the
// target, emits an object file and links it with ld.lld into a shared object.
xrt::Expected<CodegenResult> GenerateSharedObject(mlir::ModuleOp module,
                                                  const CodegenOptions& options);

}  // namespace xcc
