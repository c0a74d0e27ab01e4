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
  let useDefaultAttributePrinterParser = 0;
  let useDefaultTypePrinterParser = 0;
}

class XG_Op<string mnemonic, list<Trait> traits = []>
    : Op<XG_Dialect, mnemonic, traits>;

#endif  // XCC_DIALECTS_XG_IR_XGDIALECT_TD
