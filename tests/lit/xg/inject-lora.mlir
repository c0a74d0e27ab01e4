// RUN: xcc-opt %s -split-input-file -verify-diagnostics -xcc-xg-inject-lora="num-slots=2 rank=8 target-modules=q_proj,v_proj,o_proj" | FileCheck %s
// RUN: xcc-opt %s -split-input-file -verify-diagnostics -xcc-xg-inject-lora="num-slots=2 rank=8 target-modules=q_proj,v_proj,o_proj" -xcc-xg-plan-memory="alignment=64" | FileCheck %s --check-prefix=PLAN
// RUN: xcc-opt %s -split-input-file -verify-diagnostics -xcc-xg-inject-lora="num-slots=2 rank=8 target-modules=q_proj,v_proj,o_proj" -xcc-xg-plan-memory="alignment=64" -xcc-xg-form-dispatches | FileCheck %s --check-prefix=FORM

// Every bucketed lm_step gets a single- and a mixed-adapter clone; the original
// stays the no-LoRA executable. Targets inside a fused q/k/v linear are updated
// per slice of its split (k_proj is not a target here); o_proj's residual
// linear is updated after its accumulate epilogue.
// CHECK-LABEL: func.func @lm_step_4_single
// CHECK-SAME: xg.lora_mode = "single"
// CHECK: %[[QKV:.*]] = xg.linear %[[X:arg2]], %{{.*}} : tensor<4x64xf32>, tensor<128x64xf32> -> tensor<4x128xf32>
// CHECK: %[[S:.*]]:3 = xg.split %[[QKV]]
// CHECK: %[[QA:.*]] = xg.lora_slots {matrix = "a", target = "model.layers.0.self_attn.q_proj"} : tensor<2x8x64xf32>
// CHECK: %[[QB:.*]] = xg.lora_slots {matrix = "b", target = "model.layers.0.self_attn.q_proj"} : tensor<2x8x64xf32>
// CHECK: %[[QS:.*]] = xg.lora_shrink %[[X]], %[[QA]], %[[SLOT:arg1]] : tensor<4x64xf32>, tensor<2x8x64xf32>, tensor<4xi32> -> tensor<4x8xf32>
// CHECK: %[[Q:.*]] = xg.lora_expand %[[S]]#0, %[[QS]], %[[QB]], %[[SLOT]] :
// CHECK: xg.lora_slots {matrix = "b", target = "model.layers.0.self_attn.v_proj"} : tensor<2x8x32xf32>
// CHECK: %[[V:.*]] = xg.lora_expand %[[S]]#2,
// CHECK: xg.add %[[S]]#1, %[[V]]
// CHECK: %[[O:.*]] = xg.linear %[[Q]], %{{.*}} accumulate(%[[X]])
// CHECK: xg.lora_shrink %[[Q]],
// CHECK: %[[OUT:.*]] = xg.lora_expand %[[O]],
// CHECK: return %[[OUT]]
// CHECK-LABEL: func.func @lm_step_4_mixed
// CHECK-SAME: xg.lora_mode = "mixed"
// CHECK-COUNT-3: xg.lora_shrink {{.*}} {mixed}
// CHECK-LABEL: func.func @lm_step_4(
// CHECK-NOT: xg.lora
// CHECK: return

// In place: each expand writes over the slice it updates; the last one, which
// is the result, lives in the result's io range, and so does the o_proj linear
// it updates.
// PLAN-LABEL: func.func @lm_step_4_mixed
// PLAN: xg.linear {{.*}}xg.buffers = [#xg.buffer<arena, offset = 0, size = 2048, row_stride = 128>]
// PLAN: xg.lora_shrink {{.*}}xg.buffers = [#xg.buffer<arena, offset = 2048, size = 128, row_stride = 8>]
// PLAN: xg.lora_expand {{.*}}xg.buffers = [#xg.buffer<arena, offset = 0, size = 2048, row_stride = 128>]
// PLAN: xg.lora_expand {{.*}}xg.buffers = [#xg.buffer<arena, offset = 0, size = 2048, row_stride = 128, col_offset = 96>]
// PLAN: xg.linear {{.*}}xg.buffers = [#xg.buffer<io, offset = 0, size = 1024, row_stride = 64>]
// PLAN: xg.lora_expand {{.*}}xg.buffers = [#xg.buffer<io, offset = 0, size = 1024, row_stride = 64>]
// Shrink and expand run on runtime microkernels; the slots are runtime state.
// FORM-LABEL: func.func @lm_step_4_single
// FORM: xg.lora_slots {matrix = "a"
// FORM-NOT: xg.dispatch
// FORM-SAME: : tensor<2x8x64xf32>
// FORM: xg.lora_shrink {{.*}}xg.ukernel = "lora_shrink"
// FORM: xg.lora_expand {{.*}}xg.ukernel = "lora_expand"
func.func @lm_step_4(%ids: tensor<4xi32> {xg.name = "token_ids"}, %slot: tensor<4xi32> {xg.name = "lora_slot"}, %x: tensor<4x64xf32> {xg.name = "x"}) -> tensor<4x64xf32> attributes {xg.entry, xg.bucket = 4 : i64, xg.bucket_param = "num_tokens"} {
  %w = xg.weight "qkv" {sources = ["model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight", "model.layers.0.self_attn.v_proj.weight"], pack_nr = 32 : i64} : tensor<128x64xf32>
  %qkv = xg.linear %x, %w : tensor<4x64xf32>, tensor<128x64xf32> -> tensor<4x128xf32>
  %q, %k, %v = xg.split %qkv {sizes = array<i64: 64, 32, 32>} : tensor<4x128xf32> -> tensor<4x64xf32>, tensor<4x32xf32>, tensor<4x32xf32>
  %kv = xg.add %k, %v : tensor<4x32xf32>, tensor<4x32xf32> -> tensor<4x32xf32>
  %o = xg.weight "model.layers.0.self_attn.o_proj.weight" {pack_nr = 32 : i64} : tensor<64x64xf32>
  %y = xg.linear %q, %o accumulate(%x) : tensor<4x64xf32>, tensor<64x64xf32>, tensor<4x64xf32> -> tensor<4x64xf32>
  return %y : tensor<4x64xf32>
}

// -----

// expected-error @+1 {{LoRA target module 'q_proj' matches no linear of lm_step_4_single}}
func.func @lm_step_4(%slot: tensor<4xi32> {xg.name = "lora_slot"}, %x: tensor<4x64xf32> {xg.name = "x"}) -> tensor<4x64xf32> attributes {xg.entry, xg.bucket = 4 : i64, xg.bucket_param = "num_tokens"} {
  %o = xg.weight "model.layers.0.self_attn.o_proj.weight" {pack_nr = 32 : i64} : tensor<64x64xf32>
  %y = xg.linear %x, %o : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  return %y : tensor<4x64xf32>
}

// -----

// expected-error @+1 {{lm_step has no 'lora_slot' argument}}
func.func @lm_step_4(%x: tensor<4x64xf32> {xg.name = "x"}) -> tensor<4x64xf32> attributes {xg.entry, xg.bucket = 4 : i64, xg.bucket_param = "num_tokens"} {
  %o = xg.weight "model.layers.0.self_attn.o_proj.weight" {pack_nr = 32 : i64} : tensor<64x64xf32>
  %y = xg.linear %x, %o : tensor<4x64xf32>, tensor<64x64xf32> -> tensor<4x64xf32>
  return %y : tensor<4x64xf32>
}
