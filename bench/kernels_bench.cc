// Microbenchmarks of the runtime kernels (xrt_kernels), with OpenBLAS sgemm
// side by side as the baseline when it is available (XRT_BENCH_HAVE_OPENBLAS).
//
//   kernels_bench --benchmark_format=json > kernels.json
//
// Counters:
//   GFLOPS  2*M*N*K per iteration / second / 1e9 (both libraries); LoRA:
//           2*M*K*rank (shrink), 2*M*rank*N (expand)
//   GBps    bytes of weights streamed per iteration / second / 1e9 (M <= 16)
//
// Decode shapes (M <= 16) rotate over enough copies of the weights to exceed
// the last-level cache (kColdBytes), so each iteration streams its weights from
// DRAM as a decode step does; prefill shapes (M >= 128) reuse one copy.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/base/thread_pool.h"
#include "runtime/kernels/attention.h"
#include "runtime/kernels/lora.h"
#include "runtime/kernels/matmul.h"

#ifdef XRT_BENCH_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace xrt {
namespace {

constexpr int64_t kColdBytes = int64_t{2} << 30;  // > the 480 MiB LLC reported here
// LoRA adapters are small (tens of KiB per slot and module): 256 MiB of
// copies is far beyond L2 and any real LLC and keeps each case's setup short.
constexpr int64_t kLoraColdBytes = int64_t{256} << 20;

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float[], AlignedFree>;

Buffer Allocate(int64_t floats) {
  const size_t bytes = (static_cast<size_t>(floats) * 4 + 4095) / 4096 * 4096;
  return Buffer(static_cast<float*>(std::aligned_alloc(4096, bytes)));
}

void FillRandom(float* p, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) p[i] = dist(rng);
}

ThreadPool* Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return p.get();
}

// Copies of one weight matrix laid end to end: one copy for prefill shapes,
// `cold_bytes` of them for decode shapes (0: one copy).
struct Weights {
  Buffer data;
  int64_t floats_per_copy = 0;
  int64_t copies = 1;
};

Weights MakeWeights(int64_t floats, int64_t cold_bytes, bool pack, int64_t n, int64_t k) {
  Weights w;
  w.floats_per_copy = (floats + 1023) / 1024 * 1024;  // keep copies 4 KiB aligned
  w.copies = std::max<int64_t>(1, cold_bytes / (w.floats_per_copy * 4));
  w.data = Allocate(w.floats_per_copy * w.copies);
  std::vector<float> raw(n * k);
  FillRandom(raw.data(), n * k, 7);
  float* first = w.data.get();
  if (pack) {
    PackWeights(raw.data(), n, k, first);
  } else {
    std::memcpy(first, raw.data(), raw.size() * 4);
  }
  for (int64_t c = 1; c < w.copies; ++c) {
    std::memcpy(first + c * w.floats_per_copy, first, w.floats_per_copy * 4);
  }
  return w;
}

void SetCounters(benchmark::State& state, int64_t m, int64_t n, int64_t k, int64_t weight_bytes) {
  state.counters["GFLOPS"] =
      benchmark::Counter(2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  if (m <= 16) {
    state.counters["GBps"] =
        benchmark::Counter(weight_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  }
}

// Args: M, N, K, threads.
void BM_XrtMatmul(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const int64_t packed_floats = PackedWeightFloats(n, k);
  Weights w = MakeWeights(packed_floats, m <= 16 ? kColdBytes : 0, /*pack=*/true, n, k);
  Buffer a = Allocate(m * k), c = Allocate(m * n);
  FillRandom(a.get(), m * k, 1);
  std::vector<float> bias(n, 0.25f);
  ThreadPool* pool = Pool(threads);
  MatmulArgs args;
  args.a = a.get();
  args.lda = k;
  args.bias = bias.data();
  args.c = c.get();
  args.ldc = n;
  args.m = m;
  args.n = n;
  args.k = k;
  int64_t copy = 0;
  for (auto _ : state) {
    args.packed_w = w.data.get() + copy * w.floats_per_copy;
    if (++copy == w.copies) copy = 0;
    Matmul(args, pool);
    benchmark::ClobberMemory();
  }
  SetCounters(state, m, n, k, packed_floats * 4);
  state.SetLabel(CpuIsaName(BestCpuIsa()));
}

#ifdef XRT_BENCH_HAVE_OPENBLAS
// C = A·Wᵀ with W [N][K] as stored in the model (no packing), same threads.
void BM_OpenBlasSgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  Weights w = MakeWeights(n * k, m <= 16 ? kColdBytes : 0, /*pack=*/false, n, k);
  Buffer a = Allocate(m * k), c = Allocate(m * n);
  FillRandom(a.get(), m * k, 1);
  openblas_set_num_threads(threads);
  int64_t copy = 0;
  for (auto _ : state) {
    const float* wp = w.data.get() + copy * w.floats_per_copy;
    if (++copy == w.copies) copy = 0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a.get(), static_cast<int>(k), wp, static_cast<int>(k),
                0.0f, c.get(), static_cast<int>(n));
    benchmark::ClobberMemory();
  }
  SetCounters(state, m, n, k, n * k * 4);
}
#endif

void MatmulShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "threads"});
  for (int threads : {1, 2})
    for (int64_t m : {1, 16, 128, 256, 512})
      for (auto [n, k] :
           {std::pair<int64_t, int64_t>{576, 576}, {1536, 576}, {576, 1536}, {2048, 2048}})
        b->Args({m, n, k, threads});
  b->UseRealTime();
  b->MinTime(0.2);
}

BENCHMARK(BM_XrtMatmul)->Apply(MatmulShapes);
#ifdef XRT_BENCH_HAVE_OPENBLAS
BENCHMARK(BM_OpenBlasSgemm)->Apply(MatmulShapes);
#endif

// LoRA shrink / expand (lora.h) at SmolLM2-135M widths (576 hidden, 192 k/v
// out, 1536 MLP), rank 16. `slots` 0: single mode (one adapter for every
// row); 4: mixed, row i on slot i % 4 (four adapters, uniform). Decode shapes
// rotate cold copies of the adapter slots as the matmul benchmarks do. The
// baseline is the base Matmul of the same shape (BM_LoraShrinkMatmulBaseline:
// M x rank x K; BM_LoraExpandMatmulBaseline: M x N x rank, accumulating):
// one adapter run as a packed weight matrix.
// Args: M, width (K for shrink, N for expand), rank, slots, threads.
constexpr int64_t kLoraSlots = 4;

void LoraShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "width", "rank", "slots", "threads"});
  for (int threads : {1, 2})
    for (int64_t width : {576, 192, 1536})
      for (int64_t m : {1, 8, 64, 256})
        for (int64_t slots : {int64_t{0}, kLoraSlots}) b->Args({m, width, 16, slots, threads});
  b->UseRealTime();
  b->MinTime(0.1);
}

void LoraBaselineShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "width", "rank", "threads"});
  for (int threads : {1, 2})
    for (int64_t width : {576, 192, 1536})
      for (int64_t m : {1, 8, 64, 256}) b->Args({m, width, 16, threads});
  b->UseRealTime();
  b->MinTime(0.1);
}

std::vector<int32_t> LoraRowSlots(int64_t m, int64_t slots) {
  std::vector<int32_t> row_slots(m, 0);
  for (int64_t i = 0; i < m && slots > 0; ++i) row_slots[i] = static_cast<int32_t>(i % slots);
  return row_slots;
}

// Bytes of adapter weights a call reads: `rows` of `width` floats per slot used.
int64_t LoraWeightBytes(int64_t m, int64_t slots, int64_t rank, int64_t width) {
  return std::min<int64_t>(m, std::max<int64_t>(slots, 1)) * rank * width * 4;
}

void BM_XrtLoraShrink(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), rank = state.range(2);
  const int64_t slots = state.range(3);
  const int threads = static_cast<int>(state.range(4));
  Weights w = MakeWeights(kLoraSlots * rank * k, m <= 16 ? kLoraColdBytes : 0, /*pack=*/false,
                          kLoraSlots * rank, k);
  Buffer x = Allocate(m * k), buf = Allocate(m * rank);
  FillRandom(x.get(), m * k, 1);
  const std::vector<int32_t> row_slots = LoraRowSlots(m, slots);
  LoraShrinkArgs args;
  args.x = x.get();
  args.ldx = k;
  args.slots = row_slots.data();
  args.buf = buf.get();
  args.ldbuf = rank;
  args.m = m;
  args.k = k;
  args.rank = rank;
  args.num_slots = kLoraSlots;
  args.mixed = slots > 0;
  ThreadPool* pool = Pool(threads);
  int64_t copy = 0;
  for (auto _ : state) {
    args.a_slots = w.data.get() + copy * w.floats_per_copy;
    if (++copy == w.copies) copy = 0;
    Status st = LoraShrink(args, pool);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    benchmark::ClobberMemory();
  }
  SetCounters(state, m, rank, k, LoraWeightBytes(m, slots, rank, k));
  state.SetLabel(std::string(CpuIsaName(BestCpuIsa())) + (slots > 0 ? " mixed" : " single"));
}
BENCHMARK(BM_XrtLoraShrink)->Apply(LoraShapes);

void BM_XrtLoraExpand(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), rank = state.range(2);
  const int64_t slots = state.range(3);
  const int threads = static_cast<int>(state.range(4));
  Weights w = MakeWeights(kLoraSlots * rank * n, m <= 16 ? kLoraColdBytes : 0, /*pack=*/false,
                          kLoraSlots * rank, n);
  Buffer buf = Allocate(m * rank), y = Allocate(m * n);
  FillRandom(buf.get(), m * rank, 1);
  FillRandom(y.get(), m * n, 2);
  const std::vector<int32_t> row_slots = LoraRowSlots(m, slots);
  LoraExpandArgs args;
  args.buf = buf.get();
  args.ldbuf = rank;
  args.slots = row_slots.data();
  args.y = y.get();
  args.ldy = n;
  args.m = m;
  args.n = n;
  args.rank = rank;
  args.num_slots = kLoraSlots;
  args.mixed = slots > 0;
  ThreadPool* pool = Pool(threads);
  int64_t copy = 0;
  for (auto _ : state) {
    args.bt_slots = w.data.get() + copy * w.floats_per_copy;
    if (++copy == w.copies) copy = 0;
    Status st = LoraExpand(args, pool);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
    benchmark::ClobberMemory();
  }
  SetCounters(state, m, n, rank, LoraWeightBytes(m, slots, rank, n));
  state.SetLabel(std::string(CpuIsaName(BestCpuIsa())) + (slots > 0 ? " mixed" : " single"));
}
BENCHMARK(BM_XrtLoraExpand)->Apply(LoraShapes);

// Matmul of A [m][k] with one packed [n][k] weight; accumulate as expand does.
void RunLoraBaseline(benchmark::State& state, int64_t m, int64_t n, int64_t k, bool accumulate) {
  const int threads = static_cast<int>(state.range(3));
  const int64_t packed_floats = PackedWeightFloats(n, k);
  Weights w = MakeWeights(packed_floats, m <= 16 ? kLoraColdBytes : 0, /*pack=*/true, n, k);
  Buffer a = Allocate(m * k), c = Allocate(m * n);
  FillRandom(a.get(), m * k, 1);
  FillRandom(c.get(), m * n, 2);
  MatmulArgs args;
  args.a = a.get();
  args.lda = k;
  args.c = c.get();
  args.ldc = n;
  args.m = m;
  args.n = n;
  args.k = k;
  args.accumulate = accumulate;
  ThreadPool* pool = Pool(threads);
  int64_t copy = 0;
  for (auto _ : state) {
    args.packed_w = w.data.get() + copy * w.floats_per_copy;
    if (++copy == w.copies) copy = 0;
    Matmul(args, pool);
    benchmark::ClobberMemory();
  }
  SetCounters(state, m, n, k, packed_floats * 4);
  state.SetLabel(CpuIsaName(BestCpuIsa()));
}

void BM_LoraShrinkMatmulBaseline(benchmark::State& state) {
  RunLoraBaseline(state, state.range(0), state.range(2), state.range(1), false);
}
BENCHMARK(BM_LoraShrinkMatmulBaseline)->Apply(LoraBaselineShapes);

void BM_LoraExpandMatmulBaseline(benchmark::State& state) {
  RunLoraBaseline(state, state.range(0), state.range(1), state.range(2), true);
}
BENCHMARK(BM_LoraExpandMatmulBaseline)->Apply(LoraBaselineShapes);

// Empty ParallelFor: the per-region overhead a decode step pays ~300 times.
void BM_ThreadPoolEmptyParallelFor(benchmark::State& state) {
  ThreadPool* pool = Pool(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    pool->ParallelFor(64, [](int64_t b, int64_t e) { benchmark::DoNotOptimize(b + e); });
  }
}
BENCHMARK(BM_ThreadPoolEmptyParallelFor)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// Paged attention over `reqs` requests of `context` positions each, of which
// the last `q_len` are this step's query tokens (q_len = 1: a decode batch;
// q_len = context: whole-prompt prefills). SmolLM2-135M heads: 9 q heads,
// 3 kv heads, head_dim 64; blocks of 16.
void BM_PagedAttention(benchmark::State& state) {
  const int64_t reqs = state.range(0), context = state.range(1), q_len = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const int64_t heads = 9, kv_heads = 3, dim = 64, block = 16;
  const int64_t blocks_per_req = (context + block - 1) / block;
  const int64_t num_blocks = reqs * blocks_per_req;
  const int64_t kv_width = kv_heads * dim, q_width = heads * dim;
  const int64_t tokens = reqs * q_len;
  std::vector<float> k_cache(num_blocks * block * kv_width), v_cache(k_cache.size());
  FillRandom(k_cache.data(), k_cache.size(), 3);
  FillRandom(v_cache.data(), v_cache.size(), 4);
  std::vector<float> q(tokens * q_width), k(tokens * kv_width), v(tokens * kv_width), out(q.size());
  FillRandom(q.data(), q.size(), 5);
  FillRandom(k.data(), k.size(), 6);
  FillRandom(v.data(), v.size(), 7);
  std::vector<int32_t> tables(reqs * blocks_per_req), seq_lens(reqs, context), qsl(reqs + 1),
      slots(tokens);
  for (int64_t i = 0; i < reqs * blocks_per_req; ++i) tables[i] = static_cast<int32_t>(i);
  for (int64_t r = 0; r <= reqs; ++r) qsl[r] = static_cast<int32_t>(r * q_len);
  for (int64_t r = 0; r < reqs; ++r) {
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t pos = context - q_len + i;
      slots[r * q_len + i] =
          static_cast<int32_t>(tables[r * blocks_per_req + pos / block] * block + pos % block);
    }
  }
  PagedAttentionArgs a;
  a.q = q.data();
  a.q_stride = q_width;
  a.k = k.data();
  a.k_stride = kv_width;
  a.v = v.data();
  a.v_stride = kv_width;
  a.out = out.data();
  a.out_stride = q_width;
  a.k_cache = k_cache.data();
  a.v_cache = v_cache.data();
  a.slot_mapping = slots.data();
  a.block_tables = tables.data();
  a.seq_lens = seq_lens.data();
  a.query_start_loc = qsl.data();
  a.num_tokens = tokens;
  a.max_num_reqs = reqs;
  a.max_blocks_per_req = blocks_per_req;
  a.num_heads = heads;
  a.num_kv_heads = kv_heads;
  a.head_dim = dim;
  a.block_size = block;
  a.num_blocks = num_blocks;
  a.scale = 0.125f;
  ThreadPool* pool = Pool(threads);
  for (auto _ : state) {
    Status st = PagedAttention(a, pool);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  }
  // q·k and p·v multiply-adds over the causal window of every query token.
  double keys = 0;
  for (int64_t i = 0; i < q_len; ++i) keys += static_cast<double>(context - q_len + i + 1);
  state.counters["GFLOPS"] = benchmark::Counter(reqs * keys * heads * dim * 4 * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  if (q_len == 1) {  // decode: K and V of every request read once
    state.counters["GBps"] = benchmark::Counter(2.0 * reqs * context * kv_width * 4 * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  }
}
BENCHMARK(BM_PagedAttention)
    ->ArgNames({"reqs", "context", "q_len", "threads"})
    ->Args({16, 1024, 1, 1})
    ->Args({16, 1024, 1, 2})
    ->Args({1, 512, 512, 1})
    ->Args({1, 512, 512, 2})
    ->UseRealTime();

}  // namespace
}  // namespace xrt

BENCHMARK_MAIN();
