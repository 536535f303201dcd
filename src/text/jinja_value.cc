// Value construction, Python equality/ordering, str()/repr() and json.dumps (see jinja_value.h).
#include "text/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "text/jinja_strings.h"

namespace tf::jinja {

namespace {

std::shared_ptr<const std::string> shared_string(std::string s) {
  if (s.empty()) return nullptr;
  return std::make_shared<const std::string>(std::move(s));
}

}  // namespace

const std::string& Value::empty_string() {
  static const std::string kEmpty;
  return kEmpty;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.s_ = shared_string(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), b_(b), i_(b ? 1 : 0) {}
Value::Value(int64_t v) : kind_(Kind::kInt), i_(v) {}
Value::Value(double v) : kind_(Kind::kFloat), f_(v) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(shared_string(std::move(s))) {}

Value Value::integer_from_text(std::string_view digits) {
  int64_t i = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), i);
  if (ec == std::errc() && end == digits.data() + digits.size()) return Value(i);
  Value v;
  v.kind_ = Kind::kBigInt;
  v.s_ = shared_string(std::string(digits));
  return v;
}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.b_ = true;
  return v;
}

Value Value::as_markup() const {
  Value v = *this;
  if (v.kind_ == Kind::kString) v.b_ = true;
  return v;
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<ListData>();
  v.list_->items = std::move(items);
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.list_->is_tuple = true;
  return v;
}

Value Value::named_tuple(std::vector<std::string> fields, std::vector<Value> items) {
  Value v = tuple(std::move(items));
  v.list_->fields = std::move(fields);
  return v;
}

Value Value::iterator(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.list_->is_iterator = true;
  return v;
}

Value Value::dict() {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<DictData>();
  return v;
}

Value Value::new_namespace() {
  Value v = dict();
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::function(std::string name, NativeFunction fn) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<CallableData>(CallableData{std::move(name), std::move(fn), nullptr});
  return v;
}

Value Value::writer(std::string name, WriteFunction write) {
  NativeFunction fn = [write](CallArgs& args) {
    std::string out;
    write(args, out);
    return Value(std::move(out));
  };
  Value v;
  v.kind_ = Kind::kCallable;
  v.fn_ = std::make_shared<CallableData>(CallableData{std::move(name), std::move(fn), std::move(write)});
  return v;
}

template <typename Json>
static Value value_from_json(const Json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned:
      return Value::integer_from_text(std::to_string(j.template get<uint64_t>()));
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(value_from_json(e));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it) {
        d.dict_data().entries.emplace_back(Value(it.key()), value_from_json(it.value()));
      }
      return d;
    }
    default:
      return Value::none();  // binary/discarded never come from parsed JSON text
  }
}

Value Value::from_json(const nlohmann::ordered_json& j) { return value_from_json(j); }
Value Value::from_json(const nlohmann::json& j) { return value_from_json(j); }

Value Value::from_json(nlohmann::ordered_json&& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::string:
      return Value(std::move(j.get_ref<std::string&>()));
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (auto& e : j) items.push_back(from_json(std::move(e)));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Value d = Value::dict();
      for (auto it = j.begin(); it != j.end(); ++it)
        d.dict_data().entries.emplace_back(Value(it.key()), from_json(std::move(it.value())));
      return d;
    }
    default:
      return value_from_json(j);
  }
}

namespace {

// nlohmann's SAX events into Values, keeping what Python's json.loads keeps and nlohmann's DOM
// would round: an integer literal beyond 64 bits arrives as number_float with its text.
class ValueBuilder {
 public:
  explicit ValueBuilder(int max_depth) : max_depth_(max_depth) {}

  bool null() { return put(Value::none()); }
  bool boolean(bool b) { return put(Value(b)); }
  bool number_integer(nlohmann::json::number_integer_t v) { return put(Value(static_cast<int64_t>(v))); }
  bool number_unsigned(nlohmann::json::number_unsigned_t v) {
    return put(Value::integer_from_text(std::to_string(v)));
  }
  bool number_float(nlohmann::json::number_float_t v, const std::string& text) {
    if (text.find_first_of(".eE") == std::string::npos) return put(Value::integer_from_text(text));
    return put(Value(static_cast<double>(v)));
  }
  bool string(std::string& s) { return put(Value(std::move(s))); }
  bool binary(nlohmann::json::binary_t&) { return false; }  // not in JSON text
  bool start_object(std::size_t) { return open(Value::dict()); }
  bool start_array(std::size_t) { return open(Value::list()); }
  bool key(std::string& k) {
    stack_.back().key = Value(std::move(k));
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    error_ = e.what();
    return false;
  }

  Value& root() { return root_; }
  const std::string& error() const { return error_; }

 private:
  struct Frame {
    Value container;
    Value key;  // objects: the key the next value goes under
  };

  bool put(Value v) {
    if (stack_.empty()) {
      root_ = std::move(v);
    } else if (Frame& f = stack_.back(); f.container.is_list()) {
      f.container.items().push_back(std::move(v));
    } else {
      f.container.dict_data().set(f.key, std::move(v));  // a repeated key keeps its first place
    }
    return true;
  }
  bool open(Value container) {
    if (static_cast<int>(stack_.size()) >= max_depth_) {
      error_ = "JSON nests deeper than " + std::to_string(max_depth_) + " levels";
      return false;
    }
    put(container);  // containers share their data: filled through the stack's copy
    stack_.push_back(Frame{std::move(container), Value()});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  int max_depth_;
  Value root_;
  std::vector<Frame> stack_;
  std::string error_;
};

}  // namespace

Value Value::parse_json(std::string_view text, int max_depth) {
  ValueBuilder builder(max_depth);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &builder);
  if (!ok)
    throw JinjaError("JSONDecodeError: " + (builder.error().empty() ? "invalid JSON" : builder.error()));
  return std::move(builder.root());
}

const std::vector<std::string>& Value::fields() const {
  static const std::vector<std::string> kNone;
  return kind_ == Kind::kList ? list_->fields : kNone;
}

bool Value::is_tuple() const { return kind_ == Kind::kList && list_->is_tuple; }
bool Value::is_iterator() const { return kind_ == Kind::kList && list_->is_iterator; }

int64_t Value::as_int() const {
  if (kind_ == Kind::kBigInt) throw JinjaError("OverflowError: Python int too large to convert to C int64");
  if (kind_ != Kind::kFloat) return i_;
  // Casting a double outside int64's range is undefined behaviour; Python's int() would give a big int.
  if (std::isnan(f_)) throw JinjaError("ValueError: cannot convert float NaN to integer");
  if (std::isinf(f_)) throw JinjaError("OverflowError: cannot convert float infinity to integer");
  if (!(f_ >= -9223372036854775808.0 && f_ < 9223372036854775808.0))
    throw JinjaError("OverflowError: integer result does not fit in 64 bits");
  return static_cast<int64_t>(f_);
}

double Value::as_double() const {
  if (kind_ == Kind::kFloat) return f_;
  if (kind_ == Kind::kBigInt) return std::strtod(str().c_str(), nullptr);  // correctly rounded, as float(int)
  return static_cast<double>(i_);
}

std::vector<Value>& Value::items() const {
  if (!list_) throw JinjaError(std::string("'") + type_name() + "' object is not a list");
  return list_->items;
}

DictData& Value::dict_data() const {
  if (!dict_) throw JinjaError(std::string("'") + type_name() + "' object is not a mapping");
  return *dict_;
}

const CallableData& Value::callable() const {
  if (!fn_) throw JinjaError(std::string("'") + type_name() + "' object is not callable");
  return *fn_;
}

const void* Value::identity() const {
  if (list_) return list_.get();
  if (dict_) return dict_.get();
  if (fn_) return fn_.get();
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return b_;
    case Kind::kInt:
      return i_ != 0;
    case Kind::kFloat:
      return f_ != 0.0;
    case Kind::kString:
      return s_ && !s_->empty();
    case Kind::kList:
      return list_->is_iterator || !list_->items.empty();
    case Kind::kDict:
      return !dict_->entries.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
    case Kind::kBigInt:  // never 0
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
    case Kind::kBigInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return list_->is_iterator ? "generator" : (list_->is_tuple ? "tuple" : "list");
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "object";
}

std::string format_python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t epos = sci.find('e');
  int exponent = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (size_t i = 0; i < epos; ++i)
    if (sci[i] != '.') digits.push_back(sci[i]);
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += ebuf;
  } else if (exponent < 0) {
    out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  } else {
    size_t int_len = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= int_len) {
      out += digits + std::string(int_len - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, int_len) + "." + digits.substr(int_len);
    }
  }
  return out;
}

static void repr_into(std::string& out, const Value& v, int depth);

std::string Value::to_str() const {
  std::string out;
  append_to(out);
  return out;
}

void Value::append_to(std::string& out) const {
  switch (kind_) {
    case Kind::kUndefined:
      return;
    case Kind::kString:
      out += str();
      return;
    default:
      repr_into(out, *this, 0);
  }
}

std::string Value::repr() const {
  std::string out;
  repr_into(out, *this, 0);
  return out;
}

static void repr_into(std::string& out, const Value& v, int depth) {
  if (depth > 100) throw JinjaError("RecursionError: value nests too deeply to print");
  switch (v.kind()) {
    case Value::Kind::kUndefined:  // top level prints as "" (to_str); inside a container, as Python's repr
      out += "Undefined";
      return;
    case Value::Kind::kNone:
      out += "None";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "True" : "False";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kBigInt:
      out += v.str();
      return;
    case Value::Kind::kFloat:
      out += format_python_float(v.as_double());
      return;
    case Value::Kind::kString:
      out += py_repr_string(v.str());
      return;
    case Value::Kind::kList: {
      if (v.is_iterator()) {
        out += "<generator object>";
        return;
      }
      const auto& items = v.items();
      out += v.is_tuple() ? "(" : "[";
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        repr_into(out, items[i], depth + 1);
      }
      if (v.is_tuple() && items.size() == 1) out += ",";
      out += v.is_tuple() ? ")" : "]";
      return;
    }
    case Value::Kind::kNamespace:
    case Value::Kind::kDict: {
      if (v.is_namespace()) out += "<Namespace ";
      out += "{";
      bool first = true;
      for (const auto& [k, val] : v.dict_data().entries) {
        if (!first) out += ", ";
        first = false;
        repr_into(out, k, depth + 1);
        out += ": ";
        repr_into(out, val, depth + 1);
      }
      out += "}";
      if (v.is_namespace()) out += ">";
      return;
    }
    case Value::Kind::kCallable:
      out += "<function " + v.callable().name + ">";
      return;
  }
}

const Value* DictData::find(const Value& key) const {
  for (const auto& e : entries)
    if (values_equal(e.first, key)) return &e.second;
  return nullptr;
}

const Value* DictData::find(const std::string& key) const {
  for (const auto& e : entries)
    if (e.first.is_string() && e.first.str() == key) return &e.second;
  return nullptr;
}

void DictData::set(const Value& key, Value value) {
  for (auto& e : entries) {
    if (values_equal(e.first, key)) {
      e.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

bool DictData::erase(const Value& key) {
  for (auto it = entries.begin(); it != entries.end(); ++it) {
    if (values_equal(it->first, key)) {
      entries.erase(it);
      return true;
    }
  }
  return false;
}

// Python compares an int with a float exactly (2**53 + 1 != 2.0**53): -1, 0 or 1, and 2 when unordered.
static int compare_int_double(int64_t i, double d) {
  if (std::isnan(d)) return 2;
  if (d >= 9223372036854775808.0) return -1;
  if (d < -9223372036854775808.0) return 1;
  double whole = std::trunc(d);
  int64_t w = static_cast<int64_t>(whole);
  if (i != w) return i < w ? -1 : 1;
  return d > whole ? -1 : (d < whole ? 1 : 0);
}

static int compare_numbers(const Value& a, const Value& b) {
  if (!a.is_float() && !b.is_float()) return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  if (a.is_float() && b.is_float()) {
    double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : (x == y ? 0 : 2));
  }
  if (b.is_float()) return compare_int_double(a.as_int(), b.as_double());
  int r = compare_int_double(b.as_int(), a.as_double());
  return r == 2 ? 2 : -r;
}

// Exact order of two integers as decimal text (-?digits, no leading zeros): -1, 0 or 1.
static int compare_decimal(std::string_view x, std::string_view y) {
  const bool nx = !x.empty() && x[0] == '-', ny = !y.empty() && y[0] == '-';
  if (nx != ny) return nx ? -1 : 1;
  if (nx) {
    x.remove_prefix(1);
    y.remove_prefix(1);
  }
  int r = x.size() != y.size() ? (x.size() < y.size() ? -1 : 1) : (x < y ? -1 : (x > y ? 1 : 0));
  return nx ? -r : r;
}

// A big int (outside int64) against a number, exactly: -1, 0, 1, or 2 when unordered (NaN).
static int compare_big(const Value& big, const Value& other) {
  const std::string& digits = big.str();
  if (other.is_big_int()) return compare_decimal(digits, other.str());
  const int sign = digits[0] == '-' ? -1 : 1;
  if (!other.is_float()) return sign;  // int64 and bool lie between the big ints of either sign
  const double d = other.as_double();
  if (std::isnan(d)) return 2;
  if (std::fabs(d) < 9223372036854775808.0) return sign;
  if (std::isinf(d)) return d > 0 ? -1 : 1;
  char buf[400];  // |d| >= 2^63 is a whole number: its exact digits
  std::snprintf(buf, sizeof buf, "%.0f", d);
  return compare_decimal(digits, buf);
}

// Python numbers (bool, int of any size, float) compared exactly; nullopt when a or b is not one.
static std::optional<int> compare_any_numbers(const Value& a, const Value& b) {
  const bool na = a.is_number() || a.is_big_int(), nb = b.is_number() || b.is_big_int();
  if (!na || !nb) return std::nullopt;
  if (a.is_big_int()) return compare_big(a, b);
  if (b.is_big_int()) {
    int r = compare_big(b, a);
    return r == 2 ? 2 : -r;
  }
  return compare_numbers(a, b);
}

bool values_equal(const Value& a, const Value& b) {
  if (auto order = compare_any_numbers(a, b)) return *order == 0;
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple()) return false;
      if (a.is_iterator() || b.is_iterator()) return a.identity() == b.identity();
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!values_equal(x[i], y[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const auto& x = a.dict_data().entries;
      const auto& y = b.dict_data();
      if (x.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x) {
        const Value* other = y.find(k);
        if (!other || !values_equal(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

bool value_less(const Value& a, const Value& b) {
  if (auto order = compare_any_numbers(a, b)) return *order == -1;
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order == code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_iterator() && !b.is_iterator()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return value_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw JinjaError(std::string("TypeError: '<' not supported between instances of '") + a.type_name() +
                   "' and '" + b.type_name() + "'");
}

// Cycles (a namespace holding itself) are found by depth. Above the 256 levels a request's JSON
// may nest, so a deep but finite tool schema dumps (at 100, one nested 240 deep was called circular).
constexpr int kMaxDumpDepth = 512;

static void dump_into(std::string& out, const Value& v, const JsonDumpOptions& o, int level) {
  if (level > kMaxDumpDepth)
    throw JinjaError("ValueError: Circular reference detected (or a value nested deeper than " +
                     std::to_string(kMaxDumpDepth) + " levels)");
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kBigInt:
      out += v.str();
      return;
    case Value::Kind::kFloat: {
      double d = v.as_double();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d > 0 ? "Infinity" : "-Infinity";
      else
        out += format_python_float(d);
      return;
    }
    case Value::Kind::kString:
      json_escape_string(out, v.str(), o.ensure_ascii);
      return;
    default:
      break;
  }
  std::string item_sep = o.has_separators ? o.item_separator : (o.has_indent ? "," : ", ");
  std::string key_sep = o.has_separators ? o.key_separator : ": ";
  auto newline = [&](int lvl) {
    if (!o.has_indent) return;
    out += "\n";
    for (int i = 0; i < lvl; ++i) out += o.indent;
  };
  if (v.is_list() && !v.is_iterator()) {
    const auto& items = v.items();
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += "[";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      newline(level + 1);
      dump_into(out, items[i], o, level + 1);
    }
    newline(level);
    out += "]";
    return;
  }
  if (v.is_dict()) {
    std::vector<std::pair<std::string, const Value*>> entries;
    std::vector<const Value*> keys;  // the original keys: sort_keys orders them as Python does, not as text
    for (const auto& [k, val] : v.dict_data().entries) {
      keys.push_back(&k);
      std::string key;
      if (k.is_string())
        key = k.str();
      else if (k.is_bool())
        key = k.as_bool() ? "true" : "false";
      else if (k.is_none())
        key = "null";
      else if (k.is_int())
        key = std::to_string(k.as_int());
      else if (k.is_big_int())
        key = k.str();
      else if (k.is_float())
        key = format_python_float(k.as_double());
      else
        throw JinjaError(std::string("TypeError: keys must be str, int, float, bool or None, not ") +
                         k.type_name());
      entries.emplace_back(std::move(key), &val);
    }
    if (o.sort_keys) {
      std::vector<size_t> order(entries.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        const Value &x = *keys[a], &y = *keys[b];
        if (!(x.is_number() && y.is_number()) && !(x.is_string() && y.is_string()))
          throw JinjaError(std::string("TypeError: '<' not supported between instances of '") +
                           x.type_name() + "' and '" + y.type_name() + "'");
        return value_less(x, y);
      });
      std::vector<std::pair<std::string, const Value*>> sorted;
      for (size_t i : order) sorted.push_back(std::move(entries[i]));
      entries = std::move(sorted);
    }
    if (entries.empty()) {
      out += "{}";
      return;
    }
    out += "{";
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i) out += item_sep;
      newline(level + 1);
      json_escape_string(out, entries[i].first, o.ensure_ascii);
      out += key_sep;
      dump_into(out, *entries[i].second, o, level + 1);
    }
    newline(level);
    out += "}";
    return;
  }
  throw JinjaError(std::string("TypeError: Object of type ") + v.type_name() + " is not JSON serializable");
}

std::string json_dumps(const Value& value, const JsonDumpOptions& options) {
  std::string out;
  dump_into(out, value, options, 0);
  return out;
}

}  // namespace tf::jinja
