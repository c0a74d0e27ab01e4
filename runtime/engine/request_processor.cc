#include "runtime/engine/request_processor.h"

#include <algorithm>

#include "runtime/chat/chat_template.h"
#include "runtime/tokenizer/tokenizer.h"

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

}  // namespace

Expected<std::vector<int32_t>> RequestProcessor::Tokenize(const GenerationRequest& request,
                                                          RequestError* error) const {
  if (request.kind == PromptKind::kTokens) return request.prompt_token_ids;
  const char* param = request.kind == PromptKind::kChat ? "messages" : "prompt";
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
  Expected<std::string> text = ApplyChatTemplate(
      *params_.chat_template, request.messages, /*add_generation_prompt=*/true,
      SpecialTokenText(tok, tok.bos_id()), SpecialTokenText(tok, tok.eos_id()), extra);
  if (!text.ok()) return Fail(error, param, text.status().WithContext("chat template"));
  // Like HF's apply_chat_template(tokenize=True): the template writes the
  // special tokens itself.
  return tok.Encode(*text, /*add_special_tokens=*/false);
}

Expected<EngineRequest> RequestProcessor::Process(const GenerationRequest& request,
                                                  RequestError* error) const {
  XRT_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, Tokenize(request, error));
  EngineRequest r;
  r.request_id = request.request_id;
  r.prompt = std::move(prompt);
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
  return Status::Ok();
}

}  // namespace xrt
