// Jinja parser (see jinja_parser.h). Method names follow jinja2.parser so the two can be compared.
#include "text/jinja_parser.h"

#include <cstdlib>
#include <initializer_list>
#include <set>
#include <string>

#include "text/jinja_strings.h"

namespace tf::jinja {
namespace {

// str.isspace(): not empty, every code point whitespace.
bool is_python_space(const std::string& text) {
  if (text.empty()) return false;
  for (char32_t c : utf8_decode(text))
    if (!py_isspace(c)) return false;
  return true;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_template() {
    Body body = subparse({});
    if (cur().type != TokenType::kEof) fail("unexpected tag");
    return body;
  }

 private:
  const Token& cur() const { return t_[pos_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == TokenType::kOperator && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == TokenType::kName && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw JinjaError(message, cur().line, cur().column);
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof:
        return "end of template";
      case TokenType::kBlockEnd:
        return "end of statement block";
      case TokenType::kVarEnd:
        return "end of print statement";
      default:
        return "'" + t.value + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
  }
  void expect_name(const char* name) {
    if (!skip_name(name)) fail(std::string("expected '") + name + "', got " + describe(cur()));
  }
  std::string expect_identifier() {
    if (cur().type != TokenType::kName) fail("expected a name, got " + describe(cur()));
    std::string v = cur().value;
    advance();
    return v;
  }
  void expect_block_end() {
    if (cur().type != TokenType::kBlockEnd) fail("expected end of statement block, got " + describe(cur()));
    advance();
  }
  ExprPtr make(ExprKind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }
  StmtPtr make_stmt(StmtKind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->column = at.column;
    return s;
  }

  // Statements until a block tag whose name is in `ends`; leaves the position on that name.
  Body subparse(std::initializer_list<const char*> ends) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kEof) {
        if (ends.size() != 0)
          fail(std::string("unexpected end of template, expected '") + *ends.begin() + "'");
        return body;
      }
      if (t.type == TokenType::kText) {
        auto s = make_stmt(StmtKind::kText, t);
        s->text = t.value;
        body.push_back(std::move(s));
        advance();
      } else if (t.type == TokenType::kVarBegin) {
        advance();
        auto s = make_stmt(StmtKind::kOutput, t);
        s->expr = parse_tuple(true, false);
        if (cur().type != TokenType::kVarEnd) fail("expected end of print statement, got " + describe(cur()));
        advance();
        body.push_back(std::move(s));
      } else if (t.type == TokenType::kBlockBegin) {
        advance();
        if (cur().type != TokenType::kName) fail("tag name expected");
        for (const char* end : ends)
          if (cur().value == end) return body;
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t));
      }
    }
  }

  StmtPtr parse_statement() {
    DepthGuard guard(*this);
    const Token& t = cur();
    const std::string& name = t.value;
    if (name == "if") return parse_if();
    if (name == "for") return parse_for();
    if (name == "set") return parse_set();
    if (name == "macro") return parse_macro();
    if (name == "call") return parse_call_block();
    if (name == "filter") return parse_filter_block();
    if (name == "with") return parse_with();
    if (name == "generation") {
      auto s = make_stmt(StmtKind::kGeneration, t);
      advance();
      expect_block_end();
      s->body = subparse({"endgeneration"});
      advance();
      expect_block_end();
      return s;
    }
    if (name == "break" || name == "continue") {
      auto s = make_stmt(name == "break" ? StmtKind::kBreak : StmtKind::kContinue, t);
      advance();
      expect_block_end();
      return s;
    }
    if (name == "block") return parse_block();
    if (name == "include" || name == "import" || name == "from" || name == "extends")
      fail("Encountered unknown tag '" + name + "'. ('" + name +
           "' is not supported: a chat template is rendered standalone, without a template loader)");
    fail("Encountered unknown tag '" + name + "'.");
  }

  StmtPtr parse_if() {
    auto s = make_stmt(StmtKind::kIf, cur());
    advance();
    while (true) {
      s->conditions.push_back(parse_tuple(false, false));
      expect_block_end();
      s->bodies.push_back(subparse({"elif", "else", "endif"}));
      if (skip_name("elif")) continue;
      if (skip_name("else")) {
        expect_block_end();
        s->else_body = subparse({"endif"});
      }
      expect_name("endif");
      expect_block_end();
      return s;
    }
  }

  // Assignment targets as jinja2 parses them: names and tuples of targets, nested at will. A tuple
  // that is not the whole target list is kept as "(", its targets, ")" (see assign_targets); `(x)` is x.
  void parse_target(std::vector<std::string>& out) {
    if (!skip_op("(")) {
      out.push_back(expect_identifier());
      return;
    }
    std::vector<std::string> inner;
    size_t count = 0;
    bool comma = false;
    while (!is_op(")")) {
      parse_target(inner);
      ++count;
      if (!skip_op(",")) break;
      comma = true;
    }
    expect_op(")");
    if (count != 1 || comma) out.push_back("(");
    out.insert(out.end(), inner.begin(), inner.end());
    if (count != 1 || comma) out.push_back(")");
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> items;
    do {
      parse_target(items);
    } while (skip_op(","));
    return items;
  }

  StmtPtr parse_for() {
    auto s = make_stmt(StmtKind::kFor, cur());
    advance();
    s->targets = parse_targets();
    expect_name("in");
    s->expr = parse_tuple(false, false, "recursive");
    if (skip_name("if")) s->condition = parse_expression(true);
    if (skip_name("recursive")) s->recursive = true;
    expect_block_end();
    s->body = subparse({"endfor", "else"});
    if (skip_name("else")) {
      expect_block_end();
      s->else_body = subparse({"endfor"});
    }
    expect_name("endfor");
    expect_block_end();
    return s;
  }

  StmtPtr parse_set() {
    auto s = make_stmt(StmtKind::kSet, cur());
    advance();
    if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == ".") {
      s->targets.push_back(expect_identifier());
      advance();
      s->attr = expect_identifier();
      expect_op("=");
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    s->targets = parse_targets();
    if (skip_op("=")) {
      s->expr = parse_tuple(true, false);
      expect_block_end();
      return s;
    }
    s->kind = StmtKind::kSetBlock;
    if (s->targets.size() != 1) fail("a block set assigns one name");
    if (is_op("|")) s->expr = parse_filter(nullptr, false);
    expect_block_end();
    s->body = subparse({"endset"});
    advance();
    expect_block_end();
    return s;
  }

  void parse_signature(Stmt& s) {
    expect_op("(");
    bool any_default = false;
    while (!is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      s.params.push_back(expect_identifier());
      if (skip_op("=")) {
        s.defaults.push_back(parse_expression(true));
        any_default = true;
      } else {
        if (any_default) fail("non-default argument follows default argument");
        s.defaults.push_back(nullptr);
      }
    }
    advance();
  }

  // jinja2 (find_undeclared): a macro takes extra positional arguments only if its body reads
  // `varargs`, extra keyword arguments only if it reads `kwargs`, and a caller only if it reads `caller`.
  static void scan_names(const Expr* e, Stmt& m) {
    if (!e) return;
    if (e->kind == ExprKind::kName) {
      if (e->name == "varargs") m.uses_varargs = true;
      if (e->name == "kwargs") m.uses_kwargs = true;
      if (e->name == "caller") m.uses_caller = true;
    }
    scan_names(e->a.get(), m);
    scan_names(e->b.get(), m);
    scan_names(e->c.get(), m);
    for (const auto& x : e->args) scan_names(x.get(), m);
    for (const auto& [k, x] : e->kwargs) scan_names(x.get(), m);
  }
  static void scan_names(const Body& body, Stmt& m) {
    for (const auto& st : body) {
      scan_names(st->expr.get(), m);
      scan_names(st->condition.get(), m);
      for (const auto& x : st->conditions) scan_names(x.get(), m);
      for (const auto& x : st->defaults) scan_names(x.get(), m);
      for (const auto& b : st->bodies) scan_names(b, m);
      scan_names(st->body, m);
      scan_names(st->else_body, m);
    }
  }

  StmtPtr parse_macro() {
    auto s = make_stmt(StmtKind::kMacro, cur());
    advance();
    s->name = expect_identifier();
    parse_signature(*s);
    expect_block_end();
    s->body = subparse({"endmacro"});
    scan_names(s->body, *s);
    advance();
    if (cur().type == TokenType::kName && cur().value == s->name) advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_call_block() {
    auto s = make_stmt(StmtKind::kCallBlock, cur());
    advance();
    if (is_op("(")) parse_signature(*s);
    s->expr = parse_expression(true);
    if (s->expr->kind != ExprKind::kCall) fail("expected call");
    expect_block_end();
    s->body = subparse({"endcall"});
    scan_names(s->body, *s);
    advance();
    expect_block_end();
    return s;
  }

  StmtPtr parse_filter_block() {
    auto s = make_stmt(StmtKind::kFilterBlock, cur());
    advance();
    s->expr = parse_filter(nullptr, true);
    expect_block_end();
    s->body = subparse({"endfilter"});
    advance();
    expect_block_end();
    return s;
  }

  // `{% block name [scoped] [required] %}...{% endblock [name] %}` (jinja2.parser.parse_block).
  StmtPtr parse_block() {
    auto s = make_stmt(StmtKind::kBlock, cur());
    advance();
    s->name = expect_identifier();
    s->scoped = skip_name("scoped");
    s->required = skip_name("required");
    if (is_op("-"))
      fail(
          "Block names in Jinja have to be valid Python identifiers and may not contain hyphens, use an "
          "underscore instead.");
    if (!block_names_.insert(s->name).second)
      throw JinjaError("TemplateAssertionError: block '" + s->name + "' defined twice", s->line, s->column);
    expect_block_end();
    s->body = subparse({"endblock"});
    if (s->required)
      for (const auto& part : s->body)
        if (part->kind != StmtKind::kText || !is_python_space(part->text))
          fail("Required blocks can only contain comments or whitespace");
    advance();
    skip_name(s->name.c_str());
    expect_block_end();
    return s;
  }

  StmtPtr parse_with() {
    auto s = make_stmt(StmtKind::kWith, cur());
    advance();
    while (cur().type != TokenType::kBlockEnd) {
      if (!s->targets.empty()) expect_op(",");
      s->targets.push_back(expect_identifier());
      expect_op("=");
      s->conditions.push_back(parse_expression(true));
    }
    expect_block_end();
    s->body = subparse({"endwith"});
    advance();
    expect_block_end();
    return s;
  }

  // ---- expressions ----

  bool is_tuple_end(const char* extra_end) const {
    const Token& t = cur();
    if (t.type == TokenType::kVarEnd || t.type == TokenType::kBlockEnd || t.type == TokenType::kEof)
      return true;
    if (t.type == TokenType::kOperator && t.value == ")") return true;
    return extra_end && t.type == TokenType::kName && t.value == extra_end;
  }

  ExprPtr parse_tuple(bool with_condexpr, bool explicit_parentheses, const char* extra_end = nullptr) {
    const Token& start = cur();
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra_end)) break;
      items.push_back(with_condexpr ? parse_expression(true) : parse_or());
      if (is_op(",")) {
        is_tuple = true;
      } else {
        break;
      }
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) fail("Expected an expression, got " + describe(cur()));
    }
    auto e = make(ExprKind::kTuple, start);
    e->args = std::move(items);
    return e;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    ExprPtr expr1 = parse_or();
    while (is_name("if")) {
      const Token& at = cur();
      advance();
      ExprPtr test = parse_or();
      ExprPtr otherwise;
      if (skip_name("else")) otherwise = parse_condexpr();
      auto e = make(ExprKind::kCondition, at);
      e->a = std::move(expr1);
      e->b = std::move(test);
      e->c = std::move(otherwise);
      expr1 = std::move(e);
    }
    return expr1;
  }

  ExprPtr binary(ExprKind kind, const Token& at, std::string op, ExprPtr l, ExprPtr r) {
    auto e = make(kind, at);
    e->name = std::move(op);
    e->a = std::move(l);
    e->b = std::move(r);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const Token& at = cur();
      advance();
      left = binary(ExprKind::kOr, at, "or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const Token& at = cur();
      advance();
      left = binary(ExprKind::kAnd, at, "and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& at = cur();
      advance();
      auto e = make(ExprKind::kUnary, at);
      e->name = "not";
      e->a = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const Token& at = cur();
    ExprPtr expr = parse_math1();
    std::vector<std::string> ops;
    std::vector<ExprPtr> rest;
    while (true) {
      const Token& t = cur();
      if (t.type == TokenType::kOperator && (t.value == "==" || t.value == "!=" || t.value == "<" ||
                                             t.value == "<=" || t.value == ">" || t.value == ">=")) {
        ops.push_back(t.value);
        advance();
      } else if (is_name("in")) {
        ops.push_back("in");
        advance();
      } else if (is_name("not") && peek().type == TokenType::kName && peek().value == "in") {
        ops.push_back("notin");
        advance();
        advance();
      } else {
        break;
      }
      rest.push_back(parse_math1());
    }
    if (ops.empty()) return expr;
    auto e = make(ExprKind::kCompare, at);
    e->a = std::move(expr);
    e->args = std::move(rest);
    e->ops = std::move(ops);
    return e;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = cur();
      std::string op = at.value;
      advance();
      left = binary(ExprKind::kBinary, at, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (is_op("~")) {
      const Token& at = cur();
      advance();
      left = binary(ExprKind::kBinary, at, "~", std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = cur();
      std::string op = at.value;
      advance();
      left = binary(ExprKind::kBinary, at, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const Token& at = cur();
      advance();
      left = binary(ExprKind::kBinary, at, "**", std::move(left), parse_unary(true));
    }
    return left;
  }

  // Bounds recursion on hostile input (templates can come with a request).
  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxNesting) p.fail("template nests too deeply");
    }
    ~DepthGuard() { --p.depth_; }
  };
  static constexpr int kMaxNesting = 200;

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    const Token& at = cur();
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      std::string op = at.value;
      advance();
      node = make(ExprKind::kUnary, at);
      node->name = op;
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    if (t.type == TokenType::kName) {
      auto e = make(ExprKind::kConst, t);
      if (t.value == "true" || t.value == "True")
        e->constant = Value(true);
      else if (t.value == "false" || t.value == "False")
        e->constant = Value(false);
      else if (t.value == "none" || t.value == "None")
        e->constant = Value::none();
      else {
        e->kind = ExprKind::kName;
        e->name = t.value;
      }
      advance();
      return e;
    }
    if (t.type == TokenType::kString) {
      auto e = make(ExprKind::kConst, t);
      std::string s;
      while (cur().type == TokenType::kString) {
        s += cur().value;
        advance();
      }
      e->constant = Value(std::move(s));
      return e;
    }
    if (t.type == TokenType::kInteger || t.type == TokenType::kFloat) {
      auto e = make(ExprKind::kConst, t);
      try {
        // Python floats overflow to inf and underflow to 0 (strtod does the same; stod throws).
        e->constant = t.type == TokenType::kInteger ? Value::integer_from_text(t.value)
                                                    : Value(std::strtod(t.value.c_str(), nullptr));
      } catch (const std::exception&) {
        fail("number literal out of range: " + t.value);
      }
      advance();
      return e;
    }
    if (is_op("(")) {
      advance();
      ExprPtr e = parse_tuple(true, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      auto e = make(ExprKind::kList, t);
      advance();
      while (!is_op("]")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("]")) break;
        e->args.push_back(parse_expression(true));
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      auto e = make(ExprKind::kDict, t);
      advance();
      while (!is_op("}")) {
        if (!e->args.empty()) expect_op(",");
        if (is_op("}")) break;
        e->args.push_back(parse_expression(true));
        expect_op(":");
        e->args.push_back(parse_expression(true));
      }
      expect_op("}");
      return e;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".") || is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter(std::move(node), false);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& at = cur();
    if (skip_op(".")) {
      const Token& attr = cur();
      if (attr.type == TokenType::kName) {
        auto e = make(ExprKind::kGetAttr, at);
        e->a = std::move(node);
        e->name = attr.value;
        advance();
        return e;
      }
      if (attr.type != TokenType::kInteger) fail("expected name or number");
      auto e = make(ExprKind::kGetItem, at);
      e->a = std::move(node);
      e->b = make(ExprKind::kConst, attr);
      e->b->constant = Value::integer_from_text(attr.value);
      advance();
      return e;
    }
    expect_op("[");
    std::vector<ExprPtr> subs;
    bool tuple = false;
    while (!is_op("]")) {
      if (!subs.empty()) {
        expect_op(",");
        tuple = true;
      }
      subs.push_back(parse_subscribed());
    }
    expect_op("]");
    if (subs.empty()) fail("expected subscript expression");
    ExprPtr index;
    if (subs.size() == 1 && !tuple) {
      index = std::move(subs[0]);
    } else {
      index = make(ExprKind::kTuple, at);
      index->args = std::move(subs);
    }
    if (index->kind == ExprKind::kSlice) {
      index->a = std::move(node);
      return index;
    }
    auto e = make(ExprKind::kGetItem, at);
    e->a = std::move(node);
    e->b = std::move(index);
    return e;
  }

  ExprPtr parse_subscribed() {
    const Token& at = cur();
    ExprPtr start;
    if (!is_op(":")) {
      start = parse_expression(true);
      if (!is_op(":")) return start;
    }
    advance();
    auto e = make(ExprKind::kSlice, at);
    ExprPtr stop, step;
    if (!is_op("]") && !is_op(",") && !is_op(":")) stop = parse_expression(true);
    if (skip_op(":")) {
      if (!is_op("]") && !is_op(",")) step = parse_expression(true);
    }
    e->args.push_back(std::move(start));
    e->args.push_back(std::move(stop));
    e->args.push_back(std::move(step));
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (cur().type == TokenType::kName && peek().type == TokenType::kOperator && peek().value == "=") {
        std::string key = cur().value;
        advance();
        advance();
        e.kwargs.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail("positional argument follows keyword argument");
        e.args.push_back(parse_expression(true));
      }
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr node) {
    auto e = make(ExprKind::kCall, cur());
    e->a = std::move(node);
    parse_call_args(*e);
    return e;
  }

  // `| name(args) | name ...`; `node` is nullptr for filter blocks and block sets.
  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (is_op("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      auto e = make(ExprKind::kFilter, cur());
      e->name = expect_identifier();
      while (skip_op(".")) e->name += "." + expect_identifier();
      if (is_op("(")) parse_call_args(*e);
      e->a = std::move(node);
      node = std::move(e);
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    const Token& at = cur();
    advance();  // "is"
    bool negated = skip_name("not");
    auto e = make(ExprKind::kTest, at);
    e->name = expect_identifier();
    while (skip_op(".")) e->name += "." + expect_identifier();
    if (is_op("(")) {
      parse_call_args(*e);
    } else {
      const Token& t = cur();
      bool arg_start =
          t.type == TokenType::kName || t.type == TokenType::kString || t.type == TokenType::kInteger ||
          t.type == TokenType::kFloat ||
          (t.type == TokenType::kOperator && (t.value == "(" || t.value == "[" || t.value == "{"));
      if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) fail("You cannot chain multiple tests with is");
        e->args.push_back(parse_postfix(parse_primary()));
      }
    }
    e->a = std::move(node);
    e->negated = negated;
    return e;
  }

  const std::vector<Token>& t_;
  size_t pos_ = 0;
  std::set<std::string> block_names_;  // a template defines each block once
  int depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_template(); }

}  // namespace tf::jinja
