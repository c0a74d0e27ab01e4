// RUN: xcc-opt %s -split-input-file -verify-diagnostics -xcc-xg-specialize-buckets="num-tokens=16,32 num-reqs=8" | FileCheck %s

// The generic entry is replaced by one static clone per bucket, with every
// result type re-derived.
// CHECK-NOT: func.func @step(
// CHECK-LABEL: func.func @step_16(
// CHECK-SAME: %{{.*}}: tensor<16xi32> {xg.symbolic_dims = ["num_tokens"]}, %{{.*}}: tensor<4xi32>
// CHECK-SAME: -> tensor<16x8xf32>
// CHECK-SAME: attributes {xg.bucket = 16 : i64, xg.bucket_param = "num_tokens", xg.entry}
// CHECK: xg.embedding {{.*}} -> tensor<16x8xf32>
// CHECK: xg.rms_norm {{.*}} -> tensor<16x8xf32>
// CHECK-LABEL: func.func @step_32(
// CHECK: xg.rms_norm {{.*}} -> tensor<32x8xf32>
// CHECK-LABEL: func.func @logits_8(
// CHECK-SAME: tensor<8xi32>
// CHECK: xg.gather_rows {{.*}} -> tensor<8x8xf32>
// CHECK-LABEL: func.func @helper(
// CHECK-SAME: tensor<?xi32>
func.func @step(%ids: tensor<?xi32> {xg.symbolic_dims = ["num_tokens"]}, %other: tensor<4xi32>)
    -> tensor<?x8xf32> attributes {xg.entry, xg.bucket_param = "num_tokens"} {
  %t = xg.weight "embed" : tensor<32x8xf32>
  %x = xg.embedding %t, %ids : tensor<32x8xf32>, tensor<?xi32> -> tensor<?x8xf32>
  %w = xg.weight "norm" : tensor<8xf32>
  %y = xg.rms_norm %x, %w {eps = 1.0e-5 : f64} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

func.func @logits(%h: tensor<64x8xf32>, %idx: tensor<?xi32> {xg.symbolic_dims = ["num_reqs"]})
    -> tensor<?x8xf32> attributes {xg.entry, xg.bucket_param = "num_reqs"} {
  %g = xg.gather_rows %h, %idx : tensor<64x8xf32>, tensor<?xi32> -> tensor<?x8xf32>
  return %g : tensor<?x8xf32>
}

// Functions without xg.entry are left alone.
func.func @helper(%ids: tensor<?xi32>) -> tensor<?xi32> {
  return %ids : tensor<?xi32>
}

// -----

// expected-error @+1 {{argument 0 dimension 0 is bound to 'num_reqs', which is not this entry's bucket parameter 'num_tokens'}}
func.func @wrong_param(%ids: tensor<?xi32> {xg.symbolic_dims = ["num_reqs"]}) -> tensor<?xi32>
    attributes {xg.entry, xg.bucket_param = "num_tokens"} {
  return %ids : tensor<?xi32>
}

// -----

// expected-error @+1 {{entry function has no 'xg.bucket_param' attribute}}
func.func @no_param(%ids: tensor<?xi32>) -> tensor<?xi32> attributes {xg.entry} {
  return %ids : tensor<?xi32>
}

// -----

// expected-error @+1 {{unknown bucket parameter 'num_frames'}}
func.func @unknown_param(%ids: tensor<?xi32>) -> tensor<?xi32>
    attributes {xg.entry, xg.bucket_param = "num_frames"} {
  return %ids : tensor<?xi32>
}

// -----

// A known parameter with no bucket list on the command line.
// expected-error @+1 {{no buckets given for parameter 'num_images'}}
func.func @vision_without_buckets(%px: tensor<?x12xf32>) -> tensor<?x12xf32>
    attributes {xg.entry, xg.bucket_param = "num_images"} {
  return %px : tensor<?x12xf32>
}
