// Attribute names and small helpers shared by the xg passes.
#pragma once

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/StringRef.h"

namespace xcc::xg {

// Function attributes.
inline constexpr llvm::StringLiteral kEntryAttr = "xg.entry";          // unit: an executable
inline constexpr llvm::StringLiteral kBucketParamAttr = "xg.bucket_param";  // "num_tokens" | "num_reqs"
inline constexpr llvm::StringLiteral kBucketAttr = "xg.bucket";        // i64, after specialization
inline constexpr llvm::StringLiteral kArenaSizeAttr = "xg.arena_size"; // i64 bytes
inline constexpr llvm::StringLiteral kIoSizeAttr = "xg.io_size";       // i64 bytes
// Argument attributes.
inline constexpr llvm::StringLiteral kSymbolicDimsAttr = "xg.symbolic_dims";  // [str] per dim
// Argument / result attributes after planning: array<i64: offset, size>.
inline constexpr llvm::StringLiteral kIoAttr = "xg.io";
// Op attribute after planning: [array<i64: space, offset, size, row_stride, col_offset>] per result.
inline constexpr llvm::StringLiteral kBuffersAttr = "xg.buffers";

enum class BufferSpace : int64_t { kArena = 0, kIo = 1 };

// Re-derives the result type of every op in `func`, in order, through
// InferTypeOpInterface, then updates the function type. Used after argument
// types change.
mlir::LogicalResult reinferResultTypes(mlir::func::FuncOp func);

}  // namespace xcc::xg
