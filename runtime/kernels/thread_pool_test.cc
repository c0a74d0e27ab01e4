#include "runtime/kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
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

}  // namespace
}  // namespace xrt
