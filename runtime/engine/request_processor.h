// RequestProcessor: THE one place that turns what a client asked for into an
// EngineRequest (vLLM's Processor). The HTTP server, `xrt generate` and the
// trace replay all go through it:
//
//   1. the prompt: text (tokenized with add_special_tokens), chat messages
//      (through the model's chat template, given the tokenizer's bos/eos text,
//      then tokenized without special tokens: the template writes them), or
//      token ids as given;
//   2. max_tokens: as asked, else 16 (text, tokens) or whatever fits in
//      max_model_len (chat);
//   3. sampling: every field SamplingDefaults covers that the request did not
//      set takes the model's generation_config default (as vLLM does);
//   4. images (a model with vision, RequestProcessorParams::vision): each
//      image is decoded, preprocessed into the vision tower's input and
//      hashed (decoded pixels + preprocessing parameters); the prompt must
//      hold one image token (VisionParams::image_token, e.g. "<image>") per
//      image, in order, and each is expanded into tokens_per_image copies of
//      its id -- what HF's LlavaProcessor does to the text before tokenizing
//      (the image token is an added token, so expanding ids gives the same
//      ids); the spans go into EngineRequest::images. A text or chat prompt
//      whose image tokens do not match the images (e.g. one with image tokens
//      and no images) is an error, as in HF. Token-id prompts cannot carry
//      images (as vLLM's OpenAI server: there is no way to tell where they
//      go); their ids are taken as given, an image token id included;
//   5. validation against the limits served at (Validate), on the expanded
//      prompt.
//
// Errors are InvalidArgument with OpenAI's wording where clients depend on it
// (the context length message); `error`, when given, names the request field
// at fault (OpenAI's error.param) and an error code (error.code).
//
// Ownership: borrows the tokenizer, chat template and vision params (must
// outlive it). An EngineRequest's pixel buffers are shared (images equal in
// content within one request share one buffer).
// Thread-safety: immutable; Process and Validate may run on any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/status.h"
#include "runtime/engine/engine_request.h"
#include "runtime/engine/serving_limits.h"
#include "runtime/sampler/sampling_params.h"
#include "runtime/vision/image_decode.h"

namespace xrt {

class ChatTemplate;
class Tokenizer;
struct VisionParams;  // artifact_params.h

enum class PromptKind {
  kText,    // GenerationRequest::prompt
  kChat,    // GenerationRequest::messages (+ tools)
  kTokens,  // GenerationRequest::prompt_token_ids
};

// An image of a request as the client sent it: encoded bytes (PNG, JPEG or
// WebP) and, for error messages and RequestError::param, the caller's name
// for it ("messages[1].content[2]", "--image cat.png").
struct RequestImage {
  std::string name;
  std::string bytes;
};

// A request as a client states it, before tokenization and defaults.
struct GenerationRequest {
  std::string request_id;
  PromptKind kind = PromptKind::kText;
  std::string prompt;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: none; else passed to the chat template
  std::vector<int32_t> prompt_token_ids;
  int64_t max_tokens = -1;  // -1: unset
  SamplingParams sampling;
  SamplingFieldsSet sampling_set;  // which fields of `sampling` the client set
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool return_prompt_logits = false;
  // In prompt order: the k-th image goes where the k-th image token is. A chat
  // request's messages then carry content as a list of parts with
  // {"type": "image"} where the images were (OpenAiRequest::message_parts).
  std::vector<RequestImage> images;
  // The LoRA adapter to run with (LoraRegistry::Find's); null: the base model.
  // Passed through to EngineRequest::lora (the engine refuses it when the
  // artifact has no LoRA).
  std::shared_ptr<const LoraAdapter> lora;
};

// Where a request went wrong (OpenAI's error.param and error.code; "" when
// there is none).
struct RequestError {
  std::string param;
  std::string code;
};

struct RequestProcessorParams {
  const Tokenizer* tokenizer = nullptr;         // null: only token-id prompts
  const ChatTemplate* chat_template = nullptr;  // null: no chat prompts
  SamplingDefaults sampling_defaults;           // the model's generation_config
  ServingLimits limits;                         // as served: max_model_len, block_size
  int64_t num_kv_blocks = 0;                    // the KV pool; 0: not checked
  int64_t vocab_size = 0;                       // prompt token ids must be below it; 0: not checked
  // The model's vision side (borrowed, must outlive the processor); null: a
  // text-only model, which refuses requests with images.
  const VisionParams* vision = nullptr;
  // Images with more pixels than limits.max_pixels are refused before decoding.
  DecodeLimits image_decode_limits;
};

class RequestProcessor {
 public:
  explicit RequestProcessor(RequestProcessorParams params) : params_(std::move(params)) {}

  // Steps 1-5 of the file comment. Errors about one image name it (message
  // prefix and RequestError::param = RequestImage::name): an image that does
  // not decode (or has too many pixels), one image over the model's
  // max_images_per_prompt. Images sent to a text-only model, or with a
  // token-id prompt, are an error naming the first image.
  Expected<EngineRequest> Process(const GenerationRequest& request,
                                  RequestError* error = nullptr) const;

  // Step 5 alone, for a request already made: sampling params, an empty
  // prompt, max_tokens < 1, prompt + max_tokens > max_model_len (OpenAI's
  // context length message, code "context_length_exceeded"), more KV blocks
  // than the pool, prompt token ids outside the vocabulary, image spans that
  // are empty, unsorted, overlapping or outside the prompt; with
  // params().vision also more images than max_images_per_prompt, a span that
  // is not tokens_per_image image-token ids, pixel_values of the wrong size.
  Status Validate(const EngineRequest& request, RequestError* error = nullptr) const;

  const RequestProcessorParams& params() const { return params_; }

 private:
  Status Check(const EngineRequest& request, PromptKind kind, bool max_tokens_set,
               RequestError* error) const;
  Expected<std::vector<int32_t>> Tokenize(const GenerationRequest& request,
                                          RequestError* error) const;
  Status CheckImages(const EngineRequest& request, const char* prompt_param,
                     RequestError* error) const;
  Status AddImages(const GenerationRequest& request, EngineRequest* r, RequestError* error) const;

  RequestProcessorParams params_;
};

}  // namespace xrt
