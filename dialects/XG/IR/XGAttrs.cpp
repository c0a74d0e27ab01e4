//===- XGAttrs.cpp - xg attributes ----------------------------------------===//
#include "dialects/XG/IR/XGAttrs.h"

#include "dialects/XG/IR/XGDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/TypeSwitch.h"

#include "dialects/XG/IR/XGEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/XG/IR/XGAttrs.cpp.inc"

using namespace mlir;

namespace xcc::xg {

//===----------------------------------------------------------------------===//
// BufferAttr
//===----------------------------------------------------------------------===//

LogicalResult BufferAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 BufferSpace space, int64_t offset,
                                 int64_t size, int64_t rowStride,
                                 int64_t colOffset) {
  if (offset < 0)
    return emitError() << "buffer offset must be >= 0, got " << offset;
  if (size < 0)
    return emitError() << "buffer size must be >= 0, got " << size;
  if (rowStride < 1)
    return emitError() << "buffer row_stride must be >= 1, got " << rowStride;
  if (colOffset < 0 || colOffset >= rowStride)
    return emitError() << "buffer col_offset must be in [0, row_stride "
                       << rowStride << "), got " << colOffset;
  return success();
}

static int64_t rowLength(ShapedType type) {
  return type.getRank() == 0 ? 1 : type.getShape().back();
}

int64_t BufferAttr::getSpannedElements(ShapedType type) const {
  const int64_t elements = type.getNumElements();
  if (elements == 0)
    return 0;
  const int64_t rows = elements / rowLength(type);
  return (rows - 1) * getRowStride() + rowLength(type);
}

LogicalResult
BufferAttr::verifyHolds(function_ref<InFlightDiagnostic()> emitError,
                        Type type) const {
  auto t = mlir::dyn_cast<RankedTensorType>(type);
  if (!t || !t.hasStaticShape() || !t.getElementType().isIntOrFloat() ||
      t.getElementTypeBitWidth() % 8 != 0)
    return emitError() << "places a static tensor of whole-byte elements, got "
                       << type;
  if (getColOffset() + rowLength(t) > getRowStride())
    return emitError() << "rows of " << rowLength(t) << " elements at column "
                       << getColOffset() << " do not fit in row_stride "
                       << getRowStride();
  const int64_t bytes = (getColOffset() + getSpannedElements(t)) *
                        (t.getElementTypeBitWidth() / 8);
  if (bytes > getSize())
    return emitError() << "a " << type << " at column " << getColOffset()
                       << " spans " << bytes
                       << " bytes, more than the buffer's " << getSize();
  return success();
}

void XGDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/XG/IR/XGAttrs.cpp.inc"
      >();
}

BufferAttr getPlannedBuffer(Value v) {
  if (auto res = dyn_cast<OpResult>(v)) {
    auto buffers = res.getOwner()->getAttrOfType<ArrayAttr>(kBuffersAttr);
    if (!buffers || res.getResultNumber() >= buffers.size())
      return {};
    return dyn_cast<BufferAttr>(buffers[res.getResultNumber()]);
  }
  auto arg = cast<BlockArgument>(v);
  auto fn =
      dyn_cast_or_null<FunctionOpInterface>(arg.getOwner()->getParentOp());
  if (!fn || arg.getOwner() != &fn.getFunctionBody().front())
    return {};
  return fn.getArgAttrOfType<BufferAttr>(arg.getArgNumber(), kIoAttr);
}

} // namespace xcc::xg
