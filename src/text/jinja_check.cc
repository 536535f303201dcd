// Compile-time checks of jinja2 (see jinja_check.h). jinja2's compiler visits the tree with frames:
// `if` and conditional expressions make a "soft" frame, where a missing filter or test is left to
// fail at run time; for-loop bodies, loop filters, macro and call-block bodies, filter blocks, with
// blocks and set blocks open a new frame, which is never soft. Loops compile to Python loops and
// macro bodies to functions, hence the `break` rule.
#include "text/jinja_check.h"

#include <algorithm>

#include "text/jinja_builtins.h"

namespace tf::jinja {
namespace {

struct Frame {
  bool soft = false;
  bool in_loop = false;
  Frame inner() const { return Frame{false, in_loop}; }
  Frame soft_copy() const { return Frame{true, in_loop}; }
  Frame function() const { return Frame{false, false}; }
};

void check_body(const Body& body, const Frame& frame);

void check_expr(const Expr* e, const Frame& frame) {
  if (!e) return;
  Frame f = e->kind == ExprKind::kCondition ? frame.soft_copy() : frame;
  if (!f.soft && e->kind == ExprKind::kFilter && !has_filter(e->name))
    throw JinjaError("TemplateAssertionError: No filter named '" + e->name + "'.", e->line, e->column);
  if (!f.soft && e->kind == ExprKind::kTest && !has_test(e->name))
    throw JinjaError("TemplateAssertionError: No test named '" + e->name + "'.", e->line, e->column);
  check_expr(e->a.get(), f);
  check_expr(e->b.get(), f);
  check_expr(e->c.get(), f);
  for (const auto& x : e->args) check_expr(x.get(), f);
  for (const auto& kw : e->kwargs) check_expr(kw.second.get(), f);
}

void check_params(const Stmt& s, const Frame& body_frame) {
  for (size_t i = 0; i < s.params.size(); ++i)
    if (std::find(s.params.begin(), s.params.begin() + static_cast<long>(i), s.params[i]) !=
        s.params.begin() + static_cast<long>(i))
      throw JinjaError("SyntaxError: duplicate argument '" + s.params[i] + "' in function definition", s.line,
                       s.column);
  for (const auto& d : s.defaults) check_expr(d.get(), body_frame);
}

void check_stmt(const Stmt& s, const Frame& frame) {
  switch (s.kind) {
    case StmtKind::kIf: {
      Frame soft = frame.soft_copy();
      for (const auto& c : s.conditions) check_expr(c.get(), soft);
      for (const auto& b : s.bodies) check_body(b, soft);
      check_body(s.else_body, soft);
      return;
    }
    case StmtKind::kFor: {
      check_expr(s.expr.get(), frame);  // the iterable is evaluated in the enclosing frame
      Frame loop = frame.inner();
      check_expr(s.condition.get(), loop);
      loop.in_loop = true;
      check_body(s.body, loop);
      check_body(s.else_body, frame.inner());
      return;
    }
    case StmtKind::kMacro:
      check_params(s, frame.function());
      check_body(s.body, frame.function());
      return;
    case StmtKind::kCallBlock:
      check_expr(s.expr.get(), frame);
      check_params(s, frame.function());
      check_body(s.body, frame.function());
      return;
    case StmtKind::kGeneration:  // transformers compiles it to a call block
    case StmtKind::kBlock:       // a block compiles to a function of its own
      check_body(s.body, frame.function());
      return;
    case StmtKind::kFilterBlock:
    case StmtKind::kSetBlock:
      check_expr(s.expr.get(), frame.inner());
      check_body(s.body, frame.inner());
      return;
    case StmtKind::kWith:
      for (const auto& c : s.conditions) check_expr(c.get(), frame);
      check_body(s.body, frame.inner());
      return;
    case StmtKind::kBreak:
    case StmtKind::kContinue:
      if (!frame.in_loop)
        throw JinjaError(std::string("SyntaxError: '") + (s.kind == StmtKind::kBreak ? "break" : "continue") +
                             "' outside loop",
                         s.line, s.column);
      return;
    default:
      check_expr(s.expr.get(), frame);
      check_expr(s.condition.get(), frame);
      for (const auto& c : s.conditions) check_expr(c.get(), frame);
      check_body(s.body, frame);
      return;
  }
}

void check_body(const Body& body, const Frame& frame) {
  for (const auto& s : body) check_stmt(*s, frame);
}

}  // namespace

void check_template(const Body& body) { check_body(body, Frame{}); }

}  // namespace tf::jinja
