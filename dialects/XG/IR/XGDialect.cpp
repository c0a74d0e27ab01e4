#include "dialects/XG/IR/XGDialect.h"

#include "dialects/XG/IR/XGOps.h"

#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/STLExtras.h"

#include "dialects/XG/IR/XGDialect.cpp.inc"

using namespace mlir;

namespace xcc::xg {

void XGDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/XG/IR/XGOps.cpp.inc"
      >();
  registerAttributes();
}

//===----------------------------------------------------------------------===//
// Discardable attributes (declared in XGDialect.td)
//===----------------------------------------------------------------------===//

namespace {

using EmitFn = function_ref<InFlightDiagnostic()>;

template <typename T>
LogicalResult expectKind(Attribute value, StringRef what, EmitFn emit) {
  if (isa<T>(value))
    return success();
  return emit() << "must be " << what << ", got " << value;
}

LogicalResult expectI64(Attribute value, int64_t min, EmitFn emit) {
  auto i = dyn_cast<IntegerAttr>(value);
  if (!i || !i.getType().isInteger(64))
    return emit() << "must be an i64, got " << value;
  if (i.getInt() < min)
    return emit() << "must be >= " << min << ", got " << i.getInt();
  return success();
}

LogicalResult verifyArgOrResultAttribute(Operation *op, NamedAttribute attr,
                                         bool isArg, unsigned index) {
  StringRef name = attr.getName().strref();
  Attribute value = attr.getValue();
  auto emit = [&]() {
    return op->emitOpError() << (isArg ? "argument " : "result ") << index
                             << " attribute '" << name << "' ";
  };
  auto fn = dyn_cast<FunctionOpInterface>(op);
  if (!fn)
    return emit() << "is only for function arguments and results";
  Type type = isArg ? fn.getArgumentTypes()[index] : fn.getResultTypes()[index];
  if (name == kNameAttr)
    return expectKind<StringAttr>(value, "a string", emit);
  if (name == kIoAttr) {
    auto buffer = dyn_cast<BufferAttr>(value);
    if (!buffer)
      return emit() << "must be an #xg.buffer, got " << value;
    if (buffer.getSpace() != BufferSpace::io)
      return emit() << "must place it in the io buffer, got " << value;
    return buffer.verifyHolds(emit, type);
  }
  if (isArg && name == kSymbolicDimsAttr) {
    auto dims = dyn_cast<ArrayAttr>(value);
    if (!dims ||
        !llvm::all_of(dims, [](Attribute a) { return isa<StringAttr>(a); }))
      return emit() << "must be an array of strings, got " << value;
    return success();
  }
  return emit() << "is not an xg " << (isArg ? "argument" : "result")
                << " attribute";
}

} // namespace

LogicalResult XGDialect::verifyOperationAttribute(Operation *op,
                                                  NamedAttribute attr) {
  StringRef name = attr.getName().strref();
  Attribute value = attr.getValue();
  auto emit = [&]() {
    return op->emitOpError() << "attribute '" << name << "' ";
  };
  if (name == kEntryAttr || name == kDispatchFuncAttr)
    return expectKind<UnitAttr>(value, "a unit attribute", emit);
  if (name == kBucketParamAttr || name == kUkernelAttr)
    return expectKind<StringAttr>(value, "a string", emit);
  if (name == kLoraModeAttr) {
    auto mode = dyn_cast<StringAttr>(value);
    if (!mode || (mode.getValue() != "single" && mode.getValue() != "mixed"))
      return emit() << "must be \"single\" or \"mixed\", got " << value;
    return success();
  }
  if (name == kBucketAttr || name == kWorkgroupsAttr)
    return expectI64(value, 1, emit);
  if (name == kArenaSizeAttr || name == kIoSizeAttr)
    return expectI64(value, 0, emit);
  if (name == kDispatchAttr)
    return expectKind<FlatSymbolRefAttr>(value, "a symbol", emit);
  if (name == kBuffersAttr) {
    auto buffers = dyn_cast<ArrayAttr>(value);
    if (!buffers ||
        !llvm::all_of(buffers, [](Attribute a) { return isa<BufferAttr>(a); }))
      return emit() << "must be an array of #xg.buffer, got " << value;
    if (buffers.size() != op->getNumResults())
      return emit() << "has " << buffers.size() << " buffers for "
                    << op->getNumResults() << " results";
    for (auto [i, buffer, result] :
         llvm::enumerate(buffers, op->getResults())) {
      auto emitEntry = [&, i = i]() { return emit() << "buffer " << i << " "; };
      if (failed(cast<BufferAttr>(buffer).verifyHolds(emitEntry,
                                                      result.getType())))
        return failure();
    }
    return success();
  }
  return emit() << "is not an xg operation attribute";
}

LogicalResult XGDialect::verifyRegionArgAttribute(Operation *op,
                                                  unsigned /*regionIndex*/,
                                                  unsigned argIndex,
                                                  NamedAttribute attr) {
  return verifyArgOrResultAttribute(op, attr, /*isArg=*/true, argIndex);
}

LogicalResult XGDialect::verifyRegionResultAttribute(Operation *op,
                                                     unsigned /*regionIndex*/,
                                                     unsigned resultIndex,
                                                     NamedAttribute attr) {
  return verifyArgOrResultAttribute(op, attr, /*isArg=*/false, resultIndex);
}

} // namespace xcc::xg
