#include "compiler/pipeline.h"

#include "dialects/XG/IR/XGDialect.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "passes/Passes.h"

using namespace mlir;

namespace xcc {
namespace {

void ConfigureDumps(PassManager& pm, const PipelineOptions& options) {
  if (options.dump_ir_after.empty()) return;
  // Module-scope printing needs a single thread.
  pm.getContext()->disableMultithreading();
  std::vector<std::string> wanted = options.dump_ir_after;
  pm.enableIRPrinting([](Pass*, Operation*) { return false; },
                      [wanted](Pass* pass, Operation*) {
                        return std::find(wanted.begin(), wanted.end(), pass->getArgument().str()) !=
                               wanted.end();
                      },
                      /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
                      /*printAfterOnlyOnFailure=*/false, llvm::outs());
}

}  // namespace

void LoadPipelineDialects(MLIRContext* ctx) {
  ctx->loadDialect<xg::XGDialect, func::FuncDialect, arith::ArithDialect, math::MathDialect,
                   memref::MemRefDialect, scf::SCFDialect, cf::ControlFlowDialect,
                   LLVM::LLVMDialect>();
}

LogicalResult RunGraphPipeline(ModuleOp module, const PipelineOptions& options) {
  PassManager pm(module.getContext());
  ConfigureDumps(pm, options);
  XGSpecializeBucketsOptions buckets;
  buckets.numTokens = options.token_buckets;
  buckets.numReqs = options.req_buckets;
  buckets.numImages = options.image_buckets;
  pm.addPass(createXGSpecializeBuckets(buckets));
  pm.addNestedPass<func::FuncOp>(createXGFuse());
  pm.addPass(createCSEPass());
  XGPackWeightsOptions pack;
  pack.packNr = options.pack_nr;
  pm.addPass(createXGPackWeights(pack));
  pm.addPass(createCSEPass());
  if (options.lora_slots > 0) {
    XGInjectLoraOptions lora;
    lora.numSlots = options.lora_slots;
    lora.rank = options.lora_rank;
    lora.targetModules = options.lora_target_modules;
    pm.addPass(createXGInjectLora(lora));
  }
  pm.addNestedPass<func::FuncOp>(createXGPlanMemory());
  pm.addPass(createXGFormDispatches());
  return pm.run(module);
}

LogicalResult RunLoweringPipeline(ModuleOp module, const PipelineOptions& options) {
  PassManager pm(module.getContext());
  ConfigureDumps(pm, options);
  pm.addPass(createXGLowerDispatchesToLLVM());
  return pm.run(module);
}

}  // namespace xcc
