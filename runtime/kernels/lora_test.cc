#include "runtime/kernels/lora.h"
#include "runtime/kernels/test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace xrt {
namespace {

using testing::SupportedIsas;

constexpr float kSentinel = 1234.5f;  // fills output padding that must stay untouched

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(std::max<int64_t>(n, 1));
  for (auto& x : v) x = dist(rng);
  return v;
}

bool SameBits(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

// The adapter slots of one module. Slot s holds an adapter of rank
// max(1, rank - s), zero-padded to `rank` as the runtime stores it.
struct Adapters {
  int64_t num_slots = 0, rank = 0, k = 0, n = 0;
  std::vector<float> a;   // [num_slots][rank][k]
  std::vector<float> bt;  // [num_slots][rank][n]
};

Adapters MakeAdapters(int64_t num_slots, int64_t rank, int64_t k, int64_t n, uint32_t seed) {
  Adapters ad{num_slots,
              rank,
              k,
              n,
              RandomVector(num_slots * rank * k, seed),
              RandomVector(num_slots * rank * n, seed + 1)};
  for (int64_t s = 0; s < num_slots; ++s) {
    for (int64_t r = std::max<int64_t>(1, rank - s); r < rank; ++r) {
      std::fill_n(ad.a.begin() + (s * rank + r) * k, k, 0.0f);
      std::fill_n(ad.bt.begin() + (s * rank + r) * n, n, 0.0f);
    }
  }
  return ad;
}

// How the per-row slots of a case are laid out.
enum class Pattern {
  kSegments,    // mixed: runs of one slot (prefill), some of them -1
  kScatter,     // mixed: an independent slot per row (decode), some -1
  kAllBase,     // mixed: every row -1
  kSingle,      // single mode on slot 1; slots[1..] hold garbage
  kSingleBase,  // single mode on slot -1
};

const char* PatternName(Pattern p) {
  switch (p) {
    case Pattern::kSegments:
      return "segments";
    case Pattern::kScatter:
      return "scatter";
    case Pattern::kAllBase:
      return "all-base";
    case Pattern::kSingle:
      return "single";
    case Pattern::kSingleBase:
      return "single-base";
  }
  return "?";
}

bool IsMixed(Pattern p) { return p != Pattern::kSingle && p != Pattern::kSingleBase; }

std::vector<int32_t> MakeSlots(Pattern p, int64_t m, int64_t num_slots, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> slot(-1, static_cast<int32_t>(num_slots) - 1);
  std::vector<int32_t> slots(m);
  switch (p) {
    case Pattern::kSegments:
      for (int64_t i = 0; i < m;) {
        const int64_t len =
            std::uniform_int_distribution<int64_t>(1, std::max<int64_t>(1, m / 2))(rng);
        const int32_t s = slot(rng);
        for (int64_t j = i; j < std::min(m, i + len); ++j) slots[j] = s;
        i += len;
      }
      break;
    case Pattern::kScatter:
      for (auto& s : slots) s = slot(rng);
      break;
    case Pattern::kAllBase:
      std::fill(slots.begin(), slots.end(), -1);
      break;
    case Pattern::kSingle:
    case Pattern::kSingleBase:
      // Out-of-range values past [0] prove single mode never reads them.
      for (int64_t i = 0; i < m; ++i) slots[i] = i % 2 ? 1000 : -7;
      if (m > 0) slots[0] = p == Pattern::kSingle ? static_cast<int32_t>(num_slots > 1) : -1;
      break;
  }
  return slots;
}

int32_t SlotOf(const std::vector<int32_t>& slots, int64_t i, bool mixed) {
  return mixed ? slots[i] : slots[0];
}

// Hands `st` to the caller when it asked for it, else expects success.
void Expect(const Status& st, Status* status) {
  if (status) {
    *status = st;
  } else {
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
}

// Runs LoraShrink on a buffer of m rows of ldbuf floats filled with kSentinel.
std::vector<float> RunShrink(const Adapters& ad, const float* x, int64_t ldx,
                             const std::vector<int32_t>& slots, int64_t m, bool mixed,
                             int64_t ldbuf, CpuIsa isa, ThreadPool* pool,
                             Status* status = nullptr) {
  std::vector<float> buf(std::max<int64_t>(m * ldbuf, 1), kSentinel);
  LoraShrinkArgs args;
  args.x = x;
  args.ldx = ldx;
  args.a_slots = ad.a.data();
  args.slots = slots.data();
  args.buf = buf.data();
  args.ldbuf = ldbuf;
  args.m = m;
  args.k = ad.k;
  args.rank = ad.rank;
  args.num_slots = ad.num_slots;
  args.mixed = mixed;
  Expect(LoraShrinkWithIsa(args, pool, isa), status);
  return buf;
}

// Runs LoraExpand on a copy of y0 ([m][ldy]).
std::vector<float> RunExpand(const Adapters& ad, const float* buf, int64_t ldbuf,
                             const std::vector<int32_t>& slots, int64_t m, bool mixed,
                             const std::vector<float>& y0, int64_t ldy, CpuIsa isa,
                             ThreadPool* pool, Status* status = nullptr) {
  std::vector<float> y = y0;
  LoraExpandArgs args;
  args.buf = buf;
  args.ldbuf = ldbuf;
  args.bt_slots = ad.bt.data();
  args.slots = slots.data();
  args.y = y.data();
  args.ldy = ldy;
  args.m = m;
  args.n = ad.n;
  args.rank = ad.rank;
  args.num_slots = ad.num_slots;
  args.mixed = mixed;
  Expect(LoraExpandWithIsa(args, pool, isa), status);
  return y;
}

// Error bound of an f32 sum of `terms` products with magnitude sum `mag`.
double Tolerance(int64_t terms, double mag) {
  return 2.0 * (terms + 4) * std::ldexp(1.0, -24) * mag + 1e-30;
}

void CheckShrink(const Adapters& ad, const std::vector<float>& x, int64_t ldx,
                 const std::vector<int32_t>& slots, int64_t m, bool mixed,
                 const std::vector<float>& buf, int64_t ldbuf, const std::string& name) {
  for (int64_t i = 0; i < m; ++i) {
    const int32_t s = SlotOf(slots, i, mixed);
    for (int64_t r = 0; r < ldbuf; ++r) {
      const float got = buf[i * ldbuf + r];
      if (r >= ad.rank) {
        ASSERT_EQ(got, kSentinel) << name << ": wrote past rank at row " << i << " col " << r;
        continue;
      }
      if (s < 0) {
        ASSERT_EQ(got, 0.0f) << name << ": base row " << i << " rank " << r;
        continue;
      }
      double ref = 0.0, mag = 0.0;
      for (int64_t k = 0; k < ad.k; ++k) {
        const double p = static_cast<double>(x[i * ldx + k]) * ad.a[(s * ad.rank + r) * ad.k + k];
        ref += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(got, ref, Tolerance(ad.k, mag)) << name << ": row " << i << " rank " << r;
    }
  }
}

void CheckExpand(const Adapters& ad, const std::vector<float>& buf, int64_t ldbuf,
                 const std::vector<int32_t>& slots, int64_t m, bool mixed,
                 const std::vector<float>& y0, const std::vector<float>& y, int64_t ldy,
                 const std::string& name) {
  for (int64_t i = 0; i < m; ++i) {
    const int32_t s = SlotOf(slots, i, mixed);
    const float* row = y.data() + i * ldy;
    const float* row0 = y0.data() + i * ldy;
    if (s < 0) {
      ASSERT_TRUE(SameBits(row, row0, ldy)) << name << ": base row " << i << " changed";
      continue;
    }
    ASSERT_TRUE(SameBits(row + ad.n, row0 + ad.n, ldy - ad.n))
        << name << ": wrote past N in row " << i;
    for (int64_t j = 0; j < ad.n; ++j) {
      double ref = row0[j], mag = std::fabs(row0[j]);
      for (int64_t r = 0; r < ad.rank; ++r) {
        const double p =
            static_cast<double>(buf[i * ldbuf + r]) * ad.bt[(s * ad.rank + r) * ad.n + j];
        ref += p;
        mag += std::fabs(p);
      }
      ASSERT_NEAR(row[j], ref, Tolerance(ad.rank, mag)) << name << ": row " << i << " col " << j;
    }
  }
}

struct Shape {
  int64_t m, width, rank, num_slots;  // width: K for shrink, N for expand
};

// Shapes with odd sizes, tails of every vector width, and ones big enough to
// cross the parallel threshold (so the 2-thread runs really split work).
const Shape kShapes[] = {{1, 576, 16, 4},  {3, 17, 5, 3},   {7, 1, 1, 2},      {64, 100, 8, 4},
                         {33, 576, 16, 4}, {20, 31, 33, 2}, {70, 1536, 16, 4}, {9, 65, 64, 1},
                         {12, 15, 7, 5},   {2, 192, 16, 4}};
const Pattern kPatterns[] = {Pattern::kSegments, Pattern::kScatter, Pattern::kAllBase,
                             Pattern::kSingle, Pattern::kSingleBase};

std::string CaseName(const char* kernel, const Shape& s, Pattern p, CpuIsa isa, int threads) {
  return std::string(kernel) + " " + CpuIsaName(isa) + " m=" + std::to_string(s.m) +
         " width=" + std::to_string(s.width) + " rank=" + std::to_string(s.rank) +
         " slots=" + std::to_string(s.num_slots) + " " + PatternName(p) +
         " threads=" + std::to_string(threads);
}

TEST(LoraShrinkTest, MatchesReferenceOnEveryIsaAndThreadCount) {
  ThreadPool pool(2);
  uint32_t seed = 10;
  for (const Shape& sh : kShapes) {
    const Adapters ad = MakeAdapters(sh.num_slots, sh.rank, sh.width, 1, seed++);
    const int64_t ldx = sh.width + sh.m % 3, ldbuf = sh.rank + (sh.m % 2) * 3;
    const std::vector<float> x = RandomVector(sh.m * ldx, seed++);
    for (Pattern p : kPatterns) {
      const std::vector<int32_t> slots = MakeSlots(p, sh.m, sh.num_slots, seed++);
      std::vector<float> first;
      for (CpuIsa isa : SupportedIsas()) {
        for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
          const std::string name = CaseName("shrink", sh, p, isa, tp ? 2 : 1);
          const std::vector<float> buf =
              RunShrink(ad, x.data(), ldx, slots, sh.m, IsMixed(p), ldbuf, isa, tp);
          CheckShrink(ad, x, ldx, slots, sh.m, IsMixed(p), buf, ldbuf, name);
          if (first.empty()) {
            first = buf;
          } else {  // the same bits on every ISA and thread count
            ASSERT_TRUE(SameBits(buf.data(), first.data(), buf.size())) << name;
          }
        }
      }
    }
  }
}

TEST(LoraExpandTest, MatchesReferenceOnEveryIsaAndThreadCount) {
  ThreadPool pool(2);
  uint32_t seed = 20;
  for (const Shape& sh : kShapes) {
    const Adapters ad = MakeAdapters(sh.num_slots, sh.rank, 1, sh.width, seed++);
    const int64_t ldbuf = sh.rank + (sh.m % 2) * 3, ldy = sh.width + (sh.m % 3) * 5;
    const std::vector<float> buf = RandomVector(sh.m * ldbuf, seed++);
    const std::vector<float> y0 = RandomVector(sh.m * ldy, seed++);
    for (Pattern p : kPatterns) {
      const std::vector<int32_t> slots = MakeSlots(p, sh.m, sh.num_slots, seed++);
      std::vector<float> first;
      for (CpuIsa isa : SupportedIsas()) {
        for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
          const std::string name = CaseName("expand", sh, p, isa, tp ? 2 : 1);
          const std::vector<float> y =
              RunExpand(ad, buf.data(), ldbuf, slots, sh.m, IsMixed(p), y0, ldy, isa, tp);
          CheckExpand(ad, buf, ldbuf, slots, sh.m, IsMixed(p), y0, y, ldy, name);
          if (first.empty()) {
            first = y;
          } else {
            ASSERT_TRUE(SameBits(y.data(), first.data(), y.size())) << name;
          }
        }
      }
    }
  }
}

// Each row's shrink and expand output, computed with the row alone (M = 1,
// single mode, no pool), must be reproduced bit for bit inside batches that
// put it at another position, next to other slots or in a long segment of its
// own slot, in mixed or single mode, on 1 or 2 threads.
TEST(LoraTest, BatchInvariance) {
  const int64_t k = 576, n = 200, rank = 16, num_slots = 4, rows = 96;
  const Adapters ad = MakeAdapters(num_slots, rank, k, n, 31);
  const std::vector<float> x = RandomVector(rows * k, 32);
  const std::vector<float> y0 = RandomVector(rows * n, 33);
  std::vector<int32_t> row_slot(rows);
  std::mt19937 rng(34);
  for (auto& s : row_slot) s = std::uniform_int_distribution<int32_t>(-1, num_slots - 1)(rng);
  ThreadPool pool(2);

  for (CpuIsa isa : SupportedIsas()) {
    // Solo results of row r on slot s (s in [0, num_slots)).
    auto solo = [&](int64_t r, int32_t s, std::vector<float>* buf, std::vector<float>* y) {
      const std::vector<int32_t> slot = {s};
      *buf = RunShrink(ad, x.data() + r * k, k, slot, 1, false, rank, isa, nullptr);
      const std::vector<float> y_row(y0.begin() + r * n, y0.begin() + (r + 1) * n);
      *y = RunExpand(ad, buf->data(), rank, slot, 1, false, y_row, n, isa, nullptr);
    };
    // Runs rows `order` (indices into x / y0) with per-row `slots` as one batch
    // and compares every row with its solo result on `slot_of(row)`.
    auto check_batch = [&](const std::vector<int64_t>& order, const std::vector<int32_t>& slots,
                           bool mixed, ThreadPool* tp, const std::string& what) {
      const int64_t m = static_cast<int64_t>(order.size());
      std::vector<float> bx(m * k), by0(m * n);
      for (int64_t i = 0; i < m; ++i) {
        std::copy_n(x.begin() + order[i] * k, k, bx.begin() + i * k);
        std::copy_n(y0.begin() + order[i] * n, n, by0.begin() + i * n);
      }
      const std::vector<float> buf = RunShrink(ad, bx.data(), k, slots, m, mixed, rank, isa, tp);
      const std::vector<float> y =
          RunExpand(ad, buf.data(), rank, slots, m, mixed, by0, n, isa, tp);
      for (int64_t i = 0; i < m; ++i) {
        const int32_t s = SlotOf(slots, i, mixed);
        const std::string name = std::string(CpuIsaName(isa)) + " " + what + " row " +
                                 std::to_string(i) + " (data row " + std::to_string(order[i]) + ")";
        if (s < 0) {
          ASSERT_TRUE(SameBits(y.data() + i * n, by0.data() + i * n, n)) << name;
          continue;
        }
        std::vector<float> sb, sy;
        solo(order[i], s, &sb, &sy);
        ASSERT_TRUE(SameBits(buf.data() + i * rank, sb.data(), rank)) << name << " shrink";
        ASSERT_TRUE(SameBits(y.data() + i * n, sy.data(), n)) << name << " expand";
      }
    };

    std::vector<int64_t> all(rows);
    std::iota(all.begin(), all.end(), 0);
    for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool}) {
      const std::string t = tp ? " 2 threads" : " 1 thread";
      // Decode-like scatter, in data order and reversed.
      check_batch(all, row_slot, true, tp, "scatter" + t);
      std::vector<int64_t> rev(all.rbegin(), all.rend());
      std::vector<int32_t> rev_slots(row_slot.rbegin(), row_slot.rend());
      check_batch(rev, rev_slots, true, tp, "reversed" + t);
      // Prefill-like: the same rows sorted into segments by slot.
      std::vector<int64_t> seg = all;
      std::stable_sort(seg.begin(), seg.end(),
                       [&](int64_t a, int64_t b) { return row_slot[a] < row_slot[b]; });
      std::vector<int32_t> seg_slots(rows);
      for (int64_t i = 0; i < rows; ++i) seg_slots[i] = row_slot[seg[i]];
      check_batch(seg, seg_slots, true, tp, "segments" + t);
      // Smaller M: a prefix and an odd slice from the middle.
      check_batch(std::vector<int64_t>(all.begin(), all.begin() + 5),
                  std::vector<int32_t>(row_slot.begin(), row_slot.begin() + 5), true, tp,
                  "prefix" + t);
      check_batch(std::vector<int64_t>(all.begin() + 17, all.begin() + 60),
                  std::vector<int32_t>(row_slot.begin() + 17, row_slot.begin() + 60), true, tp,
                  "slice" + t);
      // Every row on slot 2: single mode vs mixed mode with all slots 2.
      check_batch(all, std::vector<int32_t>{2}, false, tp, "single" + t);
      check_batch(all, std::vector<int32_t>(rows, 2), true, tp, "mixed-one-slot" + t);
    }
  }
}

TEST(LoraTest, SingleModeReadsOnlyFirstSlot) {
  const Adapters ad = MakeAdapters(3, 8, 40, 24, 41);
  const int64_t m = 6;
  const std::vector<float> x = RandomVector(m * ad.k, 42);
  const std::vector<float> y0 = RandomVector(m * ad.n, 43);
  // slots[1..] are out of range: reading any of them would be rejected.
  const std::vector<int32_t> slots = {2, 99, -5, 3, 7, -2};
  const std::vector<int32_t> mixed(m, 2);
  for (CpuIsa isa : SupportedIsas()) {
    const std::vector<float> b1 = RunShrink(ad, x.data(), ad.k, slots, m, false, 8, isa, nullptr);
    const std::vector<float> b2 = RunShrink(ad, x.data(), ad.k, mixed, m, true, 8, isa, nullptr);
    EXPECT_TRUE(SameBits(b1.data(), b2.data(), m * 8)) << CpuIsaName(isa);
    const std::vector<float> y1 =
        RunExpand(ad, b1.data(), 8, slots, m, false, y0, ad.n, isa, nullptr);
    const std::vector<float> y2 =
        RunExpand(ad, b1.data(), 8, mixed, m, true, y0, ad.n, isa, nullptr);
    EXPECT_TRUE(SameBits(y1.data(), y2.data(), m * ad.n)) << CpuIsaName(isa);
    CheckExpand(ad, b1, 8, slots, m, false, y0, y1, ad.n, CpuIsaName(isa));
  }
}

TEST(LoraTest, RejectsSlotOutsideRangeAndWritesNothing) {
  const Adapters ad = MakeAdapters(3, 4, 20, 10, 51);
  const int64_t m = 5;
  const std::vector<float> x = RandomVector(m * ad.k, 52);
  const std::vector<float> y0 = RandomVector(m * ad.n, 53);
  const std::vector<float> buf = RandomVector(m * ad.rank, 54);
  struct Bad {
    std::vector<int32_t> slots;
    bool mixed;
    std::string message;
  };
  const Bad cases[] = {
      {{0, 1, 2, 3, -1}, true, "row 3 has slot index 3, outside [-1, 3)"},
      {{-2, 0, 0, 0, 0}, true, "row 0 has slot index -2, outside [-1, 3)"},
      {{5, 0, 0, 0, 0}, false, "row 0 has slot index 5, outside [-1, 3)"},
  };
  for (const Bad& bad : cases) {
    for (CpuIsa isa : SupportedIsas()) {
      Status st;
      const std::vector<float> b =
          RunShrink(ad, x.data(), ad.k, bad.slots, m, bad.mixed, ad.rank, isa, nullptr, &st);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(st.message(), "lora shrink: " + bad.message);
      EXPECT_TRUE(std::all_of(b.begin(), b.end(), [](float v) { return v == kSentinel; }));
      const std::vector<float> y =
          RunExpand(ad, buf.data(), ad.rank, bad.slots, m, bad.mixed, y0, ad.n, isa, nullptr, &st);
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(st.message(), "lora expand: " + bad.message);
      EXPECT_TRUE(SameBits(y.data(), y0.data(), y0.size()));
    }
  }
}

// An adapter of rank 5 zero-padded to 16 gives what the rank-5 adapter alone
// gives (the padded ranks only add zeros).
TEST(LoraTest, ZeroPaddedRankIsExact) {
  const int64_t k = 100, n = 70, m = 9, r = 5, big = 16;
  const Adapters small = MakeAdapters(1, r, k, n, 61);
  Adapters padded{
      1, big, k, n, std::vector<float>(big * k, 0.0f), std::vector<float>(big * n, 0.0f)};
  std::copy(small.a.begin(), small.a.end(), padded.a.begin());
  std::copy(small.bt.begin(), small.bt.end(), padded.bt.begin());
  const std::vector<float> x = RandomVector(m * k, 62);
  const std::vector<float> y0 = RandomVector(m * n, 63);
  const std::vector<int32_t> slots(m, 0);
  for (CpuIsa isa : SupportedIsas()) {
    const std::vector<float> bs = RunShrink(small, x.data(), k, slots, m, true, r, isa, nullptr);
    const std::vector<float> bp = RunShrink(padded, x.data(), k, slots, m, true, big, isa, nullptr);
    const std::vector<float> ys =
        RunExpand(small, bs.data(), r, slots, m, true, y0, n, isa, nullptr);
    const std::vector<float> yp =
        RunExpand(padded, bp.data(), big, slots, m, true, y0, n, isa, nullptr);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < big; ++j) {
        EXPECT_EQ(bp[i * big + j], j < r ? bs[i * r + j] : 0.0f) << CpuIsaName(isa);
      }
    }
    for (int64_t i = 0; i < m * n; ++i) EXPECT_EQ(ys[i], yp[i]) << CpuIsaName(isa) << " " << i;
  }
}

TEST(LoraTest, EmptyShapes) {
  const std::vector<int32_t> slots = {0, 0};
  for (CpuIsa isa : SupportedIsas()) {
    // K = 0: every dot product is empty, buf = 0.
    const Adapters no_k = MakeAdapters(1, 3, 0, 4, 71);
    const std::vector<float> x(2, 1.0f);
    const std::vector<float> b = RunShrink(no_k, x.data(), 0, slots, 2, true, 3, isa, nullptr);
    EXPECT_TRUE(std::all_of(b.begin(), b.end(), [](float v) { return v == 0.0f; }));
    // M = 0 and rank = 0 write nothing.
    const Adapters no_rank = MakeAdapters(1, 0, 5, 4, 72);
    const std::vector<float> x5 = RandomVector(10, 73);
    const std::vector<float> b0 = RunShrink(no_rank, x5.data(), 5, slots, 2, true, 2, isa, nullptr);
    EXPECT_TRUE(std::all_of(b0.begin(), b0.end(), [](float v) { return v == kSentinel; }));
    const std::vector<float> y0 = RandomVector(8, 74);
    const std::vector<float> y =
        RunExpand(no_rank, b0.data(), 2, slots, 2, true, y0, 4, isa, nullptr);
    EXPECT_TRUE(SameBits(y.data(), y0.data(), 8));
    const std::vector<float> ym = RunExpand(no_k, b.data(), 3, slots, 0, true, y0, 4, isa, nullptr);
    EXPECT_TRUE(SameBits(ym.data(), y0.data(), 8));
  }
}

}  // namespace
}  // namespace xrt
