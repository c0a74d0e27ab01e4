// ThreadPool: the fork-join pool the runtime kernels (matmul, attention) and
// the executor's dispatches run on.
//
// Built for many small parallel regions: a decode step issues a few hundred
// ParallelFor calls of tens of microseconds each, so workers are persistent,
// spin for a short while after each region (so back-to-back regions cost a
// cache-line handshake, not a futex wake-up) and then block on a condition
// variable so an idle pool burns no CPU.
//
// Semantics:
//  - `num_threads` counts the calling thread: a pool of N threads owns N-1
//    workers and the caller of ParallelFor runs chunks too. A pool of 1 runs
//    everything inline on the caller.
//  - ParallelFor returns only after every chunk has run; memory written by any
//    chunk is visible to the caller afterwards (acquire/release on completion).
//  - Nested calls (ParallelFor from inside a chunk of any pool) run the whole
//    range inline on the calling thread, as one chunk [0, n).
//  - Which thread runs which chunk is unspecified; kernels that need
//    reproducible results must make each chunk's result independent of that
//    (the kernels in this library do).
//
// Thread-safety: ParallelFor may be called from several external threads at
// once; such calls are serialized (one parallel region at a time per pool).
// num_threads() is safe from any thread. The destructor must not run
// concurrently with ParallelFor; it joins the workers.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>

namespace xrt {

class ThreadPool {
 public:
  // `num_threads` is the total including the calling thread; <= 0 means
  // std::thread::hardware_concurrency() (at least 1).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();

  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Splits [0, n) into min(n, num_threads()) contiguous chunks of near-equal
  // size and runs fn(begin, end) once per chunk, the caller taking part.
  // n <= 0 is a no-op.
  void ParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  // Splits [0, n) into chunks of `grain` items (the last one may be shorter)
  // and hands them out dynamically: a thread that finishes a chunk takes the
  // next unclaimed one, so uneven chunks balance out. Use when the kernel
  // knows its natural tile (e.g. grain = tiles per task). grain <= 0 is
  // treated as 1.
  void ParallelForGrain(int64_t n, int64_t grain,
                        const std::function<void(int64_t begin, int64_t end)>& fn);

  // True while the calling thread is running a chunk of some pool (where a
  // ParallelFor would run inline).
  static bool InParallelRegion();

 private:
  struct State;
  void Run(int64_t n, int64_t chunk_size, int64_t num_chunks,
           const std::function<void(int64_t, int64_t)>& fn);

  int num_threads_;
  std::unique_ptr<State> state_;
};

// Runs fn(begin, end) over work units [0, units) on `pool` in a few contiguous
// chunks per thread (units / (4 * threads) each, rounded down to a multiple of
// `multiple`, at least one: a kernel that takes units that many at a time),
// so a thread that gets descheduled (the machine is shared) does not hold up
// the region; on the caller, in one call, when there is no pool, one thread
// or at most one unit. Rounding the grain down keeps the chunks about
// 4 * threads: rounded up, 80 units in fours on 2 threads made seven chunks
// of 12 (the last 8) and one thread 44 units to the other's 36, where ten
// chunks of 8 split them 40 / 40.
template <typename Fn>
void ParallelForUnits(ThreadPool* pool, int64_t units, const Fn& fn, int64_t multiple = 1) {
  const int threads = pool ? pool->num_threads() : 1;
  if (threads <= 1 || units <= 1) {
    fn(int64_t{0}, units);
    return;
  }
  const int64_t grain = units / (4 * threads) / multiple * multiple;
  pool->ParallelForGrain(units, std::max(multiple, grain), fn);
}

}  // namespace xrt
