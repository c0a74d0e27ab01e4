#include "runtime/kernels/attention.h"
#include "runtime/kernels/test_util.h"
#include "runtime/kernels/weight_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace xrt {
namespace {

using testing::Bf16IsTheChain;
using testing::SupportedIsas;

// One request of the batch: `context` positions already in the cache, then
// `q_len` new tokens this step.
struct Request {
  int context;
  int q_len;
};

// A ragged batch with its full per-request K/V history kept on the side for
// the reference.
template <int kDim, int kHeadsT = 6, int kKvHeadsT = 2>
class BatchT {
 public:
  static constexpr int kHeads = kHeadsT, kKvHeads = kKvHeadsT, kBlockSize = 4, kNumBlocks = 320;
  static constexpr int kMaxReqs = 6, kMaxBlocksPerReq = 200;
  static constexpr int kKvWidth = kKvHeads * kDim, kQWidth = kHeads * kDim;

  // `requests` fill rows 0..; `padding` extra tokens at the end with slot -1
  // (or `padding_slot` if >= 0).
  BatchT(const std::vector<Request>& requests, int padding, int padding_slot = -1)
      : requests_(requests) {
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    k_cache_.assign(kNumBlocks * kBlockSize * kKvWidth, 0.0f);
    v_cache_ = k_cache_;
    // Non-contiguous blocks: a fixed shuffle of all block ids.
    std::vector<int32_t> free_blocks(kNumBlocks);
    for (int i = 0; i < kNumBlocks; ++i) free_blocks[i] = (i * 17 + 5) % kNumBlocks;
    int next_block = 0;
    block_tables_.assign(kMaxReqs * kMaxBlocksPerReq, -1);
    seq_lens_.assign(kMaxReqs, 0);
    qsl_.assign(kMaxReqs + 1, 0);
    int tokens = 0;
    for (size_t r = 0; r < requests.size(); ++r) {
      const int seq_len = requests[r].context + requests[r].q_len;
      seq_lens_[r] = seq_len;
      for (int b = 0; b < (seq_len + kBlockSize - 1) / kBlockSize; ++b) {
        block_tables_[r * kMaxBlocksPerReq + b] = free_blocks[next_block++];
      }
      history_k_.emplace_back(seq_len * kKvWidth);
      history_v_.emplace_back(seq_len * kKvWidth);
      for (auto& x : history_k_.back()) x = dist(rng);
      for (auto& x : history_v_.back()) x = dist(rng);
      for (int p = 0; p < requests[r].context; ++p) {  // earlier steps' K/V
        const int slot = Slot(r, p);
        StoreRow(k_cache_, slot, &history_k_[r][p * kKvWidth]);
        StoreRow(v_cache_, slot, &history_v_[r][p * kKvWidth]);
      }
      qsl_[r] = tokens;
      tokens += requests[r].q_len;
      qsl_[r + 1] = tokens;
    }
    for (size_t r = requests.size(); r < kMaxReqs; ++r) qsl_[r + 1] = tokens;
    num_tokens_ = tokens + padding;
    q_.resize(num_tokens_ * kQWidth);
    for (auto& x : q_) x = dist(rng);
    k_.assign(num_tokens_ * kKvWidth, 0.0f);
    v_.assign(num_tokens_ * kKvWidth, 0.0f);
    slots_.assign(num_tokens_, padding_slot);
    for (size_t r = 0; r < requests.size(); ++r) {
      for (int i = 0; i < requests[r].q_len; ++i) {
        const int t = qsl_[r] + i, p = requests[r].context + i;
        slots_[t] = Slot(r, p);
        std::memcpy(&k_[t * kKvWidth], &history_k_[r][p * kKvWidth], kKvWidth * 4);
        std::memcpy(&v_[t * kKvWidth], &history_v_[r][p * kKvWidth], kKvWidth * 4);
      }
    }
    for (int t = tokens; t < num_tokens_; ++t) {
      for (int i = 0; i < kKvWidth; ++i) k_[t * kKvWidth + i] = v_[t * kKvWidth + i] = 9.0f;
    }
    out_.assign(num_tokens_ * kQWidth, 123.0f);
  }

  // Index in k_cache_ / v_cache_ of kv head kvh's row at `slot` (the
  // kernel's layout, attention.h).
  static int CacheIndex(int slot, int kvh) {
    return ((slot / kBlockSize * kKvHeads + kvh) * kBlockSize + slot % kBlockSize) * kDim;
  }
  // Copies the kKvWidth values of `row` (all kv heads) into `cache` at slot.
  template <typename T>
  static void StoreRow(std::vector<T>& cache, int slot, const T* row) {
    for (int h = 0; h < kKvHeads; ++h) {
      std::copy(row + h * kDim, row + (h + 1) * kDim, cache.begin() + CacheIndex(slot, h));
    }
  }
  // The kKvWidth values at `slot` of `cache`, all kv heads.
  template <typename T>
  static std::vector<T> LoadRow(const std::vector<T>& cache, int slot) {
    std::vector<T> row(kKvWidth);
    for (int h = 0; h < kKvHeads; ++h) {
      std::copy(cache.begin() + CacheIndex(slot, h), cache.begin() + CacheIndex(slot, h) + kDim,
                row.begin() + h * kDim);
    }
    return row;
  }

  int Slot(size_t r, int pos) const {
    return block_tables_[r * kMaxBlocksPerReq + pos / kBlockSize] * kBlockSize + pos % kBlockSize;
  }

  PagedAttentionArgs Args() {
    PagedAttentionArgs a;
    a.q = q_.data();
    a.q_stride = kQWidth;
    a.k = k_.data();
    a.k_stride = kKvWidth;
    a.v = v_.data();
    a.v_stride = kKvWidth;
    a.out = out_.data();
    a.out_stride = kQWidth;
    a.k_cache = k_cache_.data();
    a.v_cache = v_cache_.data();
    a.slot_mapping = slots_.data();
    a.block_tables = block_tables_.data();
    a.seq_lens = seq_lens_.data();
    a.query_start_loc = qsl_.data();
    a.num_tokens = num_tokens_;
    a.max_num_reqs = kMaxReqs;
    a.max_blocks_per_req = kMaxBlocksPerReq;
    a.num_heads = kHeads;
    a.num_kv_heads = kKvHeads;
    a.head_dim = kDim;
    a.block_size = kBlockSize;
    a.num_blocks = kNumBlocks;
    a.scale = 1.0f / std::sqrt(static_cast<float>(kDim));
    a.compute = compute_;
    return a;
  }

  // Double-precision attention of request r's query token i (all heads).
  std::vector<double> Reference(size_t r, int i) const {
    const int t = qsl_[r] + i, pos = requests_[r].context + i;
    const double scale = 1.0 / std::sqrt(static_cast<double>(kDim));
    std::vector<double> out(kQWidth, 0.0);
    for (int h = 0; h < kHeads; ++h) {
      const int kvh = h / (kHeads / kKvHeads);
      std::vector<double> s(pos + 1);
      double mx = -1e300;
      for (int p = 0; p <= pos; ++p) {
        double dot = 0;
        for (int d = 0; d < kDim; ++d) {
          dot += static_cast<double>(q_[t * kQWidth + h * kDim + d]) *
                 history_k_[r][p * kKvWidth + kvh * kDim + d];
        }
        s[p] = dot * scale;
        mx = std::max(mx, s[p]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      for (int p = 0; p <= pos; ++p) {
        for (int d = 0; d < kDim; ++d) {
          out[h * kDim + d] += s[p] / sum * history_v_[r][p * kKvWidth + kvh * kDim + d];
        }
      }
    }
    return out;
  }

  // attention.h's kBF16 contract for request r's query token i (all heads),
  // written from its definition: per 256-key partition the scores as kBF16
  // chains (testing::Bf16ChainDot), the exact max, the numerators and their
  // sum (std::exp, a double sum), the outputs as kBF16 chains over the keys;
  // the partitions folded in order with fmas, then divided by the sum.
  std::vector<float> ReferenceBf16(size_t r, int i) const {
    constexpr int kPartition = 256;
    const int t = qsl_[r] + i, pos = requests_[r].context + i;
    const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));
    std::vector<float> out(kQWidth);
    for (int h = 0; h < kHeads; ++h) {
      const int kvh = h / (kHeads / kKvHeads);
      const float* q = &q_[t * kQWidth + h * kDim];
      std::vector<float> acc(kDim), acc_p(kDim);
      float m = 0, l = 0;
      for (int start = 0; start <= pos; start += kPartition) {
        const int n = std::min(pos + 1 - start, kPartition);
        std::vector<float> p(n);
        float mp = -INFINITY;
        for (int j = 0; j < n; ++j) {
          const float* k = &history_k_[r][(start + j) * kKvWidth + kvh * kDim];
          p[j] = scale * testing::Bf16ChainDot(q, 1, k, 1, kDim);
          mp = std::max(mp, p[j]);
        }
        double lp = 0;
        for (float& x : p) lp += (x = std::exp(x - mp));
        for (int d = 0; d < kDim; ++d) {
          acc_p[d] = testing::Bf16ChainDot(
              p.data(), 1, &history_v_[r][start * kKvWidth + kvh * kDim + d], kKvWidth, n);
        }
        if (start == 0) {
          m = mp, l = static_cast<float>(lp), acc = acc_p;
          continue;
        }
        const float mm = std::max(m, mp), c_to = std::exp(m - mm), c_from = std::exp(mp - mm);
        l = std::fma(static_cast<float>(lp), c_from, l * c_to);
        m = mm;
        for (int d = 0; d < kDim; ++d) acc[d] = std::fma(acc_p[d], c_from, acc[d] * c_to);
      }
      for (int d = 0; d < kDim; ++d) out[h * kDim + d] = acc[d] * (1.0f / l);
    }
    return out;
  }

  ComputeType compute_ = ComputeType::kF32;  // Args().compute
  std::vector<Request> requests_;
  std::vector<std::vector<float>> history_k_, history_v_;
  std::vector<float> q_, k_, v_, out_, k_cache_, v_cache_;
  std::vector<int32_t> slots_, block_tables_, seq_lens_, qsl_;
  int num_tokens_ = 0;
};
using Batch = BatchT<20>;

// A fresh prefill, a decode, a prefill continuation chunk, a decode, and a
// chunk whose window crosses several 64-key softmax chunks; row 5 unused.
const std::vector<Request> kMixed = {{0, 9}, {13, 1}, {6, 5}, {25, 1}, {127, 26}};

// Long prompts: several tiles of query tokens per request, tiles that
// straddle 64-key chunks, a prefill continuing after 40 cached positions.
const std::vector<Request> kLong = {{0, 130}, {40, 30}};

// Contexts of several 256-key partitions: a long decode (its partitions
// run as separate items when it is alone), a prompt whose tiles cross a
// partition boundary, short neighbours.
const std::vector<Request> kPartitioned = {{700, 1}, {300, 2}, {250, 12}, {0, 1}};
// One request whose multi-token tiles are long enough to be split.
const std::vector<Request> kPartitionedPrompt = {{600, 8}};

// head_dim D: 20 (AVX-512 tail), 8 (less than a vector), 64, 96 and 128
// (AVX-512's two-row groups), 160 (> 128, the wide path). B: the batch type (head counts).
template <int D, class B = BatchT<D>>
void CheckMatchesReferenceAndWritesCache(const std::vector<Request>& requests = kMixed) {
  ThreadPool pool(2);
  for (CpuIsa isa : SupportedIsas()) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      B b(requests, /*padding=*/2);
      Status st = PagedAttentionWithIsa(b.Args(), p, isa);
      ASSERT_TRUE(st.ok()) << st.ToString();
      for (size_t r = 0; r < requests.size(); ++r) {
        for (int i = 0; i < requests[r].q_len; ++i) {
          const int t = b.qsl_[r] + i;
          // The new K/V landed in the cache at the token's slot.
          const int slot = b.slots_[t];
          ASSERT_EQ(0, std::memcmp(B::LoadRow(b.k_cache_, slot).data(), &b.k_[t * B::kKvWidth],
                                   B::kKvWidth * 4));
          ASSERT_EQ(0, std::memcmp(B::LoadRow(b.v_cache_, slot).data(), &b.v_[t * B::kKvWidth],
                                   B::kKvWidth * 4));
          std::vector<double> ref = b.Reference(r, i);
          for (int j = 0; j < B::kQWidth; ++j) {
            ASSERT_NEAR(b.out_[t * B::kQWidth + j], ref[j], 2e-6)
                << CpuIsaName(isa) << " dim " << D << " request " << r << " token " << i << " elem "
                << j;
          }
        }
      }
      for (int t = b.qsl_[B::kMaxReqs]; t < b.num_tokens_; ++t) {
        for (int j = 0; j < B::kQWidth; ++j) ASSERT_EQ(b.out_[t * B::kQWidth + j], 0.0f);
      }
    }
  }
}

TEST(PagedAttentionTest, MatchesReferenceAndWritesCache) {
  CheckMatchesReferenceAndWritesCache<20>();
  CheckMatchesReferenceAndWritesCache<8>();
  CheckMatchesReferenceAndWritesCache<64>();
  CheckMatchesReferenceAndWritesCache<96>();
  CheckMatchesReferenceAndWritesCache<128>();
  CheckMatchesReferenceAndWritesCache<160>();
}

TEST(PagedAttentionTest, PaddingTokensMayShareAScratchSlot) {
  // Padding tokens write to a scratch slot no request reads (in a block the
  // allocation leaves unused).
  int scratch = -1;
  {
    Batch probe(kMixed, 0);
    std::vector<bool> used(Batch::kNumBlocks, false);
    for (int32_t id : probe.block_tables_)
      if (id >= 0) used[id] = true;
    for (int id = 0; id < Batch::kNumBlocks && scratch < 0; ++id)
      if (!used[id]) scratch = id * Batch::kBlockSize + 1;
  }
  ASSERT_GE(scratch, 0);
  Batch b(kMixed, /*padding=*/3, scratch);
  ThreadPool pool(2);
  ASSERT_TRUE(PagedAttention(b.Args(), &pool).ok());
  EXPECT_EQ(b.k_cache_[Batch::CacheIndex(scratch, 0)], 9.0f);
  EXPECT_EQ(b.v_cache_[Batch::CacheIndex(scratch, Batch::kKvHeads - 1) + 19], 9.0f);
  const int t = b.qsl_[1];
  std::vector<double> ref = b.Reference(1, 0);
  for (int j = 0; j < Batch::kQWidth; ++j)
    ASSERT_NEAR(b.out_[t * Batch::kQWidth + j], ref[j], 2e-6);
}

// Every token's output, computed in the batch, is bit-identical to the same
// token computed alone as a one-token decode step (same cache contents),
// placed in another request row, with 1 or 2 threads.
template <int D, class B = BatchT<D>>
void CheckBatchInvariance(const std::vector<Request>& requests = kMixed,
                          ComputeType compute = ComputeType::kF32) {
  ThreadPool pool1(1), pool2(2);
  for (CpuIsa isa : SupportedIsas()) {
    B b(requests, /*padding=*/2);
    b.compute_ = compute;
    ASSERT_TRUE(PagedAttentionWithIsa(b.Args(), &pool2, isa).ok());
    for (size_t r = 0; r < requests.size(); ++r) {
      for (int i = 0; i < requests[r].q_len; ++i) {
        const int t = b.qsl_[r] + i;
        const int pos = requests[r].context + i;
        for (ThreadPool* pool : {&pool1, &pool2}) {
          // Request r's token alone, in row 3, as a decode with seq_len pos+1.
          std::vector<int32_t> seq_lens(B::kMaxReqs, 0);
          std::vector<int32_t> qsl(B::kMaxReqs + 1, 1);
          qsl[0] = qsl[1] = qsl[2] = qsl[3] = 0;
          std::vector<int32_t> tables(b.block_tables_.size(), 0);
          std::copy(b.block_tables_.begin() + r * B::kMaxBlocksPerReq,
                    b.block_tables_.begin() + (r + 1) * B::kMaxBlocksPerReq,
                    tables.begin() + 3 * B::kMaxBlocksPerReq);
          seq_lens[3] = pos + 1;
          int32_t slot = b.slots_[t];
          std::vector<float> out(B::kQWidth, -1.0f);
          PagedAttentionArgs a = b.Args();
          a.q = &b.q_[t * B::kQWidth];
          a.k = &b.k_[t * B::kKvWidth];
          a.v = &b.v_[t * B::kKvWidth];
          a.out = out.data();
          a.slot_mapping = &slot;
          a.num_tokens = 1;
          a.block_tables = tables.data();
          a.seq_lens = seq_lens.data();
          a.query_start_loc = qsl.data();
          ASSERT_TRUE(PagedAttentionWithIsa(a, pool, isa).ok());
          ASSERT_EQ(0, std::memcmp(out.data(), &b.out_[t * B::kQWidth], out.size() * 4))
              << CpuIsaName(isa) << " dim " << D << " request " << r << " token " << i
              << " threads=" << pool->num_threads();
        }
      }
    }
  }
}

TEST(PagedAttentionTest, BatchInvariance) {
  CheckBatchInvariance<20>();
  CheckBatchInvariance<8>();
  CheckBatchInvariance<64>();
  CheckBatchInvariance<96>();
  CheckBatchInvariance<128>();
  CheckBatchInvariance<160>();
}

// Query heads per kv head 1, 2, 4 and 6 (with the default 3, every
// remainder of the AVX2 path's row blocks) on long prompts, whose tokens are
// attended in tiles: each token still matches the reference and its decode.
TEST(PagedAttentionTest, LongPromptsInTilesForEveryGroupSize) {
  CheckMatchesReferenceAndWritesCache<64>(kLong);
  CheckBatchInvariance<64>(kLong);
  CheckMatchesReferenceAndWritesCache<20, BatchT<20, 3, 3>>(kLong);
  CheckBatchInvariance<20, BatchT<20, 3, 3>>(kLong);
  CheckMatchesReferenceAndWritesCache<64, BatchT<64, 4, 2>>(kLong);
  CheckBatchInvariance<64, BatchT<64, 4, 2>>(kLong);
  CheckMatchesReferenceAndWritesCache<24, BatchT<24, 8, 2>>(kLong);
  CheckBatchInvariance<24, BatchT<24, 8, 2>>(kLong);
  CheckMatchesReferenceAndWritesCache<8, BatchT<8, 6, 1>>(kMixed);
  CheckBatchInvariance<8, BatchT<8, 6, 1>>(kMixed);
}

// The element conversions of a kF16 (E = uint16_t) or kFp8E4M3 (uint8_t)
// cache, and how far its output may be from the f64 reference on exact K/V.
template <typename E>
struct CacheElement;
template <>
struct CacheElement<uint16_t> {
  static constexpr KvCacheDtype kDtype = KvCacheDtype::kF16;
  static constexpr double kTolerance = 2e-3;
  static uint16_t Encode(float x) { return FloatToHalf(x); }
  static float Decode(uint16_t h) { return HalfToFloat(h); }
};
template <>
struct CacheElement<uint8_t> {
  static constexpr KvCacheDtype kDtype = KvCacheDtype::kFp8E4M3;
  static constexpr double kTolerance = 5e-2;  // 3 mantissa bits
  static uint8_t Encode(float x) { return FloatToFp8E4M3(x); }
  static float Decode(uint8_t c) { return Fp8E4M3ToFloat(c); }
};

// kF16 / kFp8E4M3 cache: the output equals, bit for bit, the f32 cache's
// (of the same compute type) on K/V rounded to the element type (in the
// cache and this step's k/v alike), and the new tokens' K/V are stored as
// their Encode. Odd dims (the conversions' scalar tails) and long prompts
// (tiles, several 64-key chunks) included.
template <typename E, int D, class B = BatchT<D>>
void CheckNarrowCacheOnRoundedKv(const std::vector<Request>& requests,
                                 ComputeType compute = ComputeType::kF32) {
  using C = CacheElement<E>;
  auto round = [](std::vector<float>& x) {
    for (float& v : x) v = C::Decode(C::Encode(v));
  };
  auto encode = [](const std::vector<float>& x) {
    std::vector<E> e(x.size());
    for (size_t i = 0; i < x.size(); ++i) e[i] = C::Encode(x[i]);
    return e;
  };
  ThreadPool pool(2);
  for (CpuIsa isa : SupportedIsas()) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      B want(requests, /*padding=*/2);
      want.compute_ = compute;
      round(want.k_cache_);
      round(want.v_cache_);
      round(want.k_);
      round(want.v_);
      ASSERT_TRUE(PagedAttentionWithIsa(want.Args(), p, isa).ok());

      B got(requests, /*padding=*/2);
      got.compute_ = compute;
      std::vector<E> k_cache = encode(got.k_cache_), v_cache = encode(got.v_cache_);
      PagedAttentionArgs a = got.Args();
      a.k_cache = k_cache.data();
      a.v_cache = v_cache.data();
      a.kv_dtype = C::kDtype;
      Status st = PagedAttentionWithIsa(a, p, isa);
      ASSERT_TRUE(st.ok()) << st.ToString();
      ASSERT_EQ(0, std::memcmp(got.out_.data(), want.out_.data(), got.out_.size() * 4))
          << CpuIsaName(isa) << " dim " << D << " " << KvCacheDtypeName(C::kDtype);
      for (int t = 0; t < got.qsl_[B::kMaxReqs]; ++t) {
        const std::vector<E> k_row = B::LoadRow(k_cache, got.slots_[t]);
        const std::vector<E> v_row = B::LoadRow(v_cache, got.slots_[t]);
        for (int j = 0; j < B::kKvWidth; ++j) {
          ASSERT_EQ(k_row[j], C::Encode(got.k_[t * B::kKvWidth + j]));
          ASSERT_EQ(v_row[j], C::Encode(got.v_[t * B::kKvWidth + j]));
        }
      }
      // And it is still attention: close to the f64 reference on the exact K/V
      // (kBF16's own accuracy: Bf16MatchesItsReference).
      if (compute != ComputeType::kF32) continue;
      double worst = 0;
      for (size_t r = 0; r < requests.size(); ++r) {
        for (int i = 0; i < requests[r].q_len; ++i) {
          const std::vector<double> ref = got.Reference(r, i);
          for (int j = 0; j < B::kQWidth; ++j) {
            worst =
                std::max(worst, std::fabs(got.out_[(got.qsl_[r] + i) * B::kQWidth + j] - ref[j]));
          }
        }
      }
      ASSERT_LE(worst, C::kTolerance) << KvCacheDtypeName(C::kDtype) << " dim " << D;
    }
  }
}

// Keys reduced in 256-key partitions, folded in order: a token's output is
// the same bits whether its tile's partitions run on one thread or as
// separate items on several (the thread count decides the split).
template <int D, class B = BatchT<D>>
void CheckPartitionsSplitAnywhere(const std::vector<Request>& requests,
                                  ComputeType compute = ComputeType::kF32) {
  for (CpuIsa isa : SupportedIsas()) {
    B one(requests, /*padding=*/1);
    one.compute_ = compute;
    ASSERT_TRUE(PagedAttentionWithIsa(one.Args(), nullptr, isa).ok());
    for (int threads : {2, 3, 4, 8}) {
      ThreadPool pool(threads);
      B b(requests, /*padding=*/1);
      b.compute_ = compute;
      ASSERT_TRUE(PagedAttentionWithIsa(b.Args(), &pool, isa).ok());
      ASSERT_EQ(0, std::memcmp(b.out_.data(), one.out_.data(), b.out_.size() * 4))
          << CpuIsaName(isa) << " dim " << D << " threads " << threads;
    }
  }
}

TEST(PagedAttentionTest, LongContextsInPartitions) {
  CheckMatchesReferenceAndWritesCache<64>(kPartitioned);
  CheckBatchInvariance<64>(kPartitioned);
  CheckPartitionsSplitAnywhere<64>(kPartitioned);
  CheckMatchesReferenceAndWritesCache<20, BatchT<20, 3, 3>>(kPartitionedPrompt);
  CheckBatchInvariance<20, BatchT<20, 3, 3>>(kPartitionedPrompt);
  CheckPartitionsSplitAnywhere<20, BatchT<20, 3, 3>>(kPartitionedPrompt);
  CheckPartitionsSplitAnywhere<8, BatchT<8, 6, 1>>({{520, 1}});
}

template <typename E>
void CheckNarrowCacheOnEveryShape() {
  CheckNarrowCacheOnRoundedKv<E, 20>(kMixed);
  CheckNarrowCacheOnRoundedKv<E, 64>(kMixed);
  CheckNarrowCacheOnRoundedKv<E, 64>(kLong);
  CheckNarrowCacheOnRoundedKv<E, 64>(kPartitioned);
  CheckNarrowCacheOnRoundedKv<E, 128>(kMixed);
  CheckNarrowCacheOnRoundedKv<E, 96, BatchT<96, 6, 1>>(kMixed);
  CheckNarrowCacheOnRoundedKv<E, 8, BatchT<8, 6, 1>>(kMixed);
}

TEST(PagedAttentionTest, HalfCacheIsTheF32PathOnHalfRoundedKv) {
  CheckNarrowCacheOnEveryShape<uint16_t>();
}

TEST(PagedAttentionTest, Fp8CacheIsTheF32PathOnFp8RoundedKv) {
  CheckNarrowCacheOnEveryShape<uint8_t>();
}

// An fp8 cache's KV write rounds like FloatToFp8E4M3 on every ISA path, for
// values of every range: ties, subnormals, saturation, infinities, NaN (in
// the values only: a NaN key's scores would take the exp through NaN, which
// the emulated build's float-to-int conversion reports as undefined).
TEST(PagedAttentionTest, Fp8CacheWritesRoundLikeFloatToFp8E4M3) {
  const std::vector<float> special = {
      0.0f,   -0.0f,  1.0625f, 1.1875f,  0x1p-9f,  0x1p-10f, 3 * 0x1p-10f, -0x1p-6f + 0x1p-11f,
      448.0f, 464.0f, -1e30f,  INFINITY, -INFINITY};
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> exponent(-14.0f, 10.0f), mantissa(1.0f, 2.0f);
  for (CpuIsa isa : SupportedIsas()) {
    Batch b(kMixed, 0);
    const int tokens = b.qsl_[Batch::kMaxReqs];
    for (int i = 0; i < tokens * Batch::kKvWidth; ++i) {
      const float x = std::ldexp(mantissa(rng), static_cast<int>(exponent(rng)));
      b.k_[i] = i < static_cast<int>(special.size()) ? special[i] : (i % 2 ? -x : x);
      b.v_[i] = i % 3 == 0 ? special[i % special.size()] : i % 3 == 1 ? x : NAN;
    }
    std::vector<uint8_t> k8(b.k_cache_.size()), v8(b.v_cache_.size());
    PagedAttentionArgs a = b.Args();
    a.k_cache = k8.data();
    a.v_cache = v8.data();
    a.kv_dtype = KvCacheDtype::kFp8E4M3;
    ASSERT_TRUE(PagedAttentionWithIsa(a, nullptr, isa).ok());
    for (int t = 0; t < tokens; ++t) {
      const std::vector<uint8_t> k_row = Batch::LoadRow(k8, b.slots_[t]);
      const std::vector<uint8_t> v_row = Batch::LoadRow(v8, b.slots_[t]);
      for (int j = 0; j < Batch::kKvWidth; ++j) {
        ASSERT_EQ(k_row[j], FloatToFp8E4M3(b.k_[t * Batch::kKvWidth + j]))
            << CpuIsaName(isa) << " " << b.k_[t * Batch::kKvWidth + j];
        ASSERT_EQ(v_row[j], FloatToFp8E4M3(b.v_[t * Batch::kKvWidth + j]))
            << CpuIsaName(isa) << " " << b.v_[t * Batch::kKvWidth + j];
      }
    }
  }
}

// kBF16: every token against ReferenceBf16 on every ISA path (the emulated
// AVX-512 BF16 and AMX ones included), with 1 and 2 threads, within a few
// ulps (measured: 1.2e-7; the exp and the sum's order are the ISA's); and it
// is not kF32 (measured: 1.8e-4 to 3e-3 away from it).
constexpr float kBf16Tol = 2e-6f;
// Where kBF16 is not the chain (test_util.h's Bf16IsTheChain: TDPBF16PS's
// own sums on AMX hardware): measured 5.4e-5, mostly a numerator one bf16
// step away where its score moved by an ulp.
constexpr float kBf16HardwareTol = 5e-4f;
template <int D, class B = BatchT<D>>
void CheckBf16MatchesReference(const std::vector<Request>& requests) {
  ThreadPool pool(2);
  for (CpuIsa isa : SupportedIsas()) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      B f32(requests, /*padding=*/2);
      ASSERT_TRUE(PagedAttentionWithIsa(f32.Args(), p, isa).ok());
      B b(requests, /*padding=*/2);
      b.compute_ = ComputeType::kBF16;
      Status st = PagedAttentionWithIsa(b.Args(), p, isa);
      ASSERT_TRUE(st.ok()) << st.ToString();
      float worst = 0, from_f32 = 0;
      for (size_t r = 0; r < requests.size(); ++r) {
        for (int i = 0; i < requests[r].q_len; ++i) {
          const int t = b.qsl_[r] + i;
          const std::vector<float> ref = b.ReferenceBf16(r, i);
          for (int j = 0; j < B::kQWidth; ++j) {
            const float got = b.out_[t * B::kQWidth + j];
            worst = std::max(worst, std::fabs(got - ref[j]));
            from_f32 = std::max(from_f32, std::fabs(got - f32.out_[t * B::kQWidth + j]));
          }
        }
      }
      EXPECT_LE(worst, Bf16IsTheChain(isa) ? kBf16Tol : kBf16HardwareTol)
          << CpuIsaName(isa) << " dim " << D;
      EXPECT_GT(from_f32, 50 * kBf16Tol) << CpuIsaName(isa) << " dim " << D;
      for (int t = b.qsl_[B::kMaxReqs]; t < b.num_tokens_; ++t) {
        for (int j = 0; j < B::kQWidth; ++j) ASSERT_EQ(b.out_[t * B::kQWidth + j], 0.0f);
      }
    }
  }
}

TEST(PagedAttentionTest, Bf16MatchesItsReference) {
  CheckBf16MatchesReference<20>(kMixed);
  CheckBf16MatchesReference<8, BatchT<8, 6, 1>>(kMixed);
  CheckBf16MatchesReference<64>(kLong);
  CheckBf16MatchesReference<160>(kMixed);
  CheckBf16MatchesReference<64>(kPartitioned);
  CheckBf16MatchesReference<24, BatchT<24, 8, 2>>(kPartitionedPrompt);
}

// kBF16 keeps kF32's guarantees: a token's output is the same bits as a
// decode, in any batch, on any thread count, with its partitions split or
// not; an f16 or fp8 cache is the same path on rounded K/V.
TEST(PagedAttentionTest, Bf16IsBatchInvariant) {
  CheckBatchInvariance<20>(kMixed, ComputeType::kBF16);
  CheckBatchInvariance<64, BatchT<64, 4, 2>>(kLong, ComputeType::kBF16);
  CheckBatchInvariance<64>(kPartitioned, ComputeType::kBF16);
  CheckPartitionsSplitAnywhere<64>(kPartitioned, ComputeType::kBF16);
  CheckPartitionsSplitAnywhere<20, BatchT<20, 3, 3>>(kPartitionedPrompt, ComputeType::kBF16);
}

TEST(PagedAttentionTest, Bf16NarrowCachesAreBf16OnRoundedKv) {
  CheckNarrowCacheOnRoundedKv<uint16_t, 20>(kMixed, ComputeType::kBF16);
  CheckNarrowCacheOnRoundedKv<uint16_t, 20>(kPartitioned, ComputeType::kBF16);
  CheckNarrowCacheOnRoundedKv<uint8_t, 64>(kMixed, ComputeType::kBF16);
}

// The K/V rows are prefetched into L1 or L2 (SetPagedAttentionPrefetch; by
// default L2 exactly on AMD's CPUs, as the int8 decode's streams): the same
// bits either way, on every ISA path, cache dtype and compute type, threaded
// or not, long decodes split into partitions included.
TEST(PagedAttentionTest, PrefetchLevelKeepsTheBitsAndIsL2OnAmdByDefault) {
  EXPECT_EQ(PagedAttentionPrefetchesToL2(), CpuIsAmd());
  ThreadPool pool(2);
  for (ComputeType compute : {ComputeType::kF32, ComputeType::kBF16}) {
    for (CpuIsa isa : SupportedIsas()) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<float> out[2];
        for (StreamPrefetch where : {StreamPrefetch::kL1, StreamPrefetch::kL2}) {
          SetPagedAttentionPrefetch(where);
          const bool l2 = where == StreamPrefetch::kL2;
          EXPECT_EQ(PagedAttentionPrefetchesToL2(), l2);
          BatchT<64> b(kPartitioned, /*padding=*/2);
          b.compute_ = compute;
          ASSERT_TRUE(PagedAttentionWithIsa(b.Args(), p, isa).ok());
          out[l2] = b.out_;
        }
        ASSERT_EQ(0, std::memcmp(out[0].data(), out[1].data(), out[0].size() * 4))
            << CpuIsaName(isa) << " " << ComputeTypeName(compute);
      }
    }
    for (StreamPrefetch where : {StreamPrefetch::kL1, StreamPrefetch::kL2}) {
      SetPagedAttentionPrefetch(where);
      CheckNarrowCacheOnRoundedKv<uint16_t, 64>(kPartitioned, compute);
      CheckNarrowCacheOnRoundedKv<uint8_t, 20>(kMixed, compute);
      if (compute == ComputeType::kF32) CheckMatchesReferenceAndWritesCache<64>(kPartitioned);
    }
  }
  SetPagedAttentionPrefetch(StreamPrefetch::kAuto);
  EXPECT_EQ(PagedAttentionPrefetchesToL2(), CpuIsAmd());
}

TEST(PagedAttentionTest, Int8IsNotAnAttentionComputeType) {
  Batch b(kMixed, 0);
  b.compute_ = ComputeType::kInt8;
  const std::vector<float> k_cache = b.k_cache_;
  Status st = PagedAttention(b.Args(), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("compute type int8"), std::string::npos) << st.message();
  EXPECT_EQ(k_cache, b.k_cache_);
}

TEST(PagedAttentionTest, UnknownKvCacheDtypeIsAnError) {
  Batch b(kMixed, 0);
  PagedAttentionArgs a = b.Args();
  a.kv_dtype = static_cast<KvCacheDtype>(7);
  Status st = PagedAttention(a, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("kv cache dtype 7"), std::string::npos) << st.message();
}

TEST(PagedAttentionTest, OutOfRangeSlotIsAnErrorAndWritesNothing) {
  Batch b(kMixed, 0);
  b.slots_[3] = Batch::kNumBlocks * Batch::kBlockSize;  // one past the end
  const std::vector<float> k_cache = b.k_cache_, out = b.out_;
  Status st = PagedAttention(b.Args(), nullptr);
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
  EXPECT_NE(st.message().find("slot_mapping[3]"), std::string::npos) << st.message();
  EXPECT_EQ(k_cache, b.k_cache_);
  EXPECT_EQ(out, b.out_);

  b.slots_[3] = -2;
  EXPECT_EQ(PagedAttention(b.Args(), nullptr).code(), StatusCode::kOutOfRange);
}

TEST(PagedAttentionTest, BadBlockTableOrMetadataIsAnError) {
  {
    Batch b(kMixed, 0);
    b.block_tables_[1 * Batch::kMaxBlocksPerReq + 2] = Batch::kNumBlocks;
    const std::vector<float> k_cache = b.k_cache_;
    Status st = PagedAttention(b.Args(), nullptr);
    EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.ToString();
    EXPECT_NE(st.message().find("block_tables[1][2]"), std::string::npos) << st.message();
    EXPECT_EQ(k_cache, b.k_cache_);
  }
  {
    Batch b(kMixed, 0);
    b.seq_lens_[2] = 3;  // fewer positions than query tokens
    EXPECT_EQ(PagedAttention(b.Args(), nullptr).code(), StatusCode::kInvalidArgument);
  }
  {
    Batch b(kMixed, 0);
    b.seq_lens_[3] = Batch::kBlockSize * Batch::kMaxBlocksPerReq + 1;  // overflows its table
    EXPECT_EQ(PagedAttention(b.Args(), nullptr).code(), StatusCode::kOutOfRange);
  }
  {
    Batch b(kMixed, 0);
    b.qsl_[2] = b.qsl_[1] - 1;  // decreasing
    EXPECT_EQ(PagedAttention(b.Args(), nullptr).code(), StatusCode::kInvalidArgument);
  }
  {
    Batch b(kMixed, 0);
    PagedAttentionArgs a = b.Args();
    a.num_kv_heads = 4;  // 6 heads do not split into 4 groups
    EXPECT_EQ(PagedAttention(a, nullptr).code(), StatusCode::kInvalidArgument);
  }
}

TEST(PagedAttentionTest, EmptyBatchIsOk) {
  Batch b({}, 0);
  EXPECT_TRUE(PagedAttention(b.Args(), nullptr).ok());
  Batch only_padding({}, 3);
  ASSERT_TRUE(PagedAttention(only_padding.Args(), nullptr).ok());
  for (float x : only_padding.out_) ASSERT_EQ(x, 0.0f);
  // No request rows at all: the request metadata may be null.
  Batch no_rows({}, 2);
  PagedAttentionArgs a = no_rows.Args();
  a.max_num_reqs = 0;
  a.query_start_loc = nullptr;
  a.seq_lens = nullptr;
  a.block_tables = nullptr;
  ThreadPool pool(2);
  ASSERT_TRUE(PagedAttention(a, &pool).ok());
  for (float x : no_rows.out_) ASSERT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace xrt
