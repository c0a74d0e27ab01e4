// What goes into the engine core and what comes out of it, per request.
//
// An EngineRequest is made by the RequestProcessor (request_processor.h) from
// what a client asked for: tokenized, the model's sampling defaults applied,
// validated against the serving limits. The EngineCore (engine_core.h) turns
// it into RequestOutputs, step by step, until one with finished == true.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/kv_cache/block_hash.h"  // MultimodalSpan
#include "runtime/lora/lora_manager.h"    // LoraAdapter
#include "runtime/sampler/sampler.h"      // SamplingParams, TokenLogprob

namespace xrt {

// One image of a request, decoded and preprocessed (RequestProcessor): where its
// placeholder tokens sit in the prompt, its content hash (decoded pixels +
// preprocessing parameters: the key of the encoder cache and of the KV prefix
// blocks it overlaps) and the vision tower's input.
struct ImageInput {
  MultimodalSpan span;  // placeholder tokens [offset, offset + length), content_hash
  // [num_channels * image_size * image_size] f32, CHW; shared by requests that
  // carry the same image. May be null only for an executor that runs no kernels
  // (the trace replay).
  std::shared_ptr<const std::vector<float>> pixel_values;
};

struct EngineRequest {
  std::string request_id;               // unique among live requests
  std::vector<int32_t> prompt;          // token ids (chat template already applied)
  SamplingParams sampling;              // incl. seed and logprobs (top-N, -1: none)
  int64_t max_tokens = 16;              // prompt + max_tokens <= max_model_len
  std::vector<std::string> stop;        // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;  // besides the model's eos ids
  bool ignore_eos = false;
  bool skip_special_tokens = true;  // in the decoded text
  // The first output carries the logits of the prompt's last position (the
  // ones the first token is sampled from), for numerics tests.
  bool return_prompt_logits = false;
  // Images, in prompt order (non-overlapping spans inside the prompt, each span
  // exactly tokens_per_image image-token ids).
  std::vector<ImageInput> images;
  // The LoRA adapter the request runs with (the registry's; keeps its data
  // alive while the request lives); null: the base model.
  std::shared_ptr<const LoraAdapter> lora;
};

struct GeneratedToken {
  int32_t token = 0;
  float logprob = 0;  // valid when logprobs were requested
  std::vector<TokenLogprob> top_logprobs;
};

struct RequestOutput {
  std::string request_id;
  std::vector<GeneratedToken> tokens;  // new since the previous output
  std::string text;                    // new decoded text since the previous output
  bool finished = false;
  // When finished: "stop" (eos, stop token or stop string), "length"
  // (max_tokens or max_model_len), "abort" (client gone, shutdown), "error".
  std::string finish_reason;
  std::string error;  // for "error"
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;  // so far
  int64_t cached_tokens = 0;      // prompt tokens served from the prefix cache
  // With EngineRequest::return_prompt_logits, in the output of the first
  // token: logits [vocab_size] of the prompt's last position.
  std::vector<float> prompt_logits;
};

}  // namespace xrt
