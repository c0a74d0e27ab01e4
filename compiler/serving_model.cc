#include "compiler/serving_model.h"

#include <algorithm>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "runtime/engine/artifact_params.h"
#include "runtime/loader/artifact.h"
#include "runtime/tokenizer/tokenizer.h"
#include "schemas/abi.h"
#include "schemas/artifact_generated.h"

namespace xcc {

xrt::Expected<ServingConfig> LoadServingConfig(const xrt::Artifact& artifact,
                                               const std::string& path) {
  ServingConfig config;
  xrt::ServingLimits& c = config.limits;
  c = xrt::CompiledLimitsOf(artifact);
  if (artifact.manifest().config()->vision())
    config.limit_mm_per_prompt = artifact.manifest().limits()->max_images();
  if (const xpk::LoraConfig* lora = artifact.manifest().lora()) {
    config.enable_lora = true;
    config.max_loras = lora->max_loras();
    config.max_lora_rank = lora->max_lora_rank();
  }
  if (path.empty()) return config;
  std::ifstream in(path);
  if (!in) return xrt::NotFoundError("{}: cannot open", path);
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return xrt::InvalidArgumentError("{}: not a JSON object", path);
  std::optional<bool> enable_lora;
  std::string lora_limit_key;  // the first of max-loras / max-lora-rank given
  for (auto& [key, value] : j.items()) {
    std::string k = key;
    std::replace(k.begin(), k.end(), '-', '_');
    if (k == "limit_mm_per_prompt") {
      // A count, or vLLM's per-modality object (only images exist here).
      const bool object = value.is_object();
      if (object)
        for (const auto& [modality, count] : value.items())
          if (modality != "image")
            return xrt::InvalidArgumentError(
                "{}: '{}': modality '{}' is not supported (only image)", path, key, modality);
      const nlohmann::ordered_json& n =
          object ? value.value("image", nlohmann::ordered_json()) : value;
      if (!n.is_number_integer() || n.get<int64_t>() < 0)
        return xrt::InvalidArgumentError(
            "{}: '{}' must be a non-negative integer or {{\"image\": N}}", path, key);
      config.limit_mm_per_prompt = n.get<int64_t>();
      continue;
    }
    if (k == "enable_lora") {
      if (!value.is_boolean())
        return xrt::InvalidArgumentError("{}: '{}' must be true or false", path, key);
      enable_lora = value.get<bool>();
      continue;
    }
    int64_t* field = k == "max_num_seqs"             ? &c.max_num_seqs
                     : k == "max_num_batched_tokens" ? &c.max_num_batched_tokens
                     : k == "max_model_len"          ? &c.max_model_len
                     : k == "max_loras"              ? &config.max_loras
                     : k == "max_lora_rank"          ? &config.max_lora_rank
                                                     : nullptr;
    if (!field)
      return xrt::InvalidArgumentError(
          "{}: unknown key '{}' (known: max-num-seqs, max-num-batched-tokens, max-model-len, "
          "limit-mm-per-prompt, enable-lora, max-loras, max-lora-rank)",
          path, key);
    if (!value.is_number_integer() || value.get<int64_t>() < 1)
      return xrt::InvalidArgumentError("{}: '{}' must be a positive integer", path, key);
    *field = value.get<int64_t>();
    if ((k == "max_loras" || k == "max_lora_rank") && lora_limit_key.empty()) lora_limit_key = key;
  }
  if (enable_lora == false && !lora_limit_key.empty())
    return xrt::InvalidArgumentError("{}: '{}' needs LoRA, but enable-lora is false", path,
                                     lora_limit_key);
  if (enable_lora.has_value()) config.enable_lora = *enable_lora;
  if (!lora_limit_key.empty()) config.enable_lora = true;
  if (!config.enable_lora) {
    config.max_loras = config.max_lora_rank = 0;
  } else {
    // vLLM's defaults where neither the config nor the artifact gives one.
    if (config.max_loras == 0) config.max_loras = 1;
    if (config.max_lora_rank == 0) config.max_lora_rank = 16;
  }
  return config;
}

xrt::Expected<xrt::ReplayParams> ReplayParamsFor(const xrt::Artifact& artifact,
                                                 const ServingConfig& config,
                                                 xrt::BucketTable buckets) {
  const xrt::ServingLimits& serving = config.limits;
  xrt::ReplayParams p;
  XRT_ASSIGN_OR_RETURN(p.core, xrt::EngineCoreParamsFor(artifact));
  const xrt::ServingLimits compiled = p.core.compiled;
  p.core.buckets = std::move(buckets);
  // An artifact compiled for this token budget (tune-buckets proposes its buckets).
  p.core.compiled.max_num_batched_tokens = serving.max_num_batched_tokens;
  p.core.requested.max_num_seqs = std::min(serving.max_num_seqs, compiled.max_num_seqs);
  p.core.requested.max_num_batched_tokens = serving.max_num_batched_tokens;
  p.core.requested.max_model_len = std::min(serving.max_model_len, compiled.max_model_len);
  p.core.enable_prefix_caching = true;
  if (const xpk::LoraConfig* lora = artifact.manifest().lora(); lora && config.enable_lora) {
    p.lora = xrt::LoraGeometryOf(lora);
    p.lora.max_loras = std::min(config.max_loras, lora->max_loras());
  }
  return p;
}

std::set<std::string> LmStepExecutablesOf(const xrt::Artifact& artifact) {
  std::set<std::string> names;
  for (const xpk::Executable* e : *artifact.manifest().executables())
    if (e->kind() == xpk::ExecutableKind::lm_step)
      names.insert(xpk::abi::ExecutableName(e->kind(), e->num_tokens(), e->lora_mode()));
  return names;
}

xrt::Expected<std::vector<xrt::TraceRequest>> ReadTraceFor(const xrt::Artifact& artifact,
                                                           const ServingConfig& serving,
                                                           const std::string& path) {
  XRT_ASSIGN_OR_RETURN(xrt::TokenizerSpec spec, artifact.tokenizer_spec());
  XRT_ASSIGN_OR_RETURN(xrt::Tokenizer tok, xrt::Tokenizer::Create(std::move(spec)));
  XRT_ASSIGN_OR_RETURN(std::optional<xrt::VisionParams> vision, xrt::VisionParamsOf(artifact));
  xrt::TraceImageParams images;
  if (vision) {
    images.image_token_id = vision->image_token_id;
    images.tokens_per_image = vision->tokens_per_image;
  }
  xrt::TraceLoraParams lora;
  lora.enabled = artifact.manifest().lora() && serving.enable_lora;
  if (artifact.manifest().lora() && !serving.enable_lora)
    lora.why_not = "the serving config sets enable-lora false";
  return xrt::ReadTrace(
      path, [&](const std::string& text) { return tok.Encode(text, true); },
      static_cast<int32_t>(artifact.manifest().config()->vocab_size()), images, lora);
}

}  // namespace xcc
