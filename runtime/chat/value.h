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
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace xrt::chat {

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
  static Value List(ValueList items);
  static Value Dict(std::shared_ptr<ValueDict> dict);
  static Value Function(std::string name, std::function<Value(CallArgs&)> fn);

  template <typename Json>
  static Value FromJson(const Json& j);

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
  const std::string& str() const { return s_; }             // kString
  const ValueList& list() const { return *list_; }          // kList
  const ValueDict& dict() const { return *dict_; }          // kDict
  ValueDict& mutable_dict() const { return *dict_; }        // kDict (namespaces)
  const Callable& callable() const { return *fn_; }         // kCallable
  const std::string& undefined_hint() const { return s_; }  // kUndefined

  // Python truthiness.
  bool Truthy() const;
  // Python str(): what {{ value }} prints.
  std::string ToString() const;
  // Python repr(): how the value prints inside a list or dict.
  std::string Repr() const;
  // Python type name, for error messages ("str", "NoneType", ...).
  std::string TypeName() const;
  // Python ==, deep for lists and dicts; 1 == 1.0 == True.
  bool Equals(const Value& other) const;

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::string s_;
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

// UTF-8 helpers: split into code points (each a std::string), and join back.
std::vector<std::string> SplitCodePoints(const std::string& s);
size_t CodePointCount(const std::string& s);

template <typename Json>
Value Value::FromJson(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return None();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJson(e));
      return List(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<ValueDict>();
      d->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d->items.emplace_back(it.key(), FromJson(it.value()));
      return Dict(std::move(d));
    }
    default:
      return None();  // binary / discarded: not produced by JSON text
  }
}

}  // namespace xrt::chat
