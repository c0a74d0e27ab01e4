#include "runtime/executor/model_runner.h"

#include <algorithm>
#include <cstring>

#include "runtime/engine/artifact_params.h"
#include "schemas/artifact_generated.h"

namespace xrt {

namespace {

// The adapters `xcc compile --lora-modules` packed into the artifact, used in place.
Status RegisterPackedAdapters(const Artifact& a, LoraRegistry* registry) {
  const xpk::LoraConfig* lora = a.manifest().lora();
  if (!lora || !lora->adapters() || lora->adapters()->size() == 0) return Status::Ok();
  XRT_ASSIGN_OR_RETURN(ByteSpan segment, a.segment_data(lora->adapters_segment()));
  for (const xpk::LoraAdapter* p : *lora->adapters()) {
    LoraAdapter adapter;
    adapter.name = p->name()->str();
    adapter.base_model_name_or_path =
        p->base_model_name_or_path() ? p->base_model_name_or_path()->str() : "";
    adapter.rank = p->rank();
    if (p->modules())
      for (const flatbuffers::String* m : *p->modules()) adapter.modules.push_back(m->str());
    adapter.from_artifact = true;
    // The loader checked the range; the segment is 64-byte aligned.
    adapter.data = reinterpret_cast<const float*>(segment.data + p->offset());
    XRT_RETURN_IF_ERROR(registry->AddPacked(std::move(adapter)).status());
  }
  return Status::Ok();
}

}  // namespace

Expected<std::optional<KvCacheDtype>> ParseKvCacheDtype(const std::string& name) {
  if (name == "auto") return std::optional<KvCacheDtype>();
  if (name == "f32") return std::optional<KvCacheDtype>(KvCacheDtype::kF32);
  if (name == "f16") return std::optional<KvCacheDtype>(KvCacheDtype::kF16);
  if (name == "fp8" || name == "fp8_e4m3")
    return std::optional<KvCacheDtype>(KvCacheDtype::kFp8E4M3);
  return InvalidArgumentError("--kv-cache-dtype: '{}' is not one of auto, f32, f16, fp8", name);
}

Expected<std::unique_ptr<ModelRunner>> ModelRunner::Create(const ModelRunnerParams& params) {
  std::unique_ptr<ModelRunner> r(new ModelRunner());
  XRT_ASSIGN_OR_RETURN(r->artifact_, Artifact::Open(params.artifact_path, params.load));
  const Artifact& a = *r->artifact_;
  const xpk::Manifest& m = a.manifest();
  const xpk::ModelConfig& cfg = *m.config();
  r->kv_cache_dtype_ = params.kv_cache_dtype.value_or(
      AutoKvCacheElementBytes(a) == 2 ? KvCacheDtype::kF16 : KvCacheDtype::kF32);
  XRT_ASSIGN_OR_RETURN(r->core_params_,
                       EngineCoreParamsFor(a, KvCacheElementBytes(r->kv_cache_dtype_)));
  r->sampling_defaults_ = SamplingDefaultsOf(a);
  r->hidden_size_ = cfg.hidden_size();

  XRT_ASSIGN_OR_RETURN(TokenizerSpec spec, a.tokenizer_spec());
  XRT_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::Create(std::move(spec)));
  r->tokenizer_.emplace(std::move(tok));
  if (cfg.chat_template() && cfg.chat_template()->size() > 0) {
    auto t = ChatTemplate::Parse(cfg.chat_template()->str());
    if (!t.ok()) return t.status().WithContext(params.artifact_path + ": chat template");
    r->chat_template_.emplace(std::move(*t));
  }

  // Executables by bucket.
  for (const xpk::Executable* e : *m.executables()) {
    if (e->kind() == xpk::ExecutableKind::lm_step)
      r->step_by_bucket_[{e->lora_mode(), e->num_tokens()}] = e;
    if (e->lora_mode() != xpk::LoraMode::none) continue;
    if (e->kind() == xpk::ExecutableKind::lm_logits) r->logits_by_bucket_[e->num_reqs()] = e;
    if (e->kind() == xpk::ExecutableKind::vision_encode) r->vision_by_bucket_[e->num_images()] = e;
  }
  if (const xpk::VisionConfig* v = cfg.vision()) {
    r->tokens_per_image_ = v->tokens_per_image();
    r->pixel_floats_ = v->num_channels() * v->image_size() * v->image_size();
    r->encoder_cache_.assign(v->encoder_cache_rows() * cfg.hidden_size(), 0.0f);
  }
  XRT_ASSIGN_OR_RETURN(InputBuilder builder,
                       InputBuilder::ForCompiled(r->core_params_.compiled, r->core_params_.buckets,
                                                 r->core_params_.vocab_size));
  r->input_builder_.emplace(std::move(builder));

  // KV cache.
  KvCacheParams kv = KvCacheParamsOf(a);
  kv.element_bytes = KvCacheElementBytes(r->kv_cache_dtype_);
  if (params.num_kv_blocks > 0) {
    kv.num_blocks = params.num_kv_blocks;
  } else if (params.kv_cache_bytes > 0) {
    XRT_ASSIGN_OR_RETURN(kv.num_blocks,
                         KvCacheStorage::NumBlocksForBudget(kv, params.kv_cache_bytes));
  } else {
    kv.num_blocks = r->core_params_.num_kv_blocks;  // xrt run's default, for this element size
  }
  r->core_params_.num_kv_blocks = kv.num_blocks;
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
  ep.kv.dtype = r->kv_cache_dtype_;
  if (!r->encoder_cache_.empty()) ep.encoder_cache = r->encoder_cache_.data();
  if (const xpk::LoraConfig* lora = m.lora()) {
    LoraGeometry geometry = LoraGeometryOf(lora);
    r->lora_manager_ = std::make_unique<LoraManager>(geometry, /*allocate=*/true);
    ep.lora_a = r->lora_manager_->buffers().a;
    ep.lora_b = r->lora_manager_->buffers().b;
    for (float* p : ep.lora_a)
      if (!p) return ResourceExhaustedError("{}: cannot allocate LoRA slots", params.artifact_path);
    for (float* p : ep.lora_b)
      if (!p) return ResourceExhaustedError("{}: cannot allocate LoRA slots", params.artifact_path);
    r->lora_registry_ = std::make_unique<LoraRegistry>(std::move(geometry));
    XRT_RETURN_IF_ERROR(RegisterPackedAdapters(a, r->lora_registry_.get()));
  }
  XRT_ASSIGN_OR_RETURN(r->executor_, Executor::Create(ep));
  return r;
}

EngineCoreParams ModelRunner::engine_core_params() {
  EngineCoreParams p = core_params_;
  p.executor = this;
  p.tokenizer = &*tokenizer_;
  p.lora = lora_manager_.get();
  return p;
}

Status ModelRunner::CopyInput(const xpk::Executable& e, const char* name,
                              const std::vector<int32_t>& v) {
  for (const xpk::TensorSpec* t : *e.inputs()) {
    if (t->name()->str() != name) continue;
    const uint64_t bytes = v.size() * sizeof(int32_t);
    if (t->dtype() != xpk::DType::i32 || bytes != t->size())
      return InvalidArgumentError("{}: input '{}' holds {} bytes, the step has {}", e.name()->str(),
                                  name, t->size(), bytes);
    std::memcpy(executor_->io(e) + t->offset(), v.data(), bytes);
    return Status::Ok();
  }
  return NotFoundError("{}: no input '{}'", e.name()->str(), name);
}

std::vector<int64_t> ModelRunner::image_buckets() const {
  std::vector<int64_t> out;
  for (const auto& [b, e] : vision_by_bucket_) out.push_back(b);
  return out;
}

Status ModelRunner::EncodeImages(const std::vector<const float*>& pixels,
                                 const std::vector<int64_t>& cache_rows) {
  if (vision_by_bucket_.empty())
    return FailedPreconditionError("{}: the model has no vision encoder", artifact_->path());
  const int64_t num_images = static_cast<int64_t>(pixels.size());
  if (num_images < 1 || cache_rows.size() != pixels.size())
    return InvalidArgumentError("EncodeImages: {} images with {} destinations", num_images,
                                cache_rows.size());
  auto it = vision_by_bucket_.lower_bound(num_images);
  if (it == vision_by_bucket_.end())
    return OutOfRangeError("no vision_encode executable for {} images (largest bucket {})",
                           num_images, vision_by_bucket_.rbegin()->first);
  const xpk::Executable& e = *it->second;
  const int64_t cache_rows_total = static_cast<int64_t>(encoder_cache_.size()) / hidden_size_;
  for (int64_t row : cache_rows)
    if (row < 0 || row + tokens_per_image_ > cache_rows_total)
      return OutOfRangeError("encoder cache rows [{}, {}) are outside the cache's {} rows", row,
                             row + tokens_per_image_, cache_rows_total);
  XRT_ASSIGN_OR_RETURN(uint8_t* px, executor_->Tensor(e, "pixel_values"));
  const size_t image_bytes = static_cast<size_t>(pixel_floats_) * sizeof(float);
  if (e.inputs()->Get(0)->size() != image_bytes * static_cast<uint64_t>(it->first))
    return DataLossError("{}: pixel_values holds {} bytes, expected {} images of {}",
                         e.name()->str(), e.inputs()->Get(0)->size(), it->first, image_bytes);
  for (int64_t i = 0; i < num_images; ++i) {
    if (pixels[i] == nullptr) return InvalidArgumentError("image {} to encode has no pixels", i);
    std::memcpy(px + i * image_bytes, pixels[i], image_bytes);
  }
  std::memset(px + num_images * image_bytes, 0, (it->first - num_images) * image_bytes);
  XRT_RETURN_IF_ERROR(executor_->Run(e));
  XRT_ASSIGN_OR_RETURN(uint8_t* out, executor_->Tensor(e, "image_features"));
  const float* features = reinterpret_cast<const float*>(out);
  const int64_t image_floats = tokens_per_image_ * hidden_size_;
  for (int64_t i = 0; i < num_images; ++i)
    std::memcpy(encoder_cache_.data() + cache_rows[i] * hidden_size_, features + i * image_floats,
                image_floats * sizeof(float));
  return Status::Ok();
}

Expected<const float*> ModelRunner::Execute(const StepInputs& in) {
  auto step = step_by_bucket_.find({in.lora_mode, in.token_bucket});
  if (step == step_by_bucket_.end())
    return OutOfRangeError("no lm_step executable for {} tokens (lora {})", in.token_bucket,
                           xpk::EnumNameLoraMode(in.lora_mode));
  const xpk::Executable& s = *step->second;
  if (in.image_bucket > 0) {
    std::vector<const float*> pixels;
    for (const std::vector<float>* p : in.image_pixels) {
      if (p != nullptr && static_cast<int64_t>(p->size()) != pixel_floats_)
        return InvalidArgumentError("an image to encode has {} floats, the tower takes {}",
                                    p->size(), pixel_floats_);
      pixels.push_back(p ? p->data() : nullptr);
    }
    XRT_RETURN_IF_ERROR(EncodeImages(pixels, in.image_cache_rows));
  }
  XRT_RETURN_IF_ERROR(CopyInput(s, "token_ids", in.token_ids));
  XRT_RETURN_IF_ERROR(CopyInput(s, "positions", in.positions));
  XRT_RETURN_IF_ERROR(CopyInput(s, "slot_mapping", in.slot_mapping));
  XRT_RETURN_IF_ERROR(CopyInput(s, "block_tables", in.block_tables));
  XRT_RETURN_IF_ERROR(CopyInput(s, "seq_lens", in.seq_lens));
  XRT_RETURN_IF_ERROR(CopyInput(s, "query_start_loc", in.query_start_loc));
  XRT_RETURN_IF_ERROR(CopyInput(s, "embed_source", in.embed_source));
  XRT_RETURN_IF_ERROR(CopyInput(s, "lora_slot", in.lora_slot));
  // Row-wise commands run the real tokens only (the padding rows are never read).
  XRT_RETURN_IF_ERROR(executor_->Run(s, in.num_tokens));
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
  // Rows past num_logits (padding requests) are not computed; the caller reads rows
  // [0, num_logits) of the logits.
  XRT_RETURN_IF_ERROR(executor_->Run(l, in.num_logits));
  XRT_ASSIGN_OR_RETURN(uint8_t* logits, executor_->Tensor(l, "logits"));
  return reinterpret_cast<const float*>(logits);
}

}  // namespace xrt
