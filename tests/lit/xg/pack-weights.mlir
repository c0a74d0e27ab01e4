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

// A tied embedding: the table stays row-major for the gather, and the lm_head
// linear reads a packed copy.
// CHECK-LABEL: func.func @tied
// CHECK: %[[T:.*]] = xg.weight "embed" : tensor<512x64xf32>
// CHECK: xg.embedding %[[T]]
// CHECK: %[[P:.*]] = xg.weight "embed" {pack_nr = 16 : i64} : tensor<512x64xf32>
// CHECK: xg.linear %{{.*}}, %[[P]]
func.func @tied(%ids: tensor<16xi32>) -> tensor<16x512xf32> {
  %t = xg.weight "embed" : tensor<512x64xf32>
  %x = xg.embedding %t, %ids : tensor<512x64xf32>, tensor<16xi32> -> tensor<16x64xf32>
  %y = xg.linear %x, %t : tensor<16x64xf32>, tensor<512x64xf32> -> tensor<16x512xf32>
  return %y : tensor<16x512xf32>
}
