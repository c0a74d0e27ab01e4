// CpuIsa: which instruction-set path the kernels of this library run.
//
// The library is compiled for baseline x86-64; the AVX2 and AVX-512 paths are
// compiled with function-level target attributes and chosen at run time from
// CPUID (__builtin_cpu_supports), so one binary runs on any x86-64 CPU.
//
// Within one process the chosen path is fixed (the best the CPU supports),
// which is what makes kernel results reproducible run to run and independent
// of batch composition. Different paths may round differently; tests use the
// explicit-ISA entry points of each kernel to cover every path the machine
// supports.
#pragma once

namespace xrt {

enum class CpuIsa {
  kScalar = 0,  // portable C++, no SIMD assumptions
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512F (+VL/DQ/BW)
};

// "scalar", "avx2", "avx512".
const char* CpuIsaName(CpuIsa isa);

// True if this CPU (and OS, for the AVX state) can run `isa`.
bool CpuIsaSupported(CpuIsa isa);

// The best supported ISA; computed once, thread-safe.
CpuIsa BestCpuIsa();

}  // namespace xrt
