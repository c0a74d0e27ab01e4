#include "compiler/codegen/llvm_codegen.h"

#include <algorithm>

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/X86TargetParser.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"

#ifndef XCC_LLD_PATH
#define XCC_LLD_PATH ""
#endif

namespace xcc {
namespace {

using xrt::Expected;

// CPU features the runtime can check (names as GCC's __builtin_cpu_supports spells them).
constexpr const char* kCheckableFeatures[] = {
    "sse4.2",   "avx",      "avx2",       "fma",        "f16c",
    "bmi",      "bmi2",     "avx512f",    "avx512bw",   "avx512dq",
    "avx512vl", "avx512cd", "avx512vnni", "avx512bf16", "avx512fp16",
};

bool IsCheckable(llvm::StringRef f) {
  return std::any_of(std::begin(kCheckableFeatures), std::end(kCheckableFeatures),
                     [&](const char* c) { return f == c; });
}

struct TargetChoice {
  std::string cpu;
  std::string features;
  std::vector<std::string> required;
  std::vector<std::string> enabled;  // every feature the CPU has (LLVM names)
};

Expected<TargetChoice> ChooseTarget(const std::string& target) {
  TargetChoice t;
  if (target == "host") {
    t.cpu = llvm::sys::getHostCPUName().str();
    std::vector<std::string> feats;
    for (const auto& kv : llvm::sys::getHostCPUFeatures()) {
      feats.push_back((kv.second ? "+" : "-") + kv.first().str());
      if (kv.second) t.enabled.push_back(kv.first().str());
      if (kv.second && IsCheckable(kv.first())) t.required.push_back(kv.first().str());
    }
    std::sort(feats.begin(), feats.end());
    t.features = llvm::join(feats, ",");
  } else {
    t.cpu = target;
    llvm::SmallVector<llvm::StringRef, 64> feats;
    llvm::X86::getFeaturesForCPU(target, feats, /*NeedPlus=*/false);
    if (feats.empty() && target != "x86-64")
      return xrt::InvalidArgumentError(
          "--target '{}': not a known x86 CPU (use host, x86-64-v3, x86-64-v4 or an LLVM "
          "CPU name such as sapphirerapids)",
          target);
    for (llvm::StringRef f : feats) {
      t.enabled.push_back(f.str());
      if (IsCheckable(f)) t.required.push_back(f.str());
    }
  }
  std::sort(t.required.begin(), t.required.end());
  t.required.erase(std::unique(t.required.begin(), t.required.end()), t.required.end());
  return t;
}

std::string FindLld(const std::string& configured) {
  if (!configured.empty()) return configured;
  if (*XCC_LLD_PATH && llvm::sys::fs::can_execute(XCC_LLD_PATH)) return XCC_LLD_PATH;
  for (const char* name : {"ld.lld-19", "ld.lld"}) {
    if (auto p = llvm::sys::findProgramByName(name)) return *p;
  }
  return "";
}

void Optimize(llvm::Module& m, llvm::TargetMachine* tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PipelineTuningOptions pto;
  pto.LoopVectorization = true;
  pto.SLPVectorization = true;
  llvm::PassBuilder pb(tm, pto);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(m, mam);
}

}  // namespace

Expected<bool> TargetHasFeature(const std::string& target, const std::string& feature) {
  XRT_ASSIGN_OR_RETURN(TargetChoice choice, ChooseTarget(target));
  return std::find(choice.enabled.begin(), choice.enabled.end(), feature) != choice.enabled.end();
}

Expected<CodegenResult> GenerateSharedObject(mlir::ModuleOp module, const CodegenOptions& options) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();

  XRT_ASSIGN_OR_RETURN(TargetChoice choice, ChooseTarget(options.target));
  CodegenResult result;
  result.triple = llvm::sys::getDefaultTargetTriple();
  result.cpu = choice.cpu;
  result.features = choice.features;
  result.required_features = choice.required;

  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(result.triple, error);
  if (!target) return xrt::InternalError("no LLVM target for '{}': {}", result.triple, error);
  llvm::TargetOptions target_options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      result.triple, result.cpu, result.features, target_options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!tm) return xrt::InternalError("cannot create a target machine for cpu '{}'", result.cpu);

  mlir::registerBuiltinDialectTranslation(*module.getContext());
  mlir::registerLLVMDialectTranslation(*module.getContext());
  llvm::LLVMContext llvm_context;
  std::unique_ptr<llvm::Module> llvm_module =
      mlir::translateModuleToLLVMIR(module, llvm_context, "xcc_dispatches");
  if (!llvm_module)
    return xrt::InternalError("translation of the dispatch module to LLVM IR failed");
  llvm_module->setDataLayout(tm->createDataLayout());
  llvm_module->setTargetTriple(result.triple);
  for (llvm::Function& f : *llvm_module) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("target-cpu", result.cpu);
    if (!result.features.empty()) f.addFnAttr("target-features", result.features);
  }
  Optimize(*llvm_module, tm.get());

  llvm::SmallVector<char, 0> object;
  {
    llvm::raw_svector_ostream os(object);
    llvm::legacy::PassManager pm;
    if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
      return xrt::InternalError("the target cannot emit object files");
    pm.run(*llvm_module);
  }

  // Link with lld into a shared object (in a private temp directory).
  std::string lld = FindLld(options.lld_path);
  if (lld.empty()) return xrt::NotFoundError("ld.lld not found (install lld-19, or pass its path)");
  llvm::SmallString<128> dir;
  if (auto ec = llvm::sys::fs::createUniqueDirectory("xcc-link", dir))
    return xrt::UnavailableError("cannot create a temporary directory: {}", ec.message());
  std::string obj_path = (dir + "/dispatches.o").str();
  std::string so_path = (dir + "/dispatches.so").str();
  std::string log_path = (dir + "/lld.log").str();
  auto cleanup = [&] {
    for (const std::string& p : {obj_path, so_path, log_path}) llvm::sys::fs::remove(p);
    llvm::sys::fs::remove(dir);
  };
  {
    std::error_code ec;
    llvm::raw_fd_ostream out(obj_path, ec);
    if (ec) {
      cleanup();
      return xrt::UnavailableError("cannot write {}: {}", obj_path, ec.message());
    }
    out.write(object.data(), object.size());
  }
  llvm::SmallVector<llvm::StringRef, 12> args = {
      lld, "-shared", "--build-id=none", "-z", "noexecstack", "-o", so_path, obj_path};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, llvm::StringRef(log_path),
                                                llvm::StringRef(log_path)};
  std::string exec_error;
  int rc = llvm::sys::ExecuteAndWait(lld, args, std::nullopt, redirects, 0, 0, &exec_error);
  if (rc != 0) {
    std::string log;
    if (auto buf = llvm::MemoryBuffer::getFile(log_path)) log = (*buf)->getBuffer().str();
    cleanup();
    return xrt::InternalError("linking the dispatch code with {} failed ({}): {}{}", lld, rc,
                              exec_error, log);
  }
  auto so = llvm::MemoryBuffer::getFile(so_path);
  if (!so) {
    cleanup();
    return xrt::InternalError("cannot read the linked shared object");
  }
  result.shared_object = (*so)->getBuffer().str();
  cleanup();
  return result;
}

}  // namespace xcc
