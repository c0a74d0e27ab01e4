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
//
// The paths are tiers, each a superset of the one below (as oneDNN's
// avx512_core < avx512_core_vnni): a kernel with nothing of its own for a
// tier runs the tier below it (IsaAtLeast).
#pragma once

namespace xrt {

enum class CpuIsa {
  kScalar = 0,  // portable C++, no SIMD assumptions
  kAvx2 = 1,    // AVX2 + FMA + F16C
  kAvx512 = 2,  // AVX-512F (+VL/DQ/BW)
  // AVX-512 + AVX512_VNNI (vpdpbusd: u8 x s8 dot products of four into
  // int32). Only the int8 matmul has code of its own for it; its results are
  // the AVX-512 path's bits (exact integer sums).
  kAvx512Vnni = 3,
  // AVX-512 + AVX512_VNNI + AVX512_BF16 (vdpbf16ps: bf16 pair dot products
  // into f32). Only the kBF16 matmul's tile kernel has code of its own for
  // it; its results are the other paths' bits (matmul.h's kBF16 chain is
  // vdpbf16ps's order).
  kAvx512Bf16 = 4,
  // AVX512_BF16 tier + AMX-TILE, AMX-BF16 and AMX-INT8 (Sapphire Rapids and
  // later), with the OS's permission for the tile state (Linux: arch_prctl
  // ARCH_REQ_XCOMP_PERM, asked once per process). The matmul has code of its
  // own for it: kBF16 on TDPBF16PS at every row count, and kInt8's prefills
  // of 16 rows or more on the group formats on TDPBSUD (exact integer sums,
  // the other paths' bits). kBF16 on AMX hardware sums with fewer roundings
  // than the other tiers' chain: its own bits, batch invariant (matmul.h).
  // Emulated in CI (Intel's definitions) and run on a Sapphire Rapids-class
  // CPU.
  kAmx = 5,
};

// True if `isa` is tier `tier` or above it.
constexpr bool IsaAtLeast(CpuIsa isa, CpuIsa tier) { return isa >= tier; }

// "scalar", "avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx".
const char* CpuIsaName(CpuIsa isa);

// True if this CPU (and OS, for the AVX state) can run `isa`.
bool CpuIsaSupported(CpuIsa isa);

// The best supported ISA; computed once, thread-safe.
CpuIsa BestCpuIsa();

// AVX-VNNI (CPUID.(EAX=7,ECX=1):EAX bit 4): vpdpbusd and vpdpwssd on xmm /
// ymm with a VEX encoding. Not a tier: AVX-512 CPUs may lack it (Ice Lake,
// Zen 4) and AVX2-only ones have it (Alder Lake and later client cores);
// the int8 matmul's avx2 tier uses it where present (matmul_int8.h). True
// for every ISA under XRT_SIMD_EMULATE; needs the avx2 tier's support.
bool CpuHasAvxVnni();

// GFNI (CPUID.(EAX=7,ECX=0):ECX bit 8) with the avx512 tier: vgf2p8affineqb
// on zmm. Not a tier either: Skylake-X to Cooper Lake have AVX-512 (VNNI,
// BF16) without it, Ice Lake, Sapphire Rapids and Zen 4 on have both. The
// int8 matmul's AVX512_VNNI kernels use it where present (matmul_int8.h).
// True for every ISA under XRT_SIMD_EMULATE; needs the avx512 tier's support.
bool CpuHasGfni();

// True on AMD's (and Hygon's) x86 CPUs, by CPUID's vendor string: for the
// few choices that are tuned per vendor rather than per ISA (the int8
// decode's prefetch level, matmul_int8.h). False under XRT_SIMD_EMULATE
// and off x86.
bool CpuIsAmd();

// Where a kernel's software prefetches of data it reads once from memory go:
// a decode step's weight panels (the int8 matmul, Int8DecodePrefetch) and its
// attention's K/V rows (PagedAttention). Set per kernel for tests and
// benchmarks; kAuto is what the kernels run by default, chosen per vendor
// (StreamPrefetchIsL2). Where the lines come from changes, never the results.
enum class StreamPrefetch { kAuto, kL1, kL2 };

// True when `where` means L2: kL2, or kAuto on AMD's CPUs (CpuIsAmd). On
// Zen 4 a decode's weight panels read 1.1-1.8x and its K/V 1.0-1.4x faster
// from DRAM prefetched into L2 than into L1; on a Sapphire Rapids-class Xeon
// the weight panels read as fast or faster into L1 (its K/V not measured
// there), so elsewhere L1 (bench/README.md).
bool StreamPrefetchIsL2(StreamPrefetch where);

// What the kernels of this process run on, for logs and benchmark output:
// CpuIsaName(BestCpuIsa()), plus "+avx_vnni" on the avx2 tier of a CPU with
// AVX-VNNI (the int8 matmul's vpdpbusd kernels), "+gfni" from the
// avx512_vnni tier on a CPU with GFNI (the int8 matmul's high-bit merge).
const char* BestKernelsName();

}  // namespace xrt
