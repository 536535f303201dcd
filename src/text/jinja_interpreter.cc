// Tree-walking renderer (see jinja_interpreter.h).
#include "text/jinja_interpreter.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "text/jinja_builtins.h"
#include "text/jinja_ops.h"

namespace tf::jinja {
namespace {

constexpr int kMaxDepth = 256;  // macro recursion; deeper templates fail instead of overflowing the stack
// A loop iteration (or a macro call) builds a scope and its `loop` object (its arguments): about
// as costly as this many steps.
constexpr uint64_t kLoopIterationSteps = 16;

// Restores the interpreter's scope when a statement that opened one finishes (or throws).
struct ScopeGuard {
  std::shared_ptr<Scope>& slot;
  std::shared_ptr<Scope> saved;
  ScopeGuard(std::shared_ptr<Scope>& s, std::shared_ptr<Scope> next) : slot(s), saved(s) {
    slot = std::move(next);
  }
  ~ScopeGuard() { slot = saved; }
};

std::shared_ptr<Scope> child_of(const std::shared_ptr<Scope>& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

std::optional<int64_t> slice_bound(const Value& v) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (v.is_int() || v.is_bool()) return v.as_int();
  throw JinjaError("TypeError: slice indices must be integers or None");
}

}  // namespace

Interpreter::Interpreter(Value globals, uint64_t max_steps, size_t max_output_bytes)
    : globals_(std::move(globals)),
      steps_left_(max_steps),
      max_output_bytes_(max_output_bytes),
      scope_(std::make_shared<Scope>()),
      root_(scope_) {}

void Interpreter::count_step(uint64_t steps) {
  if (steps > steps_left_)
    throw JinjaError("RuntimeError: rendering takes too much work (loops over too many messages or tools)");
  steps_left_ -= steps;
}

void Interpreter::check_output(const std::string& out) const {
  if (out.size() > max_output_bytes_)
    throw JinjaError("MemoryError: the rendered text is larger than " + std::to_string(max_output_bytes_) +
                     " bytes");
}

std::string Interpreter::render(const Body& body, size_t reserve) {
  std::string out;
  out.reserve(std::min(reserve, max_output_bytes_));
  exec_body(body, out);
  return out;
}

Value Interpreter::lookup(const std::string& name) const {
  for (const Scope* s = scope_.get(); s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return it->second;
  }
  if (const Value* v = globals_.dict_data().find(name)) return *v;
  return Value::undefined("'" + name + "' is undefined");
}

void Interpreter::assign(const std::string& name, Value v) { scope_->vars[name] = std::move(v); }

// The top-level elements of targets[begin, end): a name, or a "(" ... ")" tuple (jinja_parser.cc).
static std::vector<std::pair<size_t, size_t>> target_elements(const std::vector<std::string>& t, size_t begin,
                                                              size_t end) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = begin; i < end;) {
    size_t j = i + 1;
    for (int depth = t[i] == "(" ? 1 : 0; depth > 0; ++j) depth += t[j] == "(" ? 1 : (t[j] == ")" ? -1 : 0);
    out.emplace_back(i, j);
    i = j;
  }
  return out;
}

// A single name takes the value; several targets (or one tuple) unpack it, recursively for nested tuples.
void Interpreter::assign_targets(const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    assign(targets[0], v);
    return;
  }
  auto elements = target_elements(targets, 0, targets.size());
  if (elements.size() == 1) return unpack_targets(targets, 1, targets.size() - 1, v);
  unpack_targets(targets, 0, targets.size(), v);
}

void Interpreter::unpack_targets(const std::vector<std::string>& targets, size_t begin, size_t end,
                                 const Value& v) {
  auto elements = target_elements(targets, begin, end);
  std::vector<Value> items = iterate(v);
  if (items.size() != elements.size())
    throw JinjaError(
        items.size() > elements.size()
            ? "ValueError: too many values to unpack (expected " + std::to_string(elements.size()) + ")"
            : "ValueError: not enough values to unpack (expected " + std::to_string(elements.size()) +
                  ", got " + std::to_string(items.size()) + ")");
  for (size_t i = 0; i < elements.size(); ++i) {
    auto [b, e] = elements[i];
    if (e - b == 1) {
      assign(targets[b], items[i]);
    } else {
      unpack_targets(targets, b + 1, e - 1, items[i]);
    }
  }
}

void Interpreter::exec_body(const Body& body, std::string& out) {
  for (const auto& s : body) {
    exec(*s, out);
    if (control_ != Control::kNone) return;
  }
}

void Interpreter::exec(const Stmt& s, std::string& out) {
  try {
    count_step();
    switch (s.kind) {
      case StmtKind::kText:
        out += s.text;
        check_output(out);
        return;
      case StmtKind::kOutput:
        output(*s.expr, out);
        check_output(out);
        return;
      case StmtKind::kIf:
        for (size_t i = 0; i < s.conditions.size(); ++i) {
          if (eval(*s.conditions[i]).truthy()) {
            exec_body(s.bodies[i], out);
            return;
          }
        }
        exec_body(s.else_body, out);
        return;
      case StmtKind::kFor:
        exec_for(s, out);
        return;
      case StmtKind::kSet:
      case StmtKind::kSetBlock:
        exec_set(s, out);
        return;
      case StmtKind::kMacro:
        assign(s.name, make_macro(s, scope_, s.name));
        return;
      case StmtKind::kCallBlock:
        exec_call_block(s, out);
        return;
      case StmtKind::kFilterBlock: {
        std::string inner;
        exec_body(s.body, inner);
        Value in(std::move(inner));
        eval_filter(*s.expr, &in).append_to(out);
        return;
      }
      case StmtKind::kWith: {
        auto scope = child_of(scope_);
        for (size_t i = 0; i < s.targets.size(); ++i) scope->vars[s.targets[i]] = eval(*s.conditions[i]);
        ScopeGuard guard(scope_, scope);
        exec_body(s.body, out);
        return;
      }
      case StmtKind::kBreak:
        control_ = Control::kBreak;
        return;
      case StmtKind::kContinue:
        control_ = Control::kContinue;
        return;
      case StmtKind::kGeneration:
        exec_body(s.body, out);
        return;
      case StmtKind::kBlock: {
        // A standalone template renders its blocks in place, as jinja2 does: a block is a function
        // of the template's context (its top-level names), or with `scoped` of the enclosing names;
        // what it assigns stays inside it.
        if (s.required) throw JinjaError("TemplateRuntimeError: Required block '" + s.name + "' not found");
        ScopeGuard guard(scope_, child_of(s.scoped ? scope_ : root_));
        exec_body(s.body, out);
        return;
      }
    }
  } catch (JinjaError& e) {
    if (e.line < 0) {
      e.line = s.line;
      e.column = s.column;
    }
    throw;
  }
}

void Interpreter::exec_for(const Stmt& s, std::string& out) { run_loop(s, eval(*s.expr), 1, out); }

void Interpreter::run_loop(const Stmt& s, const Value& iterable, int64_t depth, std::string& out) {
  if (depth > kMaxDepth) throw JinjaError("RecursionError: recursive loop nests too deeply");
  std::vector<Value> items = iterate(iterable);
  count_step(items.size());  // the copy
  if (s.condition) {
    std::vector<Value> kept;
    for (auto& item : items) {
      ScopeGuard guard(scope_, child_of(scope_));
      assign_targets(s.targets, item);
      if (eval(*s.condition).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(s.else_body, out);
    return;
  }
  const int64_t n = static_cast<int64_t>(items.size());
  // loop.changed(*values) compares with the values of its previous call in this loop.
  auto last_changed = std::make_shared<std::optional<Value>>();
  for (int64_t i = 0; i < n; ++i) {
    count_step(kLoopIterationSteps);
    ScopeGuard guard(scope_, child_of(scope_));
    Value loop = Value::dict();
    auto& d = loop.dict_data();
    d.set(Value("index"), Value(i + 1));
    d.set(Value("index0"), Value(i));
    d.set(Value("revindex"), Value(n - i));
    d.set(Value("revindex0"), Value(n - i - 1));
    d.set(Value("first"), Value(i == 0));
    d.set(Value("last"), Value(i == n - 1));
    d.set(Value("length"), Value(n));
    d.set(Value("depth"), Value(depth));
    d.set(Value("depth0"), Value(depth - 1));
    if (i > 0) d.set(Value("previtem"), items[static_cast<size_t>(i - 1)]);
    if (i + 1 < n) d.set(Value("nextitem"), items[static_cast<size_t>(i + 1)]);
    d.set(Value("cycle"), Value::function("loop.cycle", [i](CallArgs& a) {
            if (a.positional.empty()) throw JinjaError("TypeError: no items for cycling given");
            return a.positional[static_cast<size_t>(i) % a.positional.size()];
          }));
    d.set(Value("changed"), Value::function("loop.changed", [last_changed](CallArgs& a) {
            Value now = Value::list(a.positional);
            if (last_changed->has_value() && values_equal(**last_changed, now)) return Value(false);
            *last_changed = now;
            return Value(true);
          }));
    if (s.recursive) {
      Interpreter* self = this;
      const Stmt* stmt = &s;
      d.set(Value("__call__"), Value::function("loop", [self, stmt, depth](CallArgs& a) {
              if (a.positional.size() != 1 || !a.keyword.empty())
                throw JinjaError("TypeError: loop() takes exactly one argument (the iterable)");
              std::string inner;
              Control saved = self->control_;
              self->control_ = Control::kNone;
              self->run_loop(*stmt, a.positional[0], depth + 1, inner);
              self->control_ = saved;
              return Value(std::move(inner));
            }));
    }
    assign("loop", loop);
    assign_targets(s.targets, items[static_cast<size_t>(i)]);
    exec_body(s.body, out);
    if (control_ == Control::kBreak) {
      control_ = Control::kNone;
      break;
    }
    control_ = Control::kNone;
  }
}

void Interpreter::exec_set(const Stmt& s, std::string& out) {
  (void)out;
  Value v;
  if (s.kind == StmtKind::kSetBlock) {
    std::string inner;
    exec_body(s.body, inner);
    v = Value(std::move(inner));
    if (s.expr) v = eval_filter(*s.expr, &v);
  } else {
    v = eval(*s.expr);
  }
  if (!s.attr.empty()) {
    Value ns = lookup(s.targets[0]);
    if (!ns.is_namespace())
      throw JinjaError("TemplateRuntimeError: cannot assign attribute on non-namespace object");
    ns.dict_data().set(Value(s.attr), std::move(v));
    return;
  }
  assign_targets(s.targets, v);
}

Value Interpreter::make_macro(const Stmt& s, std::shared_ptr<Scope> closure, const std::string& name) {
  Interpreter* self = this;
  const Stmt* stmt = &s;
  // The macro is usually stored in the very scope it closes over; a strong reference would make a
  // cycle that outlives the render. The interpreter keeps the scope alive instead.
  closures_.push_back(closure);
  std::weak_ptr<Scope> weak = closure;
  return Value::writer(name, [self, stmt, weak, name](CallArgs& args, std::string& out) {
    if (self->depth_ >= kMaxDepth) throw JinjaError("RecursionError: macro '" + name + "' nests too deeply");
    self->count_step(kLoopIterationSteps);  // a scope and its arguments, as a loop iteration
    std::shared_ptr<Scope> closure = weak.lock();
    if (!closure) throw JinjaError("macro '" + name + "' called after its template finished rendering");
    auto scope = child_of(closure);
    const auto& params = stmt->params;
    std::vector<bool> given(params.size(), false);
    std::vector<Value> varargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        scope->vars[params[i]] = args.positional[i];
        given[i] = true;
      } else if (stmt->uses_varargs) {
        varargs.push_back(args.positional[i]);
      } else {
        throw JinjaError("TypeError: macro '" + name + "' takes not more than " +
                         std::to_string(params.size()) + " argument(s)");
      }
    }
    Value kwargs = Value::dict();
    for (const auto& [key, value] : args.keyword) {
      bool matched = false;
      for (size_t i = 0; i < params.size(); ++i) {
        if (params[i] == key) {
          if (given[i])
            throw JinjaError("TypeError: macro '" + name + "' got multiple values for argument '" + key +
                             "'");
          scope->vars[key] = value;
          given[i] = true;
          matched = true;
        }
      }
      if (!matched) {
        if (key == "caller" && stmt->uses_caller)
          scope->vars["caller"] = value;
        else if (stmt->uses_kwargs)
          kwargs.dict_data().set(Value(key), value);
        else
          throw JinjaError("TypeError: macro '" + name + "' takes no keyword argument '" + key + "'");
      }
    }
    if (stmt->uses_caller && !scope->vars.count("caller"))
      scope->vars["caller"] = Value::undefined("No caller defined");
    scope->vars["varargs"] = Value::tuple(std::move(varargs));
    scope->vars["kwargs"] = kwargs;
    ScopeGuard guard(self->scope_, scope);
    for (size_t i = 0; i < params.size(); ++i) {
      if (given[i]) continue;
      scope->vars[params[i]] = stmt->defaults[i]
                                   ? self->eval(*stmt->defaults[i])
                                   : Value::undefined("parameter '" + params[i] + "' was not provided");
    }
    Control saved = self->control_;
    self->control_ = Control::kNone;
    ++self->depth_;
    try {
      self->exec_body(stmt->body, out);
    } catch (...) {
      --self->depth_;
      throw;
    }
    --self->depth_;
    self->control_ = saved;
  });
}

void Interpreter::exec_call_block(const Stmt& s, std::string& out) {
  Value caller = make_macro(s, scope_, "caller");
  const Expr& call = *s.expr;
  Value callee = eval(*call.a);
  CallArgs args;
  eval_call_args(call, args);
  args.keyword.emplace_back("caller", caller);
  if (callee.is_callable() && callee.callable().write)
    callee.callable().write(args, out);
  else
    call_value(callee, args).append_to(out);
}

// `{{ expr }}`. A macro call writes into the output directly (what eval would return, appended),
// with eval's step and error position.
void Interpreter::output(const Expr& e, std::string& out) {
  if (e.kind != ExprKind::kCall) return eval(e).append_to(out);
  try {
    count_step();
    Value callee = eval(*e.a);
    CallArgs args;
    eval_call_args(e, args);
    if (callee.is_callable() && callee.callable().write)
      callee.callable().write(args, out);
    else
      call_value(callee, args).append_to(out);
  } catch (JinjaError& err) {
    if (err.line < 0) {
      err.line = e.line;
      err.column = e.column;
    }
    throw;
  }
}

void Interpreter::eval_call_args(const Expr& e, CallArgs& args) {
  for (const auto& a : e.args) args.positional.push_back(eval(*a));
  for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
}

Value Interpreter::eval_filter(const Expr& e, const Value* input_override) {
  Value input =
      e.a ? (e.a->kind == ExprKind::kFilter && !e.a->a ? eval_filter(*e.a, input_override) : eval(*e.a))
          : *input_override;
  CallArgs args;
  eval_call_args(e, args);
  try {
    return apply_filter(e.name, input, args);
  } catch (JinjaError& err) {
    if (err.line < 0) {
      err.line = e.line;
      err.column = e.column;
    }
    throw;
  }
}

Value Interpreter::eval(const Expr& e) {
  try {
    count_step();
    return eval_inner(e);
  } catch (JinjaError& err) {
    if (err.line < 0) {
      err.line = e.line;
      err.column = e.column;
    }
    throw;
  }
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case ExprKind::kConst:
      return e.constant;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      std::vector<Value> items;
      for (const auto& a : e.args) items.push_back(eval(*a));
      return e.kind == ExprKind::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
    }
    case ExprKind::kDict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        Value key = eval(*e.args[i]);
        require_hashable(key);
        d.dict_data().set(key, eval(*e.args[i + 1]));
      }
      return d;
    }
    case ExprKind::kGetAttr:
      return get_attr(eval(*e.a), e.name);
    case ExprKind::kGetItem:
      return get_item(eval(*e.a), eval(*e.b));
    case ExprKind::kSlice: {
      Value obj = eval(*e.a);
      std::optional<int64_t> bounds[3];
      for (size_t i = 0; i < 3; ++i)
        if (e.args[i]) bounds[i] = slice_bound(eval(*e.args[i]));
      return get_slice(obj, bounds[0], bounds[1], bounds[2]);
    }
    case ExprKind::kCall: {
      Value callee = eval(*e.a);
      CallArgs args;
      eval_call_args(e, args);
      return call_value(callee, args);
    }
    case ExprKind::kFilter:
      return eval_filter(e, nullptr);
    case ExprKind::kTest: {
      Value input = eval(*e.a);
      CallArgs args;
      eval_call_args(e, args);
      bool r = apply_test(e.name, input, args);
      return Value(e.negated ? !r : r);
    }
    case ExprKind::kUnary:
      return unary_op(e.name, eval(*e.a));
    case ExprKind::kBinary: {
      Value a = eval(*e.a);
      return binary_op(e.name, a, eval(*e.b));
    }
    case ExprKind::kAnd: {
      Value a = eval(*e.a);
      return a.truthy() ? eval(*e.b) : a;
    }
    case ExprKind::kOr: {
      Value a = eval(*e.a);
      return a.truthy() ? a : eval(*e.b);
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.a);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i]);
        if (!compare_op(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kCondition: {
      if (eval(*e.b).truthy()) return eval(*e.a);
      if (e.c) return eval(*e.c);
      return Value::undefined("the inline if-expression evaluated to false and no else section was defined");
    }
  }
  return Value();
}

}  // namespace tf::jinja
