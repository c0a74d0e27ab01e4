// RUN: xcc-opt %s -verify-diagnostics -xcc-xg-inject-lora="num-slots=2 rank=8 target-modules=lm_head"
// RUN: not xcc-opt %s -xcc-xg-inject-lora="num-slots=0 rank=8 target-modules=q_proj" 2>&1 | FileCheck %s --check-prefix=SLOTS

// SLOTS: inject-lora needs num-slots and rank >= 1, got 0 and 8
// expected-error @+1 {{unknown LoRA target module 'lm_head'}}
module {
  func.func @lm_step_4(%x: tensor<4x64xf32> {xg.name = "x"}) -> tensor<4x64xf32> attributes {xg.entry, xg.bucket = 4 : i64, xg.bucket_param = "num_tokens"} {
    return %x : tensor<4x64xf32>
  }
}
