// The interpreter of parsed chat templates: statements, expressions, and the
// builtins (filters, tests, str/dict methods, globals) that chat templates use,
// with jinja2's semantics under transformers' ImmutableSandboxedEnvironment.
//
// Scoping: the template's top level is one frame; a for loop body and a macro
// call each get their own frame, so {% set %} inside them does not leak out
// (as in jinja2); namespace() objects are shared and mutable.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <ctime>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>

#include "runtime/chat/template_ast.h"

namespace xrt::chat {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

constexpr int kMaxCallDepth = 64;
// Eval / ExecNode calls nested at once (Python's default recursion limit is
// also 1000 frames); kMaxExprDepth and kMaxBlockDepth bound one expression or
// block, this bounds them through macro calls.
constexpr int kMaxRecursion = 1000;
// A macro call copies the template's top frame and sets up its own: it costs
// as much as this many steps.
constexpr uint64_t kMacroCallSteps = 32;

// ---------------------------------------------------------------- integers
// Python integers never overflow; ours are 64-bit, and overflowing is an error.

[[noreturn]] void IntegerOverflow() {
  throw TemplateError("integer overflow: the result does not fit in 64 bits");
}

int64_t CheckedAdd(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) IntegerOverflow();
  return r;
}
int64_t CheckedSub(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) IntegerOverflow();
  return r;
}
int64_t CheckedMul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) IntegerOverflow();
  return r;
}

// Python's int(float): truncation; infinity and NaN cannot convert.
int64_t FloatToInt(double d) {
  if (std::isnan(d)) throw TemplateError("cannot convert float NaN to integer");
  if (std::isinf(d)) throw TemplateError("cannot convert float infinity to integer");
  d = std::trunc(d);
  if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) IntegerOverflow();
  return static_cast<int64_t>(d);
}

// How many of start, start + step, ... lie before `stop` (Python's range
// length), without overflowing.
uint64_t RangeLength(int64_t start, int64_t stop, int64_t step) {
  if (step > 0 && start < stop)
    return (static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) - 1) /
               static_cast<uint64_t>(step) +
           1;
  if (step < 0 && start > stop)
    return (static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) - 1) /
               (static_cast<uint64_t>(-(step + 1)) + 1) +
           1;
  return 0;
}

// The steps a value costs to make or to scan once: its bytes or items.
uint64_t Cost(const Value& v) {
  if (v.is_string()) return 1 + v.str().size() / kBytesPerStep;
  if (v.is_list()) return 1 + v.list().size();
  if (v.is_dict()) return 1 + v.dict().items.size();
  return 1;
}

// hay.find(needle, from), never quadratic. A plain search costs up to
// needle.size() compares per byte, and is charged so; long needles (which HF
// templates never search for) go through Knuth-Morris-Pratt, linear in both,
// at a step per two bytes (its inner loop is not memchr).
size_t FindText(const std::string& hay, const std::string& needle, size_t from = 0) {
  if (from > hay.size()) return std::string::npos;
  constexpr size_t kShortNeedle = 32;
  if (needle.size() <= kShortNeedle) {
    size_t at = hay.find(needle, from);
    SpendBytes(((at == std::string::npos ? hay.size() : at + needle.size()) - from) *
               std::max<size_t>(1, needle.size()));
    return at;
  }
  Spend(1 + (hay.size() - from + needle.size()) / 2);
  std::vector<size_t> border(needle.size());  // longest proper border of needle[0..i]
  for (size_t i = 1, k = 0; i < needle.size(); ++i) {
    while (k > 0 && needle[i] != needle[k]) k = border[k - 1];
    if (needle[i] == needle[k]) ++k;
    border[i] = k;
  }
  for (size_t i = from, k = 0; i < hay.size(); ++i) {
    while (k > 0 && hay[i] != needle[k]) k = border[k - 1];
    if (hay[i] == needle[k]) ++k;
    if (k == needle.size()) return i + 1 - k;
  }
  return std::string::npos;
}

// ---------------------------------------------------------------- strings

bool IsPySpace(std::string_view cp) {
  if (cp.size() == 1) {
    unsigned char c = static_cast<unsigned char>(cp[0]);
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  }
  static const char* k_spaces[] = {"\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\xa8",
                                   "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
  for (const char* s : k_spaces)
    if (cp == s) return true;
  // U+2000..U+200A
  return cp.size() == 3 && static_cast<unsigned char>(cp[0]) == 0xe2 &&
         static_cast<unsigned char>(cp[1]) == 0x80 && static_cast<unsigned char>(cp[2]) >= 0x80 &&
         static_cast<unsigned char>(cp[2]) <= 0x8a;
}

// The code point at byte i of s.
std::string_view CodePointAt(const std::string& s, size_t i) {
  return std::string_view(s).substr(i, CodePointLength(s, i));
}

// Python str.strip / lstrip / rstrip; chars == nullptr strips whitespace.
std::string PyStrip(const std::string& s, const std::string* chars, bool left, bool right) {
  SpendBytes(s.size() + (chars ? chars->size() : 0));
  std::vector<std::string_view> set;
  if (chars)
    for (size_t i = 0; i < chars->size(); i += CodePointLength(*chars, i))
      set.push_back(CodePointAt(*chars, i));
  auto strip_it = [&](std::string_view cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : IsPySpace(cp);
  };
  size_t b = 0;
  if (left)
    while (b < s.size() && strip_it(CodePointAt(s, b))) b += CodePointLength(s, b);
  size_t e = s.size();
  if (right) {  // the end of the last code point kept
    e = b;
    for (size_t i = b; i < s.size(); i += CodePointLength(s, i))
      if (!strip_it(CodePointAt(s, i))) e = i + CodePointLength(s, i);
  }
  return s.substr(b, e - b);
}

std::string AsciiUpper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  return s;
}
std::string AsciiLower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
  return s;
}
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string PyTitle(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    if (IsAsciiAlpha(c)) {
      c = prev_cased ? static_cast<char>(std::tolower(c)) : static_cast<char>(std::toupper(c));
      prev_cased = true;
    } else {
      prev_cased = static_cast<unsigned char>(c) >= 0x80 && prev_cased;
    }
  }
  return out;
}

std::string PyCapitalize(const std::string& s) {
  std::string out = AsciiLower(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 32);
  return out;
}

std::string PyReplace(const std::string& s, const std::string& from, const std::string& to,
                      int64_t count) {
  std::string out;
  int64_t n = 0;
  if (from.empty()) {  // `to` before every code point and at the end
    for (size_t i = 0; i < s.size(); i += CodePointLength(s, i)) {
      if (count < 0 || n < count) AppendBounded(&out, to), ++n;
      AppendBounded(&out, CodePointAt(s, i));
    }
    if (count < 0 || n < count) AppendBounded(&out, to);
    return out;
  }
  size_t pos = 0;
  while (count < 0 || n < count) {
    size_t hit = FindText(s, from, pos);
    if (hit == std::string::npos) break;
    AppendBounded(&out, std::string_view(s).substr(pos, hit - pos));
    AppendBounded(&out, to);
    pos = hit + from.size();
    ++n;
  }
  AppendBounded(&out, std::string_view(s).substr(pos));
  return out;
}

std::vector<std::string> PySplit(const std::string& s, const Value& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  auto add = [&](size_t b, size_t e) {
    CheckListSize(out.size() + 1);
    out.push_back(s.substr(b, e - b));
  };
  if (sep.is_none() || sep.is_undefined()) {
    SpendBytes(s.size());
    auto space_at = [&](size_t i) { return IsPySpace(CodePointAt(s, i)); };
    size_t i = 0;
    while (true) {
      while (i < s.size() && space_at(i)) i += CodePointLength(s, i);
      if (i >= s.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        add(i, s.size());  // the rest as it is, as Python keeps it
        break;
      }
      size_t j = i;
      while (j < s.size() && !space_at(j)) j += CodePointLength(s, j);
      add(i, j);
      i = j;
    }
    return out;
  }
  const std::string& d = sep.str();
  if (d.empty()) throw TemplateError("empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t hit = FindText(s, d, pos);
    if (hit == std::string::npos) break;
    add(pos, hit);
    pos = hit + d.size();
  }
  add(pos, s.size());
  return out;
}

std::string HtmlEscape(const std::string& s) {
  size_t size = s.size();
  for (char c : s) size += c == '&' || c == '"' || c == '\'' ? 4 : c == '<' || c == '>' ? 3 : 0;
  CheckStringSize(size);
  SpendBytes(size);
  std::string out;
  out.reserve(size);
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// ---------------------------------------------------------------- json.dumps

struct JsonOptions {
  bool ensure_ascii = false;
  bool indent_set = false;
  std::string indent;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};

void JsonString(const std::string& s, bool ensure_ascii, std::string* out) {
  // The escaped text is 1 to 12 bytes per input byte: checked before and after.
  CheckStringSize(out->size() + s.size() + 2);
  SpendBytes(s.size());
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      switch (c) {
        case '"':
          *out += "\\\"";
          break;
        case '\\':
          *out += "\\\\";
          break;
        case '\n':
          *out += "\\n";
          break;
        case '\r':
          *out += "\\r";
          break;
        case '\t':
          *out += "\\t";
          break;
        case '\b':
          *out += "\\b";
          break;
        case '\f':
          *out += "\\f";
          break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
            *out += fmt::format("\\u{:04x}", c);
          } else {
            *out += static_cast<char>(c);
          }
      }
      ++i;
      continue;
    }
    size_t n = (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
    n = std::min(n, s.size() - i);
    if (!ensure_ascii) {
      out->append(s, i, n);
    } else {
      uint32_t cp = n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : n == 4 ? (c & 0x07) : c;
      for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        *out += fmt::format("\\u{:04x}\\u{:04x}", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      } else {
        *out += fmt::format("\\u{:04x}", cp);
      }
    }
    i += n;
  }
  *out += '"';
  CheckStringSize(out->size());
}

void JsonDump(const Value& v, const JsonOptions& o, int level, std::string* out) {
  auto newline = [&](int lvl) {
    AppendBounded(out, "\n");
    for (int i = 0; i < lvl; ++i) AppendBounded(out, o.indent);
  };
  Spend(1);
  CheckStringSize(out->size());
  switch (v.kind()) {
    case Value::Kind::kNone:
      *out += "null";
      return;
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      *out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d))
        *out += "NaN";
      else if (std::isinf(d))
        *out += d > 0 ? "Infinity" : "-Infinity";
      else
        *out += PythonFloatRepr(d);
      return;
    }
    case Value::Kind::kString:
      JsonString(v.str(), o.ensure_ascii, out);
      return;
    case Value::Kind::kList: {
      const ValueList& l = v.list();
      if (l.empty()) {
        *out += "[]";
        return;
      }
      *out += '[';
      if (o.indent_set) newline(level + 1);
      for (size_t i = 0; i < l.size(); ++i) {
        if (i) {
          *out += o.item_sep;
          if (o.indent_set) newline(level + 1);
        }
        JsonDump(l[i], o, level + 1, out);
      }
      if (o.indent_set) newline(level);
      *out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict().is_namespace) break;
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict().items) items.push_back(&kv);
      if (items.empty()) {
        *out += "{}";
        return;
      }
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(),
                         [](auto* a, auto* b) { return a->first < b->first; });
      *out += '{';
      if (o.indent_set) newline(level + 1);
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) {
          *out += o.item_sep;
          if (o.indent_set) newline(level + 1);
        }
        JsonString(items[i]->first, o.ensure_ascii, out);
        *out += o.key_sep;
        JsonDump(items[i]->second, o, level + 1, out);
      }
      if (o.indent_set) newline(level);
      *out += '}';
      return;
    }
    default:
      break;
  }
  throw TemplateError(
      fmt::format("tojson: object of type {} is not JSON serializable", v.TypeName()));
}

// ---------------------------------------------------------------- interpreter

class Interpreter {
 public:
  explicit Interpreter(const Value& context) : context_(context) { scopes_.emplace_back(); }

  // Namespaces are the only values that change, so the only ones that can
  // end up holding themselves; emptying them all at the end frees such cycles.
  ~Interpreter() {
    for (const auto& ns : namespaces_) ns->items.clear();
  }

  std::string Run(const NodeList& nodes) {
    RenderBudget budget;
    std::string out;
    Exec(nodes, &out);
    return out;
  }

 private:
  using Frame = std::unordered_map<std::string, Value>;

  [[noreturn]] static void Fail(const Expr& e, const std::string& msg) {
    throw TemplateError(msg, e.line, e.col);
  }
  [[noreturn]] static void Fail(const Node& n, const std::string& msg) {
    throw TemplateError(msg, n.line, n.col);
  }

  // Errors thrown from builtins carry no position: give them the expression's.
  template <typename F>
  static auto At(const Expr& e, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (TemplateError& err) {
      if (err.line == 0 && !err.raised) throw TemplateError(err.what(), e.line, e.col);
      throw;
    }
  }

  // ---- statements ----

  Flow Exec(const NodeList& nodes, std::string* out) {
    for (const auto& n : nodes) {
      Flow f = ExecNode(*n, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow ExecNode(const Node& n, std::string* out) {
    NestingGuard rec(&recursion_, kMaxRecursion, "the template recursed", n.line, n.col);
    Spend(1);
    switch (n.kind) {
      case Node::Kind::kText:
        AppendBounded(out, n.text);
        return Flow::kNormal;
      case Node::Kind::kOutput:
        AppendBounded(out, Eval(*n.expr).ToString());
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (const auto& br : n.branches)
          if (Eval(*br.first).Truthy()) return Exec(br.second, out);
        return Exec(n.else_body, out);
      case Node::Kind::kFor:
        return ExecFor(n, out);
      case Node::Kind::kSet:
        ExecSet(n);
        return Flow::kNormal;
      case Node::Kind::kMacro:
        DefineMacro(n);
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kScope:
        return Exec(n.body, out);
    }
    return Flow::kNormal;
  }

  void Bind(const Node& n, const std::vector<std::string>& targets, const Value& v, Frame* frame) {
    if (targets.size() == 1) {
      (*frame)[targets[0]] = v;
      return;
    }
    ValueList items = Iterate(v, n.line, n.col);
    if (items.size() != targets.size())
      Fail(n,
           fmt::format("cannot unpack {} values into {} variables", items.size(), targets.size()));
    for (size_t i = 0; i < targets.size(); ++i) (*frame)[targets[i]] = items[i];
  }

  Flow ExecFor(const Node& n, std::string* out) {
    ValueList items = Iterate(Eval(*n.expr), n.expr->line, n.expr->col);
    if (n.filter) {
      ValueList kept;
      for (const auto& item : items) {
        scopes_.emplace_back();
        Bind(n, n.targets, item, &scopes_.back());
        bool keep = Eval(*n.filter).Truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return Exec(n.else_body, out);
    scopes_.emplace_back();
    size_t frame_index = scopes_.size() - 1;
    const int64_t len = static_cast<int64_t>(items.size());
    Flow result = Flow::kNormal;
    for (int64_t i = 0; i < len; ++i) {
      Spend(1);
      auto loop = std::make_shared<ValueDict>();
      loop->items = {
          {"index", Value(i + 1)},
          {"index0", Value(i)},
          {"revindex", Value(len - i)},
          {"revindex0", Value(len - i - 1)},
          {"first", Value(i == 0)},
          {"last", Value(i == len - 1)},
          {"length", Value(len)},
          {"depth", Value(int64_t{1})},
          {"depth0", Value(int64_t{0})},
          {"previtem", i > 0 ? items[i - 1] : Value::Undefined("there is no previous item")},
          {"nextitem", i + 1 < len ? items[i + 1] : Value::Undefined("there is no next item")},
          {"cycle",
           Value::Function("loop.cycle",
                           [i](CallArgs& a) {
                             if (a.positional.empty())
                               throw TemplateError("loop.cycle needs at least one argument");
                             return a.positional[static_cast<size_t>(i) % a.positional.size()];
                           })},
      };
      Frame& frame = scopes_[frame_index];
      frame["loop"] = Value::Dict(loop);
      Bind(n, n.targets, items[static_cast<size_t>(i)], &frame);
      Flow f = Exec(n.body, out);
      if (f == Flow::kBreak) break;
    }
    scopes_.resize(frame_index);
    return result;
  }

  void ExecSet(const Node& n) {
    Value v;
    if (n.expr) {
      v = Eval(*n.expr);
    } else {
      std::string body;
      Exec(n.body, &body);
      v = Value(std::move(body));
    }
    if (!n.attr.empty()) {
      Value target = Lookup(n.targets[0]);
      if (!target.is_dict() || !target.dict().is_namespace)
        Fail(n, fmt::format("cannot assign attribute '{}' on '{}': not a namespace", n.attr,
                            n.targets[0]));
      target.mutable_dict().Set(n.attr, std::move(v));
      return;
    }
    Bind(n, n.targets, v, &scopes_.back());
  }

  void DefineMacro(const Node& n) {
    const Node* def = &n;
    scopes_.back()[n.name] = Value::Function(n.name, [this, def](CallArgs& args) {
      if (depth_ >= kMaxCallDepth) throw TemplateError("macro recursion depth limit exceeded");
      Frame frame;
      if (args.positional.size() > def->params.size())
        throw TemplateError(
            fmt::format("macro '{}' takes at most {} arguments", def->name, def->params.size()));
      for (const auto& kw : args.keyword) {
        bool known = false;
        for (const auto& p : def->params) known |= p.first == kw.first;
        if (!known)
          throw TemplateError(fmt::format("macro '{}' has no parameter '{}'", def->name, kw.first));
      }
      std::vector<Frame> saved;
      saved.swap(scopes_);
      Spend(kMacroCallSteps + saved.front().size());
      scopes_.push_back(saved.front());
      scopes_.emplace_back();
      ++depth_;
      std::string out;
      try {
        for (size_t i = 0; i < def->params.size(); ++i) {
          const auto& p = def->params[i];
          Value v;
          if (i < args.positional.size()) {
            v = args.positional[i];
          } else if (const Value* kw = args.Keyword(p.first)) {
            v = *kw;
          } else if (p.second) {
            v = Eval(*p.second);
          } else {
            v = Value::Undefined(fmt::format("'{}' is undefined", p.first));
          }
          scopes_.back()[p.first] = std::move(v);
        }
        Exec(def->body, &out);
      } catch (...) {
        --depth_;
        scopes_.swap(saved);
        throw;
      }
      --depth_;
      saved.front() = scopes_.front();
      scopes_.swap(saved);
      return Value(std::move(out));
    });
  }

  // ---- names ----

  Value Lookup(const std::string& name) {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return f->second;
    }
    if (context_.is_dict()) {
      if (const Value* v = context_.dict().Find(name)) return *v;
    }
    Value g = Global(name);
    if (!g.is_undefined()) return g;
    return Value::Undefined(fmt::format("'{}' is undefined", name));
  }

  Value Global(const std::string& name) {
    if (name == "raise_exception") {
      return Value::Function(name, [](CallArgs& a) -> Value {
        throw TemplateError(a.Get(0, "message").ToString(), 0, 0, /*raised=*/true);
      });
    }
    if (name == "range") {
      return Value::Function(name, [](CallArgs& a) {
        int64_t start = 0, stop, step = 1;
        for (const auto& v : a.positional)
          if (!v.is_int() && !v.is_bool())
            throw TemplateError("range() arguments must be integers");
        if (a.positional.size() == 1) {
          stop = a.positional[0].as_int();
        } else if (a.positional.size() == 2 || a.positional.size() == 3) {
          start = a.positional[0].as_int();
          stop = a.positional[1].as_int();
          if (a.positional.size() == 3) step = a.positional[2].as_int();
        } else {
          throw TemplateError("range() takes 1 to 3 arguments");
        }
        if (step == 0) throw TemplateError("range() step must not be zero");
        uint64_t n = RangeLength(start, stop, step);
        CheckListSize(n);
        Spend(n);
        ValueList out;
        out.reserve(n);
        for (uint64_t k = 0; k < n; ++k)  // start + k * step: in range, since k < n
          out.emplace_back(
              static_cast<int64_t>(static_cast<uint64_t>(start) + k * static_cast<uint64_t>(step)));
        return Value::List(std::move(out));
      });
    }
    if (name == "namespace" || name == "dict") {
      bool ns = name == "namespace";
      return Value::Function(name, [this, ns](CallArgs& a) {
        auto d = std::make_shared<ValueDict>();
        d->is_namespace = ns;
        if (ns) namespaces_.push_back(d);
        for (const auto& p : a.positional) {
          if (!p.is_dict())
            throw TemplateError(
                fmt::format("{}() positional argument must be a dict", ns ? "namespace" : "dict"));
          for (const auto& kv : p.dict().items) d->Set(kv.first, kv.second);
        }
        for (const auto& kv : a.keyword) d->Set(kv.first, kv.second);
        return Value::Dict(d);
      });
    }
    if (name == "strftime_now") {
      return Value::Function(name, [](CallArgs& a) {
        Value f = a.Get(0, "format");
        if (!f.is_string()) throw TemplateError("strftime_now() needs a format string");
        std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[256];
        size_t n = std::strftime(buf, sizeof(buf), f.str().c_str(), &tm);
        return Value(std::string(buf, n));
      });
    }
    return Value();
  }

  // ---- expressions ----

  static void RequireDefined(const Expr& e, const Value& v) {
    if (v.is_undefined())
      Fail(e, v.undefined_hint().empty() ? "value is undefined" : v.undefined_hint());
  }

  // Builtins charge the budget for the work they do beyond one step: what they
  // make (Cost of the result) and what they scan (Cost of the input).
  Value Eval(const Expr& e) {
    NestingGuard rec(&recursion_, kMaxRecursion, "the template recursed", e.line, e.col);
    Spend(1);
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName:
        return Lookup(e.name);
      case Expr::Kind::kList: {
        ValueList items;
        for (const auto& a : e.args) items.push_back(Eval(*a));
        return At(e, [&] { return Value::List(std::move(items)); });
      }
      case Expr::Kind::kDict: {
        auto d = std::make_shared<ValueDict>();
        for (size_t i = 0; i < e.args.size(); ++i) {
          Value k = Eval(*e.dict_keys[i]);
          if (!k.is_string()) Fail(*e.dict_keys[i], "dict keys must be strings");
          d->Set(k.str(), Eval(*e.args[i]));
        }
        return At(e, [&] { return Value::Dict(d); });
      }
      case Expr::Kind::kAttr: {
        Value obj = Eval(*e.a);
        RequireDefined(e, obj);
        return GetAttr(obj, e.name);
      }
      case Expr::Kind::kItem: {
        Value obj = Eval(*e.a);
        RequireDefined(e, obj);
        Value key = Eval(*e.b);
        Value v = GetItem(obj, key);
        if (v.is_undefined() && key.is_string() && !obj.is_list()) return GetAttr(obj, key.str());
        return v;
      }
      case Expr::Kind::kSlice:
        return EvalSlice(e);
      case Expr::Kind::kCall: {
        Value callee = Eval(*e.a);
        RequireDefined(*e.a, callee);
        if (!callee.is_callable())
          Fail(e, fmt::format("'{}' object is not callable", callee.TypeName()));
        CallArgs args = EvalArgs(e);
        if (depth_ >= kMaxCallDepth) Fail(e, "call depth limit exceeded");
        Value r = At(e, [&] { return callee.callable().fn(args); });
        At(e, [&] { Spend(Cost(r)); });
        return r;
      }
      case Expr::Kind::kFilter: {
        Value v = Eval(*e.a);
        CallArgs args = EvalArgs(e);
        Value r = At(e, [&] {
          Spend(Cost(v));
          return ApplyFilter(e.name, v, args);
        });
        At(e, [&] { Spend(Cost(r)); });
        return r;
      }
      case Expr::Kind::kTest: {
        Value v = Eval(*e.a);
        CallArgs args = EvalArgs(e);
        bool r = At(e, [&] {
          Spend(Cost(v));
          return ApplyTest(e.name, v, args);
        });
        return Value(e.negated ? !r : r);
      }
      case Expr::Kind::kUnary: {
        Value v = Eval(*e.a);
        if (e.name == "not") return Value(!v.Truthy());
        RequireDefined(*e.a, v);
        if (!v.is_number())
          Fail(e, fmt::format("bad operand type for unary {}: '{}'", e.name, v.TypeName()));
        if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
        if (v.is_float()) return Value(-v.as_double());
        return At(e, [&] { return Value(CheckedSub(0, v.as_int())); });
      }
      case Expr::Kind::kBinary: {
        Value l = Eval(*e.a);
        Value r = Eval(*e.b);
        if (e.name == "~") {
          return At(e, [&] {
            std::string out = l.ToString();
            AppendBounded(&out, r.ToString());
            return Value(std::move(out));
          });
        }
        RequireDefined(*e.a, l);
        RequireDefined(*e.b, r);
        return At(e, [&] { return Arith(e.name, l, r); });
      }
      case Expr::Kind::kCompare: {
        Value l = Eval(*e.a);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value r = Eval(*e.args[i]);
          bool ok = At(*e.args[i], [&] { return Compare(e.ops[i], l, r); });
          if (!ok) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case Expr::Kind::kAnd: {
        Value l = Eval(*e.a);
        return l.Truthy() ? Eval(*e.b) : l;
      }
      case Expr::Kind::kOr: {
        Value l = Eval(*e.a);
        return l.Truthy() ? l : Eval(*e.b);
      }
      case Expr::Kind::kCond:
        if (Eval(*e.a).Truthy()) return Eval(*e.b);
        return e.c ? Eval(*e.c) : Value::Undefined("the conditional expression has no else branch");
    }
    Fail(e, "internal error: unknown expression");
  }

  CallArgs EvalArgs(const Expr& e) {
    CallArgs a;
    for (const auto& x : e.args) a.positional.push_back(Eval(*x));
    for (const auto& kv : e.kwargs) a.keyword.emplace_back(kv.first, Eval(*kv.second));
    return a;
  }

  Value EvalSlice(const Expr& e) {
    Value obj = Eval(*e.a);
    RequireDefined(e, obj);
    int64_t idx[3] = {0, 0, 1};
    bool given[3] = {false, false, false};
    for (int k = 0; k < 3; ++k) {
      if (!e.args[k]) continue;
      Value v = Eval(*e.args[k]);
      if (v.is_none()) continue;
      if (!v.is_int() && !v.is_bool()) Fail(*e.args[k], "slice indices must be integers or None");
      idx[k] = v.as_int();
      given[k] = true;
    }
    int64_t step = idx[2];
    if (step == 0) Fail(e, "slice step cannot be zero");
    std::vector<size_t> cps;  // code point offsets
    int64_t n;
    if (obj.is_string()) {
      cps = CodePointOffsets(obj.str());
      n = static_cast<int64_t>(cps.size()) - 1;
    } else if (obj.is_list()) {
      n = static_cast<int64_t>(obj.list().size());
    } else {
      Fail(e, fmt::format("'{}' object is not subscriptable", obj.TypeName()));
    }
    // Python's slice.indices().
    auto adjust = [&](int64_t v, bool has, int64_t dflt) {
      if (!has) return dflt;
      if (v < 0) {
        v += n;
        if (v < 0) v = step < 0 ? -1 : 0;
      } else if (v >= n) {
        v = step < 0 ? n - 1 : n;
      }
      return v;
    };
    int64_t start = adjust(idx[0], given[0], step < 0 ? n - 1 : 0);
    int64_t stop = adjust(idx[1], given[1], step < 0 ? -1 : n);
    // Picks start + k * step for k < count: all within [-1, n], so no overflow.
    const uint64_t count = RangeLength(start, stop, step);
    Spend(count);
    auto pick = [&](uint64_t k) {
      return static_cast<size_t>(start + static_cast<int64_t>(k) * step);
    };
    if (obj.is_string()) {
      const std::string& str = obj.str();
      std::string out;
      if (step == 1) return Value(str.substr(cps[pick(0)], cps[pick(count)] - cps[pick(0)]));
      for (uint64_t k = 0; k < count; ++k) {
        size_t i = pick(k);
        out.append(str, cps[i], cps[i + 1] - cps[i]);
      }
      return Value(std::move(out));
    }
    ValueList out;
    out.reserve(count);
    for (uint64_t k = 0; k < count; ++k) out.push_back(obj.list()[pick(k)]);
    return At(e, [&] { return Value::List(std::move(out)); });
  }

  static Value GetItem(const Value& obj, const Value& key) {
    if (obj.is_dict()) {
      if (!key.is_string()) return Value::Undefined(fmt::format("dict has no key {}", key.Repr()));
      if (const Value* v = obj.dict().Find(key.str())) return *v;
      return Value::Undefined(fmt::format("'dict object' has no attribute '{}'", key.str()));
    }
    if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
      int64_t i = key.as_int();
      if (obj.is_list()) {
        int64_t n = static_cast<int64_t>(obj.list().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n)
          return Value::Undefined(fmt::format("list index {} out of range", key.as_int()));
        return obj.list()[static_cast<size_t>(i)];
      }
      const std::string& str = obj.str();
      if (i < 0) i += static_cast<int64_t>(CodePointCount(str));
      SpendBytes(str.size());
      size_t at = 0;
      for (int64_t k = 0; k < i && at < str.size(); ++k) at += CodePointLength(str, at);
      if (i < 0 || at >= str.size())
        return Value::Undefined(fmt::format("string index {} out of range", key.as_int()));
      return Value(std::string(CodePointAt(str, at)));
    }
    return Value::Undefined(fmt::format("'{}' object has no item {}", obj.TypeName(), key.Repr()));
  }

  Value GetAttr(const Value& obj, const std::string& name) {
    if (obj.is_dict()) {
      if (!obj.dict().is_namespace) {
        Value m = BoundMethod(obj, name);
        if (!m.is_undefined()) return m;
      }
      if (const Value* v = obj.dict().Find(name)) return *v;
      return Value::Undefined(fmt::format("'{}' object has no attribute '{}'",
                                          obj.dict().is_namespace ? "Namespace" : "dict", name));
    }
    if (obj.is_string()) {
      Value m = BoundMethod(obj, name);
      if (!m.is_undefined()) return m;
    }
    return Value::Undefined(fmt::format("'{}' object has no attribute '{}'", obj.TypeName(), name));
  }

  // Python str and dict methods, as attributes bound to `self`.
  static Value BoundMethod(const Value& self, const std::string& name) {
    auto method = [&](std::function<Value(const Value&, CallArgs&)> f) {
      Value s = self;
      return Value::Function(name, [s, f](CallArgs& a) {
        Spend(Cost(s));  // methods scan their string or dict once
        return f(s, a);
      });
    };
    auto str_arg = [&](const CallArgs& a, size_t i, const char* what) -> std::string {
      Value v = a.Get(i, nullptr);
      if (!v.is_string())
        throw TemplateError(fmt::format("{}() argument must be str, not {}", what, v.TypeName()));
      return v.str();
    };
    if (self.is_dict()) {
      if (name == "items" || name == "keys" || name == "values") {
        return method([name](const Value& s, CallArgs&) {
          ValueList out;
          for (const auto& kv : s.dict().items) {
            if (name == "items")
              out.push_back(Value::List({Value(kv.first), kv.second}));
            else if (name == "keys")
              out.emplace_back(kv.first);
            else
              out.push_back(kv.second);
          }
          return Value::List(std::move(out));
        });
      }
      if (name == "get") {
        return method([](const Value& s, CallArgs& a) {
          Value key = a.Get(0, nullptr);
          if (key.is_string())
            if (const Value* v = s.dict().Find(key.str())) return *v;
          return a.Get(1, nullptr, Value::None());
        });
      }
      return Value();
    }
    if (!self.is_string()) return Value();
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      bool l = name != "rstrip", r = name != "lstrip";
      return method([l, r](const Value& s, CallArgs& a) {
        Value chars = a.Get(0, nullptr, Value::None());
        if (chars.is_string()) return Value(PyStrip(s.str(), &chars.str(), l, r));
        return Value(PyStrip(s.str(), nullptr, l, r));
      });
    }
    if (name == "upper")
      return method([](const Value& s, CallArgs&) { return Value(AsciiUpper(s.str())); });
    if (name == "lower")
      return method([](const Value& s, CallArgs&) { return Value(AsciiLower(s.str())); });
    if (name == "title")
      return method([](const Value& s, CallArgs&) { return Value(PyTitle(s.str())); });
    if (name == "capitalize")
      return method([](const Value& s, CallArgs&) { return Value(PyCapitalize(s.str())); });
    if (name == "startswith" || name == "endswith") {
      bool starts = name == "startswith";
      return method([starts](const Value& s, CallArgs& a) {
        Value arg = a.Get(0, nullptr);
        ValueList options = arg.is_list() ? arg.list() : ValueList{arg};
        for (const auto& o : options) {
          if (!o.is_string())
            throw TemplateError("startswith/endswith argument must be str or a tuple of str");
          const std::string& p = o.str();
          const std::string& x = s.str();
          if (p.size() > x.size()) continue;
          if (starts ? x.compare(0, p.size(), p) == 0
                     : x.compare(x.size() - p.size(), p.size(), p) == 0)
            return Value(true);
        }
        return Value(false);
      });
    }
    if (name == "split") {
      return method([](const Value& s, CallArgs& a) {
        Value sep = a.Get(0, "sep", Value::None());
        Value max = a.Get(1, "maxsplit", Value(int64_t{-1}));
        if (!sep.is_none() && !sep.is_string())
          throw TemplateError("split() separator must be str or None");
        ValueList out;
        for (auto& p : PySplit(s.str(), sep, max.as_int())) out.emplace_back(std::move(p));
        return Value::List(std::move(out));
      });
    }
    if (name == "replace") {
      return method([str_arg](const Value& s, CallArgs& a) {
        Value count = a.Get(2, "count", Value(int64_t{-1}));
        return Value(
            PyReplace(s.str(), str_arg(a, 0, "replace"), str_arg(a, 1, "replace"), count.as_int()));
      });
    }
    if (name == "join") {
      return method([](const Value& s, CallArgs& a) {
        Value items = a.Get(0, nullptr);
        std::string out;
        ValueList list = Iterate(items, 0, 0);
        for (size_t i = 0; i < list.size(); ++i) {
          if (!list[i].is_string())
            throw TemplateError(fmt::format("sequence item {}: expected str", i));
          if (i) AppendBounded(&out, s.str());
          AppendBounded(&out, list[i].str());
        }
        return Value(std::move(out));
      });
    }
    if (name == "find" || name == "count") {
      bool find = name == "find";
      return method([find, str_arg](const Value& s, CallArgs& a) {
        std::string sub = str_arg(a, 0, find ? "find" : "count");
        const std::string& x = s.str();
        if (find) {
          size_t p = FindText(x, sub);
          return Value(p == std::string::npos
                           ? int64_t{-1}
                           : static_cast<int64_t>(CodePointCount(x.substr(0, p))));
        }
        if (sub.empty()) return Value(static_cast<int64_t>(CodePointCount(x) + 1));
        int64_t n = 0;
        for (size_t p = FindText(x, sub); p != std::string::npos;
             p = FindText(x, sub, p + sub.size()))
          ++n;
        return Value(n);
      });
    }
    if (name == "removeprefix" || name == "removesuffix") {
      bool prefix = name == "removeprefix";
      return method([prefix, str_arg](const Value& s, CallArgs& a) {
        std::string p = str_arg(a, 0, prefix ? "removeprefix" : "removesuffix");
        const std::string& x = s.str();
        if (p.size() <= x.size()) {
          if (prefix && x.compare(0, p.size(), p) == 0) return Value(x.substr(p.size()));
          if (!prefix && x.compare(x.size() - p.size(), p.size(), p) == 0)
            return Value(x.substr(0, x.size() - p.size()));
        }
        return s;
      });
    }
    if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum") {
      return method([name](const Value& s, CallArgs&) {
        const std::string& str = s.str();
        if (str.empty()) return Value(false);
        for (size_t i = 0; i < str.size(); i += CodePointLength(str, i)) {
          std::string_view cp = CodePointAt(str, i);
          bool ok;
          if (name == "isspace")
            ok = IsPySpace(cp);
          else if (cp.size() != 1)
            ok = false;  // non-ASCII letters/digits: not classified
          else if (name == "isdigit")
            ok = std::isdigit(static_cast<unsigned char>(cp[0])) != 0;
          else if (name == "isalpha")
            ok = IsAsciiAlpha(cp[0]);
          else
            ok = std::isalnum(static_cast<unsigned char>(cp[0])) != 0;
          if (!ok) return Value(false);
        }
        return Value(true);
      });
    }
    return Value();
  }

  // Python iteration: lists, dict keys, string code points; Undefined is empty.
  static ValueList Iterate(const Value& v, int line, int col) {
    switch (v.kind()) {
      case Value::Kind::kUndefined:
        return {};
      case Value::Kind::kList:
        return v.list();
      case Value::Kind::kDict: {
        ValueList keys;
        for (const auto& kv : v.dict().items) keys.emplace_back(kv.first);
        return keys;
      }
      case Value::Kind::kString: {
        const std::string& str = v.str();
        CheckListSize(CodePointCount(str));
        ValueList out;
        for (size_t i = 0; i < str.size(); i += CodePointLength(str, i))
          out.emplace_back(std::string(CodePointAt(str, i)));
        Spend(out.size());
        return out;
      }
      default:
        throw TemplateError(fmt::format("'{}' object is not iterable", v.TypeName()), line, col);
    }
  }

  static Value Arith(const std::string& op, const Value& l, const Value& r) {
    auto bad = [&]() -> TemplateError {
      return TemplateError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op,
                                       l.TypeName(), r.TypeName()));
    };
    bool nums = l.is_number() && r.is_number();
    bool ints = nums && !l.is_float() && !r.is_float();
    if (op == "+") {
      if (ints) return Value(CheckedAdd(l.as_int(), r.as_int()));
      if (nums) return Value(l.as_double() + r.as_double());
      if (l.is_string() && r.is_string()) {
        std::string out = l.str();
        AppendBounded(&out, r.str());
        return Value(std::move(out));
      }
      if (l.is_list() && r.is_list()) {
        CheckListSize(l.list().size() + r.list().size());
        Spend(l.list().size() + r.list().size());
        ValueList out = l.list();
        out.insert(out.end(), r.list().begin(), r.list().end());
        return Value::List(std::move(out));
      }
      throw bad();
    }
    if (op == "-") {
      if (ints) return Value(CheckedSub(l.as_int(), r.as_int()));
      if (nums) return Value(l.as_double() - r.as_double());
      throw bad();
    }
    if (op == "*") {
      if (ints) return Value(CheckedMul(l.as_int(), r.as_int()));
      if (nums) return Value(l.as_double() * r.as_double());
      const Value* seq = (l.is_string() || l.is_list())   ? &l
                         : (r.is_string() || r.is_list()) ? &r
                                                          : nullptr;
      const Value* cnt = seq == &l ? &r : &l;
      if (seq && (cnt->is_int() || cnt->is_bool())) {
        // Sizes up to kMax* (well under 2^32) times a count up to 2^32 cannot overflow.
        const uint64_t n = static_cast<uint64_t>(std::clamp<int64_t>(cnt->as_int(), 0, 1LL << 32));
        if (seq->is_string()) {
          const size_t total = n * seq->str().size();
          CheckStringSize(total);
          SpendBytes(total);
          std::string out = n ? seq->str() : std::string();
          out.reserve(total);
          while (out.size() < total)  // doubling: a few large copies
            out.append(out, 0, std::min(out.size(), total - out.size()));
          return Value(std::move(out));
        }
        CheckListSize(n * seq->list().size());
        Spend(n * seq->list().size());
        ValueList out;
        for (uint64_t i = 0; i < n; ++i)
          out.insert(out.end(), seq->list().begin(), seq->list().end());
        return Value::List(std::move(out));
      }
      throw bad();
    }
    if (!nums) throw bad();
    if (op == "/") {
      if (r.as_double() == 0) throw TemplateError("division by zero");
      return Value(l.as_double() / r.as_double());
    }
    if (op == "//" || op == "%") {
      if (r.as_double() == 0)
        throw TemplateError(op == "%" ? "modulo by zero" : "division by zero");
      if (ints) {
        int64_t a = l.as_int(), b = r.as_int();
        if (b == -1) return op == "//" ? Value(CheckedSub(0, a)) : Value(int64_t{0});
        int64_t q = a / b, m = a % b;  // truncated, then floored as Python does
        if (m != 0 && ((m < 0) != (b < 0))) --q, m += b;
        return op == "//" ? Value(q) : Value(m);
      }
      double a = l.as_double(), b = r.as_double();
      double q = std::floor(a / b);
      return op == "//" ? Value(q) : Value(a - q * b);
    }
    if (op == "**") {
      if (ints && r.as_int() >= 0) {  // by squaring
        int64_t out = 1, base = l.as_int();
        for (int64_t e = r.as_int(); e > 0; e >>= 1) {
          if (e & 1) out = CheckedMul(out, base);
          if (e > 1) base = CheckedMul(base, base);
        }
        return Value(out);
      }
      return Value(std::pow(l.as_double(), r.as_double()));
    }
    throw TemplateError("unknown operator " + op);
  }

  // -1 / 0 / 1, Python ordering for numbers, strings and lists.
  static int Order(const Value& l, const Value& r, const std::string& op) {
    Spend(1);
    if (l.is_number() && r.is_number()) {
      double a = l.as_double(), b = r.as_double();
      return a < b ? -1 : a > b ? 1 : 0;
    }
    if (l.is_string() && r.is_string()) {
      SpendBytes(std::min(l.str().size(), r.str().size()));
      int c = l.str().compare(r.str());
      return c < 0 ? -1 : c > 0 ? 1 : 0;
    }
    if (l.is_list() && r.is_list()) {
      const auto &a = l.list(), &b = r.list();
      for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
        if (a[i].Equals(b[i])) continue;
        return Order(a[i], b[i], op);
      }
      return a.size() < b.size() ? -1 : a.size() > b.size() ? 1 : 0;
    }
    if (l.is_undefined() || r.is_undefined())
      throw TemplateError(l.is_undefined() ? l.undefined_hint() : r.undefined_hint());
    throw TemplateError(fmt::format("'{}' not supported between instances of '{}' and '{}'", op,
                                    l.TypeName(), r.TypeName()));
  }

  static bool Contains(const Value& container, const Value& item) {
    switch (container.kind()) {
      case Value::Kind::kString:
        if (!item.is_string())
          throw TemplateError(fmt::format("'in <string>' requires string as left operand, not {}",
                                          item.TypeName()));
        return FindText(container.str(), item.str()) != std::string::npos;
      case Value::Kind::kList:
        for (const auto& v : container.list())
          if (v.Equals(item)) return true;
        return false;
      case Value::Kind::kDict:
        return item.is_string() && container.dict().Find(item.str()) != nullptr;
      case Value::Kind::kUndefined:
        return false;
      default:
        throw TemplateError(
            fmt::format("argument of type '{}' is not iterable", container.TypeName()));
    }
  }

  static bool Compare(const std::string& op, const Value& l, const Value& r) {
    if (op == "==") return l.Equals(r);
    if (op == "!=") return !l.Equals(r);
    if (op == "in") return Contains(r, l);
    if (op == "not in") return !Contains(r, l);
    int c = Order(l, r, op);
    if (op == "<") return c < 0;
    if (op == "<=") return c <= 0;
    if (op == ">") return c > 0;
    return c >= 0;
  }

  // ---- tests ----

  bool ApplyTest(const std::string& name, const Value& v, const CallArgs& a) {
    auto arg = [&]() {
      if (a.positional.empty())
        throw TemplateError(fmt::format("test '{}' needs an argument", name));
      return a.positional[0];
    };
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.is_bool();
    if (name == "true") return v.is_bool() && v.as_bool();
    if (name == "false") return v.is_bool() && !v.as_bool();
    if (name == "integer") return v.is_int();
    if (name == "float") return v.is_float();
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict() && !v.dict().is_namespace;
    if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    if (name == "callable") return v.is_callable();
    if (name == "lower") return v.is_string() && AsciiLower(v.str()) == v.str();
    if (name == "upper") return v.is_string() && AsciiUpper(v.str()) == v.str();
    if (name == "eq" || name == "equalto" || name == "==") return v.Equals(arg());
    if (name == "ne" || name == "!=") return !v.Equals(arg());
    if (name == "sameas") {
      Value o = arg();
      if (v.kind() != o.kind()) return false;
      if (v.is_none() || v.is_undefined()) return true;
      if (v.is_bool()) return v.as_bool() == o.as_bool();
      return v.Equals(o) && (v.is_list()   ? &v.list() == &o.list()
                             : v.is_dict() ? &v.dict() == &o.dict()
                                           : true);
    }
    if (name == "lt" || name == "lessthan" || name == "<") return Compare("<", v, arg());
    if (name == "le" || name == "<=") return Compare("<=", v, arg());
    if (name == "gt" || name == "greaterthan" || name == ">") return Compare(">", v, arg());
    if (name == "ge" || name == ">=") return Compare(">=", v, arg());
    if (name == "in") return Contains(arg(), v);
    if (name == "odd" || name == "even" || name == "divisibleby") {
      if (!v.is_int() && !v.is_bool())
        throw TemplateError(fmt::format("test '{}' needs an integer", name));
      int64_t x = v.as_int();
      if (name == "odd") return x % 2 != 0;
      if (name == "even") return x % 2 == 0;
      int64_t d = arg().as_int();
      if (d == 0) throw TemplateError("divisibleby 0");
      return d == -1 || x % d == 0;
    }
    throw TemplateError(fmt::format("unknown test '{}'", name));
  }

  // ---- filters ----

  // Looks `attr` ("a.b" allowed) up the way jinja2's attribute getters do.
  Value Attribute(const Value& v, const std::string& attr) {
    Value cur = v;
    size_t pos = 0;
    while (true) {
      size_t dot = attr.find('.', pos);
      std::string part = attr.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
      // jinja2 looks each part up with environment.getitem, and looking
      // anything up on an Undefined raises.
      if (cur.is_undefined()) {
        throw TemplateError(cur.undefined_hint().empty() ? "value is undefined"
                                                         : cur.undefined_hint());
      }
      bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
      Value key(part);
      if (numeric) {  // an index too large for 64 bits is out of range anyway
        errno = 0;
        long long index = std::strtoll(part.c_str(), nullptr, 10);
        key = Value(errno == ERANGE ? std::numeric_limits<int64_t>::max()
                                    : static_cast<int64_t>(index));
      }
      Value item = GetItem(cur, key);
      cur = item.is_undefined() && !numeric ? GetAttr(cur, part) : item;
      if (dot == std::string::npos) return cur;
      pos = dot + 1;
    }
  }

  // The items select/reject/selectattr/rejectattr/map go over: like jinja2
  // (`if value: for item in value`), a false value (none, undefined, empty)
  // gives none rather than an error.
  static ValueList FilterInput(const Value& seq) {
    if (!seq.Truthy()) return {};
    return Iterate(seq, 0, 0);
  }

  // select/reject/selectattr/rejectattr: args[first_test_arg] is the test name.
  ValueList FilterBy(const Value& seq, const CallArgs& a, bool by_attr, bool keep_if) {
    std::string attr;
    size_t t = 0;
    if (by_attr) {
      Value at = a.Get(0, nullptr);
      if (!at.is_string()) throw TemplateError("selectattr/rejectattr need an attribute name");
      attr = at.str();
      t = 1;
    }
    std::string test;
    CallArgs targs;
    if (t < a.positional.size()) {
      if (!a.positional[t].is_string()) throw TemplateError("the test name must be a string");
      test = a.positional[t].str();
      targs.positional.assign(a.positional.begin() + static_cast<long>(t) + 1, a.positional.end());
    }
    ValueList out;
    for (const auto& item : FilterInput(seq)) {
      Value x = by_attr ? Attribute(item, attr) : item;
      bool r = test.empty() ? x.Truthy() : ApplyTest(test, x, targs);
      if (r == keep_if) out.push_back(item);
    }
    return out;
  }

  Value ApplyFilter(const std::string& name, const Value& v, const CallArgs& a) {
    auto need_string = [&]() -> std::string {
      if (v.is_undefined()) return "";
      return v.ToString();
    };
    if (name == "safe") return v;
    if (name == "string") return Value(v.ToString());
    if (name == "trim") {
      Value chars = a.Get(0, "chars", Value::None());
      std::string s = need_string();
      return Value(chars.is_string() ? PyStrip(s, &chars.str(), true, true)
                                     : PyStrip(s, nullptr, true, true));
    }
    if (name == "upper") return Value(AsciiUpper(need_string()));
    if (name == "lower") return Value(AsciiLower(need_string()));
    if (name == "capitalize") return Value(PyCapitalize(need_string()));
    if (name == "title") return Value(PyTitle(need_string()));
    if (name == "e" || name == "escape") return Value(HtmlEscape(need_string()));
    if (name == "replace") {
      Value from = a.Get(0, "old"), to = a.Get(1, "new"), count = a.Get(2, "count", Value::None());
      if (!from.is_string() || !to.is_string()) throw TemplateError("replace needs two strings");
      return Value(
          PyReplace(need_string(), from.str(), to.str(), count.is_none() ? -1 : count.as_int()));
    }
    if (name == "length" || name == "count") {
      if (v.is_string()) return Value(static_cast<int64_t>(CodePointCount(v.str())));
      if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
      if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().items.size()));
      if (v.is_undefined()) return Value(int64_t{0});
      throw TemplateError(fmt::format("object of type '{}' has no len()", v.TypeName()));
    }
    if (name == "default" || name == "d") {
      Value dflt = a.Get(0, "default_value", Value(""));
      bool boolean = a.Get(1, "boolean", Value(false)).Truthy();
      if (v.is_undefined() || (boolean && !v.Truthy())) return dflt;
      return v;
    }
    if (name == "first" || name == "last") {
      if (v.is_undefined()) return Value::Undefined("no first item, sequence was empty");
      ValueList items = Iterate(v, 0, 0);
      if (items.empty())
        return Value::Undefined(fmt::format("no {} item, sequence was empty", name));
      return name == "first" ? items.front() : items.back();
    }
    if (name == "list") return Value::List(Iterate(v, 0, 0));
    if (name == "reverse") {
      if (v.is_string()) {
        const std::string& str = v.str();
        std::vector<size_t> cps = CodePointOffsets(str);
        std::string out;
        out.reserve(str.size());
        for (size_t i = cps.size() - 1; i > 0; --i)
          out.append(str, cps[i - 1], cps[i] - cps[i - 1]);
        return Value(std::move(out));
      }
      ValueList items = Iterate(v, 0, 0);
      std::reverse(items.begin(), items.end());
      return Value::List(std::move(items));
    }
    if (name == "items") {
      if (v.is_undefined()) return Value::List({});
      if (!v.is_dict())
        throw TemplateError(fmt::format("items filter needs a mapping, got {}", v.TypeName()));
      ValueList out;
      for (const auto& kv : v.dict().items)
        out.push_back(Value::List({Value(kv.first), kv.second}));
      return Value::List(std::move(out));
    }
    if (name == "dictsort") {
      if (!v.is_dict()) throw TemplateError("dictsort needs a mapping");
      ValueList out;
      for (const auto& kv : v.dict().items)
        out.push_back(Value::List({Value(kv.first), kv.second}));
      std::stable_sort(out.begin(), out.end(), [](const Value& x, const Value& y) {
        SpendBytes(x.list()[0].str().size() + y.list()[0].str().size());
        return AsciiLower(x.list()[0].str()) < AsciiLower(y.list()[0].str());
      });
      return Value::List(std::move(out));
    }
    if (name == "join") {
      Value sep = a.Get(0, "d", Value(""));
      Value attr = a.Get(1, "attribute", Value::None());
      std::string out;
      ValueList items = Iterate(v, 0, 0);
      const std::string sep_text = sep.ToString();
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) AppendBounded(&out, sep_text);
        AppendBounded(&out,
                      (attr.is_string() ? Attribute(items[i], attr.str()) : items[i]).ToString());
      }
      return Value(std::move(out));
    }
    if (name == "tojson") {
      JsonOptions o;
      o.ensure_ascii = a.Get(99, "ensure_ascii", Value(false)).Truthy();
      Value indent = a.Get(0, "indent", Value::None());
      if (indent.is_int()) {
        o.indent_set = true;
        const int64_t width = std::max<int64_t>(0, indent.as_int());
        CheckStringSize(static_cast<uint64_t>(width));
        o.indent = std::string(static_cast<size_t>(width), ' ');
      } else if (indent.is_string()) {
        o.indent_set = true;
        o.indent = indent.str();
      }
      if (o.indent_set) o.item_sep = ",";
      Value seps = a.Get(99, "separators", Value::None());
      if (seps.is_list() && seps.list().size() == 2) {
        o.item_sep = seps.list()[0].ToString();
        o.key_sep = seps.list()[1].ToString();
      }
      o.sort_keys = a.Get(99, "sort_keys", Value(false)).Truthy();
      std::string out;
      JsonDump(v, o, 0, &out);
      return Value(std::move(out));
    }
    if (name == "int") {
      Value dflt = a.Get(0, "default", Value(int64_t{0}));
      // jinja2: int(value), else int(float(value)), else the default; NaN
      // has no integer (the default), infinity raises.
      if (v.is_int() || v.is_bool()) return Value(v.as_int());
      auto from_float = [&](double d) { return std::isnan(d) ? dflt : Value(FloatToInt(d)); };
      if (v.is_float()) return from_float(v.as_double());
      if (v.is_string()) {
        std::string s = PyStrip(v.str(), nullptr, true, true);
        char* end = nullptr;
        errno = 0;
        long long x = std::strtoll(s.c_str(), &end, 10);
        if (!s.empty() && end && *end == '\0') {
          if (errno == ERANGE) IntegerOverflow();
          return Value(static_cast<int64_t>(x));
        }
        double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == '\0') return from_float(d);
      }
      return dflt;
    }
    if (name == "float") {
      Value dflt = a.Get(0, "default", Value(0.0));
      if (v.is_number()) return Value(v.as_double());
      if (v.is_string()) {
        std::string s = PyStrip(v.str(), nullptr, true, true);
        char* end = nullptr;
        double d = std::strtod(s.c_str(), &end);
        if (!s.empty() && end && *end == '\0') return Value(d);
      }
      return dflt;
    }
    if (name == "abs") {
      if (v.is_float()) return Value(std::fabs(v.as_double()));
      if (v.is_number()) return Value(v.as_int() < 0 ? CheckedSub(0, v.as_int()) : v.as_int());
      throw TemplateError(fmt::format("bad operand type for abs(): '{}'", v.TypeName()));
    }
    if (name == "round") {
      if (!v.is_number()) throw TemplateError("round needs a number");
      int64_t prec = a.Get(0, "precision", Value(int64_t{0})).as_int();
      std::string method = a.Get(1, "method", Value("common")).ToString();
      double m = std::pow(10.0, static_cast<double>(prec));
      double x = v.as_double() * m;
      x = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
      return Value(x / m);
    }
    if (name == "select" || name == "reject")
      return Value::List(FilterBy(v, a, false, name == "select"));
    if (name == "selectattr" || name == "rejectattr")
      return Value::List(FilterBy(v, a, true, name == "selectattr"));
    if (name == "map") {
      ValueList out;
      const Value* attr = a.Keyword("attribute");
      if (attr) {
        const Value* dflt = a.Keyword("default");
        for (const auto& item : FilterInput(v)) {
          Value x = Attribute(item, attr->ToString());
          out.push_back(x.is_undefined() && dflt ? *dflt : x);
        }
        return Value::List(std::move(out));
      }
      if (a.positional.empty() || !a.positional[0].is_string())
        throw TemplateError("map needs a filter name or attribute=");
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      rest.keyword = a.keyword;
      for (const auto& item : FilterInput(v))
        out.push_back(ApplyFilter(a.positional[0].str(), item, rest));
      return Value::List(std::move(out));
    }
    if (name == "unique") {
      ValueList out;
      for (const auto& item : Iterate(v, 0, 0)) {
        bool seen = false;
        for (const auto& o : out) seen |= o.Equals(item);
        if (!seen) out.push_back(item);
      }
      return Value::List(std::move(out));
    }
    if (name == "sort" || name == "min" || name == "max") {
      bool reverse = name == "sort" && a.Get(0, "reverse", Value(false)).Truthy();
      bool case_sensitive = a.Get(name == "sort" ? 1 : 0, "case_sensitive", Value(false)).Truthy();
      Value attr = a.Get(name == "sort" ? 2 : 1, "attribute", Value::None());
      ValueList items = Iterate(v, 0, 0);
      auto key = [&](const Value& x) {
        Value k = attr.is_string() ? Attribute(x, attr.str()) : x;
        if (!case_sensitive && k.is_string()) return Value(AsciiLower(k.str()));
        return k;
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        int c = Order(key(x), key(y), "<");
        return reverse ? c > 0 : c < 0;
      });
      if (name == "sort") return Value::List(std::move(items));
      if (items.empty()) return Value::Undefined("no min/max item, sequence was empty");
      return name == "min" ? items.front() : items.back();
    }
    if (name == "sum") {
      Value attr = a.Get(0, "attribute", Value::None());
      Value total = a.Get(1, "start", Value(int64_t{0}));
      for (const auto& item : Iterate(v, 0, 0))
        total = Arith("+", total, attr.is_string() ? Attribute(item, attr.str()) : item);
      return total;
    }
    if (name == "indent") {
      Value width = a.Get(0, "width", Value(int64_t{4}));
      bool first = a.Get(1, "first", Value(false)).Truthy();
      bool blank = a.Get(2, "blank", Value(false)).Truthy();
      std::string pad;
      if (width.is_string()) {
        pad = width.str();
      } else {  // " " * width, as Python: none when negative
        const int64_t n = std::max<int64_t>(0, width.as_int());
        CheckStringSize(static_cast<uint64_t>(n));
        pad.assign(static_cast<size_t>(n), ' ');
      }
      std::string s = need_string(), out;
      size_t pos = 0;
      bool first_line = true;
      while (true) {
        size_t nl = s.find('\n', pos);
        std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        bool is_blank = PyStrip(line, nullptr, true, true).empty();
        if ((first_line ? first : true) && (blank || !is_blank)) AppendBounded(&out, pad);
        AppendBounded(&out, line);
        if (nl == std::string::npos) break;
        AppendBounded(&out, "\n");
        pos = nl + 1;
        first_line = false;
      }
      return Value(std::move(out));
    }
    if (name == "wordcount")
      return Value(static_cast<int64_t>(PySplit(need_string(), Value::None(), -1).size()));
    throw TemplateError(fmt::format("unknown filter '{}'", name));
  }

  const Value& context_;
  std::vector<Frame> scopes_;
  int depth_ = 0;      // macro calls in progress
  int recursion_ = 0;  // Eval / ExecNode calls in progress (NestingGuard)
  std::vector<std::shared_ptr<ValueDict>> namespaces_;  // every namespace() made
};

}  // namespace

std::string RenderTemplate(const NodeList& nodes, const Value& context) {
  Interpreter interp(context);
  return interp.Run(nodes);
}

}  // namespace xrt::chat
