// The xg dialect: model-level graph ops of the xcc compiler.
#pragma once

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/Operation.h"

#include "dialects/XG/IR/XGAttrs.h"

#include "dialects/XG/IR/XGDialect.h.inc"

namespace xcc::xg {

// The names of the xg discardable attributes, declared (with the types of
// their values and what they mean) in XGDialect.td.
inline constexpr llvm::StringLiteral kEntryAttr =
    XGDialect::EntryAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kBucketParamAttr =
    XGDialect::BucketParamAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kSymbolicDimsAttr =
    XGDialect::SymbolicDimsAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kNameAttr =
    XGDialect::NameAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kBucketAttr =
    XGDialect::BucketAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kLoraModeAttr =
    XGDialect::LoraModeAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kArenaSizeAttr =
    XGDialect::ArenaSizeAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kIoSizeAttr =
    XGDialect::IoSizeAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kIoAttr =
    XGDialect::IoAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kBuffersAttr =
    XGDialect::BuffersAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kUkernelAttr =
    XGDialect::UkernelAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kDispatchAttr =
    XGDialect::DispatchAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kWorkgroupsAttr =
    XGDialect::WorkgroupsAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kDispatchFuncAttr =
    XGDialect::DispatchFuncAttrHelper::getNameStr();

} // namespace xcc::xg
