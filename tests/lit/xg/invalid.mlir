// RUN: xcc-opt %s -split-input-file -verify-diagnostics

func.func @weight_dynamic() {
  // expected-error @+1 {{weight 'w' must have a static shape}}
  %w = xg.weight "w" : tensor<?x4xf32>
  return
}

// -----

func.func @weight_bad_pack() {
  // expected-error @+1 {{pack_nr must be positive}}
  %w = xg.weight "w" {pack_nr = 0 : i64} : tensor<4x4xf32>
  return
}

// -----

func.func @weight_pack_rank1() {
  // expected-error @+1 {{only rank-2 weights can be packed}}
  %w = xg.weight "w" {pack_nr = 16 : i64} : tensor<4xf32>
  return
}

// -----

func.func @embedding_rank(%ids: tensor<4x2xi32>) {
  %t = xg.weight "t" : tensor<16x8xf32>
  // expected-error @+2 {{ids must have rank 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %x = xg.embedding %t, %ids : tensor<16x8xf32>, tensor<4x2xi32> -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_weight(%x: tensor<4x8xf32>) {
  %w = xg.weight "w" : tensor<6xf32>
  // expected-error @+2 {{weight size is 6, expected 8}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.rms_norm %x, %w {eps = 1.0e-5 : f64} : tensor<4x8xf32>, tensor<6xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_eps(%x: tensor<4x8xf32>) {
  %w = xg.weight "w" : tensor<8xf32>
  // expected-error @+2 {{eps must be positive}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.rms_norm %x, %w {eps = 0.0 : f64} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @linear_k(%x: tensor<4x8xf32>) {
  %w = xg.weight "w" : tensor<16x6xf32>
  // expected-error @+2 {{weight input features is 6, expected 8}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.linear %x, %w : tensor<4x8xf32>, tensor<16x6xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_bias(%x: tensor<4x8xf32>) {
  %w = xg.weight "w" : tensor<16x8xf32>
  %b = xg.weight "b" : tensor<8xf32>
  // expected-error @+2 {{bias size is 8, expected 16}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.linear %x, %w bias(%b) : tensor<4x8xf32>, tensor<16x8xf32>, tensor<8xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_acc(%x: tensor<4x8xf32>, %r: tensor<4x8xf32>) {
  %w = xg.weight "w" : tensor<16x8xf32>
  // expected-error @+2 {{does not match the result}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.linear %x, %w accumulate(%r) : tensor<4x8xf32>, tensor<16x8xf32>, tensor<4x8xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @linear_result(%x: tensor<4x8xf32>) {
  %w = xg.weight "w" : tensor<16x8xf32>
  // expected-error @+2 {{inferred type(s) 'tensor<4x16xf32>' are incompatible with return type(s) of operation 'tensor<4x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.linear %x, %w : tensor<4x8xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @split_sum(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{input columns (sum of sizes) is 8, expected 6}}
  // expected-error @+1 {{failed to infer returned types}}
  %a, %b = xg.split %x {sizes = array<i64: 3, 3>} : tensor<4x8xf32> -> tensor<4x3xf32>, tensor<4x3xf32>
  return
}

// -----

func.func @split_positive(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{split sizes must be positive}}
  // expected-error @+1 {{failed to infer returned types}}
  %a, %b = xg.split %x {sizes = array<i64: 0, 8>} : tensor<4x8xf32> -> tensor<4x0xf32>, tensor<4x8xf32>
  return
}

// -----

func.func @rope_odd(%x: tensor<4x9xf32>, %cs: tensor<4x8xf32>) {
  // expected-error @+2 {{head_dim must be positive and even}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.rope %x, %cs {head_dim = 9 : i64} : tensor<4x9xf32>, tensor<4x8xf32> -> tensor<4x9xf32>
  return
}

// -----

func.func @rope_cols(%x: tensor<4x12xf32>, %cs: tensor<4x8xf32>) {
  // expected-error @+2 {{input columns 12 are not a multiple of head_dim 8}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.rope %x, %cs {head_dim = 8 : i64} : tensor<4x12xf32>, tensor<4x8xf32> -> tensor<4x12xf32>
  return
}

// -----

func.func @rope_table(%x: tensor<4x16xf32>, %cs: tensor<4x16xf32>) {
  // expected-error @+2 {{cos_sin columns is 16, expected 8}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.rope %x, %cs {head_dim = 8 : i64} : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @rope_table_rows(%x: tensor<4x16xf32>, %cs: tensor<5x8xf32>) {
  // expected-error @+2 {{cos_sin rows is 5, expected 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.rope %x, %cs {head_dim = 8 : i64} : tensor<4x16xf32>, tensor<5x8xf32> -> tensor<4x16xf32>
  return
}

// -----

func.func @rope_cos_sin_dynamic(%p: tensor<4xi32>, %inv: tensor<?xf32>) {
  // expected-error @+2 {{inv_freq must have a static positive size}}
  // expected-error @+1 {{failed to infer returned types}}
  %cs = xg.rope_cos_sin %p, %inv : tensor<4xi32>, tensor<?xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @attention_heads(%q: tensor<4x48xf32>, %k: tensor<4x32xf32>, %s: tensor<4xi32>,
                           %t: tensor<2x4xi32>, %l: tensor<2xi32>, %qsl: tensor<3xi32>) {
  // expected-error @+2 {{num_heads (3) must be a positive multiple of num_kv_heads (2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %o = xg.paged_attention %q, %k, %k, %s, %t, %l, %qsl
         {layer = 0 : i64, num_heads = 3 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f32}
         : tensor<4x48xf32>, tensor<4x32xf32>, tensor<4x32xf32>, tensor<4xi32>, tensor<2x4xi32>, tensor<2xi32>, tensor<3xi32> -> tensor<4x48xf32>
  return
}

// -----

func.func @attention_qsl(%q: tensor<4x64xf32>, %k: tensor<4x32xf32>, %s: tensor<4xi32>,
                         %t: tensor<2x4xi32>, %l: tensor<2xi32>, %qsl: tensor<2xi32>) {
  // expected-error @+2 {{query_start_loc size is 2, expected 3}}
  // expected-error @+1 {{failed to infer returned types}}
  %o = xg.paged_attention %q, %k, %k, %s, %t, %l, %qsl
         {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f32}
         : tensor<4x64xf32>, tensor<4x32xf32>, tensor<4x32xf32>, tensor<4xi32>, tensor<2x4xi32>, tensor<2xi32>, tensor<2xi32> -> tensor<4x64xf32>
  return
}

// -----

func.func @attention_scale(%q: tensor<4x64xf32>, %k: tensor<4x32xf32>, %s: tensor<4xi32>,
                           %t: tensor<2x4xi32>, %l: tensor<2xi32>, %qsl: tensor<3xi32>) {
  // expected-error @+1 {{scale must be positive}}
  %o = xg.paged_attention %q, %k, %k, %s, %t, %l, %qsl
         {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.0 : f32}
         : tensor<4x64xf32>, tensor<4x32xf32>, tensor<4x32xf32>, tensor<4xi32>, tensor<2x4xi32>, tensor<2xi32>, tensor<3xi32> -> tensor<4x64xf32>
  return
}

// -----

func.func @silu_mul_shapes(%a: tensor<4x8xf32>, %b: tensor<4x6xf32>) {
  // expected-error @+2 {{operand shapes differ}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.silu_mul %a, %b : tensor<4x8xf32>, tensor<4x6xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @add_rank(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+2 {{operands must have the same rank}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.add %a, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @concat_dims(%a: tensor<4x8xf32>, %b: tensor<4x6xf32>) {
  // expected-error @+2 {{inputs disagree on dimension 1: 8 vs 6}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.concat %a, %b {axis = 0 : i64} : tensor<4x8xf32>, tensor<4x6xf32> -> tensor<8x8xf32>
  return
}

// -----

func.func @concat_axis(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+2 {{axis 2 out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.concat %a, %b {axis = 2 : i64} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<8x8xf32>
  return
}

// -----

func.func @gather_rank(%x: tensor<4x8xf32>, %i: tensor<2x2xi32>) {
  // expected-error @+2 {{indices must have rank 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.gather_rows %x, %i : tensor<4x8xf32>, tensor<2x2xi32> -> tensor<2x8xf32>
  return
}

// -----

// expected-error @+2 {{expected ::xcc::xg::BufferSpace to be one of: arena, io}}
// expected-error @+1 {{failed to parse XG_BufferAttr parameter 'space'}}
func.func private @buffer_space(tensor<4xf32> {xg.io = #xg.buffer<heap, offset = 0, size = 16, row_stride = 4>})

// -----

// expected-error @+1 {{struct is missing required parameter: size}}
func.func private @buffer_missing(tensor<4xf32> {xg.io = #xg.buffer<io, offset = 0, row_stride = 4>})

// -----

// expected-error @+1 {{buffer offset must be >= 0, got -64}}
func.func private @buffer_offset(tensor<4xf32> {xg.io = #xg.buffer<io, offset = -64, size = 16, row_stride = 4>})

// -----

// expected-error @+1 {{buffer col_offset must be in [0, row_stride 4), got 4}}
func.func private @buffer_col(tensor<4xf32> {xg.io = #xg.buffer<io, offset = 0, size = 16, row_stride = 4, col_offset = 4>})

// -----

// expected-error @+1 {{argument 0 attribute 'xg.io' must place it in the io buffer}}
func.func private @io_in_arena(tensor<4xf32> {xg.io = #xg.buffer<arena, offset = 0, size = 16, row_stride = 4>})

// -----

// expected-error @+1 {{result 0 attribute 'xg.io' a 'tensor<4x8xf32>' at column 0 spans 128 bytes, more than the buffer's 64}}
func.func private @io_too_small() -> (tensor<4x8xf32> {xg.io = #xg.buffer<io, offset = 0, size = 64, row_stride = 8>})

// -----

// expected-error @+1 {{argument 0 attribute 'xg.entry' is not an xg argument attribute}}
func.func private @arg_attr(tensor<4xf32> {xg.entry})

// -----

func.func @buffers_count(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'xg.buffers' has 2 buffers for 1 results}}
  %y = xg.add %x, %x {xg.buffers = [#xg.buffer<arena, offset = 0, size = 128, row_stride = 8>,
                                    #xg.buffer<arena, offset = 128, size = 128, row_stride = 8>]}
         : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @buffers_positional(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'xg.buffers' must be an array of #xg.buffer}}
  %y = xg.add %x, %x {xg.buffers = [array<i64: 0, 0, 128, 8, 0>]}
         : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @buffers_view_wraps(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'xg.buffers' buffer 1 rows of 4 elements at column 6 do not fit in row_stride 8}}
  %a, %b = xg.split %x {sizes = array<i64: 4, 4>,
                        xg.buffers = [#xg.buffer<arena, offset = 0, size = 128, row_stride = 8>,
                                      #xg.buffer<arena, offset = 0, size = 128, row_stride = 8, col_offset = 6>]}
             : tensor<4x8xf32> -> tensor<4x4xf32>, tensor<4x4xf32>
  return
}

// -----

func.func @workgroups(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'xg.workgroups' must be >= 1, got 0}}
  %y = xg.add %x, %x {xg.dispatch = @add_0, xg.workgroups = 0 : i64}
         : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @unknown_attr(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'xg.bufers' is not an xg operation attribute}}
  %y = xg.add %x, %x {xg.bufers = []} : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @weight_unknown_format() {
  // expected-error @+1 {{unknown weight format 'q3_x'}}
  %w = xg.weight "w" {format = "q3_x"} : tensor<4x32xf32>
  return
}

// -----

func.func @weight_format_block() {
  // expected-error @+1 {{a q4_0 weight must be [N, K] with K a multiple of 32, got 'tensor<4x48xf32>'}}
  %w = xg.weight "w" {format = "q4_0"} : tensor<4x48xf32>
  return
}

// -----

func.func @weight_kquant_block() {
  // expected-error @+1 {{a q6_k weight must be [N, K] with K a multiple of 256, got 'tensor<4x288xf32>'}}
  %w = xg.weight "w" {format = "q6_k"} : tensor<4x288xf32>
  return
}
