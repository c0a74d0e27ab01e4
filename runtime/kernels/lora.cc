#include "runtime/kernels/lora.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <vector>

#include "runtime/kernels/simd.h"

namespace xrt {
namespace {

// Most rows a shrink or expand register tile handles (the largest MR below).
constexpr int kMaxTileRows = 6;
// Ranks per shrink tile: the lane reduction folds four dot products at once.
constexpr int kShrinkRanks = 4;
// Lanes of the shrink dot product (see lora.h): one zmm, two ymm.
constexpr int kLanes = 16;

// A call runs on the caller unless it has at least this many flops or reads
// this many bytes of adapter weights: a parallel region costs a few
// microseconds, about what the kernels do in 2^18 flops, and a decode call
// (few rows) is bound by reading the slots' matrices from DRAM, which two
// threads do faster than one once there are more than ~64 KiB of them.
constexpr int64_t kMinParallelFlops = int64_t{1} << 18;
constexpr int64_t kMinParallelBytes = int64_t{1} << 16;

// One shrink register tile: `rows` rows x kShrinkRanks ranks over all of K.
// a[c] are the rank rows of A (a short last chunk repeats its last rank row;
// only `ranks` results are stored).
struct ShrinkTile {
  const float* x[kMaxTileRows];
  float* out[kMaxTileRows];  // buf row, at the chunk's first rank
  const float* a[kShrinkRanks];
  int64_t k;
  int ranks;  // 1..kShrinkRanks stored
};
using ShrinkFn = void (*)(const ShrinkTile&);

// One expand register tile: `rows` rows x one column block (the ISA's NR
// columns, `ncols` of them real) over all ranks.
struct ExpandTile {
  const float* buf[kMaxTileRows];
  float* y[kMaxTileRows];  // y row, at the block's first column
  const float* bt;         // the slot's Bᵀ, at the block's first column
  int64_t ldbt;            // N
  int64_t rank;
  int ncols;
};
using ExpandFn = void (*)(const ExpandTile&);

// The fixed lane tree of lora.h: s[j] + s[j+8], then +4, +2, +1.
inline float ReduceLanes(const float* s) {
  float t[8], u[4], v[2];
  for (int j = 0; j < 8; ++j) t[j] = s[j] + s[j + 8];
  for (int j = 0; j < 4; ++j) u[j] = t[j] + t[j + 4];
  for (int j = 0; j < 2; ++j) v[j] = u[j] + u[j + 2];
  return v[0] + v[1];
}

// ---------------------------------------------------------------- scalar --

constexpr int kScalarShrinkMR = 2;
constexpr int kScalarExpandMR = 4;
constexpr int kScalarExpandNR = 16;

template <int R>
void ShrinkScalar(const ShrinkTile& t) {
  float acc[R][kShrinkRanks][kLanes] = {};
  for (int64_t k0 = 0; k0 < t.k; k0 += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const int64_t k = k0 + j;
      const bool real = k < t.k;  // padded terms are 0·0, as in the SIMD paths
#pragma GCC unroll 8
      for (int c = 0; c < kShrinkRanks; ++c) {
        const float av = real ? t.a[c][k] : 0.0f;
#pragma GCC unroll 8
        for (int i = 0; i < R; ++i) {
          const float xv = real ? t.x[i][k] : 0.0f;
          acc[i][c][j] = std::fma(xv, av, acc[i][c][j]);
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
    for (int c = 0; c < t.ranks; ++c) t.out[i][c] = ReduceLanes(acc[i][c]);
}

template <int R>
void ExpandScalar(const ExpandTile& t) {
  float acc[R][kScalarExpandNR] = {};
  for (int64_t r = 0; r < t.rank; ++r) {
    const float* b = t.bt + r * t.ldbt;
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const float bv = t.buf[i][r];
      for (int j = 0; j < t.ncols; ++j) acc[i][j] = std::fma(bv, b[j], acc[i][j]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < t.ncols; ++j) t.y[i][j] = t.y[i][j] + acc[i][j];
}

#if defined(__x86_64__)

// ------------------------------------------------------------------ AVX2 --

constexpr int kAvx2ShrinkMR = 2;
constexpr int kAvx2ExpandMR = 6;
constexpr int kAvx2ExpandNR = 16;

// Steps 2-4 of the lane tree for four dot products at once, from their step-1
// sums t[0..8) (one ymm each): returns [dot_a, dot_b, dot_c, dot_d]. Every
// add pairs the same lanes as ReduceLanes.
XRT_TARGET_AVX2 inline __m128 ReduceFour(__m256 a, __m256 b, __m256 c, __m256 d) {
  // u[j] = t[j] + t[j+4]: [ua | ub] and [uc | ud].
  const __m256 ab =
      _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
  const __m256 cd =
      _mm256_add_ps(_mm256_permute2f128_ps(c, d, 0x20), _mm256_permute2f128_ps(c, d, 0x31));
  // v[j] = u[j] + u[j+2]: [va0 va1 vc0 vc1 | vb0 vb1 vd0 vd1].
  const __m256 v = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
  // dot = v[0] + v[1]: [a c a c | b d b d].
  const __m256 w = _mm256_add_ps(_mm256_shuffle_ps(v, v, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(v, v, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm_unpacklo_ps(_mm256_castps256_ps128(w), _mm256_extractf128_ps(w, 1));
}

XRT_TARGET_AVX2 inline void StoreRanks(float* out, __m128 v, int ranks) {
  if (ranks == kShrinkRanks) {
    _mm_storeu_ps(out, v);
    return;
  }
  alignas(16) float tmp[4];
  _mm_store_ps(tmp, v);
  for (int c = 0; c < ranks; ++c) out[c] = tmp[c];
}

// Lanes 0-7 and 8-15 of each dot product in two passes over K (8 ymm
// accumulators each, so nothing spills); step 1 of the tree adds the passes.
template <int R>
XRT_TARGET_AVX2 void ShrinkAvx2(const ShrinkTile& t) {
  __m256 half[2][R][kShrinkRanks];
  const int64_t k16 = t.k / kLanes * kLanes;
#pragma GCC unroll 8
  for (int h = 0; h < 2; ++h) {
    __m256 acc[R][kShrinkRanks];
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int c = 0; c < kShrinkRanks; ++c) acc[i][c] = _mm256_setzero_ps();
    const int64_t off = h * 8;
    for (int64_t k = 0; k < k16; k += kLanes) {
      __m256 av[kShrinkRanks];
#pragma GCC unroll 8
      for (int c = 0; c < kShrinkRanks; ++c) av[c] = _mm256_loadu_ps(t.a[c] + k + off);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256 xv = _mm256_loadu_ps(t.x[i] + k + off);
#pragma GCC unroll 8
        for (int c = 0; c < kShrinkRanks; ++c) acc[i][c] = _mm256_fmadd_ps(xv, av[c], acc[i][c]);
      }
    }
    if (k16 < t.k) {
      const __m256i m = TailMask8(t.k - k16 - off);
      __m256 av[kShrinkRanks];
#pragma GCC unroll 8
      for (int c = 0; c < kShrinkRanks; ++c) av[c] = _mm256_maskload_ps(t.a[c] + k16 + off, m);
#pragma GCC unroll 8
      for (int i = 0; i < R; ++i) {
        const __m256 xv = _mm256_maskload_ps(t.x[i] + k16 + off, m);
#pragma GCC unroll 8
        for (int c = 0; c < kShrinkRanks; ++c) acc[i][c] = _mm256_fmadd_ps(xv, av[c], acc[i][c]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
      for (int c = 0; c < kShrinkRanks; ++c) half[h][i][c] = acc[i][c];
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    __m256 s[kShrinkRanks];
#pragma GCC unroll 8
    for (int c = 0; c < kShrinkRanks; ++c) s[c] = _mm256_add_ps(half[0][i][c], half[1][i][c]);
    StoreRanks(t.out[i], ReduceFour(s[0], s[1], s[2], s[3]), t.ranks);
  }
}

template <int R>
XRT_TARGET_AVX2 void ExpandAvx2(const ExpandTile& t) {
  __m256 acc0[R], acc1[R];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  const __m256i m0 = TailMask8(t.ncols), m1 = TailMask8(t.ncols - 8);
  const bool full = t.ncols == kAvx2ExpandNR;
  for (int64_t r = 0; r < t.rank; ++r) {
    const float* b = t.bt + r * t.ldbt;
    const __m256 b0 = full ? _mm256_loadu_ps(b) : _mm256_maskload_ps(b, m0);
    const __m256 b1 = full ? _mm256_loadu_ps(b + 8) : _mm256_maskload_ps(b + 8, m1);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m256 bv = _mm256_broadcast_ss(t.buf[i] + r);
      acc0[i] = _mm256_fmadd_ps(bv, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(bv, b1, acc1[i]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    float* y = t.y[i];
    if (full) {
      _mm256_storeu_ps(y, _mm256_add_ps(_mm256_loadu_ps(y), acc0[i]));
      _mm256_storeu_ps(y + 8, _mm256_add_ps(_mm256_loadu_ps(y + 8), acc1[i]));
    } else {
      _mm256_maskstore_ps(y, m0, _mm256_add_ps(_mm256_maskload_ps(y, m0), acc0[i]));
      _mm256_maskstore_ps(y + 8, m1, _mm256_add_ps(_mm256_maskload_ps(y + 8, m1), acc1[i]));
    }
  }
}

// --------------------------------------------------------------- AVX-512 --

constexpr int kAvx512ShrinkMR = 4;
constexpr int kAvx512ExpandMR = 6;
constexpr int kAvx512ExpandNR = 64;

XRT_TARGET_AVX512 inline __mmask16 TailMask16(int64_t n) {
  // Lanes [0, n) set, n clamped to [0, 16].
  if (n >= 16) return 0xFFFF;
  if (n <= 0) return 0;
  return static_cast<__mmask16>((1u << n) - 1);
}

// One zmm accumulator per dot product (lane j = lane j of lora.h), R x 4 of
// them; step 1 of the tree adds the two 256-bit halves.
template <int R>
XRT_TARGET_AVX512 void ShrinkAvx512(const ShrinkTile& t) {
  __m512 acc[R][kShrinkRanks];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int c = 0; c < kShrinkRanks; ++c) acc[i][c] = _mm512_setzero_ps();
  const int64_t k16 = t.k / kLanes * kLanes;
  for (int64_t k = 0; k < k16; k += kLanes) {
    __m512 av[kShrinkRanks];
#pragma GCC unroll 8
    for (int c = 0; c < kShrinkRanks; ++c) av[c] = _mm512_loadu_ps(t.a[c] + k);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 xv = _mm512_loadu_ps(t.x[i] + k);
#pragma GCC unroll 8
      for (int c = 0; c < kShrinkRanks; ++c) acc[i][c] = _mm512_fmadd_ps(xv, av[c], acc[i][c]);
    }
  }
  if (k16 < t.k) {
    const __mmask16 m = TailMask16(t.k - k16);
    __m512 av[kShrinkRanks];
#pragma GCC unroll 8
    for (int c = 0; c < kShrinkRanks; ++c) av[c] = _mm512_maskz_loadu_ps(m, t.a[c] + k16);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, t.x[i] + k16);
#pragma GCC unroll 8
      for (int c = 0; c < kShrinkRanks; ++c) acc[i][c] = _mm512_fmadd_ps(xv, av[c], acc[i][c]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
    __m256 s[kShrinkRanks];
#pragma GCC unroll 8
    for (int c = 0; c < kShrinkRanks; ++c) {
      // (maskz extracts: GCC 12 warns about the undefined source operand of
      // the plain cast / extract.)
      s[c] = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xFF, acc[i][c], 0),
                           _mm512_maskz_extractf32x8_ps(0xFF, acc[i][c], 1));
    }
    const __m128 dots = ReduceFour(s[0], s[1], s[2], s[3]);
    _mm_mask_storeu_ps(t.out[i], static_cast<__mmask8>((1u << t.ranks) - 1), dots);
  }
}

template <int R>
XRT_TARGET_AVX512 void ExpandAvx512(const ExpandTile& t) {
  constexpr int kVecs = kAvx512ExpandNR / 16;
  __m512 acc[R][kVecs];
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) acc[i][v] = _mm512_setzero_ps();
  __mmask16 m[kVecs];
#pragma GCC unroll 8
  for (int v = 0; v < kVecs; ++v) m[v] = TailMask16(t.ncols - 16 * v);
  for (int64_t r = 0; r < t.rank; ++r) {
    const float* b = t.bt + r * t.ldbt;
    __m512 bv[kVecs];
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) bv[v] = _mm512_maskz_loadu_ps(m[v], b + 16 * v);
#pragma GCC unroll 8
    for (int i = 0; i < R; ++i) {
      const __m512 s = _mm512_set1_ps(t.buf[i][r]);
#pragma GCC unroll 8
      for (int v = 0; v < kVecs; ++v) acc[i][v] = _mm512_fmadd_ps(s, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < R; ++i) {
#pragma GCC unroll 8
    for (int v = 0; v < kVecs; ++v) {
      float* y = t.y[i] + 16 * v;
      _mm512_mask_storeu_ps(y, m[v], _mm512_add_ps(_mm512_maskz_loadu_ps(m[v], y), acc[i][v]));
    }
  }
}

#endif  // __x86_64__

// Per-ISA tile functions, indexed by row count 1..MR.
struct LoraKernels {
  int shrink_mr;
  ShrinkFn shrink[kMaxTileRows + 1];
  int expand_mr;
  int expand_nr;
  ExpandFn expand[kMaxTileRows + 1];
};

LoraKernels MakeScalarKernels() {
  LoraKernels k{kScalarShrinkMR, {}, kScalarExpandMR, kScalarExpandNR, {}};
  k.shrink[1] = &ShrinkScalar<1>;
  k.shrink[2] = &ShrinkScalar<2>;
  k.expand[1] = &ExpandScalar<1>;
  k.expand[2] = &ExpandScalar<2>;
  k.expand[3] = &ExpandScalar<3>;
  k.expand[4] = &ExpandScalar<4>;
  return k;
}

#if defined(__x86_64__)
LoraKernels MakeAvx2Kernels() {
  LoraKernels k{kAvx2ShrinkMR, {}, kAvx2ExpandMR, kAvx2ExpandNR, {}};
  k.shrink[1] = &ShrinkAvx2<1>;
  k.shrink[2] = &ShrinkAvx2<2>;
  k.expand[1] = &ExpandAvx2<1>;
  k.expand[2] = &ExpandAvx2<2>;
  k.expand[3] = &ExpandAvx2<3>;
  k.expand[4] = &ExpandAvx2<4>;
  k.expand[5] = &ExpandAvx2<5>;
  k.expand[6] = &ExpandAvx2<6>;
  return k;
}

LoraKernels MakeAvx512Kernels() {
  LoraKernels k{kAvx512ShrinkMR, {}, kAvx512ExpandMR, kAvx512ExpandNR, {}};
  k.shrink[1] = &ShrinkAvx512<1>;
  k.shrink[2] = &ShrinkAvx512<2>;
  k.shrink[3] = &ShrinkAvx512<3>;
  k.shrink[4] = &ShrinkAvx512<4>;
  k.expand[1] = &ExpandAvx512<1>;
  k.expand[2] = &ExpandAvx512<2>;
  k.expand[3] = &ExpandAvx512<3>;
  k.expand[4] = &ExpandAvx512<4>;
  k.expand[5] = &ExpandAvx512<5>;
  k.expand[6] = &ExpandAvx512<6>;
  return k;
}
#endif

const LoraKernels& KernelsFor(CpuIsa isa) {
  static const LoraKernels scalar = MakeScalarKernels();
#if defined(__x86_64__)
  static const LoraKernels avx2 = MakeAvx2Kernels();
  static const LoraKernels avx512 = MakeAvx512Kernels();
  if (IsaAtLeast(isa, CpuIsa::kAvx512)) return avx512;
  if (isa == CpuIsa::kAvx2) return avx2;
#endif
  return scalar;
}

Status CheckSlots(const char* kernel, const int32_t* slots, int64_t m, int64_t num_slots,
                  bool mixed) {
  const int64_t read = mixed ? m : std::min<int64_t>(m, 1);
  for (int64_t i = 0; i < read; ++i) {
    if (slots[i] < -1 || slots[i] >= num_slots) {
      return InvalidArgumentError("{}: row {} has slot index {}, outside [-1, {})", kernel, i,
                                  slots[i], num_slots);
    }
  }
  return Status::Ok();
}

// A run of up to MR rows of one slot group: rows[first .. first+height) of
// RowPlan::rows.
struct PlanTile {
  int32_t slot;
  int32_t first;
  int32_t height;
};

// The rows of one call grouped by slot (stable counting sort, so a prefill
// segment stays a contiguous run), cut into register tiles.
struct RowPlan {
  std::vector<int32_t> rows;       // rows with a slot >= 0, grouped by slot
  std::vector<int32_t> base_rows;  // rows with slot -1
  std::vector<PlanTile> tiles;
  int64_t groups = 0;         // distinct slots with rows (each read once per call)
  std::vector<int64_t> next;  // counting-sort scratch, [num_slots + 1]
};

RowPlan& ThreadPlan() {
  thread_local RowPlan plan;
  return plan;
}

// Groups [0, m) by slot (already validated) and cuts each group into
// ceil(size / mr) tiles of near-equal height (11 rows with mr = 4 are 4+4+3,
// 9 rows are 3+3+3, not 4+4+1: tile heights never change results).
void PlanRows(const int32_t* slots, int64_t m, int64_t num_slots, bool mixed, int mr,
              RowPlan* plan) {
  assert(m <= INT32_MAX);
  plan->rows.clear();
  plan->base_rows.clear();
  plan->tiles.clear();
  plan->groups = 0;
  auto add_tiles = [&](int32_t slot, int64_t first, int64_t count) {
    const int64_t tiles = (count + mr - 1) / mr;
    const int64_t base = count / tiles, extra = count % tiles;
    int64_t at = first;
    for (int64_t j = 0; j < tiles; ++j) {
      const int64_t h = base + (j < extra ? 1 : 0);
      plan->tiles.push_back({slot, static_cast<int32_t>(at), static_cast<int32_t>(h)});
      at += h;
    }
  };
  if (!mixed) {
    std::vector<int32_t>& dst = slots[0] < 0 ? plan->base_rows : plan->rows;
    dst.resize(m);
    for (int64_t i = 0; i < m; ++i) dst[i] = static_cast<int32_t>(i);
    if (slots[0] >= 0) {
      add_tiles(slots[0], 0, m);
      plan->groups = 1;
    }
    return;
  }
  // next[s] = where slot s's rows go in `rows` (a stable counting sort).
  std::vector<int64_t>& next = plan->next;
  next.assign(num_slots + 1, 0);
  for (int64_t i = 0; i < m; ++i)
    if (slots[i] >= 0) ++next[slots[i] + 1];
  for (int64_t s = 1; s <= num_slots; ++s) next[s] += next[s - 1];
  plan->rows.resize(next[num_slots]);
  for (int64_t i = 0; i < m; ++i) {
    if (slots[i] < 0) {
      plan->base_rows.push_back(static_cast<int32_t>(i));
    } else {
      plan->rows[next[slots[i]]++] = static_cast<int32_t>(i);
    }
  }
  // next[s] is now the end of slot s's rows.
  int64_t begin = 0;
  for (int64_t s = 0; s < num_slots; ++s) {
    if (next[s] > begin) {
      add_tiles(static_cast<int32_t>(s), begin, next[s] - begin);
      ++plan->groups;
    }
    begin = next[s];
  }
}

// Runs units [0, units) of a call on `pool` when it is worth a parallel
// region (more than one unit, and kMinParallelFlops or kMinParallelBytes),
// else inline.
template <typename Fn>
void RunUnits(int64_t units, int64_t flops, int64_t weight_bytes, ThreadPool* pool, const Fn& run) {
  if (flops < kMinParallelFlops && weight_bytes < kMinParallelBytes) {
    run(int64_t{0}, units);
    return;
  }
  ParallelForUnits(pool, units, run);
}

}  // namespace

Status LoraShrinkWithIsa(const LoraShrinkArgs& args, ThreadPool* pool, CpuIsa isa) {
  assert(CpuIsaSupported(isa));
  assert(args.m >= 0 && args.k >= 0 && args.rank >= 0 && args.num_slots >= 0);
  assert(args.ldx >= args.k || args.m <= 1);
  assert(args.ldbuf >= args.rank || args.m <= 1);
  if (args.m <= 0 || args.rank <= 0) return Status::Ok();
  if (Status st = CheckSlots("lora shrink", args.slots, args.m, args.num_slots, args.mixed);
      !st.ok()) {
    return st;
  }
  const LoraKernels& kern = KernelsFor(isa);
  RowPlan& plan = ThreadPlan();
  PlanRows(args.slots, args.m, args.num_slots, args.mixed, kern.shrink_mr, &plan);
  for (int32_t row : plan.base_rows) std::fill_n(args.buf + row * args.ldbuf, args.rank, 0.0f);
  if (plan.tiles.empty()) return Status::Ok();

  // Unit = (tile, chunk of kShrinkRanks ranks), chunk fastest so a tile's x
  // rows stay in L1 across its chunks.
  const int64_t chunks = (args.rank + kShrinkRanks - 1) / kShrinkRanks;
  const int64_t units = static_cast<int64_t>(plan.tiles.size()) * chunks;
  const int32_t* rows = plan.rows.data();
  const PlanTile* tiles = plan.tiles.data();
  auto run = [&](int64_t u0, int64_t u1) {
    ShrinkTile t;
    t.k = args.k;
    for (int64_t u = u0; u < u1; ++u) {
      const PlanTile& tile = tiles[u / chunks];
      const int64_t r0 = (u % chunks) * kShrinkRanks;
      t.ranks = static_cast<int>(std::min<int64_t>(kShrinkRanks, args.rank - r0));
      const float* a = args.a_slots + (tile.slot * args.rank + r0) * args.k;
      for (int c = 0; c < kShrinkRanks; ++c) t.a[c] = a + std::min(c, t.ranks - 1) * args.k;
      for (int i = 0; i < tile.height; ++i) {
        const int64_t row = rows[tile.first + i];
        t.x[i] = args.x + row * args.ldx;
        t.out[i] = args.buf + row * args.ldbuf + r0;
      }
      kern.shrink[tile.height](t);
    }
  };
  const int64_t active = static_cast<int64_t>(plan.rows.size());
  RunUnits(units, 2 * active * args.k * args.rank, plan.groups * args.rank * args.k * 4, pool, run);
  return Status::Ok();
}

Status LoraExpandWithIsa(const LoraExpandArgs& args, ThreadPool* pool, CpuIsa isa) {
  assert(CpuIsaSupported(isa));
  assert(args.m >= 0 && args.n >= 0 && args.rank >= 0 && args.num_slots >= 0);
  assert(args.ldbuf >= args.rank || args.m <= 1);
  assert(args.ldy >= args.n || args.m <= 1);
  if (args.m <= 0 || args.n <= 0 || args.rank <= 0) return Status::Ok();
  if (Status st = CheckSlots("lora expand", args.slots, args.m, args.num_slots, args.mixed);
      !st.ok()) {
    return st;
  }
  const LoraKernels& kern = KernelsFor(isa);
  RowPlan& plan = ThreadPlan();
  PlanRows(args.slots, args.m, args.num_slots, args.mixed, kern.expand_mr, &plan);
  if (plan.tiles.empty()) return Status::Ok();

  // Unit = (tile, column block), column block fastest: a tile walks each
  // rank row of its slot's Bᵀ front to back (rank sequential streams, which
  // the hardware prefetchers follow from DRAM in decode calls); the tiles of
  // a prefill segment then find the slot's Bᵀ (rank x N floats) in L2.
  const int nr = kern.expand_nr;
  const int64_t col_blocks = (args.n + nr - 1) / nr;
  const int64_t num_tiles = static_cast<int64_t>(plan.tiles.size());
  const int32_t* rows = plan.rows.data();
  const PlanTile* tiles = plan.tiles.data();
  auto run = [&](int64_t u0, int64_t u1) {
    ExpandTile t;
    t.ldbt = args.n;
    t.rank = args.rank;
    for (int64_t u = u0; u < u1; ++u) {
      const PlanTile& tile = tiles[u / col_blocks];
      const int64_t c0 = (u % col_blocks) * nr;
      t.ncols = static_cast<int>(std::min<int64_t>(nr, args.n - c0));
      t.bt = args.bt_slots + tile.slot * args.rank * args.n + c0;
      for (int i = 0; i < tile.height; ++i) {
        const int64_t row = rows[tile.first + i];
        t.buf[i] = args.buf + row * args.ldbuf;
        t.y[i] = args.y + row * args.ldy + c0;
      }
      kern.expand[tile.height](t);
    }
  };
  const int64_t active = static_cast<int64_t>(plan.rows.size());
  RunUnits(num_tiles * col_blocks, 2 * active * args.rank * args.n,
           plan.groups * args.rank * args.n * 4, pool, run);
  return Status::Ok();
}

Status LoraShrink(const LoraShrinkArgs& args, ThreadPool* pool) {
  static const CpuIsa isa = BestCpuIsa();
  return LoraShrinkWithIsa(args, pool, isa);
}

Status LoraExpand(const LoraExpandArgs& args, ThreadPool* pool) {
  static const CpuIsa isa = BestCpuIsa();
  return LoraExpandWithIsa(args, pool, isa);
}

}  // namespace xrt
