//===- XGAttrs.td - xg attributes --------------------------*- tablegen -*-===//
#ifndef XCC_DIALECTS_XG_IR_XGATTRS_TD
#define XCC_DIALECTS_XG_IR_XGATTRS_TD

include "dialects/XG/IR/XGDialect.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

def XG_BufferSpace : I32EnumAttr<"BufferSpace", "the memory a planned buffer lives in", [
    // The executable's scratch arena (xpk::BindingKind::arena).
    I32EnumAttrCase<"arena", 0>,
    // The executable's io buffer, holding its inputs and outputs (xpk::BindingKind::io).
    I32EnumAttrCase<"io", 1>]> {
  let cppNamespace = "::xcc::xg";
  let genSpecializedAttr = 0;
}

def XG_BufferAttr : AttrDef<XG_Dialect, "Buffer"> {
  let mnemonic = "buffer";
  let summary = "where memory planning put a tensor";
  let description = [{
    A tensor's place after `xcc-xg-plan-memory`: the byte range
    `[offset, offset + size)` of the arena or the io buffer that holds the
    buffer it lives in, and the tensor's layout inside it: rows of the
    tensor's last dimension start `row_stride` elements apart, the first at
    element `col_offset`. A tensor that owns its buffer is contiguous
    (`row_stride` is its last dimension, `col_offset` 0); a view (`xg.split`)
    shares its source's buffer and row stride at a column offset.

    ```mlir
    #xg.buffer<arena, offset = 4096, size = 12288, row_stride = 192, col_offset = 96>
    #xg.buffer<io, offset = 0, size = 4096, row_stride = 64>
    ```
  }];
  let parameters = (ins EnumParameter<XG_BufferSpace>:$space,
                        "int64_t":$offset,
                        "int64_t":$size,
                        "int64_t":$row_stride,
                        DefaultValuedParameter<"int64_t", "0">:$col_offset);
  let assemblyFormat = "`<` $space `,` struct($offset, $size, $row_stride, $col_offset) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Elements from the first to the last element of a `type` tensor laid out
    /// in this buffer (rows of its last dimension, `row_stride` apart).
    int64_t getSpannedElements(::mlir::ShapedType type) const;
    /// Checks that this buffer holds a value of `type`: a static tensor whose
    /// rows fit in `row_stride` and whose span fits in `size`.
    ::mlir::LogicalResult verifyHolds(
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError, ::mlir::Type type) const;
  }];
}

#endif  // XCC_DIALECTS_XG_IR_XGATTRS_TD
