#include "runtime/engine/request_processor.h"

#include <algorithm>
#include <cstring>

#include "runtime/chat/chat_template.h"
#include "runtime/engine/artifact_params.h"
#include "runtime/tokenizer/tokenizer.h"
#include "runtime/vision/image_preprocess.h"

namespace xrt {
namespace {

// Records where the request went wrong and returns `status`.
Status Fail(RequestError* error, const std::string& param, Status status,
            const std::string& code = "") {
  if (error != nullptr) *error = RequestError{param, code};
  return status;
}

// The text of a special token (a chat template's bos_token / eos_token), "" if absent.
std::string SpecialTokenText(const Tokenizer& tok, int32_t id) {
  return id >= 0 ? tok.Decode({id}) : "";
}

void ApplySamplingDefaults(const SamplingDefaults& d, const SamplingFieldsSet& set,
                           SamplingParams* p) {
  if (!set.temperature && d.temperature) p->temperature = *d.temperature;
  if (!set.top_p && d.top_p) p->top_p = *d.top_p;
  if (!set.top_k && d.top_k) p->top_k = *d.top_k;
  if (!set.repetition_penalty && d.repetition_penalty)
    p->repetition_penalty = *d.repetition_penalty;
}

// The first 128 bits of an image's SHA-256, as the engine's content hash.
BlockHash ContentHash(const ImageHash& h) {
  BlockHash out;
  std::memcpy(&out.lo, h.bytes.data(), sizeof(out.lo));
  std::memcpy(&out.hi, h.bytes.data() + sizeof(out.lo), sizeof(out.hi));
  return out;
}

const char* PromptParam(PromptKind kind) {
  return kind == PromptKind::kChat ? "messages" : "prompt";
}

}  // namespace

Expected<std::vector<int32_t>> RequestProcessor::Tokenize(const GenerationRequest& request,
                                                          RequestError* error) const {
  if (request.kind == PromptKind::kTokens) return request.prompt_token_ids;
  const char* param = PromptParam(request.kind);
  if (params_.tokenizer == nullptr)
    return Fail(error, param, FailedPreconditionError("no tokenizer: only token-id prompts"));
  const Tokenizer& tok = *params_.tokenizer;
  if (request.kind == PromptKind::kText)
    return tok.Encode(request.prompt, /*add_special_tokens=*/true);
  if (params_.chat_template == nullptr)
    return Fail(error, param,
                InvalidArgumentError("this model has no chat template; send a plain prompt "
                                     "(/v1/completions) instead"));
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();
  if (!request.tools.is_null()) extra["tools"] = request.tools;
  const std::string bos = SpecialTokenText(tok, tok.bos_id());
  Expected<std::string> text =
      ApplyChatTemplate(*params_.chat_template, request.messages, /*add_generation_prompt=*/true,
                        bos, SpecialTokenText(tok, tok.eos_id()), extra);
  if (!text.ok()) return Fail(error, param, text.status().WithContext("chat template"));
  // A text model: like the tokenizer's apply_chat_template(tokenize=True), the
  // template writes the special tokens itself. A vision model: like its
  // processor's apply_chat_template (ProcessorMixin), which adds them unless
  // the text already starts with the bos token (llava-hf templates write no
  // bos).
  const bool add_special_tokens =
      params_.vision != nullptr && (bos.empty() || text->compare(0, bos.size(), bos) != 0);
  return tok.Encode(*text, add_special_tokens);
}

Status RequestProcessor::AddImages(const GenerationRequest& request, EngineRequest* r,
                                   RequestError* error) const {
  const VisionParams& v = *params_.vision;
  const int64_t num_images = static_cast<int64_t>(request.images.size());
  const char* param = PromptParam(request.kind);
  int64_t num_tokens = 0;
  for (int32_t t : r->prompt) num_tokens += t == v.image_token_id;
  if (num_tokens != num_images)
    return Fail(error, param,
                InvalidArgumentError(
                    "{}: the prompt has {} image token{} ('{}') but the request has {} image{}; "
                    "each image needs one '{}' where it goes, in order",
                    param, num_tokens, num_tokens == 1 ? "" : "s", v.image_token, num_images,
                    num_images == 1 ? "" : "s", v.image_token));
  if (num_images == 0) return Status::Ok();
  if (v.num_channels != 3 || v.image_size <= 0 || v.tokens_per_image <= 0)
    return InternalError("vision params: a {} x {} x {} input and {} tokens per image",
                         v.num_channels, v.image_size, v.image_size, v.tokens_per_image);

  // Each image token becomes tokens_per_image of them (HF expands the text
  // before tokenizing; the image token is an added token, so it is the same).
  std::vector<int32_t> expanded;
  expanded.reserve(r->prompt.size() + num_images * (v.tokens_per_image - 1));
  r->images.resize(num_images);
  int64_t k = 0;
  for (int32_t t : r->prompt) {
    if (t != v.image_token_id) {
      expanded.push_back(t);
      continue;
    }
    r->images[k].span.offset = static_cast<int64_t>(expanded.size());
    r->images[k].span.length = v.tokens_per_image;
    expanded.insert(expanded.end(), v.tokens_per_image, t);
    ++k;
  }
  r->prompt = std::move(expanded);

  for (int64_t i = 0; i < num_images; ++i) {
    const RequestImage& image = request.images[i];
    const std::string& bytes = image.bytes;
    Expected<DecodedImage> decoded = DecodeImage(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                 bytes.size(), params_.image_decode_limits);
    // Every failure is the client's image (-> 400), whatever its kind.
    if (!decoded.ok())
      return Fail(error, image.name,
                  InvalidArgumentError("{}: cannot decode the image: {}", image.name,
                                       decoded.status().message()));
    ImageInput& in = r->images[i];
    in.span.content_hash = ContentHash(HashImage(*decoded, v.preprocess));
    // An image sent twice shares the first one's pixels.
    for (int64_t j = 0; j < i && !in.pixel_values; ++j)
      if (r->images[j].span.content_hash == in.span.content_hash)
        in.pixel_values = r->images[j].pixel_values;
    if (in.pixel_values) continue;
    Expected<ImageSize> out_size =
        PreprocessOutputSize(v.preprocess, ImageSize{decoded->height, decoded->width});
    if (!out_size.ok())
      return Fail(error, image.name,
                  InvalidArgumentError("{}: cannot preprocess the image: {}", image.name,
                                       out_size.status().message()));
    const ImageSize size = *out_size;
    if (size.height != v.image_size || size.width != v.image_size)
      return InternalError("{}: preprocessing gives {} x {} pixels, the vision tower takes {} x {}",
                           image.name, size.height, size.width, v.image_size, v.image_size);
    auto pixels = std::make_shared<std::vector<float>>(static_cast<size_t>(v.pixel_floats()));
    if (Status s = PreprocessImage(*decoded, v.preprocess, pixels->data()); !s.ok())
      return Fail(
          error, image.name,
          InvalidArgumentError("{}: cannot preprocess the image: {}", image.name, s.message()));
    in.pixel_values = std::move(pixels);
  }
  return Status::Ok();
}

Expected<EngineRequest> RequestProcessor::Process(const GenerationRequest& request,
                                                  RequestError* error) const {
  // The cheap checks on images come before any tokenizing or decoding.
  if (!request.images.empty()) {
    const std::string& first = request.images.front().name;
    if (params_.vision == nullptr)
      return Fail(error, first,
                  InvalidArgumentError("{}: the model does not accept images (it has no vision "
                                       "encoder)",
                                       first));
    if (request.kind == PromptKind::kTokens)
      return Fail(error, first,
                  InvalidArgumentError("{}: a prompt of token ids cannot carry images; send the "
                                       "prompt as text with '{}' where each image goes",
                                       first, params_.vision->image_token));
    const int64_t max_images = params_.vision->max_images_per_prompt;
    if (max_images > 0 && static_cast<int64_t>(request.images.size()) > max_images) {
      const std::string& over = request.images[max_images].name;
      return Fail(
          error, over,
          InvalidArgumentError("{}: at most {} image{} per request; this one has {}", over,
                               max_images, max_images == 1 ? "" : "s", request.images.size()));
    }
  }
  XRT_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, Tokenize(request, error));
  EngineRequest r;
  r.request_id = request.request_id;
  r.prompt = std::move(prompt);
  if (params_.vision != nullptr && request.kind != PromptKind::kTokens)
    XRT_RETURN_IF_ERROR(AddImages(request, &r, error));
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  const bool max_tokens_set = request.max_tokens >= 0;
  r.max_tokens = max_tokens_set                      ? request.max_tokens
                 : request.kind == PromptKind::kChat ? params_.limits.max_model_len - n
                                                     : 16;
  r.sampling = request.sampling;
  ApplySamplingDefaults(params_.sampling_defaults, request.sampling_set, &r.sampling);
  r.stop = request.stop;
  r.stop_token_ids = request.stop_token_ids;
  r.ignore_eos = request.ignore_eos;
  r.skip_special_tokens = request.skip_special_tokens;
  r.return_prompt_logits = request.return_prompt_logits;
  r.lora = request.lora;
  XRT_RETURN_IF_ERROR(Check(r, request.kind, max_tokens_set, error));
  return r;
}

Status RequestProcessor::Validate(const EngineRequest& request, RequestError* error) const {
  return Check(request, PromptKind::kTokens, /*max_tokens_set=*/true, error);
}

Status RequestProcessor::Check(const EngineRequest& r, PromptKind kind, bool max_tokens_set,
                               RequestError* error) const {
  const bool chat = kind == PromptKind::kChat;
  const char* prompt_param = chat ? "messages" : "prompt";
  const char* max_tokens_param = chat ? "max_completion_tokens" : "max_tokens";
  if (Status s = ValidateSamplingParams(r.sampling); !s.ok())
    return Fail(error, s.message().substr(0, s.message().find(' ')), s);
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  if (n == 0) return Fail(error, prompt_param, InvalidArgumentError("the prompt is empty"));
  if (max_tokens_set && r.max_tokens < 1)
    return Fail(error, max_tokens_param,
                InvalidArgumentError("max_tokens must be >= 1, got {}", r.max_tokens));
  const int64_t max_len = params_.limits.max_model_len;
  if (n + r.max_tokens > max_len || r.max_tokens < 1) {
    // OpenAI's wording (clients parse it).
    const char* noun = chat ? "messages" : "prompt";
    const int64_t completion = std::max<int64_t>(r.max_tokens, 0);
    return Fail(error, max_tokens_set ? max_tokens_param : prompt_param,
                InvalidArgumentError(
                    "This model's maximum context length is {} tokens. However, you requested {} "
                    "tokens ({} in the {}, {} in the completion). Please reduce the length of the "
                    "{} or the completion.",
                    max_len, n + completion, n, noun, completion, noun),
                "context_length_exceeded");
  }
  const int64_t block = params_.limits.block_size;
  if (params_.num_kv_blocks > 0 && block > 0) {
    // The last sampled token is never fed back, so its KV is never written.
    const int64_t blocks = (n + r.max_tokens - 1 + block - 1) / block;
    if (blocks > params_.num_kv_blocks)
      return Fail(error, max_tokens_param,
                  InvalidArgumentError(
                      "max_tokens: the prompt ({} tokens) plus max_tokens ({}) needs {} KV cache "
                      "blocks; the server has {} (raise --kv-cache-memory or lower max_tokens)",
                      n, r.max_tokens, blocks, params_.num_kv_blocks));
  }
  if (params_.vocab_size > 0) {
    for (int32_t t : r.prompt)
      if (t < 0 || t >= params_.vocab_size)
        return Fail(error, prompt_param,
                    InvalidArgumentError("prompt: token id {} outside the vocabulary [0, {})", t,
                                         params_.vocab_size));
  }
  return CheckImages(r, prompt_param, error);
}

Status RequestProcessor::CheckImages(const EngineRequest& r, const char* prompt_param,
                                     RequestError* error) const {
  if (r.images.empty()) return Status::Ok();
  const int64_t n = static_cast<int64_t>(r.prompt.size());
  const VisionParams* v = params_.vision;
  const int64_t num_images = static_cast<int64_t>(r.images.size());
  if (v != nullptr && v->max_images_per_prompt > 0 && num_images > v->max_images_per_prompt)
    return Fail(error, prompt_param,
                InvalidArgumentError("images: {} in one request, at most {}", num_images,
                                     v->max_images_per_prompt));
  int64_t end = 0;  // of the previous span
  for (int64_t i = 0; i < num_images; ++i) {
    const ImageInput& image = r.images[i];
    const MultimodalSpan& s = image.span;
    if (s.length < 1 || s.offset < end || s.offset > n - s.length)
      return Fail(error, prompt_param,
                  InvalidArgumentError("images[{}]: placeholder tokens [{}, {}) are empty, "
                                       "overlap the previous image's or end past the prompt ({} "
                                       "tokens)",
                                       i, s.offset, s.offset + s.length, n));
    end = s.offset + s.length;
    if (v == nullptr) continue;
    if (s.length != v->tokens_per_image ||
        !std::all_of(r.prompt.begin() + s.offset, r.prompt.begin() + end,
                     [&](int32_t t) { return t == v->image_token_id; }))
      return Fail(error, prompt_param,
                  InvalidArgumentError("images[{}]: placeholder tokens [{}, {}) must be {} image "
                                       "token ids ({})",
                                       i, s.offset, end, v->tokens_per_image, v->image_token_id));
    if (image.pixel_values && static_cast<int64_t>(image.pixel_values->size()) != v->pixel_floats())
      return Fail(error, prompt_param,
                  InvalidArgumentError("images[{}]: {} pixel values, the vision tower takes {}", i,
                                       image.pixel_values->size(), v->pixel_floats()));
  }
  return Status::Ok();
}

}  // namespace xrt
