// Internal to runtime/kernels: the x86 intrinsics, the function target
// attributes of the SIMD paths, and the few lane helpers every kernel uses.
//
// The kernels are built for baseline x86-64 and pick an ISA path at run time
// (cpu_isa.h), so each SIMD function carries its own target attribute. With
// XRT_SIMD_EMULATE defined (the *_emulated tests only), the intrinsics come
// from SIMDe's portable implementations instead and the attributes are empty:
// the AVX2 and AVX-512 paths then run on any x86-64 CPU, slowly but with the
// same results, so CI tests every path whatever its machine has.
#pragma once

#if defined(__x86_64__)

#if defined(XRT_SIMD_EMULATE)
#define SIMDE_ENABLE_NATIVE_ALIASES
// clang's SSE2 header defines bf16 vector types that SIMDe's aliases would
// redefine; the kernels use none of them.
#include <emmintrin.h>
#define __m128bh xrt_simde_m128bh
#define __m256bh xrt_simde_m256bh
#define __m512bh xrt_simde_m512bh
#include <simde/x86/avx512.h>
#include <simde/x86/f16c.h>
#include <simde/x86/fma.h>
#include <simde/x86/gfni.h>
#undef __m128bh
#undef __m256bh
#undef __m512bh
#include "runtime/kernels/simd_emulate.h"
#define XRT_TARGET_AVX2
#define XRT_TARGET_AVX2_INTEGER
#define XRT_TARGET_AVX2_VNNI
#define XRT_TARGET_AVX512
#define XRT_TARGET_AVX512_VNNI
#define XRT_TARGET_AVX512_GFNI
#define XRT_TARGET_AVX512_VNNI_GFNI
#define XRT_TARGET_AVX512_BF16
#define XRT_TARGET_AMX
#define XRT_KEEP_IN_REGISTER(v) ((void)0)
#define XRT_OPAQUE_POINTER(p) ((void)0)
#else
#include <immintrin.h>
#define XRT_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
// A helper of AVX2 integer ops that AVX2 and AVX-512 code alike inline: GCC
// inlines a callee only where its target is a subset of the caller's, and
// XRT_TARGET_AVX512 has no f16c (an XRT_TARGET_AVX2 helper stays a call there).
#define XRT_TARGET_AVX2_INTEGER __attribute__((target("avx2")))
// The avx2 tier's int8 kernels on CPUs with AVX-VNNI (cpu_isa.h: CpuHasAvxVnni).
#define XRT_TARGET_AVX2_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
#define XRT_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
#define XRT_TARGET_AVX512_VNNI \
  __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512vnni,avx2,fma")))
// GFNI's vgf2p8affineqb on zmm (cpu_isa.h: CpuHasGfni): not a tier, the int8
// kernels' second copy of the AVX512_VNNI ones (matmul_int8.cc).
#define XRT_TARGET_AVX512_GFNI \
  __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma,gfni")))
#define XRT_TARGET_AVX512_VNNI_GFNI \
  __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512vnni,avx2,fma,gfni")))
#define XRT_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx512vnni,avx512bf16,avx2,fma")))
#define XRT_TARGET_AMX                                                            \
  __attribute__((                                                                 \
      target("avx512f,avx512vl,avx512dq,avx512bw,avx512vnni,avx512bf16,avx2,fma," \
             "amx-tile,amx-bf16,amx-int8")))
// An empty asm that claims to read and rewrite vector `v` in its register:
// the compiler must materialize v here and cannot move arithmetic across it.
// Used where GCC would reassociate a chain of integer adds into a tree that
// keeps every partial product live (and spills them), or would fold one
// loaded vector into several instructions' memory operands (loading it once
// per use). v must be a local, not an array element: an asm operand on an
// element makes the whole array addressable, and GCC then keeps it on the
// stack (a store per update and a reload where it is read). "v": any vector
// register the function's target has (zmm16-31 too on AVX-512).
#define XRT_KEEP_IN_REGISTER(v) __asm__("" : "+v"(v))
// An empty volatile asm that claims to rewrite pointer `p`: loads through p
// after it are not the same expression as loads before it, so the compiler
// cannot keep an earlier pass's loaded (and computed) values for a later pass
// in registers it does not have, spilling them, where reloading costs less.
#define XRT_OPAQUE_POINTER(p) __asm__ volatile("" : "+r"(p))
#endif

#include <algorithm>
#include <cstdint>

namespace xrt {

// Lanes [0, n) set, n clamped to [0, 8].
XRT_TARGET_AVX2 inline __m256i TailMask8(int64_t n) {
  const int c = static_cast<int>(std::clamp<int64_t>(n, 0, 8));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The largest of v's 8 lanes.
XRT_TARGET_AVX2 inline float HorizontalMax8(__m256 v) {
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  return _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
}

}  // namespace xrt

#endif  // __x86_64__
