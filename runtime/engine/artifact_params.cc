#include "runtime/engine/artifact_params.h"

#include <algorithm>

#include "runtime/engine/stop_checker.h"
#include "runtime/loader/artifact.h"
#include "schemas/artifact_generated.h"

namespace xrt {

ServingLimits CompiledLimitsOf(const Artifact& artifact) {
  const xpk::ServingLimits& l = *artifact.manifest().limits();
  ServingLimits out;
  out.max_num_seqs = l.max_num_seqs();
  out.max_num_batched_tokens = l.max_num_batched_tokens();
  out.max_model_len = l.max_model_len();
  out.block_size = l.block_size();
  out.max_blocks_per_req = l.max_blocks_per_req();
  return out;
}

CompiledBuckets CompiledBucketsOf(const Artifact& artifact) {
  CompiledBuckets b;
  for (const xpk::Executable* e : *artifact.manifest().executables()) {
    if (e->lora_mode() != xpk::LoraMode::none) continue;
    if (e->kind() == xpk::ExecutableKind::lm_step) b.tokens.push_back(e->num_tokens());
    if (e->kind() == xpk::ExecutableKind::lm_logits) b.reqs.push_back(e->num_reqs());
  }
  std::sort(b.tokens.begin(), b.tokens.end());
  std::sort(b.reqs.begin(), b.reqs.end());
  return b;
}

KvCacheParams KvCacheParamsOf(const Artifact& artifact) {
  const xpk::Manifest& m = artifact.manifest();
  KvCacheParams kv;
  kv.num_layers = m.config()->num_hidden_layers();
  kv.num_kv_heads = m.config()->num_key_value_heads();
  kv.head_dim = m.config()->head_dim();
  kv.block_size = m.limits()->block_size();
  return kv;
}

SamplingDefaults SamplingDefaultsOf(const Artifact& artifact) {
  const xpk::ModelConfig& c = *artifact.manifest().config();
  SamplingDefaults d;
  // The compiler writes -1 for a field generation_config.json does not give.
  if (c.default_temperature() >= 0) d.temperature = static_cast<float>(c.default_temperature());
  if (c.default_top_p() > 0) d.top_p = static_cast<float>(c.default_top_p());
  if (c.default_top_k() > 0) d.top_k = static_cast<int32_t>(c.default_top_k());
  if (c.default_repetition_penalty() > 0)
    d.repetition_penalty = static_cast<float>(c.default_repetition_penalty());
  return d;
}

std::vector<int32_t> EosTokenIdsOf(const Artifact& artifact) {
  const xpk::Manifest& m = artifact.manifest();
  std::vector<int32_t> config;
  if (m.config()->eos_token_ids())
    config.assign(m.config()->eos_token_ids()->begin(), m.config()->eos_token_ids()->end());
  return ModelEosTokenIds(config, m.tokenizer() ? m.tokenizer()->eos_id() : -1);
}

Expected<EngineCoreParams> EngineCoreParamsFor(const Artifact& artifact) {
  EngineCoreParams p;
  p.compiled = CompiledLimitsOf(artifact);
  const CompiledBuckets b = CompiledBucketsOf(artifact);
  Expected<BucketTable> buckets = BucketTable::Create(b.tokens, b.reqs);
  if (!buckets.ok()) return buckets.status().WithContext(artifact.path());
  p.buckets = std::move(*buckets);
  p.num_kv_blocks = DefaultNumKvBlocks(KvCacheParamsOf(artifact), p.compiled.max_num_seqs,
                                       p.compiled.max_blocks_per_req);
  p.vocab_size = artifact.manifest().config()->vocab_size();
  p.eos_token_ids = EosTokenIdsOf(artifact);
  return p;
}

}  // namespace xrt
