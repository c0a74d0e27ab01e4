// Value: the dynamic value of the chat-template interpreter (internal to
// xrt_chat). It models the Python objects a Hugging Face chat template sees
// when rendered by jinja2: Undefined, None, bool, int, float, str, list, dict
// (insertion-ordered, string keys), jinja2's namespace() and callables.
//
// Lists, dicts and namespaces are shared by reference, as in Python, so that
// `{% set ns.x = 1 %}` is seen by every holder of `ns`. Values are immutable
// otherwise. Strings are UTF-8; length, indexing and slicing count code points.
//
// Thread-compatible: a Value graph is owned by one render at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace xrt::chat {

// Thrown inside xrt_chat only. `raised` marks raise_exception('...') from the
// template, whose message is passed through unchanged.
struct TemplateError : std::runtime_error {
  TemplateError(std::string msg, int line = 0, int col = 0, bool raised = false)
      : std::runtime_error(std::move(msg)), line(line), col(col), raised(raised) {}
  int line, col;
  bool raised;
};

// What one render may build, so that no template (a model's, or one from a
// fuzzer) can exhaust memory or the stack. Python has no such limits (its
// integers and strings grow without bound); HF templates stay far below them.
inline constexpr size_t kMaxStringBytes = size_t{32} << 20;  // any string built, and the output
inline constexpr size_t kMaxListItems = size_t{1} << 20;     // any list built
inline constexpr int kMaxNesting = 256;                      // lists/dicts inside each other

// A render runs on a budget of steps, so that a template that loops for ever
// or keeps building bigger values stops with an error instead of holding a
// server thread. A step is one node or expression evaluated, one list item, or
// kBytesPerStep bytes of text made, searched, compared or printed. HF templates
// take about a hundred steps per message (bytes included).
inline constexpr uint64_t kMaxRenderSteps = uint64_t{1} << 20;
inline constexpr size_t kBytesPerStep = 256;

// The budget of the render running on this thread, for as long as it lives.
// Budgets nest: an inner one never has more than what its outer one has left,
// and what it spends is spent from the outer one too (so a caller, a fuzzer
// say, can run renders on a tighter budget than RenderTemplate's own).
class RenderBudget {
 public:
  explicit RenderBudget(uint64_t steps = kMaxRenderSteps);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

 private:
  friend void Spend(uint64_t steps);
  uint64_t left_, total_;
  RenderBudget* outer_;
};

// Takes `steps` from this thread's RenderBudget (none: free); TemplateError
// when it runs out.
void Spend(uint64_t steps);
inline void SpendBytes(size_t bytes) { Spend(1 + bytes / kBytesPerStep); }

// Throw TemplateError when a string of `bytes` / a list of `items` would pass
// the limits above.
void CheckStringSize(size_t bytes);
void CheckListSize(size_t items);
// *out += piece, within kMaxStringBytes.
void AppendBounded(std::string* out, std::string_view piece);

class Value;
struct CallArgs;
using ValueList = std::vector<Value>;

// An insertion-ordered string-keyed dictionary (as Python dicts are).
struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // jinja2 namespace(): allows attribute assignment

  const Value* Find(const std::string& key) const;
  void Set(const std::string& key, Value value);
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;  // throws TemplateError on failure
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;  // Undefined
  static Value Undefined(std::string hint = {});
  static Value None();
  Value(bool b);                                    // NOLINT
  Value(int v) : Value(static_cast<int64_t>(v)) {}  // NOLINT
  Value(int64_t v);                                 // NOLINT
  Value(double v);                                  // NOLINT
  Value(std::string s);                             // NOLINT
  Value(const char* s) : Value(std::string(s)) {}   // NOLINT
  // Lists and (non-namespace) dicts are immutable once made: both throw
  // TemplateError past kMaxNesting levels. A namespace counts as one level
  // whatever it holds, since it can change (and even hold itself).
  static Value List(ValueList items);
  static Value Dict(std::shared_ptr<ValueDict> dict);
  static Value Function(std::string name, std::function<Value(CallArgs&)> fn);

  // TemplateError past kMaxNesting levels or kMaxListItems items.
  template <typename Json>
  static Value FromJson(const Json& j, int level = 0);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  // Python's numbers.Number: bool, int, float.
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_callable() const { return kind_ == Kind::kCallable; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return is_bool() ? (b_ ? 1 : 0) : i_; }
  double as_double() const { return is_float() ? f_ : static_cast<double>(as_int()); }
  const std::string& str() const { return s_ ? *s_ : Empty(); }  // kString
  const ValueList& list() const { return *list_; }               // kList
  const ValueDict& dict() const { return *dict_; }               // kDict
  ValueDict& mutable_dict() const { return *dict_; }             // kDict (namespaces)
  const Callable& callable() const { return *fn_; }              // kCallable
  const std::string& undefined_hint() const { return str(); }    // kUndefined

  // Python truthiness.
  bool Truthy() const;
  // Python str(): what {{ value }} prints. A namespace inside itself prints
  // as {...}, as in Python; TemplateError past kMaxStringBytes or 2 *
  // kMaxNesting levels.
  std::string ToString() const;
  // Python repr(): how the value prints inside a list or dict.
  std::string Repr() const;
  // Python type name, for error messages ("str", "NoneType", ...).
  std::string TypeName() const;
  // Python ==, deep for lists and dicts; 1 == 1.0 == True.
  bool Equals(const Value& other) const;

 private:
  static const std::string& Empty();
  void CheckDepth() const;  // TemplateError past kMaxNesting
  void Print(bool repr, int level, std::vector<const ValueDict*>* open, std::string* out) const;

  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int depth_ = 0;  // lists/dicts: levels of nesting (see List)
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // shared: copying a Value never copies text
  std::shared_ptr<ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<Callable> fn_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index`, else the keyword `name`, else `fallback`.
  Value Get(size_t index, const char* name, Value fallback = Value()) const;
  const Value* Keyword(const std::string& name) const;
};

// Formats a double the way Python's repr(float) does ("1.0", "0.1", "1e-05").
std::string PythonFloatRepr(double v);

// UTF-8 code points, as Python str indexes them.
// (Invalid bytes count as one code point each.)
size_t CodePointLength(const std::string& s, size_t i);      // bytes of the one at byte i
std::vector<size_t> CodePointOffsets(const std::string& s);  // starts, then s.size()
size_t CodePointCount(const std::string& s);

template <typename Json>
Value Value::FromJson(const Json& j, int level) {
  if (level >= kMaxNesting)
    throw TemplateError("the template variables nest more than " + std::to_string(kMaxNesting) +
                        " levels deep");
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return None();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();  // past int64: the nearest float
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      CheckListSize(j.size());
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e, level + 1));
      return List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<ValueDict>();
      d->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d->items.emplace_back(it.key(), FromJson(it.value(), level + 1));
      return Dict(std::move(d));
    }
    default:
      return None();  // binary / discarded: not produced by JSON text
  }
}

}  // namespace xrt::chat
