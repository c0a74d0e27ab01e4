// Microbenchmarks of the runtime kernels (xrt_kernels), with OpenBLAS sgemm
// side by side as the baseline when it is available (XRT_BENCH_HAVE_OPENBLAS).
//
//   kernels_bench --benchmark_format=json > kernels.json
//
// Counters:
//   GFLOPS  2*M*N*K per iteration / second / 1e9 (both libraries); LoRA:
//           2*M*K*rank (shrink), 2*M*rank*N (expand)
//   GBps    bytes of weights streamed per iteration / second / 1e9 (M <= 16);
//           for BM_XrtMatmulFormat the packed bytes of that format
//
// Decode shapes (M <= 16) rotate over enough copies of the weights to exceed
// the last-level cache (kColdBytes), so each iteration streams its weights from
// DRAM as a decode step does; prefill shapes (M >= 128) reuse one copy. The
// weights sit on transparent huge pages, as an artifact's do when xrt reads it
// into memory (its default; runtime/base/mapped_file.h), and BM_ReadBandwidth
// is the read-bandwidth probe on the same memory and on small pages, in the
// same run, for the decode shapes' roofline fractions.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/read_bandwidth.h"
#include "runtime/base/mapped_file.h"
#include "runtime/base/thread_pool.h"
#include "runtime/kernels/attention.h"
#include "runtime/kernels/dense_attention.h"
#include "runtime/kernels/lora.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/matmul_int8.h"
#include "runtime/kernels/test_util.h"
#include "runtime/kernels/weight_format.h"

#ifdef XRT_BENCH_HAVE_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int num_threads);
#endif

#ifdef XRT_BENCH_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
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

// Copies of one weight matrix laid end to end, on huge pages: one copy for
// prefill shapes, `cold_bytes` of them for decode shapes (0: one copy).
struct Weights {
  AnonymousMapping memory;
  int64_t floats_per_copy = 0;
  int64_t copies = 1;
  float* data() const { return reinterpret_cast<float*>(memory.data()); }
};

// W [n][k] random, as stored in the model or (pack) packed in `format`.
Weights MakeWeights(int64_t n, int64_t k, int64_t cold_bytes, bool pack,
                    WeightFormat format = WeightFormat::kF32) {
  const int64_t bytes = pack ? PackedWeightBytes(format, n, k) : n * k * 4;
  Weights w;
  w.floats_per_copy = ((bytes + 3) / 4 + 1023) / 1024 * 1024;  // keep copies 4 KiB aligned
  w.copies = std::max<int64_t>(1, cold_bytes / (w.floats_per_copy * 4));
  auto memory = AnonymousMapping::Create(w.floats_per_copy * w.copies * 4);
  if (!memory.ok()) std::abort();
  w.memory = std::move(*memory);
  std::vector<float> raw(n * k);
  FillRandom(raw.data(), n * k, 7);
  float* first = w.data();
  if (pack && (IsKQuantFormat(format) || HasIQ4Table(format))) {
    testing::PackRandomKQuant(format, n, k, 7, first);  // no K-quant / iq4 quantizer
  } else if (pack) {
    PackWeightsFrom(format, raw.data(), n, k, first);
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

// Times `call(weights)` on the copies of `w` in turn (the next copy each
// iteration).
template <typename Call>
void TimeRotating(benchmark::State& state, const Weights& w, const Call& call) {
  int64_t copy = 0;
  for (auto _ : state) {
    call(w.data() + copy * w.floats_per_copy);
    if (++copy == w.copies) copy = 0;
    benchmark::ClobberMemory();
  }
}

// xrt Matmul of A [m][k] with a packed [n][k] weight in `format` (cold
// copies of `cold_bytes` in all), with a bias or accumulating into C.
void RunXrtMatmul(benchmark::State& state, int64_t m, int64_t n, int64_t k, int threads,
                  int64_t cold_bytes, bool bias, bool accumulate,
                  WeightFormat format = WeightFormat::kF32, ComputeType compute = ComputeType::kF32,
                  CpuIsa isa = BestCpuIsa()) {
  Weights w = MakeWeights(n, k, cold_bytes, /*pack=*/true, format);
  Buffer a = Allocate(m * k), c = Allocate(m * n);
  FillRandom(a.get(), m * k, 1);
  FillRandom(c.get(), m * n, 2);
  std::vector<float> bias_values(n, 0.25f);
  ThreadPool* pool = Pool(threads);
  MatmulArgs args;
  args.a = a.get();
  args.lda = k;
  args.w_format = format;
  args.bias = bias ? bias_values.data() : nullptr;
  args.c = c.get();
  args.ldc = n;
  args.m = m;
  args.n = n;
  args.k = k;
  args.accumulate = accumulate;
  args.compute = compute;
  TimeRotating(state, w, [&](const float* packed_w) {
    args.packed_w = packed_w;
    MatmulWithIsa(args, pool, isa);
  });
  SetCounters(state, m, n, k, PackedWeightBytes(format, n, k));
  std::string label = CpuIsaName(isa);
  if (format != WeightFormat::kF32) label = label + " " + WeightFormatName(format);
  if (compute != ComputeType::kF32) label = label + " " + ComputeTypeName(compute) + " compute";
  state.SetLabel(label);
}

// Args: M, N, K, threads.
void BM_XrtMatmul(benchmark::State& state) {
  const int64_t m = state.range(0);
  RunXrtMatmul(state, m, state.range(1), state.range(2), static_cast<int>(state.range(3)),
               m <= 16 ? kColdBytes : 0, /*bias=*/true, /*accumulate=*/false);
}

#ifdef XRT_BENCH_HAVE_OPENBLAS
// C = A·Wᵀ with W [N][K] as stored in the model (no packing), same threads.
void BM_OpenBlasSgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  Weights w = MakeWeights(n, k, m <= 16 ? kColdBytes : 0, /*pack=*/false);
  Buffer a = Allocate(m * k), c = Allocate(m * n);
  FillRandom(a.get(), m * k, 1);
  openblas_set_num_threads(threads);
  int64_t copy = 0;
  for (auto _ : state) {
    const float* wp = w.data() + copy * w.floats_per_copy;
    if (++copy == w.copies) copy = 0;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a.get(), static_cast<int>(k), wp, static_cast<int>(k),
                0.0f, c.get(), static_cast<int>(n));
    benchmark::ClobberMemory();
  }
  SetCounters(state, m, n, k, n * k * 4);
}
#endif

// xrt Matmul on a weight packed in another format (weight_format.h),
// quantized from random values. Args: format (WeightFormat value), compute
// (ComputeType value: 0 f32, 2 int8), M, N, K, threads. GBps counts the packed bytes: the fraction
// of the DRAM read bandwidth a decode GEMV reaches.
void BM_XrtMatmulFormat(benchmark::State& state) {
  const int64_t m = state.range(2);
  RunXrtMatmul(state, m, state.range(3), state.range(4), static_cast<int>(state.range(5)),
               m <= 16 ? kColdBytes : 0, /*bias=*/true, /*accumulate=*/false,
               static_cast<WeightFormat>(state.range(0)), static_cast<ComputeType>(state.range(1)));
}

// The compute types worth timing on `f`: f32, and int8 where it applies.
std::vector<ComputeType> ComputeTypesFor(WeightFormat f) {
  if (f == WeightFormat::kF32 || f == WeightFormat::kF16 || f == WeightFormat::kBF16) {
    return {ComputeType::kF32};
  }
  return {ComputeType::kF32, ComputeType::kInt8};
}

// SmolLM2-135M's linear shapes: q/o projections, MLP up/gate, MLP down and
// the tied lm_head (49152 x 576); decode (M = 1) and a 128-token prefill.
void MatmulFormatShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"format", "compute", "M", "N", "K", "threads"});
  for (WeightFormat f :
       {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kQ8_0,
        WeightFormat::kQ4_0, WeightFormat::kQ4_1, WeightFormat::kQ5_0, WeightFormat::kQ5_1})
    for (ComputeType c : ComputeTypesFor(f))
      for (int threads : {1, 2})
        for (int64_t m : {1, 128})
          for (auto [n, k] :
               {std::pair<int64_t, int64_t>{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}})
            b->Args({static_cast<int64_t>(f), static_cast<int64_t>(c), m, n, k, threads});
  b->UseRealTime();
  b->MinTime(0.2);
}
BENCHMARK(BM_XrtMatmulFormat)->Apply(MatmulFormatShapes);

// The K-quants and iq4 next to q8_0 / q4_1 at Llama-3.2-1B's shapes (q/o
// 2048x2048, MLP gate/up 8192x2048 and down 2048x8192; SmolLM2's K = 576 is
// not a multiple of 256), random ggml blocks.
void MatmulKQuantShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"format", "compute", "M", "N", "K", "threads"});
  for (WeightFormat f :
       {WeightFormat::kQ8_0, WeightFormat::kQ4_1, WeightFormat::kQ3_K, WeightFormat::kQ4_K,
        WeightFormat::kQ5_K, WeightFormat::kQ6_K, WeightFormat::kIQ4_NL, WeightFormat::kIQ4_XS})
    for (ComputeType c : ComputeTypesFor(f))
      for (int threads : {1, 2})
        for (int64_t m : {1, 128})
          for (auto [n, k] : {std::pair<int64_t, int64_t>{2048, 2048}, {8192, 2048}, {2048, 8192}})
            b->Args({static_cast<int64_t>(f), static_cast<int64_t>(c), m, n, k, threads});
  b->UseRealTime();
  b->MinTime(0.2);
}
BENCHMARK(BM_XrtMatmulFormat)->Name("BM_XrtMatmulKQuant")->Apply(MatmulKQuantShapes);

// int8 compute on each x86 tier this CPU has, side by side: vpmaddubsw +
// vpmaddwd on ymm (avx2, avx_vnni 0) and zmm (avx512) against vpdpbusd on ymm
// (avx2 with AVX-VNNI, avx_vnni 1; skipped on CPUs without it) and zmm
// (avx512_vnni) and, at M >= 4, the amx tier (AMX's TDPBSUD at 16 rows or
// more on the group formats and q4_k / q5_k / iq4_xs; skipped on CPUs
// without it), same bits. Args: format, isa (CpuIsa value),
// M, N, K, threads, avx_vnni (the avx2 tier's variant; 1 on the others),
// gfni (from avx512_vnni, for the formats whose high bits it merges:
// Int8GfniApplies; 1 on the others; skipped on CPUs without it where it
// would apply).
void BM_XrtMatmulInt8Isa(benchmark::State& state) {
  const auto isa = static_cast<CpuIsa>(state.range(1));
  const bool avx_vnni = state.range(6) != 0, gfni = state.range(7) != 0;
  if (!CpuIsaSupported(isa) || (isa == CpuIsa::kAvx2 && avx_vnni && !CpuHasAvxVnni()) ||
      (IsaAtLeast(isa, CpuIsa::kAvx512Vnni) && gfni && !CpuHasGfni() &&
       Int8GfniApplies(static_cast<WeightFormat>(state.range(0))))) {
    state.SkipWithError("this CPU cannot run that ISA path");
    return;
  }
  const int64_t m = state.range(2);
  SetInt8AvxVnniAllowed(avx_vnni);
  SetInt8GfniAllowed(gfni);
  RunXrtMatmul(state, m, state.range(3), state.range(4), static_cast<int>(state.range(5)),
               m <= 16 ? kColdBytes : 0, /*bias=*/true, /*accumulate=*/false,
               static_cast<WeightFormat>(state.range(0)), ComputeType::kInt8, isa);
  SetInt8AvxVnniAllowed(true);
  SetInt8GfniAllowed(true);
}

void MatmulInt8IsaShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"format", "isa", "M", "N", "K", "threads", "avx_vnni", "gfni"});
  for (WeightFormat f :
       {WeightFormat::kQ8_0, WeightFormat::kQ4_0, WeightFormat::kQ4_1, WeightFormat::kQ5_0,
        WeightFormat::kQ5_1, WeightFormat::kQ3_K, WeightFormat::kQ4_K, WeightFormat::kQ5_K,
        WeightFormat::kQ6_K, WeightFormat::kIQ4_NL, WeightFormat::kIQ4_XS})
    for (int64_t m : {1, 4, 128})
      for (auto [n, k] :
           {std::pair<int64_t, int64_t>{1536, 576}, {2048, 2048}, {8192, 2048}, {2048, 8192}})
        for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni, CpuIsa::kAmx}) {
          if (IsKQuantFormat(f) && k % kSuperBlock != 0) continue;
          // 2048 x 8192 (the 1B's MLP down projection): the decode row's
          // panels four times as long (decode_roofline.py --shape).
          if (k == 8192 && m != 1) continue;
          if (isa == CpuIsa::kAmx && m == 1) continue;
          for (int64_t avx_vnni : {0, 1}) {
            if (avx_vnni == 0 && isa != CpuIsa::kAvx2) continue;
            for (int64_t gfni : {0, 1}) {
              if (gfni == 0 && (isa != CpuIsa::kAvx512Vnni || !Int8GfniApplies(f))) continue;
              b->Args(
                  {static_cast<int64_t>(f), static_cast<int64_t>(isa), m, n, k, 2, avx_vnni, gfni});
            }
          }
        }
  b->UseRealTime();
  b->MinTime(0.2);
}
BENCHMARK(BM_XrtMatmulInt8Isa)->Apply(MatmulInt8IsaShapes);

// A decode row (M = 1) on the AVX512_VNNI kernels with its weights hot in the
// caches (2048 x 2048, a few MB: L2 and L3), where BM_XrtMatmulInt8Isa's M = 1
// streams them from DRAM: the kernels' own arithmetic, which hides under the
// reads from DRAM only while it is small enough. Args: format, threads, gfni
// (0: without GFNI's high-bit merge, the baseline of the formats it applies
// to, Int8GfniApplies, and only those; 1 skipped on CPUs without GFNI for
// those formats, whose gfni:0 is then the kernel they run).
void BM_XrtMatmulInt8DecodeHot(benchmark::State& state) {
  const auto f = static_cast<WeightFormat>(state.range(0));
  const bool gfni = state.range(2) != 0;
  if (!CpuIsaSupported(CpuIsa::kAvx512Vnni)) {
    state.SkipWithError("this CPU has no AVX512_VNNI");
    return;
  }
  if (gfni && !CpuHasGfni() && Int8GfniApplies(f)) {
    state.SkipWithError("this CPU has no GFNI");
    return;
  }
  SetInt8GfniAllowed(gfni);
  RunXrtMatmul(state, 1, 2048, 2048, static_cast<int>(state.range(1)), /*cold_bytes=*/0,
               /*bias=*/true, /*accumulate=*/false, f, ComputeType::kInt8, CpuIsa::kAvx512Vnni);
  SetInt8GfniAllowed(true);
}
BENCHMARK(BM_XrtMatmulInt8DecodeHot)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"format", "threads", "gfni"});
  for (WeightFormat f :
       {WeightFormat::kQ8_0, WeightFormat::kQ4_1, WeightFormat::kQ5_0, WeightFormat::kQ3_K,
        WeightFormat::kQ4_K, WeightFormat::kQ5_K, WeightFormat::kQ6_K, WeightFormat::kIQ4_XS})
    for (int64_t threads : {1, 2})
      for (int64_t gfni : {0, 1})
        if (gfni == 1 || Int8GfniApplies(f)) b->Args({static_cast<int64_t>(f), threads, gfni});
  b->UseRealTime();
  b->MinTime(0.2);
});

// A decode row (M = 1) from DRAM on the AVX512_VNNI kernels with their
// streams prefetched into L1 (l2:0: each line 2 KiB ahead, spread over the
// quad loads) or L2 (l2:1: a block step's share 4 KiB ahead at its start),
// Int8DecodePrefetch's two choices, whose default is per vendor: the rows
// that tell it, side by side in one run. Args: format, l2; 8192 x 2048, 2
// threads, cold copies.
void BM_XrtMatmulInt8DecodePrefetch(benchmark::State& state) {
  if (!CpuIsaSupported(CpuIsa::kAvx512Vnni)) {
    state.SkipWithError("this CPU has no AVX512_VNNI");
    return;
  }
  SetInt8DecodePrefetch(state.range(1) ? Int8DecodePrefetch::kL2 : Int8DecodePrefetch::kL1);
  RunXrtMatmul(state, 1, 8192, 2048, 2, kColdBytes, /*bias=*/true, /*accumulate=*/false,
               static_cast<WeightFormat>(state.range(0)), ComputeType::kInt8, CpuIsa::kAvx512Vnni);
  SetInt8DecodePrefetch(Int8DecodePrefetch::kAuto);
}
BENCHMARK(BM_XrtMatmulInt8DecodePrefetch)->Apply([](benchmark::internal::Benchmark* b) {
  b->ArgNames({"format", "l2"});
  for (WeightFormat f :
       {WeightFormat::kQ8_0, WeightFormat::kQ4_0, WeightFormat::kQ4_1, WeightFormat::kQ5_0,
        WeightFormat::kQ5_1, WeightFormat::kQ3_K, WeightFormat::kQ4_K, WeightFormat::kQ5_K,
        WeightFormat::kQ6_K, WeightFormat::kIQ4_NL, WeightFormat::kIQ4_XS})
    for (int64_t l2 : {0, 1}) b->Args({static_cast<int64_t>(f), l2});
  b->UseRealTime();
  b->MinTime(0.2);
});

// bf16 compute on the tiers side by side, with f32 compute as the baseline:
// the f32 tile kernels on rounded operands (avx512) against vdpbf16ps
// (avx512_bf16) and AMX (amx; skipped on CPUs without it), same bits;
// the bf16 baseline is BM_OneDnnMatmul. Args:
// format, compute (0 f32, 1 bf16), isa, M, N, K, threads.
void BM_XrtMatmulBf16Isa(benchmark::State& state) {
  const auto isa = static_cast<CpuIsa>(state.range(2));
  if (!CpuIsaSupported(isa)) {
    state.SkipWithError("this CPU cannot run that ISA path");
    return;
  }
  // Weights hot (in cache where they fit) for prompts, as in BM_OneDnnMatmul;
  // a decode's row (M = 1) reads them from DRAM, as a model's decode step does.
  const int64_t m = state.range(3);
  RunXrtMatmul(state, m, state.range(4), state.range(5), static_cast<int>(state.range(6)),
               m == 1 ? kColdBytes : 0, /*bias=*/true,
               /*accumulate=*/false, static_cast<WeightFormat>(state.range(0)),
               static_cast<ComputeType>(state.range(1)), isa);
}

// The prefill shapes of the bf16 comparisons: SmolLM2's MLP up and the 1B
// model's q/o and MLP gate/up.
constexpr std::pair<int64_t, int64_t> kBf16Shapes[] = {{1536, 576}, {2048, 2048}, {8192, 2048}};
constexpr int64_t kBf16Rows[] = {1, 16, 128, 512};

void MatmulBf16IsaShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"format", "compute", "isa", "M", "N", "K", "threads"});
  const std::pair<ComputeType, CpuIsa> runs[] = {{ComputeType::kF32, CpuIsa::kAvx512},
                                                 {ComputeType::kBF16, CpuIsa::kAvx512},
                                                 {ComputeType::kBF16, CpuIsa::kAvx512Bf16},
                                                 {ComputeType::kBF16, CpuIsa::kAmx}};
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kBF16Pairs,
                         WeightFormat::kBF16PairsAmx, WeightFormat::kQ4_K, WeightFormat::kQ6_K})
    for (int64_t m : kBf16Rows)
      for (auto [n, k] : kBf16Shapes)
        for (auto [c, isa] : runs) {
          if (IsKQuantFormat(f) && k % kSuperBlock != 0) continue;
          b->Args({static_cast<int64_t>(f), static_cast<int64_t>(c), static_cast<int64_t>(isa), m,
                   n, k, 2});
        }
  b->UseRealTime();
  b->MinTime(0.2);
}
BENCHMARK(BM_XrtMatmulBf16Isa)->Apply(MatmulBf16IsaShapes);

// The shapes of ../shared/measure/gemm.cpp (M, N, K), where the issue's
// "0.85x oneDNN's AMX bf16 GEMM" is measured: bf16 compute on bf16 and
// bf16_pairs_amx weights on the amx tier (skipped without it) next to
// BM_OneDnnMatmul's MeasureShapes.
constexpr int64_t kMeasureShapes[][3] = {{1, 2048, 2048},   {1, 8192, 2048},   {16, 2048, 2048},
                                         {128, 2048, 2048}, {512, 2048, 2048}, {576, 1024, 1024}};

void MatmulBf16MeasureShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"format", "compute", "isa", "M", "N", "K", "threads"});
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kBF16PairsAmx})
    for (const auto& s : kMeasureShapes)
      b->Args({static_cast<int64_t>(f), static_cast<int64_t>(ComputeType::kBF16),
               static_cast<int64_t>(CpuIsa::kAmx), s[0], s[1], s[2], 2});
  b->UseRealTime();
  b->MinTime(0.2);
}
BENCHMARK(BM_XrtMatmulBf16Isa)
    ->Name("BM_XrtMatmulBf16MeasureShapes")
    ->Apply(MatmulBf16MeasureShapes);

#ifdef XRT_BENCH_HAVE_ONEDNN
// oneDNN's matmul primitive at the same shapes: C [M][N] (f32) = A·Wᵀ, W [N][K]
// reordered once into the layout the primitive asks for ("any"), A and W in
// f32 or in bf16 (on AVX512_BF16, its brgemm kernels run vdpbf16ps; A comes
// converted, which xrt's kBF16 does inside the call). Threads: oneDNN's own
// (OMP_NUM_THREADS). Args: dtype (0 f32, 1 bf16), M, N, K.
void BM_OneDnnMatmul(benchmark::State& state) {
  using dnnl::memory;
  const bool bf16 = state.range(0) == 1;
  const int64_t m = state.range(1), n = state.range(2), k = state.range(3);
  dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  dnnl::stream strm(eng);
  const memory::data_type dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::desc src_md({m, k}, dt, memory::format_tag::ab);
  const memory::desc dst_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(
      dnnl::matmul::desc(src_md, memory::desc({k, n}, dt, memory::format_tag::any), dst_md), eng);
  std::vector<float> w(n * k), a(m * k), c(m * n);
  FillRandom(w.data(), n * k, 3);
  FillRandom(a.data(), m * k, 1);
  memory w_f32({{k, n}, memory::data_type::f32, memory::format_tag::ba}, eng, w.data());
  memory a_f32({{m, k}, memory::data_type::f32, memory::format_tag::ab}, eng, a.data());
  memory w_mem(pd.weights_desc(), eng), a_mem(src_md, eng), c_mem(dst_md, eng, c.data());
  dnnl::reorder(w_f32, w_mem).execute(strm, w_f32, w_mem);
  dnnl::reorder(a_f32, a_mem).execute(strm, a_f32, a_mem);
  strm.wait();
  const dnnl::matmul prim(pd);
  for (auto _ : state) {
    prim.execute(strm, {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_DST, c_mem}});
    strm.wait();
  }
  SetCounters(state, m, n, k, static_cast<int64_t>(pd.weights_desc().get_size()));
  const dnnl_version_t* v = dnnl_version();
  state.SetLabel("oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                 std::to_string(v->patch) + " " + pd.impl_info_str());
}

void OneDnnShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "M", "N", "K"});
  for (int64_t dtype : {0, 1})
    for (int64_t m : kBf16Rows)
      for (auto [n, k] : kBf16Shapes) b->Args({dtype, m, n, k});
  b->UseRealTime();
  b->MinTime(0.2);
}
BENCHMARK(BM_OneDnnMatmul)->Apply(OneDnnShapes);

void OneDnnMeasureShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"dtype", "M", "N", "K"});
  for (const auto& s : kMeasureShapes) b->Args({1, s[0], s[1], s[2]});
  b->UseRealTime();
  b->MinTime(0.2);
}
BENCHMARK(BM_OneDnnMatmul)->Name("BM_OneDnnMatmulMeasureShapes")->Apply(OneDnnMeasureShapes);
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

// Setup shared by the LoRA benchmarks: Args as in LoraShapes, and the
// kLoraSlots adapter slots of `rank` rows of `width` floats (cold copies for
// decode shapes).
struct LoraBench {
  int64_t m, width, rank, slots;
  ThreadPool* pool;
  Weights w;
  std::vector<int32_t> row_slots;  // row i on slot i % slots (0: all on slot 0)
};

LoraBench MakeLoraBench(benchmark::State& state) {
  LoraBench b{state.range(0),
              state.range(1),
              state.range(2),
              state.range(3),
              Pool(static_cast<int>(state.range(4))),
              Weights(),
              {}};
  b.w = MakeWeights(kLoraSlots * b.rank, b.width, b.m <= 16 ? kLoraColdBytes : 0,
                    /*pack=*/false);
  b.row_slots.assign(b.m, 0);
  for (int64_t i = 0; i < b.m && b.slots > 0; ++i) {
    b.row_slots[i] = static_cast<int32_t>(i % b.slots);
  }
  return b;
}

// Counters and label of a LoRA benchmark of b.m x n x k useful flops; the
// weight bytes are the slots a call reads.
void FinishLoraBench(benchmark::State& state, const LoraBench& b, int64_t n, int64_t k) {
  const int64_t slots_read = std::min<int64_t>(b.m, std::max<int64_t>(b.slots, 1));
  SetCounters(state, b.m, n, k, slots_read * b.rank * b.width * 4);
  state.SetLabel(std::string(CpuIsaName(BestCpuIsa())) + (b.slots > 0 ? " mixed" : " single"));
}

void BM_XrtLoraShrink(benchmark::State& state) {
  LoraBench b = MakeLoraBench(state);
  Buffer x = Allocate(b.m * b.width), buf = Allocate(b.m * b.rank);
  FillRandom(x.get(), b.m * b.width, 1);
  LoraShrinkArgs args;
  args.x = x.get();
  args.ldx = b.width;
  args.slots = b.row_slots.data();
  args.buf = buf.get();
  args.ldbuf = b.rank;
  args.m = b.m;
  args.k = b.width;
  args.rank = b.rank;
  args.num_slots = kLoraSlots;
  args.mixed = b.slots > 0;
  TimeRotating(state, b.w, [&](const float* a_slots) {
    args.a_slots = a_slots;
    Status st = LoraShrink(args, b.pool);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  });
  FinishLoraBench(state, b, b.rank, b.width);
}
BENCHMARK(BM_XrtLoraShrink)->Apply(LoraShapes);

void BM_XrtLoraExpand(benchmark::State& state) {
  LoraBench b = MakeLoraBench(state);
  Buffer buf = Allocate(b.m * b.rank), y = Allocate(b.m * b.width);
  FillRandom(buf.get(), b.m * b.rank, 1);
  FillRandom(y.get(), b.m * b.width, 2);
  LoraExpandArgs args;
  args.buf = buf.get();
  args.ldbuf = b.rank;
  args.slots = b.row_slots.data();
  args.y = y.get();
  args.ldy = b.width;
  args.m = b.m;
  args.n = b.width;
  args.rank = b.rank;
  args.num_slots = kLoraSlots;
  args.mixed = b.slots > 0;
  TimeRotating(state, b.w, [&](const float* bt_slots) {
    args.bt_slots = bt_slots;
    Status st = LoraExpand(args, b.pool);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  });
  FinishLoraBench(state, b, b.width, b.rank);
}
BENCHMARK(BM_XrtLoraExpand)->Apply(LoraShapes);

// Args: M, width, rank, threads.
void BM_LoraShrinkMatmulBaseline(benchmark::State& state) {
  const int64_t m = state.range(0);
  RunXrtMatmul(state, m, state.range(2), state.range(1), static_cast<int>(state.range(3)),
               m <= 16 ? kLoraColdBytes : 0, /*bias=*/false, /*accumulate=*/false);
}
BENCHMARK(BM_LoraShrinkMatmulBaseline)->Apply(LoraBaselineShapes);

void BM_LoraExpandMatmulBaseline(benchmark::State& state) {
  const int64_t m = state.range(0);
  RunXrtMatmul(state, m, state.range(1), state.range(2), static_cast<int>(state.range(3)),
               m <= 16 ? kLoraColdBytes : 0, /*bias=*/false, /*accumulate=*/true);
}
BENCHMARK(BM_LoraExpandMatmulBaseline)->Apply(LoraBaselineShapes);

// The read-bandwidth probe (bench/read_bandwidth.h): a pass over 1 GiB of
// small pages (huge:0, as ../shared/measure/readbw's) or huge pages (huge:1,
// as the weights above) per iteration, read as four streams per thread
// (method:0) or one prefetched (method:1). lm_step_bench reports the best.
void BM_ReadBandwidth(benchmark::State& state) {
  ThreadPool* pool = Pool(static_cast<int>(state.range(2)));
  const xcc::bench::ProbeBuffer buf(size_t{1} << 28, state.range(0) != 0);
  const auto method = state.range(1) ? xcc::bench::ReadMethod::kOneStreamPrefetched
                                     : xcc::bench::ReadMethod::kFourStreams;
  for (auto _ : state) benchmark::DoNotOptimize(xcc::bench::ReadPass(*pool, buf, method));
  state.counters["GBps"] = benchmark::Counter(buf.size() * sizeof(float) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ReadBandwidth)
    ->ArgNames({"huge", "method", "threads"})
    ->ArgsProduct({{0, 1}, {0, 1}, {1, 2}})
    ->MinTime(1.0)
    ->UseRealTime();

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
// q_len = context: whole-prompt prefills). Heads of SmolLM2-135M (9 q heads,
// 3 kv heads) or Llama-3.2-1B (32, 8), head_dim 64, or Llama-3-8B (32, 8,
// head_dim 128); blocks of 16. kv_dtype:
// the cache's element type, 0 f32, 1 f16, 2 fp8 (xrt --kv-cache-dtype).
// compute: 0 f32, 1 bf16 (the products as kBF16 matmuls, attention.h).
// A PagedAttention call as BM_PagedAttention's arguments give it.
struct PagedAttentionShape {
  int64_t reqs, context, q_len, threads, heads, kv_heads, kv_dtype, layers, compute, head_dim;
};

void RunPagedAttention(benchmark::State& state, const PagedAttentionShape& shape) {
  const int64_t reqs = shape.reqs, context = shape.context, q_len = shape.q_len;
  const int threads = static_cast<int>(shape.threads);
  const int64_t heads = shape.heads, kv_heads = shape.kv_heads, dim = shape.head_dim;
  const int64_t block = 16;
  const int64_t blocks_per_req = (context + block - 1) / block;
  const int64_t num_blocks = reqs * blocks_per_req;
  const int64_t kv_width = kv_heads * dim, q_width = heads * dim;
  const int64_t tokens = reqs * q_len;
  const auto kv_dtype = static_cast<KvCacheDtype>(shape.kv_dtype);
  const int64_t elem = KvCacheElementBytes(kv_dtype);
  // layers > 1: as many caches, one per call in turn, as a model's layers
  // do (30 of SmolLM2's at context 1024 are 47 MB in f32, but 24 MB in f16:
  // within a 32 MiB L3, and every row below within a 480 MB one, whose
  // calls then read their K/V from L3, not DRAM; BM_PagedAttentionPrefetch's
  // dram rows read 100 MB); 1: the same cache every call, warm.
  const int64_t layers = shape.layers;
  const int64_t cache_values = num_blocks * block * kv_width;
  std::vector<float> k_cache(layers * cache_values), v_cache(k_cache.size());
  FillRandom(k_cache.data(), k_cache.size(), 3);
  FillRandom(v_cache.data(), v_cache.size(), 4);
  // An f16 or fp8 cache holds the same values rounded, elem bytes each
  // (empty for f32, which uses the floats themselves).
  auto narrow = [&](const std::vector<float>& x) {
    std::vector<uint8_t> out(kv_dtype == KvCacheDtype::kF32 ? 0 : x.size() * elem);
    for (size_t i = 0; !out.empty() && i < x.size(); ++i) {
      if (kv_dtype == KvCacheDtype::kF16) {
        const uint16_t h = FloatToHalf(x[i]);
        std::memcpy(&out[2 * i], &h, 2);
      } else {
        out[i] = FloatToFp8E4M3(x[i]);
      }
    }
    return out;
  };
  std::vector<uint8_t> k_narrow = narrow(k_cache), v_narrow = narrow(v_cache);
  // Layer `at`'s cache (at in values).
  auto cache_at = [&](std::vector<float>& f32, std::vector<uint8_t>& bytes, int64_t at) -> void* {
    return bytes.empty() ? static_cast<void*>(f32.data() + at) : bytes.data() + at * elem;
  };
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
  a.kv_dtype = kv_dtype;
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
  a.compute = static_cast<ComputeType>(shape.compute);
  ThreadPool* pool = Pool(threads);
  int64_t layer = 0;
  for (auto _ : state) {
    const int64_t at = layer * cache_values;
    a.k_cache = cache_at(k_cache, k_narrow, at);
    a.v_cache = cache_at(v_cache, v_narrow, at);
    layer = (layer + 1) % layers;
    Status st = PagedAttention(a, pool);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  }
  // q·k and p·v multiply-adds over the causal window of every query token.
  double keys = 0;
  for (int64_t i = 0; i < q_len; ++i) keys += static_cast<double>(context - q_len + i + 1);
  state.counters["GFLOPS"] = benchmark::Counter(reqs * keys * heads * dim * 4 * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  if (q_len == 1) {  // decode: K and V of every request read once
    state.counters["GBps"] = benchmark::Counter(2.0 * reqs * context * kv_width * elem * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  }
}

void BM_PagedAttention(benchmark::State& state) {
  RunPagedAttention(
      state, {state.range(0), state.range(1), state.range(2), state.range(3), state.range(4),
              state.range(5), state.range(6), state.range(7), state.range(8), state.range(9)});
}
BENCHMARK(BM_PagedAttention)
    ->ArgNames({"reqs", "context", "q_len", "threads", "heads", "kv_heads", "kv_dtype", "layers",
                "compute", "head_dim"})
    ->Args({1, 32, 1, 1, 9, 3, 0, 1, 0, 64})  // one request's decode step: overhead, not flops
    ->Args({1, 32, 1, 2, 9, 3, 0, 1, 0, 64})
    ->Args({1, 1024, 1, 2, 9, 3, 0, 1, 0, 64})  // one long decode: 3 kv heads on 2 threads
    ->Args({1, 1024, 1, 2, 9, 3, 1, 1, 0, 64})
    ->Args({1, 1024, 1, 2, 9, 3, 0, 30, 0, 64})  // the same from DRAM, as in a model's decode step
    ->Args({1, 1024, 1, 2, 9, 3, 1, 30, 0, 64})
    ->Args({1, 1024, 1, 2, 9, 3, 2, 30, 0, 64})
    ->Args({1, 1024, 1, 2, 32, 8, 1, 16, 0, 64})   // Llama-3.2-1B's heads, f16 cache (2 MB a layer)
    ->Args({1, 1024, 1, 2, 32, 8, 1, 256, 0, 64})  // the same from DRAM (512 MB of caches)
    ->Args({1, 1024, 1, 2, 32, 8, 1, 16, 0, 128})  // Llama-3-8B's heads (head_dim 128), warm
    ->Args({1, 1024, 1, 2, 32, 8, 1, 160, 0, 128})  // the same from DRAM (640 MB of caches)
    ->Args({16, 1024, 1, 1, 9, 3, 0, 1, 0, 64})
    ->Args({16, 1024, 1, 2, 9, 3, 0, 1, 0, 64})
    ->Args({16, 1024, 1, 1, 9, 3, 1, 1, 0, 64})
    ->Args({16, 1024, 1, 2, 9, 3, 1, 1, 0, 64})
    ->Args({16, 1024, 1, 2, 9, 3, 0, 4, 0, 64})  // 4 x 24 MB
    ->Args({16, 1024, 1, 2, 9, 3, 1, 4, 0, 64})
    ->Args({16, 1024, 1, 2, 9, 3, 2, 4, 0, 64})
    ->Args({1, 512, 512, 1, 9, 3, 0, 1, 0, 64})
    ->Args({1, 512, 512, 2, 9, 3, 0, 1, 0, 64})
    ->Args({1, 512, 512, 2, 9, 3, 1, 1, 0, 64})
    ->Args({1, 512, 512, 2, 9, 3, 2, 1, 0, 64})
    ->Args({1, 512, 512, 2, 32, 8, 0, 1, 0, 64})
    ->Args({1, 2048, 2048, 2, 32, 8, 0, 1, 0, 64})
    ->Args({1, 512, 512, 2, 32, 8, 0, 1, 0, 128})
    // bf16: the same decode and prefill shapes with the products on the bf16 units
    ->Args({1, 1024, 1, 2, 9, 3, 1, 30, 1, 64})
    ->Args({16, 1024, 1, 2, 9, 3, 1, 4, 1, 64})
    ->Args({1, 512, 512, 1, 9, 3, 0, 1, 1, 64})
    ->Args({1, 512, 512, 2, 9, 3, 0, 1, 1, 64})
    ->Args({1, 512, 512, 2, 9, 3, 1, 1, 1, 64})
    ->Args({1, 512, 512, 2, 32, 8, 0, 1, 1, 64})
    ->Args({1, 2048, 2048, 2, 32, 8, 0, 1, 1, 64})
    ->UseRealTime();

// SetPagedAttentionPrefetch's two choices, whose default is per vendor (l2 0:
// into L1, 1: into L2): one request's decode on SmolLM2's heads (9 / 3 x 64),
// f16 cache, 2 threads, warm (layers 1) or from DRAM (as many layers'
// caches as make 100 MB, each call the next one's, as in a model's step).
void BM_PagedAttentionPrefetch(benchmark::State& state) {
  PagedAttentionShape shape{1, state.range(0), 1, 2, 9, 3, /*kv_dtype=*/1, /*layers=*/1, 0, 64};
  if (state.range(1)) {  // a layer's K and V: context x kv_heads x head_dim values each
    const int64_t layer_bytes = 2 * shape.context * shape.kv_heads * shape.head_dim *
                                KvCacheElementBytes(static_cast<KvCacheDtype>(shape.kv_dtype));
    shape.layers = (int64_t{100} << 20) / layer_bytes;
  }
  SetPagedAttentionPrefetch(state.range(2) ? StreamPrefetch::kL2 : StreamPrefetch::kL1);
  RunPagedAttention(state, shape);
  SetPagedAttentionPrefetch(StreamPrefetch::kAuto);
}
BENCHMARK(BM_PagedAttentionPrefetch)
    ->ArgNames({"context", "dram", "l2"})
    ->ArgsProduct({{128, 1024, 4096}, {0, 1}, {0, 1}})
    ->UseRealTime();

// The vision tower's self-attention (DenseAttention): `images` sequences of
// `seq` tokens, `heads` heads of `head_dim`, q/k/v as one fused [t][3 * width]
// projection output would hold them. CLIP ViT-L/14-336 (577 x 16 x 64),
// SigLIP so400m/14-384 (729 x 16 x 72), CLIP ViT-B/32-224 (50 x 12 x 64).
// isa: the CpuIsa path (cpu_isa.h; 4 on a CPU without it runs its best);
// compute: 0 f32, 1 bf16 (the products on the bf16 units, dense_attention.h).
void BM_DenseAttention(benchmark::State& state) {
  const int64_t images = state.range(0), seq = state.range(1), heads = state.range(2),
                hd = state.range(3);
  const int threads = static_cast<int>(state.range(4));
  CpuIsa isa = static_cast<CpuIsa>(state.range(5));
  if (!CpuIsaSupported(isa)) {
    if (isa != CpuIsa::kAvx512Bf16) {
      state.SkipWithError("this CPU does not support the ISA");
      return;
    }
    isa = BestCpuIsa();
  }
  const int64_t tokens = images * seq, width = heads * hd;
  std::vector<float> qkv(tokens * 3 * width), out(tokens * width);
  FillRandom(qkv.data(), qkv.size(), 11);
  DenseAttentionArgs a;
  a.q = qkv.data();
  a.k = qkv.data() + width;
  a.v = qkv.data() + 2 * width;
  a.out = out.data();
  a.q_stride = a.k_stride = a.v_stride = 3 * width;
  a.out_stride = width;
  a.num_tokens = tokens;
  a.seq_len = seq;
  a.num_heads = heads;
  a.head_dim = hd;
  a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  a.compute = static_cast<ComputeType>(state.range(6));
  ThreadPool* pool = Pool(threads);
  for (auto _ : state) {
    Status st = DenseAttentionWithIsa(a, pool, isa);
    if (!st.ok()) state.SkipWithError(st.ToString().c_str());
  }
  // q·k and p·v multiply-adds over every (query, key) pair.
  state.counters["GFLOPS"] =
      benchmark::Counter(static_cast<double>(images) * seq * seq * heads * hd * 4 * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DenseAttention)
    ->ArgNames({"images", "seq", "heads", "head_dim", "threads", "isa", "compute"})
    ->Args({1, 577, 16, 64, 1, 4, 0})
    ->Args({1, 577, 16, 64, 1, 4, 1})
    ->Args({1, 577, 16, 64, 2, 4, 0})
    ->Args({1, 577, 16, 64, 2, 4, 1})
    ->Args({4, 577, 16, 64, 2, 4, 0})
    ->Args({4, 577, 16, 64, 2, 4, 1})
    ->Args({1, 729, 16, 72, 2, 4, 0})
    ->Args({1, 729, 16, 72, 2, 4, 1})
    ->Args({8, 50, 12, 64, 2, 4, 0})
    ->Args({8, 50, 12, 64, 2, 4, 1})
    ->Args({1, 1025, 16, 64, 2, 4, 0})  // CLIP-L/14 at 448 px
    ->Args({1, 1025, 16, 64, 2, 4, 1})
    ->Args({1, 4097, 16, 80, 2, 4, 0})  // a long sequence: 4096 patches, head_dim 80
    ->Args({1, 4097, 16, 80, 2, 4, 1})
    ->Args({1, 577, 16, 64, 2, 5, 1})  // AMX
    ->Args({1, 577, 16, 64, 2, 1, 0})  // AVX2
    ->Args({1, 577, 16, 64, 2, 0, 0})  // baseline x86-64
    ->UseRealTime();

}  // namespace
}  // namespace xrt

BENCHMARK_MAIN();
