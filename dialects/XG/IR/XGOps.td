//===- XGOps.td - xg operations ----------------------------*- tablegen -*-===//
#ifndef XCC_DIALECTS_XG_IR_XGOPS_TD
#define XCC_DIALECTS_XG_IR_XGOPS_TD

include "dialects/XG/IR/XGDialect.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def XG_F32Tensor : RankedTensorOf<[F32]>;
def XG_I32Tensor : RankedTensorOf<[I32]>;

// Ops whose result types follow from their operands and attributes. The
// bucket specialization pass relies on this to re-derive static shapes.
class XG_InferOp<string mnemonic, list<Trait> traits = []>
    : XG_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptor])>;

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

def XG_WeightOp : XG_Op<"weight", [Pure]> {
  let summary = "a model weight, by name";
  let description = [{
    A read-only tensor of the model. `name` is the frontend's (Hugging Face) tensor
    name. After fusion a weight may stand for several source tensors concatenated
    along dimension 0 (`sources`), and after weight packing a linear weight carries
    the panel width of its packed layout (`pack_nr`); its type stays the logical
    `[N, K]` shape. `format` is how the artifact stores it (runtime/kernels/
    weight_format.h: "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q4_k", "q5_k",
    "q6_k"; absent means f32). Formats other than f32 are for linear weights and embedding tables, which
    read the packed layout; they hold exactly the f32 values the op computes with.

    ```mlir
    %w = xg.weight "model.layers.0.mlp.down_proj.weight" : tensor<64x176xf32>
    %f = xg.weight "qkv" {sources = ["q.weight", "k.weight", "v.weight"], pack_nr = 16 : i64}
           : tensor<128x64xf32>
    %q = xg.weight "lm_head.weight" {format = "q8_0", pack_nr = 32 : i64} : tensor<512x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$name,
                       OptionalAttr<StrArrayAttr>:$sources,
                       OptionalAttr<I64Attr>:$pack_nr,
                       OptionalAttr<StrAttr>:$format);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let extraClassDeclaration = [{
    /// The source tensor names the weight stands for: `sources`, else its name.
    ::llvm::SmallVector<::llvm::StringRef> getSourceNames();
    /// The storage format: `format`, else f32 (verified to be a known name).
    ::xrt::WeightFormat getWeightFormat();
  }];
  let hasVerifier = 1;
}

def XG_ConcatOp : XG_InferOp<"concat"> {
  let summary = "concatenation along one dimension";
  let description = [{
    ```mlir
    %w = xg.concat %q, %k, %v {axis = 0 : i64}
           : tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32> -> tensor<128x64xf32>
    ```
  }];
  let arguments = (ins Variadic<XG_F32Tensor>:$inputs, I64Attr:$axis);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$inputs attr-dict `:` type($inputs) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Decoder ops
//===----------------------------------------------------------------------===//

def XG_EmbeddingOp : XG_InferOp<"embedding"> {
  let summary = "gathers rows of an embedding table";
  let description = [{
    `result[t, :] = table[ids[t], :]`. Ids outside `[0, V)` produce zero rows.

    ```mlir
    %x = xg.embedding %table, %ids : tensor<512x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$table, XG_I32Tensor:$ids);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$table `,` $ids attr-dict `:` type($table) `,` type($ids) `->` type($result)";
}

def XG_RmsNormOp : XG_InferOp<"rms_norm"> {
  let summary = "RMS normalization over the last dimension";
  let description = [{
    `result[t, i] = input[t, i] / sqrt(mean_i(input[t, :]^2) + eps) * weight[i]`.

    ```mlir
    %y = xg.rms_norm %x, %w {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$input, XG_F32Tensor:$weight, F64Attr:$eps);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` type($input) `,` type($weight) `->` type($result)";
}

def XG_LinearOp : XG_InferOp<"linear", [AttrSizedOperandSegments]> {
  let summary = "y = x * W^T (+ bias) (+ accumulator)";
  let description = [{
    A fully connected layer with Hugging Face's weight layout `[N, K]`:
    `result[t, n] = sum_k input[t, k] * weight[n, k] + bias[n] + accumulator[t, n]`.
    The accumulator is how a residual add is fused into the matmul that produces it.

    ```mlir
    %y = xg.linear %x, %w bias(%b) accumulate(%r)
           : tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32>, tensor<?x128xf32> -> tensor<?x128xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$input, XG_F32Tensor:$weight,
                       Optional<XG_F32Tensor>:$bias,
                       Optional<XG_F32Tensor>:$accumulator);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`bias` `(` $bias^ `)`)? (`accumulate` `(` $accumulator^ `)`)?
    attr-dict `:` type(operands) `->` type($result)
  }];
  let hasVerifier = 1;
}

def XG_SplitOp : XG_InferOp<"split"> {
  let summary = "splits the last dimension into consecutive column ranges";
  let description = [{
    The results are views of the input: no data moves.

    ```mlir
    %q, %k, %v = xg.split %qkv {sizes = array<i64: 64, 32, 32>}
           : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$input, DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<XG_F32Tensor>:$results);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($results)";
}

def XG_RopeCosSinOp : XG_InferOp<"rope_cos_sin"> {
  let summary = "the cosines and sines of the rotary angles of each position";
  let description = [{
    For every row `t` and `i < H` (`H` = the size of `inv_freq`), with
    `a = positions[t] * inv_freq[i]` (one f32 multiply):
    `result[t, i] = cos a`, `result[t, H + i] = sin a`. `inv_freq` holds the
    (possibly scaled) inverse frequencies. Computed once per step, the table
    serves every layer's `xg.rope` (the angles depend on the position only).

    ```mlir
    %cs = xg.rope_cos_sin %pos, %inv : tensor<?xi32>, tensor<8xf32> -> tensor<?x16xf32>
    ```
  }];
  let arguments = (ins XG_I32Tensor:$positions, XG_F32Tensor:$inv_freq);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = [{
    $positions `,` $inv_freq attr-dict `:` type($positions) `,` type($inv_freq) `->` type($result)
  }];
}

def XG_RopeOp : XG_InferOp<"rope"> {
  let summary = "rotary position embedding (rotate-half convention)";
  let description = [{
    For every head of `head_dim` columns and `i < half = head_dim / 2`, with
    `c = cos_sin[t, i]`, `s = cos_sin[t, half + i]` (`xg.rope_cos_sin`):
    `out[i] = x[i] c - x[i + half] s`, `out[i + half] = x[i + half] c + x[i] s`.

    ```mlir
    %q2 = xg.rope %q, %cs {head_dim = 16 : i64}
           : tensor<?x64xf32>, tensor<?x16xf32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$input, XG_F32Tensor:$cos_sin, I64Attr:$head_dim);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = [{
    $input `,` $cos_sin attr-dict `:` type($input) `,` type($cos_sin) `->` type($result)
  }];
}

def XG_PagedAttentionOp : XG_InferOp<"paged_attention"> {
  let summary = "causal attention over a paged KV cache, writing this step's K/V";
  let description = [{
    Writes every token's `k`/`v` into layer `layer`'s KV cache at
    `slot_mapping[t]` (-1: padding token), then computes, for each token of each
    request (tokens `[query_start_loc[r], query_start_loc[r+1])`, the last ones of a
    sequence of `seq_lens[r]` tokens), causal softmax attention over the request's
    cached keys through its row of `block_tables`. GQA: head `h` reads kv head
    `h / (num_heads / num_kv_heads)`. The KV cache itself is runtime state, not an
    operand.

    ```mlir
    %o = xg.paged_attention %q, %k, %v, %slots, %tables, %lens, %qsl
           {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64,
            head_dim = 16 : i64, scale = 0.25 : f32}
           : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi32>,
             tensor<8x32xi32>, tensor<8xi32>, tensor<9xi32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$q, XG_F32Tensor:$k, XG_F32Tensor:$v,
                       XG_I32Tensor:$slot_mapping, XG_I32Tensor:$block_tables,
                       XG_I32Tensor:$seq_lens, XG_I32Tensor:$query_start_loc,
                       I64Attr:$layer, I64Attr:$num_heads, I64Attr:$num_kv_heads,
                       I64Attr:$head_dim, F32Attr:$scale);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $slot_mapping `,` $block_tables `,` $seq_lens `,` $query_start_loc
    attr-dict `:` type(operands) `->` type($result)
  }];
  let hasVerifier = 1;
}

def XG_SiluMulOp : XG_InferOp<"silu_mul"> {
  let summary = "silu(gate) * up, elementwise";
  let arguments = (ins XG_F32Tensor:$gate, XG_F32Tensor:$up);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($gate) `,` type($up) `->` type($result)";
}

def XG_AddOp : XG_InferOp<"add"> {
  let summary = "elementwise addition";
  let arguments = (ins XG_F32Tensor:$lhs, XG_F32Tensor:$rhs);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)";
}

def XG_GatherRowsOp : XG_InferOp<"gather_rows"> {
  let summary = "selects rows by index";
  let description = [{
    `result[r, :] = input[indices[r], :]`; an index outside `[0, rows)` gives a zero
    row (padding requests).

    ```mlir
    %h = xg.gather_rows %hidden, %idx : tensor<64x64xf32>, tensor<8xi32> -> tensor<8x64xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$input, XG_I32Tensor:$indices);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$input `,` $indices attr-dict `:` type($input) `,` type($indices) `->` type($result)";
}

//===----------------------------------------------------------------------===//
// Vision encoder ops
//===----------------------------------------------------------------------===//

def XG_PatchifyOp : XG_InferOp<"patchify"> {
  let summary = "cuts images into flattened non-overlapping patches";
  let description = [{
    `pixels` holds one image per row, channels-first (`[N, C * S * S]`, `S` =
    `image_size`). The result has one row per patch, images in order and patches
    row-major within an image, each row laid out as `[C, p, p]` (`p` =
    `patch_size`): the layout of a Conv2d weight `[D, C, p, p]` flattened to
    `[D, C * p * p]`, so the patch embedding convolution is a `xg.linear`.

    ```mlir
    %p = xg.patchify %px {channels = 3 : i64, image_size = 32 : i64, patch_size = 8 : i64}
           : tensor<2x3072xf32> -> tensor<32x192xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$pixels, I64Attr:$channels, I64Attr:$image_size,
                       I64Attr:$patch_size);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$pixels attr-dict `:` type($pixels) `->` type($result)";
}

def XG_VisionEmbedOp : XG_InferOp<"vision_embed"> {
  let summary = "prepends the class embedding and adds position embeddings per image";
  let description = [{
    `positions` has one row per sequence position (`L`). With a class embedding
    (CLIP) every image's sequence is `[class, patches...]` and `L - 1` patch rows
    of `patches` belong to each image; without one (SigLIP) it is the `L` patch
    rows. `result[n * L + s] = seq_n[s] + positions[s]`.

    ```mlir
    %x = xg.vision_embed %patches, %pos, %cls
           : tensor<32x32xf32>, tensor<17x32xf32>, tensor<32xf32> -> tensor<34x32xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$patches, XG_F32Tensor:$positions,
                       Optional<XG_F32Tensor>:$class_embedding);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = [{
    $patches `,` $positions (`,` $class_embedding^)? attr-dict `:` type(operands) `->` type($result)
  }];
}

def XG_LayerNormOp : XG_InferOp<"layer_norm"> {
  let summary = "layer normalization over the last dimension, with weight and bias";
  let description = [{
    `result[t, i] = (x[t, i] - mean_t) / sqrt(var_t + eps) * weight[i] + bias[i]`,
    with the biased variance over the row.

    ```mlir
    %y = xg.layer_norm %x, %w, %b {eps = 1.0e-05 : f64}
           : tensor<?x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$input, XG_F32Tensor:$weight, XG_F32Tensor:$bias,
                       F64Attr:$eps);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$input `,` $weight `,` $bias attr-dict `:` type(operands) `->` type($result)";
}

def XG_GeluOp : XG_InferOp<"gelu"> {
  let summary = "GELU activation, elementwise";
  let description = [{
    `approximate` selects the formula, as transformers' activations name them:
    `"none"` (exact: `x * (1 + erf(x / sqrt(2))) / 2`, "gelu"), `"tanh"`
    ("gelu_pytorch_tanh" / "gelu_new") and `"quick"` (`x * sigmoid(1.702 x)`,
    "quick_gelu").

    ```mlir
    %y = xg.gelu %x {approximate = "quick"} : tensor<?x64xf32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$input, StrAttr:$approximate);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def XG_AttentionOp : XG_InferOp<"attention"> {
  let summary = "bidirectional softmax attention within fixed-length sequences";
  let description = [{
    The rows form consecutive sequences of `seq_len` rows (one per image). Every
    row attends to every row of its own sequence, no mask:
    `out = softmax(q k^T * scale) v` per head of `head_dim` columns.

    ```mlir
    %o = xg.attention %q, %k, %v {seq_len = 17 : i64, num_heads = 2 : i64,
                                  head_dim = 16 : i64, scale = 0.25 : f32}
           : tensor<34x32xf32>, tensor<34x32xf32>, tensor<34x32xf32> -> tensor<34x32xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$q, XG_F32Tensor:$k, XG_F32Tensor:$v, I64Attr:$seq_len,
                       I64Attr:$num_heads, I64Attr:$head_dim, F32Attr:$scale);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$q `,` $k `,` $v attr-dict `:` type(operands) `->` type($result)";
}

def XG_SkipRowsOp : XG_InferOp<"skip_rows"> {
  let summary = "drops the first rows of every group of rows";
  let description = [{
    The input rows form consecutive groups of `group` rows; the result keeps rows
    `[skip, group)` of each group, in order (LLaVA's "default" feature selection
    drops each image's class row).

    ```mlir
    %f = xg.skip_rows %x {group = 17 : i64, skip = 1 : i64} : tensor<34x32xf32> -> tensor<32x32xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$input, I64Attr:$group, I64Attr:$skip);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

//===----------------------------------------------------------------------===//
// Merging encoder outputs into the decoder
//===----------------------------------------------------------------------===//

def XG_EncoderCacheOp : XG_Op<"encoder_cache", [Pure]> {
  let summary = "the runtime's encoder-output cache, as a tensor";
  let description = [{
    The buffer of `[rows, hidden]` f32 rows in which the runtime keeps the
    projected image features (`vision_encode` outputs) of the images in flight.
    Like the KV cache it is runtime state, not an input: its capacity is fixed at
    compile time and the executable reads it through a binding of its own.

    ```mlir
    %c = xg.encoder_cache : tensor<64x64xf32>
    ```
  }];
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def XG_MergeRowsOp : XG_InferOp<"merge_rows"> {
  let summary = "replaces token embeddings by encoder-cache rows";
  let description = [{
    `result[t] = cache[source[t]]` when `0 <= source[t] < rows(cache)`, else
    `embeds[t]`: text tokens keep their embedding, image placeholder tokens read
    their image feature row.

    ```mlir
    %x = xg.merge_rows %emb, %src, %cache
           : tensor<?x64xf32>, tensor<?xi32>, tensor<64x64xf32> -> tensor<?x64xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$embeds, XG_I32Tensor:$source, XG_F32Tensor:$cache);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$embeds `,` $source `,` $cache attr-dict `:` type(operands) `->` type($result)";
}

//===----------------------------------------------------------------------===//
// Multi-LoRA
//===----------------------------------------------------------------------===//

def XG_LoraSlotsOp : XG_Op<"lora_slots", [Pure]> {
  let summary = "the runtime's adapter slots of one LoRA target, as a tensor";
  let description = [{
    The `[num_slots, rank, features]` f32 adapter matrices the runtime keeps for the
    module `target` (a decoder module path): `matrix = "a"` holds each slot's
    lora_A (`features` = in_features), `matrix = "b"` its `(scaling * lora_B)^T`
    (`features` = out_features); rows past an adapter's own rank are zero. Like the
    KV cache it is runtime state: adapters are loaded into slots while serving,
    without recompiling.

    ```mlir
    %a = xg.lora_slots {target = "model.layers.0.self_attn.q_proj", matrix = "a"}
           : tensor<4x8x64xf32>
    ```
  }];
  let arguments = (ins StrAttr:$target, StrAttr:$matrix);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def XG_LoraShrinkOp : XG_InferOp<"lora_shrink"> {
  let summary = "x times the A matrix of each row's adapter slot";
  let description = [{
    `result[i] = x[i] * a[slot(i)]^T`, `[num_tokens, rank]` f32; rows whose slot is
    -1 are 0. With `mixed` every row reads its own `slots[i]`; without it every
    row uses `slots[0]` (the executable for a batch with one adapter).

    ```mlir
    %s = xg.lora_shrink %x, %a, %slots {mixed}
           : tensor<16x64xf32>, tensor<4x8x64xf32>, tensor<16xi32> -> tensor<16x8xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$input, XG_F32Tensor:$a, XG_I32Tensor:$slots,
                       UnitAttr:$mixed);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$input `,` $a `,` $slots attr-dict `:` type(operands) `->` type($result)";
  let hasVerifier = 1;
}

def XG_LoraExpandOp : XG_InferOp<"lora_expand"> {
  let summary = "adds the shrunk rows times the B matrix of each row's adapter slot";
  let description = [{
    `result[i] = y[i] + shrunk[i] * bt[slot(i)]`; rows whose slot is -1 are `y[i]`.
    Memory planning writes the result in place over `y`, which must have no other
    user (it may be a column slice of a fused q/k/v or gate/up output).

    ```mlir
    %y2 = xg.lora_expand %y, %s, %bt, %slots {mixed}
            : tensor<16x64xf32>, tensor<16x8xf32>, tensor<4x8x64xf32>, tensor<16xi32>
            -> tensor<16x64xf32>
    ```
  }];
  let arguments = (ins XG_F32Tensor:$input, XG_F32Tensor:$shrunk, XG_F32Tensor:$bt,
                       XG_I32Tensor:$slots, UnitAttr:$mixed);
  let results = (outs XG_F32Tensor:$result);
  let assemblyFormat = "$input `,` $shrunk `,` $bt `,` $slots attr-dict `:` type(operands) `->` type($result)";
  let hasVerifier = 1;
}

#endif  // XCC_DIALECTS_XG_IR_XGOPS_TD
