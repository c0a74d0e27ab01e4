// RUN: xcc-opt %s | xcc-opt | FileCheck %s
// Round trip of every xg op, with static and dynamic batch dimensions.

// CHECK-LABEL: func.func @decoder_layer
func.func @decoder_layer(%ids: tensor<?xi32>, %pos: tensor<?xi32>, %slots: tensor<?xi32>,
                         %tables: tensor<8x4xi32>, %lens: tensor<8xi32>, %qsl: tensor<9xi32>)
    -> tensor<?x64xf32> {
  // CHECK: xg.weight "embed" : tensor<512x64xf32>
  %table = xg.weight "embed" : tensor<512x64xf32>
  // CHECK: xg.embedding %{{.*}}, %{{.*}} : tensor<512x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %x = xg.embedding %table, %ids : tensor<512x64xf32>, tensor<?xi32> -> tensor<?x64xf32>
  %nw = xg.weight "norm" : tensor<64xf32>
  // CHECK: xg.rms_norm %{{.*}}, %{{.*}} {eps = 1.000000e-05 : f64}
  %h = xg.rms_norm %x, %nw {eps = 1.0e-05 : f64} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  %wqkv = xg.weight "qkv" {sources = ["q", "k", "v"], pack_nr = 16 : i64} : tensor<128x64xf32>
  %bqkv = xg.weight "qkv_bias" : tensor<128xf32>
  // CHECK: xg.linear %{{.*}}, %{{.*}} bias(%{{.*}}) : tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32> -> tensor<?x128xf32>
  %qkv = xg.linear %h, %wqkv bias(%bqkv) : tensor<?x64xf32>, tensor<128x64xf32>, tensor<128xf32> -> tensor<?x128xf32>
  // CHECK: xg.split %{{.*}} {sizes = array<i64: 64, 32, 32>} : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %q, %k, %v = xg.split %qkv {sizes = array<i64: 64, 32, 32>} : tensor<?x128xf32> -> tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>
  %inv = xg.weight "inv_freq" : tensor<8xf32>
  // CHECK: xg.rope_cos_sin %{{.*}}, %{{.*}} : tensor<?xi32>, tensor<8xf32> -> tensor<?x16xf32>
  %cs = xg.rope_cos_sin %pos, %inv : tensor<?xi32>, tensor<8xf32> -> tensor<?x16xf32>
  // CHECK: xg.rope %{{.*}}, %{{.*}} {head_dim = 16 : i64}
  %qr = xg.rope %q, %cs {head_dim = 16 : i64} : tensor<?x64xf32>, tensor<?x16xf32> -> tensor<?x64xf32>
  %kr = xg.rope %k, %cs {head_dim = 16 : i64} : tensor<?x32xf32>, tensor<?x16xf32> -> tensor<?x32xf32>
  // CHECK: xg.paged_attention {{.*}} {head_dim = 16 : i64, layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, scale = 2.500000e-01 : f32}
  %o = xg.paged_attention %qr, %kr, %v, %slots, %tables, %lens, %qsl
         {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f32}
         : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, tensor<?xi32>, tensor<8x4xi32>, tensor<8xi32>, tensor<9xi32> -> tensor<?x64xf32>
  %wo = xg.weight "o" : tensor<64x64xf32>
  // CHECK: xg.linear %{{.*}}, %{{.*}} accumulate(%{{.*}}) : tensor<?x64xf32>, tensor<64x64xf32>, tensor<?x64xf32> -> tensor<?x64xf32>
  %x2 = xg.linear %o, %wo accumulate(%x) : tensor<?x64xf32>, tensor<64x64xf32>, tensor<?x64xf32> -> tensor<?x64xf32>
  %g = xg.weight "gate" : tensor<96x64xf32>
  %u = xg.weight "up" : tensor<96x64xf32>
  // CHECK: xg.concat %{{.*}}, %{{.*}} {axis = 0 : i64} : tensor<96x64xf32>, tensor<96x64xf32> -> tensor<192x64xf32>
  %gu_w = xg.concat %g, %u {axis = 0 : i64} : tensor<96x64xf32>, tensor<96x64xf32> -> tensor<192x64xf32>
  %gu = xg.linear %x2, %gu_w : tensor<?x64xf32>, tensor<192x64xf32> -> tensor<?x192xf32>
  %gate, %up = xg.split %gu {sizes = array<i64: 96, 96>} : tensor<?x192xf32> -> tensor<?x96xf32>, tensor<?x96xf32>
  // CHECK: xg.silu_mul %{{.*}}, %{{.*}} : tensor<?x96xf32>, tensor<?x96xf32> -> tensor<?x96xf32>
  %a = xg.silu_mul %gate, %up : tensor<?x96xf32>, tensor<?x96xf32> -> tensor<?x96xf32>
  %d = xg.weight "down" : tensor<64x96xf32>
  %y = xg.linear %a, %d : tensor<?x96xf32>, tensor<64x96xf32> -> tensor<?x64xf32>
  // CHECK: xg.add %{{.*}}, %{{.*}} : tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x64xf32>
  %r = xg.add %x2, %y : tensor<?x64xf32>, tensor<?x64xf32> -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}

// CHECK-LABEL: func.func @logits
func.func @logits(%hidden: tensor<64x64xf32>, %idx: tensor<8xi32>) -> tensor<8x64xf32> {
  // CHECK: xg.gather_rows %{{.*}}, %{{.*}} : tensor<64x64xf32>, tensor<8xi32> -> tensor<8x64xf32>
  %h = xg.gather_rows %hidden, %idx : tensor<64x64xf32>, tensor<8xi32> -> tensor<8x64xf32>
  return %h : tensor<8x64xf32>
}

// The xg attributes of a planned entry function: io placements of arguments and
// results, a buffer per op result (a view at a column offset of its source's
// buffer; col_offset 0 is the default and is not printed), the ukernel or
// dispatch an op runs as.
// CHECK-LABEL: func.func @planned
// CHECK-SAME: (%{{.*}}: tensor<4x64xf32> {xg.io = #xg.buffer<io, offset = 1024, size = 1024, row_stride = 64>, xg.name = "x", xg.symbolic_dims = ["num_tokens", ""]}
// CHECK-SAME: -> (tensor<4x32xf32> {xg.io = #xg.buffer<io, offset = 0, size = 512, row_stride = 32>, xg.name = "y"})
// CHECK-SAME: attributes {xg.arena_size = 512 : i64, xg.bucket = 4 : i64, xg.bucket_param = "num_tokens", xg.entry, xg.io_size = 2048 : i64}
func.func @planned(%x: tensor<4x64xf32> {xg.io = #xg.buffer<io, offset = 1024, size = 1024, row_stride = 64, col_offset = 0>,
                                          xg.name = "x", xg.symbolic_dims = ["num_tokens", ""]})
    -> (tensor<4x32xf32> {xg.io = #xg.buffer<io, offset = 0, size = 512, row_stride = 32>, xg.name = "y"})
    attributes {xg.entry, xg.bucket_param = "num_tokens", xg.bucket = 4 : i64,
                xg.arena_size = 512 : i64, xg.io_size = 2048 : i64} {
  // CHECK: xg.split {{.*}}xg.buffers = [#xg.buffer<io, offset = 1024, size = 1024, row_stride = 64>, #xg.buffer<io, offset = 1024, size = 1024, row_stride = 64, col_offset = 32>]
  %a, %b = xg.split %x {sizes = array<i64: 32, 32>,
                        xg.buffers = [#xg.buffer<io, offset = 1024, size = 1024, row_stride = 64>,
                                      #xg.buffer<io, offset = 1024, size = 1024, row_stride = 64, col_offset = 32>]}
             : tensor<4x64xf32> -> tensor<4x32xf32>, tensor<4x32xf32>
  // CHECK: xg.silu_mul {{.*}}{xg.buffers = [#xg.buffer<arena, offset = 0, size = 512, row_stride = 32>], xg.dispatch = @silu_mul_0, xg.workgroups = 4 : i64}
  %s = xg.silu_mul %a, %b {xg.buffers = [#xg.buffer<arena, offset = 0, size = 512, row_stride = 32>],
                           xg.dispatch = @silu_mul_0, xg.workgroups = 4 : i64}
         : tensor<4x32xf32>, tensor<4x32xf32> -> tensor<4x32xf32>
  %w = xg.weight "w" {pack_nr = 16 : i64} : tensor<32x32xf32>
  // CHECK: xg.linear {{.*}}{xg.buffers = [#xg.buffer<io, offset = 0, size = 512, row_stride = 32>], xg.ukernel = "matmul"}
  %y = xg.linear %s, %w {xg.buffers = [#xg.buffer<io, offset = 0, size = 512, row_stride = 32>], xg.ukernel = "matmul"}
         : tensor<4x32xf32>, tensor<32x32xf32> -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// CHECK-LABEL: func.func private @silu_mul_0
// CHECK-SAME: attributes {xg.dispatch_func}
func.func private @silu_mul_0(memref<128xf32>, memref<128xf32>, memref<128xf32>, index, index)
    attributes {xg.dispatch_func}
