//===- LowerDispatchesToLLVM.cpp - dispatch functions to the LLVM dialect -===//
#include "passes/Passes.h"

#include "dialects/XG/IR/XGDialect.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Pass/PassManager.h"

using namespace mlir;

namespace xcc {

#define GEN_PASS_DEF_XGLOWERDISPATCHESTOLLVM
#include "passes/Passes.h.inc"

namespace {

struct LowerDispatchesToLLVMPass
    : public impl::XGLowerDispatchesToLLVMBase<LowerDispatchesToLLVMPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();

    // Only dispatch functions make it into the code module.
    SmallVector<std::string> names;
    for (Operation &op :
         llvm::make_early_inc_range(module.getBody()->getOperations())) {
      auto fn = dyn_cast<func::FuncOp>(op);
      if (fn && fn->hasAttr(xg::kDispatchFuncAttr)) {
        names.push_back(fn.getSymName().str());
        fn.setPrivate();
        continue;
      }
      op.erase();
    }

    // Polynomial approximations of exp/log/tanh/... are plain arithmetic the
    // LLVM vectorizer can vectorize (libm calls cannot be). Functions with sin
    // or cos keep libm: rope's angles reach thousands of radians, where the
    // approximations' range reduction loses accuracy.
    for (auto fn : module.getOps<func::FuncOp>()) {
      bool trig = fn.walk([](Operation *op) {
                      return isa<math::SinOp, math::CosOp>(op)
                                 ? WalkResult::interrupt()
                                 : WalkResult::advance();
                    }).wasInterrupted();
      if (trig)
        continue;
      RewritePatternSet approx(ctx);
      populateMathPolynomialApproximationPatterns(approx);
      if (failed(applyPatternsAndFoldGreedily(fn, std::move(approx))))
        return signalPassFailure();
    }

    OpPassManager pm(ModuleOp::getOperationName());
    pm.addPass(createConvertSCFToCFPass());
    pm.addPass(memref::createExpandStridedMetadataPass());
    pm.addPass(createConvertMathToLLVMPass());
    pm.addPass(createArithToLLVMConversionPass());
    pm.addPass(createFinalizeMemRefToLLVMConversionPass());
    pm.addPass(createConvertControlFlowToLLVMPass());
    ConvertFuncToLLVMPassOptions funcOptions;
    funcOptions.useBarePtrCallConv = true;
    pm.addPass(createConvertFuncToLLVMPass(funcOptions));
    pm.addPass(createReconcileUnrealizedCastsPass());
    if (failed(runPipeline(pm, module)))
      return signalPassFailure();

    // The exported ABI entry of each dispatch, xpk::abi::DispatchFn in
    // schemas/abi.h (bump xpk::abi::kDispatchAbiVersion with any change):
    //   void name(void* const* bindings, const void* imports, i64 wg_begin, i64
    //   wg_end)
    OpBuilder b(ctx);
    auto ptrType = LLVM::LLVMPointerType::get(ctx);
    auto i64 = IntegerType::get(ctx, 64);
    auto voidType = LLVM::LLVMVoidType::get(ctx);
    for (const std::string &name : names) {
      auto impl = module.lookupSymbol<LLVM::LLVMFuncOp>(name);
      if (!impl) {
        module.emitError() << "dispatch '" << name
                           << "' was not lowered to llvm.func";
        return signalPassFailure();
      }
      impl.setSymName(name + "_impl");
      impl.setLinkage(LLVM::Linkage::Internal);
      impl.setPassthroughAttr(
          b.getArrayAttr({b.getStringAttr("alwaysinline")}));
      unsigned numBindings = impl.getNumArguments() - 2;
      // No binding of a dispatch overlaps another that it writes: its results
      // get arena ranges of their own, placed while its inputs are still
      // live (PlanMemory), io tensors are disjoint and weights read-only.
      // Saying so lets LLVM vectorize loops whose runtime alias checks it
      // cannot form (rope's rotation, say: "cannot identify array bounds").
      for (unsigned i = 0; i < numBindings; ++i)
        impl.setArgAttr(i, LLVM::LLVMDialect::getNoAliasAttrName(),
                        b.getUnitAttr());

      b.setInsertionPointAfter(impl);
      auto entry = b.create<LLVM::LLVMFuncOp>(
          impl.getLoc(), name,
          LLVM::LLVMFunctionType::get(voidType, {ptrType, ptrType, i64, i64}));
      Block *block = entry.addEntryBlock(b);
      b.setInsertionPointToStart(block);
      SmallVector<Value> args;
      for (unsigned i = 0; i < numBindings; ++i) {
        Value slot = b.create<LLVM::GEPOp>(
            impl.getLoc(), ptrType, ptrType, block->getArgument(0),
            ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)});
        args.push_back(b.create<LLVM::LoadOp>(impl.getLoc(), ptrType, slot));
      }
      args.push_back(block->getArgument(2));
      args.push_back(block->getArgument(3));
      b.create<LLVM::CallOp>(impl.getLoc(), impl, args);
      b.create<LLVM::ReturnOp>(impl.getLoc(), ValueRange{});
    }
  }
};

} // namespace

} // namespace xcc
