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
//   4. validation against the limits served at (Validate).
//
// Errors are InvalidArgument with OpenAI's wording where clients depend on it
// (the context length message); `error`, when given, names the request field
// at fault (OpenAI's error.param) and an error code (error.code).
//
// Ownership: borrows the tokenizer and chat template (must outlive it).
// Thread-safety: immutable; Process and Validate may run on any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/status.h"
#include "runtime/engine/engine_request.h"
#include "runtime/engine/serving_limits.h"
#include "runtime/sampler/sampling_params.h"

namespace xrt {

class ChatTemplate;
class Tokenizer;

enum class PromptKind {
  kText,    // GenerationRequest::prompt
  kChat,    // GenerationRequest::messages (+ tools)
  kTokens,  // GenerationRequest::prompt_token_ids
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
};

class RequestProcessor {
 public:
  explicit RequestProcessor(RequestProcessorParams params) : params_(std::move(params)) {}

  // Steps 1-4 of the file comment.
  Expected<EngineRequest> Process(const GenerationRequest& request,
                                  RequestError* error = nullptr) const;

  // Step 4 alone, for a request already made: sampling params, an empty
  // prompt, max_tokens < 1, prompt + max_tokens > max_model_len (OpenAI's
  // context length message, code "context_length_exceeded"), more KV blocks
  // than the pool, prompt token ids outside the vocabulary.
  Status Validate(const EngineRequest& request, RequestError* error = nullptr) const;

  const RequestProcessorParams& params() const { return params_; }

 private:
  Status Check(const EngineRequest& request, PromptKind kind, bool max_tokens_set,
               RequestError* error) const;
  Expected<std::vector<int32_t>> Tokenize(const GenerationRequest& request,
                                          RequestError* error) const;

  RequestProcessorParams params_;
};

}  // namespace xrt
