// RUN: xcc-opt %s -split-input-file -verify-diagnostics -xcc-xg-plan-memory="alignment=64" | FileCheck %s

// Results, then arguments, live in the io buffer; intermediates share the arena by
// liveness. The split views alias %gu's range with column offsets, and keep it
// alive until silu_mul; %n1's range [0, 4096) is free again after the first
// linear but too small for silu_mul's 6144 bytes, which go after %gu.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: %arg0: tensor<16x64xf32> {xg.io = #xg.buffer<io, offset = 4096, size = 4096, row_stride = 64>}
// CHECK-SAME: -> (tensor<16x64xf32> {xg.io = #xg.buffer<io, offset = 0, size = 4096, row_stride = 64>})
// CHECK-SAME: xg.arena_size = 22528 : i64
// CHECK-SAME: xg.io_size = 8192 : i64
// CHECK: xg.rms_norm {{.*}}xg.buffers = [#xg.buffer<arena, offset = 0, size = 4096, row_stride = 64>]
// CHECK: xg.linear {{.*}}xg.buffers = [#xg.buffer<arena, offset = 4096, size = 12288, row_stride = 192>]
// CHECK: xg.split {{.*}}xg.buffers = [#xg.buffer<arena, offset = 4096, size = 12288, row_stride = 192>, #xg.buffer<arena, offset = 4096, size = 12288, row_stride = 192, col_offset = 96>]
// CHECK: xg.silu_mul {{.*}}xg.buffers = [#xg.buffer<arena, offset = 16384, size = 6144, row_stride = 96>]
// CHECK: xg.linear {{.*}}xg.buffers = [#xg.buffer<io, offset = 0, size = 4096, row_stride = 64>]
func.func @mlp(%x: tensor<16x64xf32>) -> tensor<16x64xf32> attributes {xg.entry} {
  %nw = xg.weight "norm" : tensor<64xf32>
  %n1 = xg.rms_norm %x, %nw {eps = 1.0e-5 : f64} : tensor<16x64xf32>, tensor<64xf32> -> tensor<16x64xf32>
  %w = xg.weight "gate+up" {pack_nr = 16 : i64} : tensor<192x64xf32>
  %gu = xg.linear %n1, %w : tensor<16x64xf32>, tensor<192x64xf32> -> tensor<16x192xf32>
  %g, %u = xg.split %gu {sizes = array<i64: 96, 96>} : tensor<16x192xf32> -> tensor<16x96xf32>, tensor<16x96xf32>
  %a = xg.silu_mul %g, %u : tensor<16x96xf32>, tensor<16x96xf32> -> tensor<16x96xf32>
  %d = xg.weight "down" {pack_nr = 16 : i64} : tensor<64x96xf32>
  %y = xg.linear %a, %d accumulate(%x) : tensor<16x96xf32>, tensor<64x96xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
  return %y : tensor<16x64xf32>
}

// -----

// expected-error @+1 {{result 0 must be computed by an op of its own}}
func.func @passthrough(%x: tensor<16x64xf32>) -> tensor<16x64xf32> attributes {xg.entry} {
  return %x : tensor<16x64xf32>
}

// -----

// expected-error @+1 {{result 0 needs a static shape}}
func.func @dynamic(%x: tensor<?x64xf32>) -> tensor<?x64xf32> attributes {xg.entry} {
  %nw = xg.weight "norm" : tensor<64xf32>
  %n1 = xg.rms_norm %x, %nw {eps = 1.0e-5 : f64} : tensor<?x64xf32>, tensor<64xf32> -> tensor<?x64xf32>
  return %n1 : tensor<?x64xf32>
}

// -----

// The residual stream is updated in place: %x1 dies at the linear that
// accumulates into it, so %x2 takes %x1's range.
// CHECK-LABEL: func.func @in_place
// CHECK: xg.rms_norm {{.*}}xg.buffers = [#xg.buffer<arena, offset = 0, size = 4096, row_stride = 64>]
// CHECK: xg.rms_norm {{.*}}xg.buffers = [#xg.buffer<arena, offset = 4096, size = 4096, row_stride = 64>]
// CHECK: xg.linear {{.*}}accumulate{{.*}}xg.buffers = [#xg.buffer<arena, offset = 0, size = 4096, row_stride = 64>]
// CHECK: xg.rms_norm {{.*}}xg.buffers = [#xg.buffer<io, offset = 0, size = 4096, row_stride = 64>]
func.func @in_place(%x: tensor<16x64xf32>) -> tensor<16x64xf32> attributes {xg.entry} {
  %nw = xg.weight "norm" : tensor<64xf32>
  %x1 = xg.rms_norm %x, %nw {eps = 1.0e-5 : f64} : tensor<16x64xf32>, tensor<64xf32> -> tensor<16x64xf32>
  %h = xg.rms_norm %x1, %nw {eps = 1.0e-5 : f64} : tensor<16x64xf32>, tensor<64xf32> -> tensor<16x64xf32>
  %w = xg.weight "o" {pack_nr = 16 : i64} : tensor<64x64xf32>
  %x2 = xg.linear %h, %w accumulate(%x1) : tensor<16x64xf32>, tensor<64x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
  %y = xg.rms_norm %x2, %nw {eps = 1.0e-5 : f64} : tensor<16x64xf32>, tensor<64xf32> -> tensor<16x64xf32>
  return %y : tensor<16x64xf32>
}
