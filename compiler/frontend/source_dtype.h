// Storage layouts of SourceDType: element/block sizes and conversion to f32.
//
// Block types (ggml quantizations) store `block_elems` values in `block_bytes`
// bytes; plain types have block_elems == 1. Stateless, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>

#include "compiler/frontend/model_source.h"
#include "runtime/kernels/weight_format.h"

namespace xcc {

struct DTypeLayout {
  int64_t block_elems = 1;  // values per block (1 for plain types)
  size_t block_bytes = 0;   // bytes per block
};

DTypeLayout GetDTypeLayout(SourceDType t);

// Bytes needed for `numel` values of type `t`. InvalidArgument if `numel` is
// negative or not a multiple of the block size, OutOfRange on overflow.
Expected<size_t> DTypeNBytes(SourceDType t, int64_t numel);

// Number of elements of `shape`; OutOfRange on overflow, InvalidArgument on a
// negative dimension.
Expected<int64_t> ShapeNumel(const std::vector<int64_t>& shape);

// IEEE half / bfloat16 bit patterns to float: the runtime kernels' conversions
// (one definition for the frontends and the packed weight formats).
using xrt::BFloat16ToFloat;
using xrt::HalfToFloat;

}  // namespace xcc
