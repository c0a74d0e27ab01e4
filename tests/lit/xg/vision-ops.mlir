// RUN: xcc-opt %s | xcc-opt | FileCheck %s
// Round trip of the vision encoder and encoder-cache merge ops, static and dynamic.

// CHECK-LABEL: func.func @clip_layer
func.func @clip_layer(%px: tensor<?x3072xf32>) -> tensor<?x64xf32> {
  // CHECK: xg.patchify %{{.*}} {channels = 3 : i64, image_size = 32 : i64, patch_size = 8 : i64} : tensor<?x3072xf32> -> tensor<?x192xf32>
  %p = xg.patchify %px {channels = 3 : i64, image_size = 32 : i64, patch_size = 8 : i64} : tensor<?x3072xf32> -> tensor<?x192xf32>
  %wp = xg.weight "patch" : tensor<32x192xf32>
  %e = xg.linear %p, %wp : tensor<?x192xf32>, tensor<32x192xf32> -> tensor<?x32xf32>
  %pos = xg.weight "pos" : tensor<17x32xf32>
  %cls = xg.weight "cls" : tensor<32xf32>
  // CHECK: xg.vision_embed %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x32xf32>, tensor<17x32xf32>, tensor<32xf32> -> tensor<?x32xf32>
  %x = xg.vision_embed %e, %pos, %cls : tensor<?x32xf32>, tensor<17x32xf32>, tensor<32xf32> -> tensor<?x32xf32>
  %lw = xg.weight "ln.w" : tensor<32xf32>
  %lb = xg.weight "ln.b" : tensor<32xf32>
  // CHECK: xg.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {eps = 1.000000e-05 : f64} : tensor<?x32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<?x32xf32>
  %h = xg.layer_norm %x, %lw, %lb {eps = 1.0e-05 : f64} : tensor<?x32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<?x32xf32>
  // CHECK: xg.attention %{{.*}}, %{{.*}}, %{{.*}} {head_dim = 16 : i64, num_heads = 2 : i64, scale = 2.500000e-01 : f32, seq_len = 17 : i64} : tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32> -> tensor<?x32xf32>
  %o = xg.attention %h, %h, %h {seq_len = 17 : i64, num_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f32} : tensor<?x32xf32>, tensor<?x32xf32>, tensor<?x32xf32> -> tensor<?x32xf32>
  // CHECK: xg.gelu %{{.*}} {approximate = "quick"} : tensor<?x32xf32> -> tensor<?x32xf32>
  %g = xg.gelu %o {approximate = "quick"} : tensor<?x32xf32> -> tensor<?x32xf32>
  // CHECK: xg.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : tensor<?x32xf32>, tensor<?x32xf32> -> tensor<?x64xf32>
  %c = xg.concat %x, %g {axis = 1 : i64} : tensor<?x32xf32>, tensor<?x32xf32> -> tensor<?x64xf32>
  // CHECK: xg.skip_rows %{{.*}} {group = 17 : i64, skip = 1 : i64} : tensor<?x64xf32> -> tensor<?x64xf32>
  %f = xg.skip_rows %c {group = 17 : i64, skip = 1 : i64} : tensor<?x64xf32> -> tensor<?x64xf32>
  return %f : tensor<?x64xf32>
}

// CHECK-LABEL: func.func @static_shapes
func.func @static_shapes(%px: tensor<2x3072xf32>, %pos: tensor<16x32xf32>) -> tensor<32x32xf32> {
  // Two images of 4x4 patches.
  // CHECK: tensor<2x3072xf32> -> tensor<32x192xf32>
  %p = xg.patchify %px {channels = 3 : i64, image_size = 32 : i64, patch_size = 8 : i64} : tensor<2x3072xf32> -> tensor<32x192xf32>
  %wp = xg.weight "patch" : tensor<32x192xf32>
  %e = xg.linear %p, %wp : tensor<32x192xf32>, tensor<32x192xf32> -> tensor<32x32xf32>
  // SigLIP: no class embedding, 16 positions per image.
  // CHECK: xg.vision_embed %{{.*}}, %{{.*}} : tensor<32x32xf32>, tensor<16x32xf32> -> tensor<32x32xf32>
  %x = xg.vision_embed %e, %pos : tensor<32x32xf32>, tensor<16x32xf32> -> tensor<32x32xf32>
  // CHECK: xg.skip_rows %{{.*}} {group = 16 : i64, skip = 0 : i64} : tensor<32x32xf32> -> tensor<32x32xf32>
  %f = xg.skip_rows %x {group = 16 : i64, skip = 0 : i64} : tensor<32x32xf32> -> tensor<32x32xf32>
  return %f : tensor<32x32xf32>
}

// CHECK-LABEL: func.func @merge
func.func @merge(%emb: tensor<?x64xf32>, %src: tensor<?xi32>) -> tensor<?x64xf32> {
  // CHECK: xg.encoder_cache : tensor<48x64xf32>
  %cache = xg.encoder_cache : tensor<48x64xf32>
  // CHECK: xg.merge_rows %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x64xf32>, tensor<?xi32>, tensor<48x64xf32> -> tensor<?x64xf32>
  %x = xg.merge_rows %emb, %src, %cache : tensor<?x64xf32>, tensor<?xi32>, tensor<48x64xf32> -> tensor<?x64xf32>
  return %x : tensor<?x64xf32>
}
