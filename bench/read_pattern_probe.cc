// Does the order in which the int8 decode kernel reads a q4_k weight cost
// read bandwidth, and does arithmetic between the reads? Sums MIB (default
// 1024) of 32-column q4_k panels (K = 2048: eight 4608-byte super-blocks
// each) on 2 threads, with WORK (0, 2, 4, 6 or 8) dependent fmas per line,
// in two line orders: sequential, and a super-block step's (its scale lines,
// then its eight quant lines; d / dmin last), one or four panels side by
// side, with the kernel's prefetch (each step's share of the super-block
// 4 KiB ahead) or each line's 512 B ahead; and from a layout with four
// panels' super-blocks side by side (Layout::kSets). MIB under 64 sums the
// buffer 200 times: the rate in cache, the arithmetic's ceiling. CHUNK=n: the
// two threads take turns over chunks of n panels (as ParallelForUnits hands
// them out) instead of a half each.
// Standalone (not built by CMake):
//   g++ -O2 -std=c++17 -pthread bench/read_pattern_probe.cc -o /tmp/pattern
//   /tmp/pattern; WORK=6 MIB=2 /tmp/pattern; WORK=6 /tmp/pattern
// bench/README.md has a Sapphire Rapids-class machine's answers.
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr int kSuperBlockBytes = 4608;  // q4_k, a 32-column panel
constexpr int kLines = kSuperBlockBytes / 64;
constexpr int kSuperBlocksPerPanel = 8;  // K = 2048
constexpr long kPanelBytes = long{kSuperBlockBytes} * kSuperBlocksPerPanel;
constexpr int kLinesPerStep = 9;  // about a step's lines, per panel in turn

enum class Order { kSequential, kKernel };
enum class Prefetch { kNone, kSuperBlockShare, kEachLine };
// Where panel p's super-block b is: panel after panel (the artifact's layout
// today), or a set of four panels' super-blocks side by side (b of panels
// 4i .. 4i + 3 together, so that four streams read one region in turn).
enum class Layout { kPanels, kSets };

// The super-block's lines in the order a step-by-step read touches them:
// d (line 0), dmin (1), scale_lo (2-5: two sub-blocks a line), scale_hi
// (6-7), quants (8-71: a step's 512 bytes each).
std::vector<int> LineOrder(Order order) {
  std::vector<int> lines;
  if (order == Order::kSequential) {
    for (int l = 0; l < kLines; ++l) lines.push_back(l);
    return lines;
  }
  std::vector<bool> seen(kLines, false);
  auto add = [&](int l) {
    if (!seen[l]) lines.push_back(l);
    seen[l] = true;
  };
  for (int s = 0; s < 8; ++s) {
    add(2 + s / 2);
    add(6 + s / 4);
    for (int q = 0; q < 8; ++q) add(8 + 8 * s + q);
  }
  add(0);
  add(1);
  return lines;
}

// GCC 12's _mm512_reduce_add_ps starts from an undefined vector.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <int kStreams, int kWork>
__attribute__((target("avx512f,fma"))) float SumPanels(const char* base, long panels,
                                                       const std::vector<int>& order,
                                                       Prefetch prefetch, int ahead,
                                                       Layout layout) {
  __m512 acc[kStreams];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const int n = static_cast<int>(order.size());
  for (long p0 = 0; p0 + kStreams <= panels; p0 += kStreams) {
    for (int b = 0; b < kSuperBlocksPerPanel; ++b) {
      for (int i = 0; i < n; i += kLinesPerStep) {
        const int end = std::min(n, i + kLinesPerStep);
        for (int s = 0; s < kStreams; ++s) {
          const char* sb =
              layout == Layout::kPanels
                  ? base + (p0 + s) * kPanelBytes + long{b} * kSuperBlockBytes
                  : base + p0 * kPanelBytes + (long{b} * kStreams + s) * kSuperBlockBytes;
          if (prefetch == Prefetch::kSuperBlockShare) {
            for (int l = i * kLines / n; l < end * kLines / n; ++l)
              _mm_prefetch(sb + ahead + 64 * l, _MM_HINT_T0);
          }
          for (int j = i; j < end; ++j) {
            const char* line = sb + 64 * order[j];
            if (prefetch == Prefetch::kEachLine) _mm_prefetch(line + ahead, _MM_HINT_T0);
            __m512 v = _mm512_loadu_ps(reinterpret_cast<const float*>(line));
            for (int w = 0; w < kWork; ++w) v = _mm512_fmadd_ps(v, v, v);
            acc[s] = _mm512_add_ps(acc[s], v);
          }
        }
      }
    }
  }
  float sum = 0;
  for (const __m512& a : acc) sum += _mm512_reduce_add_ps(a);
  return sum;
}
#pragma GCC diagnostic pop

template <int kWork>
float SumShare(int streams, const char* base, long panels, const std::vector<int>& order,
               Prefetch prefetch, int ahead, Layout layout) {
  return streams == 1 ? SumPanels<1, kWork>(base, panels, order, prefetch, ahead, layout)
                      : SumPanels<4, kWork>(base, panels, order, prefetch, ahead, layout);
}

float SumShareWith(int work, int streams, const char* base, long panels,
                   const std::vector<int>& order, Prefetch prefetch, int ahead, Layout layout) {
  switch (work) {
    case 0:
      return SumShare<0>(streams, base, panels, order, prefetch, ahead, layout);
    case 2:
      return SumShare<2>(streams, base, panels, order, prefetch, ahead, layout);
    case 4:
      return SumShare<4>(streams, base, panels, order, prefetch, ahead, layout);
    case 6:
      return SumShare<6>(streams, base, panels, order, prefetch, ahead, layout);
    default:  // 8 (main checks WORK)
      return SumShare<8>(streams, base, panels, order, prefetch, ahead, layout);
  }
}

}  // namespace

int main() {
  const int work = std::getenv("WORK") ? std::atoi(std::getenv("WORK")) : 0;
  if (work < 0 || work > 8 || work % 2 != 0) {
    std::fprintf(stderr, "WORK=%s: the fmas per line are 0, 2, 4, 6 or 8\n", std::getenv("WORK"));
    return 2;
  }
  const long mib = std::getenv("MIB") ? std::atol(std::getenv("MIB")) : 1024;
  const int passes = mib < 64 ? 200 : 1;
  const long chunk = std::getenv("CHUNK") ? std::atol(std::getenv("CHUNK")) : 0;
  const long panels = std::max(4L, (mib << 20) / kPanelBytes);
  const size_t bytes = panels * kPanelBytes + (size_t{2} << 20);
  char* buf = static_cast<char*>(std::aligned_alloc(size_t{2} << 20, bytes));
  madvise(buf, bytes, MADV_HUGEPAGE);
  std::memset(buf, 1, bytes);
  struct Config {
    Order order;
    int streams;
    Prefetch prefetch;
    int ahead;
    const char* name;
    Layout layout = Layout::kPanels;
  };
  const Config configs[] = {
      {Order::kSequential, 1, Prefetch::kEachLine, 512, "sequential, 1 stream, each line +512"},
      {Order::kSequential, 4, Prefetch::kNone, 0, "sequential, 4 streams, no prefetch"},
      {Order::kKernel, 1, Prefetch::kEachLine, 512, "kernel order, 1 stream, each line +512"},
      {Order::kKernel, 1, Prefetch::kSuperBlockShare, 4096, "kernel order, 1 stream, share +4096"},
      {Order::kKernel, 4, Prefetch::kNone, 0, "kernel order, 4 streams, no prefetch"},
      {Order::kKernel, 4, Prefetch::kSuperBlockShare, 4096,
       "kernel order, 4 streams, share +4096 (the kernel's)"},
      {Order::kKernel, 4, Prefetch::kEachLine, 512, "kernel order, 4 streams, each line +512"},
      {Order::kKernel, 4, Prefetch::kSuperBlockShare, 4 * kSuperBlockBytes,
       "sets of 4, kernel order, share +1 set", Layout::kSets},
      {Order::kKernel, 4, Prefetch::kSuperBlockShare, 8 * kSuperBlockBytes,
       "sets of 4, kernel order, share +2 sets", Layout::kSets},
      {Order::kKernel, 4, Prefetch::kSuperBlockShare, 4096, "sets of 4, kernel order, share +4096",
       Layout::kSets},
      {Order::kKernel, 4, Prefetch::kEachLine, 512, "sets of 4, kernel order, each line +512",
       Layout::kSets},
      {Order::kKernel, 4, Prefetch::kEachLine, 2048, "sets of 4, kernel order, each line +2048",
       Layout::kSets},
  };
  volatile float sink = 0;
  for (const Config& c : configs) {
    const std::vector<int> order = LineOrder(c.order);
    std::vector<double> gbs;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      float sums[2] = {0, 0};
      std::vector<std::thread> threads;
      for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&, t] {
          for (int pass = 0; pass < passes; ++pass) {
            if (chunk > 0) {  // chunks of CHUNK panels, the threads taking turns
              for (long p0 = t * chunk; p0 < panels; p0 += 2 * chunk)
                sums[t] += SumShareWith(work, c.streams, buf + p0 * kPanelBytes,
                                        std::min(chunk, panels - p0), order, c.prefetch, c.ahead,
                                        c.layout);
              continue;
            }
            const long p0 = panels * t / 2, p1 = panels * (t + 1) / 2;
            sums[t] += SumShareWith(work, c.streams, buf + p0 * kPanelBytes, p1 - p0, order,
                                    c.prefetch, c.ahead, c.layout);
          }
        });
      }
      for (std::thread& th : threads) th.join();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      sink = sink + sums[0] + sums[1];
      gbs.push_back(static_cast<double>(panels * kPanelBytes) * passes / s / 1e9);
    }
    std::sort(gbs.begin(), gbs.end());
    std::printf("%-52s GB/s median %.1f best %.1f\n", c.name, gbs[2], gbs[4]);
  }
  std::free(buf);
}
