// Unit tests of xrt_chat's error reporting and of behaviour the fixtures do
// not pin down (the byte-exact comparisons with jinja2 are in
// chat_template_fixtures_test.cc).
#include <gtest/gtest.h>

#include "runtime/chat/chat_template.h"

namespace xrt {
namespace {

using json = nlohmann::json;

std::string RenderOrDie(const std::string& src, const json& ctx = json::object()) {
  auto t = ChatTemplate::Parse(src);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return "<parse error>";
  auto out = t->Render(ctx);
  EXPECT_TRUE(out.ok()) << out.status().ToString();
  return out.ok() ? *out : "<render error>";
}

Status ParseError(const std::string& src) {
  auto t = ChatTemplate::Parse(src);
  EXPECT_FALSE(t.ok()) << "parsed: " << src;
  return t.status();
}

Status RenderError(const std::string& src, const json& ctx = json::object()) {
  auto t = ChatTemplate::Parse(src);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (!t.ok()) return t.status();
  auto out = t->Render(ctx);
  EXPECT_FALSE(out.ok()) << "rendered: " << (out.ok() ? *out : "");
  return out.status();
}

TEST(ChatTemplate, ParseErrorsNameLineAndColumn) {
  Status s = ParseError("hello\n{% if x %}\nunterminated");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("line 2, column 4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("endif"), std::string::npos) << s.message();

  s = ParseError("ab\n  {{ x + }}");
  EXPECT_NE(s.message().find("line 2, column 10"), std::string::npos) << s.message();

  s = ParseError("{% frobnicate %}");
  EXPECT_NE(s.message().find("line 1, column 4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("frobnicate"), std::string::npos) << s.message();

  s = ParseError("x\n\n   {{ 'abc }}");
  EXPECT_NE(s.message().find("line 3, column 7"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("unterminated string"), std::string::npos) << s.message();

  s = ParseError("{{ a ");
  EXPECT_NE(s.message().find("unclosed tag"), std::string::npos) << s.message();

  s = ParseError("{% endfor %}");
  EXPECT_NE(s.message().find("no open block"), std::string::npos) << s.message();

  s = ParseError("{% for x y %}{% endfor %}");
  EXPECT_NE(s.message().find("expected 'in'"), std::string::npos) << s.message();

  s = ParseError("{# never closed");
  EXPECT_NE(s.message().find("comment"), std::string::npos) << s.message();

  s = ParseError("{{ (1 }}");
  EXPECT_NE(s.message().find("line 1"), std::string::npos) << s.message();
}

TEST(ChatTemplate, RaiseExceptionCarriesTheMessage) {
  Status s = RenderError("ok{{ raise_exception('Conversation roles must alternate!') }}");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "Conversation roles must alternate!");
}

TEST(ChatTemplate, RuntimeErrorsNamePosition) {
  Status s = RenderError("line one\n{{ 'a' + none }}");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("line 2"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'str' and 'NoneType'"), std::string::npos) << s.message();

  // Attribute access on an undefined value is an error, as in jinja2.
  s = RenderError("{{ missing.attr }}");
  EXPECT_NE(s.message().find("'missing' is undefined"), std::string::npos) << s.message();

  s = RenderError("{{ x | nosuchfilter }}", {{"x", 1}});
  EXPECT_NE(s.message().find("unknown filter 'nosuchfilter'"), std::string::npos) << s.message();

  s = RenderError("{{ 1 / 0 }}");
  EXPECT_NE(s.message().find("division by zero"), std::string::npos) << s.message();

  s = RenderError("{% for x in 5 %}{% endfor %}");
  EXPECT_NE(s.message().find("not iterable"), std::string::npos) << s.message();

  s = RenderError("{% set x = 1 %}{% set x.a = 2 %}");
  EXPECT_NE(s.message().find("not a namespace"), std::string::npos) << s.message();

  s = RenderError("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}");
  EXPECT_NE(s.message().find("depth"), std::string::npos) << s.message();
}

// map/selectattr look a dotted attribute up part by part like jinja2's
// environment.getitem: a missing part yields undefined, but looking further
// into it is an error (jinja2: UndefinedError).
TEST(ChatTemplate, DottedAttributeThroughUndefinedIsAnError) {
  const json ctx = {{"ms", {{{"role", "user"}}}}};
  Status s = RenderError("{{ ms|map(attribute='tool_calls.0.function.name')|list }}", ctx);
  EXPECT_NE(s.message().find("has no attribute 'tool_calls'"), std::string::npos) << s.message();
  s = RenderError("{{ ms|selectattr('tool_calls.0')|list }}", ctx);
  EXPECT_NE(s.message().find("has no attribute 'tool_calls'"), std::string::npos) << s.message();
  EXPECT_EQ(RenderOrDie("{{ ms|map(attribute='tool_calls')|list }}", ctx), "[Undefined]");
}

TEST(ChatTemplate, ContextMustBeAnObject) {
  auto t = ChatTemplate::Parse("x");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->Render(json::array()).ok());
}

TEST(ChatTemplate, UndefinedRendersEmpty) {
  EXPECT_EQ(RenderOrDie("[{{ nothing }}][{{ nothing|trim }}][{{ nothing|length }}][{% for x in "
                        "nothing %}x{% endfor %}]"),
            "[][][0][]");
}

TEST(ChatTemplate, OrderedJsonKeepsKeyOrder) {
  auto t = ChatTemplate::Parse("{% for k, v in d.items() %}{{ k }}{% endfor %}|{{ d|tojson }}");
  ASSERT_TRUE(t.ok());
  nlohmann::ordered_json ctx;
  ctx["d"]["zeta"] = 1;
  ctx["d"]["alpha"] = 2;
  auto out = t->Render(ctx);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "zetaalpha|{\"zeta\": 1, \"alpha\": 2}");
  // nlohmann::json sorts its keys.
  auto sorted = t->Render(json(ctx));
  ASSERT_TRUE(sorted.ok());
  EXPECT_EQ(*sorted, "alphazeta|{\"alpha\": 2, \"zeta\": 1}");
}

TEST(ChatTemplate, ApplyChatTemplateSetsHfVariables) {
  auto t = ChatTemplate::Parse(
      "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{{ eos_token }}{% endfor "
      "%}"
      "{% if add_generation_prompt %}<assistant>{% endif %}{{ tools is none }}{{ "
      "extra_var|default('-') }}");
  ASSERT_TRUE(t.ok());
  nlohmann::ordered_json msgs =
      nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
  auto out = ApplyChatTemplate(*t, msgs, true, "<s>", "</s>");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, "<s><user>hi</s><assistant>True-");
  out = ApplyChatTemplate(*t, msgs, false, "", "", {{"extra_var", "X"}, {"tools", {1}}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "<user>hiFalseX");
  EXPECT_FALSE(ApplyChatTemplate(*t, nlohmann::ordered_json::object(), true, "", "").ok());
}

TEST(ChatTemplate, StrftimeNowIsAvailable) {
  std::string year = RenderOrDie("{{ strftime_now('%Y') }}");
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
}

TEST(ChatTemplate, CopiesShareTheParsedTemplate) {
  auto t = ChatTemplate::Parse("{{ x }}!");
  ASSERT_TRUE(t.ok());
  ChatTemplate copy = *t;
  EXPECT_EQ(copy.source(), "{{ x }}!");
  auto out = copy.Render(json{{"x", "y"}});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "y!");
}

}  // namespace
}  // namespace xrt
