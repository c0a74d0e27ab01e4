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

// Python integers never overflow; ours are 64-bit, and an overflow is an error
// (never a wrapped value, never undefined behaviour).
TEST(ChatTemplate, IntegerOverflowIsAnError) {
  for (const char* src :
       {"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
        "{{ 4611686018427387904 * 2 }}", "{{ 2 ** 63 }}", "{{ 3 ** 40 }}",
        "{{ (-9223372036854775807 - 1) // -1 }}", "{{ -(-9223372036854775807 - 1) }}",
        "{{ (-9223372036854775807 - 1)|abs }}", "{{ [9223372036854775807, 1]|sum }}",
        "{{ '99999999999999999999'|int }}", "{{ 1e300|int }}", "{{ '1e300'|int }}"}) {
    Status s = RenderError(src);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << src;
    EXPECT_NE(s.message().find("integer overflow"), std::string::npos)
        << src << ": " << s.ToString();
  }
  Status s = RenderError("{{ (1e308 * 10)|int }}");
  EXPECT_NE(s.message().find("cannot convert float infinity"), std::string::npos) << s.ToString();
  s = ParseError("{{ 99999999999999999999 }}");
  EXPECT_NE(s.message().find("does not fit in 64 bits"), std::string::npos) << s.ToString();
  // The largest values still work, and ranges and slices near the limits do not wrap.
  EXPECT_EQ(RenderOrDie("{{ 9223372036854775806 + 1 }} {{ -9223372036854775807 - 1 }}"),
            "9223372036854775807 -9223372036854775808");
  EXPECT_EQ(RenderOrDie("{{ range(9223372036854775800, 9223372036854775807, 5)|list }}"),
            "[9223372036854775800, 9223372036854775805]");
  EXPECT_EQ(RenderOrDie("{{ range(0, -9223372036854775807 - 1, -9223372036854775807 - 1)|list }}"),
            "[0]");
  EXPECT_EQ(
      RenderOrDie("{{ [1, 2, 3][1::9223372036854775807] }}{{ 'abc'[2::-9223372036854775807] }}"),
      "[2]c");
}

// Nesting is bounded where it is parsed, so neither the parser nor rendering
// nor destroying the tree can run out of stack.
TEST(ChatTemplate, DeepNestingIsAnError) {
  auto repeat = [](const std::string& s, int n) {
    std::string out;
    for (int i = 0; i < n; ++i) out += s;
    return out;
  };
  const int kDeep = 5000;  // far past the limits; what overflowed the stack before
  for (const std::string& src :
       {"{{ " + repeat("(", kDeep) + "1" + repeat(")", kDeep) + " }}",
        "{{ " + repeat("-", kDeep) + "1 }}", "{{ " + repeat("not ", kDeep) + "1 }}",
        "{{ " + repeat("[", kDeep) + repeat("]", kDeep) + " }}",
        "{{ 1" + repeat(" + 1", kDeep) + " }}", "{{ x" + repeat(".a", kDeep) + " }}",
        "{{ x" + repeat("|trim", kDeep) + " }}", "{{ x" + repeat("()", kDeep) + " }}",
        "{{ 1" + repeat(" if 1 else 1", kDeep) + " }}"}) {
    Status s = ParseError(src);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("nest more than 256 levels deep"), std::string::npos)
        << s.ToString();
  }
  Status s = ParseError(repeat("{% if 1 %}", kDeep) + repeat("{% endif %}", kDeep));
  EXPECT_NE(s.message().find("blocks nest more than 128 levels deep"), std::string::npos)
      << s.ToString();
  // Within the limits, deep templates work.
  EXPECT_EQ(RenderOrDie("{{ " + repeat("(", 200) + "1" + repeat(")", 200) + repeat(" + 1", 200) +
                        " }}" + repeat("{% if 1 %}", 100) + "x" + repeat("{% endif %}", 100)),
            "201x");
  // Runtime nesting: macro recursion, and values nested in a loop.
  s = RenderError("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}");
  EXPECT_NE(s.message().find("depth limit exceeded"), std::string::npos) << s.ToString();
  s = RenderError(
      "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] %}"
      "{% endfor %}");
  EXPECT_NE(s.message().find("nest more than 256 levels deep"), std::string::npos) << s.ToString();
  // JSON variables nested too deeply (a request's tool arguments, say) are refused.
  const json deep = json::parse(repeat("[", 1000) + repeat("]", 1000));
  s = RenderError("{{ x }}", {{"x", deep}});
  EXPECT_NE(s.message().find("nest more than 256 levels deep"), std::string::npos) << s.ToString();
}

// Every render has a budget of steps and a size limit on what it builds, so a
// template cannot hang a server thread or exhaust its memory.
TEST(ChatTemplate, WorkAndMemoryAreBounded) {
  constexpr size_t kMaxItems = size_t{1} << 20;
  for (const char* src :
       {"{% for i in range(1000000) %}{% for j in range(1000000) %}{% endfor %}{% endfor %}",
        "{% for i in range(1000000) %}{{ range(1000000)|length }}{% endfor %}",
        "{% set s = 'x' * 10000000 %}{% for i in range(1000000) %}{{ 'y' in s }}{% endfor %}"}) {
    Status s = RenderError(src);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("did not finish within"), std::string::npos)
        << src << ": " << s.ToString();
  }
  for (const char* src :
       {"{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
        "{% endfor %}",
        "{{ 'x' * 1000000000000 }}", "{{ ('x' * 1000000) * 1000 }}", "{{ 'x'|indent(1000000000) }}",
        "{{ 1|tojson(indent=1000000000) }}", "{{ ('x' * 1000)|replace('', 'y' * 40000) }}",
        "{% for i in range(100) %}{{ 'x' * 1000000 }}{% endfor %}"}) {
    Status s = RenderError(src);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("over the chat template limit of 32 MiB"), std::string::npos)
        << src << ": " << s.ToString();
  }
  // (A list of a million items takes as many steps to make; JSON variables are not made
  // by the template, and are checked too.)
  json ctx = {{"big", json::array()}};
  ctx["big"].get_ref<json::array_t&>().resize(kMaxItems + 1);
  for (const char* src :
       {"{{ range(2000000)|length }}", "{{ ('x' * 2000000)|list|length }}", "{{ big|length }}"}) {
    Status s = RenderError(src, ctx);
    EXPECT_NE(s.message().find("over the chat template limit of 1048576"), std::string::npos)
        << src << ": " << s.ToString();
  }
  // A namespace that holds itself renders, and is freed (the sanitizer build checks).
  EXPECT_EQ(RenderOrDie("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns.me[0].me|length }}"),
            "1");
}

// The budget is far above what real templates need: a long conversation with
// long messages renders through a real template.
TEST(ChatTemplate, LongConversationsFitTheBudget) {
  auto t = ChatTemplate::Parse(
      "{% for m in messages %}{% if loop.first and m.role != 'system' %}<|system|>default\n{% "
      "endif %}<|{{ m.role }}|>{{ m.content | trim }}{% if not loop.last %}\n{% endif %}{% "
      "endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  const std::string content(1000, 'w');
  for (int i = 0; i < 4000; ++i)
    messages.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", content}});
  auto out = ApplyChatTemplate(*t, messages, true, "<s>", "</s>");
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_GT(out->size(), 4000u * 1000u);
}

}  // namespace
}  // namespace xrt
