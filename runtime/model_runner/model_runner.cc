#include "runtime/model_runner/model_runner.h"

#include <algorithm>
#include <cstring>

#include "schemas/artifact_generated.h"

namespace xrt {

Expected<std::unique_ptr<ModelRunner>> ModelRunner::Create(const ModelRunnerParams& params) {
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  XRT_ASSIGN_OR_RETURN(r->artifact_, Artifact::Open(params.artifact_path));
  const xpk::Manifest& m = r->artifact_->manifest();
  const xpk::ModelConfig& cfg = *m.config();
  const xpk::ServingLimits& lim = *m.limits();
  r->limits_ = {lim.max_num_seqs(), lim.max_num_batched_tokens(), lim.max_model_len(),
                lim.block_size(), lim.max_blocks_per_req()};
  r->vocab_size_ = cfg.vocab_size();
  r->hidden_size_ = cfg.hidden_size();
  if (cfg.eos_token_ids())
    r->eos_.assign(cfg.eos_token_ids()->begin(), cfg.eos_token_ids()->end());

  XRT_ASSIGN_OR_RETURN(TokenizerSpec spec, r->artifact_->tokenizer_spec());
  XRT_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Create(std::move(spec)));
  r->tokenizer_.emplace(std::move(tok));
  if (r->eos_.empty() && r->tokenizer_->eos_id() >= 0) r->eos_.push_back(r->tokenizer_->eos_id());
  if (cfg.chat_template() && cfg.chat_template()->size() > 0) {
    auto t = ChatTemplate::Parse(cfg.chat_template()->str());
    if (!t.ok()) return t.status().WithContext(params.artifact_path + ": chat template");
    r->chat_template_.emplace(std::move(*t));
  }

  // Buckets, from the executables the artifact holds.
  std::vector<int64_t> tokenBuckets, reqBuckets;
  for (const xpk::Executable* e : *m.executables()) {
    if (e->lora_mode() != xpk::LoraMode::none) continue;
    if (e->kind() == xpk::ExecutableKind::lm_step) {
      tokenBuckets.push_back(e->num_tokens());
      r->step_by_bucket_[e->num_tokens()] = e;
    } else if (e->kind() == xpk::ExecutableKind::lm_logits) {
      reqBuckets.push_back(e->num_reqs());
      r->logits_by_bucket_[e->num_reqs()] = e;
    }
  }
  std::sort(tokenBuckets.begin(), tokenBuckets.end());
  std::sort(reqBuckets.begin(), reqBuckets.end());
  auto buckets = BucketTable::Create(tokenBuckets, reqBuckets);
  if (!buckets.ok()) return buckets.status().WithContext(params.artifact_path);
  r->buckets_.emplace(std::move(*buckets));
  InputBuilderParams ib;
  ib.buckets = *r->buckets_;
  ib.max_num_reqs = lim.max_num_seqs();
  ib.max_blocks_per_req = lim.max_blocks_per_req();
  ib.block_size = lim.block_size();
  ib.vocab_size = cfg.vocab_size();
  XRT_ASSIGN_OR_RETURN(InputBuilder builder, InputBuilder::Create(std::move(ib)));
  r->input_builder_.emplace(std::move(builder));

  // KV cache.
  KvCacheParams kv;
  kv.num_layers = cfg.num_hidden_layers();
  kv.num_kv_heads = cfg.num_key_value_heads();
  kv.head_dim = cfg.head_dim();
  kv.block_size = lim.block_size();
  if (params.num_kv_blocks > 0) {
    kv.num_blocks = params.num_kv_blocks;
  } else if (params.kv_cache_bytes > 0) {
    XRT_ASSIGN_OR_RETURN(kv.num_blocks, KvCacheStorage::NumBlocksForBudget(kv, params.kv_cache_bytes));
  } else {
    kv.num_blocks = DefaultNumKvBlocks(kv, lim.max_num_seqs(), lim.max_blocks_per_req());
  }
  XRT_ASSIGN_OR_RETURN(KvCacheStorage storage, KvCacheStorage::Create(kv));
  r->kv_.emplace(std::move(storage));

  r->pool_ = std::make_unique<ThreadPool>(params.num_threads);
  ExecutorParams ep;
  ep.artifact = r->artifact_.get();
  ep.pool = r->pool_.get();
  for (int64_t l = 0; l < kv.num_layers; ++l) {
    ep.kv.keys.push_back(r->kv_->key(l));
    ep.kv.values.push_back(r->kv_->value(l));
  }
  ep.kv.num_blocks = kv.num_blocks;
  XRT_ASSIGN_OR_RETURN(r->executor_, Executor::Create(ep));
  return r;
}

Status ModelRunner::CopyInput(const xpk::Executable& e, const char* name,
                              const std::vector<int32_t>& v) {
  for (const xpk::TensorSpec* t : *e.inputs()) {
    if (t->name()->str() != name) continue;
    const uint64_t bytes = v.size() * sizeof(int32_t);
    if (t->dtype() != xpk::DType::i32 || bytes != t->size())
      return InvalidArgumentError("{}: input '{}' holds {} bytes, the step has {}",
                                  e.name()->str(), name, t->size(), bytes);
    std::memcpy(executor_->io(e) + t->offset(), v.data(), bytes);
    return Status::Ok();
  }
  return NotFoundError("{}: no input '{}'", e.name()->str(), name);
}

Expected<const float*> ModelRunner::Execute(const StepInputs& in) {
  auto step = step_by_bucket_.find(in.token_bucket);
  if (step == step_by_bucket_.end())
    return OutOfRangeError("no lm_step executable for {} tokens", in.token_bucket);
  const xpk::Executable& s = *step->second;
  XRT_RETURN_IF_ERROR(CopyInput(s, "token_ids", in.token_ids));
  XRT_RETURN_IF_ERROR(CopyInput(s, "positions", in.positions));
  XRT_RETURN_IF_ERROR(CopyInput(s, "slot_mapping", in.slot_mapping));
  XRT_RETURN_IF_ERROR(CopyInput(s, "block_tables", in.block_tables));
  XRT_RETURN_IF_ERROR(CopyInput(s, "seq_lens", in.seq_lens));
  XRT_RETURN_IF_ERROR(CopyInput(s, "query_start_loc", in.query_start_loc));
  XRT_RETURN_IF_ERROR(CopyInput(s, "embed_source", in.embed_source));
  XRT_RETURN_IF_ERROR(CopyInput(s, "lora_slot", in.lora_slot));
  XRT_RETURN_IF_ERROR(executor_->Run(s));
  if (in.num_logits == 0) return static_cast<const float*>(nullptr);

  auto lg = logits_by_bucket_.find(in.req_bucket);
  if (lg == logits_by_bucket_.end())
    return OutOfRangeError("no lm_logits executable for {} requests", in.req_bucket);
  const xpk::Executable& l = *lg->second;
  XRT_ASSIGN_OR_RETURN(uint8_t* hiddenOut, executor_->Tensor(s, "hidden_states"));
  XRT_ASSIGN_OR_RETURN(uint8_t* hiddenIn, executor_->Tensor(l, "hidden_states"));
  // Only the rows of this step's real tokens are read (logits_indices < num_tokens).
  std::memcpy(hiddenIn, hiddenOut, in.num_tokens * hidden_size_ * sizeof(float));
  XRT_RETURN_IF_ERROR(CopyInput(l, "logits_indices", in.logits_indices));
  XRT_RETURN_IF_ERROR(executor_->Run(l));
  XRT_ASSIGN_OR_RETURN(uint8_t* logits, executor_->Tensor(l, "logits"));
  return reinterpret_cast<const float*>(logits);
}

}  // namespace xrt
