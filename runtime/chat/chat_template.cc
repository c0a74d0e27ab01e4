#include "runtime/chat/chat_template.h"

#include "runtime/chat/template_ast.h"

namespace xrt {

struct ChatTemplate::Impl {
  std::string source;
  chat::NodeList nodes;
};

Expected<ChatTemplate> ChatTemplate::Parse(std::string source) {
  auto impl = std::make_shared<Impl>();
  try {
    impl->nodes = chat::ParseTemplate(source);
  } catch (const chat::TemplateError& e) {
    return InvalidArgumentError("chat template syntax error at line {}, column {}: {}", e.line,
                                e.col, e.what());
  } catch (const std::exception& e) {
    return InternalError("chat template parser failed: {}", e.what());
  }
  impl->source = std::move(source);
  return ChatTemplate(std::move(impl));
}

const std::string& ChatTemplate::source() const { return impl_->source; }

template <typename Json>
Expected<std::string> ChatTemplate::RenderImpl(const Json& context) const {
  if (!context.is_object())
    return InvalidArgumentError("chat template context must be a JSON object");
  try {
    chat::Value root = chat::Value::FromJson(context);
    return chat::RenderTemplate(impl_->nodes, root);
  } catch (const chat::TemplateError& e) {
    if (e.raised) return InvalidArgumentError("{}", e.what());
    if (e.line > 0)
      return InvalidArgumentError("chat template error at line {}, column {}: {}", e.line, e.col,
                                  e.what());
    return InvalidArgumentError("chat template error: {}", e.what());
  } catch (const std::exception& e) {
    return InternalError("chat template rendering failed: {}", e.what());
  }
}

Expected<std::string> ChatTemplate::Render(const nlohmann::json& context) const {
  return RenderImpl(context);
}
Expected<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  return RenderImpl(context);
}

Expected<std::string> ApplyChatTemplate(const ChatTemplate& tmpl,
                                        const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt, const std::string& bos_token,
                                        const std::string& eos_token,
                                        const nlohmann::ordered_json& extra) {
  if (!messages.is_array()) return InvalidArgumentError("messages must be a JSON array");
  if (!extra.is_null() && !extra.is_object())
    return InvalidArgumentError("extra template variables must be an object");
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = messages;
  ctx["tools"] = nullptr;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = bos_token;
  ctx["eos_token"] = eos_token;
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) ctx[it.key()] = it.value();
  return tmpl.Render(ctx);
}

}  // namespace xrt
