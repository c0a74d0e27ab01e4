// LoraShrink / LoraExpand: the two halves of a multi-LoRA linear layer,
//   y[i][:] += (x[i][:] · A[slot(i)]ᵀ) · (scaling · B[slot(i)])ᵀ,
// split as vLLM's punica kernels are: shrink writes x·Aᵀ into an f32 buffer
// of rank width, expand adds buffer·Bᵀ into (a column slice of) the output
// the base Matmul wrote.
//
// Adapter slots of one target module (e.g. layer 3's q_proj, in_features K,
// out_features N), owned by the caller and read-only here:
//   a_slots  float [num_slots][rank][K]: lora_A of the adapter in each slot.
//   bt_slots float [num_slots][rank][N]: (scaling · lora_B)ᵀ, i.e.
//            bt[s][r][n] = scaling · B[n][r] (pre-transposed so expand
//            streams contiguous rows of N).
// `rank` is the compiled maximum R; an adapter of rank r < R has rows
// r..R-1 of both zero, which makes it exact (they add +0 terms).
// Per-row slot index `slots` int32 [M]: the slot of row i, or -1 = no
// adapter (the base model only). Two modes:
//   mixed  (mixed == true):  row i uses slots[i];
//   single (mixed == false): every row uses slots[0]; slots[1..] are never
//            read (one adapter in the batch: no per-token index).
//
// Numerics (batch invariance, a hard guarantee):
//   Shrink: buf[i][r] = dot(x[i][0..K), a[slot(i)][r][0..K)) in f32 as 16
//     lanes: lane s[j] (j = 0..15) starts at +0.0 and accumulates, in increasing k,
//     fma(x[k], a[k], lane) over k = j, j+16, j+32, ... < K16, where K16 is
//     K rounded up to a multiple of 16 and the padded terms are 0·0. The
//     lanes are then summed in a fixed pairwise tree:
//       t[j] = s[j] + s[j+8] (j < 8), u[j] = t[j] + t[j+4] (j < 4),
//       v[j] = u[j] + u[j+2] (j < 2), dot = v[0] + v[1].
//     Rows with slot -1 get buf[i][0..rank) = +0.0.
//   Expand: y[i][n] = y_old[i][n] + acc with acc = fma(buf[i][R-1],
//     bt[R-1][n], ... fma(buf[i][0], bt[0][n], +0.0)...) in increasing r,
//     one rounding per fma, then one f32 add into y. Rows with slot -1 are
//     not touched (bit-exact base output); nor are columns >= N of y.
//   So every value written for row i depends only on row i's data and its
//   slot's matrices: it is bit-identical whatever M is, whichever row the
//   data sits in, how rows group into segments, mixed vs single mode, and
//   the thread count. The AVX-512, AVX2 and scalar paths all compute exactly
//   this (the scalar path with std::fma), so results do not depend on the
//   ISA either. Note that this shrink order differs from Matmul's (one FMA
//   chain over k): a "one adapter" variant must call these kernels with
//   mixed == false, not Matmul, to stay bit-identical to the mixed variant.
//
// Threading: work is split over `pool` (nullptr, or a call too small to be
// worth a parallel region: run on the caller). Thread-compatible: concurrent
// calls are fine as long as their outputs do not overlap each other or their
// inputs. Each calling thread keeps a thread-local index of rows grouped by
// slot (O(M) ints); nothing else is allocated.
//
// Performance shape: rows are grouped by slot with a stable counting sort
// (prefill segments stay contiguous runs; decode rows of one slot, wherever
// they sit, join one group), and each group runs as a small GEMM so its
// slot's A / Bᵀ rows are reused from L1/L2 by all of the group's rows
// ("sgmv"; a group of one row is the per-token "bgmv" case). Register tiles:
// shrink up to 4 rows x 4 ranks on AVX-512 (16 zmm lane accumulators), 2x4
// on AVX2; expand up to 6 rows x 64 columns on AVX-512, 6x16 on AVX2.
#pragma once

#include <cstdint>

#include "runtime/base/status.h"
#include "runtime/base/thread_pool.h"
#include "runtime/kernels/cpu_isa.h"

namespace xrt {

struct LoraShrinkArgs {
  const float* x = nullptr;  // X [M][K], row stride ldx (>= K)
  int64_t ldx = 0;
  const float* a_slots = nullptr;  // [num_slots][rank][K]
  const int32_t* slots = nullptr;  // [M] (single mode: [0] only)
  float* buf = nullptr;            // out: [M][rank] f32, row stride ldbuf (>= rank)
  int64_t ldbuf = 0;
  int64_t m = 0, k = 0, rank = 0, num_slots = 0;
  bool mixed = true;
};

// buf[i][r] = dot(x[i][:], a_slots[slot(i)][r][:]); rows with slot -1 get 0.
// InvalidArgument (naming the row and the value; nothing written) when a slot
// index read is outside [-1, num_slots). Other preconditions (checked with
// assert only: the compiler guarantees them): sizes >= 0; ldx >= k;
// ldbuf >= rank; buf does not overlap x or a_slots. m == 0 or rank == 0 is a
// no-op; k == 0 gives buf = 0.
Status LoraShrink(const LoraShrinkArgs& args, ThreadPool* pool);

struct LoraExpandArgs {
  const float* buf = nullptr;  // [M][rank], row stride ldbuf (>= rank)
  int64_t ldbuf = 0;
  const float* bt_slots = nullptr;  // [num_slots][rank][N]
  const int32_t* slots = nullptr;   // [M] (single mode: [0] only)
  float* y = nullptr;               // in/out [M][N], row stride ldy (>= N)
  int64_t ldy = 0;
  int64_t m = 0, n = 0, rank = 0, num_slots = 0;
  bool mixed = true;
};

// y[i][:] += buf[i][:] · bt_slots[slot(i)]; rows with slot -1 are left
// untouched, and so are the columns of y past N (y may be a column slice of
// a wider fused output). InvalidArgument (naming the row and the value;
// nothing written) when a slot index read is outside [-1, num_slots). Other
// preconditions (assert only): sizes >= 0; ldbuf >= rank; ldy >= n; y does
// not overlap buf or bt_slots. m == 0, n == 0 or rank == 0 is a no-op.
Status LoraExpand(const LoraExpandArgs& args, ThreadPool* pool);

// The same on an explicit ISA path, which must satisfy CpuIsaSupported(isa).
// For tests and benchmarks.
Status LoraShrinkWithIsa(const LoraShrinkArgs& args, ThreadPool* pool, CpuIsa isa);
Status LoraExpandWithIsa(const LoraExpandArgs& args, ThreadPool* pool, CpuIsa isa);

}  // namespace xrt
