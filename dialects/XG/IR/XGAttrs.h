// xg attributes (generated from XGAttrs.td) and helpers to read them.
#pragma once

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Value.h"

#include "dialects/XG/IR/XGEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/XG/IR/XGAttrs.h.inc"

namespace xcc::xg {

// The planned buffer of `v`: an op result's entry of its op's `xg.buffers`, or
// an entry-function argument's `xg.io`. Null before memory planning (and for
// weights, which have no buffer).
BufferAttr getPlannedBuffer(mlir::Value v);

} // namespace xcc::xg
