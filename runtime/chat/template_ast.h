// The syntax tree of a parsed chat template, the parser that builds it and the
// interpreter that renders it (internal to xrt_chat; the public API is
// chat_template.h).
//
// Errors inside the parser and the interpreter are thrown as TemplateError and
// caught in chat_template.cc, which turns them into an xrt::Status: no
// exception leaves the library.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/chat/value.h"

namespace xrt::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args = items
    kDict,     // kwargs-like: keys in dict_keys, values in args
    kAttr,     // a.name
    kItem,     // a[b]
    kSlice,    // a[b:c:d], any of b/c/d may be null
    kCall,     // a(args, kwargs)
    kFilter,   // a | name(args, kwargs)
    kTest,     // a is [not] name(args)
    kUnary,    // op a  ("-", "+", "not")
    kBinary,   // a op b  (+ - * / // % ** ~)
    kCompare,  // a ops[0] args[0] ops[1] args[1] ...
    kAnd,      // a and b
    kOr,       // a or b
    kCond,     // b if a else c
  };
  Kind kind;
  int line = 0, col = 0;
  int depth = 1;  // levels of the tree from here down (kMaxExprDepth at most)
  Value literal;
  std::string name;  // name, attribute, filter, test or operator
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;    // kCompare
  std::vector<ExprPtr> dict_keys;  // kDict
  bool negated = false;            // kTest
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using NodeList = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,    // text
    kOutput,  // {{ expr }}
    kIf,      // branches (cond, body); else_body
    kFor,     // targets in expr [if filter]: body [else else_body]
    kSet,     // targets / (target.attr) = expr, or block set with body
    kMacro,   // name(params = defaults): body
    kBreak,
    kContinue,
    kScope,  // {% generation %}: body rendered in place
  };
  Kind kind;
  int line = 0, col = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, NodeList>> branches;
  NodeList body, else_body;
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace attribute: targets[0].attr
  std::string name;  // kMacro
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro (default may be null)
};

// How deep the parser lets expressions and blocks nest: the tree is walked
// recursively (rendered, and destroyed), so its depth bounds the stack. Python
// stops jinja2 far earlier (its recursion limit), at about 100 parentheses.
inline constexpr int kMaxExprDepth = 256;
inline constexpr int kMaxBlockDepth = 128;

// One level of recursion counted in *depth for as long as it lives; past
// `limit` levels, TemplateError "<what> more than <limit> levels deep" at
// line:col. The parser and the interpreter bound their recursion with it.
class NestingGuard {
 public:
  NestingGuard(int* depth, int limit, const char* what, int line, int col) : depth_(depth) {
    if (*depth_ >= limit)
      throw TemplateError(
          std::string(what) + " more than " + std::to_string(limit) + " levels deep", line, col);
    ++*depth_;
  }
  ~NestingGuard() { --*depth_; }
  NestingGuard(const NestingGuard&) = delete;
  NestingGuard& operator=(const NestingGuard&) = delete;

 private:
  int* depth_;
};

// Parses `source` as a jinja2 template with HF's settings (trim_blocks,
// lstrip_blocks, keep_trailing_newline=False). Throws TemplateError with the
// 1-based line and column of the problem.
NodeList ParseTemplate(const std::string& source);

// Renders `nodes` with `context` as the root variables. Throws TemplateError.
std::string RenderTemplate(const NodeList& nodes, const Value& context);

}  // namespace xrt::chat
