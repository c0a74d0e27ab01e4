// RUN: xcc-opt %s -split-input-file -verify-diagnostics -xcc-xg-pack-weights="pack-nr=32" | FileCheck %s

// Weights of one format fold into a fused weight of that format.
// CHECK-LABEL: func.func @same_format
// CHECK: %[[W:.*]] = xg.weight "q+k" {format = "q4_1", pack_nr = 32 : i64, sources = ["q", "k"]} : tensor<96x64xf32>
// CHECK: xg.linear %arg0, %[[W]]
func.func @same_format(%h: tensor<16x64xf32>) -> tensor<16x96xf32> {
  %q = xg.weight "q" {format = "q4_1"} : tensor<64x64xf32>
  %k = xg.weight "k" {format = "q4_1"} : tensor<32x64xf32>
  %w = xg.concat %q, %k {axis = 0 : i64} : tensor<64x64xf32>, tensor<32x64xf32> -> tensor<96x64xf32>
  %y = xg.linear %h, %w : tensor<16x64xf32>, tensor<96x64xf32> -> tensor<16x96xf32>
  return %y : tensor<16x96xf32>
}

// -----

// An untied quantized table is packed for the lookup even though no linear
// reads it.
// CHECK-LABEL: func.func @untied_q8
// CHECK: xg.weight "embed" {format = "q8_0", pack_nr = 32 : i64} : tensor<512x64xf32>
func.func @untied_q8(%ids: tensor<16xi32>) -> tensor<16x64xf32> {
  %t = xg.weight "embed" {format = "q8_0"} : tensor<512x64xf32>
  %x = xg.embedding %t, %ids : tensor<512x64xf32>, tensor<16xi32> -> tensor<16x64xf32>
  return %x : tensor<16x64xf32>
}

// -----

func.func @quantized_elsewhere(%h: tensor<16x64xf32>) -> tensor<16x64xf32> {
  // expected-error @+1 {{a q8_0 weight can only be read by linear and embedding ops, not by xg.add}}
  %w = xg.weight "w" {format = "q8_0"} : tensor<16x64xf32>
  %z = xg.add %h, %w : tensor<16x64xf32>, tensor<16x64xf32> -> tensor<16x64xf32>
  return %z : tensor<16x64xf32>
}

// -----

// K-quants fold only with their own format: q4_k q+k fuse, a q6_k v stays
// apart; an untied q6_k table is packed for the lookup.
// CHECK-LABEL: func.func @kquants
// CHECK-DAG: xg.weight "q+k" {format = "q4_k", pack_nr = 32 : i64, sources = ["q", "k"]} : tensor<96x256xf32>
// CHECK-DAG: xg.weight "v" {format = "q6_k", pack_nr = 32 : i64} : tensor<32x256xf32>
// CHECK-DAG: xg.weight "embed" {format = "q6_k", pack_nr = 32 : i64} : tensor<512x256xf32>
func.func @kquants(%ids: tensor<16xi32>) -> (tensor<16x96xf32>, tensor<16x32xf32>) {
  %t = xg.weight "embed" {format = "q6_k"} : tensor<512x256xf32>
  %h = xg.embedding %t, %ids : tensor<512x256xf32>, tensor<16xi32> -> tensor<16x256xf32>
  %q = xg.weight "q" {format = "q4_k"} : tensor<64x256xf32>
  %k = xg.weight "k" {format = "q4_k"} : tensor<32x256xf32>
  %w = xg.concat %q, %k {axis = 0 : i64} : tensor<64x256xf32>, tensor<32x256xf32> -> tensor<96x256xf32>
  %y = xg.linear %h, %w : tensor<16x256xf32>, tensor<96x256xf32> -> tensor<16x96xf32>
  %v = xg.weight "v" {format = "q6_k"} : tensor<32x256xf32>
  %z = xg.linear %h, %v : tensor<16x256xf32>, tensor<32x256xf32> -> tensor<16x32xf32>
  return %y, %z : tensor<16x96xf32>, tensor<16x32xf32>
}
