#include "runtime/kernels/dense_attention.h"
// Every helper below is always_inline into the per-ISA wrappers, so no vector
// crosses a call with the baseline ABI; the warning does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "runtime/kernels/cpu_isa.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/simd.h"

namespace xrt {
namespace {

// The kernel is written once on GCC / clang vectors of W floats and compiled
// per ISA (the wrappers at the bottom): W = 16 on AVX-512, 8 on AVX2, 4 on
// baseline x86-64 (SSE2). Every helper is always_inline, so it takes its
// caller's target.
#define XRT_INLINE __attribute__((always_inline)) inline

template <int W>
struct Lanes {
  typedef float F __attribute__((vector_size(4 * W)));
  typedef int32_t I __attribute__((vector_size(4 * W)));
};
template <int W>
using VecF = typename Lanes<W>::F;
template <int W>
using VecI = typename Lanes<W>::I;

template <int W>
XRT_INLINE VecF<W> Load(const float* p) {
  VecF<W> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <int W>
XRT_INLINE void Store(float* p, const VecF<W>& v) {
  std::memcpy(p, &v, sizeof(v));
}
template <int W>
XRT_INLINE VecF<W> Splat(float x) {
  return VecF<W>{} + x;
}
template <int W>
XRT_INLINE VecI<W> Iota() {
  VecI<W> v;
  for (int l = 0; l < W; ++l) v[l] = l;
  return v;
}

// exp(x) for x <= 0 on W lanes (softmax weights): x = n ln2 + r with r in
// [-ln2/2, ln2/2] (Cody-Waite, two-part ln2), a degree-6 polynomial for exp(r)
// (Cephes expf coefficients, about 1 ulp), times 2^n built in the exponent
// bits. x < -87 gives 0.
template <int W>
XRT_INLINE VecF<W> ExpNonPositive(const VecF<W>& x_in) {
  const VecI<W> underflow = x_in < -87.0f;
  const VecF<W> x = underflow ? Splat<W>(-87.0f) : x_in;
  // Round x / ln2 to the nearest integer with the 1.5 * 2^23 trick.
  const float shifter = 12582912.0f;
  const VecF<W> nf = (x * 1.44269504088896341f + shifter) - shifter;
  VecF<W> r = x - nf * 0.693359375f;
  r = r - nf * -2.12194440e-4f;
  VecF<W> p = Splat<W>(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + (r + 1.0f);
  const VecI<W> bits = (__builtin_convertvector(nf, VecI<W>) + 127) << 23;
  return underflow ? Splat<W>(0.0f) : p * __builtin_bit_cast(VecF<W>, bits);
}

// One (sequence, head)'s keys and values, packed by the thread that works on
// its query rows:
//  keys   [s_pad / W][head_dim][W]: key j's d-th value at
//         ((j / W) * head_dim + d) * W + j % W, keys past s zero;
//  values [s][hd_pad]: value j's d-th value at j * hd_pad + d, d past
//         head_dim zero;
// with s_pad = s rounded up to W and hd_pad = head_dim rounded up to W.
// kBF16 packs the same head as the two matmuls' weights instead (matmul.h's
// packed layout, f32 or bf16 pairs (weights_format), in `weights`, 64-byte
// aligned):
//  keys_w   W = the keys [s][head_dim] (scores: N = s, K = head_dim);
//  values_w W = the values transposed [head_dim][s] (outputs: N = head_dim,
//           K = s).
struct Packed {
  std::vector<float> keys, values;
  std::vector<float> scores;  // [rows][s_pad] of the current item
  std::vector<float> inv;     // [rows]: 1 / each row's softmax sum
  std::vector<float> weights;
  std::vector<const float*> rows;  // kBF16: the head's key and value rows
  const float* keys_w = nullptr;
  const float* values_w = nullptr;
  WeightFormat weights_format = WeightFormat::kF32;  // of keys_w and values_w
  int64_t cached = -1;  // the (sequence, head) in keys / values or keys_w / values_w
};

// PackHead reads a head's keys and values row by row, each row a row stride
// (often several KiB) past the last: PrefetchRow asks for the row
// kPrefetchRows ahead, `row` + kPrefetchRows * stride, if j + kPrefetchRows < s
// (matmul.cc's PackWeightRows / PackWeightColumns do the same for kBF16; it
// took the packing's share of a bf16 CLIP-L head from 13% to 8%).
constexpr int64_t kPrefetchRows = 8;
XRT_INLINE void PrefetchRow(const float* row, int64_t stride, int64_t j, int64_t s, int64_t hd) {
  if (j + kPrefetchRows >= s) return;
  for (int64_t d = 0; d < hd; d += 16) __builtin_prefetch(row + kPrefetchRows * stride + d);
}

template <int W>
XRT_INLINE void PackHead(const DenseAttentionArgs& a, int64_t base, int64_t h, int64_t s_pad,
                         int64_t hd_pad, Packed* pk) {
  const int64_t s = a.seq_len, hd = a.head_dim;
  pk->keys.assign(s_pad * hd, 0.0f);
  pk->values.assign(s * hd_pad, 0.0f);
  for (int64_t j = 0; j < s; ++j) {
    const float* k = a.k + (base + j) * a.k_stride + h * hd;
    const float* v = a.v + (base + j) * a.v_stride + h * hd;
    PrefetchRow(k, a.k_stride, j, s, hd);
    PrefetchRow(v, a.v_stride, j, s, hd);
    float* kp = pk->keys.data() + (j / W) * hd * W + j % W;
    for (int64_t d = 0; d < hd; ++d) kp[d * W] = k[d];
    std::memcpy(pk->values.data() + j * hd_pad, v, hd * sizeof(float));
  }
}

// The keys and the transposed values as kBF16 matmul weights on `isa`
// (PackHeadWeightsBf16 on the head's rows, a row stride apart).
void PackHeadAsWeights(const DenseAttentionArgs& a, int64_t base, int64_t h, CpuIsa isa,
                       Packed* pk) {
  const int64_t s = a.seq_len, hd = a.head_dim;
  pk->rows.resize(2 * s);
  const float** keys = pk->rows.data();
  const float** values = keys + s;
  for (int64_t j = 0; j < s; ++j) {
    keys[j] = a.k + (base + j) * a.k_stride + h * hd;
    values[j] = a.v + (base + j) * a.v_stride + h * hd;
  }
  const HeadWeights w = PackHeadWeightsBf16(keys, values, s, hd, isa, &pk->weights);
  pk->keys_w = w.keys;
  pk->values_w = w.values;
  pk->weights_format = w.format;
}

// Scores of R query rows against NB * W keys (NB blocks of the packed keys
// from `kp` on): out[r * ld + j] = q[r] · key j, one multiply-add chain per
// score over d = 0, 1, ..., head_dim - 1, whatever R, NB or the tile's place.
template <int W, int R, int NB>
XRT_INLINE void ScoreTile(const float* const* q, const float* kp, int64_t hd, float* out,
                          int64_t ld) {
  VecF<W> acc[R][NB];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) acc[r][b] = VecF<W>{};
  for (int64_t d = 0; d < hd; ++d) {
    VecF<W> k[NB];
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) k[b] = Load<W>(kp + (b * hd + d) * W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float x = q[r][d];
#pragma GCC unroll 8
      for (int b = 0; b < NB; ++b) acc[r][b] += x * k[b];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) Store<W>(out + r * ld + b * W, acc[r][b]);
}

// R rows' outputs, columns [c0, c0 + DV * W) of the padded head: for each row
// the sum over keys j = 0, 1, ..., s - 1 (in that order) of p[r][j] * value j,
// times inv[r]. Rows r < rows and columns below head_dim are stored.
template <int W, int R, int DV>
XRT_INLINE void ValueTile(const float* const* p, const float* vp, int64_t hd_pad, int64_t s,
                          int64_t c0, const float* inv, float* const* out, int rows,
                          int64_t head_dim) {
  VecF<W> acc[R][DV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int b = 0; b < DV; ++b) acc[r][b] = VecF<W>{};
  const float* v = vp + c0;
  for (int64_t j = 0; j < s; ++j, v += hd_pad) {
    VecF<W> x[DV];
#pragma GCC unroll 8
    for (int b = 0; b < DV; ++b) x[b] = Load<W>(v + b * W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const float w = p[r][j];
#pragma GCC unroll 8
      for (int b = 0; b < DV; ++b) acc[r][b] += w * x[b];
    }
  }
  for (int r = 0; r < rows; ++r) {
#pragma GCC unroll 8
    for (int b = 0; b < DV; ++b) {
      const int64_t c = c0 + b * W, n = std::min<int64_t>(W, head_dim - c);
      const VecF<W> y = acc[r][b] * inv[r];
      if (n == W) {
        Store<W>(out[r] + c, y);
      } else if (n > 0) {
        float tmp[W];
        Store<W>(tmp, y);
        std::memcpy(out[r] + c, tmp, n * sizeof(float));
      }
    }
  }
}

// Softmax numerators of one row of s_pad scores in place: exp(scale * x - m)
// with m the row's largest scaled score, keys past s set to 0. Returns 1 / their
// sum (summed in W lanes over j, then the lanes in order). The scaled scores
// are computed twice (the same product both times) rather than stored.
template <int W>
XRT_INLINE float SoftmaxRow(float* x, int64_t s, int64_t s_pad, float scale) {
  const int64_t full = s / W * W;
  const VecI<W> tail = (Iota<W>() + static_cast<int32_t>(full)) < static_cast<int32_t>(s);
  const VecF<W> minus_inf = Splat<W>(-INFINITY);
  VecF<W> mx = minus_inf;
  for (int64_t j = 0; j < full; j += W) {
    const VecF<W> y = Load<W>(x + j) * scale;
    mx = mx > y ? mx : y;
  }
  if (full < s_pad) {
    const VecF<W> y = tail ? Load<W>(x + full) * scale : minus_inf;
    mx = mx > y ? mx : y;
  }
  float m = mx[0];
  for (int l = 1; l < W; ++l) m = std::max(m, mx[l]);
  VecF<W> sum{};
  for (int64_t j = 0; j < full; j += W) {
    const VecF<W> e = ExpNonPositive<W>(Load<W>(x + j) * scale - m);
    Store<W>(x + j, e);
    sum += e;
  }
  if (full < s_pad) {
    const VecF<W> e = tail ? ExpNonPositive<W>(Load<W>(x + full) * scale - m) : VecF<W>{};
    Store<W>(x + full, e);
    sum += e;
  }
  float total = 0.0f;
  for (int l = 0; l < W; ++l) total += sum[l];
  return 1.0f / total;
}

// Rows [r0, r1) of sequence `base`, head h; see the file comment of the
// header. kR query rows per tile; kNB key blocks per score tile, kDV value
// vectors per output tile.
template <int W, int kR, int kNB, int kDV>
XRT_INLINE void AttendRowsBody(const DenseAttentionArgs& a, int64_t base, int64_t h, int64_t r0,
                               int64_t r1, Packed* pk) {
  const int64_t s = a.seq_len, hd = a.head_dim;
  const int64_t s_pad = (s + W - 1) / W * W, hd_pad = (hd + W - 1) / W * W;
  const int64_t sh = base / s * a.num_heads + h;
  if (pk->cached != sh) {
    PackHead<W>(a, base, h, s_pad, hd_pad, pk);
    pk->cached = sh;
  }
  const int64_t rows = r1 - r0, tiles = (rows + kR - 1) / kR;
  pk->scores.resize(tiles * kR * s_pad);
  float* scores = pk->scores.data();
  // Row i of the item: query, scores, output. A partial last tile repeats its
  // last row (the repeat's results are not stored).
  auto q_row = [&](int64_t i) {
    return a.q + (base + r0 + std::min(i, rows - 1)) * a.q_stride + h * hd;
  };
  // Scores: each block of kNB * W keys against every row of the item, so the
  // block is read from L1 for all of them.
  const int64_t key_blocks = s_pad / W;
  for (int64_t kb = 0; kb < key_blocks; kb += kNB) {
    const float* kp = pk->keys.data() + kb * hd * W;
    const int64_t nb = std::min<int64_t>(kNB, key_blocks - kb);
    for (int64_t t = 0; t < tiles; ++t) {
      const float* q[kR];
      for (int r = 0; r < kR; ++r) q[r] = q_row(t * kR + r);
      float* out = scores + t * kR * s_pad + kb * W;
      if (nb == kNB) {
        ScoreTile<W, kR, kNB>(q, kp, hd, out, s_pad);
      } else {
        for (int64_t b = 0; b < nb; ++b)
          ScoreTile<W, kR, 1>(q, kp + b * hd * W, hd, out + b * W, s_pad);
      }
    }
  }
  pk->inv.resize(tiles * kR);
  float* inv = pk->inv.data();
  for (int64_t i = 0; i < tiles * kR; ++i)
    inv[i] = SoftmaxRow<W>(scores + i * s_pad, s, s_pad, a.scale);
  for (int64_t t = 0; t < tiles; ++t) {
    const float* p[kR];
    float* out[kR];
    for (int r = 0; r < kR; ++r) {
      p[r] = scores + (t * kR + r) * s_pad;
      out[r] =
          a.out + (base + r0 + std::min<int64_t>(t * kR + r, rows - 1)) * a.out_stride + h * hd;
    }
    const int valid = static_cast<int>(std::min<int64_t>(kR, rows - t * kR));
    int64_t c0 = 0;
    for (; c0 + kDV * W <= hd_pad; c0 += kDV * W)
      ValueTile<W, kR, kDV>(p, pk->values.data(), hd_pad, s, c0, inv + t * kR, out, valid, hd);
    for (; c0 < hd_pad; c0 += W)
      ValueTile<W, kR, 1>(p, pk->values.data(), hd_pad, s, c0, inv + t * kR, out, valid, hd);
  }
}

// kBF16 (see the header): rows [r0, r1) of sequence `base`, head h, their
// scores and outputs by kBF16 matmuls on `isa`, the softmax on W lanes.
template <int W>
XRT_INLINE void AttendRowsBf16Body(const DenseAttentionArgs& a, int64_t base, int64_t h, int64_t r0,
                                   int64_t r1, CpuIsa isa, Packed* pk) {
  const int64_t s = a.seq_len, hd = a.head_dim, s_pad = (s + W - 1) / W * W;
  const int64_t sh = base / s * a.num_heads + h;
  if (pk->cached != sh) {
    PackHeadAsWeights(a, base, h, isa, pk);
    pk->cached = sh;
  }
  const int64_t rows = r1 - r0;
  pk->scores.resize(rows * s_pad);
  pk->inv.resize(rows);
  float* scores = pk->scores.data();
  MatmulArgs m;
  m.compute = ComputeType::kBF16;
  m.w_format = pk->weights_format;
  m.a = a.q + (base + r0) * a.q_stride + h * hd;
  m.lda = a.q_stride;
  m.packed_w = pk->keys_w;
  m.c = scores;
  m.ldc = s_pad;
  m.m = rows;
  m.n = s;
  m.k = hd;
  MatmulWithIsa(m, nullptr, isa);
  for (int64_t i = 0; i < rows; ++i)
    pk->inv[i] = SoftmaxRow<W>(scores + i * s_pad, s, s_pad, a.scale);
  float* out = a.out + (base + r0) * a.out_stride + h * hd;
  m.a = scores;
  m.lda = s_pad;
  m.packed_w = pk->values_w;
  m.c = out;
  m.ldc = a.out_stride;
  m.n = hd;
  m.k = s;
  MatmulWithIsa(m, nullptr, isa);
  for (int64_t i = 0; i < rows; ++i) {
    const float inv = pk->inv[i];
    for (int64_t d = 0; d < hd; ++d) out[i * a.out_stride + d] *= inv;
  }
}

using AttendRowsFn = void (*)(const DenseAttentionArgs&, int64_t, int64_t, int64_t, int64_t,
                              Packed*);
using AttendRowsBf16Fn = void (*)(const DenseAttentionArgs&, int64_t, int64_t, int64_t, int64_t,
                                  CpuIsa, Packed*);

// Baseline: 4-lane vectors (SSE2 on x86-64).
void AttendRowsScalar(const DenseAttentionArgs& a, int64_t base, int64_t h, int64_t r0, int64_t r1,
                      Packed* pk) {
  AttendRowsBody<4, 4, 2, 2>(a, base, h, r0, r1, pk);
}

void AttendRowsBf16Scalar(const DenseAttentionArgs& a, int64_t base, int64_t h, int64_t r0,
                          int64_t r1, CpuIsa isa, Packed* pk) {
  AttendRowsBf16Body<4>(a, base, h, r0, r1, isa, pk);
}

#if defined(__x86_64__)
XRT_TARGET_AVX2 void AttendRowsBf16Avx2(const DenseAttentionArgs& a, int64_t base, int64_t h,
                                        int64_t r0, int64_t r1, CpuIsa isa, Packed* pk) {
  AttendRowsBf16Body<8>(a, base, h, r0, r1, isa, pk);
}

XRT_TARGET_AVX512 void AttendRowsBf16Avx512(const DenseAttentionArgs& a, int64_t base, int64_t h,
                                            int64_t r0, int64_t r1, CpuIsa isa, Packed* pk) {
  AttendRowsBf16Body<16>(a, base, h, r0, r1, isa, pk);
}

XRT_TARGET_AVX2 void AttendRowsAvx2(const DenseAttentionArgs& a, int64_t base, int64_t h,
                                    int64_t r0, int64_t r1, Packed* pk) {
  AttendRowsBody<8, 4, 2, 2>(a, base, h, r0, r1, pk);
}

XRT_TARGET_AVX512 void AttendRowsAvx512(const DenseAttentionArgs& a, int64_t base, int64_t h,
                                        int64_t r0, int64_t r1, Packed* pk) {
  AttendRowsBody<16, 4, 4, 4>(a, base, h, r0, r1, pk);
}
#endif

// The variants for this process's ISA (BestCpuIsa, fixed per process as for
// the other kernels).
struct AttendRows {
  AttendRowsFn f32;
  AttendRowsBf16Fn bf16;
};
AttendRows AttendRowsFor(CpuIsa isa) {
#if defined(__x86_64__)
  if (IsaAtLeast(isa, CpuIsa::kAvx512)) return {AttendRowsAvx512, AttendRowsBf16Avx512};
  if (isa == CpuIsa::kAvx2) return {AttendRowsAvx2, AttendRowsBf16Avx2};
#endif
  return {AttendRowsScalar, AttendRowsBf16Scalar};
}

// Query rows per work item.
constexpr int64_t kRowsPerItem = 48;

}  // namespace

Status DenseAttention(const DenseAttentionArgs& a, ThreadPool* pool) {
  static const CpuIsa isa = BestCpuIsa();
  return DenseAttentionWithIsa(a, pool, isa);
}

Status DenseAttentionWithIsa(const DenseAttentionArgs& a, ThreadPool* pool, CpuIsa isa) {
  if (a.num_tokens <= 0 || a.seq_len <= 0 || a.num_heads <= 0 || a.head_dim <= 0)
    return InvalidArgumentError(
        "attention: num_tokens {}, seq_len {}, num_heads {}, head_dim {} must be positive",
        a.num_tokens, a.seq_len, a.num_heads, a.head_dim);
  if (a.head_dim > 256)
    return InvalidArgumentError("attention: head_dim {} is above the supported 256", a.head_dim);
  if (a.num_tokens % a.seq_len != 0)
    return InvalidArgumentError("attention: num_tokens {} is not a multiple of seq_len {}",
                                a.num_tokens, a.seq_len);
  if (a.compute != ComputeType::kF32 && a.compute != ComputeType::kBF16)
    return InvalidArgumentError("attention: compute type {} is not f32 or bf16",
                                ComputeTypeName(a.compute));
  const int64_t width = a.num_heads * a.head_dim;
  for (int64_t stride : {a.q_stride, a.k_stride, a.v_stride, a.out_stride})
    if (stride < width)
      return InvalidArgumentError("attention: row stride {} is shorter than {} columns", stride,
                                  width);
  const int64_t num_seqs = a.num_tokens / a.seq_len;
  const int64_t blocks = (a.seq_len + kRowsPerItem - 1) / kRowsPerItem;
  const int64_t items = num_seqs * a.num_heads * blocks;
  const AttendRows attend = AttendRowsFor(isa);
  const bool bf16 = a.compute == ComputeType::kBF16;
  auto run = [&](int64_t begin, int64_t end) {
    Packed pk;
    for (int64_t item = begin; item < end; ++item) {
      const int64_t block = item % blocks, sh = item / blocks;
      const int64_t h = sh % a.num_heads, base = sh / a.num_heads * a.seq_len;
      const int64_t r0 = block * kRowsPerItem, r1 = std::min(a.seq_len, r0 + kRowsPerItem);
      if (bf16) {
        attend.bf16(a, base, h, r0, r1, isa, &pk);
      } else {
        attend.f32(a, base, h, r0, r1, &pk);
      }
    }
  };
  if (pool) {
    pool->ParallelFor(items, run);
  } else {
    run(0, items);
  }
  return Status::Ok();
}

}  // namespace xrt
