// Internal to runtime/kernels: the x86 intrinsics and the function target
// attributes of the SIMD paths.
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
#undef __m128bh
#undef __m256bh
#undef __m512bh
#include "runtime/kernels/simd_emulate.h"
#define XRT_TARGET_AVX2
#define XRT_TARGET_AVX512
#define XRT_KEEP_IN_REGISTER(v) ((void)0)
#else
#include <immintrin.h>
#define XRT_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define XRT_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))
// An empty asm that claims to read and rewrite vector `v` in its register:
// the compiler must materialize v here and cannot move arithmetic across it.
// Used where GCC would reassociate a chain of integer adds into a tree that
// keeps every partial product live (and spills them).
#define XRT_KEEP_IN_REGISTER(v) __asm__("" : "+x"(v))
#endif

#endif  // __x86_64__
