// Tree-walking renderer for a parsed template. Scoping follows jinja2: a for-loop iteration, a macro
// call and a `with` block open a scope; `if` does not; `set` writes the innermost scope, so a set
// inside a loop is gone after the loop (use a namespace to carry state out). Macros see the scope
// they were defined in at call time, like Python closures. Globals (context variables and
// functions) sit below the template's top-level scope.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/jinja_ast.h"

namespace tf::jinja {

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;
};

class Interpreter {
 public:
  // `globals` is a dict of names visible everywhere (context variables and global functions).
  // `max_steps`: statements run plus expressions evaluated before the render fails;
  // `max_output_bytes`: how long a rendered string may grow (jinja_template.h).
  Interpreter(Value globals, uint64_t max_steps, size_t max_output_bytes);
  // Throws JinjaError with the line and column of the failing node. `reserve`: the output's
  // expected size (its growth by doubling would hold the text twice while it copies).
  std::string render(const Body& body, size_t reserve = 0);

 private:
  enum class Control { kNone, kBreak, kContinue };

  void exec_body(const Body& body, std::string& out);
  void exec(const Stmt& s, std::string& out);
  void exec_for(const Stmt& s, std::string& out);
  void run_loop(const Stmt& s, const Value& iterable, int64_t depth, std::string& out);
  void exec_set(const Stmt& s, std::string& out);
  void exec_call_block(const Stmt& s, std::string& out);
  Value make_macro(const Stmt& s, std::shared_ptr<Scope> closure, const std::string& name);
  Value eval(const Expr& e);
  Value eval_inner(const Expr& e);
  Value eval_filter(const Expr& e, const Value* input_override);
  void output(const Expr& e, std::string& out);
  void eval_call_args(const Expr& e, CallArgs& args);
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  void assign_targets(const std::vector<std::string>& targets, const Value& v);
  void unpack_targets(const std::vector<std::string>& targets, size_t begin, size_t end, const Value& v);

  void count_step(uint64_t steps = 1);
  void check_output(const std::string& out) const;

  Value globals_;
  uint64_t steps_left_;
  size_t max_output_bytes_;
  std::shared_ptr<Scope> scope_;
  std::shared_ptr<Scope> root_;  // the template's top level, which a block that is not `scoped` sees
  std::vector<std::shared_ptr<Scope>> closures_;  // scopes that macros close over (weakly)
  Control control_ = Control::kNone;
  int depth_ = 0;
};

}  // namespace tf::jinja
