// Test and benchmark helpers for the kernels: the ISA paths to test, the
// kBF16 chain of one dot product, and weights in the K-quant formats, which have no quantizer
// (weight_format.h), made from random ggml blocks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "runtime/kernels/cpu_isa.h"
#include "runtime/kernels/matmul.h"
#include "runtime/kernels/weight_format.h"

namespace xrt {
namespace testing {

// Every ISA path this CPU can run (scalar first): kernels tests cover each.
inline std::vector<CpuIsa> SupportedIsas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Vnni,
                     CpuIsa::kAvx512Bf16, CpuIsa::kAmx}) {
    if (CpuIsaSupported(isa)) isas.push_back(isa);
  }
  return isas;
}

// kBF16 on `isa` gives matmul.h's chain bit for bit: every tier below amx,
// and the amx tier where TDPBF16PS sums as Intel's definition says (the
// emulated tiles). Where it does not (AmxBf16MatchesTheChain false: AMX
// hardware), the amx tier's kBF16 sums are the hardware's; tests compare
// them with the chain within a tolerance and check their batch invariance.
inline bool Bf16IsTheChain(CpuIsa isa) {
  return !IsaAtLeast(isa, CpuIsa::kAmx) || AmxBf16MatchesTheChain();
}

inline uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// Below 2^-126 in magnitude: a zero of x's sign.
inline float FlushToZero(float x) {
  return std::fabs(x) < std::numeric_limits<float>::min() ? std::copysign(0.0f, x) : x;
}

// matmul.h's kBF16 chain of one output, a[0..k) · w[0..k) with the elements
// `a_step` and `w_step` floats apart: over k padded to whole pairs with a zero,
// each pair's odd element then its even one, each step one fma on bf16
// operands (RoundToBf16Operand) flushed to zero. No bias.
inline float Bf16ChainDot(const float* a, int64_t a_step, const float* w, int64_t w_step,
                          int64_t k) {
  float dot = 0.0f;
  for (int64_t pair = 0; pair < k; pair += 2)
    for (int64_t kk : {pair + 1, pair}) {
      const float x = kk < k ? RoundToBf16Operand(a[kk * a_step]) : 0.0f;
      const float y = kk < k ? RoundToBf16Operand(w[kk * w_step]) : 0.0f;
      dot = FlushToZero(std::fma(x, y, dot));
    }
  return dot;
}

// The 16 signed sub-block scales (6 bits stored + 32) of a ggml block_q3_K
// from its 12 scale bytes, as ggml's dequantize_row_q3_K unpacks them: three
// little-endian words with kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f into 16
// bytes. (The tests' independent Q3_K decoders; weight_format.cc unpacks per
// scale.)
inline void GgmlQ3KScales(const uint8_t* packed, int out[16]) {
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f, tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
  aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
  aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
  aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
  uint8_t scales[16];
  std::memcpy(scales, aux, 16);
  for (int s = 0; s < 16; ++s) out[s] = scales[s] - 32;
}

// n rows of random ggml blocks of the K-quant or iq4 `format` (GgmlRowBytes(format,
// k) bytes each; k % WeightFormatBlockSize(format) == 0): random quants and 6-bit / int8
// scales, d and dmin random f16 values of either sign in [-0.02, 0.02], so
// every block is finite. Deterministic for a seed.
inline std::vector<uint8_t> RandomKQuantRows(WeightFormat format, int64_t n, int64_t k,
                                             uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t row_bytes = GgmlRowBytes(format, k),
                block_bytes = row_bytes / (k / WeightFormatBlockSize(format));
  std::vector<uint8_t> rows(std::max<int64_t>(n * row_bytes, 1));
  for (auto& b : rows) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.02f, 0.02f);
  for (int64_t b = 0; b < n * row_bytes / block_bytes; ++b) {
    uint8_t* block = rows.data() + b * block_bytes;
    const uint16_t d = FloatToHalf(scale(rng)), dmin = FloatToHalf(scale(rng));
    if (HasIQ4Table(format)) {  // block_iq4_nl / block_iq4_xs start with d
      std::memcpy(block, &d, 2);
    } else if (HasKInt8Scales(format)) {  // block_q6_K / block_q3_K end with d
      std::memcpy(block + block_bytes - 2, &d, 2);
    } else {
      std::memcpy(block, &d, 2);  // block_q4_K / block_q5_K {d, dmin, ...}
      std::memcpy(block + 2, &dmin, 2);
    }
  }
  return rows;
}

// W [n][k] in `format` packed (PackedWeightBytes(format, n, k) bytes at `out`)
// from random ggml blocks.
inline void PackRandomKQuant(WeightFormat format, int64_t n, int64_t k, uint32_t seed, void* out) {
  const std::vector<uint8_t> rows = RandomKQuantRows(format, n, k, seed);
  PackWeightsFromBlocks(format, rows.data(), n, k, static_cast<size_t>(GgmlRowBytes(format, k)),
                        out);
}

}  // namespace testing
}  // namespace xrt
