#include "runtime/base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace xrt {
namespace {

// Every index in [0, n) is covered exactly once by contiguous chunks.
void ExpectCovers(ThreadPool& pool, int64_t n, bool grain_variant, int64_t grain) {
  std::vector<std::atomic<int>> hits(n);
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  auto fn = [&](int64_t b, int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, n);
    for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
    std::lock_guard<std::mutex> lock(mu);
    chunks.emplace_back(b, e);
  };
  if (grain_variant) {
    pool.ParallelForGrain(n, grain, fn);
  } else {
    pool.ParallelFor(n, fn);
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i << " of " << n;
  if (n == 0) {
    EXPECT_TRUE(chunks.empty());
    return;
  }
  if (!grain_variant) {
    EXPECT_EQ(static_cast<int64_t>(chunks.size()), std::min<int64_t>(n, pool.num_threads()));
  } else {
    const int64_t g = std::max<int64_t>(grain, 1);
    EXPECT_EQ(static_cast<int64_t>(chunks.size()), (n + g - 1) / g);
    for (auto [b, e] : chunks) {
      EXPECT_EQ(b % g, 0);
      EXPECT_TRUE(e - b == g || e == n);
    }
  }
}

TEST(ThreadPoolTest, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.num_threads(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 100, 10007}) {
      ExpectCovers(pool, n, false, 0);
      for (int64_t grain : {-1, 0, 1, 3, 64, 20000}) ExpectCovers(pool, n, true, grain);
    }
  }
}

TEST(ThreadPoolTest, ParallelForUnitsCoversUnitsInAFewChunksPerThread) {
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (int64_t units : {0, 1, 2, 7, 100}) {
      std::vector<std::atomic<int>> hits(units);
      std::atomic<int> calls{0};
      ParallelForUnits(p, units, [&](int64_t b, int64_t e) {
        calls.fetch_add(1);
        for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < units; ++i) ASSERT_EQ(hits[i].load(), 1) << i << " of " << units;
      // Inline in one call without a pool or with one unit; else units / 8 per chunk.
      const int64_t want = !p || units <= 1 ? 1
                                            : (units + std::max<int64_t>(1, units / 8) - 1) /
                                                  std::max<int64_t>(1, units / 8);
      EXPECT_EQ(calls.load(), want) << units << " units, pool " << (p != nullptr);
    }
  }
}

TEST(ThreadPoolTest, ParallelForUnitsChunksAreWholeMultiples) {
  ThreadPool pool(2);
  for (int64_t multiple : {1, 3, 4}) {
    for (int64_t units : {2, 6, 8, 18, 48, 80, 256}) {
      std::vector<std::atomic<int>> hits(units);
      std::mutex mu;
      std::vector<std::pair<int64_t, int64_t>> chunks;
      ParallelForUnits(
          &pool, units,
          [&](int64_t b, int64_t e) {
            std::lock_guard<std::mutex> lock(mu);
            chunks.emplace_back(b, e);
            for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
          },
          multiple);
      for (int64_t i = 0; i < units; ++i) ASSERT_EQ(hits[i].load(), 1) << i << " of " << units;
      // units / 8 rounded down to the multiple (at least one), the last chunk
      // what is left.
      const int64_t grain = std::max(multiple, units / 8 / multiple * multiple);
      for (auto [b, e] : chunks) {
        EXPECT_EQ(b % grain, 0) << units << " units, multiple " << multiple;
        EXPECT_EQ(e - b, std::min(grain, units - b)) << units << " units, multiple " << multiple;
      }
    }
  }
}

TEST(ThreadPoolTest, DefaultSizeIsHardwareConcurrency) {
  ThreadPool pool(0);
  EXPECT_GE(pool.num_threads(), 1);
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  if (hw > 0) {
    EXPECT_EQ(pool.num_threads(), hw);
  }
}

TEST(ThreadPoolTest, UsesSeveralThreads) {
  ThreadPool pool(2);
  std::mutex mu;
  std::set<std::thread::id> ids;
  // Chunks that take a while so the worker gets to claim one.
  for (int attempt = 0; attempt < 50 && ids.size() < 2; ++attempt) {
    pool.ParallelForGrain(64, 1, [&](int64_t, int64_t) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
  }
  EXPECT_EQ(ids.size(), 2u);
}

TEST(ThreadPoolTest, NestedCallsRunInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  EXPECT_FALSE(ThreadPool::InParallelRegion());
  pool.ParallelFor(6, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(ThreadPool::InParallelRegion());
    for (int64_t i = b; i < e; ++i) {
      const auto outer = std::this_thread::get_id();
      int inner_chunks = 0;
      pool.ParallelFor(10, [&](int64_t ib, int64_t ie) {
        EXPECT_EQ(std::this_thread::get_id(), outer);
        ++inner_chunks;
        total.fetch_add(ie - ib);
      });
      EXPECT_EQ(inner_chunks, 1);
    }
  });
  EXPECT_FALSE(ThreadPool::InParallelRegion());
  EXPECT_EQ(total.load(), 60);
}

TEST(ThreadPoolTest, ManySmallCalls) {
  ThreadPool pool(2);
  std::vector<int64_t> data(64, 0);
  for (int iter = 0; iter < 20000; ++iter) {
    pool.ParallelFor(static_cast<int64_t>(data.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) data[i] += i;
    });
  }
  for (int64_t i = 0; i < static_cast<int64_t>(data.size()); ++i) ASSERT_EQ(data[i], 20000 * i);
}

TEST(ThreadPoolTest, CallsAfterIdlePeriods) {
  // Workers block after spinning; they must wake for the next region.
  ThreadPool pool(2);
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    std::atomic<int64_t> sum{0};
    pool.ParallelForGrain(1000, 10, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) sum.fetch_add(i);
    });
    ASSERT_EQ(sum.load(), 999 * 1000 / 2);
  }
}

TEST(ThreadPoolTest, ConcurrentExternalCallersAreSerialized) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  auto caller = [&] {
    for (int i = 0; i < 2000; ++i) {
      pool.ParallelFor(10, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
    }
  };
  std::thread t1(caller), t2(caller);
  t1.join();
  t2.join();
  EXPECT_EQ(sum.load(), 2 * 2000 * 10);
}

// ---------------------------------------------------------------------------
// Stress: back-to-back regions of different shapes from one thread, while
// other threads load the CPUs so pool threads get preempted at arbitrary
// points (stragglers that observed region G and only get to run after the
// caller finished G and is publishing G+1). Checks that each chunk of each
// region runs exactly once, through that region's closure, with that
// region's bounds, and never after ParallelFor returned.

// Threads that spin until destroyed, to oversubscribe the machine.
class CpuHog {
 public:
  explicit CpuHog(int threads) {
    for (int i = 0; i < threads; ++i) {
      threads_.emplace_back([this] {
        uint64_t x = 1;
        while (!stop_.load(std::memory_order_relaxed)) x = x * 6364136223846793005u + 1;
        sink_.fetch_add(x, std::memory_order_relaxed);
      });
    }
  }
  ~CpuHog() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> sink_{0};
  std::vector<std::thread> threads_;
};

constexpr int kMaxStressChunks = 96;

// Error sink shared by all stress closures; the first message is kept.
struct StressErrors {
  std::atomic<int64_t> count{0};
  std::mutex mu;
  std::string first;
  void Report(const std::string& msg) {
    if (count.fetch_add(1) == 0) {
      std::lock_guard<std::mutex> lock(mu);
      first = msg;
    }
  }
};

// One region's bookkeeping. Kept in a ring (so a straggler that runs a
// retired region's closure touches live memory and is reported, not a crash).
struct StressRegion {
  std::atomic<int64_t> id{-1};
  std::atomic<bool> active{false};
  int64_t n = 0;
  int64_t grain = 0;  // 0: ParallelFor
  int64_t chunks = 0;
  std::atomic<int> inflight{0};
  std::array<std::atomic<int>, kMaxStressChunks> hits{};
};

// The chunk index of [b, e) in `r`, or -1 if it is not one of its chunks.
int64_t ChunkIndex(const StressRegion& r, int64_t b, int64_t e) {
  if (r.grain > 0) {
    if (b < 0 || b >= r.n || b % r.grain != 0 || e != std::min(r.n, b + r.grain)) return -1;
    return b / r.grain;
  }
  for (int64_t c = 0; c < r.chunks; ++c) {
    if (c * r.n / r.chunks == b && (c + 1) * r.n / r.chunks == e) return c;
  }
  return -1;
}

void RunStressRegion(ThreadPool& pool, StressRegion& r, int64_t id, int64_t n, int64_t grain,
                     int work, StressErrors& errors) {
  r.n = n;
  r.grain = grain;
  r.chunks = grain > 0 ? (n + grain - 1) / grain : std::min<int64_t>(n, pool.num_threads());
  for (int64_t c = 0; c < r.chunks; ++c) r.hits[c].store(0, std::memory_order_relaxed);
  r.inflight.store(0);
  r.id.store(id);
  r.active.store(true);
  // Captures stack locals by reference, like the kernels do.
  const int64_t expected_id = id;
  StressRegion* const region = &r;
  volatile uint64_t alive = 0xA11CEA11CEull;
  static std::atomic<uint64_t> sink{0};  // keeps the busy work alive
  auto body = [&](int64_t b, int64_t e) {
    if (alive != 0xA11CEA11CEull) {
      errors.Report("chunk ran with a dead closure (stack local poisoned)");
      return;
    }
    region->inflight.fetch_add(1);
    if (!region->active.load() || region->id.load() != expected_id) {
      errors.Report("chunk of region " + std::to_string(expected_id) +
                    " ran outside its ParallelFor (now region " +
                    std::to_string(region->id.load()) + ")");
    }
    const int64_t c = ChunkIndex(*region, b, e);
    if (c < 0) {
      errors.Report("region " + std::to_string(expected_id) + " (n=" + std::to_string(n) +
                    ", grain=" + std::to_string(grain) + ") got bad chunk [" + std::to_string(b) +
                    ", " + std::to_string(e) + ")");
    } else {
      region->hits[c].fetch_add(1);
    }
    uint64_t x = static_cast<uint64_t>(b);
    for (int i = 0; i < work; ++i) x = x * 6364136223846793005u + 1442695040888963407u;
    sink.fetch_add(x, std::memory_order_relaxed);
    region->inflight.fetch_sub(1);
  };
  if (grain > 0) {
    pool.ParallelForGrain(n, grain, body);
  } else {
    pool.ParallelFor(n, body);
  }
  // Everything must be finished now.
  if (r.inflight.load() != 0) {
    errors.Report("ParallelFor returned with a chunk of region " + std::to_string(id) +
                  " still running");
  }
  for (int64_t c = 0; c < r.chunks; ++c) {
    const int h = r.hits[c].load();
    if (h != 1) {
      errors.Report("region " + std::to_string(id) + " (n=" + std::to_string(n) +
                    ", grain=" + std::to_string(grain) + "): chunk " + std::to_string(c) + " ran " +
                    std::to_string(h) + " times");
    }
  }
  r.active.store(false);
  alive = 0xDEADDEADDEADull;  // a late chunk through this closure sees this
}

// Recurses to a random depth (with differently sized frames) before running
// the region, so consecutive regions' closures live at different addresses.
void StressAtDepth(ThreadPool& pool, StressRegion& r, int64_t id, int64_t n, int64_t grain,
                   int work, int depth, StressErrors& errors) {
  if (depth > 0) {
    volatile char pad[48 * 3];
    pad[0] = static_cast<char>(depth);
    StressAtDepth(pool, r, id, n, grain, work, depth - 1, errors);
    pad[1] = pad[0];
    return;
  }
  RunStressRegion(pool, r, id, n, grain, work, errors);
}

void StressPool(int threads, int hog_threads, std::chrono::milliseconds duration) {
  CpuHog hog(hog_threads);
  ThreadPool pool(threads);
  StressErrors errors;
  std::vector<StressRegion> ring(8);
  std::mt19937_64 rng(threads * 1000 + hog_threads);
  // Shapes that alternate few-chunk and many-chunk regions, including n < threads,
  // n == 1 and grain > n (the inline paths).
  const int64_t ns[] = {1, 2, 3, 4, 5, 7, 16, 33, 64, 95};
  const auto deadline = std::chrono::steady_clock::now() + duration;
  int64_t id = 0;
  while (std::chrono::steady_clock::now() < deadline && errors.count.load() == 0) {
    for (int k = 0; k < 256; ++k, ++id) {
      const int64_t n = ns[rng() % std::size(ns)];
      int64_t grain = 0;
      switch (rng() % 4) {
        case 0:
          grain = 0;
          break;  // ParallelFor
        case 1:
          grain = 1;
          break;  // one item per chunk
        case 2:
          grain = 1 + static_cast<int64_t>(rng() % 8);
          break;  // small grain
        case 3:
          grain = n + static_cast<int64_t>(rng() % 3);
          break;  // grain >= n
      }
      // Mostly empty chunks (races are in the hand-off), sometimes some work.
      const int work = rng() % 8 == 0 ? static_cast<int>(rng() % 2000) : 0;
      StressAtDepth(pool, ring[id % ring.size()], id, n, grain, work, static_cast<int>(rng() % 4),
                    errors);
    }
  }
  EXPECT_EQ(errors.count.load(), 0)
      << "first error: " << errors.first << " (after " << id << " regions, " << threads
      << " threads, " << hog_threads << " hog threads)";
}

TEST(ThreadPoolStressTest, AlternatingRegionsTwoThreadsLoadedMachine) {
  StressPool(2, 2, std::chrono::milliseconds(1500));
}

TEST(ThreadPoolStressTest, AlternatingRegionsThreeThreadsLoadedMachine) {
  StressPool(3, 1, std::chrono::milliseconds(1000));
}

TEST(ThreadPoolStressTest, AlternatingRegionsOversubscribedPool) {
  StressPool(5, 0, std::chrono::milliseconds(1000));
}

}  // namespace
}  // namespace xrt
