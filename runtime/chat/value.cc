#include "runtime/chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

namespace xrt::chat {

namespace {
thread_local RenderBudget* t_budget = nullptr;  // the innermost on this thread
}  // namespace

RenderBudget::RenderBudget(uint64_t steps) : outer_(t_budget) {
  left_ = total_ = outer_ ? std::min(steps, outer_->left_) : steps;
  t_budget = this;
}

RenderBudget::~RenderBudget() {
  t_budget = outer_;
  if (outer_) outer_->left_ -= total_ - left_;
}

void Spend(uint64_t steps) {
  RenderBudget* b = t_budget;
  if (!b) return;
  if (steps > b->left_) {
    b->left_ = 0;
    throw TemplateError(fmt::format(
        "the chat template did not finish within {} steps (a loop that never ends, or values "
        "that keep growing?)",
        b->total_));
  }
  b->left_ -= steps;
}

void CheckStringSize(size_t bytes) {
  if (bytes > kMaxStringBytes)
    throw TemplateError(
        fmt::format("a string of {} bytes is over the chat template limit of {} MiB", bytes,
                    kMaxStringBytes >> 20));
}

void CheckListSize(size_t items) {
  if (items > kMaxListItems)
    throw TemplateError(fmt::format("a list of {} items is over the chat template limit of {}",
                                    items, kMaxListItems));
}

void AppendBounded(std::string* out, std::string_view piece) {
  CheckStringSize(out->size() + piece.size());
  SpendBytes(piece.size());
  out->append(piece);
}

const Value* ValueDict::Find(const std::string& key) const {
  Spend(items.size() / 16);  // a linear search
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

void ValueDict::Set(const std::string& key, Value value) {
  for (auto& kv : items) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

const std::string& Value::Empty() {
  static const std::string kEmpty;
  return kEmpty;
}

Value Value::Undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.s_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::None() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t v) : kind_(Kind::kInt), i_(v) {}
Value::Value(double v) : kind_(Kind::kFloat), f_(v) {}
Value::Value(std::string s)
    : kind_(Kind::kString), s_(std::make_shared<const std::string>(std::move(s))) {}

void Value::CheckDepth() const {
  if (depth_ > kMaxNesting)
    throw TemplateError(fmt::format("lists and dicts nest more than {} levels deep", kMaxNesting));
}

Value Value::List(ValueList items) {
  Value v;
  v.kind_ = Kind::kList;
  v.depth_ = 1;
  for (const Value& item : items) v.depth_ = std::max(v.depth_, item.depth_ + 1);
  v.CheckDepth();
  v.list_ = std::make_shared<ValueList>(std::move(items));
  return v;
}

Value Value::Dict(std::shared_ptr<ValueDict> dict) {
  Value v;
  v.kind_ = Kind::kDict;
  v.depth_ = 1;
  if (!dict->is_namespace)
    for (const auto& kv : dict->items) v.depth_ = std::max(v.depth_, kv.second.depth_ + 1);
  v.CheckDepth();
  v.dict_ = std::move(dict);
  return v;
}

Value Value::Function(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

bool Value::Truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return !str().empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return dict_->is_namespace || !dict_->items.empty();
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string PythonFloatRepr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // Shortest round-trip digits, in scientific form: "d.ddde[+-]xx".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  int exp = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    size_t int_len = static_cast<size_t>(exp) + 1;
    if (digits.size() <= int_len) {
      out = digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return neg ? "-" + out : out;
}

static std::string PyStringRepr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

std::string Value::ToString() const {
  if (kind_ == Kind::kString) return str();
  std::vector<const ValueDict*> open;
  std::string out;
  Print(false, 0, &open, &out);
  return out;
}

std::string Value::Repr() const {
  std::vector<const ValueDict*> open;
  std::string out;
  Print(true, 0, &open, &out);
  return out;
}

// str() (repr = false) or repr() of this value appended to *out. `open` holds
// the namespaces being printed: one met again prints as {...}, as Python's
// dict repr does for itself.
void Value::Print(bool repr, int level, std::vector<const ValueDict*>* open,
                  std::string* out) const {
  if (level > 2 * kMaxNesting)
    throw TemplateError(
        fmt::format("a value nests more than {} levels deep to print", 2 * kMaxNesting));
  switch (kind_) {
    case Kind::kUndefined:
      AppendBounded(out, repr ? "Undefined" : "");
      return;
    case Kind::kNone:
      AppendBounded(out, "None");
      return;
    case Kind::kBool:
      AppendBounded(out, b_ ? "True" : "False");
      return;
    case Kind::kInt:
      AppendBounded(out, std::to_string(i_));
      return;
    case Kind::kFloat:
      AppendBounded(out, PythonFloatRepr(f_));
      return;
    case Kind::kString:
      AppendBounded(out, repr ? PyStringRepr(str()) : str());
      return;
    case Kind::kList:
      AppendBounded(out, "[");
      for (size_t i = 0; i < list_->size(); ++i) {
        if (i) AppendBounded(out, ", ");
        (*list_)[i].Print(true, level + 1, open, out);
      }
      AppendBounded(out, "]");
      return;
    case Kind::kDict: {
      const bool ns = dict_->is_namespace;
      if (ns) AppendBounded(out, "<Namespace ");
      if (std::find(open->begin(), open->end(), dict_.get()) != open->end()) {
        AppendBounded(out, ns ? "{...}>" : "{...}");
        return;
      }
      open->push_back(dict_.get());
      AppendBounded(out, "{");
      for (size_t i = 0; i < dict_->items.size(); ++i) {
        if (i) AppendBounded(out, ", ");
        AppendBounded(out, PyStringRepr(dict_->items[i].first));
        AppendBounded(out, ": ");
        dict_->items[i].second.Print(true, level + 1, open, out);
      }
      AppendBounded(out, ns ? "}>" : "}");
      open->pop_back();
      return;
    }
    case Kind::kCallable:
      AppendBounded(out, "<function " + fn_->name + ">");
      return;
  }
}

std::string Value::TypeName() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return dict_->is_namespace ? "Namespace" : "dict";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

bool Value::Equals(const Value& o) const {
  Spend(1);
  if (is_number() && o.is_number()) {
    if (is_float() || o.is_float()) return as_double() == o.as_double();
    return as_int() == o.as_int();
  }
  if (kind_ != o.kind_) return false;
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      SpendBytes(std::min(str().size(), o.str().size()));
      return str() == o.str();
    case Kind::kList: {
      if (list_ == o.list_) return true;
      if (list_->size() != o.list_->size()) return false;
      for (size_t i = 0; i < list_->size(); ++i)
        if (!(*list_)[i].Equals((*o.list_)[i])) return false;
      return true;
    }
    case Kind::kDict: {
      if (dict_ == o.dict_) return true;
      if (dict_->is_namespace || o.dict_->is_namespace) return false;
      if (dict_->items.size() != o.dict_->items.size()) return false;
      for (const auto& kv : dict_->items) {
        const Value* other = o.dict_->Find(kv.first);
        if (!other || !kv.second.Equals(*other)) return false;
      }
      return true;
    }
    case Kind::kCallable:
      return fn_ == o.fn_;
    default:
      return false;
  }
}

Value CallArgs::Get(size_t index, const char* name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  if (name) {
    if (const Value* v = Keyword(name)) return *v;
  }
  return fallback;
}

const Value* CallArgs::Keyword(const std::string& name) const {
  for (const auto& kv : keyword)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

static size_t Utf8Len(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xe) return 3;
  if ((lead >> 3) == 0x1e) return 4;
  return 1;  // invalid byte: count it as one unit
}

size_t CodePointLength(const std::string& s, size_t i) {
  return std::min(Utf8Len(static_cast<unsigned char>(s[i])), s.size() - i);
}

std::vector<size_t> CodePointOffsets(const std::string& s) {
  SpendBytes(s.size());
  std::vector<size_t> out;
  for (size_t i = 0; i < s.size(); i += CodePointLength(s, i)) out.push_back(i);
  out.push_back(s.size());
  return out;
}

size_t CodePointCount(const std::string& s) {
  SpendBytes(s.size());
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += Utf8Len(static_cast<unsigned char>(s[i]))) ++n;
  return n;
}

}  // namespace xrt::chat
