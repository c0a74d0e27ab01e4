// Lexer and parser of the jinja2 subset used by Hugging Face chat templates.
//
// Whitespace control follows jinja2 with trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False (what transformers uses):
//  * "{%-" / "{{-" / "{#-" strip all whitespace before the tag, "-%}" / "-}}"
//    / "-#}" all whitespace after it;
//  * trim_blocks: the first newline after a block or comment tag is dropped
//    (not after "+%}");
//  * lstrip_blocks: spaces and tabs between the start of a line and a block or
//    comment tag are dropped (not for "{%+");
//  * one trailing newline at the end of the source is dropped.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <set>

#include <fmt/format.h>

#include "runtime/chat/template_ast.h"

namespace xrt::chat {
namespace {

struct Token {
  enum class Type { kName, kInt, kFloat, kString, kOp, kEnd };
  Type type = Type::kEnd;
  std::string text;  // name, operator, or decoded string
  int64_t i = 0;
  double f = 0;
  int line = 0, col = 0;
};

struct Item {
  enum class Type { kText, kVar, kBlock };
  Type type;
  std::string text;
  std::vector<Token> tokens;  // kVar / kBlock, ending with a kEnd token
  int line = 0, col = 0;
};

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Item> Run() {
    std::vector<Item> items;
    size_t pos = 0;
    enum { kNone, kOneNewline, kAll } pending = kNone;
    bool line_starting = true;
    while (pos <= src_.size()) {
      size_t open = FindOpen(pos);
      std::string text = src_.substr(pos, (open == std::string::npos ? src_.size() : open) - pos);
      // Whitespace control from the tag before this text.
      if (pending == kAll) {
        size_t k = 0;
        while (k < text.size() && IsSpace(text[k])) ++k;
        line_starting = k > 0 && text[k - 1] == '\n';
        text.erase(0, k);
      } else if (pending == kOneNewline) {
        line_starting = !text.empty() && text[0] == '\n';
        if (line_starting) text.erase(0, 1);
      } else if (pos > 0) {
        line_starting = false;
      }
      if (open == std::string::npos) {
        if (!text.empty()) items.push_back(Item{Item::Type::kText, text, {}, 0, 0});
        break;
      }
      char kind = src_[open + 1];  // '{', '%' or '#'
      char mod = open + 2 < src_.size() ? src_[open + 2] : '\0';
      // Whitespace control from the tag after this text.
      if (mod == '-') {
        size_t k = text.size();
        while (k > 0 && IsSpace(text[k - 1])) --k;
        text.resize(k);
      } else if (kind != '{' && mod != '+') {
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = true;
          for (size_t k = l_pos; k < text.size(); ++k)
            if (!IsSpace(text[k])) blank = false;
          if (blank) text.resize(l_pos);
        }
      }
      if (!text.empty()) items.push_back(Item{Item::Type::kText, text, {}, 0, 0});

      int line, col;
      LineCol(open, &line, &col);
      size_t body = open + 2 + ((mod == '-' || mod == '+') ? 1 : 0);
      size_t end_pos;  // just past the closing marker
      bool strip_after = false, keep_newline = false;
      if (kind == '#') {
        size_t close = src_.find("#}", body);
        if (close == std::string::npos) throw TemplateError("unclosed comment '{#'", line, col);
        strip_after = close > body && src_[close - 1] == '-';
        end_pos = close + 2;
      } else {
        Item item{kind == '{' ? Item::Type::kVar : Item::Type::kBlock, {}, {}, line, col};
        end_pos = LexTag(body, kind, line, col, &item.tokens, &strip_after, &keep_newline);
        items.push_back(std::move(item));
      }
      if (strip_after) {
        pending = kAll;
      } else if (kind != '{' && !keep_newline) {
        pending = kOneNewline;
      } else {
        pending = kNone;
      }
      pos = end_pos;
    }
    return items;
  }

  void LineCol(size_t off, int* line, int* col) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= off)
        lo = mid;
      else
        hi = mid;
    }
    *line = static_cast<int>(lo) + 1;
    *col = static_cast<int>(off - line_starts_[lo]) + 1;
  }

 private:
  size_t FindOpen(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  // Lexes the expression tokens of a {{ }} or {% %} tag starting at `p`;
  // returns the offset just past the closing marker.
  size_t LexTag(size_t p, char kind, int tag_line, int tag_col, std::vector<Token>* out,
                bool* strip_after, bool* keep_newline) {
    const char close = kind == '{' ? '}' : '%';
    int depth = 0;
    while (true) {
      while (p < src_.size() && IsSpace(src_[p])) ++p;
      if (p >= src_.size())
        throw TemplateError(fmt::format("unclosed tag '{{{}' (missing '{}}}')", kind, close),
                            tag_line, tag_col);
      Token t;
      LineCol(p, &t.line, &t.col);
      if (depth == 0) {
        for (char m : {'-', '+', '\0'}) {
          size_t q = p;
          if (m != '\0') {
            if (src_[q] != m) continue;
            ++q;
          }
          if (q + 1 < src_.size() && src_[q] == close && src_[q + 1] == '}') {
            if (m == '+' && kind == '{') break;
            *strip_after = m == '-';
            *keep_newline = m == '+';
            t.type = Token::Type::kEnd;
            out->push_back(t);
            return q + 2;
          }
        }
      }
      char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_'))
          ++q;
        t.type = Token::Type::kName;
        t.text = src_.substr(p, q - p);
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t q = p;
        bool is_float = false;
        auto digits = [&] {
          while (q < src_.size() &&
                 (std::isdigit(static_cast<unsigned char>(src_[q])) || src_[q] == '_'))
            ++q;
        };
        digits();
        if (q + 1 < src_.size() && src_[q] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
          is_float = true;
          ++q;
          digits();
        }
        if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
          size_t r = q + 1;
          if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
          if (r < src_.size() && std::isdigit(static_cast<unsigned char>(src_[r]))) {
            is_float = true;
            q = r;
            digits();
          }
        }
        std::string num;
        for (size_t k = p; k < q; ++k)
          if (src_[k] != '_') num += src_[k];
        if (is_float) {
          t.type = Token::Type::kFloat;
          t.f = std::strtod(num.c_str(), nullptr);
        } else {
          t.type = Token::Type::kInt;
          errno = 0;
          t.i = std::strtoll(num.c_str(), nullptr, 10);
          if (errno == ERANGE)
            throw TemplateError(fmt::format("integer literal {} does not fit in 64 bits", num),
                                t.line, t.col);
        }
        p = q;
      } else if (c == '\'' || c == '"') {
        t.type = Token::Type::kString;
        p = LexString(p, &t);
      } else {
        static const char* k_ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                      "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                      "]",  "{",  "}",  ",",  ".",  ":",  "|"};
        bool found = false;
        for (const char* op : k_ops) {
          size_t n = std::char_traits<char>::length(op);
          if (src_.compare(p, n, op) == 0) {
            t.type = Token::Type::kOp;
            t.text = op;
            p += n;
            found = true;
            break;
          }
        }
        if (!found) throw TemplateError(fmt::format("unexpected character '{}'", c), t.line, t.col);
        if (t.text == "(" || t.text == "[" || t.text == "{") ++depth;
        if (t.text == ")" || t.text == "]" || t.text == "}") {
          if (depth == 0)
            throw TemplateError(fmt::format("unexpected '{}'", t.text), t.line, t.col);
          --depth;
        }
      }
      out->push_back(std::move(t));
    }
  }

  // Python-style string literal (jinja2 decodes escapes like Python does).
  size_t LexString(size_t p, Token* t) {
    char q = src_[p++];
    std::string out;
    while (true) {
      if (p >= src_.size()) throw TemplateError("unterminated string literal", t->line, t->col);
      char c = src_[p++];
      if (c == q) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p >= src_.size()) throw TemplateError("unterminated string literal", t->line, t->col);
      char e = src_[p++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case 'a':
          out += '\a';
          break;
        case '0':
          out += '\0';
          break;
        case '\\':
          out += '\\';
          break;
        case '\'':
          out += '\'';
          break;
        case '"':
          out += '"';
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (p + n > src_.size())
            throw TemplateError("truncated escape in string literal", t->line, t->col);
          uint32_t cp = static_cast<uint32_t>(std::strtoul(src_.substr(p, n).c_str(), nullptr, 16));
          p += n;
          AppendUtf8(cp, &out);
          break;
        }
        default:
          out += '\\';
          out += e;
          break;  // unknown escapes stay verbatim
      }
    }
    t->text = std::move(out);
    return p;
  }

  static void AppendUtf8(uint32_t cp, std::string* out) {
    if (cp < 0x80) {
      *out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      *out += static_cast<char>(0xC0 | (cp >> 6));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *out += static_cast<char>(0xE0 | (cp >> 12));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (cp >> 18));
      *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  const std::string& src_;
  std::vector<size_t> line_starts_;
};

class Parser {
 public:
  explicit Parser(std::vector<Item> items) : items_(std::move(items)) {}

  NodeList ParseAll() {
    std::string stop;
    NodeList nodes = ParseBody({}, &stop, "", 0, 0);
    return nodes;
  }

 private:
  // ---- statements ----

  // Parses nodes until a block tag whose name is in `stops`; leaves the token
  // cursor just after that name and stores it in *stop.
  NodeList ParseBody(const std::set<std::string>& stops, std::string* stop, const char* opener,
                     int oline, int ocol) {
    NestingGuard nest(&block_depth_, kMaxBlockDepth, "blocks nest", oline, ocol);
    NodeList nodes;
    while (idx_ < items_.size()) {
      Item& item = items_[idx_];
      if (item.type == Item::Type::kText) {
        auto n = NewNode(Node::Kind::kText, item.line, item.col);
        n->text = item.text;
        nodes.push_back(std::move(n));
        ++idx_;
        continue;
      }
      toks_ = &item.tokens;
      tok_ = 0;
      if (item.type == Item::Type::kVar) {
        auto n = NewNode(Node::Kind::kOutput, item.line, item.col);
        n->expr = ParseExpr();
        ExpectEnd();
        nodes.push_back(std::move(n));
        ++idx_;
        continue;
      }
      const Token& head = Peek();
      if (head.type != Token::Type::kName) Fail(head, "expected a statement name after '{%'");
      if (stops.count(head.text)) {
        *stop = head.text;
        Next();
        return nodes;
      }
      nodes.push_back(ParseStatement());
    }
    if (!stops.empty()) {
      std::string expected;
      for (const auto& s : stops) {
        if (s.rfind("end", 0) == 0) expected = s;
      }
      throw TemplateError(
          fmt::format(
              "unexpected end of template: missing '{{% {} %}}' to close '{{% {} %}}' opened at "
              "line {} column {}",
              expected, opener, oline, ocol),
          oline, ocol);
    }
    return nodes;
  }

  NodePtr ParseStatement() {
    Token head = Next();
    const std::string& s = head.text;
    if (s == "if") return ParseIf(head);
    if (s == "for") return ParseFor(head);
    if (s == "set") return ParseSet(head);
    if (s == "macro") return ParseMacro(head);
    if (s == "break" || s == "continue") {
      auto n =
          NewNode(s == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, head.line, head.col);
      ExpectEnd();
      ++idx_;
      return n;
    }
    if (s == "generation") {
      auto n = NewNode(Node::Kind::kScope, head.line, head.col);
      ExpectEnd();
      ++idx_;
      std::string stop;
      n->body = ParseBody({"endgeneration"}, &stop, "generation", head.line, head.col);
      ExpectEnd();
      ++idx_;
      return n;
    }
    if (s.rfind("end", 0) == 0 || s == "elif" || s == "else")
      Fail(head, fmt::format("unexpected '{{% {} %}}' with no open block to close", s));
    Fail(head, fmt::format("unknown or unsupported tag '{}'", s));
  }

  NodePtr ParseIf(const Token& head) {
    auto n = NewNode(Node::Kind::kIf, head.line, head.col);
    ExprPtr cond = ParseExpr();
    ExpectEnd();
    ++idx_;
    while (true) {
      std::string stop;
      NodeList body = ParseBody({"elif", "else", "endif"}, &stop, "if", head.line, head.col);
      n->branches.emplace_back(std::move(cond), std::move(body));
      if (stop == "elif") {
        cond = ParseExpr();
        ExpectEnd();
        ++idx_;
        continue;
      }
      if (stop == "else") {
        ExpectEnd();
        ++idx_;
        n->else_body = ParseBody({"endif"}, &stop, "if", head.line, head.col);
      }
      ExpectEnd();
      ++idx_;
      return n;
    }
  }

  NodePtr ParseFor(const Token& head) {
    auto n = NewNode(Node::Kind::kFor, head.line, head.col);
    bool paren = AcceptOp("(");
    do {
      n->targets.push_back(ExpectName("a loop variable name"));
    } while (AcceptOp(","));
    if (paren) ExpectOp(")");
    const Token& in = Peek();
    if (in.type != Token::Type::kName || in.text != "in") Fail(in, "expected 'in' in for loop");
    Next();
    n->expr = ParseExpr(/*with_condexpr=*/false);
    if (AcceptName("if")) n->filter = ParseExpr();
    if (Peek().type == Token::Type::kName && Peek().text == "recursive")
      Fail(Peek(), "recursive for loops are not supported");
    ExpectEnd();
    ++idx_;
    std::string stop;
    n->body = ParseBody({"else", "endfor"}, &stop, "for", head.line, head.col);
    if (stop == "else") {
      ExpectEnd();
      ++idx_;
      n->else_body = ParseBody({"endfor"}, &stop, "for", head.line, head.col);
    }
    ExpectEnd();
    ++idx_;
    return n;
  }

  NodePtr ParseSet(const Token& head) {
    auto n = NewNode(Node::Kind::kSet, head.line, head.col);
    n->targets.push_back(ExpectName("a variable name"));
    if (AcceptOp(".")) {
      n->attr = ExpectName("an attribute name");
    } else {
      while (AcceptOp(",")) n->targets.push_back(ExpectName("a variable name"));
    }
    if (AcceptOp("=")) {
      n->expr = ParseExpr();
      if (Peek().type == Token::Type::kOp && Peek().text == ",") {  // set x = a, b
        auto list = NewExpr(Expr::Kind::kList, n->expr->line, n->expr->col);
        list->args.push_back(std::move(n->expr));
        while (AcceptOp(",")) list->args.push_back(ParseExpr());
        n->expr = std::move(list);
      }
      ExpectEnd();
      ++idx_;
      return n;
    }
    if (!n->attr.empty() || n->targets.size() != 1) Fail(Peek(), "expected '=' in set");
    ExpectEnd();
    ++idx_;
    std::string stop;
    n->body = ParseBody({"endset"}, &stop, "set", head.line, head.col);
    ExpectEnd();
    ++idx_;
    return n;
  }

  NodePtr ParseMacro(const Token& head) {
    auto n = NewNode(Node::Kind::kMacro, head.line, head.col);
    n->name = ExpectName("a macro name");
    ExpectOp("(");
    if (!AcceptOp(")")) {
      do {
        std::string p = ExpectName("a parameter name");
        ExprPtr def;
        if (AcceptOp("=")) def = ParseExpr();
        n->params.emplace_back(std::move(p), std::move(def));
      } while (AcceptOp(","));
      ExpectOp(")");
    }
    ExpectEnd();
    ++idx_;
    std::string stop;
    n->body = ParseBody({"endmacro"}, &stop, "macro", head.line, head.col);
    if (Peek().type == Token::Type::kName) Next();  // {% endmacro name %}
    ExpectEnd();
    ++idx_;
    return n;
  }

  // ---- expressions ----

  ExprPtr ParseExpr(bool with_condexpr = true) {
    NestingGuard nest(&expr_depth_, kMaxExprDepth, "expressions nest", Peek().line, Peek().col);
    ExprPtr e = ParseOr();
    while (with_condexpr && Peek().type == Token::Type::kName && Peek().text == "if") {
      Token t = Next();
      auto c = NewExpr(Expr::Kind::kCond, t.line, t.col);
      c->a = ParseOr();  // condition
      c->b = std::move(e);
      if (AcceptName("else")) c->c = ParseExpr();
      e = Seal(std::move(c));
    }
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr e = ParseAnd();
    while (Peek().type == Token::Type::kName && Peek().text == "or") {
      Token t = Next();
      auto n = NewExpr(Expr::Kind::kOr, t.line, t.col);
      n->a = std::move(e);
      n->b = ParseAnd();
      e = Seal(std::move(n));
    }
    return e;
  }

  ExprPtr ParseAnd() {
    ExprPtr e = ParseNot();
    while (Peek().type == Token::Type::kName && Peek().text == "and") {
      Token t = Next();
      auto n = NewExpr(Expr::Kind::kAnd, t.line, t.col);
      n->a = std::move(e);
      n->b = ParseNot();
      e = Seal(std::move(n));
    }
    return e;
  }

  ExprPtr ParseNot() {
    if (Peek().type == Token::Type::kName && Peek().text == "not") {
      Token t = Next();
      NestingGuard nest(&expr_depth_, kMaxExprDepth, "expressions nest", t.line, t.col);
      auto n = NewExpr(Expr::Kind::kUnary, t.line, t.col);
      n->name = "not";
      n->a = ParseNot();
      return Seal(std::move(n));
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    ExprPtr first = ParseMath1();
    ExprPtr cmp;
    while (true) {
      const Token& t = Peek();
      std::string op;
      if (t.type == Token::Type::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                         t.text == "<=" || t.text == ">" || t.text == ">=")) {
        op = t.text;
        Next();
      } else if (t.type == Token::Type::kName && t.text == "in") {
        op = "in";
        Next();
      } else if (t.type == Token::Type::kName && t.text == "not" &&
                 PeekAt(1).type == Token::Type::kName && PeekAt(1).text == "in") {
        op = "not in";
        Next();
        Next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = NewExpr(Expr::Kind::kCompare, first->line, first->col);
        cmp->a = std::move(first);
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(ParseMath1());
    }
    return cmp ? Seal(std::move(cmp)) : std::move(first);
  }

  ExprPtr Binary(ExprPtr lhs, const Token& op, ExprPtr rhs) {
    auto n = NewExpr(Expr::Kind::kBinary, op.line, op.col);
    n->name = op.text;
    n->a = std::move(lhs);
    n->b = std::move(rhs);
    return Seal(std::move(n));
  }

  ExprPtr ParseMath1() {
    ExprPtr e = ParseConcat();
    while (PeekOp("+") || PeekOp("-")) {
      Token t = Next();
      e = Binary(std::move(e), t, ParseConcat());
    }
    return e;
  }

  ExprPtr ParseConcat() {
    ExprPtr e = ParseMath2();
    while (PeekOp("~")) {
      Token t = Next();
      e = Binary(std::move(e), t, ParseMath2());
    }
    return e;
  }

  ExprPtr ParseMath2() {
    ExprPtr e = ParsePow();
    while (PeekOp("*") || PeekOp("/") || PeekOp("//") || PeekOp("%")) {
      Token t = Next();
      e = Binary(std::move(e), t, ParsePow());
    }
    return e;
  }

  ExprPtr ParsePow() {
    ExprPtr e = ParseUnary(true);
    while (PeekOp("**")) {
      Token t = Next();
      e = Binary(std::move(e), t, ParseUnary(true));
    }
    return e;
  }

  ExprPtr ParseUnary(bool with_filter) {
    ExprPtr e;
    if (PeekOp("-") || PeekOp("+")) {
      Token t = Next();
      NestingGuard nest(&expr_depth_, kMaxExprDepth, "expressions nest", t.line, t.col);
      e = NewExpr(Expr::Kind::kUnary, t.line, t.col);
      e->name = t.text;
      e->a = ParseUnary(false);
      e = Seal(std::move(e));
    } else {
      e = ParsePrimary();
    }
    e = ParsePostfix(std::move(e));
    if (with_filter) e = ParseFilterExpr(std::move(e));
    return e;
  }

  ExprPtr ParsePrimary() {
    Token t = Next();
    switch (t.type) {
      case Token::Type::kName: {
        if (t.text == "true" || t.text == "True") return Literal(Value(true), t);
        if (t.text == "false" || t.text == "False") return Literal(Value(false), t);
        if (t.text == "none" || t.text == "None") return Literal(Value::None(), t);
        auto n = NewExpr(Expr::Kind::kName, t.line, t.col);
        n->name = t.text;
        return n;
      }
      case Token::Type::kString: {
        std::string s = t.text;
        while (Peek().type == Token::Type::kString) s += Next().text;
        return Literal(Value(std::move(s)), t);
      }
      case Token::Type::kInt:
        return Literal(Value(t.i), t);
      case Token::Type::kFloat:
        return Literal(Value(t.f), t);
      case Token::Type::kOp:
        if (t.text == "(") {
          if (AcceptOp(")")) return NewExpr(Expr::Kind::kList, t.line, t.col);  // ()
          ExprPtr e = ParseExpr();
          if (PeekOp(",")) {  // tuple: modelled as a list
            auto list = NewExpr(Expr::Kind::kList, t.line, t.col);
            list->args.push_back(std::move(e));
            while (AcceptOp(",")) {
              if (PeekOp(")")) break;
              list->args.push_back(ParseExpr());
            }
            e = Seal(std::move(list));
          }
          ExpectOp(")");
          return e;
        }
        if (t.text == "[") {
          auto list = NewExpr(Expr::Kind::kList, t.line, t.col);
          while (!PeekOp("]")) {
            list->args.push_back(ParseExpr());
            if (!AcceptOp(",")) break;
          }
          ExpectOp("]");
          return Seal(std::move(list));
        }
        if (t.text == "{") {
          auto dict = NewExpr(Expr::Kind::kDict, t.line, t.col);
          while (!PeekOp("}")) {
            dict->dict_keys.push_back(ParseExpr());
            ExpectOp(":");
            dict->args.push_back(ParseExpr());
            if (!AcceptOp(",")) break;
          }
          ExpectOp("}");
          return Seal(std::move(dict));
        }
        break;
      default:
        break;
    }
    Fail(t, t.type == Token::Type::kEnd ? "unexpected end of expression"
                                        : fmt::format("unexpected '{}'", Describe(t)));
  }

  ExprPtr ParsePostfix(ExprPtr e) {
    while (true) {
      if (PeekOp(".")) {
        Token dot = Next();
        Token name = Next();
        if (name.type == Token::Type::kName) {
          auto n = NewExpr(Expr::Kind::kAttr, dot.line, dot.col);
          n->name = name.text;
          n->a = std::move(e);
          e = Seal(std::move(n));
        } else if (name.type == Token::Type::kInt) {
          auto n = NewExpr(Expr::Kind::kItem, dot.line, dot.col);
          n->a = std::move(e);
          n->b = Literal(Value(name.i), name);
          e = Seal(std::move(n));
        } else {
          Fail(name, "expected an attribute name after '.'");
        }
      } else if (PeekOp("[")) {
        Token br = Next();
        ExprPtr start, stop, step;
        bool slice = false;
        if (!PeekOp(":")) start = ParseExpr();
        if (AcceptOp(":")) {
          slice = true;
          if (!PeekOp(":") && !PeekOp("]")) stop = ParseExpr();
          if (AcceptOp(":") && !PeekOp("]")) step = ParseExpr();
        }
        ExpectOp("]");
        auto n = NewExpr(slice ? Expr::Kind::kSlice : Expr::Kind::kItem, br.line, br.col);
        n->a = std::move(e);
        if (slice) {
          n->args.push_back(std::move(start));
          n->args.push_back(std::move(stop));
          n->args.push_back(std::move(step));
        } else {
          n->b = std::move(start);
        }
        e = Seal(std::move(n));
      } else if (PeekOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr ParseCall(ExprPtr callee) {
    Token lp = Next();
    auto n = NewExpr(Expr::Kind::kCall, lp.line, lp.col);
    n->a = std::move(callee);
    ParseArgs(n.get());
    return Seal(std::move(n));
  }

  // After '(' : positional and name=value arguments up to ')'.
  void ParseArgs(Expr* n) {
    while (!PeekOp(")")) {
      if (Peek().type == Token::Type::kName && PeekAt(1).type == Token::Type::kOp &&
          PeekAt(1).text == "=") {
        std::string key = Next().text;
        Next();
        n->kwargs.emplace_back(std::move(key), ParseExpr());
      } else {
        if (!n->kwargs.empty()) Fail(Peek(), "positional argument after keyword argument");
        n->args.push_back(ParseExpr());
      }
      if (!AcceptOp(",")) break;
    }
    ExpectOp(")");
  }

  ExprPtr ParseFilterExpr(ExprPtr e) {
    while (true) {
      if (PeekOp("|")) {
        Token bar = Next();
        auto n = NewExpr(Expr::Kind::kFilter, bar.line, bar.col);
        n->name = ExpectName("a filter name");
        n->a = std::move(e);
        if (AcceptOp("(")) ParseArgs(n.get());
        e = Seal(std::move(n));
      } else if (Peek().type == Token::Type::kName && Peek().text == "is") {
        Token is = Next();
        auto n = NewExpr(Expr::Kind::kTest, is.line, is.col);
        n->negated = AcceptName("not");
        n->name = ExpectName("a test name");
        n->a = std::move(e);
        const Token& t = Peek();
        if (AcceptOp("(")) {
          ParseArgs(n.get());
        } else if ((t.type == Token::Type::kName && t.text != "else" && t.text != "or" &&
                    t.text != "and") ||
                   t.type == Token::Type::kString || t.type == Token::Type::kInt ||
                   t.type == Token::Type::kFloat ||
                   (t.type == Token::Type::kOp && (t.text == "[" || t.text == "{"))) {
          if (t.type == Token::Type::kName && t.text == "is")
            Fail(t, "tests cannot be chained with 'is'");
          n->args.push_back(ParsePostfix(ParsePrimary()));
        }
        e = Seal(std::move(n));
      } else if (PeekOp("(")) {
        e = ParseCall(std::move(e));
      } else {
        return e;
      }
    }
  }

  // ---- token helpers ----
  const Token& Peek() const { return (*toks_)[tok_]; }
  const Token& PeekAt(size_t k) const {
    size_t i = std::min(tok_ + k, toks_->size() - 1);
    return (*toks_)[i];
  }
  Token Next() {
    Token t = (*toks_)[tok_];
    if (t.type != Token::Type::kEnd) ++tok_;
    return t;
  }
  bool PeekOp(const char* op) const { return Peek().type == Token::Type::kOp && Peek().text == op; }
  bool AcceptOp(const char* op) {
    if (!PeekOp(op)) return false;
    Next();
    return true;
  }
  bool AcceptName(const char* name) {
    if (Peek().type != Token::Type::kName || Peek().text != name) return false;
    Next();
    return true;
  }
  void ExpectOp(const char* op) {
    if (!AcceptOp(op)) Fail(Peek(), fmt::format("expected '{}', found {}", op, Describe(Peek())));
  }
  std::string ExpectName(const char* what) {
    if (Peek().type != Token::Type::kName)
      Fail(Peek(), fmt::format("expected {}, found {}", what, Describe(Peek())));
    return Next().text;
  }
  void ExpectEnd() {
    if (Peek().type != Token::Type::kEnd)
      Fail(Peek(), fmt::format("expected end of tag, found {}", Describe(Peek())));
  }
  static std::string Describe(const Token& t) {
    switch (t.type) {
      case Token::Type::kEnd:
        return "end of tag";
      case Token::Type::kString:
        return "a string";
      case Token::Type::kInt:
      case Token::Type::kFloat:
        return "a number";
      default:
        return "'" + t.text + "'";
    }
  }
  // Records how deep the finished node `e` reaches; a chain of operators,
  // filters or attributes deepens the tree without recursing in the parser.
  static ExprPtr Seal(ExprPtr e) {
    int d = 0;
    for (const Expr* c : {e->a.get(), e->b.get(), e->c.get()})
      if (c) d = std::max(d, c->depth);
    for (const auto& c : e->args)
      if (c) d = std::max(d, c->depth);
    for (const auto& c : e->dict_keys) d = std::max(d, c->depth);
    for (const auto& kv : e->kwargs) d = std::max(d, kv.second->depth);
    e->depth = d + 1;
    if (e->depth > kMaxExprDepth)
      throw TemplateError(fmt::format("expressions nest more than {} levels deep", kMaxExprDepth),
                          e->line, e->col);
    return e;
  }

  [[noreturn]] static void Fail(const Token& t, const std::string& msg) {
    throw TemplateError(msg, t.line, t.col);
  }

  static NodePtr NewNode(Node::Kind k, int line, int col) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = line;
    n->col = col;
    return n;
  }
  static ExprPtr NewExpr(Expr::Kind k, int line, int col) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    e->col = col;
    return e;
  }
  static ExprPtr Literal(Value v, const Token& t) {
    auto e = NewExpr(Expr::Kind::kLiteral, t.line, t.col);
    e->literal = std::move(v);
    return e;
  }

  std::vector<Item> items_;
  size_t idx_ = 0;
  int expr_depth_ = 0, block_depth_ = 0;  // parser recursion now (NestingGuard)
  const std::vector<Token>* toks_ = nullptr;
  size_t tok_ = 0;
};

}  // namespace

NodeList ParseTemplate(const std::string& raw) {
  // jinja2 normalizes newlines and drops one trailing newline.
  std::string src;
  src.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '\r') {
      src += '\n';
      if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
    } else {
      src += raw[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  Lexer lexer(src);
  Parser parser(lexer.Run());
  return parser.ParseAll();
}

}  // namespace xrt::chat
