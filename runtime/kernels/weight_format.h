// WeightFormat: how a linear layer's weight is stored for the matmul
// microkernel, and the packed layouts of each format (the contract between
// `xcc`, which packs, and `xrt`, which reads; changing a layout is an artifact
// format change).
//
// Every format uses the panel structure of the f32 layout (matmul.h): W [N][K]
// (HF layout, out_features x in_features) is cut into ceil(N / kPackNR)
// panels of kPackNR = 32 output columns; columns past N in the last panel are
// zero. Panel p starts at byte p * PackedPanelBytes(format, K). Within a
// panel:
//
//   f32         float    [K][32]                      (matmul.h's layout)
//   f16, bf16   uint16_t [K][32]                      IEEE half / bfloat16 bits
//   bf16_pairs, bf16_pairs_amx  uint32_t [ceil(K / 2)][32]  bf16 bits, two
//       k-rows a dword: dword j of pair-row p holds column j at k-rows 2p and
//       2p + 1; bf16_pairs has k-row 2p in its low half, bf16_pairs_amx k-row
//       2p + 1 (an odd K's missing k-row is a zero). matmul.h's kBF16 chain
//       adds a pair's odd product first: vdpbf16ps adds a pair's high
//       product first, AMX's TDPBF16PS its low one, so each order is one
//       unit's operands as stored (a chunk of 16 pair-rows of a panel's 16
//       columns is one 16 x 64-byte AMX B tile, row stride 128 bytes); the
//       other unit swaps each dword's halves. `xcc compile --compute bf16`
//       stores a linear's bf16 weight in the order of the target's unit
//       (format 1.14): paired at compile time instead of on every read.
//   q8_0, q4_0, q4_1: K / 32 groups of 32 k-values, each group is
//       scale  uint16_t [32]   f16 bits, one per column
//       min    uint16_t [32]   f16 bits, one per column      (q4_1 only)
//       quants [32 k-rows]:    q8_0: int8_t [32] per k-row (column j at byte j)
//                              q4_0, q4_1: uint8_t [64] per quad of k-rows
//                              4q .. 4q+3, byte 4j + t holds column j at k-row
//                              4q + t in its low nibble and column j + 16 in
//                              its high nibble (QuadNibbleByte)
//   q5_0, q5_1: the q4 groups with bit 4 of each quant between the scales
//   (and mins) and the nibbles (format 1.15):
//       scale  uint16_t [32]   f16 bits, one per column
//       min    uint16_t [32]   f16 bits, one per column      (q5_1 only)
//       high   uint8_t [16] per quad of k-rows: the bit of column j at k-row
//                              kk is bit K5HighBit(j) of byte K5HighByte(kk, j)
//                              (q5_k's high-bit layout, kk in 0..31)
//       quants uint8_t [64] per quad, the low 4 bits as q4_0's
//   Group sizes: q8_0 64 + 1024 = 1088 bytes, q4_0 64 + 512 = 576, q4_1 128 +
//   512 = 640, q5_0 64 + 128 + 512 = 704, q5_1 128 + 128 + 512 = 768 (all
//   multiples of 64, so with a 64-byte aligned base every group and every
//   k-row block of a group is cache-line aligned).
//   The q4 quads (format 1.10; 1.0-1.9 stored a k-row's 16 bytes together)
//   are the operand order of the int8 kernels: one load and a mask give a
//   vector of 4-k-row column dots for vpmaddubsw against four activation bytes
//   broadcast per dword, with no shuffle of either operand.
//
// Values (every format dequantizes to an exact f32 value, computed the same
// way by every path, so that the result of a matmul on a packed weight is
// bit-identical to the f32 matmul on the dequantized weight):
//   f16, bf16, bf16_pairs(_amx):  the value of the 16-bit float (exact in f32)
//   q8_0:       scale * q                          (q signed)
//   q4_0:       scale * (q - 8)                    (q in 0..15)
//   q4_1:       fma(scale, q, min)                 (q in 0..15)
//   q5_0:       scale * (q - 16)                   (q in 0..31)
//   q5_1:       fma(scale, q, min)                 (q in 0..31)
// Each of these equals ggml's (and gguf-py's) dequantization of the same block
// bit for bit: scale and min are f16, q has at most 8 bits, so the products
// are exact in f32 and only q4_1's and q5_1's sums round (once).
//
// K-quants (ggml's Q4_K, Q5_K, Q6_K; the same bytes per weight as ggml: 4.5,
// 5.5 and 6.5625 bits): K / 256 super-blocks of 256 k-values (kSuperBlock),
// each super-block of a panel is (offsets in bytes, column j at index j)
//   q4_k (4608 bytes): d uint16_t[32] @0, dmin uint16_t[32] @64 (f16 bits),
//       scale_lo uint8_t[8][32] @128, scale_hi uint8_t[4][32] @384,
//       qs: 64 quads of 64 bytes @512, as q4_0's (QuadNibbleByte: byte
//       64 (kk / 4) + 4 (j % 16) + kk % 4, column j < 16 in the low nibble)
//   q5_k (5632 bytes): as q4_k up to @512, then qh: 16 bytes per quad @512
//       (bit 4 of each quant: K5HighByte / K5HighBit), qs @1536
//   q6_k (6720 bytes): d uint16_t[32] @0, scales int8_t[16][32] @64,
//       qh: 32 bytes per quad @576 (bits 4-5 of each quant as a 2-bit field:
//       K6HighByte / K6HighShift), ql @2624 (low 4 bits, as q4_k's qs).
//   q3_k (3648 bytes; format 1.16): d uint16_t[32] @0, scales int8_t[16][32]
//       @64 (ggml's 6-bit scale - 32), high: 16 bytes per quad @576 (bit 2
//       of each quant at q5_k's K5HighByte / K5HighBit), crumbs @1600: 32
//       quad pairs of 64 bytes, the low 2 bits of each quant (CrumbByte /
//       CrumbShift). Pair P (k-rows 8P..8P+7) keeps quad q = 2P + e's bits
//       at the bytes of a q4 quad (4 (j % 16) + kk % 4), column j < 16 at
//       bits 2e, j >= 16 at bits 4 + 2e: (pair >> 2e) & 0x33 is quad q as
//       q4 nibble bytes holding 0..3, and bit 2 of each nibble from the
//       high bytes makes them the quants 0..7.
//   The high bits follow the quads (format 1.11; 1.5-1.10 stored a k-row's
//   nibbles together and the high bits around them). A 32-byte half h of a
//   quad holds, per 16-byte lane L, byte 4c + t = columns 8h + 4L + c (low
//   nibble, n = 0) and that + 16 (high, n = 1) at k-row t. q5_k's byte 4c + t
//   of its 16 holds that position's bit for every (L, h, n), at bit
//   4L + 2h + n: one broadcast of the 16 bytes serves every vector of the
//   quad with a shift and a mask. q6_k's byte 4c + t of its 32 (byte 16L + 4c
//   + t: the same position in the half) holds the field of (h, n) at bits
//   2 (2h + n) and up: one load, a shift and a mask per vector.
//   q4_k / q5_k: sub-block s (k-rows 32s..32s+31) has a 6-bit scale sc and
//   6-bit min m per column: sc = (lo & 15) | (hi & 3) << 4,
//   m = (lo >> 4) | ((hi >> 2) & 3) << 4 with lo = scale_lo[s][j],
//   hi = scale_hi[s / 2][j] >> (4 * (s % 2)).
//   q6_k, q3_k: sub-block s (k-rows 16s..16s+15) has the scale scales[s][j].
// Values: q4_k, q5_k: (d * sc) * q - dmin * m with d * sc and dmin * m each
// an f32 product (exact), q in 0..15 / 0..31 (the product with q is exact,
// so only the subtraction rounds); q6_k: (d * sc) * (q - 32), q in 0..63,
// q3_k: (d * sc) * (q - 4), q in 0..7 (d * sc exact, the product with q
// rounds once). These are ggml's
// (dequantize_row_q4_K etc.) and gguf-py's values bit for bit.
//
// The non-linear 4-bit formats (ggml's IQ4_NL and IQ4_XS, format 1.17): a
// quant q (0..15) indexes kIQ4Values, ggml's kvalues_iq4nl (int8, -127..113):
//   iq4_nl: the q4_0 group (576 bytes: scale f16[32], quads @64), value
//       scale * kIQ4Values[q]: ggml's 18 bytes per 32 values.
//   iq4_xs (4672 bytes per super-block of 256): d uint16_t[32] @0, scales
//       int8_t[16][32] @64 (ggml's 6-bit ls - 32 of 32-row sub-block s / 2,
//       stored for each 16-row sub-block s as q6_k's, so that iq4_xs reads
//       its scales as q3_k / q6_k do; rows 2t and 2t + 1 are equal, and the
//       AVX512_VNNI int8 kernel reads row 2t alone), quads @576 (as q4_k's
//       qs); value
//       (d * sc) * kIQ4Values[q]. 146 bytes per 256 values of a column:
//       ggml's 136 with the scales widened and stored twice.
//   Both products are exact in f32 (11 + 6 + 7 significant bits at most), as
//   ggml's and gguf-py's dequantization (dequantize_row_iq4_nl / _xs).
//
// Formats that need K % 32 == 0 (the q formats): BlockSize(format) == 32;
// the K-quants need K % 256 == 0 (BlockSize 256). GGUF guarantees it for
// tensors stored in those types. The 16/32-bit formats have BlockSize 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace xrt {

// Values match xpk::DType where both exist (checked where they meet).
enum class WeightFormat : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kQ8_0 = 6,
  // 7 and 8 were q4_0 / q4_1 with a k-row's quants together (formats 1.4-1.9).
  // 9, 12, 13 were q4_k, q6_k, q5_k with a k-row's nibbles together
  // (formats 1.5-1.10); 10 and 11 q5_k and q6_k with bit-plane high bits.
  kQ4_0 = 14,
  kQ4_1 = 15,
  kQ4_K = 16,
  kQ5_K = 17,
  kQ6_K = 18,
  kBF16Pairs = 19,
  kBF16PairsAmx = 20,
  kQ5_0 = 21,
  kQ5_1 = 22,
  kQ3_K = 23,
  kIQ4_NL = 24,
  kIQ4_XS = 25,
};

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q3_k",
// "q4_k", "q5_k", "q6_k", "bf16_pairs", "bf16_pairs_amx", "iq4_nl", "iq4_xs".
const char* WeightFormatName(WeightFormat f);
// The inverse; false if `name` is not a format.
bool WeightFormatFromName(std::string_view name, WeightFormat* out);

// k-values per quantization group (32 for the q formats, 256 for the
// K-quants, else 1). A packed
// weight's K must be a multiple of it.
int WeightFormatBlockSize(WeightFormat f);

// Bytes of one panel (kPackNR columns) of a weight with `K` input features.
// Precondition: K % WeightFormatBlockSize(f) == 0.
int64_t PackedPanelBytes(WeightFormat f, int64_t K);
// Bytes of W [N][K] packed: ceil(N / kPackNR) panels.
int64_t PackedWeightBytes(WeightFormat f, int64_t N, int64_t K);

// Packs W [N][K] given as f32 rows (row stride K) into `out`
// (PackedWeightBytes(f, N, K) bytes), quantizing for the q formats with
// ggml's reference rounding (quantize_row_*_ref; gguf-py's quantize gives the
// same bytes), all in f32 with id = 1 / d (0 if d == 0) multiplying the
// values and only the stored d (and m) rounded to f16 (nearest even):
// q8_0: d = amax / 127, q = round(x * id) (halves away from zero);
// q4_0: d = max / -8 where max is the first value of largest magnitude,
// q = min(15, trunc(x * id + 8.5)); q4_1: d = (max - min) / 15, m = min,
// q = min(15, trunc((x - min) * id + 0.5)); q5_0 and q5_1 as q4_0 and q4_1
// with 16 for 8 and 31 for 15 (q5_0: d = max / -16, q = min(31, trunc(x * id
// + 16.5)); q5_1: d = (max - min) / 31). f16/bf16 round to nearest even;
// bf16_pairs(_amx) store the operand kBF16 compute makes of each value
// (RoundToBf16Operand, matmul.h: nearest even, subnormals to signed zeros), so
// a kBF16 matmul on them gives the bits it gives on `w` in f32. Deterministic; single-threaded.
// Precondition: `f` is not a K-quant or iq4_nl (their quantizers are not implemented; their weights
// come from GGUF blocks).
void PackWeightsFrom(WeightFormat f, const float* w, int64_t N, int64_t K, void* out);

// Packs W [N][K] given in ggml's row-major block encoding of the same format
// (bf16_pairs(_amx): plain bf16 rows; each row is K / 32 blocks: q8_0 {f16 d, int8 qs[32]}, q4_0
// {f16 d, uint8 qs[16]}, q4_1 {f16 d, f16 m, uint8 qs[16]}, q5_0 {f16 d, uint32 qh, uint8 qs[16]},
// q5_1 {f16 d, f16 m, uint32 qh, uint8 qs[16]} (value i's bit 4 is bit i of qh); the K-quants are K
// / 256 blocks of ggml's block_q4_K {f16 d, dmin; uint8 scales[12]; uint8 qs[128]}, block_q5_K {f16
// d, dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]}, block_q6_K {uint8 ql[128]; uint8 qh[64];
// int8 scales[16]; f16 d}, block_q3_K {uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; f16 d};
// iq4_nl {f16 d, uint8 qs[16]} (q4_0's), iq4_xs {f16 d; uint16 scales_h; uint8 scales_l[4]; uint8
// qs[128]} (sub-block i's ls: nibble i % 2 of scales_l[i / 2] | bits 2i..2i+1 of scales_h << 4);
// for f16/bf16 plain 16-bit rows) into `out`, losslessly: the packed
// weight dequantizes to exactly the values ggml's dequantization of `blocks` gives. `row_bytes` is
// the byte size of one source row.
void PackWeightsFromBlocks(WeightFormat f, const uint8_t* blocks, int64_t N, int64_t K,
                           size_t row_bytes, void* out);

// Bytes of one ggml block_q3_K {uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; f16 d}
// (256 values, 3.4375 bits each).
inline constexpr int64_t kGgmlQ3KBlockBytes = 110;
// Bytes of one ggml block_iq4_xs {f16 d; uint16 scales_h; uint8 scales_l[4]; uint8 qs[128]} (256
// values, 4.25 bits each).
inline constexpr int64_t kGgmlIQ4XSBlockBytes = 136;

// ---- Added for the kernels and the packers (helpers of the above) ----

// k-values per quantization group of the q formats.
constexpr int kQuantGroup = 32;

// True for q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl (the formats of 32-row
// groups).
constexpr bool IsQuantizedFormat(WeightFormat f) {
  return f == WeightFormat::kQ8_0 || f == WeightFormat::kQ4_0 || f == WeightFormat::kQ4_1 ||
         f == WeightFormat::kQ5_0 || f == WeightFormat::kQ5_1 || f == WeightFormat::kIQ4_NL;
}

// ggml's kvalues_iq4nl: the value of an iq4_nl / iq4_xs quant.
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// True for iq4_nl and iq4_xs: a quant indexes kIQ4Values.
constexpr bool HasIQ4Table(WeightFormat f) {
  return f == WeightFormat::kIQ4_NL || f == WeightFormat::kIQ4_XS;
}

// True for q4_1 and q5_1: a group has an f16 min per column after its
// scales, and a value is fma(scale, q, min).
constexpr bool HasGroupMin(WeightFormat f) {
  return f == WeightFormat::kQ4_1 || f == WeightFormat::kQ5_1;
}

// What a group format subtracts from its unsigned quant: 8 for q4_0, 16 for
// q5_0 (value = scale * (q - offset)); 0 for the others.
constexpr int QuantGroupQuantOffset(WeightFormat f) {
  return f == WeightFormat::kQ4_0 ? 8 : f == WeightFormat::kQ5_0 ? 16 : 0;
}

// True for bf16_pairs and bf16_pairs_amx.
constexpr bool IsBf16PairsFormat(WeightFormat f) {
  return f == WeightFormat::kBF16Pairs || f == WeightFormat::kBF16PairsAmx;
}

// True for f16, bf16, bf16_pairs(_amx): a 16-bit float per value.
constexpr bool Is16BitFormat(WeightFormat f) {
  return f == WeightFormat::kF16 || f == WeightFormat::kBF16 || IsBf16PairsFormat(f);
}

// k-values per super-block of the K-quants.
constexpr int kSuperBlock = 256;

// True for q3_k, q4_k, q5_k, q6_k, iq4_xs (the formats of super-blocks).
constexpr bool IsKQuantFormat(WeightFormat f) {
  return f == WeightFormat::kQ3_K || f == WeightFormat::kQ4_K || f == WeightFormat::kQ5_K ||
         f == WeightFormat::kQ6_K || f == WeightFormat::kIQ4_XS;
}

// True for q3_k, q6_k and iq4_xs: 16 sub-blocks of 16 with an int8 scale
// each and no min; a value is (d * sc) * (q - KQuantOffset), iq4_xs's (d *
// sc) * kIQ4Values[q].
constexpr bool HasKInt8Scales(WeightFormat f) {
  return f == WeightFormat::kQ3_K || f == WeightFormat::kQ6_K || f == WeightFormat::kIQ4_XS;
}

// What q3_k (4) and q6_k (32) subtract from their unsigned quant; 0 for the
// others (iq4_xs looks its quants up).
constexpr int KQuantOffset(WeightFormat f) {
  return f == WeightFormat::kQ6_K ? 32 : f == WeightFormat::kQ3_K ? 4 : 0;
}

// Bytes of one super-block (kSuperBlock k-rows of a panel) of a K-quant:
// 3648, 4608, 5632, 6720, iq4_xs 4672; 0 for the others.
constexpr int64_t SuperBlockBytes(WeightFormat f) {
  return f == WeightFormat::kQ3_K     ? 3648
         : f == WeightFormat::kQ4_K   ? 4608
         : f == WeightFormat::kQ5_K   ? 5632
         : f == WeightFormat::kQ6_K   ? 6720
         : f == WeightFormat::kIQ4_XS ? 4672
                                      : 0;
}

// Byte offsets within a K-quant super-block of a panel (the layout above).
inline constexpr int64_t kKDminOffset = 64;      // q4_k, q5_k: dmin
inline constexpr int64_t kKScaleLoOffset = 128;  // q4_k, q5_k: scale_lo
inline constexpr int64_t kKScaleHiOffset = 384;  // q4_k, q5_k: scale_hi
inline constexpr int64_t kK5HighOffset = 512;    // q5_k: qh
inline constexpr int64_t kK6ScalesOffset = 64;   // q6_k, q3_k, iq4_xs: scales
inline constexpr int64_t kK6HighOffset = 576;    // q6_k: qh
inline constexpr int64_t kK3HighOffset = 576;    // q3_k: bit 2 of each quant
// Where the low bits of the quants start: q4_k 512, q5_k 1536, q6_k 2624,
// iq4_xs 576 (nibble quads), q3_k 1600 (crumb quad pairs).
constexpr int64_t KLowQuantsOffset(WeightFormat f) {
  return f == WeightFormat::kQ6_K     ? 2624
         : f == WeightFormat::kQ5_K   ? 1536
         : f == WeightFormat::kQ3_K   ? 1600
         : f == WeightFormat::kIQ4_XS ? 576
                                      : 512;
}
// k-rows per sub-block: 16 for q3_k / q6_k / iq4_xs, 32 for q4_k / q5_k.
constexpr int KSubBlockRows(WeightFormat f) { return HasKInt8Scales(f) ? 16 : 32; }
// k-rows that share one scale: KSubBlockRows, but 32 for iq4_xs, whose
// 16-row scales come in equal pairs (ggml's 32-row sub-blocks).
constexpr int KScaleRows(WeightFormat f) {
  return f == WeightFormat::kIQ4_XS ? 32 : KSubBlockRows(f);
}

// Bytes of one group (kQuantGroup k-rows of a panel) of a q format: 1088,
// 576 (q4_0, iq4_nl), 640, 704, 768; 0 for the others.
constexpr int64_t QuantGroupBytes(WeightFormat f) {
  return f == WeightFormat::kQ8_0                                 ? 1088
         : f == WeightFormat::kQ4_0 || f == WeightFormat::kIQ4_NL ? 576
         : f == WeightFormat::kQ4_1                               ? 640
         : f == WeightFormat::kQ5_0                               ? 704
         : f == WeightFormat::kQ5_1                               ? 768
                                                                  : 0;
}

// Where the quants start in a group of q8_0 / q4_0 / iq4_nl (64), q4_1
// (128), q5_0 (192) or q5_1 (256).
constexpr int64_t QuantGroupQuantsOffset(WeightFormat f) {
  return f == WeightFormat::kQ5_1   ? 256
         : f == WeightFormat::kQ5_0 ? 192
         : f == WeightFormat::kQ4_1 ? 128
                                    : 64;
}

// True for the formats whose quants are 4-bit nibbles stored as quads (q4_0,
// q4_1, q5_0, q5_1, iq4_nl, iq4_xs and q4_k / q5_k / q6_k's low 4 bits; not
// q3_k, whose low 2 bits are crumbs).
constexpr bool HasQuadNibbles(WeightFormat f) {
  return f == WeightFormat::kQ4_0 || f == WeightFormat::kQ4_1 || f == WeightFormat::kQ5_0 ||
         f == WeightFormat::kQ5_1 || f == WeightFormat::kQ4_K || f == WeightFormat::kQ5_K ||
         f == WeightFormat::kQ6_K || HasIQ4Table(f);
}

// True for q5_0, q5_1 and q5_k: bit 4 of each quant is stored apart from the
// nibbles, 16 bytes per quad at FifthBitsOffset (K5HighByte / K5HighBit).
constexpr bool HasFifthBits(WeightFormat f) {
  return f == WeightFormat::kQ5_0 || f == WeightFormat::kQ5_1 || f == WeightFormat::kQ5_K;
}

// Where those bytes start in a group (q5_0 64, q5_1 128) or a super-block
// (q5_k, kK5HighOffset).
constexpr int64_t FifthBitsOffset(WeightFormat f) {
  return f == WeightFormat::kQ5_0 ? 64 : f == WeightFormat::kQ5_1 ? 128 : kK5HighOffset;
}

// The largest quant of a format with quad nibbles or crumbs (7, 15, 31 or
// 63; iq4_nl / iq4_xs: 15, an index into kIQ4Values).
constexpr int MaxQuant(WeightFormat f) {
  return f == WeightFormat::kQ6_K ? 63 : HasFifthBits(f) ? 31 : f == WeightFormat::kQ3_K ? 7 : 15;
}

// True if a bf16_pairs(_amx) panel keeps k-row k in the low half of its
// dwords (bf16_pairs: the even k-rows; bf16_pairs_amx: the odd ones).
constexpr bool Bf16PairsLowHalf(WeightFormat f, int64_t k) {
  return (k % 2 == 1) == (f == WeightFormat::kBF16PairsAmx);
}

// The byte of a bf16_pairs(_amx) panel that starts column j's bf16 value at
// k-row k (a pair-row is 32 = kPackNR dwords; x86 is little-endian: a dword's
// low half is its first two bytes).
constexpr int64_t Bf16PairsByte(WeightFormat f, int64_t k, int j) {
  return (k / 2 * 32 + j) * 4 + (Bf16PairsLowHalf(f, k) ? 0 : 2);
}

// The byte of a group's (q4_0, q4_1) or super-block's (K-quants, from
// KLowQuantsOffset) nibbles that holds column j (0..31) at k-row kk, in its
// low nibble for j < 16, its high nibble for j >= 16.
constexpr int QuadNibbleByte(int kk, int j) { return 64 * (kk / 4) + 4 * (j % 16) + kk % 4; }

// The 4-bit quant of column j at k-row kk of the quads at `quads` (that byte's
// low nibble for j < 16, its high nibble for j >= 16).
inline int QuadNibbleAt(const uint8_t* quads, int kk, int j) {
  const uint8_t byte = quads[QuadNibbleByte(kk, j)];
  return j < 16 ? byte & 15 : byte >> 4;
}

// q5_k, q5_0, q5_1: the byte (from FifthBitsOffset) and bit that hold bit 4
// of column j's quant at k-row kk (0..255 of a super-block, 0..31 of a
// group).
constexpr int K5HighByte(int kk, int j) { return 16 * (kk / 4) + 4 * (j % 4) + kk % 4; }
constexpr int K5HighBit(int j) { return 4 * (j % 8 / 4) + 2 * (j % 16 / 8) + j / 16; }

// The unsigned quant of column j at k-row kk (0..31) of a q4_0 / q4_1 /
// q5_0 / q5_1 / iq4_nl group starting at `group` (the offset, table and
// scale not applied).
inline int GroupNibbleQuantAt(WeightFormat f, const uint8_t* group, int kk, int j) {
  int q = QuadNibbleAt(group + QuantGroupQuantsOffset(f), kk, j);
  if (HasFifthBits(f))
    q |= ((group[FifthBitsOffset(f) + K5HighByte(kk, j)] >> K5HighBit(j)) & 1) << 4;
  return q;
}

// q3_k: the byte (from KLowQuantsOffset) and the shift of the low 2 bits of
// column j's quant at k-row kk (0..255): the byte of a q4 quad in quad pair
// kk / 8, at bits 2 ((kk / 4) % 2) + 4 (j / 16) (the layout above). Its bit 2
// is bit K5HighBit(j) of byte K5HighByte(kk, j) from kK3HighOffset.
constexpr int CrumbByte(int kk, int j) { return 64 * (kk / 8) + 4 * (j % 16) + kk % 4; }
constexpr int CrumbShift(int kk, int j) { return 2 * (kk / 4 % 2) + 4 * (j / 16); }

// ---- The unsigned quants of the quad formats, as the SIMD paths read them.
// Quad kq (k-rows 4kq .. 4kq+3) of a group or super-block's low bits is the
// 64 bytes at LowQuadOffset(f, kq) from its low quants (QuantGroupQuantsOffset
// / KLowQuantsOffset), shifted right by LowQuadShift(f, kq): a q4 quad
// (QuadNibbleByte) whose nibbles, masked to LowQuantBits(f) bits, are the low
// bits of columns j < 16 (low nibble) and j + 16 (high nibble). q3_k's crumbs
// keep two quads in one 64-byte pair (CrumbByte / CrumbShift); the other
// formats store nibbles.
constexpr bool HasCrumbs(WeightFormat f) { return f == WeightFormat::kQ3_K; }
// The formats read as such quads: those with quad nibbles, and q3_k.
constexpr bool HasQuads(WeightFormat f) { return HasQuadNibbles(f) || HasCrumbs(f); }
constexpr int LowQuantBits(WeightFormat f) { return HasCrumbs(f) ? 2 : 4; }
constexpr int64_t LowQuadOffset(WeightFormat f, int kq) {
  return HasCrumbs(f) ? 64 * (kq / 2) : 64 * kq;
}
constexpr int LowQuadShift(WeightFormat f, int kq) { return HasCrumbs(f) ? 2 * (kq % 2) : 0; }

// The formats with one high bit per quant in q5_k's layout (16 bytes per
// quad, K5HighByte / K5HighBit), the bit just above the low bits: q5_0, q5_1,
// q5_k (bit 4, at FifthBitsOffset) and q3_k (bit 2, at kK3HighOffset).
constexpr bool HasK5HighBits(WeightFormat f) { return HasFifthBits(f) || HasCrumbs(f); }
constexpr int64_t K5HighBitsOffset(WeightFormat f) {
  return HasCrumbs(f) ? kK3HighOffset : FifthBitsOffset(f);
}

// q6_k: the byte (from kK6HighOffset) and the shift of the 2-bit field that
// hold bits 4-5 of column j's quant at k-row kk (0..255).
constexpr int K6HighByte(int kk, int j) { return 32 * (kk / 4) + 4 * (j % 8) + kk % 4; }
constexpr int K6HighShift(int j) { return 2 * (2 * (j % 16 / 8) + j / 16); }

// The integer an unsigned quant q stands for before its scale (and any
// min): kIQ4Values[q] for iq4_nl / iq4_xs, else q minus the format's offset
// (QuantGroupQuantOffset: q4_0 8, q5_0 16; KQuantOffset: q3_k 4, q6_k 32; 0
// for the formats with a min). q8_0's stored byte is already signed: not for
// it.
constexpr int SignedQuant(WeightFormat f, int q) {
  return HasIQ4Table(f)      ? kIQ4Values[q]
         : IsKQuantFormat(f) ? q - KQuantOffset(f)
                             : q - QuantGroupQuantOffset(f);
}

// K-quants, portable reads of a panel's super-block `sb` (the layout above):
// the quant of column j at k-row kk (0..255; 0..7 / 0..15 / 0..31 / 0..63), and the
// 6-bit scale and min of column j in sub-block s (q4_k, q5_k).
int KQuantAt(WeightFormat f, const uint8_t* sb, int kk, int j);
void KScaleMin(const uint8_t* sb, int s, int j, int* sc, int* m);

// Bytes of one row of K values in ggml's encoding (the `row_bytes` of a dense
// GGUF tensor for PackWeightsFromBlocks): f32 4K, f16/bf16 2K, q8_0 34K/32,
// q4_0 18K/32, q4_1 20K/32, q5_0 22K/32, q5_1 24K/32, q3_k 110K/256, q4_k
// 144K/256, q5_k 176K/256, q6_k 210K/256, iq4_nl 18K/32, iq4_xs 136K/256.
// Precondition: K % WeightFormatBlockSize(f) == 0.
int64_t GgmlRowBytes(WeightFormat f, int64_t K);

// Encodes one row x[K] in ggml's encoding of `f` (GgmlRowBytes(f, K) bytes)
// with the rounding described at PackWeightsFrom. Precondition: not a
// K-quant or iq4_nl (no quantizer).
void QuantizeRowGgml(WeightFormat f, const float* x, int64_t K, uint8_t* out);

// Dequantizes k-rows [k0, k0 + rows) of one panel (starting at `panel`) into
// out[rows][kPackNR]: the values the matmul kernels use (portable code; the
// reference for the SIMD decoders). For the q formats k0 % kQuantGroup == 0.
void DequantizePanelRows(WeightFormat f, const void* panel, int64_t k0, int64_t rows, float* out);

// IEEE half <-> f32 (the conversion to half rounds to nearest even, handles
// subnormals, infinities and NaN) and bfloat16 <-> f32 (same rounding).
float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float BFloat16ToFloat(uint16_t h);
uint16_t FloatToBFloat16(float f);
// OCP fp8 e4m3 (e4m3fn: bias 7, subnormals down to 2^-9, no infinities, NaN
// 0x7f / 0xff) <-> f32. To e4m3: round to nearest even, saturating to +-448
// (the largest finite; infinities too), NaN to NaN. From e4m3: exact.
float Fp8E4M3ToFloat(uint8_t x);
uint8_t FloatToFp8E4M3(float f);

// Dequantizes column `n` of the packed weight (= row n of W) into out[K]: the
// values the matmul kernels use. For the embedding lookup of a tied table and
// for tests.
void DequantizePackedRow(WeightFormat f, const void* packed, int64_t N, int64_t K, int64_t n,
                         float* out);

}  // namespace xrt
