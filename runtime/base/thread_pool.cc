#include "runtime/base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define XRT_CPU_RELAX() _mm_pause()
#else
#define XRT_CPU_RELAX() std::this_thread::yield()
#endif

namespace xrt {
namespace {

// How long a worker keeps polling for the next region before it blocks.
constexpr auto kSpinBudget = std::chrono::microseconds(200);
// How long the caller polls for stragglers before it starts yielding the CPU
// (matters when the machine is oversubscribed and a worker was descheduled).
constexpr int kCallerSpinsBeforeYield = 1 << 14;

thread_local int t_region_depth = 0;

// The claim word packs the region's generation (high 32 bits) with the number
// of chunks still unclaimed (low 32 bits); chunk index = num_chunks - remaining.
// A thread claims a chunk with a CAS that moves `remaining` from r > 0 to r-1
// in the generation it is working for, and only *after* that CAS succeeds does
// it read the job description (fn, n, chunk_size, num_chunks). That order is
// what makes stragglers safe: a successful claim means region G is not
// finished (the caller waits for this chunk), so the caller cannot have
// started overwriting the description for G+1, and the CAS (acquire) reads
// from the caller's publishing store (release), so G's description is
// visible. Whether a chunk is left is decided from the claim word alone, so
// no value read before the claim (possibly already G+1's) can make a claim
// on an exhausted region succeed.
inline uint32_t GenOf(uint64_t w) { return static_cast<uint32_t>(w >> 32); }
inline uint32_t RemainingOf(uint64_t w) { return static_cast<uint32_t>(w); }

}  // namespace

struct ThreadPool::State {
  // Serializes ParallelFor calls from different external threads.
  std::mutex run_mutex;

  // The current region's description; written by the caller before it
  // publishes a new generation in `claim` (release), read by a thread only
  // after it claimed a chunk of that generation (acquire CAS); see the
  // comment on the claim word. (Atomic with relaxed accesses: free on the
  // targets we care about, and no reader depends on that for correctness.)
  // In the claim word's cache line: a worker that claims a chunk finds the
  // description in the line its claim just brought in.
  alignas(64) std::atomic<uint64_t> claim{0};
  std::atomic<const std::function<void(int64_t, int64_t)>*> fn{nullptr};
  std::atomic<int64_t> n{0};
  std::atomic<int64_t> chunk_size{0};  // 0: near-equal split into num_chunks
  std::atomic<int64_t> num_chunks{0};

  alignas(64) std::atomic<int64_t> done{0};
  alignas(64) std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  uint32_t generation = 0;  // caller side only, under run_mutex

  std::mutex cv_mutex;
  std::condition_variable cv;
  std::vector<std::thread> workers;

  void ChunkBounds(int64_t c, int64_t* begin, int64_t* end) const {
    const int64_t total = n.load(std::memory_order_relaxed);
    const int64_t size = chunk_size.load(std::memory_order_relaxed);
    if (size > 0) {
      *begin = c * size;
      *end = std::min(total, *begin + size);
    } else {
      const int64_t chunks = num_chunks.load(std::memory_order_relaxed);
      *begin = c * total / chunks;
      *end = (c + 1) * total / chunks;
    }
  }

  // Claims and runs chunks of generation `gen` until none are left or the
  // generation moved on. Reads nothing but the claim word before a claim
  // succeeds (a straggler may call this long after region `gen` finished and
  // while the caller is writing the next region's description).
  void RunChunks(uint32_t gen) {
    uint64_t w = claim.load(std::memory_order_acquire);
    for (;;) {
      if (GenOf(w) != gen || RemainingOf(w) == 0) return;
      if (!claim.compare_exchange_weak(w, w - 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        continue;  // w was reloaded
      }
      // Chunk claimed: region `gen` cannot complete before we report it done,
      // so its description is stable and visible (see the claim word).
      const int64_t c = num_chunks.load(std::memory_order_relaxed) - RemainingOf(w);
      int64_t begin = 0, end = 0;
      ChunkBounds(c, &begin, &end);
      (*fn.load(std::memory_order_relaxed))(begin, end);
      // Release: the chunk's writes (and our reads of the description)
      // happen-before the caller's return and its next description writes.
      done.fetch_add(1, std::memory_order_release);
      w = claim.load(std::memory_order_acquire);
    }
  }

  void WorkerLoop() {
    t_region_depth = 1;  // a worker is always "inside" the pool
    uint32_t seen = GenOf(claim.load(std::memory_order_acquire));
    for (;;) {
      uint64_t w = claim.load(std::memory_order_acquire);
      if (GenOf(w) == seen && !stop.load(std::memory_order_relaxed)) {
        // Spin for a while, then block.
        auto deadline = std::chrono::steady_clock::now() + kSpinBudget;
        int spins = 0;
        while (GenOf(w = claim.load(std::memory_order_acquire)) == seen &&
               !stop.load(std::memory_order_relaxed)) {
          XRT_CPU_RELAX();
          if ((++spins & 63) == 0 && std::chrono::steady_clock::now() > deadline) break;
        }
        if (GenOf(w) == seen && !stop.load(std::memory_order_relaxed)) {
          std::unique_lock<std::mutex> lock(cv_mutex);
          sleepers.fetch_add(1, std::memory_order_seq_cst);
          cv.wait(lock, [&] {
            return GenOf(claim.load(std::memory_order_seq_cst)) != seen ||
                   stop.load(std::memory_order_seq_cst);
          });
          sleepers.fetch_sub(1, std::memory_order_relaxed);
          w = claim.load(std::memory_order_acquire);
        }
      }
      if (stop.load(std::memory_order_acquire)) return;
      seen = GenOf(w);
      RunChunks(seen);
    }
  }
};

ThreadPool::ThreadPool(int num_threads) : state_(std::make_unique<State>()) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::thread::hardware_concurrency());
    if (num_threads <= 0) num_threads = 1;
  }
  num_threads_ = num_threads;
  state_->workers.reserve(num_threads_ - 1);
  for (int i = 1; i < num_threads_; ++i) {
    state_->workers.emplace_back([s = state_.get()] { s->WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  state_->stop.store(true, std::memory_order_seq_cst);
  {
    std::lock_guard<std::mutex> lock(state_->cv_mutex);
    state_->cv.notify_all();
  }
  for (auto& t : state_->workers) t.join();
}

bool ThreadPool::InParallelRegion() { return t_region_depth > 0; }

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t chunks = std::min<int64_t>(n, num_threads_);
  Run(n, /*chunk_size=*/0, chunks, fn);
}

void ThreadPool::ParallelForGrain(int64_t n, int64_t grain,
                                  const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain <= 0) grain = 1;
  // Keep the chunk index within the 32 bits of the claim word.
  constexpr int64_t k_max_chunks = int64_t{1} << 30;
  if ((n + grain - 1) / grain > k_max_chunks) grain = (n + k_max_chunks - 1) / k_max_chunks;
  Run(n, grain, (n + grain - 1) / grain, fn);
}

void ThreadPool::Run(int64_t n, int64_t chunk_size, int64_t num_chunks,
                     const std::function<void(int64_t, int64_t)>& fn) {
  if (t_region_depth > 0 || num_threads_ == 1 || num_chunks == 1) {
    // Nested, single-threaded, or nothing to split: run inline. Each chunk
    // is still run as the caller asked (so grain-aware kernels see their
    // usual tile boundaries).
    ++t_region_depth;
    if (chunk_size == 0) {
      fn(0, n);
    } else {
      for (int64_t b = 0; b < n; b += chunk_size) fn(b, std::min(n, b + chunk_size));
    }
    --t_region_depth;
    return;
  }

  State& s = *state_;
  std::lock_guard<std::mutex> run_lock(s.run_mutex);
  s.fn.store(&fn, std::memory_order_relaxed);
  s.n.store(n, std::memory_order_relaxed);
  s.chunk_size.store(chunk_size, std::memory_order_relaxed);
  s.num_chunks.store(num_chunks, std::memory_order_relaxed);
  // Every increment of the previous region happened before the caller saw
  // done == its chunk count (and nothing else increments `done`: only a
  // claimed chunk does), so this reset cannot lose or absorb a late one.
  s.done.store(0, std::memory_order_relaxed);
  const uint32_t gen = ++s.generation;
  // Publishes the description (release; seq_cst also orders it before the
  // `sleepers` check below against the workers' sleepers increment).
  s.claim.store((static_cast<uint64_t>(gen) << 32) | static_cast<uint64_t>(num_chunks),
                std::memory_order_seq_cst);
  if (s.sleepers.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard<std::mutex> lock(s.cv_mutex);
    s.cv.notify_all();
  }

  ++t_region_depth;
  s.RunChunks(gen);
  --t_region_depth;

  int spins = 0;
  while (s.done.load(std::memory_order_acquire) < num_chunks) {
    if (++spins < kCallerSpinsBeforeYield) {
      XRT_CPU_RELAX();
    } else {
      std::this_thread::yield();
    }
  }
}

}  // namespace xrt
