// ConvertToF32: plain types and ggml block quantizations to f32.
//
// Block layouts (all little-endian, "d"/"m" are f16 unless noted):
//   Q4_0  {d, qs[16]}                 x = (nibble - 8) * d
//   Q4_1  {d, m, qs[16]}              x = nibble * d + m
//   Q5_0  {d, qh[4], qs[16]}          x = ((nibble | hbit << 4) - 16) * d
//   Q5_1  {d, m, qh[4], qs[16]}       x = (nibble | hbit << 4) * d + m
//   Q8_0  {d, qs[32] int8}            x = q * d
//   Q8_1  {d, s, qs[32] int8}         x = q * d (s = d * sum(q) is unused here)
// In the 32-value types, byte j holds value j in its low nibble and value j+16
// in its high nibble; bit j of qh is the fifth bit of value j.
//   Q2_K..Q8_K: 256-value super-blocks, see the per-type functions below.
//   IQ4_NL {d, qs[16]}                x = xrt::kIQ4Values[nibble] * d (nibbles as Q4_0)
//   IQ4_XS: 256-value super-blocks, see BlockIQ4_XS.
#include <cstring>

#include "compiler/frontend/source_dtype.h"

namespace xcc {

namespace {

constexpr int kQK = 32;    // values per block, 32-value types
constexpr int kQKK = 256;  // values per super-block, K types

inline uint16_t LoadU16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
inline uint32_t LoadU32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}
inline float LoadF16(const uint8_t* p) { return HalfToFloat(LoadU16(p)); }
inline float LoadF32(const uint8_t* p) {
  uint32_t b = LoadU32(p);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

void BlockQ4_0(const uint8_t* b, float* y) {
  float d = LoadF16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
    y[j + kQK / 2] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void BlockQ4_1(const uint8_t* b, float* y) {
  float d = LoadF16(b), m = LoadF16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = static_cast<float>(qs[j] & 0x0f) * d + m;
    y[j + kQK / 2] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

void BlockQ5_0(const uint8_t* b, float* y) {
  float d = LoadF16(b);
  uint32_t qh = LoadU32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < kQK / 2; ++j) {
    int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo - 16) * d;
    y[j + kQK / 2] = static_cast<float>(hi - 16) * d;
  }
}

void BlockQ5_1(const uint8_t* b, float* y) {
  float d = LoadF16(b), m = LoadF16(b + 2);
  uint32_t qh = LoadU32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < kQK / 2; ++j) {
    int lo = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    int hi = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
    y[j] = static_cast<float>(lo) * d + m;
    y[j + kQK / 2] = static_cast<float>(hi) * d + m;
  }
}

void BlockQ8_0(const uint8_t* b, float* y) {
  float d = LoadF16(b);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void BlockQ8_1(const uint8_t* b, float* y) {
  float d = LoadF16(b);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[4 + j])) * d;
}

// Q2_K {scales[16], qs[64], d, dmin}: 16 sub-blocks of 16 values; scales[i] low
// nibble scales sub-block i, high nibble is its min (both times d / dmin).
// Values are 2-bit: for each half (128 values, 32 bytes of qs), the four 2-bit
// planes of those 32 bytes hold values [0,32), [32,64), [64,96), [96,128).
void BlockQ2_K(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  float d = LoadF16(b + 80), dmin = LoadF16(b + 82);
  int is = 0;
  for (int half = 0; half < 2; ++half, q += 32) {
    for (int plane = 0; plane < 4; ++plane) {
      int shift = 2 * plane;
      for (int part = 0; part < 2; ++part) {
        uint8_t sc = scales[is++];
        float dl = d * static_cast<float>(sc & 0x0f), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l) {
          *y++ = dl * static_cast<float>((q[part * 16 + l] >> shift) & 3) - ml;
        }
      }
    }
  }
}

// Q3_K {hmask[32], qs[64], scales[12], d}: 16 sub-blocks of 16 values with
// 6-bit signed scales (stored minus 32): the low 4 bits of scale i are nibble
// (i % 8) of bytes 0..7 (low nibbles for i < 8, high nibbles for i >= 8), the
// top 2 bits are the 2-bit field (i % 4) of byte 8 + i / 4. Values are 2 bits
// from qs (laid out as in Q2_K) plus a high bit in hmask; a clear high bit
// subtracts 4.
void BlockQ3_K(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  const uint8_t* sc = b + 96;
  float d_all = LoadF16(b + 108);
  int scales[16];
  for (int i = 0; i < 16; ++i) {
    int low = (i < 8) ? (sc[i] & 0x0f) : (sc[i - 8] >> 4);
    int high = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
    scales[i] = (low | (high << 4)) - 32;
  }
  int is = 0;
  uint8_t m = 1;
  for (int half = 0; half < 2; ++half, q += 32) {
    for (int plane = 0; plane < 4; ++plane, m = static_cast<uint8_t>(m << 1)) {
      int shift = 2 * plane;
      for (int part = 0; part < 2; ++part) {
        float dl = d_all * static_cast<float>(scales[is++]);
        for (int l = 0; l < 16; ++l) {
          int idx = part * 16 + l;
          int v = ((q[idx] >> shift) & 3) - ((hm[idx] & m) ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
    }
  }
}

// 6-bit scale and min j (0..7) of the 12-byte packed array used by Q4_K/Q5_K:
// j < 4: low 6 bits of bytes j (scale) and j+4 (min); j >= 4: the nibbles of
// byte j+4 plus the top two bits of bytes j-4 (scale) and j (min).
inline void ScaleMinK4(int j, const uint8_t* q, int* sc, int* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K {d, dmin, scales[12], qs[128]}: 8 sub-blocks of 32; each 32 bytes of qs
// hold two sub-blocks (low nibbles, then high nibbles). x = d*sc*q - dmin*m.
void BlockQ4_K(const uint8_t* b, float* y) {
  float d = LoadF16(b), dmin = LoadF16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0; j < 4; ++j, q += 32) {
    int sc, mn;
    ScaleMinK4(2 * j, scales, &sc, &mn);
    float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
    ScaleMinK4(2 * j + 1, scales, &sc, &mn);
    float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
    for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
  }
}

// Q5_K {d, dmin, scales[12], qh[32], qs[128]}: Q4_K plus a fifth bit: bit
// (2j) / (2j+1) of qh[l] belongs to sub-block 2j / 2j+1.
void BlockQ5_K(const uint8_t* b, float* y) {
  float d = LoadF16(b), dmin = LoadF16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  for (int j = 0; j < 4; ++j, ql += 32) {
    int sc, mn;
    ScaleMinK4(2 * j, scales, &sc, &mn);
    float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(mn);
    ScaleMinK4(2 * j + 1, scales, &sc, &mn);
    float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(mn);
    for (int l = 0; l < 32; ++l) {
      int v = (ql[l] & 0x0f) + (((qh[l] >> (2 * j)) & 1) << 4);
      *y++ = d1 * static_cast<float>(v) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      int v = (ql[l] >> 4) + (((qh[l] >> (2 * j + 1)) & 1) << 4);
      *y++ = d2 * static_cast<float>(v) - m2;
    }
  }
}

// Q6_K {ql[128], qh[64], scales[16] int8, d}: per 128-value half, value l +
// 32k (k = 0..3) takes nibble (k / 2) of ql[l + 32 (k % 2)] and 2-bit field k
// of qh[l]; minus 32; sub-blocks of 16 values have their own int8 scale.
void BlockQ6_K(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
  float d = LoadF16(b + 208);
  for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128) {
    for (int l = 0; l < 32; ++l) {
      int is = l / 16;
      int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
  }
}

// 32 values scale * xrt::kIQ4Values[nibble] from the 16 bytes at qs (byte j:
// value j in its low nibble, j + 16 in its high one, as Q4_0).
void IQ4Nibbles(const uint8_t* qs, float scale, float* y) {
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = scale * static_cast<float>(xrt::kIQ4Values[qs[j] & 15]);
    y[j + kQK / 2] = scale * static_cast<float>(xrt::kIQ4Values[qs[j] >> 4]);
  }
}

// IQ4_NL: a Q4_0 block whose nibbles index xrt::kIQ4Values.
void BlockIQ4_NL(const uint8_t* b, float* y) { IQ4Nibbles(b + 2, LoadF16(b), y); }

// IQ4_XS {d, scales_h u16, scales_l[4], qs[128]}: 8 sub-blocks of 32, each an
// IQ4_NL block's 16 bytes with the f32 scale d * (ls - 32), ls 6 bits: its
// low nibble is nibble (i % 2) of scales_l[i / 2], its high 2 bits bits 2i of
// scales_h.
void BlockIQ4_XS(const uint8_t* b, float* y) {
  const float d = LoadF16(b);
  const uint16_t high = LoadU16(b + 2);
  const uint8_t* qs = b + 8;
  for (int i = 0; i < kQKK / kQK; ++i, qs += kQK / 2, y += kQK) {
    const int ls = ((b[4 + i / 2] >> (4 * (i % 2))) & 15) | (((high >> (2 * i)) & 3) << 4);
    IQ4Nibbles(qs, d * static_cast<float>(ls - 32), y);
  }
}

// Q8_K {d f32, qs[256] int8, bsums[16] int16}: x = q * d.
void BlockQ8_K(const uint8_t* b, float* y) {
  float d = LoadF32(b);
  for (int j = 0; j < kQKK; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[4 + j])) * d;
}

template <typename T>
void ConvertPlain(const uint8_t* src, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * sizeof(T), sizeof(T));
    out[i] = static_cast<float>(v);
  }
}

}  // namespace

Status ConvertToF32(SourceDType t, const uint8_t* src, size_t nbytes, int64_t n, float* out) {
  XRT_ASSIGN_OR_RETURN(size_t want, DTypeNBytes(t, n));
  if (nbytes != want) {
    return xrt::InvalidArgumentError("{} elements of {} need {} bytes, got {}", n,
                                     SourceDTypeName(t), want, nbytes);
  }
  if (n == 0) return Status::Ok();
  DTypeLayout layout = GetDTypeLayout(t);
  void (*block_fn)(const uint8_t*, float*) = nullptr;
  switch (t) {
    case SourceDType::kF32:
      std::memcpy(out, src, nbytes);
      return Status::Ok();
    case SourceDType::kF64:
      ConvertPlain<double>(src, n, out);
      return Status::Ok();
    case SourceDType::kI8:
      ConvertPlain<int8_t>(src, n, out);
      return Status::Ok();
    case SourceDType::kI16:
      ConvertPlain<int16_t>(src, n, out);
      return Status::Ok();
    case SourceDType::kI32:
      ConvertPlain<int32_t>(src, n, out);
      return Status::Ok();
    case SourceDType::kI64:
      ConvertPlain<int64_t>(src, n, out);
      return Status::Ok();
    case SourceDType::kU8:
      ConvertPlain<uint8_t>(src, n, out);
      return Status::Ok();
    case SourceDType::kBool:
      for (int64_t i = 0; i < n; ++i) out[i] = src[i] ? 1.0f : 0.0f;
      return Status::Ok();
    case SourceDType::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = HalfToFloat(LoadU16(src + 2 * i));
      return Status::Ok();
    case SourceDType::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(LoadU16(src + 2 * i));
      return Status::Ok();
    case SourceDType::kQ4_0:
      block_fn = BlockQ4_0;
      break;
    case SourceDType::kQ4_1:
      block_fn = BlockQ4_1;
      break;
    case SourceDType::kQ5_0:
      block_fn = BlockQ5_0;
      break;
    case SourceDType::kQ5_1:
      block_fn = BlockQ5_1;
      break;
    case SourceDType::kQ8_0:
      block_fn = BlockQ8_0;
      break;
    case SourceDType::kQ8_1:
      block_fn = BlockQ8_1;
      break;
    case SourceDType::kQ2_K:
      block_fn = BlockQ2_K;
      break;
    case SourceDType::kQ3_K:
      block_fn = BlockQ3_K;
      break;
    case SourceDType::kQ4_K:
      block_fn = BlockQ4_K;
      break;
    case SourceDType::kQ5_K:
      block_fn = BlockQ5_K;
      break;
    case SourceDType::kQ6_K:
      block_fn = BlockQ6_K;
      break;
    case SourceDType::kQ8_K:
      block_fn = BlockQ8_K;
      break;
    case SourceDType::kIQ4_NL:
      block_fn = BlockIQ4_NL;
      break;
    case SourceDType::kIQ4_XS:
      block_fn = BlockIQ4_XS;
      break;
  }
  if (block_fn == nullptr) {
    return xrt::InternalError("ConvertToF32: unhandled dtype {}", static_cast<int>(t));
  }
  int64_t blocks = n / layout.block_elems;
  for (int64_t i = 0; i < blocks; ++i) {
    block_fn(src + i * layout.block_bytes, out + i * layout.block_elems);
  }
  return Status::Ok();
}

}  // namespace xcc
