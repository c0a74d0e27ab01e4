#include "runtime/executor/code_module.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/loader/artifact.h"
#include "runtime/loader/segment_checksum.h"
#include "schemas/artifact_generated.h"

namespace xrt {

bool CpuHasFeature(const std::string& f) {
  __builtin_cpu_init();
#define XRT_FEATURE(name) \
  if (f == name) return __builtin_cpu_supports(name);
  XRT_FEATURE("sse4.2")
  XRT_FEATURE("avx")
  XRT_FEATURE("avx2")
  XRT_FEATURE("fma")
  XRT_FEATURE("f16c")
  XRT_FEATURE("bmi")
  XRT_FEATURE("bmi2")
  XRT_FEATURE("avx512f")
  XRT_FEATURE("avx512bw")
  XRT_FEATURE("avx512dq")
  XRT_FEATURE("avx512vl")
  XRT_FEATURE("avx512cd")
  XRT_FEATURE("avx512vnni")
  XRT_FEATURE("avx512bf16")
  XRT_FEATURE("avx512fp16")
#undef XRT_FEATURE
  return false;
}

namespace {

// Seals memfd `fd` (holding a copy of code segment `segment`, `size` bytes) against any
// change, then checks the copy against the segment's checksum. A format 1.0 artifact has
// no checksum: sealed, not verified.
Status VerifySealedCopy(const Artifact& artifact, uint32_t segment, int fd, uint64_t size) {
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return UnavailableError("sealing the code segment's memfd failed: {}", std::strerror(errno));
  const xpk::Segment& seg = *artifact.manifest().segments()->Get(segment);
  if (seg.checksum_algorithm() == xpk::ChecksumAlgorithm::none) return Status::Ok();
  const void* copy = nullptr;
  if (size > 0) {
    copy = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (copy == MAP_FAILED)
      return UnavailableError("mapping the code segment's memfd failed: {}", std::strerror(errno));
  }
  Status s = VerifySegmentChecksum(seg, segment, static_cast<const uint8_t*>(copy), size);
  if (copy) ::munmap(const_cast<void*>(copy), size);
  return s.WithContext(artifact.path());
}

}  // namespace

Expected<std::unique_ptr<CodeModule>> CodeModule::Load(const Artifact& artifact, uint32_t index) {
  const xpk::Manifest& m = artifact.manifest();
  const std::string& path = artifact.path();
  if (!m.code() || index >= m.code()->size())
    return NotFoundError("{}: no code module {}", path, index);
  const xpk::CodeModule* cm = m.code()->Get(index);
  if (cm->abi_version() != xpk::abi::kDispatchAbiVersion)
    return UnimplementedError("{}: code module uses dispatch ABI {}, this runtime supports {}",
                              path, cm->abi_version(), xpk::abi::kDispatchAbiVersion);
  if (cm->required_features()) {
    std::string missing;
    for (const auto* f : *cm->required_features())
      if (!CpuHasFeature(f->str())) missing += (missing.empty() ? "" : ", ") + f->str();
    if (!missing.empty())
      return FailedPreconditionError(
          "{}: the code was compiled for cpu '{}' and needs CPU features this machine lacks: "
          "{} (recompile with --target matching this machine, e.g. --target host)",
          path, cm->cpu() ? cm->cpu()->str() : "?", missing);
  }
  XRT_ASSIGN_OR_RETURN(ByteSpan bytes, artifact.segment_data(cm->segment()));

  std::unique_ptr<CodeModule> mod(new CodeModule());
  mod->fd_ = static_cast<int>(::memfd_create("xpk-code", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (mod->fd_ < 0) return UnavailableError("memfd_create failed: {}", std::strerror(errno));
  uint64_t written = 0;
  while (written < bytes.size) {
    ssize_t n = ::write(mod->fd_, bytes.data + written, bytes.size - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return UnavailableError("writing the code segment to memfd failed: {}", std::strerror(errno));
    }
    written += static_cast<uint64_t>(n);
  }
  // The loader verified the segment's checksum at Open(), in the mapped file. Seal the copy
  // and verify it again, so the bytes dlopen maps executable are exactly bytes whose
  // checksum matched, even if the file was overwritten in place since Open().
  XRT_RETURN_IF_ERROR(VerifySealedCopy(artifact, cm->segment(), mod->fd_, bytes.size));
  std::string fd_path = "/proc/self/fd/" + std::to_string(mod->fd_);
  mod->handle_ = ::dlopen(fd_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!mod->handle_) {
    const char* err = ::dlerror();
    return DataLossError("{}: cannot load the code segment: {}", path, err ? err : "dlopen failed");
  }
  if (cm->functions()) {
    for (const auto* name : *cm->functions()) {
      void* sym = ::dlsym(mod->handle_, name->c_str());
      if (!sym)
        return DataLossError("{}: the code segment does not export '{}'", path, name->str());
      mod->functions_.push_back(reinterpret_cast<DispatchFn>(sym));
    }
  }
  return mod;
}

CodeModule::~CodeModule() {
  if (handle_) ::dlclose(handle_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace xrt
