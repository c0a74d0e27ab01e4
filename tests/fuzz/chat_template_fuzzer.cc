// libFuzzer target: chat template source -> ChatTemplate::Parse (runtime/chat), then
// rendered the way the server does (ApplyChatTemplate) with a small fixed conversation:
// with and without the generation prompt, and once with a tool list. Parsing and
// rendering must never crash; errors must be InvalidArgument (syntax errors, undefined
// operations, raise_exception), never Internal (an unexpected exception inside).
// The three renders share a budget of kFuzzSteps (a quarter of one server render's):
// a template that runs into the limit then takes well under libFuzzer's -timeout even
// under ASan, where some steps (libc calls the sanitizer intercepts) are slow.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/chat/value.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using ojson = nlohmann::ordered_json;

const ojson& Messages() {
  static const ojson kMessages = ojson::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi! What's 2+2?"},
    {"role": "assistant", "content": "4", "tool_calls": [
      {"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
    {"role": "tool", "content": "4", "tool_call_id": "call_1"},
    {"role": "user", "content": [{"type": "text", "text": "Thanks"}, {"type": "image"}]}
  ])");
  return kMessages;
}

const ojson& Extra() {
  static const ojson kExtra = ojson::parse(R"({
    "tools": [{"type": "function", "function": {"name": "add", "description": "a + b",
      "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                      "b": {"type": "integer"}}}}}],
    "date_string": "26 Jul 2024"
  })");
  return kExtra;
}

constexpr uint64_t kFuzzSteps = xrt::chat::kMaxRenderSteps / 4;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xrt::chat::RenderBudget budget(kFuzzSteps);
  auto tmpl = xrt::ChatTemplate::Parse(std::string(reinterpret_cast<const char*>(data), size));
  xrt::fuzz::CheckNotInternal(tmpl.status());
  if (!tmpl.ok()) return 0;
  for (bool add_generation_prompt : {false, true}) {
    auto out = xrt::ApplyChatTemplate(*tmpl, Messages(), add_generation_prompt, "<s>", "</s>");
    xrt::fuzz::CheckNotInternal(out.status());
  }
  auto out = xrt::ApplyChatTemplate(*tmpl, Messages(), true, "<s>", "</s>", Extra());
  xrt::fuzz::CheckNotInternal(out.status());
  return 0;
}
