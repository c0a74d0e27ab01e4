// ModelRunner: one loaded artifact ready to run steps.
//
// Owns the mapped artifact, the thread pool, the KV cache memory, the executor
// and the tokenizer; turns a StepInputs (built by InputBuilder) into logits by
// running the lm_step executable of the step's token bucket and, when any
// request needs logits, the lm_logits executable of its request bucket. The
// serving engine and `xrt generate` sit on top of it; it never compiles.
//
// Thread-compatible: one Execute at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/chat/chat_template.h"
#include "runtime/engine/bucket_table.h"
#include "runtime/engine/input_builder.h"
#include "runtime/engine/kv_cache_storage.h"
#include "runtime/executor/executor.h"
#include "runtime/kernels/thread_pool.h"
#include "runtime/loader/artifact.h"
#include "runtime/tokenizer/tokenizer.h"

namespace xrt {

struct ModelRunnerParams {
  std::string artifact_path;
  int num_threads = 0;  // <= 0: all cores
  // KV cache size: an explicit block count, or a byte budget (0 for both: enough
  // blocks for max_num_seqs sequences of max_model_len tokens, capped at 4 GiB).
  int64_t num_kv_blocks = 0;
  int64_t kv_cache_bytes = 0;
};

// The serving limits the artifact was compiled for.
struct ServingLimits {
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t max_model_len = 0;
  int64_t block_size = 0;
  int64_t max_blocks_per_req = 0;
};

class ModelRunner {
 public:
  static Expected<std::unique_ptr<ModelRunner>> Create(const ModelRunnerParams& params);

  // Runs one step. Returns logits [in.num_logits][vocab_size], valid until the
  // next Execute (nullptr when num_logits == 0).
  Expected<const float*> Execute(const StepInputs& in);

  const Artifact& artifact() const { return *artifact_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // The model's chat template, or nullptr if it has none.
  const ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }
  const BucketTable& buckets() const { return *buckets_; }
  const ServingLimits& limits() const { return limits_; }
  const InputBuilder& input_builder() const { return *input_builder_; }
  int64_t vocab_size() const { return vocab_size_; }
  int64_t num_kv_blocks() const { return kv_->params().num_blocks; }
  const std::vector<int32_t>& eos_token_ids() const { return eos_; }
  ThreadPool& pool() { return *pool_; }

 private:
  ModelRunner() = default;
  Status CopyInput(const xpk::Executable& e, const char* name, const std::vector<int32_t>& v);

  std::unique_ptr<Artifact> artifact_;
  std::unique_ptr<ThreadPool> pool_;
  std::optional<KvCacheStorage> kv_;
  std::unique_ptr<Executor> executor_;
  std::optional<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  std::optional<BucketTable> buckets_;
  std::optional<InputBuilder> input_builder_;
  ServingLimits limits_;
  int64_t vocab_size_ = 0, hidden_size_ = 0;
  std::vector<int32_t> eos_;
  std::map<int64_t, const xpk::Executable*> step_by_bucket_, logits_by_bucket_;
};

}  // namespace xrt
