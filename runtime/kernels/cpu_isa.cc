#include "runtime/kernels/cpu_isa.h"

#include <cstring>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
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

// AMX-TILE (CPUID.7.0:EDX bit 24), AMX-BF16 (bit 22) and AMX-INT8 (bit 25); the OS saves the
// tile state (XCR0 bits 17 XTILECFG and 18 XTILEDATA); and, on Linux, this
// process may use it: the kernel leaves XTILEDATA off for a process until it
// asks (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16+), and a tile instruction
// without that permission raises SIGILL. Asked once; the answer is
// process-wide, so threads started before or after may all use the tiles.
bool HasAmx() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const unsigned kAmx = (1u << 22) | (1u << 24) | (1u << 25);
  if ((edx & kAmx) != kAmx) return false;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || (ecx & (1u << 27)) == 0) return false;  // OSXSAVE
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const unsigned kTileState = (1u << 17) | (1u << 18);
  if ((xcr0_lo & kTileState) != kTileState) return false;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023;  // <asm/prctl.h>
  constexpr long kXfeatureXtileData = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) == 0;
#else
  return false;
#endif
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
    case CpuIsa::kAmx:
      return "amx";
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
    case CpuIsa::kAmx: {
#if defined(__x86_64__)
      static const bool amx = CpuIsaSupported(CpuIsa::kAvx512Bf16) && HasAmx();
      return amx;
#else
      return false;
#endif
    }
  }
  return false;
}

namespace {

// A feature outside the tiers: CPUID.(EAX=7, ECX=subleaf) register
// reg (0 EAX .. 3 EDX) bit `bit`, on a CPU with `tier`. True for every ISA
// under XRT_SIMD_EMULATE (its intrinsics run anywhere).
bool HasLeaf7Feature(CpuIsa tier, unsigned subleaf, int reg, int bit) {
#if defined(XRT_SIMD_EMULATE) && defined(__x86_64__)
  return true;
#elif defined(__x86_64__)
  unsigned r[4] = {};
  return CpuIsaSupported(tier) && __get_cpuid_count(7, subleaf, &r[0], &r[1], &r[2], &r[3]) &&
         (r[reg] & (1u << bit)) != 0;
#else
  return false;
#endif
}

}  // namespace

bool CpuHasAvxVnni() {
  static const bool vnni = HasLeaf7Feature(CpuIsa::kAvx2, 1, /*EAX*/ 0, 4);
  return vnni;
}

bool CpuHasGfni() {
  static const bool gfni = HasLeaf7Feature(CpuIsa::kAvx512, 0, /*ECX*/ 2, 8);
  return gfni;
}

bool CpuIsAmd() {
#if defined(__x86_64__) && !defined(XRT_SIMD_EMULATE)
  static const bool amd = [] {
    unsigned eax = 0, r[3] = {};  // the vendor string is in EBX, EDX, ECX
    if (!__get_cpuid(0, &eax, &r[0], &r[2], &r[1])) return false;
    char vendor[13] = {};
    std::memcpy(vendor, r, 12);
    return std::strcmp(vendor, "AuthenticAMD") == 0 || std::strcmp(vendor, "HygonGenuine") == 0;
  }();
  return amd;
#else
  return false;
#endif
}

bool StreamPrefetchIsL2(StreamPrefetch where) {
  switch (where) {
    case StreamPrefetch::kL1:
      return false;
    case StreamPrefetch::kL2:
      return true;
    case StreamPrefetch::kAuto:
      break;
  }
  return CpuIsAmd();
}

const char* BestKernelsName() {
  static const std::string name = [] {
    const CpuIsa best = BestCpuIsa();
    std::string s = CpuIsaName(best);
    if (best == CpuIsa::kAvx2 && CpuHasAvxVnni()) s += "+avx_vnni";
    if (IsaAtLeast(best, CpuIsa::kAvx512Vnni) && CpuHasGfni()) s += "+gfni";
    return s;
  }();
  return name.c_str();
}

CpuIsa BestCpuIsa() {
  static const CpuIsa best = [] {
    if (CpuIsaSupported(CpuIsa::kAmx)) return CpuIsa::kAmx;
    if (CpuIsaSupported(CpuIsa::kAvx512Bf16)) return CpuIsa::kAvx512Bf16;
    if (CpuIsaSupported(CpuIsa::kAvx512Vnni)) return CpuIsa::kAvx512Vnni;
    if (CpuIsaSupported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
    if (CpuIsaSupported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
    return CpuIsa::kScalar;
  }();
  return best;
}

}  // namespace xrt
