// The kInt8 compute type of Matmul (matmul.h): integer dot products between
// the integer quants of a packed weight and the rows of A quantized to int8,
// as llama.cpp multiplies its quantized weights (q8 activations), under a
// contract that keeps batch invariance and has one exact answer per input.
//
// It applies to the formats with integer quants (Int8ComputeApplies: q8_0,
// q4_0, q4_1, q5_0, q5_1, iq4_nl, q3_k, q4_k, q5_k, q6_k, iq4_xs); Matmul runs
// kInt8 on f32/f16/bf16/bf16_pairs weights as kF32.
//
// 1. Activations. Row i of A is cut into blocks of Int8ActivationBlock(format)
//    k-values (32 for q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl, 256 for the K-quants
//    and iq4_xs). Per block, with amax = max |a| over the block:
//      - amax not finite (an inf or NaN in the block): d = NaN, every q = 0
//        (the outputs that read the block are NaN);
//      - id = 127 / amax (f32) not finite (amax is 0 or tiny): d = 0, q = 0;
//      - else d = amax / 127 (f32), q[k] = nearbyint(a[k] * id) (nearest
//        even; within [-127, 127]).
// 2. Per output c[i][j], the weight's blocks in increasing k, each adding
//    to an f32 sum `acc` (from +0) with fmas whose integer parts are exact
//    int32 sums (isum, s = sum of the block's activation quants q):
//      q8_0:  acc = fma(d_w * d, isum, acc), isum = sum q_w * q
//      q4_0:  the same with q_w - 8 (q_w in 0..15)
//      q4_1:  acc = fma(d_w * d, sum q_w * q, acc); acc = fma(m_w, d * s, acc)
//      q5_0:  as q4_0 with q_w - 16 (q_w in 0..31)
//      q5_1:  as q4_1 (q_w in 0..31)
//      iq4_nl: as q8_0 with kIQ4Values[q_w] (q_w in 0..15, weight_format.h)
//      q4_k, q5_k (per 256): isum = sum over the 8 sub-blocks of
//             sc * (sum q_w * q), imin = sum of m * s_sub;
//             acc = fma(d_w * d, isum, acc); acc = fma(-(dmin_w * d), imin, acc)
//      q6_k (per 256): isum = sum over the 16 sub-blocks of sc * (sum (q_w - 32) * q);
//             acc = fma(d_w * d, isum, acc)
//      q3_k:  as q6_k with q_w - 4 (q_w in 0..7)
//      iq4_xs: as q6_k with kIQ4Values[q_w] (q_w in 0..15)
//    where d_w, m_w, dmin_w are the f16 scales as f32, sc and m the
//    sub-block scales (weight_format.h), each product of two scales (and
//    d * s, where s is exact in f32) is one f32 rounding and each int32 ->
//    f32 conversion rounds to nearest even.
//    Then, as for kF32, c = (accumulate ? c_old : 0) + (acc + bias).
// Every integer sum is exact (bounded well inside int32 by the quant widths),
// so the result depends only on row i of A, column j of W, bias and c_old:
// bit-identical whatever M, the row's position, the thread count and the ISA
// path (the portable, AVX2 (with or without AVX-VNNI), AVX-512, AVX512_VNNI
// and AMX code compute the same values; AMX-INT8 runs prefills of 16 rows or more on q8_0 / q4_0 /
// q4_1 / q5_0 / q5_1 / iq4_nl and on q4_k / q5_k / iq4_xs (a TDPBSUD per 32-row scale), by
// Intel's definition of TDPBSUD: emulated in CI and run on a Sapphire Rapids-class CPU).
//
// Memory: the calling thread keeps A's quantized rows (about M * K bytes plus
// sums) in a thread-local buffer reused across calls; on AVX2, with many
// rows, each thread that runs panels of a nibble format also keeps the panel
// it runs decoded to bytes (32 * K bytes, DecodeQuadPanelAvx2).
#pragma once

#include <cstdint>

#include "runtime/base/thread_pool.h"
#include "runtime/kernels/cpu_isa.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/weight_format.h"

namespace xrt {

// True for the formats kInt8 multiplies as integers.
bool Int8ComputeApplies(WeightFormat f);

// k-values per activation block for weights of format `f` (32 or 256).
int Int8ActivationBlock(WeightFormat f);

// Quantizes a[k] (k % block == 0) as step 1 says: q[k], d[k / block], and
// sum16[k / 16], the sums of q over each 16 consecutive k (exact).
void QuantizeActivationRow(const float* a, int64_t k, int block, int8_t* q, float* d,
                           int32_t* sum16);

// Matmul for args.compute == kInt8 on a format Int8ComputeApplies to
// (Matmul's preconditions). `isa` picks the path (CpuIsaSupported(isa)):
// AVX-512, AVX2 or the portable loops, all with the same results.
void MatmulInt8WithIsa(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa);

// True if the avx2 tier's int8 kernels run on AVX-VNNI (vpdpbusd on ymm):
// the CPU has it (CpuHasAvxVnni: Intel's cores since Alder Lake, Zen 5) and
// it is allowed. The integer sums, and the results, are those of vpmaddubsw +
// vpmaddwd. SetInt8AvxVnniAllowed(false) makes the avx2 tier use the latter
// (for tests and benchmarks: both variants on one CPU); process-wide, not to
// be changed while a matmul runs.
bool Int8AvxVnniEnabled();
void SetInt8AvxVnniAllowed(bool allowed);

// True if the avx512_vnni tier's int8 kernels (and the tiers' above it)
// merge the high bits of the formats that store them apart (q5_0, q5_1,
// q5_k, q3_k, q6_k: Int8GfniApplies) with GFNI's vgf2p8affineqb: the CPU
// has it (CpuHasGfni) and it is allowed. The same quads, and results, as
// without. SetInt8GfniAllowed as SetInt8AvxVnniAllowed.
bool Int8GfniEnabled();
void SetInt8GfniAllowed(bool allowed);
bool Int8GfniApplies(WeightFormat f);

// The cache level the avx512_vnni tier's one-row kernel (a decode step's,
// which streams kDecodeStreams weight panels side by side from memory)
// prefetches into: into L2 a block step's share of each panel 4 KiB ahead at
// the step's start, into L1 each line 2 KiB ahead, spread over the quad
// loads (matmul_int8.cc, PrefetchQuadShare). kAuto, the default: L2 on AMD's CPUs
// (CpuIsAmd), L1 on the others. M = 1 from DRAM, 8192 x 2048,
// 2 threads, on Zen 4 (an EPYC VM, read probe 25-31 GB/s): into L1 17.8-25.7
// GB/s per format, into L2 27.5-30.8, 1.12-1.75x; hot in L2 no difference
// beyond the noise; on a Sapphire Rapids-class Xeon into L2 0.91-1.04x
// (bench/README.md, "The decode's prefetch into L2 on Zen 4"). Where the
// lines come from changes, never the results. SetInt8DecodePrefetch as
// SetInt8AvxVnniAllowed (kL1 / kL2: both on one CPU, for tests and
// benchmarks).
using Int8DecodePrefetch = StreamPrefetch;
bool Int8DecodePrefetchesToL2();
void SetInt8DecodePrefetch(Int8DecodePrefetch where);

}  // namespace xrt
