// The model builder and graph pipeline on a real (tiny) model, seen through
// `xcc compile --dump-ir-after`.
// RUN: xcc compile %fixtures/models/qwen2_bias -o %t.xpk -q --max-num-seqs 4 --max-num-batched-tokens 32 \
// RUN:   --dump-ir-after=xcc-xg-specialize-buckets --dump-ir-after=xcc-xg-fuse --dump-ir-after=xcc-xg-plan-memory \
// RUN:   | FileCheck %s

// One clone per bucket, every dimension static.
// CHECK-LABEL: IR Dump After XGSpecializeBuckets (xcc-xg-specialize-buckets)
// CHECK: func.func @lm_step_16(%{{.*}}: tensor<16xi32>
// CHECK-SAME: -> (tensor<16x64xf32> {xg.name = "hidden_states"})
// CHECK-SAME: xg.bucket = 16
// CHECK: func.func @lm_step_32(
// CHECK: func.func @lm_logits_4(%{{.*}}: tensor<32x64xf32>{{.*}}, %{{.*}}: tensor<4xi32>
// CHECK-SAME: -> (tensor<4x512xf32> {xg.name = "logits"})

// q/k/v (with their biases) and gate/up are fused; residual adds become
// accumulators. (Module-scope dumps of a function pass: the last one shows
// every function fused.)
// CHECK-LABEL: IR Dump After XGFuse (xcc-xg-fuse) ('func.func' operation: @lm_logits_4)
// CHECK: func.func @lm_step_16(
// CHECK: xg.concat {{.*}} : tensor<64x64xf32>, tensor<16x64xf32>, tensor<16x64xf32> -> tensor<96x64xf32>
// CHECK: xg.linear %{{.*}}, %{{.*}} bias(%{{.*}}) : tensor<16x64xf32>, tensor<96x64xf32>, tensor<96xf32> -> tensor<16x96xf32>
// CHECK: xg.split %{{.*}} {sizes = array<i64: 64, 16, 16>}
// CHECK: xg.paged_attention
// CHECK: xg.linear {{.*}} accumulate(
// CHECK: xg.split %{{.*}} {sizes = array<i64: 144, 144>}
// CHECK: xg.silu_mul
// CHECK: xg.linear {{.*}} accumulate(
// CHECK-NOT: xg.add

// Every tensor has a planned range.
// CHECK-LABEL: IR Dump After XGPlanMemory (xcc-xg-plan-memory)
// CHECK: func.func @lm_step_16({{.*}}xg.io = #xg.buffer<io, offset =
// CHECK-SAME: xg.arena_size =
// CHECK: xg.embedding {{.*}}xg.buffers = [#xg.buffer<arena,
