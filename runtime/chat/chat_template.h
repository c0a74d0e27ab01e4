// ChatTemplate: renders Hugging Face chat templates (the jinja2 "chat_template"
// of tokenizer_config.json / chat_template.json / GGUF
// tokenizer.chat_template) into the prompt text, byte-identical to
// transformers' apply_chat_template for the templates of Llama 3 / 3.1,
// SmolLM2, Qwen2 / 2.5, Mistral instruct and LLaVA (tests/fixtures/chat_templates).
//
// Supported jinja2 subset: {{ }}, {% if/elif/else %}, {% for %} (loop.*, else,
// `if` filter, tuple unpacking, break/continue), {% set %} (incl. namespace
// attributes and block set), {% macro %}, {% generation %}, comments,
// whitespace control with HF's trim_blocks=True / lstrip_blocks=True;
// Python-like expressions, str/dict methods, the filters and tests HF
// templates use, and the globals raise_exception, strftime_now, namespace,
// range, dict. Undefined variables render as "" like jinja2's Undefined.
// Known gaps: {% raw %}, {% call %}, {% filter %}, {% include %}, recursive
// loops, Unicode case mapping (upper/lower/title are ASCII-only), `%`
// string formatting.
//
// Lifetime/threading: a ChatTemplate is immutable after Parse and cheap to
// copy (shared); Render may be called concurrently from any thread.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/base/status.h"

namespace xrt {

namespace chat {
struct Node;
}

class ChatTemplate {
 public:
  // Parses a template. Syntax errors are InvalidArgument naming the line and
  // column: "chat template syntax error at line 3, column 14: expected ...".
  static Expected<ChatTemplate> Parse(std::string source);

  // Renders with `context` (a JSON object) as the template's variables,
  // typically messages, add_generation_prompt, bos_token, eos_token, tools.
  // Message content may be a string or a list of parts
  // ([{"type": "text", "text": ...}, {"type": "image"}]).
  // Errors are InvalidArgument: raise_exception('msg') in the template gives
  // exactly "msg"; other evaluation errors name the line and column.
  // Dict iteration follows the JSON object's order: use the ordered_json
  // overload to keep the request's key order (e.g. of tool parameters), as
  // Python does; nlohmann::json iterates keys sorted.
  Expected<std::string> Render(const nlohmann::json& context) const;
  Expected<std::string> Render(const nlohmann::ordered_json& context) const;

  const std::string& source() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  template <typename Json>
  Expected<std::string> RenderImpl(const Json& context) const;
  std::shared_ptr<const Impl> impl_;
};

// Renders `messages` the way transformers' apply_chat_template(tokenize=False)
// does: the variables are messages, add_generation_prompt, bos_token,
// eos_token, tools = none and documents = none, then every key of `extra`
// (an object or null; it may override the former, e.g. "tools" or
// "date_string").
Expected<std::string> ApplyChatTemplate(const ChatTemplate& tmpl,
                                        const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt, const std::string& bos_token,
                                        const std::string& eos_token,
                                        const nlohmann::ordered_json& extra = nullptr);

}  // namespace xrt
