//===- XGDialect.td - the xcc graph dialect ----------------*- tablegen -*-===//
//
// `xg` holds model-level operations on tensors: the graph a frontend builds from a
// model config, before it is specialized per bucket, fused, planned and lowered.
//
//===----------------------------------------------------------------------===//
#ifndef XCC_DIALECTS_XG_IR_XGDIALECT_TD
#define XCC_DIALECTS_XG_IR_XGDIALECT_TD

include "mlir/IR/OpBase.td"

def XG_Dialect : Dialect {
  let name = "xg";
  let summary = "model-level graph operations of the xcc compiler";
  let description = [{
    Ops of a Llama-family decoder (and, later, a vision tower and projector) on
    ranked tensors. Batch dimensions start out dynamic (`?`) and are bound to bucket
    parameters by the `xg.symbolic_dims` argument attribute of the entry function;
    `xcc-xg-specialize-buckets` makes every dimension static.
  }];
  let cppNamespace = "::xcc::xg";
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 0;

  // Every `xg.*` attribute the compiler attaches to ops, functions, arguments
  // and results, with the type of its value. These are the only xg attribute
  // names (XGDialect.h gives them short C++ names); the dialect's attribute
  // verifiers (XGDialect.cpp) reject any other.
  let discardableAttrs = (ins
    // Entry functions (one per executable), set by the model builder:
    // unit: the function is an executable.
    "::mlir::UnitAttr":$entry,
    // The bucket parameter batch dimensions are bound to: "num_tokens" | "num_reqs".
    "::mlir::StringAttr":$bucket_param,
    // Entry arguments: the bucket parameter of each dimension ("" for static ones).
    "::mlir::ArrayAttr":$symbolic_dims,
    // Entry arguments and results: the executable's input / output name.
    "::mlir::StringAttr":$name,
    // Entry functions after bucket specialization: i64 bucket value.
    "::mlir::IntegerAttr":$bucket,
    // LoRA variants of lm_step (xcc-xg-inject-lora): "single" | "mixed" (the
    // name of an xpk::LoraMode); an entry without it is the no-LoRA executable.
    "::mlir::StringAttr":$lora_mode,
    // After memory planning: entry function i64 sizes of the arena and of the
    // io buffer (bytes), the io placement of each argument and result, and the
    // placement of each result of every op (one #xg.buffer per result).
    "::mlir::IntegerAttr":$arena_size,
    "::mlir::IntegerAttr":$io_size,
    "::xcc::xg::BufferAttr":$io,
    "::mlir::ArrayAttr":$buffers,
    // After dispatch formation: the runtime microkernel an op runs on (the
    // name of an xpk::Ukernel, see schemas/abi.h), or the outlined dispatch
    // function (marked dispatch_func) an op runs as, with its workgroup count.
    "::mlir::StringAttr":$ukernel,
    "::mlir::FlatSymbolRefAttr":$dispatch,
    "::mlir::IntegerAttr":$workgroups,
    "::mlir::UnitAttr":$dispatch_func
  );
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
}

class XG_Op<string mnemonic, list<Trait> traits = []>
    : Op<XG_Dialect, mnemonic, traits>;

#endif  // XCC_DIALECTS_XG_IR_XGDIALECT_TD
