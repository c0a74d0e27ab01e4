//===- SpecializeBuckets.cpp - one static clone of each entry per bucket --===//
#include "dialects/XG/IR/XGOps.h"
#include "passes/Passes.h"
#include "passes/PassUtils.h"

#include "mlir/IR/IRMapping.h"

using namespace mlir;

namespace xcc {
#define GEN_PASS_DEF_XGSPECIALIZEBUCKETS
#include "passes/Passes.h.inc"
} // namespace xcc

namespace xcc::xg {

namespace {

struct SpecializeBucketsPass
    : public impl::XGSpecializeBucketsBase<SpecializeBucketsPass> {
  using XGSpecializeBucketsBase::XGSpecializeBucketsBase;

  // Returns the argument types of `func` with every dimension bound to `param`
  // set to `value`, or failure if an argument has a symbolic dimension bound to
  // another parameter.
  FailureOr<SmallVector<Type>>
  specializedArgTypes(func::FuncOp func, StringRef param, int64_t value) {
    SmallVector<Type> types;
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
      auto dims = func.getArgAttrOfType<ArrayAttr>(i, kSymbolicDimsAttr);
      if (!type || !dims) {
        types.push_back(func.getArgument(i).getType());
        continue;
      }
      if (static_cast<int64_t>(dims.size()) != type.getRank()) {
        func.emitError() << "argument " << i << ": " << kSymbolicDimsAttr
                         << " has " << dims.size() << " entries for a rank-"
                         << type.getRank() << " tensor";
        return failure();
      }
      SmallVector<int64_t> shape(type.getShape());
      for (auto [d, attr] : llvm::enumerate(dims)) {
        StringRef name = cast<StringAttr>(attr).getValue();
        if (name.empty())
          continue;
        if (name != param) {
          func.emitError() << "argument " << i << " dimension " << d
                           << " is bound to '" << name
                           << "', which is not this entry's bucket parameter '"
                           << param << "'";
          return failure();
        }
        shape[d] = value;
      }
      types.push_back(RankedTensorType::get(shape, type.getElementType()));
    }
    return types;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> entries;
    for (auto func : module.getOps<func::FuncOp>())
      if (func->hasAttr(kEntryAttr))
        entries.push_back(func);

    SymbolTable symbols(module);
    for (func::FuncOp func : entries) {
      auto param = func->getAttrOfType<StringAttr>(kBucketParamAttr);
      if (!param) {
        func.emitError() << "entry function has no '" << kBucketParamAttr
                         << "' attribute";
        return signalPassFailure();
      }
      ArrayRef<int64_t> buckets;
      if (param.getValue() == "num_tokens") {
        buckets = numTokens;
      } else if (param.getValue() == "num_reqs") {
        buckets = numReqs;
      } else if (param.getValue() == "num_images") {
        buckets = numImages;
      } else {
        func.emitError() << "unknown bucket parameter '" << param.getValue()
                         << "'";
        return signalPassFailure();
      }
      if (buckets.empty()) {
        func.emitError() << "no buckets given for parameter '"
                         << param.getValue() << "'";
        return signalPassFailure();
      }
      for (int64_t b : buckets) {
        if (b <= 0) {
          func.emitError() << "bucket sizes must be positive, got " << b;
          return signalPassFailure();
        }
        auto argTypes = specializedArgTypes(func, param.getValue(), b);
        if (failed(argTypes))
          return signalPassFailure();
        func::FuncOp clone = func.clone();
        clone.setSymName((func.getSymName() + "_" + Twine(b)).str());
        clone->setAttr(
            kBucketAttr,
            IntegerAttr::get(IntegerType::get(&getContext(), 64), b));
        for (auto [arg, type] : llvm::zip(clone.getArguments(), *argTypes))
          arg.setType(type);
        if (failed(reinferResultTypes(clone))) {
          clone.erase();
          return signalPassFailure();
        }
        if (symbols.lookup(clone.getSymName())) {
          func.emitError() << "bucket " << b << " of '" << func.getSymName()
                           << "' clashes with an existing symbol '"
                           << clone.getSymName() << "' (duplicate bucket?)";
          clone.erase();
          return signalPassFailure();
        }
        symbols.insert(clone, Block::iterator(func));
      }
      symbols.erase(func);
    }
  }
};

} // namespace

} // namespace xcc::xg
