// RUN: xcc-opt %s -split-input-file -verify-diagnostics -xcc-xg-plan-memory -xcc-xg-form-dispatches | FileCheck %s

// Matmul-class ops become ukernel calls; the rest is outlined into dispatch
// functions on flat memrefs, deduplicated across identical uses (the two
// rms_norms share @rms_norm_0). Strided views (the split) reach the dispatch
// through a strided reinterpret_cast.
// CHECK-LABEL: func.func @step
// CHECK: xg.embedding {{.*}}xg.dispatch = @embedding_0, xg.workgroups = 4 : i64
// CHECK: xg.rms_norm {{.*}}xg.dispatch = @rms_norm_0, xg.workgroups = 4 : i64
// CHECK: xg.linear {{.*}}xg.ukernel = "matmul"
// CHECK: xg.rope_cos_sin {{.*}}xg.dispatch = @rope_cos_sin_0
// CHECK: xg.rope {{.*}}xg.dispatch = @rope_0
// CHECK: xg.silu_mul {{.*}}xg.dispatch = @silu_mul_0
// CHECK: xg.rms_norm {{.*}}xg.dispatch = @rms_norm_0,
// CHECK: xg.add {{.*}}xg.dispatch = @add_0

// CHECK-LABEL: func.func @embedding_0(
// CHECK-SAME: %[[T:.*]]: memref<2048xf32>, %[[IDS:.*]]: memref<4xi32>, %[[OUT:.*]]: memref<128xf32>, %[[B:.*]]: index, %[[E:.*]]: index)
// CHECK-SAME: attributes {xg.dispatch_func}
// CHECK: scf.for %[[R:.*]] = %[[B]] to %[[E]]
// CHECK: memref.load %[[IDS]][%[[R]]]
// CHECK: scf.if

// CHECK-LABEL: func.func @rms_norm_0(
// CHECK: scf.for
// CHECK: scf.for {{.*}} iter_args
// CHECK: arith.addf {{.*}} fastmath<reassoc>
// CHECK: math.sqrt

// CHECK-LABEL: func.func @rope_cos_sin_0(
// CHECK: math.cos
// CHECK: math.sin

// CHECK-LABEL: func.func @rope_0(
// CHECK-SAME: %{{.*}}: memref<224xf32>
// CHECK: memref.reinterpret_cast %{{.*}} to offset: [0], sizes: [4, 32], strides: [64, 1]
// CHECK-NOT: math.cos
// CHECK: arith.mulf

// CHECK-LABEL: func.func @silu_mul_0(
// CHECK: math.exp

// CHECK-LABEL: func.func @add_0(
// CHECK-NOT: func.func @rms_norm_1
func.func @step(%ids: tensor<4xi32>, %pos: tensor<4xi32>) -> tensor<4x32xf32> attributes {xg.entry} {
  %t = xg.weight "embed" : tensor<64x32xf32>
  %x = xg.embedding %t, %ids : tensor<64x32xf32>, tensor<4xi32> -> tensor<4x32xf32>
  %nw = xg.weight "norm" : tensor<32xf32>
  %n = xg.rms_norm %x, %nw {eps = 1.0e-5 : f64} : tensor<4x32xf32>, tensor<32xf32> -> tensor<4x32xf32>
  %w = xg.weight "gu" {pack_nr = 16 : i64} : tensor<64x32xf32>
  %gu = xg.linear %n, %w : tensor<4x32xf32>, tensor<64x32xf32> -> tensor<4x64xf32>
  %g, %u = xg.split %gu {sizes = array<i64: 32, 32>} : tensor<4x64xf32> -> tensor<4x32xf32>, tensor<4x32xf32>
  %inv = xg.weight "inv" : tensor<8xf32>
  %cs = xg.rope_cos_sin %pos, %inv : tensor<4xi32>, tensor<8xf32> -> tensor<4x16xf32>
  %r = xg.rope %g, %cs {head_dim = 16 : i64} : tensor<4x32xf32>, tensor<4x16xf32> -> tensor<4x32xf32>
  %a = xg.silu_mul %r, %u : tensor<4x32xf32>, tensor<4x32xf32> -> tensor<4x32xf32>
  %n2 = xg.rms_norm %a, %nw {eps = 1.0e-5 : f64} : tensor<4x32xf32>, tensor<32xf32> -> tensor<4x32xf32>
  %y = xg.add %n2, %x : tensor<4x32xf32>, tensor<4x32xf32> -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// An embedding table in the packed layout (tied to the lm_head) reaches the
// lookup as flat bytes; only the table may be packed.
// CHECK-LABEL: func.func @packed_table
// CHECK: xg.embedding {{.*}}xg.dispatch = @embedding_0
// CHECK-LABEL: func.func @embedding_0(
// CHECK-SAME: %[[T:.*]]: memref<8192xi8>, %{{.*}}: memref<4xi32>
// CHECK: memref.view %[[T]][%{{.*}}][] : memref<8192xi8> to memref<2048xf32>
// CHECK: arith.divui
// CHECK: arith.remui
func.func @packed_table(%ids: tensor<4xi32>) -> tensor<4x32xf32> attributes {xg.entry} {
  %t = xg.weight "embed" {pack_nr = 16 : i64} : tensor<64x32xf32>
  %x = xg.embedding %t, %ids : tensor<64x32xf32>, tensor<4xi32> -> tensor<4x32xf32>
  return %x : tensor<4x32xf32>
}

// -----

// A q4_1 table: 2 panels of 32 columns, one group each (128 bytes of f16
// scales and mins + 32 k-rows of 16 bytes) = 2 * 640 bytes. Each value is
// fma(scale, nibble, min); columns 16..31 of a panel use the high nibbles.
// CHECK-LABEL: func.func @embedding_0(
// CHECK-SAME: %[[T:.*]]: memref<1280xi8>
// CHECK: memref.view %[[T]][%{{.*}}][] : memref<1280xi8> to memref<640xi16>
// CHECK: arith.bitcast %{{.*}} : i16 to f16
// CHECK: arith.extf
// CHECK: arith.shrui %{{.*}} : i8
// CHECK: arith.uitofp %{{.*}} : i8 to f32
// CHECK: math.fma
func.func @q4_1_table(%ids: tensor<4xi32>) -> tensor<4x32xf32> attributes {xg.entry} {
  %t = xg.weight "embed" {format = "q4_1", pack_nr = 32 : i64} : tensor<64x32xf32>
  %x = xg.embedding %t, %ids : tensor<64x32xf32>, tensor<4xi32> -> tensor<4x32xf32>
  return %x : tensor<4x32xf32>
}

// -----

func.func @packed_into_generated(%x: tensor<4x32xf32>) -> tensor<4x32xf32> attributes {xg.entry} {
  %w = xg.weight "norm" {pack_nr = 16 : i64} : tensor<4x32xf32>
  // expected-error @+1 {{generated code cannot read the packed weight 'norm'}}
  %y = xg.add %x, %w : tensor<4x32xf32>, tensor<4x32xf32> -> tensor<4x32xf32>
  return %y : tensor<4x32xf32>
}

// -----

// A q6_k table: 2 panels of 32 columns, one 256-k super-block each (6720
// bytes: f16 d, int8 scales, bit words, low nibbles). Each value is
// (d * scale) * (q - 32) with q = nibble | bit4 << 4 | bit5 << 5.
// CHECK-LABEL: func.func @embedding_0(
// CHECK-SAME: %[[T:.*]]: memref<13440xi8>
// CHECK: memref.view %[[T]][%{{.*}}][] : memref<13440xi8> to memref<6720xi16>
// CHECK: arith.bitcast %{{.*}} : i16 to f16
// CHECK: arith.sitofp %{{.*}} : i8 to f32
// CHECK: arith.shrui %{{.*}} : i8
// CHECK: arith.ori
// CHECK: arith.uitofp %{{.*}} : i8 to f32
// CHECK: arith.subf
// CHECK: arith.mulf
func.func @q6_k_table(%ids: tensor<4xi32>) -> tensor<4x256xf32> attributes {xg.entry} {
  %t = xg.weight "embed" {format = "q6_k", pack_nr = 32 : i64} : tensor<64x256xf32>
  %x = xg.embedding %t, %ids : tensor<64x256xf32>, tensor<4xi32> -> tensor<4x256xf32>
  return %x : tensor<4x256xf32>
}
