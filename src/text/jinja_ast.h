// Jinja syntax tree. Two node types (expressions and statements) with a kind tag and generic child
// slots keep the parser and interpreter short; each kind documents which slots it uses.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "text/jinja_value.h"

namespace tf::jinja {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class ExprKind {
  kConst,      // constant
  kName,       // name
  kList,       // args = items
  kTuple,      // args = items
  kDict,       // args = alternating key, value
  kGetAttr,    // a = object, name = attribute
  kGetItem,    // a = object, b = index
  kSlice,      // a = object, args = {start, stop, step} (nullptr when absent)
  kCall,       // a = callee, args, kwargs
  kFilter,     // a = input (nullptr in a filter block), name, args, kwargs
  kTest,       // a = input, name, args, kwargs, negated
  kUnary,      // op ("-", "+", "not"), a
  kBinary,     // op ("+", "-", "*", "/", "//", "%", "**", "~"), a, b
  kAnd,        // a, b
  kOr,         // a, b
  kCompare,    // a = first operand, args = rest, ops = operators ("==", "<", "in", "notin", ...)
  kCondition,  // a = then value, b = condition, c = else value (nullptr: undefined)
};

struct Expr {
  ExprKind kind;
  int line = 0;
  int column = 0;
  Value constant;
  std::string name;  // name, attribute, filter/test name, or unary/binary operator
  ExprPtr a, b, c;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

enum class StmtKind {
  kText,         // text
  kOutput,       // expr
  kIf,           // conditions[i] guards bodies[i]; else_body
  kFor,          // targets, expr = iterable, condition = loop filter, body, else_body, recursive
  kSet,          // targets (or ns_attr: targets = {ns}, attr), expr
  kSetBlock,     // targets = {name}, body, filters (kFilter chain with a == nullptr) in expr
  kMacro,        // name, params, defaults (nullptr when none), body, uses_* (see below)
  kCallBlock,    // expr = the call, params/defaults = caller's parameters, body = caller's body
  kFilterBlock,  // expr = filter chain, body
  kWith,         // targets + values (conditions), body
  kBreak,
  kContinue,
  kGeneration,  // body, rendered unchanged (transformers' {% generation %})
  kBlock,       // name, body, scoped, required: `{% block %}`, rendered in place (no inheritance)
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  int column = 0;
  std::string text;
  std::string name;
  std::string attr;  // `set ns.attr = ...`
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
  // Macros and call blocks: whether the body reads `varargs`, `kwargs` or `caller`. As in jinja2,
  // only then does the macro accept extra positional/keyword arguments (or a caller).
  bool uses_varargs = false;
  bool uses_kwargs = false;
  bool uses_caller = false;
  bool recursive = false;  // `{% for ... recursive %}`
  bool scoped = false;     // `{% block name scoped %}`
  bool required = false;   // `{% block name required %}`
};

}  // namespace tf::jinja
