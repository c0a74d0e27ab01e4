// libFuzzer target: HTTP request body -> ParseCompletionRequest / ParseChatRequest
// (runtime/server/openai_protocol.h). Parsing must never crash and rejects bad input with
// InvalidArgument / Unimplemented (never Internal). A chat request that parses is then
// rendered the way the server does (ApplyChatTemplate with its tools, through the Qwen2.5
// and Llama 3.1 templates of tests/fixtures/chat_templates, which use tools), and every
// parsed request gets its response chunks built and serialized with DumpJson.
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/chat/chat_template.h"
#include "runtime/server/openai_protocol.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using ojson = nlohmann::ordered_json;
namespace server = xrt::server;

std::vector<xrt::ChatTemplate>* g_templates = nullptr;

xrt::ChatTemplate LoadTemplate(const std::string& name) {
  const std::string path = std::string(XCC_SOURCE_DIR) + "/tests/fixtures/chat_templates/" + name;
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  auto t = xrt::ChatTemplate::Parse(text.str());
  XCC_FUZZ_CHECK(in.good() && t.ok(), "cannot load " + path);
  return *t;
}

void Exercise(const server::OpenAiRequest& request) {
  const server::ResponseHeader header{"cmpl-fuzz", 1700000000, request.model};
  server::UsageInfo usage;
  usage.prompt_tokens = 3;
  usage.completion_tokens = 1;
  if (request.kind == server::ApiKind::kChat) {
    ojson extra = ojson::object();
    if (!request.tools.is_null()) extra["tools"] = request.tools;
    for (const xrt::ChatTemplate& t : *g_templates) {
      auto text = xrt::ApplyChatTemplate(t, request.messages, true, "<s>", "</s>", extra);
      xrt::fuzz::CheckNotInternal(text.status());
    }
    ojson delta = {{"role", "assistant"}, {"content", "hi"}};
    (void)server::SseEvent(server::ChatChunkJson(request, header, 0, delta, nullptr, "stop"));
  } else {
    (void)server::SseEvent(
        server::CompletionChunkJson(request, header, 0, "hi", nullptr, "length"));
  }
  if (request.include_usage) (void)server::SseEvent(server::UsageChunkJson(request, header, usage));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_templates = new std::vector<xrt::ChatTemplate>{LoadTemplate("qwen2_5.jinja"),
                                                   LoadTemplate("llama3_1.jinja")};
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (auto parse : {&server::ParseCompletionRequest, &server::ParseChatRequest}) {
    std::string param;
    auto request = parse(body, &param);
    xrt::fuzz::CheckNotInternal(request.status());
    if (!request.ok()) {
      (void)server::DumpJson(
          server::ApiErrorJson(server::ApiErrorFromStatus(request.status(), param)));
      continue;
    }
    Exercise(*request);
  }
  return 0;
}
