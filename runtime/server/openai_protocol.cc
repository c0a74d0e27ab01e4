#include "runtime/server/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/base/json_parse.h"
#include "runtime/tokenizer/tokenizer.h"

namespace xrt {
namespace server {

using Json = nlohmann::ordered_json;

namespace {

const char* JsonTypeName(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::string:
      return "string";
    case Json::value_t::array:
      return "array";
    case Json::value_t::object:
      return "object";
    case Json::value_t::number_float:
      return "number";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    default:
      return "value";
  }
}

// Reads optional top-level fields of a request object; null means absent.
// Records the field name of the first error in *param.
class FieldReader {
 public:
  FieldReader(const Json& obj, std::string* param) : obj_(obj), param_(param) {}

  const Json* Get(const char* name) const {
    auto it = obj_.find(name);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  Status Fail(const std::string& name, Status status) {
    if (param_) *param_ = name;
    return status;
  }
  Status TypeError(const std::string& name, const char* want, const Json& got) {
    return Fail(name,
                InvalidArgumentError("'{}' must be {}, got {}", name, want, JsonTypeName(got)));
  }

  Status Bool(const char* name, bool* out) {
    const Json* v = Get(name);
    if (!v) return Status::Ok();
    if (!v->is_boolean()) return TypeError(name, "a boolean", *v);
    *out = v->get<bool>();
    return Status::Ok();
  }
  Status Float(const char* name, float* out) {
    const Json* v = Get(name);
    if (!v) return Status::Ok();
    if (!v->is_number()) return TypeError(name, "a number", *v);
    *out = v->get<float>();
    return Status::Ok();
  }
  Status Int(const char* name, int64_t lo, int64_t hi, int64_t* out, bool* present = nullptr) {
    const Json* v = Get(name);
    if (present) *present = v != nullptr;
    if (!v) return Status::Ok();
    if (!v->is_number_integer()) return TypeError(name, "an integer", *v);
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi))
      return Fail(name, InvalidArgumentError("'{}' must be in [{}, {}], got {}", name, lo, hi,
                                             v->get<uint64_t>()));
    int64_t x = v->get<int64_t>();
    if (x < lo || x > hi)
      return Fail(name, InvalidArgumentError("'{}' must be in [{}, {}], got {}", name, lo, hi, x));
    *out = x;
    return Status::Ok();
  }
  Status String(const char* name, std::string* out) {
    const Json* v = Get(name);
    if (!v) return Status::Ok();
    if (!v->is_string()) return TypeError(name, "a string", *v);
    *out = v->get<std::string>();
    return Status::Ok();
  }

 private:
  const Json& obj_;
  std::string* param_;
};

Expected<Json> ParseBody(std::string_view body) {
  bool too_deep = false;
  Json j = ParseJsonBounded<Json>(body, &too_deep);
  if (too_deep)
    return InvalidArgumentError("request body nests more than {} levels deep", kMaxJsonDepth);
  if (j.is_discarded()) return InvalidArgumentError("request body is not valid JSON");
  if (!j.is_object())
    return InvalidArgumentError("request body must be a JSON object, got {}", JsonTypeName(j));
  return j;
}

// Fields common to both endpoints.
Status ParseCommon(const Json& j, FieldReader& r, OpenAiRequest* req) {
  XRT_RETURN_IF_ERROR(r.String("model", &req->model));
  if (!r.Get("model")) return r.Fail("model", InvalidArgumentError("'model' is required"));

  int64_t max_tokens = -1;
  bool has_max_tokens = false, has_max_completion_tokens = false;
  constexpr int64_t k_big = std::numeric_limits<int32_t>::max();
  XRT_RETURN_IF_ERROR(r.Int("max_tokens", 1, k_big, &max_tokens, &has_max_tokens));
  if (req->kind == ApiKind::kChat) {
    int64_t mct = -1;
    XRT_RETURN_IF_ERROR(r.Int("max_completion_tokens", 1, k_big, &mct, &has_max_completion_tokens));
    if (has_max_completion_tokens) max_tokens = mct;  // the newer name wins
  }
  req->max_tokens = max_tokens;

  SamplingParams& s = req->sampling;
  XRT_RETURN_IF_ERROR(r.Float("temperature", &s.temperature));
  XRT_RETURN_IF_ERROR(r.Float("top_p", &s.top_p));
  int64_t top_k = s.top_k;
  XRT_RETURN_IF_ERROR(r.Int("top_k", -1, k_big, &top_k));
  s.top_k = static_cast<int32_t>(top_k);
  XRT_RETURN_IF_ERROR(r.Float("min_p", &s.min_p));
  XRT_RETURN_IF_ERROR(r.Float("presence_penalty", &s.presence_penalty));
  XRT_RETURN_IF_ERROR(r.Float("frequency_penalty", &s.frequency_penalty));
  XRT_RETURN_IF_ERROR(r.Float("repetition_penalty", &s.repetition_penalty));
  req->sampling_set = {r.Get("temperature") != nullptr, r.Get("top_p") != nullptr,
                       r.Get("top_k") != nullptr, r.Get("repetition_penalty") != nullptr};
  if (const Json* seed = r.Get("seed")) {
    if (!seed->is_number_integer()) return r.TypeError("seed", "an integer", *seed);
    s.has_seed = true;
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>()
                                        : static_cast<uint64_t>(seed->get<int64_t>());
  }

  int64_t n = 1;
  XRT_RETURN_IF_ERROR(r.Int("n", 1, kMaxChoices, &n));
  req->n = static_cast<int>(n);

  if (const Json* stop = r.Get("stop")) {
    if (stop->is_string()) {
      req->stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      if (stop->size() > static_cast<size_t>(kMaxStopStrings))
        return r.Fail("stop", InvalidArgumentError("'stop' may hold at most {} strings, got {}",
                                                   kMaxStopStrings, stop->size()));
      for (const Json& s : *stop) {
        if (!s.is_string()) return r.TypeError("stop", "a string or a list of strings", s);
        req->stop.push_back(s.get<std::string>());
      }
    } else {
      return r.TypeError("stop", "a string or a list of strings", *stop);
    }
    for (const std::string& s : req->stop)
      if (s.empty())
        return r.Fail("stop", InvalidArgumentError("'stop' strings must not be empty"));
  }
  if (const Json* ids = r.Get("stop_token_ids")) {
    if (!ids->is_array()) return r.TypeError("stop_token_ids", "a list of integers", *ids);
    for (const Json& id : *ids) {
      if (!id.is_number_integer()) return r.TypeError("stop_token_ids", "a list of integers", id);
      req->stop_token_ids.push_back(id.get<int32_t>());
    }
  }

  XRT_RETURN_IF_ERROR(r.Bool("stream", &req->stream));
  if (const Json* so = r.Get("stream_options")) {
    if (!so->is_object()) return r.TypeError("stream_options", "an object", *so);
    auto it = so->find("include_usage");
    if (it != so->end() && !it->is_null()) {
      if (!it->is_boolean()) return r.TypeError("stream_options.include_usage", "a boolean", *it);
      req->include_usage = it->get<bool>();
    }
    if (!req->stream)
      return r.Fail("stream_options",
                    InvalidArgumentError("'stream_options' is only allowed when 'stream' is true"));
  }
  XRT_RETURN_IF_ERROR(r.Bool("ignore_eos", &req->ignore_eos));
  XRT_RETURN_IF_ERROR(r.Bool("skip_special_tokens", &req->skip_special_tokens));
  bool echo = false;
  XRT_RETURN_IF_ERROR(r.Bool("echo", &echo));
  if (echo) return r.Fail("echo", UnimplementedError("'echo' is not supported"));
  // "user" is accepted and ignored, like every unknown field.
  (void)j;
  return Status::Ok();
}

// Validates sampling parameters; the field name is the first word of the
// validator's message ("top_p must be in (0, 1], got 1.5").
Status ValidateSampling(FieldReader& r, const SamplingParams& s, const char* logprobs_field) {
  Status st = ValidateSamplingParams(s);
  if (st.ok()) return st;
  std::string field = st.message().substr(0, st.message().find(' '));
  if (field == "logprobs") field = logprobs_field;
  return r.Fail(field, st);
}

// A chat message's content in both forms the template may need.
struct ParsedContent {
  Json text;   // the text parts joined with "\n" (a string)
  Json parts;  // [{"type": "text", "text": ...}, {"type": "image"}, ...]
  bool has_text = false;
};

// The url and detail of an image part: "image_url" is {"url", "detail"} or,
// as vLLM also accepts, the URL itself.
Status ParseImageUrl(const Json& image_url, const std::string& field, ImagePart* out) {
  if (image_url.is_string()) {
    out->url = image_url.get<std::string>();
  } else if (image_url.is_object()) {
    auto url = image_url.find("url");
    if (url == image_url.end() || url->is_null())
      return InvalidArgumentError("{}: 'image_url' has no 'url'", field);
    if (!url->is_string())
      return InvalidArgumentError("{}: 'image_url.url' must be a string, got {}", field,
                                  JsonTypeName(*url));
    out->url = url->get<std::string>();
    auto detail = image_url.find("detail");
    if (detail != image_url.end() && !detail->is_null()) {
      if (!detail->is_string())
        return InvalidArgumentError("{}: 'image_url.detail' must be a string, got {}", field,
                                    JsonTypeName(*detail));
      out->detail = detail->get<std::string>();
      if (out->detail != "auto" && out->detail != "low" && out->detail != "high")
        return InvalidArgumentError(
            "{}: 'image_url.detail' must be one of auto, low, high; got '{}'", field, out->detail);
    }
  } else {
    return InvalidArgumentError(
        "{}: 'image_url' must be an object with a 'url' (or the URL as a string), got {}", field,
        JsonTypeName(image_url));
  }
  if (out->url.empty()) return InvalidArgumentError("{}: the image URL is empty", field);
  return Status::Ok();
}

// One content part: a text part appends to *content, an image part also to
// *images. Errors name the part ("messages[1].content[2]: ...").
Status ParseContentPart(const Json& part, int message_index, int part_index, FieldReader& r,
                        ParsedContent* content, std::vector<ImagePart>* images) {
  const std::string field = fmt::format("messages[{}].content[{}]", message_index, part_index);
  auto text_part = [&](const std::string& text) {
    std::string& joined = content->text.get_ref<std::string&>();
    if (content->has_text) joined += "\n";
    joined += text;
    content->has_text = true;
    content->parts.push_back(Json{{"type", "text"}, {"text", text}});
    return Status::Ok();
  };
  if (part.is_string()) return text_part(part.get<std::string>());  // as vLLM
  if (!part.is_object())
    return r.Fail(field, InvalidArgumentError("{}: a content part must be an object, got {}", field,
                                              JsonTypeName(part)));
  auto type = part.find("type");
  std::string t;
  if (type == part.end() || type->is_null()) {
    // vLLM's shorthand: {"image_url": ...} without a type.
    if (!part.contains("image_url"))
      return r.Fail(field, InvalidArgumentError("{}: the content part has no 'type'", field));
    t = "image_url";
  } else if (!type->is_string()) {
    return r.Fail(field, InvalidArgumentError("{}: 'type' must be a string, got {}", field,
                                              JsonTypeName(*type)));
  } else {
    t = type->get<std::string>();
  }
  if (t == "text") {
    auto text = part.find("text");
    if (text == part.end() || text->is_null())
      return r.Fail(field, InvalidArgumentError("{}: a text part needs 'text'", field));
    if (!text->is_string())
      return r.Fail(field, InvalidArgumentError("{}: 'text' must be a string, got {}", field,
                                                JsonTypeName(*text)));
    return text_part(text->get<std::string>());
  }
  if (t == "image_url") {
    auto image_url = part.find("image_url");
    if (image_url == part.end() || image_url->is_null())
      return r.Fail(field, InvalidArgumentError("{}: an image_url part needs 'image_url'", field));
    ImagePart image;
    image.detail = "auto";
    image.message_index = message_index;
    image.part_index = part_index;
    if (Status s = ParseImageUrl(*image_url, field, &image); !s.ok()) return r.Fail(field, s);
    images->push_back(std::move(image));
    content->parts.push_back(Json{{"type", "image"}});
    return Status::Ok();
  }
  return r.Fail(
      field, InvalidArgumentError(
                 "{}: unsupported content part type '{}' (supported: text, image_url)", field, t));
}

// A chat message's content: a string or a list of parts.
Expected<ParsedContent> ParseContent(const Json& content, int message_index, FieldReader& r,
                                     std::vector<ImagePart>* images) {
  ParsedContent out{Json(""), Json::array()};
  if (content.is_string()) {
    out.text = content;
    out.parts.push_back(Json{{"type", "text"}, {"text", content}});
    return out;
  }
  if (!content.is_array())
    return r.TypeError(fmt::format("messages[{}].content", message_index),
                       "a string or a list of content parts", content);
  for (size_t j = 0; j < content.size(); ++j)
    XRT_RETURN_IF_ERROR(
        ParseContentPart(content[j], message_index, static_cast<int>(j), r, &out, images));
  return out;
}

// The fields only /v1/completions has: the prompt and logprobs.
Status ParseCompletionFields(FieldReader& r, OpenAiRequest* request) {
  OpenAiRequest& req = *request;
  const Json* prompt = r.Get("prompt");
  if (!prompt) return r.Fail("prompt", InvalidArgumentError("'prompt' is required"));
  if (prompt->is_string()) {
    req.prompt = prompt->get<std::string>();
  } else if (prompt->is_array()) {
    // A list of one string is the same as the string; batches of prompts and
    // token-id prompts are not supported.
    if (prompt->size() == 1 && (*prompt)[0].is_string()) {
      req.prompt = (*prompt)[0].get<std::string>();
    } else if (!prompt->empty() && ((*prompt)[0].is_number_integer() || (*prompt)[0].is_array())) {
      return r.Fail(
          "prompt",
          UnimplementedError("token-id prompts are not supported; send the prompt as a string"));
    } else {
      return r.Fail("prompt",
                    UnimplementedError("'prompt' must be a string or a list of exactly one string; "
                                       "send one request per prompt"));
    }
  } else {
    return r.TypeError("prompt", "a string", *prompt);
  }

  int64_t logprobs = -1;
  XRT_RETURN_IF_ERROR(r.Int("logprobs", 0, SamplingParams::kMaxLogprobs, &logprobs));
  req.sampling.logprobs = static_cast<int32_t>(logprobs);
  return Status::Ok();
}

// The fields only /v1/chat/completions has: messages, tools and logprobs.
Status ParseChatFields(FieldReader& r, OpenAiRequest* request) {
  OpenAiRequest& req = *request;
  const Json* messages = r.Get("messages");
  if (!messages) return r.Fail("messages", InvalidArgumentError("'messages' is required"));
  if (!messages->is_array()) return r.TypeError("messages", "a list of messages", *messages);
  if (messages->empty())
    return r.Fail("messages", InvalidArgumentError("'messages' must not be empty"));
  for (size_t i = 0; i < messages->size(); ++i) {
    const Json& m = (*messages)[i];
    std::string field = fmt::format("messages[{}]", i);
    if (!m.is_object()) return r.TypeError(field, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string())
      return r.Fail(field + ".role", InvalidArgumentError("'{}.role' must be a string", field));
    const std::string role_name = role->get<std::string>();
    if (role_name != "system" && role_name != "user" && role_name != "assistant" &&
        role_name != "tool" && role_name != "developer")
      return r.Fail(
          field + ".role",
          InvalidArgumentError("'{}.role' must be one of system, user, assistant, tool; got '{}'",
                               field, role_name));
    Json as_text = m, as_parts = m;
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (role_name != "assistant")
        return r.Fail(field + ".content", InvalidArgumentError("'{}.content' is required", field));
      as_text["content"] = nullptr;
      as_parts["content"] = Json::array();
    } else {
      XRT_ASSIGN_OR_RETURN(ParsedContent c,
                           ParseContent(*content, static_cast<int>(i), r, &req.images));
      const bool text_only = std::all_of(c.parts.begin(), c.parts.end(),
                                         [](const Json& p) { return p["type"] == "text"; });
      as_parts["content"] = role_name == "tool" && text_only ? c.text : std::move(c.parts);
      as_text["content"] = std::move(c.text);
    }
    req.messages.push_back(std::move(as_text));
    req.message_parts.push_back(std::move(as_parts));
  }
  // With images the template gets the parts (see OpenAiRequest::messages).
  if (!req.images.empty()) req.messages = req.message_parts;
  if (const Json* tools = r.Get("tools")) {
    if (!tools->is_array()) return r.TypeError("tools", "a list of tools", *tools);
    // The shape vLLM's ChatCompletionToolsParam accepts (other keys pass through, as
    // there): {"type": "function", "function": {"name": str, "description": str,
    // "parameters": object}}, type and the last two optional.
    for (size_t i = 0; i < tools->size(); ++i) {
      const Json& t = (*tools)[i];
      const std::string at = fmt::format("tools[{}]", i);
      if (!t.is_object()) return r.TypeError(at, "an object", t);
      auto type = t.find("type");
      if (type != t.end() && !(type->is_string() && *type == "function"))
        return r.Fail(at + ".type", InvalidArgumentError("'{}.type' must be \"function\"", at));
      auto fn = t.find("function");
      if (fn == t.end())
        return r.Fail(at + ".function", InvalidArgumentError("'{}.function' is required", at));
      if (!fn->is_object()) return r.TypeError(at + ".function", "an object", *fn);
      auto name = fn->find("name");
      if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
        return r.Fail(at + ".function.name",
                      InvalidArgumentError("'{}.function.name' must be a non-empty string", at));
      auto desc = fn->find("description");
      if (desc != fn->end() && !desc->is_null() && !desc->is_string())
        return r.TypeError(at + ".function.description", "a string", *desc);
      auto params = fn->find("parameters");
      if (params != fn->end() && !params->is_null() && !params->is_object())
        return r.TypeError(at + ".function.parameters", "an object", *params);
    }
    req.tools = *tools;
  }

  bool logprobs = false;
  XRT_RETURN_IF_ERROR(r.Bool("logprobs", &logprobs));
  int64_t top_logprobs = 0;
  bool has_top = false;
  XRT_RETURN_IF_ERROR(
      r.Int("top_logprobs", 0, SamplingParams::kMaxLogprobs, &top_logprobs, &has_top));
  if (has_top && !logprobs)
    return r.Fail("top_logprobs",
                  InvalidArgumentError("'top_logprobs' requires 'logprobs' to be true"));
  req.sampling.logprobs = logprobs ? static_cast<int32_t>(top_logprobs) : -1;
  return Status::Ok();
}

// Both endpoints: the body, the common fields, the endpoint's own fields, then
// the sampling parameters as a whole (a logprobs error names the endpoint's field).
Expected<OpenAiRequest> ParseRequest(std::string_view body, ApiKind kind, std::string* out_param) {
  std::string local_param;
  std::string* param = out_param ? out_param : &local_param;
  param->clear();
  XRT_ASSIGN_OR_RETURN(Json j, ParseBody(body));
  FieldReader r(j, param);
  OpenAiRequest req;
  req.kind = kind;
  XRT_RETURN_IF_ERROR(ParseCommon(j, r, &req));
  const bool chat = kind == ApiKind::kChat;
  XRT_RETURN_IF_ERROR(chat ? ParseChatFields(r, &req) : ParseCompletionFields(r, &req));
  XRT_RETURN_IF_ERROR(ValidateSampling(r, req.sampling, chat ? "top_logprobs" : "logprobs"));
  return req;
}

}  // namespace

std::string ImagePart::Field() const {
  return fmt::format("messages[{}].content[{}]", message_index, part_index);
}

Expected<OpenAiRequest> ParseCompletionRequest(std::string_view body, std::string* out_param) {
  return ParseRequest(body, ApiKind::kCompletion, out_param);
}

Expected<OpenAiRequest> ParseChatRequest(std::string_view body, std::string* out_param) {
  return ParseRequest(body, ApiKind::kChat, out_param);
}

namespace {

// A required, non-empty string field of a LoRA adapter request; `missing` is
// the message when it is absent, null or "".
Status LoraNameField(FieldReader& r, const char* name, const std::string& missing,
                     std::string* out) {
  XRT_RETURN_IF_ERROR(r.String(name, out));
  if (out->empty()) return r.Fail(name, InvalidArgumentError("{}", missing));
  return Status::Ok();
}

}  // namespace

Expected<LoraAdapterRequest> ParseLoadLoraAdapterRequest(std::string_view body,
                                                         std::string* out_param) {
  if (out_param) out_param->clear();
  XRT_ASSIGN_OR_RETURN(Json j, ParseBody(body));
  FieldReader r(j, out_param);
  const std::string missing = "Both 'lora_name' and 'lora_path' must be provided.";
  LoraAdapterRequest req;
  XRT_RETURN_IF_ERROR(LoraNameField(r, "lora_name", missing, &req.lora_name));
  XRT_RETURN_IF_ERROR(LoraNameField(r, "lora_path", missing, &req.lora_path));
  return req;
}

Expected<LoraAdapterRequest> ParseUnloadLoraAdapterRequest(std::string_view body,
                                                           std::string* out_param) {
  if (out_param) out_param->clear();
  XRT_ASSIGN_OR_RETURN(Json j, ParseBody(body));
  FieldReader r(j, out_param);
  LoraAdapterRequest req;
  XRT_RETURN_IF_ERROR(
      LoraNameField(r, "lora_name", "'lora_name' must be provided.", &req.lora_name));
  return req;
}

Json ModelListJson(const std::vector<ModelCard>& cards) {
  Json data = Json::array();
  for (const ModelCard& c : cards) {
    Json m;
    m["id"] = c.id;
    m["object"] = "model";
    m["created"] = c.created;
    m["owned_by"] = "xrt";
    m["root"] = c.root;
    m["parent"] = c.parent.empty() ? Json(nullptr) : Json(c.parent);
    m["max_model_len"] = c.max_model_len < 0 ? Json(nullptr) : Json(c.max_model_len);
    data.push_back(std::move(m));
  }
  return Json{{"object", "list"}, {"data", std::move(data)}};
}

ApiError ApiErrorFromStatus(const Status& status, std::string param) {
  ApiError e;
  e.message = status.message();
  e.param = std::move(param);
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kUnimplemented:
      e.http_status = 400;
      e.type = "invalid_request_error";
      break;
    case StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "not_found_error";
      break;
    case StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      break;
    case StatusCode::kUnavailable:
    case StatusCode::kFailedPrecondition:
      e.http_status = 503;
      e.type = "service_unavailable_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

Json ApiErrorJson(const ApiError& error) {
  Json inner;
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param.empty() ? Json(nullptr) : Json(error.param);
  inner["code"] = error.code.empty() ? Json(nullptr) : Json(error.code);
  Json j;
  j["error"] = std::move(inner);
  return j;
}

std::string DumpJson(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json UsageJson(const UsageInfo& usage) {
  Json j;
  j["prompt_tokens"] = usage.prompt_tokens;
  j["completion_tokens"] = usage.completion_tokens;
  j["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  j["prompt_tokens_details"] = Json{{"cached_tokens", usage.cached_tokens}};
  return j;
}

namespace {

// -inf (a token truncation removed) is not JSON; OpenAI clients expect a number.
double FiniteLogprob(float lp) { return std::isfinite(lp) ? lp : -9999.0; }

std::string TokenText(const Tokenizer& tok, int32_t id) { return tok.TokenBytes(id); }

Json BytesJson(const std::string& bytes) {
  Json arr = Json::array();
  for (unsigned char c : bytes) arr.push_back(static_cast<int>(c));
  return arr;
}

}  // namespace

Json CompletionLogprobsJson(const std::vector<GeneratedToken>& tokens, const Tokenizer& tokenizer,
                            int64_t* inout_text_offset) {
  Json j;
  Json toks = Json::array(), lps = Json::array(), tops = Json::array(), offsets = Json::array();
  for (const GeneratedToken& t : tokens) {
    std::string text = TokenText(tokenizer, t.token);
    toks.push_back(text);
    lps.push_back(FiniteLogprob(t.logprob));
    Json top = Json::object();
    for (const TokenLogprob& tl : t.top_logprobs)
      top[TokenText(tokenizer, tl.token)] = FiniteLogprob(tl.logprob);
    if (!top.contains(text)) top[text] = FiniteLogprob(t.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(*inout_text_offset);
    *inout_text_offset += static_cast<int64_t>(text.size());
  }
  j["tokens"] = std::move(toks);
  j["token_logprobs"] = std::move(lps);
  j["top_logprobs"] = std::move(tops);
  j["text_offset"] = std::move(offsets);
  return j;
}

Json ChatLogprobsJson(const std::vector<GeneratedToken>& tokens, const Tokenizer& tokenizer) {
  Json content = Json::array();
  for (const GeneratedToken& t : tokens) {
    std::string text = TokenText(tokenizer, t.token);
    Json e;
    e["token"] = text;
    e["logprob"] = FiniteLogprob(t.logprob);
    e["bytes"] = BytesJson(text);
    Json tops = Json::array();
    for (const TokenLogprob& tl : t.top_logprobs) {
      std::string tt = TokenText(tokenizer, tl.token);
      tops.push_back(
          Json{{"token", tt}, {"logprob", FiniteLogprob(tl.logprob)}, {"bytes", BytesJson(tt)}});
    }
    e["top_logprobs"] = std::move(tops);
    content.push_back(std::move(e));
  }
  return Json{{"content", std::move(content)}};
}

namespace {

Json Header(const ResponseHeader& h, const char* object) {
  Json j;
  j["id"] = h.id;
  j["object"] = object;
  j["created"] = h.created;
  j["model"] = h.model;
  return j;
}

Json FinishReasonJson(const std::string& r) { return r.empty() ? Json(nullptr) : Json(r); }

}  // namespace

Json CompletionResponseJson(const OpenAiRequest& request, const ResponseHeader& header,
                            const std::vector<ChoiceResult>& choices, const UsageInfo& usage,
                            const Tokenizer& tokenizer) {
  Json j = Header(header, "text_completion");
  Json arr = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    Json c;
    c["index"] = static_cast<int>(i);
    c["text"] = choices[i].text;
    if (request.sampling.logprobs >= 0) {
      int64_t offset = 0;
      c["logprobs"] = CompletionLogprobsJson(choices[i].tokens, tokenizer, &offset);
    } else {
      c["logprobs"] = nullptr;
    }
    c["finish_reason"] = FinishReasonJson(choices[i].finish_reason);
    arr.push_back(std::move(c));
  }
  j["choices"] = std::move(arr);
  j["usage"] = UsageJson(usage);
  return j;
}

Json ChatResponseJson(const OpenAiRequest& request, const ResponseHeader& header,
                      const std::vector<ChoiceResult>& choices, const UsageInfo& usage,
                      const Tokenizer& tokenizer) {
  Json j = Header(header, "chat.completion");
  Json arr = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    Json c;
    c["index"] = static_cast<int>(i);
    c["message"] = Json{{"role", "assistant"}, {"content", choices[i].text}};
    c["logprobs"] = request.sampling.logprobs >= 0 ? ChatLogprobsJson(choices[i].tokens, tokenizer)
                                                   : Json(nullptr);
    c["finish_reason"] = FinishReasonJson(choices[i].finish_reason);
    arr.push_back(std::move(c));
  }
  j["choices"] = std::move(arr);
  j["usage"] = UsageJson(usage);
  return j;
}

Json CompletionChunkJson(const OpenAiRequest& request, const ResponseHeader& header, int index,
                         const std::string& text, Json logprobs, const std::string& finish_reason) {
  Json j = Header(header, "text_completion");
  Json c;
  c["index"] = index;
  c["text"] = text;
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = FinishReasonJson(finish_reason);
  j["choices"] = Json::array({std::move(c)});
  if (request.include_usage) j["usage"] = nullptr;
  return j;
}

Json ChatChunkJson(const OpenAiRequest& request, const ResponseHeader& header, int index,
                   Json delta, Json logprobs, const std::string& finish_reason) {
  Json j = Header(header, "chat.completion.chunk");
  Json c;
  c["index"] = index;
  c["delta"] = std::move(delta);
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = FinishReasonJson(finish_reason);
  j["choices"] = Json::array({std::move(c)});
  if (request.include_usage) j["usage"] = nullptr;
  return j;
}

Json UsageChunkJson(const OpenAiRequest& request, const ResponseHeader& header,
                    const UsageInfo& usage) {
  Json j =
      Header(header, request.kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = Json::array();
  j["usage"] = UsageJson(usage);
  return j;
}

std::string SseEvent(const Json& j) { return "data: " + DumpJson(j) + "\n\n"; }

}  // namespace server
}  // namespace xrt
