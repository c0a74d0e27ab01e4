// RUN: xcc-opt %s -xcc-xg-plan-memory -xcc-xg-form-dispatches | FileCheck %s

// The vision ops: attention runs on the runtime's dense attention ukernel, the
// rest are generated dispatches with one workgroup per result row; the encoder
// cache is runtime state (no buffer, no dispatch of its own).
// CHECK-LABEL: func.func @vision_encode
// CHECK: xg.patchify {{.*}}xg.dispatch = @patchify_0, xg.workgroups = 32 : i64
// CHECK: xg.vision_embed {{.*}}xg.dispatch = @vision_embed_0, xg.workgroups = 34 : i64
// CHECK: xg.layer_norm {{.*}}xg.dispatch = @layer_norm_0
// CHECK: xg.attention {{.*}}xg.ukernel = "attention"
// CHECK: xg.gelu {{.*}}xg.dispatch = @gelu_0
// CHECK: xg.concat {{.*}}xg.dispatch = @concat_0
// CHECK: xg.skip_rows {{.*}}xg.dispatch = @skip_rows_0, xg.workgroups = 32 : i64

// CHECK-LABEL: func.func @step
// CHECK: xg.encoder_cache
// CHECK-NOT: xg.dispatch
// CHECK-SAME: tensor<8x32xf32>
// CHECK: xg.merge_rows {{.*}}xg.dispatch = @merge_rows_0, xg.workgroups = 4 : i64

// CHECK-LABEL: func.func @patchify_0(
// CHECK-SAME: memref<6144xf32>, %{{.*}}: memref<6144xf32>
// CHECK: scf.for
// CHECK: arith.divui
// CHECK: arith.remui

// CHECK-LABEL: func.func @vision_embed_0(
// CHECK: scf.if

// CHECK-LABEL: func.func @layer_norm_0(
// CHECK: scf.for {{.*}} iter_args
// CHECK: scf.for {{.*}} iter_args
// CHECK: math.sqrt

// CHECK-LABEL: func.func @gelu_0(
// CHECK: math.erf

// CHECK-LABEL: func.func @merge_rows_0(
// CHECK: memref.load
// CHECK: scf.if
func.func @vision_encode(%px: tensor<2x3072xf32>) -> tensor<32x64xf32> attributes {xg.entry} {
  %p = xg.patchify %px {channels = 3 : i64, image_size = 32 : i64, patch_size = 8 : i64} : tensor<2x3072xf32> -> tensor<32x192xf32>
  %wp = xg.weight "patch" {pack_nr = 16 : i64} : tensor<32x192xf32>
  %e = xg.linear %p, %wp : tensor<32x192xf32>, tensor<32x192xf32> -> tensor<32x32xf32>
  %pos = xg.weight "pos" : tensor<17x32xf32>
  %cls = xg.weight "cls" : tensor<32xf32>
  %x = xg.vision_embed %e, %pos, %cls : tensor<32x32xf32>, tensor<17x32xf32>, tensor<32xf32> -> tensor<34x32xf32>
  %lw = xg.weight "ln.w" : tensor<32xf32>
  %lb = xg.weight "ln.b" : tensor<32xf32>
  %h = xg.layer_norm %x, %lw, %lb {eps = 1.0e-05 : f64} : tensor<34x32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<34x32xf32>
  %o = xg.attention %h, %h, %h {seq_len = 17 : i64, num_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f32} : tensor<34x32xf32>, tensor<34x32xf32>, tensor<34x32xf32> -> tensor<34x32xf32>
  %g = xg.gelu %o {approximate = "none"} : tensor<34x32xf32> -> tensor<34x32xf32>
  %c = xg.concat %x, %g {axis = 1 : i64} : tensor<34x32xf32>, tensor<34x32xf32> -> tensor<34x64xf32>
  %f = xg.skip_rows %c {group = 17 : i64, skip = 1 : i64} : tensor<34x64xf32> -> tensor<32x64xf32>
  return %f : tensor<32x64xf32>
}

func.func @step(%emb: tensor<4x32xf32>, %src: tensor<4xi32>) -> tensor<4x32xf32> attributes {xg.entry} {
  %cache = xg.encoder_cache : tensor<8x32xf32>
  %x = xg.merge_rows %emb, %src, %cache : tensor<4x32xf32>, tensor<4xi32>, tensor<8x32xf32> -> tensor<4x32xf32>
  return %x : tensor<4x32xf32>
}
