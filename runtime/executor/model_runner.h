// ModelRunner: one loaded artifact ready to run steps.
//
// Owns the mapped artifact, the thread pool, the KV cache memory, the executor
// and the tokenizer; turns a StepInputs (built by InputBuilder) into logits by
// running the lm_step executable of the step's token bucket and, when any
// request needs logits, the lm_logits executable of its request bucket. It is
// the StepExecutor of the engine core (runtime/engine/engine_core.h), which
// the serving engine and `xrt generate` drive; it never compiles.
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
#include "runtime/base/thread_pool.h"
#include "runtime/chat/chat_template.h"
#include "runtime/engine/bucket_table.h"
#include "runtime/engine/engine_core.h"
#include "runtime/engine/input_builder.h"
#include "runtime/engine/serving_limits.h"
#include "runtime/executor/executor.h"
#include "runtime/kv_cache/kv_cache_storage.h"
#include "runtime/loader/artifact.h"
#include "runtime/lora/lora_manager.h"
#include "runtime/sampler/sampling_params.h"
#include "runtime/tokenizer/tokenizer.h"

namespace xrt {

struct ModelRunnerParams {
  std::string artifact_path;
  int num_threads = 0;  // <= 0: all cores
  // KV cache size: an explicit block count, or a byte budget (0 for both: enough
  // blocks for max_num_seqs sequences of max_model_len tokens, capped at 4 GiB).
  int64_t num_kv_blocks = 0;
  int64_t kv_cache_bytes = 0;
  // The cache's element type (runtime/kernels/attention.h): f16 halves its
  // memory (twice the blocks for a byte budget) and decode attention's reads.
  // std::nullopt ("auto"): f16 for an artifact whose matmuls compute in bf16
  // or int8, f32 otherwise (AutoKvCacheElementBytes).
  std::optional<KvCacheDtype> kv_cache_dtype;
  // How the artifact is brought into memory (runtime/loader/artifact.h): read
  // into a private copy on transparent huge pages (xrt's default), or mapped in
  // place (xrt's --mmap: a faster start and page-cache pages shared between
  // processes, slower decode from DRAM).
  ArtifactLoad load = ArtifactLoad::kRead;
};

// xrt's --kv-cache-dtype: "auto" -> std::nullopt, "f32" -> kF32, "f16" -> kF16;
// else InvalidArgument naming the value and the choices.
Expected<std::optional<KvCacheDtype>> ParseKvCacheDtype(const std::string& name);

class ModelRunner : public StepExecutor {
 public:
  static Expected<std::unique_ptr<ModelRunner>> Create(const ModelRunnerParams& params);

  // Runs one step. Returns logits [in.num_logits][vocab_size], valid until the
  // next Execute (nullptr when num_logits == 0).
  Expected<const float*> Execute(const StepInputs& in) override;

  // Vision (a LLaVA-style artifact): runs vision_encode over the images
  // (pixels[i]: [C * S * S] f32 as the image preprocessing produces them), padded
  // to the smallest compiled num_images bucket that holds them, and copies image
  // i's tokens_per_image feature rows into the encoder cache from row
  // cache_rows[i] on. Execute calls it for a step's StepInputs images.
  // FailedPrecondition for a model without vision; InvalidArgument for a null or
  // wrongly sized image; OutOfRange when no bucket holds them or a destination is
  // outside the cache.
  Status EncodeImages(const std::vector<const float*>& pixels,
                      const std::vector<int64_t>& cache_rows);
  // The encoder cache, [encoder_cache_rows][hidden_size] (empty without vision).
  const std::vector<float>& encoder_cache() const { return encoder_cache_; }
  // The compiled vision_encode buckets, ascending (empty without vision).
  std::vector<int64_t> image_buckets() const;

  // Parameters of an EngineCore running this model (one core per runner: the
  // runner's KV cache and encoder cache memory are that core's): the artifact's
  // (EngineCoreParamsFor) with this runner as executor, its tokenizer and its
  // KV pool. The caller sets the requested limits and switches.
  EngineCoreParams engine_core_params();
  // The model's generation_config sampling defaults.
  const SamplingDefaults& sampling_defaults() const { return sampling_defaults_; }

  const Artifact& artifact() const { return *artifact_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // The model's chat template, or nullptr if it has none.
  const ChatTemplate* chat_template() const { return chat_template_ ? &*chat_template_ : nullptr; }
  const BucketTable& buckets() const { return core_params_.buckets; }
  // The serving limits the artifact was compiled for.
  const ServingLimits& limits() const { return core_params_.compiled; }
  const InputBuilder& input_builder() const { return *input_builder_; }
  int64_t vocab_size() const { return core_params_.vocab_size; }
  int64_t num_kv_blocks() const { return kv_->params().num_blocks; }
  // The KV cache's element type (the one asked for, or what "auto" chose).
  KvCacheDtype kv_cache_dtype() const { return kv_cache_dtype_; }
  // An artifact compiled with LoRA: the adapters known (those packed into the
  // artifact are registered at creation; thread-safe, so servers load and unload
  // while steps run) and the slots the executables read (engine thread only).
  // nullptr without LoRA.
  LoraRegistry* lora_registry() { return lora_registry_.get(); }
  LoraManager* lora_manager() { return lora_manager_.get(); }
  // Every EOS id of the model (generation_config's and the tokenizer's).
  const std::vector<int32_t>& eos_token_ids() const { return core_params_.eos_token_ids; }
  ThreadPool& pool() { return *pool_; }
  // For profiling (Executor::set_profile); the steps run through Execute.
  Executor& executor() { return *executor_; }

 private:
  ModelRunner() = default;
  Status CopyInput(const xpk::Executable& e, const char* name, const std::vector<int32_t>& v);

  std::unique_ptr<Artifact> artifact_;
  std::unique_ptr<ThreadPool> pool_;
  std::optional<KvCacheStorage> kv_;
  std::unique_ptr<Executor> executor_;
  std::optional<Tokenizer> tokenizer_;
  std::optional<ChatTemplate> chat_template_;
  std::optional<InputBuilder> input_builder_;
  EngineCoreParams core_params_;  // the artifact's; executor etc. set by engine_core_params()
  SamplingDefaults sampling_defaults_;
  KvCacheDtype kv_cache_dtype_ = KvCacheDtype::kF32;
  int64_t hidden_size_ = 0;
  std::map<int64_t, const xpk::Executable*> logits_by_bucket_, vision_by_bucket_;
  // lm_step by (LoRA mode, bucket).
  std::map<std::pair<xpk::LoraMode, int64_t>, const xpk::Executable*> step_by_bucket_;
  std::unique_ptr<LoraRegistry> lora_registry_;
  std::unique_ptr<LoraManager> lora_manager_;
  std::vector<float> encoder_cache_;
  int64_t tokens_per_image_ = 0;
  int64_t pixel_floats_ = 0;  // one image's vision_encode input
};

}  // namespace xrt
