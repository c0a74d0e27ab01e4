#include "runtime/kernels/matmul.h"

#include <algorithm>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace xrt {

int64_t PackedWeightFloats(int64_t N, int64_t K) {
  return (N + kPackNR - 1) / kPackNR * kPackNR * K;
}

void PackWeights(const float* w, int64_t N, int64_t K, float* out) {
  const int64_t panels = (N + kPackNR - 1) / kPackNR;
  for (int64_t p = 0; p < panels; ++p) {
    float* panel = out + p * kPackNR * K;
    for (int j = 0; j < kPackNR; ++j) {
      const int64_t row = p * kPackNR + j;
      if (row < N) {
        const float* src = w + row * K;
        for (int64_t k = 0; k < K; ++k) panel[k * kPackNR + j] = src[k];
      } else {
        for (int64_t k = 0; k < K; ++k) panel[k * kPackNR + j] = 0.0f;
      }
    }
  }
}

namespace {

// One call runs an R x kPackNR tile (R <= the ISA's MR) of C from R rows of A
// and one packed panel over one range of K (a k-block). The running sums of
// a tile live in registers within a k-block and in `partial` ([R][kPackNR])
// between k-blocks: an exact f32 store and reload, so every element still
// sees one unbroken FMA chain over k = 0..K-1. The R rows of A come packed
// k-major, a[kk*R + i] = A[row0 + i][kk], so the kernel reads one sequential
// stream (row-major A with a power-of-two stride would map all rows of a
// tile to the same L1 set). `ncols` (1..kPackNR) is how many of the panel's
// columns are real (and stored); `bias` points at the panel's first column
// (or is null) and is read only for real columns.
struct TileArgs {
  const float* a;      // packed [k][R], at this k-block
  const float* panel;  // packed [k][kPackNR], at this k-block
  int64_t k;           // length of the k-block
  float* partial;      // [R][kPackNR] running sums between k-blocks
  bool first;          // first k-block: start from 0, not from `partial`
  bool last;           // last k-block: finish into C, else save to `partial`
  // L2 prefetch of the next k-block (which follows this one in memory, the
  // next panel's first block after a panel's last): this tile's share of it,
  // [pf, pf_end), `pf_step` bytes (64 or 128) per k-step. Spreading the next
  // block over all row tiles keeps DRAM busy during every pass over the
  // block, not only the first (decode shapes are bandwidth bound).
  const char* pf;
  const char* pf_end;
  int pf_step;
  const float* bias;
  float* c;  // first row of the tile, first column of the panel
  int64_t ldc;
  int ncols;
  bool accumulate;
};
using TileFn = void (*)(const TileArgs&);

// ---------------------------------------------------------------- scalar --

constexpr int kScalarMR = 4;

template <int R>
void TileScalar(const TileArgs& t) {
  float acc[R][kPackNR];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < kPackNR; ++j) acc[i][j] = t.first ? 0.0f : t.partial[i * kPackNR + j];
  for (int64_t kk = 0; kk < t.k; ++kk) {
    const float* b = t.panel + kk * kPackNR;
    for (int i = 0; i < R; ++i) {
      const float av = t.a[kk * R + i];
      for (int j = 0; j < kPackNR; ++j) acc[i][j] = std::fma(av, b[j], acc[i][j]);
    }
  }
  if (!t.last) {
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < kPackNR; ++j) t.partial[i * kPackNR + j] = acc[i][j];
    return;
  }
  for (int i = 0; i < R; ++i) {
    float* c = t.c + i * t.ldc;
    for (int j = 0; j < t.ncols; ++j) {
      float v = acc[i][j];
      if (t.bias) v = v + t.bias[j];
      if (t.accumulate) v = c[j] + v;
      c[j] = v;
    }
  }
}

#if defined(__x86_64__)

// ------------------------------------------------------------------ AVX2 --
// R x 16 half-panel tiles (2 ymm per row, R <= 6 -> 12 accumulators), run
// twice per panel. The per-element FMA chain is the same as the other paths.

constexpr int kAvx2MR = 6;

#define XRT_TARGET_AVX2 __attribute__((target("avx2,fma")))

XRT_TARGET_AVX2 inline __m256i Avx2TailMask(int n) {
  // Lanes [0, n) set, n in [0, 8].
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

template <int R>
XRT_TARGET_AVX2 void TileAvx2(const TileArgs& t) {
  for (int half = 0; half < 2; ++half) {
    const int cols = std::min(16, t.ncols - half * 16);
    if (cols <= 0) break;
    const float* b = t.panel + half * 16;
    __m256 acc0[R], acc1[R];
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      if (t.first) {
        acc0[i] = _mm256_setzero_ps();
        acc1[i] = _mm256_setzero_ps();
      } else {
        acc0[i] = _mm256_loadu_ps(t.partial + i * kPackNR + half * 16);
        acc1[i] = _mm256_loadu_ps(t.partial + i * kPackNR + half * 16 + 8);
      }
    }
    const float* a = t.a;
    for (int64_t kk = 0; kk < t.k; ++kk) {
      const __m256 b0 = _mm256_loadu_ps(b + kk * kPackNR);
      const __m256 b1 = _mm256_loadu_ps(b + kk * kPackNR + 8);
#pragma GCC unroll 6
      for (int i = 0; i < R; ++i) {
        const __m256 av = _mm256_broadcast_ss(a + kk * R + i);
        acc0[i] = _mm256_fmadd_ps(av, b0, acc0[i]);
        acc1[i] = _mm256_fmadd_ps(av, b1, acc1[i]);
      }
    }
    if (!t.last) {
#pragma GCC unroll 6
      for (int i = 0; i < R; ++i) {
        _mm256_storeu_ps(t.partial + i * kPackNR + half * 16, acc0[i]);
        _mm256_storeu_ps(t.partial + i * kPackNR + half * 16 + 8, acc1[i]);
      }
      continue;
    }
    const __m256i m0 = Avx2TailMask(std::min(cols, 8));
    const __m256i m1 = Avx2TailMask(std::max(cols - 8, 0));
    __m256 bias0 = _mm256_setzero_ps(), bias1 = _mm256_setzero_ps();
    if (t.bias) {
      bias0 = _mm256_maskload_ps(t.bias + half * 16, m0);
      bias1 = _mm256_maskload_ps(t.bias + half * 16 + 8, m1);
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; ++i) {
      float* c = t.c + i * t.ldc + half * 16;
      __m256 v0 = acc0[i], v1 = acc1[i];
      if (t.bias) {
        v0 = _mm256_add_ps(v0, bias0);
        v1 = _mm256_add_ps(v1, bias1);
      }
      if (t.accumulate) {
        v0 = _mm256_add_ps(_mm256_maskload_ps(c, m0), v0);
        v1 = _mm256_add_ps(_mm256_maskload_ps(c + 8, m1), v1);
      }
      if (cols == 16) {
        _mm256_storeu_ps(c, v0);
        _mm256_storeu_ps(c + 8, v1);
      } else {
        _mm256_maskstore_ps(c, m0, v0);
        _mm256_maskstore_ps(c + 8, m1, v1);
      }
    }
  }
}

// --------------------------------------------------------------- AVX-512 --
// R x 32 tiles (2 zmm per row, R <= 14 -> 28 accumulators); A values are
// broadcast straight from memory (embedded broadcast operands of the FMAs).

constexpr int kAvx512MR = 14;
// Software prefetch distances in k-steps (one k-step = 128 bytes of panel).
constexpr int kPrefetchL1Steps = 16;
constexpr int kPrefetchL2Steps = 128;  // single-tile blocks (M = 1 decode)

#define XRT_TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")))

template <int R>
XRT_TARGET_AVX512 void TileAvx512(const TileArgs& t) {
  __m512 acc0[R], acc1[R];
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) {
    if (t.first) {
      acc0[i] = _mm512_setzero_ps();
      acc1[i] = _mm512_setzero_ps();
    } else {
      acc0[i] = _mm512_loadu_ps(t.partial + i * kPackNR);
      acc1[i] = _mm512_loadu_ps(t.partial + i * kPackNR + 16);
    }
  }
  const float* a = t.a;
  const float* b = t.panel;
  const char* pf = t.pf;
  for (int64_t kk = 0; kk < t.k; ++kk) {
    const __m512 b0 = _mm512_loadu_ps(b);
    const __m512 b1 = _mm512_loadu_ps(b + 16);
    // L1 prefetch a little ahead (not for one-row tiles: that loop is pure
    // streaming, the hardware prefetcher keeps up and extra requests only
    // take fill buffers), and this tile's share of the next k-block into L2.
    if (R > 1) {
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchL1Steps * kPackNR), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchL1Steps * kPackNR + 16), _MM_HINT_T0);
    }
    if (R == 1) {
      // Same as the single-tile plan below, without the bookkeeping: this
      // loop is short enough that the extra compare and branch cost ~10% of
      // DRAM bandwidth at M = 1.
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchL2Steps * kPackNR), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchL2Steps * kPackNR + 16), _MM_HINT_T1);
    } else if (pf < t.pf_end) {
      _mm_prefetch(pf, _MM_HINT_T1);
      if (t.pf_step > 64) _mm_prefetch(pf + 64, _MM_HINT_T1);
      pf += t.pf_step;
    }
    b += kPackNR;
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      const __m512 av = _mm512_set1_ps(a[i]);
      acc0[i] = _mm512_fmadd_ps(av, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(av, b1, acc1[i]);
    }
    a += R;
  }
  if (!t.last) {
#pragma GCC unroll 14
    for (int i = 0; i < R; ++i) {
      _mm512_storeu_ps(t.partial + i * kPackNR, acc0[i]);
      _mm512_storeu_ps(t.partial + i * kPackNR + 16, acc1[i]);
    }
    return;
  }
  const int ncols = t.ncols;
  const __mmask16 m0 = ncols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << ncols) - 1);
  const __mmask16 m1 = ncols >= 32  ? __mmask16(0xFFFF)
                       : ncols > 16 ? __mmask16((1u << (ncols - 16)) - 1)
                                    : __mmask16(0);
  __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
  if (t.bias) {
    bias0 = _mm512_maskz_loadu_ps(m0, t.bias);
    bias1 = _mm512_maskz_loadu_ps(m1, t.bias + 16);
  }
#pragma GCC unroll 14
  for (int i = 0; i < R; ++i) {
    float* c = t.c + i * t.ldc;
    __m512 v0 = acc0[i], v1 = acc1[i];
    if (t.bias) {
      v0 = _mm512_add_ps(v0, bias0);
      v1 = _mm512_add_ps(v1, bias1);
    }
    if (t.accumulate) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + 16), v1);
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
  }
}

#endif  // __x86_64__

// Per-ISA table: tile functions indexed by row count 1..MR.
struct IsaKernels {
  int mr;
  TileFn tiles[16];  // tiles[r] computes r rows; [0] unused
};

IsaKernels MakeScalarKernels() {
  IsaKernels k{kScalarMR, {}};
  k.tiles[1] = &TileScalar<1>;
  k.tiles[2] = &TileScalar<2>;
  k.tiles[3] = &TileScalar<3>;
  k.tiles[4] = &TileScalar<4>;
  return k;
}

#if defined(__x86_64__)
IsaKernels MakeAvx2Kernels() {
  IsaKernels k{kAvx2MR, {}};
  k.tiles[1] = &TileAvx2<1>;
  k.tiles[2] = &TileAvx2<2>;
  k.tiles[3] = &TileAvx2<3>;
  k.tiles[4] = &TileAvx2<4>;
  k.tiles[5] = &TileAvx2<5>;
  k.tiles[6] = &TileAvx2<6>;
  return k;
}

IsaKernels MakeAvx512Kernels() {
  IsaKernels k{kAvx512MR, {}};
  k.tiles[1] = &TileAvx512<1>;
  k.tiles[2] = &TileAvx512<2>;
  k.tiles[3] = &TileAvx512<3>;
  k.tiles[4] = &TileAvx512<4>;
  k.tiles[5] = &TileAvx512<5>;
  k.tiles[6] = &TileAvx512<6>;
  k.tiles[7] = &TileAvx512<7>;
  k.tiles[8] = &TileAvx512<8>;
  k.tiles[9] = &TileAvx512<9>;
  k.tiles[10] = &TileAvx512<10>;
  k.tiles[11] = &TileAvx512<11>;
  k.tiles[12] = &TileAvx512<12>;
  k.tiles[13] = &TileAvx512<13>;
  k.tiles[14] = &TileAvx512<14>;
  return k;
}
#endif

const IsaKernels& KernelsFor(CpuIsa isa) {
  static const IsaKernels scalar = MakeScalarKernels();
#if defined(__x86_64__)
  static const IsaKernels avx2 = MakeAvx2Kernels();
  static const IsaKernels avx512 = MakeAvx512Kernels();
  if (isa == CpuIsa::kAvx512) return avx512;
  if (isa == CpuIsa::kAvx2) return avx2;
#endif
  return scalar;
}

// Rows of A kept hot in L2 while the panels stream past them: a block of
// rows_per_block x K floats is sized to about half of a 2 MiB L2.
constexpr int64_t kABlockBytes = 1 << 20;

// Row tiles of a block: ceil(rows / mr) tiles whose heights differ by at
// most one (128 rows with mr = 14 are 8 tiles of 13 and 2 of 12, not 9 of 14
// and a slow tile of 2). Tile heights do not affect results: each element's
// FMA chain is the same in every tile kernel.
struct RowTiling {
  RowTiling(int64_t rows, int mr)
      : count((rows + mr - 1) / mr), base(rows / count), extra(rows % count) {}
  int Height(int64_t j) const { return static_cast<int>(base + (j < extra ? 1 : 0)); }
  int64_t Start(int64_t j) const { return j * base + std::min(j, extra); }
  int64_t count, base, extra;
};

// Packs rows [r0, r1) of A into the row tiles of RowTiling(r1 - r0, mr):
// tile j starts at out + Start(j)*k and is [k][Height(j)].
void PackRows(const float* a, int64_t lda, int64_t r0, int64_t r1, int64_t k, int mr, float* out) {
  const RowTiling tiling(r1 - r0, mr);
  for (int64_t j = 0; j < tiling.count; ++j) {
    const int rows = tiling.Height(j);
    const int64_t r = r0 + tiling.Start(j);
    float* tile = out + (r - r0) * k;
    // 16 columns (one cache line of each row) at a time.
    for (int64_t k0 = 0; k0 < k; k0 += 16) {
      const int64_t k1 = std::min(k, k0 + 16);
      for (int i = 0; i < rows; ++i) {
        const float* src = a + (r + i) * lda;
        for (int64_t kk = k0; kk < k1; ++kk) tile[kk * rows + i] = src[kk];
      }
    }
  }
}

// k-block length: one k-block of a panel (kKBlock x 128 bytes) stays in L1
// while every row tile of the block runs over it, so the panel comes from
// L2 (or DRAM) once per block instead of once per row tile.
constexpr int64_t kKBlock = 256;

// Per-thread packed row block of A (grows to the largest block seen, about
// kABlockBytes, and lives as long as the thread). Tagged with the Matmul call
// and block it holds, so a thread that runs several chunks of one call packs
// each block once.
struct PackedBlock {
  uint64_t call = 0;
  int64_t block = -1;
  std::vector<float> data;
};
PackedBlock& ThreadPackedBlock() {
  thread_local PackedBlock packed;
  return packed;
}
std::atomic<uint64_t> g_matmul_calls{0};

// Per-thread running sums of the row tiles between k-blocks.
std::vector<float>& PartialBuffer() {
  thread_local std::vector<float> buffer;
  return buffer;
}

}  // namespace

void MatmulWithIsa(const MatmulArgs& args, ThreadPool* pool, CpuIsa isa) {
  assert(CpuIsaSupported(isa));
  assert(args.m >= 0 && args.n >= 0 && args.k >= 0);
  assert(args.lda >= args.k || args.m <= 1);
  assert(args.ldc >= args.n || args.m <= 1);
  if (args.m <= 0 || args.n <= 0) return;

  const IsaKernels& kern = KernelsFor(isa);
  const int mr = kern.mr;
  const int64_t m = args.m, n = args.n, k = args.k;
  const int64_t panels = (n + kPackNR - 1) / kPackNR;

  // Row blocks: whole multiples of mr, sized so a block of A fits in L2.
  int64_t block_rows = std::max<int64_t>(1, kABlockBytes / (std::max<int64_t>(k, 1) * 4));
  block_rows = std::max<int64_t>(mr, block_rows / mr * mr);
  if (block_rows >= m) block_rows = m;
  const int64_t blocks = (m + block_rows - 1) / block_rows;

  // Work unit = (row block, panel), panel-fastest so consecutive units of a
  // chunk reuse the packed row block from L2.
  const int64_t units = blocks * panels;
  const uint64_t call = g_matmul_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  auto run_units = [&](int64_t u0, int64_t u1) {
    TileArgs t;
    t.ldc = args.ldc;
    t.accumulate = args.accumulate;
    int64_t current_block = -1;
    const float* block_a = nullptr;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t blk = u / panels, p = u % panels;
      const int64_t r0 = blk * block_rows;
      const int64_t r1 = std::min(m, r0 + block_rows);
      if (blk != current_block) {
        if (r1 - r0 == 1) {
          block_a = args.a + r0 * args.lda;  // one row is already [K][1]
        } else {
          PackedBlock& packed = ThreadPackedBlock();
          if (packed.call != call || packed.block != blk) {
            if (packed.data.size() < static_cast<size_t>((r1 - r0) * k)) {
              packed.data.resize((r1 - r0) * k);
            }
            PackRows(args.a, args.lda, r0, r1, k, mr, packed.data.data());
            packed.call = call;
            packed.block = blk;
          }
          block_a = packed.data.data();
        }
        current_block = blk;
      }
      const int64_t col0 = p * kPackNR;
      t.bias = args.bias ? args.bias + col0 : nullptr;
      t.ncols = static_cast<int>(std::min<int64_t>(kPackNR, n - col0));
      const float* panel = args.packed_w + p * kPackNR * k;
      const RowTiling tiling(r1 - r0, mr);
      const int64_t k_blocks = std::max<int64_t>(1, (k + kKBlock - 1) / kKBlock);
      float* partial = nullptr;
      if (k_blocks > 1) {
        std::vector<float>& buf = PartialBuffer();
        if (buf.size() < static_cast<size_t>((r1 - r0) * kPackNR)) buf.resize((r1 - r0) * kPackNR);
        partial = buf.data();
      }
      // L2 prefetch plan. One row tile: a fixed distance ahead of its loads
      // (measured best for M = 1). Several: each prefetches 1/count of the
      // next k-block (kKBlock*128 bytes), one or two lines per k-step.
      const int64_t next_lines = kKBlock * kPackNR * 4 / 64;
      const int64_t share = (next_lines + tiling.count - 1) / tiling.count;
      for (int64_t kb = 0; kb < k_blocks; ++kb) {
        const int64_t k0 = kb * kKBlock;
        t.k = std::min(kKBlock, k - k0);
        t.first = kb == 0;
        t.last = kb == k_blocks - 1;
        t.panel = panel + k0 * kPackNR;
        const char* next = reinterpret_cast<const char*>(t.panel + t.k * kPackNR);
        t.pf_step = tiling.count == 1 || share > t.k ? 128 : 64;
        for (int64_t j = 0; j < tiling.count; ++j) {
          const int64_t start = tiling.Start(j);
          const int rows = tiling.Height(j);
          t.a = block_a + start * k + k0 * rows;
          t.partial = partial ? partial + start * kPackNR : nullptr;
          t.c = args.c + (r0 + start) * args.ldc + col0;
          if (tiling.count == 1) {
            t.pf = reinterpret_cast<const char*>(t.panel + kPrefetchL2Steps * kPackNR);
            t.pf_end = t.pf + t.k * kPackNR * 4;
          } else {
            t.pf = next + j * share * 64;
            t.pf_end = t.pf + share * 64;
          }
          kern.tiles[rows](t);
        }
      }
    }
  };

  const int threads = pool ? pool->num_threads() : 1;
  if (threads <= 1 || units == 1) {
    run_units(0, units);
    return;
  }
  // A few chunks per thread so a thread that gets descheduled (the machine
  // is shared) does not hold up the region; chunks stay contiguous in units.
  const int64_t grain = std::max<int64_t>(1, units / (4 * threads));
  pool->ParallelForGrain(units, grain, run_units);
}

void Matmul(const MatmulArgs& args, ThreadPool* pool) { MatmulWithIsa(args, pool, BestCpuIsa()); }

}  // namespace xrt
