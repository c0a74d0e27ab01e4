// Test helpers of the engine: a StepExecutor without kernels whose logits
// make greedy sampling pick one fixed token (and which can fail a chosen
// step), a small model's EngineCoreParams, and the fixture tokenizers.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/engine/engine_core.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/tokenizer/tokenizer_import.h"

namespace xrt::testing {

// The tokenizer of tests/fixtures/tokenizer/<style>, loaded once per process;
// nullptr (and a test failure) if it does not load.
inline const Tokenizer* FixtureTokenizer(const std::string& style) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  std::unique_ptr<Tokenizer>& tok = loaded[style];
  if (tok) return tok.get();
  const std::string dir = std::string(XCC_SOURCE_DIR) + "/tests/fixtures/tokenizer/" + style + "/";
  Expected<TokenizerSpec> spec =
      LoadTokenizerJson(dir + "tokenizer.json", dir + "tokenizer_config.json");
  Expected<Tokenizer> made = spec.ok() ? Tokenizer::Create(std::move(*spec)) : spec.status();
  if (!made.ok()) {
    ADD_FAILURE() << made.status().ToString();
    return nullptr;
  }
  tok = std::make_unique<Tokenizer>(std::move(*made));
  return tok.get();
}

class FakeExecutor : public StepExecutor {
 public:
  FakeExecutor(int64_t vocab_size, int32_t argmax) : vocab_(vocab_size), argmax_(argmax) {}

  Expected<const float*> Execute(const StepInputs& in) override {
    ++calls_;
    token_buckets_.push_back(in.token_bucket);
    if (calls_ == fail_call_) return InternalError("injected failure of step {}", calls_);
    if (in.num_logits == 0) return static_cast<const float*>(nullptr);
    logits_.assign(static_cast<size_t>(in.num_logits * vocab_), 0.0f);
    for (int64_t r = 0; r < in.num_logits; ++r) logits_[r * vocab_ + argmax_] = 10.0f;
    return static_cast<const float*>(logits_.data());
  }

  // The `call`-th Execute (1-based) fails.
  void FailCall(int call) { fail_call_ = call; }
  int calls() const { return calls_; }
  const std::vector<int64_t>& token_buckets() const { return token_buckets_; }

 private:
  int64_t vocab_;
  int32_t argmax_;
  int calls_ = 0;
  int fail_call_ = -1;
  std::vector<int64_t> token_buckets_;
  std::vector<float> logits_;
};

// A small model: 4 request rows, a 32-token budget with buckets 8, 16, 32,
// max_model_len 64 in blocks of 4, 64 KV blocks, vocabulary 32, EOS id 2.
inline EngineCoreParams SmallCoreParams(StepExecutor* executor) {
  EngineCoreParams p;
  p.executor = executor;
  p.compiled.max_num_seqs = 4;
  p.compiled.max_num_batched_tokens = 32;
  p.compiled.max_model_len = 64;
  p.compiled.block_size = 4;
  p.compiled.max_blocks_per_req = 16;
  p.buckets = BucketTable::Create({8, 16, 32}, {1, 2, 4}).value();
  p.num_kv_blocks = 64;
  p.vocab_size = 32;
  p.eos_token_ids = {2};
  return p;
}

inline EngineRequest SmallRequest(const std::string& id, int64_t prompt_len, int64_t max_tokens) {
  EngineRequest r;
  r.request_id = id;
  for (int64_t i = 0; i < prompt_len; ++i)
    r.prompt.push_back(static_cast<int32_t>(3 + (i * 7) % 29));
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  return r;
}

}  // namespace xrt::testing
