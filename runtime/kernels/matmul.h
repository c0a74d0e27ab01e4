// Matmul: C = A · Wᵀ (+ bias) (+ C), the microkernel behind every linear
// layer the compiler emits, with weights pre-packed at compile time.
//
// Packed weight layout (the contract between `xcc` and `xrt`; changing it is
// an artifact format change):
//
//   W is [N][K] row-major (HF linear layout: out_features x in_features).
//   It is cut into ceil(N / kPackNR) panels of kPackNR output columns. Panel p
//   holds, for k = 0..K-1 in order, the kPackNR values W[p*kPackNR + j][k]
//   for j = 0..kPackNR-1, i.e. float packed[panel][K][kPackNR]. Columns past N
//   in the last panel are zero. Every panel starts at a multiple of
//   kPackNR*K floats, so with a 64-byte aligned base and kPackNR = 32 each
//   k-row of a panel is two aligned 64-byte lines. The same bytes serve the
//   AVX-512, AVX2 and scalar paths.
//
// Other weight formats (weight_format.h: f16, bf16, bf16_pairs(_amx), q8_0,
// q4_0, q4_1, q5_0, q5_1, iq4_nl, the K-quants, iq4_xs) use the same panels
// with each value stored in that format (bf16_pairs(_amx): two k-rows per
// dword); MatmulArgs::w_format says which. The kernels compute with the exact
// f32 value of each weight (DequantizePackedRow), so everything below holds
// for every format with w[j][k] meaning that value: the result on a packed
// q4_1 weight is bit-identical to the f32 Matmul on its dequantized
// (f32-packed) weight.
//
// Numerics (batch invariance, a hard guarantee): every output element is
//   c[i][j] = (accumulate ? c_old[i][j] : 0) + (dot + bias[j])
// where dot = fma(a[i][K-1], w[j][K-1], ... fma(a[i][1], w[j][1],
// fma(a[i][0], w[j][0], 0))...) is accumulated in f32 in increasing k with
// one rounding per fma (no split-K, no reassociation). The value of c[i][j]
// therefore depends only on row i of A, column j of W, bias[j] and
// c_old[i][j]: it is bit-identical whatever M is, whichever row of A the data
// sits in and whatever the thread count. (Without `accumulate` the
// "0 + x" step is skipped, so -0.0 survives.) The ISA is fixed per process
// (BestCpuIsa()); the AVX-512, AVX2 and scalar paths all use fused
// multiply-adds in this order (the scalar path via std::fma).
//
// Compute types (MatmulArgs::compute). kF32 is the chain above on the f32
// values. kBF16 is the chain of a bf16 dot-product unit (AVX512_BF16's
// vdpbf16ps, as measured lane for lane on hardware) on bf16 operands: every
// a[i][k] and w[j][k] is first replaced by RoundToBf16Operand of it (round to
// nearest even to 8 significant bits; bf16 subnormals read as a signed zero,
// as AMX and the AVX512_BF16 conversions read them); K is padded with one
// zero to an even length; and the pairs (2p, 2p+1) are summed in increasing
// p, each pair's odd element first:
//   dot = F(fma(a[2p], w[2p], F(fma(a[2p+1], w[2p+1], dot))))
// where F flushes a result below 2^-126 in magnitude to a zero of its sign
// (x86's flush to zero, tininess detected after rounding). A product of two
// bf16 values is exact in f32, so each step adds an exact product with one
// rounding. The pad's step only turns a -0 sum into +0. The bias and the
// accumulate adds are flushed the same way: c = F(c_old + F(dot + bias)).
// Everything said above about batch invariance holds for kBF16 too.
// On the avx512_bf16 tier (cpu_isa.h) kBF16's tiles run on vdpbf16ps, a
// k-pair per instruction, with A and the decoded panel blocks packed as bf16
// pairs; the fused decode kernel (bandwidth bound) keeps its fma chain in the
// same order. On the amx tier every kBF16 matmul runs on AMX, at every row
// count (a decode's row padded to a 16-row tile): TDPBF16PS sums 16 k-pairs
// per step into 16 x 16 tiles, A and the panel blocks packed with each pair's
// elements swapped; a last group of fewer than 16 pairs runs on vdpbf16ps. A
// bf16_pairs_amx weight is stored in that order (weight_format.h), so its
// panels are loaded as B tiles in place; every other format is decoded into
// pairs per k-block. By Intel's definition of TDPBF16PS (a rounding per
// product, the even element first) those are the chain's bits, and so they
// are on the emulated tiles of the *_emulated tests. The hardware does not
// sum that way: the Sapphire Rapids-class CPU this first ran on adds a
// step's products with fewer roundings (the even elements' products summed
// together and the odd ones' together, each aligned to its largest term,
// then both added to C with one rounding; probed in bench/README.md), so
// there the amx tier's kBF16 is not the other tiers' bits
// (AmxBf16MatchesTheChain tells): it is 2.5x as accurate on random data
// (4e-8 of the products' magnitudes against the chain's 1e-7), and since
// every row count runs the same instructions on a row, it is still batch
// invariant within the tier, as the rest of the contract says. (A
// matmul's K is fixed by its weight; the one product whose K depends on
// the batch, paged attention's values, is padded to a whole partition
// there: attention.h.)
// On CPUs without bf16 units kBF16 is slower than kF32 (the operands are
// rounded in registers): there it exists for its numerics contract.
// kInt8 is llama.cpp's arithmetic on the formats with integer quants
// (Int8ComputeApplies: q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, the K-quants,
// iq4_xs): rows of A quantized to int8 per block, exact integer dot products
// with the weights' quants, scales applied in f32 in a fixed order; its
// contract (matmul_int8.h) is batch invariant too, and the other formats run
// it as kF32.
//
// (The sign of a zero weight may differ between the paths' decoders: q4_0's
// 0 * negative scale is -0 in DequantizePackedRow, +0 from the AVX-512
// decoder's fma(scale, q, -8 * scale). It cannot change a result for finite
// A: every chain starts from +0, and +0 plus a zero product of either sign,
// or any exact cancellation, is +0.)
//
// Threading: Matmul splits work over (row block, N panel) tiles on `pool`
// (nullptr: run on the caller). It is thread-compatible: concurrent calls are
// fine as long as their C ranges do not overlap each other or their inputs.
// Each thread that runs tiles keeps a thread-local buffer of packed A rows
// (about max(1 MiB, 56*K bytes)), of running sums and (non-f32 formats or
// kBF16) a 32 KiB decoded panel block; the fused decode kernel's caller keeps
// its rows of A rounded, or as bf16 pairs (kBF16); nothing else is allocated.
// kBF16 also sets this thread's MXCSR.FTZ while it runs and restores it.
//
// Performance shape: rows of A are packed per row block (k-major tiles of up
// to 14 rows on AVX-512) and kept in L2 while the weight panels stream past;
// K is walked in blocks of 256 so one block of a panel (32 KiB) is reused
// from L1 by every row tile; 14x32 register tiles on AVX-512 (28 zmm
// accumulators), 6x16 on AVX2, 4x32 scalar. Packed formats other than f32
// are decoded one k-block of a panel at a time into a thread-local f32 block
// (32 KiB, L1) that the same tile kernels then read; on AVX-512, up to
// kGemvMaxRows rows (decode) run a fused kernel instead that decodes each
// k-row in registers and reads the packed weight exactly once, two panels at a
// time (bandwidth bound: the packed bytes are all it reads from DRAM).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/base/thread_pool.h"
#include "runtime/kernels/cpu_isa.h"
#include "runtime/kernels/weight_format.h"

namespace xrt {

// Panel width of the packed weight layout, in output columns.
constexpr int kPackNR = 32;

// Floats needed to hold W [N][K] packed (N rounded up to kPackNR).
int64_t PackedWeightFloats(int64_t N, int64_t K);

// Packs w [N][K] (row-major, row stride K) into `out`, which must hold
// PackedWeightFloats(N, K) floats (64-byte alignment recommended). Pads the
// columns past N with zeros. Pure function of its inputs (deterministic
// bytes for the artifact); single-threaded.
void PackWeights(const float* w, int64_t N, int64_t K, float* out);

// PackWeights for a W whose rows are not one stride apart: row j of W [N][K]
// is the K floats at rows[j] (attention's keys). Same bytes.
void PackWeightRows(const float* const* rows, int64_t N, int64_t K, float* out);

// PackWeights for a W given by its columns: W[j][k] = cols[k][j], each of the
// K columns N floats (attention's values, transposed: W [head_dim][keys] from
// the value rows). Same bytes.
void PackWeightColumns(const float* const* cols, int64_t N, int64_t K, float* out);

// One attention head's n keys and values (rows of dim floats) as the weights
// of its two products: keys = W [n][dim] (scores: N = n, K = dim), values =
// W [dim][n], the values transposed (outputs: N = dim, K = n). Written into
// `buf` (grown as needed), each 64-byte aligned.
struct HeadWeights {
  const float* keys;
  const float* values;
  WeightFormat format = WeightFormat::kF32;  // of both (their MatmulArgs::w_format)
};
HeadWeights PackHeadWeights(const float* const* k_rows, const float* const* v_rows, int64_t n,
                            int64_t dim, std::vector<float>* buf);

// PackHeadWeights for kBF16 products on `isa`: from the avx512_bf16 tier on,
// the same two weights as bf16_pairs (bf16_pairs_amx on the amx tier) holding
// the bf16 operands the products take, so the same results from half the
// bytes, read as stored; below it, PackHeadWeights.
HeadWeights PackHeadWeightsBf16(const float* const* k_rows, const float* const* v_rows, int64_t n,
                                int64_t dim, CpuIsa isa, std::vector<float>* buf);

// What a matmul multiplies (Command.compute in the artifact).
enum class ComputeType : uint8_t {
  kF32 = 0,   // the operands' f32 values
  kBF16 = 1,  // the operands rounded to bf16 (RoundToBf16Operand), f32 sums
  kInt8 = 2,  // A quantized to int8, integer dot products (matmul_int8.h)
};

// "f32", "bf16", "int8"; FromName accepts those and returns false otherwise.
const char* ComputeTypeName(ComputeType c);
bool ComputeTypeFromName(const std::string& name, ComputeType* out);

// x as the bf16 operand of a kBF16 matmul, widened back to f32: rounded to
// nearest even at 8 significant bits (overflowing to infinity like any
// rounding), a subnormal bf16 (|x| < 2^-126) as a zero of x's sign, NaN kept
// a (quiet) NaN.
inline float RoundToBf16Operand(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7f800000u) == 0) {
    b &= 0x80000000u;  // zero or subnormal
  } else if ((b & 0x7fffffffu) > 0x7f800000u) {
    b |= 0x00400000u;  // NaN: quiet it; no rounding carry into the exponent
  } else {
    b += 0x7fffu + ((b >> 16) & 1u);
  }
  b &= 0xffff0000u;
  std::memcpy(&x, &b, 4);
  return x;
}

struct MatmulArgs {
  const float* a = nullptr;  // A [M][K], row stride lda (>= K)
  int64_t lda = 0;
  // W [N][K] packed in `w_format`: PackWeights (f32) or PackWeightsFrom /
  // PackWeightsFromBlocks output. The q formats need k % 32 == 0.
  const void* packed_w = nullptr;
  WeightFormat w_format = WeightFormat::kF32;
  const float* bias = nullptr;  // [N] or nullptr
  float* c = nullptr;           // C [M][N], row stride ldc (>= N)
  int64_t ldc = 0;
  int64_t m = 0, n = 0, k = 0;
  bool accumulate = false;  // C += A·Wᵀ (+bias) instead of C =
  ComputeType compute = ComputeType::kF32;
};

// C = A·Wᵀ (+ bias) (+ C if accumulate), on the best ISA of this CPU.
// Preconditions (checked with assert only: the compiler guarantees them):
// m, n, k >= 0; lda >= k; ldc >= n; C does not overlap A, W or bias.
// m == 0 or n == 0 is a no-op; k == 0 gives C = bias (or 0) (+ C).
void Matmul(const MatmulArgs& args, ThreadPool* pool);

// Rows up to which the AVX-512 path runs its fused decode kernel on formats
// other than f32.
constexpr int kGemvMaxRows = 4;

// Same on an explicit ISA path, which must satisfy CpuIsaSupported(isa).
// For tests and benchmarks.
void MatmulWithIsa(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa);

// True if this CPU's AMX TDPBF16PS sums as the kBF16 chain above, so that the
// amx tier's kBF16 is the other tiers' bits: checked once, by a probe matmul
// whose values tell the two orders of a pair, extra precision and the
// flushes apart, against the scalar path. True on the emulated tiles (Intel's
// definition), false on the AMX hardware measured so far and on CPUs
// without the amx tier. For tests and logs: kBF16 runs on AMX either way.
bool AmxBf16MatchesTheChain();

}  // namespace xrt
