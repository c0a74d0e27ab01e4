// RUN: xcc-opt %s -xcc-xg-pack-weights="pack-nr=16" | FileCheck %s

// A concat of weights folds into one weight that lists its sources, packed
// because a linear consumes it.
// CHECK-LABEL: func.func @concat
// CHECK: %[[W:.*]] = xg.weight "q+k+v" {pack_nr = 16 : i64, sources = ["q", "k", "v"]} : tensor<128x64xf32>
// CHECK-NOT: xg.concat
// CHECK: xg.linear %arg0, %[[W]]
func.func @concat(%h: tensor<16x64xf32>) -> tensor<16x128xf32> {
  %q = xg.weight "q" : tensor<64x64xf32>
  %k = xg.weight "k" : tensor<32x64xf32>
  %v = xg.weight "v" : tensor<32x64xf32>
  %w = xg.concat %q, %k, %v {axis = 0 : i64} : tensor<64x64xf32>, tensor<32x64xf32>, tensor<32x64xf32> -> tensor<128x64xf32>
  %y = xg.linear %h, %w : tensor<16x64xf32>, tensor<128x64xf32> -> tensor<16x128xf32>
  return %y : tensor<16x128xf32>
}

// A tied embedding: the table is packed once; the lookup reads the packed
// layout too.
// CHECK-LABEL: func.func @tied
// CHECK: %[[T:.*]] = xg.weight "embed" {pack_nr = 16 : i64} : tensor<512x64xf32>
// CHECK: xg.embedding %[[T]]
// CHECK: xg.linear %{{.*}}, %[[T]]
// CHECK-NOT: xg.weight
func.func @tied(%ids: tensor<16xi32>) -> tensor<16x512xf32> {
  %t = xg.weight "embed" : tensor<512x64xf32>
  %x = xg.embedding %t, %ids : tensor<512x64xf32>, tensor<16xi32> -> tensor<16x64xf32>
  %y = xg.linear %x, %t : tensor<16x64xf32>, tensor<512x64xf32> -> tensor<16x512xf32>
  return %y : tensor<16x512xf32>
}

// An f32 table no linear reads stays row-major.
// CHECK-LABEL: func.func @untied_f32
// CHECK: xg.weight "embed" : tensor<512x64xf32>
func.func @untied_f32(%ids: tensor<16xi32>) -> tensor<16x64xf32> {
  %t = xg.weight "embed" : tensor<512x64xf32>
  %x = xg.embedding %t, %ids : tensor<512x64xf32>, tensor<16xi32> -> tensor<16x64xf32>
  return %x : tensor<16x64xf32>
}

// A weight also read by another op keeps its row-major copy; the linear gets
// a packed one.
// CHECK-LABEL: func.func @shared
// CHECK: %[[R:.*]] = xg.weight "w" : tensor<16x64xf32>
// CHECK: %[[P:.*]] = xg.weight "w" {pack_nr = 16 : i64} : tensor<16x64xf32>
// CHECK: xg.linear %arg0, %[[P]]
// CHECK: xg.add %{{.*}}, %[[R]]
func.func @shared(%h: tensor<16x64xf32>) -> tensor<16x64xf32> {
  %w = xg.weight "w" : tensor<16x64xf32>
  %y = xg.linear %h, %w : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x16xf32>
  %z = xg.add %h, %w : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
  return %z : tensor<16x64xf32>
}
