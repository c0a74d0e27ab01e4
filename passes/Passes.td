//===- Passes.td - xcc conversion passes -------------------*- tablegen -*-===//
#ifndef XCC_PASSES_PASSES_TD
#define XCC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

def XGFormDispatches : Pass<"xcc-xg-form-dispatches", "mlir::ModuleOp"> {
  let summary = "Splits planned entry functions into ukernel calls and generated dispatch functions";
  let description = [{
    Runs after memory planning. Matmul-class ops (`xg.linear`, `xg.paged_attention`)
    become runtime microkernel calls (`xg.ukernel` attribute). Every other op is
    outlined into a dispatch function on flat, statically shaped memrefs: one
    argument per operand and then per result (a pointer to the first element of
    the tensor, which may be a strided view), then the workgroup range
    `[wg_begin, wg_end)` (one workgroup per row). Its body is built of scf/arith/
    math/memref ops. Structurally identical dispatches (same op, shapes, strides
    and attributes) share one function, so the layers of a model and the buckets
    of an executable reuse code. The op gets `xg.dispatch` (the function) and
    `xg.workgroups`.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
  ];
}

def XGLowerDispatchesToLLVM : Pass<"xcc-xg-lower-dispatches-to-llvm", "mlir::ModuleOp"> {
  let summary = "Lowers dispatch functions to the LLVM dialect behind the runtime's dispatch ABI";
  let description = [{
    Keeps only the dispatch functions (`xg.dispatch_func`), replaces math
    functions by polynomial approximations the LLVM vectorizer can vectorize
    (except in functions using sin/cos, whose large arguments need libm's exact
    range reduction), lowers them through
    scf -> cf, memref, math, arith and func (bare-pointer calling convention) to the
    LLVM dialect, and gives each an exported entry point with the runtime's ABI:

    ```c
    void name(void* const* bindings, const void* imports, int64_t wg_begin, int64_t wg_end);
    ```

    `bindings[i]` is the address of argument i's first element.
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::cf::ControlFlowDialect"];
}

#endif  // XCC_PASSES_PASSES_TD
