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
    if (e->kind() == xpk::ExecutableKind::vision_encode) b.images.push_back(e->num_images());
    if (e->lora_mode() != xpk::LoraMode::none) continue;
    if (e->kind() == xpk::ExecutableKind::lm_step) b.tokens.push_back(e->num_tokens());
    if (e->kind() == xpk::ExecutableKind::lm_logits) b.reqs.push_back(e->num_reqs());
  }
  std::sort(b.tokens.begin(), b.tokens.end());
  std::sort(b.reqs.begin(), b.reqs.end());
  std::sort(b.images.begin(), b.images.end());
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

int64_t AutoKvCacheElementBytes(const Artifact& artifact) {
  for (const xpk::Executable* e : *artifact.manifest().executables()) {
    if (e->kind() != xpk::ExecutableKind::lm_step || !e->commands()) continue;
    for (const xpk::Command* c : *e->commands())
      if (c->ukernel() == xpk::Ukernel::matmul && c->compute() != xpk::ComputeType::f32) return 2;
  }
  return 4;
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

Expected<std::optional<VisionParams>> VisionParamsOf(const Artifact& artifact) {
  const xpk::Manifest& m = artifact.manifest();
  const xpk::VisionConfig* v = m.config()->vision();
  if (!v) return std::optional<VisionParams>();
  auto bad = [&](const std::string& what) {
    return DataLossError("{}: vision config: {}", artifact.path(), what);
  };
  VisionParams out;
  out.image_token_id = v->image_token_id();
  out.image_token = v->image_token() ? v->image_token()->str() : "";
  out.tokens_per_image = v->tokens_per_image();
  out.num_channels = v->num_channels();
  out.image_size = v->image_size();
  out.max_images_per_prompt = m.limits()->max_images();
  out.encoder_cache_rows = v->encoder_cache_rows();
  out.image_buckets = CompiledBucketsOf(artifact).images;
  if (out.image_token.empty() || out.image_token_id < 0 ||
      out.image_token_id >= m.config()->vocab_size())
    return bad(fmt::format("image token {} '{}' is not in the vocabulary", out.image_token_id,
                           out.image_token));
  if (out.tokens_per_image < 1 || out.num_channels != 3 || out.image_size < 1)
    return bad(fmt::format("tokens_per_image {}, num_channels {}, image_size {}",
                           out.tokens_per_image, out.num_channels, out.image_size));
  if (out.max_images_per_prompt < 1 || out.encoder_cache_rows < out.tokens_per_image ||
      out.image_buckets.empty())
    return bad(fmt::format("max_images {}, encoder_cache_rows {}, {} vision_encode buckets",
                           out.max_images_per_prompt, out.encoder_cache_rows,
                           out.image_buckets.size()));
  const xpk::ImagePreprocess* p = v->preprocess();
  if (!p) return bad("no image preprocessing parameters");
  ImagePreprocessParams& q = out.preprocess;
  const std::string cls = p->processor_class() ? p->processor_class()->str() : "";
  if (cls == ImageProcessorKindName(ImageProcessorKind::kClip)) {
    q.processor = ImageProcessorKind::kClip;
  } else if (cls == ImageProcessorKindName(ImageProcessorKind::kSiglip)) {
    q.processor = ImageProcessorKind::kSiglip;
  } else {
    return bad(fmt::format("unknown image processor '{}'", cls));
  }
  q.do_convert_rgb = p->do_convert_rgb();
  q.do_resize = p->do_resize();
  q.resize_rule = p->shortest_edge() > 0 ? ResizeRule::kShortestEdge : ResizeRule::kExact;
  q.shortest_edge = static_cast<int>(p->shortest_edge());
  q.resize_height = static_cast<int>(p->resize_height());
  q.resize_width = static_cast<int>(p->resize_width());
  q.resample = p->resample();
  q.do_center_crop = p->do_center_crop();
  q.crop_height = static_cast<int>(p->crop_height());
  q.crop_width = static_cast<int>(p->crop_width());
  q.do_rescale = p->do_rescale();
  q.rescale_factor = p->rescale_factor();
  q.do_normalize = p->do_normalize();
  if (!p->image_mean() || !p->image_std() || p->image_mean()->size() != 3 ||
      p->image_std()->size() != 3)
    return bad("image_mean and image_std must have 3 values");
  for (int c = 0; c < 3; ++c) {
    q.image_mean[c] = p->image_mean()->Get(c);
    q.image_std[c] = p->image_std()->Get(c);
  }
  std::optional<ImageSize> size = FixedOutputSize(q);
  if (!size || size->height != out.image_size || size->width != out.image_size)
    return bad(fmt::format("the image preprocessing does not produce {}x{} images", out.image_size,
                           out.image_size));
  return std::optional<VisionParams>(std::move(out));
}

Expected<EngineCoreParams> EngineCoreParamsFor(const Artifact& artifact,
                                               std::optional<int64_t> kv_element_bytes) {
  EngineCoreParams p;
  p.compiled = CompiledLimitsOf(artifact);
  const CompiledBuckets b = CompiledBucketsOf(artifact);
  XRT_ASSIGN_OR_RETURN(std::optional<VisionParams> vision, VisionParamsOf(artifact));
  Expected<BucketTable> buckets = BucketTable::Create(b.tokens, b.reqs, b.images);
  if (!buckets.ok()) return buckets.status().WithContext(artifact.path());
  p.buckets = std::move(*buckets);
  if (vision) {
    p.encoder_cache_rows = vision->encoder_cache_rows;
    p.tokens_per_image = vision->tokens_per_image;
  }
  KvCacheParams kv = KvCacheParamsOf(artifact);
  kv.element_bytes = kv_element_bytes.value_or(AutoKvCacheElementBytes(artifact));
  p.num_kv_blocks = DefaultNumKvBlocks(kv, p.compiled.max_num_seqs, p.compiled.max_blocks_per_req);
  p.vocab_size = artifact.manifest().config()->vocab_size();
  p.eos_token_ids = EosTokenIdsOf(artifact);
  return p;
}

}  // namespace xrt
