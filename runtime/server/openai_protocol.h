// The OpenAI wire protocol of /v1/completions and /v1/chat/completions:
// parsing + validation of request bodies into OpenAiRequest, OpenAI-style
// error objects, and the JSON of responses and streaming chunks.
//
// Pure functions of their arguments (no I/O, no engine); thread-safe.
//
// Parsing follows OpenAI's server: unknown fields are ignored, known fields
// of the wrong type or out of range are an error naming the field
// ("'temperature' must be a number, got string"). Errors are InvalidArgument
// (-> HTTP 400) or Unimplemented (valid OpenAI input we do not support, e.g.
// echo; also -> 400); `out_param`, when non-null, receives the name of the
// offending field ("" when none). Errors in a chat content part name the part:
// "messages[1].content[2]: unsupported content part type 'audio_url' ...",
// param "messages[1].content[2]".
//
// Image parts are parsed here (their URL and place); fetching them is
// media_fetcher.h's, decoding them the vision runtime's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/base/status.h"
#include "runtime/engine/engine_api.h"
#include "runtime/sampler/sampling_params.h"

namespace xrt {

class Tokenizer;

namespace server {

inline constexpr int kMaxChoices = 16;      // n in [1, 16]
inline constexpr int kMaxStopStrings = 16;  // OpenAI allows 4; we allow more

enum class ApiKind { kCompletion, kChat };

// One image of a chat request: an "image_url" content part
// ({"type": "image_url", "image_url": {"url": ..., "detail": ...}}, or the
// shorthands vLLM accepts: "image_url": "<url>", and a part without "type"
// that has "image_url").
struct ImagePart {
  std::string url;            // as sent: data:, http(s):// or file:// (checked when fetched)
  std::string detail;         // "auto" (when absent), "low" or "high"; accepted, not used
  int message_index = 0;      // the part is messages[message_index].content[part_index];
  int part_index = 0;         // also its index in the template's list of parts
  std::string Field() const;  // "messages[1].content[2]"
};

// A validated request of either endpoint.
struct OpenAiRequest {
  ApiKind kind = ApiKind::kCompletion;
  std::string model;
  // kCompletion: the prompt text.
  std::string prompt;
  // kChat: the messages, normalized for the chat template; other keys (name,
  // tool_calls, tool_call_id) are kept as given.
  //  - Without image parts (text-only requests): every content is a string
  //    (text parts joined with "\n") or null (assistant with tool_calls).
  //  - With image parts: `message_parts` (below), so that templates that loop
  //    over message['content'] (llava-hf: {% if content['type'] == 'image' %})
  //    place each image where it was sent.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // kChat: the messages in vLLM's "openai" content format: every content is a
  // list of parts in the order sent, {"type": "text", "text": ...} and
  // {"type": "image"} (the k-th image part is images[k]); a string content is
  // one text part, a null content is []. Tool messages keep their text as one
  // string (as vLLM: most templates expect a string there).
  nlohmann::ordered_json message_parts = nlohmann::ordered_json::array();
  // kChat: the image parts in prompt order (message by message, part by part).
  std::vector<ImagePart> images;
  // kChat: the request's "tools" (null when absent), passed to the template.
  nlohmann::ordered_json tools;
  // max_tokens / max_completion_tokens; -1: unset (completions default to 16,
  // chat to whatever fits in max_model_len).
  int64_t max_tokens = -1;
  SamplingParams sampling;         // sampling.logprobs: top-N (-1: no logprobs)
  SamplingFieldsSet sampling_set;  // the fields the body set (the others take the model's defaults)
  int n = 1;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;  // vLLM extension
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  bool ignore_eos = false;          // vLLM extension
  bool skip_special_tokens = true;  // vLLM extension
};

Expected<OpenAiRequest> ParseCompletionRequest(std::string_view body,
                                               std::string* out_param = nullptr);
Expected<OpenAiRequest> ParseChatRequest(std::string_view body, std::string* out_param = nullptr);

// POST /v1/load_lora_adapter {"lora_name", "lora_path"} and
// /v1/unload_lora_adapter {"lora_name"} (vLLM's runtime LoRA API). Other
// fields are ignored (vLLM's unload also takes "lora_int_id"; adapters here are
// named, so lora_name is required).
struct LoraAdapterRequest {
  std::string lora_name;
  std::string lora_path;  // load only
};

// Both fields must be non-empty strings; a missing or empty one is vLLM's
// "Both 'lora_name' and 'lora_path' must be provided." (param: the field); a
// field of the wrong type is named ("'lora_path' must be a string, got integer").
Expected<LoraAdapterRequest> ParseLoadLoraAdapterRequest(std::string_view body,
                                                         std::string* out_param = nullptr);
// lora_name must be a non-empty string ("'lora_name' must be provided.").
Expected<LoraAdapterRequest> ParseUnloadLoraAdapterRequest(std::string_view body,
                                                           std::string* out_param = nullptr);

// One entry of GET /v1/models (vLLM's ModelCard).
struct ModelCard {
  std::string id;
  std::string root;    // base model: its name; adapter: its PEFT directory
  std::string parent;  // adapter: the base model's id; "" -> null (the base model)
  int64_t created = 0;
  int64_t max_model_len = -1;  // -1 -> null (adapters, as in vLLM)
};

// {"object": "list", "data": [{id, object: "model", created, owned_by: "xrt",
// root, parent, max_model_len}, ...]} in the order given.
nlohmann::ordered_json ModelListJson(const std::vector<ModelCard>& cards);

// An error as the API reports it.
struct ApiError {
  int http_status = 400;
  std::string type =
      "invalid_request_error";  // authentication_error, not_found_error, server_error...
  std::string message;
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};

// Maps a Status to an ApiError: InvalidArgument, OutOfRange, Unimplemented
// -> 400 invalid_request_error; NotFound -> 404 not_found_error;
// ResourceExhausted -> 429; Unavailable / FailedPrecondition -> 503
// service_unavailable_error; anything else -> 500 server_error.
ApiError ApiErrorFromStatus(const Status& status, std::string param = "");

// {"error": {"message", "type", "param", "code"}}.
nlohmann::ordered_json ApiErrorJson(const ApiError& error);

// Serializes JSON for the wire; invalid UTF-8 (e.g. a partial token's
// bytes) is replaced with U+FFFD instead of throwing.
std::string DumpJson(const nlohmann::ordered_json& j);

// The outcome of one choice, accumulated from its RequestOutputs.
struct ChoiceResult {
  std::string text;
  std::vector<GeneratedToken> tokens;
  std::string finish_reason;  // "stop", "length", "abort"
};

struct UsageInfo {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
};

// Identity of one response (shared by all its chunks).
struct ResponseHeader {
  std::string id;       // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
};

// {prompt_tokens, completion_tokens, total_tokens, prompt_tokens_details{cached_tokens}}.
nlohmann::ordered_json UsageJson(const UsageInfo& usage);

// Logprobs of completions: {tokens, token_logprobs, top_logprobs, text_offset}.
// Each top_logprobs dict holds the top-N tokens plus the sampled one (as
// vLLM). `*inout_text_offset` is the offset of the first token in the
// generated text; it is advanced past these tokens.
nlohmann::ordered_json CompletionLogprobsJson(const std::vector<GeneratedToken>& tokens,
                                              const Tokenizer& tokenizer,
                                              int64_t* inout_text_offset);
// Logprobs of chat: {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
nlohmann::ordered_json ChatLogprobsJson(const std::vector<GeneratedToken>& tokens,
                                        const Tokenizer& tokenizer);

// Non-streaming responses: "text_completion" / "chat.completion" objects.
// `tokenizer` is needed only when request.sampling.logprobs >= 0.
nlohmann::ordered_json CompletionResponseJson(const OpenAiRequest& request,
                                              const ResponseHeader& header,
                                              const std::vector<ChoiceResult>& choices,
                                              const UsageInfo& usage, const Tokenizer& tokenizer);
nlohmann::ordered_json ChatResponseJson(const OpenAiRequest& request, const ResponseHeader& header,
                                        const std::vector<ChoiceResult>& choices,
                                        const UsageInfo& usage, const Tokenizer& tokenizer);

// One streaming chunk with one choice. `logprobs` and `finish_reason` may be
// null / "" (-> null). With include_usage every chunk carries "usage": null.
// text_completion chunk: choices[0] = {index, text, logprobs, finish_reason}.
nlohmann::ordered_json CompletionChunkJson(const OpenAiRequest& request,
                                           const ResponseHeader& header, int index,
                                           const std::string& text, nlohmann::ordered_json logprobs,
                                           const std::string& finish_reason);
// chat.completion.chunk: choices[0] = {index, delta, logprobs, finish_reason}.
nlohmann::ordered_json ChatChunkJson(const OpenAiRequest& request, const ResponseHeader& header,
                                     int index, nlohmann::ordered_json delta,
                                     nlohmann::ordered_json logprobs,
                                     const std::string& finish_reason);
// The final usage-only chunk (choices: []) sent when include_usage.
nlohmann::ordered_json UsageChunkJson(const OpenAiRequest& request, const ResponseHeader& header,
                                      const UsageInfo& usage);

// "data: <json>\n\n" and "data: [DONE]\n\n".
std::string SseEvent(const nlohmann::ordered_json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace server
}  // namespace xrt
