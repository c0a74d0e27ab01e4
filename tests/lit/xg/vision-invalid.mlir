// RUN: xcc-opt %s -split-input-file -verify-diagnostics

func.func @patchify_not_divisible(%px: tensor<1x3072xf32>) {
  // expected-error @+2 {{image_size a multiple of patch_size}}
  // expected-error @+1 {{failed to infer returned types}}
  %p = xg.patchify %px {channels = 3 : i64, image_size = 32 : i64, patch_size = 7 : i64} : tensor<1x3072xf32> -> tensor<16x147xf32>
  return
}

// -----

func.func @patchify_columns(%px: tensor<1x3000xf32>) {
  // expected-error @+2 {{pixels columns is 3000, expected 3072}}
  // expected-error @+1 {{failed to infer returned types}}
  %p = xg.patchify %px {channels = 3 : i64, image_size = 32 : i64, patch_size = 8 : i64} : tensor<1x3000xf32> -> tensor<16x192xf32>
  return
}

// -----

func.func @vision_embed_rows(%e: tensor<20x32xf32>, %pos: tensor<17x32xf32>, %cls: tensor<32xf32>) {
  // 16 patches per image (17 positions minus the class row): 20 rows is no whole number of images.
  // expected-error @+2 {{rows (20) are not a multiple of patches per image (16)}}
  // expected-error @+1 {{failed to infer returned types}}
  %x = xg.vision_embed %e, %pos, %cls : tensor<20x32xf32>, tensor<17x32xf32>, tensor<32xf32> -> tensor<21x32xf32>
  return
}

// -----

func.func @vision_embed_class_size(%e: tensor<16x32xf32>, %pos: tensor<17x32xf32>, %cls: tensor<30xf32>) {
  // expected-error @+2 {{class_embedding size is 30, expected 32}}
  // expected-error @+1 {{failed to infer returned types}}
  %x = xg.vision_embed %e, %pos, %cls : tensor<16x32xf32>, tensor<17x32xf32>, tensor<30xf32> -> tensor<17x32xf32>
  return
}

// -----

func.func @layer_norm_bias(%x: tensor<4x32xf32>, %w: tensor<32xf32>, %b: tensor<16xf32>) {
  // expected-error @+2 {{bias size is 16, expected 32}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.layer_norm %x, %w, %b {eps = 1.0e-05 : f64} : tensor<4x32xf32>, tensor<32xf32>, tensor<16xf32> -> tensor<4x32xf32>
  return
}

// -----

func.func @layer_norm_eps(%x: tensor<4x32xf32>, %w: tensor<32xf32>) {
  // expected-error @+2 {{eps must be positive}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.layer_norm %x, %w, %w {eps = 0.0 : f64} : tensor<4x32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<4x32xf32>
  return
}

// -----

func.func @gelu_kind(%x: tensor<4x32xf32>) {
  // expected-error @+1 {{approximate must be "none", "tanh" or "quick", got "erf"}}
  %y = xg.gelu %x {approximate = "erf"} : tensor<4x32xf32> -> tensor<4x32xf32>
  return
}

// -----

func.func @attention_seq_len(%q: tensor<34x32xf32>) {
  // expected-error @+2 {{rows (34) are not a multiple of seq_len (16)}}
  // expected-error @+1 {{failed to infer returned types}}
  %o = xg.attention %q, %q, %q {seq_len = 16 : i64, num_heads = 2 : i64, head_dim = 16 : i64, scale = 0.25 : f32} : tensor<34x32xf32>, tensor<34x32xf32>, tensor<34x32xf32> -> tensor<34x32xf32>
  return
}

// -----

func.func @attention_heads(%q: tensor<34x32xf32>) {
  // expected-error @+2 {{q columns is 32, expected 48}}
  // expected-error @+1 {{failed to infer returned types}}
  %o = xg.attention %q, %q, %q {seq_len = 17 : i64, num_heads = 3 : i64, head_dim = 16 : i64, scale = 0.25 : f32} : tensor<34x32xf32>, tensor<34x32xf32>, tensor<34x32xf32> -> tensor<34x32xf32>
  return
}

// -----

func.func @skip_rows_range(%x: tensor<34x32xf32>) {
  // expected-error @+2 {{skip (17) must be in [0, group (17))}}
  // expected-error @+1 {{failed to infer returned types}}
  %y = xg.skip_rows %x {group = 17 : i64, skip = 17 : i64} : tensor<34x32xf32> -> tensor<0x32xf32>
  return
}

// -----

func.func @encoder_cache_dynamic() {
  // expected-error @+1 {{the encoder cache must be a static rank-2 tensor}}
  %c = xg.encoder_cache : tensor<?x64xf32>
  return
}

// -----

func.func @merge_rows_width(%emb: tensor<4x64xf32>, %src: tensor<4xi32>) {
  %c = xg.encoder_cache : tensor<8x32xf32>
  // expected-error @+2 {{cache columns is 32, expected 64}}
  // expected-error @+1 {{failed to infer returned types}}
  %x = xg.merge_rows %emb, %src, %c : tensor<4x64xf32>, tensor<4xi32>, tensor<8x32xf32> -> tensor<4x64xf32>
  return
}
