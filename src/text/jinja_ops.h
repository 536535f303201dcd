// Python semantics of the operations a template applies to values: attribute and item access as
// jinja2's sandboxed environment does them (attribute first for `.x`, item first for `[x]`, a
// missing one gives Undefined, only touching an Undefined raises), operators, `in`, iteration,
// len(), and the str/list/dict methods chat templates call (jinja_methods.cc). Everything throws
// JinjaError with a Python-like message on a type error.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "text/jinja_value.h"

namespace tf::jinja {

Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                std::optional<int64_t> step);
// Bound method `obj.name`, or Undefined when the type has no such method (jinja_methods.cc).
Value get_method(const Value& obj, const std::string& name);

Value binary_op(const std::string& op, const Value& a, const Value& b);
Value unary_op(const std::string& op, const Value& a);
bool compare_op(const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);
// Python's hash() refuses lists, dicts and tuples holding them; require_hashable throws its TypeError.
bool is_hashable(const Value& v);
void require_hashable(const Value& v);

// Python's printf-style `fmt % args` (flags, width, precision; s r d i f F e E g G x X o c %).
// `lone_operand`: args holds the one operand of `fmt % x` that was not a tuple; a dict there
// serves %(name)s conversions, and Python lets one with __getitem__ (list, dict, Undefined) go unused.
std::string percent_format(const std::string& fmt, const std::vector<Value>& args, bool lone_operand = false);

// markupsafe.escape(v): a Markup stays as it is, anything else is str()-ed and HTML-escaped.
Value markup_escape(const Value& v);
// The same value marked as Markup when `markup` (strings, and the strings inside a list/tuple).
Value as_markup_if(bool markup, Value v);

// Python iter(): list items, dict keys, string characters; Undefined iterates as empty.
std::vector<Value> iterate(const Value& v);
// Python len(); throws for values without a length (generators, numbers, None).
int64_t length_of(const Value& v);
Value call_value(const Value& fn, CallArgs& args);

// Refuses to build a string or list of more than 64M bytes or items because a template asked for
// that size (a width, an indent, a batch or slice count): Python would try and exhaust memory.
void check_built_size(int64_t n, const char* what);

// Throws jinja2's UndefinedError for an Undefined operand.
[[noreturn]] void fail_undefined(const Value& undefined);

// A filter or test argument that must be a str: its text, or a TypeError naming `what`.
std::string require_string_arg(const Value& v, const char* what);

// Binds call arguments to parameter names like Python does: positional first, then keywords.
class ArgBinder {
 public:
  ArgBinder(const char* function, CallArgs& args, std::vector<const char*> names);
  bool has(size_t index) const;
  Value get(size_t index, Value fallback = Value()) const;
  const Value& required(size_t index) const;

 private:
  const char* function_;
  std::vector<const Value*> bound_;
};

}  // namespace tf::jinja
