#include "compiler/serving_model.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/engine/kv_cache_storage.h"
#include "runtime/loader/artifact.h"
#include "runtime/tokenizer/tokenizer.h"
#include "schemas/artifact_generated.h"

namespace xcc {

xrt::Expected<ServingConfig> LoadServingConfig(const xrt::Artifact& artifact,
                                               const std::string& path) {
  const xpk::ServingLimits& lim = *artifact.manifest().limits();
  ServingConfig c{lim.max_num_seqs(), lim.max_num_batched_tokens(), lim.max_model_len()};
  if (path.empty()) return c;
  std::ifstream in(path);
  if (!in) return xrt::NotFoundError("{}: cannot open", path);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return xrt::InvalidArgumentError("{}: not a JSON object", path);
  for (auto& [key, value] : j.items()) {
    std::string k = key;
    std::replace(k.begin(), k.end(), '-', '_');
    int64_t* field = k == "max_num_seqs"             ? &c.max_num_seqs
                     : k == "max_num_batched_tokens" ? &c.max_num_batched_tokens
                     : k == "max_model_len"          ? &c.max_model_len
                                                     : nullptr;
    if (!field)
      return xrt::InvalidArgumentError(
          "{}: unknown key '{}' (known: max-num-seqs, max-num-batched-tokens, max-model-len)",
          path, key);
    if (!value.is_number_integer() || value.get<int64_t>() < 1)
      return xrt::InvalidArgumentError("{}: '{}' must be a positive integer", path, key);
    *field = value.get<int64_t>();
  }
  return c;
}

CompiledBuckets BucketsOf(const xrt::Artifact& artifact) {
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

xrt::ReplayParams ReplayParamsFor(const xrt::Artifact& artifact, const ServingConfig& serving,
                                  xrt::BucketTable buckets) {
  const xpk::Manifest& m = artifact.manifest();
  const xpk::ServingLimits& lim = *m.limits();
  xrt::ReplayParams p;
  p.buckets = std::move(buckets);
  p.max_num_seqs = std::min<int64_t>(serving.max_num_seqs, lim.max_num_seqs());
  p.max_num_batched_tokens = serving.max_num_batched_tokens;
  p.max_model_len = std::min<int64_t>(serving.max_model_len, lim.max_model_len());
  p.compiled_max_num_reqs = lim.max_num_seqs();
  xrt::KvCacheParams kv;
  kv.num_layers = m.config()->num_hidden_layers();
  kv.num_kv_heads = m.config()->num_key_value_heads();
  kv.head_dim = m.config()->head_dim();
  kv.block_size = lim.block_size();
  p.kv.num_blocks = xrt::DefaultNumKvBlocks(kv, lim.max_num_seqs(), lim.max_blocks_per_req());
  p.kv.block_size = lim.block_size();
  p.kv.max_blocks_per_req = lim.max_blocks_per_req();
  p.kv.enable_prefix_caching = true;
  return p;
}

xrt::Expected<std::vector<xrt::TraceRequest>> ReadTraceFor(const xrt::Artifact& artifact,
                                                           const std::string& path) {
  XRT_ASSIGN_OR_RETURN(xrt::TokenizerSpec spec, artifact.tokenizer_spec());
  XRT_ASSIGN_OR_RETURN(xrt::Tokenizer tok, xrt::Tokenizer::Create(std::move(spec)));
  return xrt::ReadTrace(
      path, [&](const std::string& text) { return tok.Encode(text, true); },
      static_cast<int32_t>(artifact.manifest().config()->vocab_size()));
}

}  // namespace xcc
