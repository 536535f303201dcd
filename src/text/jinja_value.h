// Jinja values: what templates compute with. Chat templates are written for Python's jinja2, so a
// Value behaves like the Python object it stands for: none/bool/int/float/str/list/tuple/dict
// (insertion-ordered), a namespace, a callable (macro, filter-like global, bound method) and
// jinja2's Undefined. Lists, dicts and namespaces have reference semantics (shared_ptr), as in
// Python, so `ns.x = ...` inside a loop is seen outside it. Strings are UTF-8; operations that
// Python defines on code points (len, indexing, slicing) decode on demand (jinja_strings.h).
//
// Printing follows Python's str()/repr() (e.g. `None`, `True`, `1.0`, `1e-05`, `['a', 1]`) because
// templates do print such values and the output must match jinja2 byte for byte.
//
// A string's bytes are immutable and shared between copies of the Value, as Python shares a str:
// a chat message's content (up to a whole request body) is looked up, passed to macros and tested
// many times per render, and each of those used to copy it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tf::jinja {

// Raised while lexing, parsing or rendering; the engine attaches the template position and turns it
// into a tf::Status at the API boundary (jinja_template.h).
class JinjaError : public std::runtime_error {
 public:
  explicit JinjaError(const std::string& message, int line = -1, int column = -1)
      : std::runtime_error(message), line(line), column(column) {}
  int line;
  int column;
};

class Value;
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using NativeFunction = std::function<Value(CallArgs& args)>;
// A macro's body written into the caller's text: `{{ macro(...) }}` prints exactly what the call
// returns, so the macro's text (a message's content, in a chat template) needs no buffer of its own.
using WriteFunction = std::function<void(CallArgs& args, std::string& out)>;

struct ListData;
struct DictData;
struct CallableData;

class Value {
 public:
  // kBigInt: a Python int outside int64 (a JSON number such as a uint64 id), kept as its decimal
  // digits so that it prints, compares and dumps exactly; arithmetic on it raises OverflowError.
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable,
    kBigInt
  };

  Value() = default;  // Undefined
  static Value undefined(std::string hint = {});
  static Value none();
  Value(bool b);  // NOLINT: implicit on purpose, values are built everywhere
  Value(int v) : Value(static_cast<int64_t>(v)) {}  // NOLINT
  Value(int64_t v);                                 // NOLINT
  Value(double v);                                  // NOLINT
  Value(std::string s);                             // NOLINT
  Value(const char* s) : Value(std::string(s)) {}   // NOLINT
  // An integer from its decimal text (-?digits, no leading zeros): kInt when int64 holds it, else kBigInt.
  static Value integer_from_text(std::string_view digits);
  // markupsafe.Markup (what `|safe` and `|escape` return): a str whose `+`, `%`, join, replace and
  // format HTML-escape the plain-str operands they take in (jinja2 behaviour templates rely on).
  static Value markup(std::string s);
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  static Value named_tuple(std::vector<std::string> fields, std::vector<Value> items);
  // A one-shot iterable (Python generator/iterator): always truthy, has no len().
  static Value iterator(std::vector<Value> items);
  static Value dict();
  static Value new_namespace();
  static Value function(std::string name, NativeFunction fn);
  // A callable whose result is the text `write` appends (a macro): callable().write is set.
  static Value writer(std::string name, WriteFunction write);
  static Value from_json(const nlohmann::ordered_json& j);
  static Value from_json(const nlohmann::json& j);
  // Moves the strings out of `j` instead of copying them (j is left with empty strings).
  static Value from_json(nlohmann::ordered_json&& j);
  // Parses JSON text as Python's json.loads does: integers of any size are exact (kBigInt beyond
  // int64), a repeated key keeps its first place and its last value. Throws JinjaError on bad JSON
  // or nesting deeper than max_depth.
  static Value parse_json(std::string_view text, int max_depth = 512);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && b_; }
  bool is_list() const { return kind_ == Kind::kList; }  // lists, tuples and iterators
  bool is_tuple() const;
  bool is_iterator() const;
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  bool is_big_int() const { return kind_ == Kind::kBigInt; }
  bool is_integral() const { return kind_ == Kind::kInt || kind_ == Kind::kBigInt; }  // Python's int

  bool as_bool() const { return b_; }
  int64_t as_int() const;                        // bool/int/float -> int64 (float truncates)
  double as_double() const;                      // bool/int/float -> double
  const std::string& str() const { return s_ ? *s_ : empty_string(); }  // string value, or the Undefined hint
  // The same string marked as markup (shares the bytes); other kinds are returned as they are.
  Value as_markup() const;
  std::vector<Value>& items() const;             // list/tuple/iterator elements
  DictData& dict_data() const;                   // dict or namespace
  const CallableData& callable() const;
  const std::vector<std::string>& fields() const;  // named-tuple field names (empty otherwise)
  const void* identity() const;  // for `is sameas` and cycle detection

  bool truthy() const;
  // Python str(): what `{{ value }}` prints. Undefined prints as "".
  std::string to_str() const;
  // Appends to_str() to `out` without building it apart first.
  void append_to(std::string& out) const;
  std::string repr() const;
  const char* type_name() const;  // Python type name, used in error messages ("dict object")

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  static const std::string& empty_string();
  std::shared_ptr<const std::string> s_;  // null: the empty string
  std::shared_ptr<ListData> list_;
  std::shared_ptr<DictData> dict_;
  std::shared_ptr<CallableData> fn_;
};

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;
  bool is_iterator = false;
  // A namedtuple's field names (groupby's (grouper, list)); attribute access reads the items.
  std::vector<std::string> fields;
};

// Insertion-ordered mapping with Python key equality (1 == 1.0 == True). Chat-template dicts are
// small, so a linear search is the simplest correct choice.
struct DictData {
  std::vector<std::pair<Value, Value>> entries;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& key) const;
  void set(const Value& key, Value value);
  bool erase(const Value& key);
};

struct CallableData {
  std::string name;
  NativeFunction fn;
  WriteFunction write;  // set for macros: fn(args) is the string write(args, out) appends
};

// Python `==` and `<` (the latter throws JinjaError for unorderable types, as Python's TypeError).
bool values_equal(const Value& a, const Value& b);
bool value_less(const Value& a, const Value& b);

// Python float repr(): shortest round-trip digits, exponent form outside [1e-4, 1e16).
std::string format_python_float(double v);

// json.dumps(value, ensure_ascii, indent, separators, sort_keys) as transformers' tojson filter calls it.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;           // the per-level indent string when has_indent
  bool has_separators = false;  // else (", ", ": "), or (",", ": ") with an indent
  std::string item_separator;
  std::string key_separator;
  bool sort_keys = false;
};
std::string json_dumps(const Value& value, const JsonDumpOptions& options);

}  // namespace tf::jinja
