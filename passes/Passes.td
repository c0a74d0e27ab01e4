//===- Passes.td - every xcc pass --------------------------*- tablegen -*-===//
#ifndef XCC_PASSES_PASSES_TD
#define XCC_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Graph transforms on xg
//===----------------------------------------------------------------------===//

def XGSpecializeBuckets : Pass<"xcc-xg-specialize-buckets", "mlir::ModuleOp"> {
  let summary = "Clones each entry function once per bucket, making every dimension static";
  let description = [{
    An entry function (`xg.entry` attribute) names the bucket parameter it is
    specialized over in `xg.bucket_param` ("num_tokens", "num_reqs" or
    "num_images"); its
    arguments' `xg.symbolic_dims` say which of their dimensions are bound to which
    parameter. For every bucket value the function is cloned as `<name>_<b>` (e.g.
    `lm_step_16`) with those dimensions set, every result type is re-derived through
    the ops' shape rules, and the generic function is erased. A symbolic dimension
    whose parameter has no bucket list is an error.
  }];
  let options = [
    ListOption<"numTokens", "num-tokens", "int64_t", "num_tokens bucket sizes">,
    ListOption<"numReqs", "num-reqs", "int64_t", "num_reqs bucket sizes">,
    ListOption<"numImages", "num-images", "int64_t", "num_images bucket sizes">,
  ];
}

def XGFuse : Pass<"xcc-xg-fuse", "mlir::func::FuncOp"> {
  let summary = "Fuses sibling linears (q/k/v, gate/up) and elementwise consumers into producers";
  let description = [{
    * Linears that read the same input with plain weights become one linear over
      the weights concatenated along N, followed by an `xg.split` (q/k/v and
      gate/up).
    * `xg.add` of a linear's only use and another tensor becomes the linear's
      accumulator (the residual add is done in the matmul epilogue).
  }];
  let dependentDialects = ["::xcc::xg::XGDialect"];
}

def XGPackWeights : Pass<"xcc-xg-pack-weights", "mlir::ModuleOp"> {
  let summary = "Folds weight concatenations and selects packed layouts for linear weights";
  let description = [{
    `xg.concat` of weights of one storage `format` becomes one `xg.weight`
    listing its `sources`. A weight read only as a linear's weight or an
    embedding table gets `pack_nr`, the panel width of the target's matmul
    microkernel, when a linear reads it or its format is not f32: the embedding
    lookup reads the packed layout, so a tied table is stored once. A weight
    also read by other ops keeps its row-major copy for them and the linears
    get a packed copy; such a weight must be f32.
  }];
  let options = [
    Option<"packNr", "pack-nr", "int64_t", /*default=*/"16", "panel width of packed weights">,
  ];
}

def XGInjectLora : Pass<"xcc-xg-inject-lora", "mlir::ModuleOp"> {
  let summary = "Adds the single- and mixed-adapter LoRA variants of every lm_step bucket";
  let description = [{
    Runs after weight packing. Every bucketed `lm_step_<b>` entry is cloned twice,
    as `lm_step_<b>_single` and `lm_step_<b>_mixed` (`xg.lora_mode`); the original
    stays the no-LoRA executable. In a clone, every linear whose weight is (or
    stacks, for fused q/k/v and gate/up) a target module's weight gets, per target
    slice, an `xg.lora_shrink` of the linear's input through that target's
    `xg.lora_slots` A matrices and an `xg.lora_expand` of the slice through its B
    matrices, indexed by the `lora_slot` argument (`mixed`: per token; single: one
    slot for every token). Target modules are the short names `q_proj`, `k_proj`,
    `v_proj`, `o_proj`, `gate_proj`, `up_proj`, `down_proj` under
    `model.layers.<i>.`; a target list naming anything else is an error, and so is
    a target that matches no linear.
  }];
  let options = [
    Option<"numSlots", "num-slots", "int64_t", /*default=*/"0", "adapter slots (max_loras)">,
    Option<"rank", "rank", "int64_t", /*default=*/"0", "max_lora_rank">,
    ListOption<"targetModules", "target-modules", "std::string", "short module names">,
  ];
}

def XGPlanMemory : Pass<"xcc-xg-plan-memory", "mlir::func::FuncOp"> {
  let summary = "Assigns every intermediate tensor a static arena range by liveness";
  let description = [{
    Requires static shapes. Results, then arguments, are placed in the io buffer
    (`xg.io` result/argument attributes: byte offset and size), every other tensor
    produced by an op gets an arena range (`xg.buffers` on the op: per result
    `[space, offset, size, row_stride, col_offset]`, space 0 = arena, 1 = io;
    strides in elements). Ranges of tensors whose live ranges overlap never overlap;
    a dead tensor's range is reused. `xg.split` results are views of their input.
    A linear whose accumulator dies at the linear writes its result in place,
    as `xg.lora_expand` updates its input. Any other op's results are placed
    while its operands are still live, so they never overlap them
    (LowerDispatchesToLLVM relies on it: it marks a dispatch's bindings noalias).
    The function gets `xg.arena_size` and `xg.io_size`.
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"64", "byte alignment of every range">,
  ];
}


//===----------------------------------------------------------------------===//
// Dispatch formation and lowering to LLVM
//===----------------------------------------------------------------------===//

def XGFormDispatches : Pass<"xcc-xg-form-dispatches", "mlir::ModuleOp"> {
  let summary = "Splits planned entry functions into ukernel calls and generated dispatch functions";
  let description = [{
    Runs after memory planning. Matmul-class ops (`xg.linear`, `xg.paged_attention`,
    `xg.attention`, `xg.lora_shrink`, `xg.lora_expand`) become runtime microkernel
    calls (`xg.ukernel` attribute). Every other op is
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
