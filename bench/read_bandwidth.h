// The read-bandwidth probe the benchmarks put next to their figures: the pool's
// threads sum a buffer far larger than the caches, on small pages or on
// transparent huge pages (runtime/base/mapped_file.h's AnonymousMapping, the
// memory an artifact's weights are read into by default).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "runtime/base/mapped_file.h"
#include "runtime/base/thread_pool.h"

namespace xcc::bench {

// GCC 12's _mm512_reduce_add_ps starts from an undefined vector.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// One thread's share of the probe: the sum of [lo, hi) read as kStreams
// interleaved streams with independent AVX-512 accumulators, so that the adds
// never limit the loads (a single accumulator chain measured ~40% of
// ../shared/measure/readbw's figure on the same machine), each stream
// software-prefetched kAheadBytes ahead into L1 when kAheadBytes > 0.
template <int kStreams, int kAheadBytes>
__attribute__((target("avx512f"))) inline double SumStreamsAvx512(const float* p, size_t lo,
                                                                  size_t hi) {
  const size_t per = (hi - lo) / kStreams / 32 * 32;
  __m512 acc[kStreams];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (size_t i = 0; i < per; i += 32)
    for (int s = 0; s < kStreams; ++s) {
      const float* q = p + lo + s * per + i;
      if constexpr (kAheadBytes > 0) {
        _mm_prefetch(reinterpret_cast<const char*>(q) + kAheadBytes, _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(q) + kAheadBytes + 64, _MM_HINT_T0);
      }
      acc[s] = _mm512_add_ps(acc[s], _mm512_add_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(q + 16)));
    }
  double sum = 0;
  for (const __m512& a : acc) sum += _mm512_reduce_add_ps(a);
  return sum;
}
#pragma GCC diagnostic pop

inline double SumStreamsScalar(const float* p, size_t lo, size_t hi) {
  float acc[16] = {0};
  for (size_t i = lo; i + 16 <= hi; i += 16)
    for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
  return std::accumulate(acc, acc + 16, 0.0);
}

// A probe buffer of `floats` ones: an AnonymousMapping (huge_pages) or a
// std::vector (small pages, as ../shared/measure/readbw's).
class ProbeBuffer {
 public:
  ProbeBuffer(size_t floats, bool huge_pages) : n_(floats) {
    if (huge_pages) {
      if (auto m = xrt::AnonymousMapping::Create(floats * sizeof(float)); m.ok()) {
        huge_ = std::move(*m);
        data_ = reinterpret_cast<float*>(huge_.data());
      }
    }
    if (!data_) {
      small_.resize(floats);
      data_ = small_.data();
    }
    std::fill(data_, data_ + n_, 1.0f);
  }
  const float* data() const { return data_; }
  size_t size() const { return n_; }

 private:
  size_t n_;
  std::vector<float> small_;
  xrt::AnonymousMapping huge_;
  float* data_ = nullptr;
};

// How a pass reads: the two of ../shared/measure/readbw's variants that read
// fastest on this project's machines. Four interleaved streams per thread
// without software prefetch led on 4 KiB pages; on transparent huge pages
// one stream prefetched 512 B ahead leads (Xeon with AMX, 2 threads: 32.1
// against 30.2 GB/s with four streams, 28.6 without prefetch).
enum class ReadMethod { kFourStreams, kOneStreamPrefetched };

// One pass of the pool's threads over `buf`, each summing its share.
inline double ReadPass(xrt::ThreadPool& pool, const ProbeBuffer& buf, ReadMethod method) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  const size_t n = buf.size();
  const int threads = pool.num_threads();
  std::vector<double> partial(threads * 8, 0.0);  // a cache line apart
  pool.ParallelFor(threads, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
      double sum;
      if (!avx512) {
        sum = SumStreamsScalar(buf.data(), lo, hi);
      } else if (method == ReadMethod::kFourStreams) {
        sum = SumStreamsAvx512<4, 0>(buf.data(), lo, hi);
      } else {
        sum = SumStreamsAvx512<1, 512>(buf.data(), lo, hi);
      }
      partial[t * 8] = sum;
    }
  });
  double sum = 0;
  for (int t = 0; t < threads; ++t) sum += partial[t * 8];
  return sum;
}

// Read bandwidth (GB/s): the best of 5 passes over 1 GiB by each ReadMethod,
// alternating.
inline double MeasureReadBandwidth(xrt::ThreadPool& pool, bool huge_pages) {
  const ProbeBuffer buf(size_t{1} << 28, huge_pages);
  double best = 0;
  volatile double sink = 0;
  for (int rep = 0; rep < 10; ++rep) {
    const ReadMethod method = rep % 2 ? ReadMethod::kOneStreamPrefetched : ReadMethod::kFourStreams;
    const auto t0 = std::chrono::steady_clock::now();
    sink = sink + ReadPass(pool, buf, method);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, buf.size() * sizeof(float) / s / 1e9);
  }
  return best;
}

}  // namespace xcc::bench
