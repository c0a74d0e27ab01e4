#include "compiler/frontend/source_dtype.h"

#include <limits>

namespace xcc {

const char* SourceDTypeName(SourceDType t) {
  switch (t) {
    case SourceDType::kF32:
      return "F32";
    case SourceDType::kF16:
      return "F16";
    case SourceDType::kBF16:
      return "BF16";
    case SourceDType::kF64:
      return "F64";
    case SourceDType::kI8:
      return "I8";
    case SourceDType::kI16:
      return "I16";
    case SourceDType::kI32:
      return "I32";
    case SourceDType::kI64:
      return "I64";
    case SourceDType::kU8:
      return "U8";
    case SourceDType::kBool:
      return "BOOL";
    case SourceDType::kQ4_0:
      return "Q4_0";
    case SourceDType::kQ4_1:
      return "Q4_1";
    case SourceDType::kQ5_0:
      return "Q5_0";
    case SourceDType::kQ5_1:
      return "Q5_1";
    case SourceDType::kQ8_0:
      return "Q8_0";
    case SourceDType::kQ8_1:
      return "Q8_1";
    case SourceDType::kQ2_K:
      return "Q2_K";
    case SourceDType::kQ3_K:
      return "Q3_K";
    case SourceDType::kQ4_K:
      return "Q4_K";
    case SourceDType::kQ5_K:
      return "Q5_K";
    case SourceDType::kQ6_K:
      return "Q6_K";
    case SourceDType::kQ8_K:
      return "Q8_K";
    case SourceDType::kIQ4_NL:
      return "IQ4_NL";
    case SourceDType::kIQ4_XS:
      return "IQ4_XS";
  }
  return "?";
}

DTypeLayout GetDTypeLayout(SourceDType t) {
  switch (t) {
    case SourceDType::kF32:
      return {1, 4};
    case SourceDType::kF16:
      return {1, 2};
    case SourceDType::kBF16:
      return {1, 2};
    case SourceDType::kF64:
      return {1, 8};
    case SourceDType::kI8:
      return {1, 1};
    case SourceDType::kI16:
      return {1, 2};
    case SourceDType::kI32:
      return {1, 4};
    case SourceDType::kI64:
      return {1, 8};
    case SourceDType::kU8:
      return {1, 1};
    case SourceDType::kBool:
      return {1, 1};
    // 32-value blocks: f16 scale (+ f16 min) (+ 32 high bits) + packed values.
    case SourceDType::kQ4_0:
      return {32, 2 + 16};
    case SourceDType::kQ4_1:
      return {32, 2 + 2 + 16};
    case SourceDType::kQ5_0:
      return {32, 2 + 4 + 16};
    case SourceDType::kQ5_1:
      return {32, 2 + 2 + 4 + 16};
    case SourceDType::kQ8_0:
      return {32, 2 + 32};
    case SourceDType::kQ8_1:
      return {32, 2 + 2 + 32};
    // 256-value super-blocks.
    case SourceDType::kQ2_K:
      return {256, 16 + 64 + 2 + 2};
    case SourceDType::kQ3_K:
      return {256, 32 + 64 + 12 + 2};
    case SourceDType::kQ4_K:
      return {256, 2 + 2 + 12 + 128};
    case SourceDType::kQ5_K:
      return {256, 2 + 2 + 12 + 32 + 128};
    case SourceDType::kQ6_K:
      return {256, 128 + 64 + 16 + 2};
    case SourceDType::kQ8_K:
      return {256, 4 + 256 + 2 * 16};
    // Non-linear 4-bit quants: IQ4_NL a Q4_0-shaped block, IQ4_XS a super-block
    // {d, scales_h, scales_l[4], qs[128]}.
    case SourceDType::kIQ4_NL:
      return {32, 2 + 16};
    case SourceDType::kIQ4_XS:
      return {256, 2 + 2 + 4 + 128};
  }
  return {1, 0};
}

Expected<size_t> DTypeNBytes(SourceDType t, int64_t numel) {
  DTypeLayout l = GetDTypeLayout(t);
  if (numel < 0) return xrt::InvalidArgumentError("negative element count {}", numel);
  if (numel % l.block_elems != 0) {
    return xrt::InvalidArgumentError("{} elements is not a multiple of the {} block size {}", numel,
                                     SourceDTypeName(t), l.block_elems);
  }
  uint64_t blocks = static_cast<uint64_t>(numel / l.block_elems);
  if (l.block_bytes != 0 && blocks > std::numeric_limits<size_t>::max() / l.block_bytes) {
    return xrt::OutOfRangeError("{} elements of {} overflow the byte size", numel,
                                SourceDTypeName(t));
  }
  return static_cast<size_t>(blocks * l.block_bytes);
}

Expected<int64_t> ShapeNumel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return xrt::InvalidArgumentError("negative dimension {}", d);
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return xrt::OutOfRangeError("element count overflows int64");
    }
    n *= d;
  }
  return n;
}

}  // namespace xcc
