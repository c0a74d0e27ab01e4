// Checks xrt_chat against Python jinja2 byte for byte: the real HF chat
// templates in tests/fixtures/chat_templates/*.jinja over many conversations,
// and small feature templates. Regenerate the expectations with
// tests/gen_chat_template_fixtures.py.
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "runtime/chat/chat_template.h"

namespace xrt {
namespace {

using ojson = nlohmann::ordered_json;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::string kDir = std::string(XCC_SOURCE_DIR) + "/tests/fixtures/chat_templates/";

ojson LoadExpected() { return ojson::parse(ReadFile(kDir + "expected.json")); }

TEST(ChatTemplateFixtures, RealTemplatesMatchJinja2) {
  ojson fixtures = LoadExpected();
  const ojson& cases = fixtures.at("cases");
  ASSERT_GE(cases.size(), 100u);
  std::map<std::string, ChatTemplate> templates;
  size_t errors = 0;
  for (const auto& c : cases) {
    std::string file = c.at("template").get<std::string>();
    SCOPED_TRACE(file + " / " + c.at("name").get<std::string>());
    auto it = templates.find(file);
    if (it == templates.end()) {
      auto parsed = ChatTemplate::Parse(ReadFile(kDir + file));
      ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
      it = templates.emplace(file, std::move(parsed).value()).first;
    }
    auto out = it->second.Render(c.at("context"));
    if (c.contains("error")) {
      ++errors;
      ASSERT_FALSE(out.ok()) << "expected an error, rendered: " << *out;
      EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(out.status().message(), c.at("error").get<std::string>());
    } else {
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      EXPECT_EQ(*out, c.at("expected").get<std::string>());
    }
  }
  EXPECT_EQ(templates.size(), 7u);
  EXPECT_GT(errors, 0u);
}

TEST(ChatTemplateFixtures, FeatureTemplatesMatchJinja2) {
  ojson fixtures = LoadExpected();
  const ojson& cases = fixtures.at("features");
  ASSERT_GE(cases.size(), 20u);
  for (const auto& c : cases) {
    std::string src = c.at("template_source").get<std::string>();
    SCOPED_TRACE(src);
    auto t = ChatTemplate::Parse(src);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto out = t->Render(c.at("context"));
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out, c.at("expected").get<std::string>());
  }
}

// ApplyChatTemplate builds the same variables transformers passes.
TEST(ChatTemplateFixtures, ApplyChatTemplateMatchesFixture) {
  ojson fixtures = LoadExpected();
  int checked = 0;
  for (const auto& c : fixtures.at("cases")) {
    if (c.contains("error")) continue;
    const ojson& ctx = c.at("context");
    if (!ctx.at("tools").is_null() || ctx.size() != 6) continue;  // only plain conversations
    auto t = ChatTemplate::Parse(ReadFile(kDir + c.at("template").get<std::string>()));
    ASSERT_TRUE(t.ok());
    auto out = ApplyChatTemplate(
        *t, ctx.at("messages"), ctx.at("add_generation_prompt").get<bool>(),
        ctx.at("bos_token").get<std::string>(), ctx.at("eos_token").get<std::string>());
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out, c.at("expected").get<std::string>()) << c.at("name");
    ++checked;
  }
  EXPECT_GT(checked, 50);
}

}  // namespace
}  // namespace xrt
