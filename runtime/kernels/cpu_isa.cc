#include "runtime/kernels/cpu_isa.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace xrt {
namespace {

#if defined(__x86_64__)
// CPUID leaf 1, ECX bit 29 (GCC 12's __builtin_cpu_supports does not know
// "f16c"). Every AVX2 CPU has it; checked so the f16c conversions are safe.
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
}
#endif

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Vnni:
      return "avx512_vnni";
    case CpuIsa::kAvx512Bf16:
      return "avx512_bf16";
  }
  return "unknown";
}

bool CpuIsaSupported(CpuIsa isa) {
#if defined(XRT_SIMD_EMULATE) && defined(__x86_64__)
  // simd.h: every path runs on SIMDe's portable intrinsics.
  return true;
#endif
  switch (isa) {
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
#if defined(__x86_64__)
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && HasF16c();
#else
      return false;
#endif
    case CpuIsa::kAvx512:
#if defined(__x86_64__)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
      return false;
#endif
    case CpuIsa::kAvx512Vnni:
#if defined(__x86_64__)
      return CpuIsaSupported(CpuIsa::kAvx512) && __builtin_cpu_supports("avx512vnni");
#else
      return false;
#endif
    case CpuIsa::kAvx512Bf16:
#if defined(__x86_64__)
      return CpuIsaSupported(CpuIsa::kAvx512Vnni) && __builtin_cpu_supports("avx512bf16");
#else
      return false;
#endif
  }
  return false;
}

CpuIsa BestCpuIsa() {
  static const CpuIsa best = [] {
    if (CpuIsaSupported(CpuIsa::kAvx512Bf16)) return CpuIsa::kAvx512Bf16;
    if (CpuIsaSupported(CpuIsa::kAvx512Vnni)) return CpuIsa::kAvx512Vnni;
    if (CpuIsaSupported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
    if (CpuIsaSupported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
    return CpuIsa::kScalar;
  }();
  return best;
}

}  // namespace xrt
