// RUN: xcc-opt %s -xcc-xg-fuse | FileCheck %s

// q/k/v share their input: one linear over the concatenated weights (and
// biases), then a split.
// CHECK-LABEL: func.func @qkv
// CHECK-DAG: %[[Q:.*]] = xg.weight "q"
// CHECK-DAG: %[[K:.*]] = xg.weight "k"
// CHECK-DAG: %[[V:.*]] = xg.weight "v"
// CHECK-DAG: %[[QB:.*]] = xg.weight "qb"
// CHECK: %[[W:.*]] = xg.concat %[[Q]], %[[K]], %[[V]] {axis = 0 : i64} : tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32> -> tensor<128x64xf32>
// CHECK: %[[B:.*]] = xg.concat %[[QB]], %{{.*}}, %{{.*}} {axis = 0 : i64}
// CHECK: %[[L:.*]] = xg.linear %arg0, %[[W]] bias(%[[B]]) {{.*}} -> tensor<16x128xf32>
// CHECK: %[[S:.*]]:3 = xg.split %[[L]] {sizes = array<i64: 64, 32, 32>}
// CHECK-NOT: xg.linear
// CHECK: return %[[S]]#0, %[[S]]#1, %[[S]]#2
func.func @qkv(%h: tensor<16x64xf32>) -> (tensor<16x64xf32>, tensor<16x32xf32>, tensor<16x32xf32>) {
  %wq = xg.weight "q" : tensor<64x64xf32>
  %bq = xg.weight "qb" : tensor<64xf32>
  %q = xg.linear %h, %wq bias(%bq) : tensor<16x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<16x64xf32>
  %wk = xg.weight "k" : tensor<32x64xf32>
  %bk = xg.weight "kb" : tensor<32xf32>
  %k = xg.linear %h, %wk bias(%bk) : tensor<16x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<16x32xf32>
  %wv = xg.weight "v" : tensor<32x64xf32>
  %bv = xg.weight "vb" : tensor<32xf32>
  %v = xg.linear %h, %wv bias(%bv) : tensor<16x64xf32>, tensor<32x64xf32>, tensor<32xf32> -> tensor<16x32xf32>
  return %q, %k, %v : tensor<16x64xf32>, tensor<16x32xf32>, tensor<16x32xf32>
}

// The residual add becomes the accumulator of the linear that feeds it, and
// gate/up fuse like q/k/v.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[GU:.*]] = xg.linear %[[H:.*]], %{{.*}} : tensor<16x64xf32>, tensor<192x64xf32> -> tensor<16x192xf32>
// CHECK: %[[S:.*]]:2 = xg.split %[[GU]] {sizes = array<i64: 96, 96>}
// CHECK: %[[A:.*]] = xg.silu_mul %[[S]]#0, %[[S]]#1
// CHECK: %[[Y:.*]] = xg.linear %[[A]], %{{.*}} accumulate(%arg0)
// CHECK-NOT: xg.add
// CHECK: return %[[Y]]
func.func @mlp(%x: tensor<16x64xf32>, %h: tensor<16x64xf32>) -> tensor<16x64xf32> {
  %g = xg.weight "gate" : tensor<96x64xf32>
  %u = xg.weight "up" : tensor<96x64xf32>
  %d = xg.weight "down" : tensor<64x96xf32>
  %gate = xg.linear %h, %g : tensor<16x64xf32>, tensor<96x64xf32> -> tensor<16x96xf32>
  %up = xg.linear %h, %u : tensor<16x64xf32>, tensor<96x64xf32> -> tensor<16x96xf32>
  %a = xg.silu_mul %gate, %up : tensor<16x96xf32>, tensor<16x96xf32> -> tensor<16x96xf32>
  %y = xg.linear %a, %d : tensor<16x96xf32>, tensor<64x96xf32> -> tensor<16x64xf32>
  %r = xg.add %x, %y : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
  return %r : tensor<16x64xf32>
}

// Not fused: a linear whose result has another use keeps the add separate, and
// siblings that disagree on bias stay apart.
// CHECK-LABEL: func.func @negative
// CHECK: xg.linear %arg1, %{{.*}} : tensor<16x64xf32>, tensor<64x64xf32> -> tensor<16x64xf32>
// CHECK: xg.linear %arg1, %{{.*}} bias
// CHECK: xg.add
func.func @negative(%x: tensor<16x64xf32>, %h: tensor<16x64xf32>) -> (tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>) {
  %w = xg.weight "w" : tensor<64x64xf32>
  %w2 = xg.weight "w2" : tensor<64x64xf32>
  %b2 = xg.weight "b2" : tensor<64xf32>
  %y = xg.linear %h, %w : tensor<16x64xf32>, tensor<64x64xf32> -> tensor<16x64xf32>
  %y2 = xg.linear %h, %w2 bias(%b2) : tensor<16x64xf32>, tensor<64x64xf32>, tensor<64xf32> -> tensor<16x64xf32>
  %r = xg.add %x, %y : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
  return %r, %y, %y2 : tensor<16x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>
}

// Siblings fuse only with weights of their own storage format: q and k
// (q4_1) fuse, v (q8_0) stays a linear of its own.
// CHECK-LABEL: func.func @mixed_formats
// CHECK: %[[W:.*]] = xg.concat %{{.*}}, %{{.*}} {axis = 0 : i64} : tensor<64x64xf32>, tensor<32x64xf32> -> tensor<96x64xf32>
// CHECK: xg.linear %arg0, %[[W]]
// CHECK: xg.split
// CHECK: %[[V:.*]] = xg.weight "v" {format = "q8_0"}
// CHECK: xg.linear %arg0, %[[V]]
func.func @mixed_formats(%h: tensor<16x64xf32>) -> (tensor<16x64xf32>, tensor<16x32xf32>, tensor<16x32xf32>) {
  %wq = xg.weight "q" {format = "q4_1"} : tensor<64x64xf32>
  %q = xg.linear %h, %wq : tensor<16x64xf32>, tensor<64x64xf32> -> tensor<16x64xf32>
  %wk = xg.weight "k" {format = "q4_1"} : tensor<32x64xf32>
  %k = xg.linear %h, %wk : tensor<16x64xf32>, tensor<32x64xf32> -> tensor<16x32xf32>
  %wv = xg.weight "v" {format = "q8_0"} : tensor<32x64xf32>
  %v = xg.linear %h, %wv : tensor<16x64xf32>, tensor<32x64xf32> -> tensor<16x32xf32>
  return %q, %k, %v : tensor<16x64xf32>, tensor<16x32xf32>, tensor<16x32xf32>
}
