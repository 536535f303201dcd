// Operators, access and iteration with Python semantics (see jinja_ops.h).
#include "text/jinja_ops.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "text/jinja_strings.h"

namespace tf::jinja {

[[noreturn]] void fail_undefined(const Value& undefined) {
  if (undefined.str().rfind("SecurityError: ", 0) == 0) throw JinjaError(undefined.str());
  throw JinjaError("UndefinedError: " +
                   (undefined.str().empty() ? std::string("value is undefined") : undefined.str()));
}

Value markup_escape(const Value& v) {
  if (v.is_markup()) return v;
  return Value::markup(html_escape(v.to_str()));
}

Value as_markup_if(bool markup, Value v) {
  if (!markup) return v;
  if (v.is_string()) return v.as_markup();
  if (v.is_list() && !v.is_iterator()) {
    std::vector<Value> items;
    for (const auto& x : v.items()) items.push_back(x.is_string() ? x.as_markup() : x);
    return v.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  return v;
}

static Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined("'" + std::string(obj.type_name()) + " object' has no attribute '" + name + "'");
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (!name.empty() && name[0] == '_') return missing_attribute(obj, name);  // sandbox: no private attributes
  Value method = get_method(obj, name);
  if (!method.is_undefined()) return method;
  if (obj.is_dict() || obj.is_namespace()) {
    if (const Value* v = obj.dict_data().find(name)) return *v;
  }
  if (obj.is_tuple()) {
    const std::vector<std::string>& fields = obj.fields();
    for (size_t i = 0; i < fields.size() && i < obj.items().size(); ++i)
      if (fields[i] == name) return obj.items()[i];
  }
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  // jinja2's Undefined fails on any subscript (an index or a slice), not only on a string key.
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_data().find(key)) return *v;
  } else if ((obj.is_list() && !obj.is_iterator()) || obj.is_string()) {
    if (key.is_int() || key.is_bool()) {
      int64_t n = obj.is_list() ? static_cast<int64_t>(obj.items().size()) : length_of(obj);
      int64_t i = key.as_int();
      if (i < 0) i += n;
      if (i >= 0 && i < n) {
        if (obj.is_list()) return obj.items()[static_cast<size_t>(i)];
        if (is_ascii(obj.str()))
          return as_markup_if(obj.is_markup(), Value(std::string(1, obj.str()[static_cast<size_t>(i)])));
        std::u32string u = utf8_decode(obj.str());
        return as_markup_if(obj.is_markup(), Value(utf8_encode(std::u32string_view(&u[static_cast<size_t>(i)], 1))));
      }
    }
  }
  // jinja2: when obj[key] fails and key is a string, fall back to the attribute.
  if (key.is_string()) return get_attr(obj, key.str());
  return Value::undefined("'" + std::string(obj.type_name()) + " object' has no attribute '" + key.to_str() +
                          "'");
}

Value get_slice(const Value& obj, std::optional<int64_t> start, std::optional<int64_t> stop,
                std::optional<int64_t> step) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_list() && !obj.is_iterator()) {
    const auto& items = obj.items();
    std::vector<Value> out;
    for (int64_t i : py_slice_indices(static_cast<int64_t>(items.size()), start, stop, step))
      out.push_back(items[static_cast<size_t>(i)]);
    return obj.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  if (obj.is_string()) {
    std::u32string u = utf8_decode(obj.str());
    std::u32string out;
    for (int64_t i : py_slice_indices(static_cast<int64_t>(u.size()), start, stop, step))
      out.push_back(u[static_cast<size_t>(i)]);
    return as_markup_if(obj.is_markup(), Value(utf8_encode(out)));
  }
  // jinja2 compiles a slice to a plain Python subscript, not to the sandbox's lenient getitem.
  if (obj.is_dict()) throw JinjaError("TypeError: unhashable type: 'slice'");
  throw JinjaError(std::string("TypeError: '") + obj.type_name() + "' object is not subscriptable");
}

static std::string type_error(const char* op, const Value& a, const Value& b) {
  return std::string("TypeError: unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" +
         b.type_name() + "'";
}

static int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

constexpr int64_t kMaxBuiltSize = int64_t{1} << 26;  // refuse to build values of 64M+ elements/bytes

void check_built_size(int64_t n, const char* what) {
  if (n > kMaxBuiltSize) throw JinjaError(std::string("MemoryError: ") + what + " is too large");
}

static Value repeat(const Value& seq, int64_t n) {
  int64_t unit =
      seq.is_string() ? static_cast<int64_t>(seq.str().size()) : static_cast<int64_t>(seq.items().size());
  if (n > 0 && unit > 0 && n > kMaxBuiltSize / unit)
    throw JinjaError("MemoryError: repeated sequence is too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.str();
    return Value(std::move(out));
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < n; ++i)
    for (const auto& v : seq.items()) out.push_back(v);
  return seq.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

// Python integers are unbounded; ours are 64-bit and overflow is reported instead of wrapping.
static Value checked(bool overflow, int64_t r) {
  if (overflow) throw JinjaError("OverflowError: integer result does not fit in 64 bits");
  return Value(r);
}

// `fmt % operand`: a tuple operand gives the arguments, anything else is the one argument (and,
// when it is a dict, the mapping of %(name)s conversions).
static Value percent_operator(const Value& fmt, const Value& operand) {
  std::vector<Value> args = operand.is_tuple() ? operand.items() : std::vector<Value>{operand};
  if (fmt.is_markup()) {  // Markup % args escapes the string arguments
    for (auto& x : args)
      if (x.is_string()) x = markup_escape(x);
    return Value::markup(percent_format(fmt.str(), args, !operand.is_tuple()));
  }
  return Value(percent_format(fmt.str(), args, !operand.is_tuple()));
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string out;
    a.append_to(out);
    b.append_to(out);
    return Value(std::move(out));
  }
  if (a.is_undefined()) fail_undefined(a);
  // str % x formats x (an Undefined too: "%s" prints it as "", "%r" as Undefined) before Undefined's %.
  if (op == "%" && a.is_string() && b.is_undefined()) return percent_operator(a, b);
  if (b.is_undefined()) fail_undefined(b);
  if ((a.is_big_int() && (b.is_number() || b.is_big_int())) || (b.is_big_int() && a.is_number()))
    throw JinjaError("OverflowError: arithmetic on an integer outside 64 bits is not supported (" +
                     a.to_str() + " " + op + " " + b.to_str() + ")");
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = numbers && !a.is_float() && !b.is_float();
  if (op == "+") {
    int64_t r = 0;
    if (ints) {
      bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return checked(overflow, r);
    }
    if (numbers) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (a.is_markup() || b.is_markup()) return Value::markup(markup_escape(a).str() + markup_escape(b).str());
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_iterator() && !b.is_iterator()) {
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return a.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    if ((a.is_string() && b.is_number()) || (a.is_number() && b.is_string()))
      throw JinjaError(std::string("TypeError: can only concatenate str (not \"") +
                       (a.is_string() ? b : a).type_name() + "\") to str");
    throw JinjaError(type_error("+", a, b));
  }
  if (op == "-") {
    int64_t r = 0;
    if (ints) {
      bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return checked(overflow, r);
    }
    if (numbers) return Value(a.as_double() - b.as_double());
    throw JinjaError(type_error("-", a, b));
  }
  if (op == "*") {
    int64_t r = 0;
    if (ints) {
      bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return checked(overflow, r);
    }
    if (numbers) return Value(a.as_double() * b.as_double());
    if ((a.is_string() || (a.is_list() && !a.is_iterator())) && (b.is_int() || b.is_bool()))
      return as_markup_if(a.is_markup(), repeat(a, b.as_int()));
    if ((b.is_string() || (b.is_list() && !b.is_iterator())) && (a.is_int() || a.is_bool()))
      return as_markup_if(b.is_markup(), repeat(b, a.as_int()));
    throw JinjaError(type_error("*", a, b));
  }
  if (op == "/") {
    if (!numbers) throw JinjaError(type_error("/", a, b));
    if (b.as_double() == 0) throw JinjaError("ZeroDivisionError: division by zero");
    // Python divides two ints exactly before rounding; converting them to double first would not be
    // exact beyond 2**53, long double (64-bit mantissa on x86) holds every int64.
    if (ints) return Value(static_cast<double>(static_cast<long double>(a.as_int()) / b.as_int()));
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (!numbers) {
      if (op == "%" && a.is_string()) return percent_operator(a, b);
      throw JinjaError(type_error(op.c_str(), a, b));
    }
    if (b.as_double() == 0)
      throw JinjaError(op == "%" ? "ZeroDivisionError: integer modulo by zero"
                                 : "ZeroDivisionError: integer division by zero");
    if (ints) {
      if (b.as_int() == -1)  // INT64_MIN / -1 traps; Python's result is exact
        return op == "//" ? checked(a.as_int() == INT64_MIN, -a.as_int()) : Value(int64_t{0});
      int64_t q = floor_div(a.as_int(), b.as_int());
      return op == "//" ? Value(q) : Value(a.as_int() - q * b.as_int());
    }
    double x = a.as_double(), y = b.as_double();
    double q = std::floor(x / y);
    if (op == "//") return Value(q);
    double r = std::fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return Value(r);
  }
  if (op == "**") {
    if (!numbers) throw JinjaError(type_error("** or pow()", a, b));
    if (ints && b.as_int() >= 0) {
      int64_t result = 1, base = a.as_int();
      bool overflow = false;
      for (int64_t e = b.as_int(); e > 0 && !overflow; e >>= 1) {
        if (e & 1) overflow |= __builtin_mul_overflow(result, base, &result);
        if (e > 1) overflow |= __builtin_mul_overflow(base, base, &base);
      }
      return checked(overflow, result);
    }
    double x = a.as_double(), y = b.as_double();
    if (x == 0 && y < 0) throw JinjaError("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    double r = std::pow(x, y);
    if (std::isinf(r) && std::isfinite(x) && std::isfinite(y))
      throw JinjaError("OverflowError: (34, 'Numerical result out of range')");
    return Value(r);
  }
  throw JinjaError("unknown operator " + op);
}

// `%c`: an integer code point or a one-character string.
static std::string char_conversion(const Value& v) {
  if (v.is_string()) {
    if (utf8_length(v.str()) != 1) throw JinjaError("TypeError: %c requires int or char");
    return v.str();
  }
  if (!v.is_int() && !v.is_bool()) throw JinjaError("TypeError: %c requires int or char");
  if (v.as_int() < 0 || v.as_int() > 0x10FFFF)
    throw JinjaError("OverflowError: %c arg not in range(0x110000)");
  std::string out;
  utf8_append(out, static_cast<char32_t>(v.as_int()));
  return out;
}

// %d, %i, %x, %X and %o: Python writes a sign and the magnitude (C would print a negative number's
// two's complement), "#" adds "0x", "0X" or "0o" (C writes "0" for octal), zero padding goes
// between the prefix and the digits, and it applies even with a precision (C drops it then, and
// prints no digit for a zero of precision 0).
static std::string integer_conversion(int64_t n, char conv, const std::string& flags, size_t width,
                                      size_t precision) {
  uint64_t magnitude = n < 0 ? 0 - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  char buf[32];
  const char* digits_format = conv == 'o' ? "%llo" : conv == 'x' ? "%llx" : conv == 'X' ? "%llX" : "%llu";
  std::snprintf(buf, sizeof(buf), digits_format, static_cast<unsigned long long>(magnitude));
  std::string digits = buf;
  if (digits.size() < precision) digits.insert(0, precision - digits.size(), '0');
  auto has = [&](char flag) { return flags.find(flag) != std::string::npos; };
  std::string prefix = n < 0 ? "-" : has('+') ? "+" : has(' ') ? " " : "";
  if (has('#') && conv != 'd' && conv != 'i') prefix += conv == 'o' ? "0o" : conv == 'x' ? "0x" : "0X";
  size_t length = prefix.size() + digits.size();
  if (length >= width) return prefix + digits;
  if (has('-')) return prefix + digits + std::string(width - length, ' ');
  if (has('0')) return prefix + std::string(width - length, '0') + digits;
  return std::string(width - length, ' ') + prefix + digits;
}

std::string percent_format(const std::string& fmt, const std::vector<Value>& args, bool lone_operand) {
  std::string out;
  size_t next = 0;
  // `'%(name)s' % mapping`: a lone dict operand serves the keyed conversions.
  const Value* mapping = lone_operand && args.size() == 1 && args[0].is_dict() ? &args[0] : nullptr;
  // Python lets a lone operand that has __getitem__ (a list, a dict, an Undefined) go unused.
  const bool may_go_unused =
      lone_operand && args.size() == 1 &&
      (args[0].is_dict() || args[0].is_undefined() || (args[0].is_list() && !args[0].is_iterator()));
  bool used_mapping = false;
  std::optional<std::string> key;
  auto take = [&]() -> const Value& {
    if (key) {
      if (!mapping) throw JinjaError("TypeError: format requires a mapping");
      used_mapping = true;
      const Value* v = mapping->dict_data().find(*key);
      if (!v) throw JinjaError("KeyError: '" + *key + "'");
      return *v;
    }
    if (next >= args.size()) throw JinjaError("TypeError: not enough arguments for format string");
    return args[next++];
  };
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    size_t j = i + 1;
    key.reset();
    if (j < fmt.size() && fmt[j] == '(') {
      size_t close = fmt.find(')', j);
      if (close == std::string::npos) throw JinjaError("ValueError: incomplete format key");
      key = fmt.substr(j + 1, close - j - 1);
      j = close + 1;
    }
    std::string flags;
    while (j < fmt.size() && std::string("-+ #0").find(fmt[j]) != std::string::npos)
      flags.push_back(fmt[j++]);
    std::string width, precision;
    bool has_precision = false;
    while (j < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[j]))) width.push_back(fmt[j++]);
    if (j < fmt.size() && fmt[j] == '.') {
      has_precision = true;
      ++j;
      while (j < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[j])))
        precision.push_back(fmt[j++]);
    }
    if (j >= fmt.size()) throw JinjaError("ValueError: incomplete format");
    if (width.size() > 9 || precision.size() > 9) throw JinjaError("MemoryError: format width is too large");
    check_built_size(width.empty() ? 0 : std::stoll(width), "formatted string");
    char conv = fmt[j];
    const bool bare = j == i + 1;
    i = j;
    if (conv == '%') {  // only a bare "%%" is an escape: Python refuses "%5%"
      if (!bare) throw JinjaError("ValueError: unsupported format character '%' (0x25)");
      out.push_back('%');
      continue;
    }
    std::string spec =
        "%" + flags + width + (has_precision ? "." + (precision.empty() ? "0" : precision) : "");
    const Value& v = take();
    std::string piece;
    if (conv == 's' || conv == 'r') {
      piece = conv == 's' ? v.to_str() : v.repr();
      if (has_precision) {
        std::u32string u = utf8_decode(piece);
        size_t keep = precision.empty() ? 0 : std::stoul(precision);
        if (u.size() > keep) piece = utf8_encode(std::u32string_view(u).substr(0, keep));
      }
      size_t w = width.empty() ? 0 : std::stoul(width);
      size_t len = utf8_length(piece);
      if (len < w) {
        std::string pad(w - len, ' ');
        piece = flags.find('-') != std::string::npos ? piece + pad : pad + piece;
      }
    } else if (conv == 'c') {
      piece = char_conversion(v);
      size_t w = width.empty() ? 0 : std::stoul(width);
      if (w > 1)
        piece = flags.find('-') != std::string::npos ? piece + std::string(w - 1, ' ')
                                                     : std::string(w - 1, ' ') + piece;
    } else if (conv == 'd' || conv == 'i' || conv == 'x' || conv == 'X' || conv == 'o') {
      if (v.is_big_int())
        throw JinjaError(std::string("OverflowError: %") + conv +
                         " of an integer outside 64 bits is not supported");
      if (!v.is_number())
        throw JinjaError(std::string("TypeError: %") + conv + " format: a number is required, not " +
                         v.type_name());
      // %x, %X and %o take integers only (Python's __index__); %d and %i truncate a float.
      if (conv != 'd' && conv != 'i' && v.is_float())
        throw JinjaError(std::string("TypeError: %") + conv + " format: an integer is required, not float");
      piece = integer_conversion(v.as_int(), conv, flags, width.empty() ? 0 : std::stoul(width),
                                 has_precision ? (precision.empty() ? 0 : std::stoul(precision)) : 0);
    } else if (std::string("fFeEgG").find(conv) != std::string::npos) {
      if (!v.is_number())
        throw JinjaError(std::string("TypeError: must be real number, not ") + v.type_name());
      // Sized by a first call: 1e300 with a large precision runs to hundreds of digits.
      std::string f = spec + conv;
      std::vector<char> text(static_cast<size_t>(std::snprintf(nullptr, 0, f.c_str(), v.as_double())) + 1);
      std::snprintf(text.data(), text.size(), f.c_str(), v.as_double());
      piece = text.data();
    } else {
      throw JinjaError(std::string("ValueError: unsupported format character '") + conv + "'");
    }
    out += piece;
  }
  if (next < args.size() && !(used_mapping || (may_go_unused && next == 0)))
    throw JinjaError("TypeError: not all arguments converted during string formatting");
  return out;
}

Value unary_op(const std::string& op, const Value& a) {
  if (op == "not") return Value(!a.truthy());
  if (a.is_undefined()) fail_undefined(a);
  if (a.is_big_int()) {  // the sign of an integer outside 64 bits (-(-2**63) lands back in int64)
    if (op == "+") return a;
    const std::string& d = a.str();
    return Value::integer_from_text(d[0] == '-' ? d.substr(1) : "-" + d);
  }
  if (!a.is_number())
    throw JinjaError(std::string("TypeError: bad operand type for unary ") + op + ": '" + a.type_name() +
                     "'");
  if (op == "-") {
    if (a.is_float()) return Value(-a.as_double());
    if (a.is_int() && a.as_int() == INT64_MIN) return Value::integer_from_text("9223372036854775808");
    int64_t r = 0;
    {
      bool overflow = __builtin_sub_overflow(int64_t{0}, a.as_int(), &r);
      return checked(overflow, r);
    }
  }
  return a.is_float() ? Value(a.as_double()) : Value(a.as_int());
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return values_equal(a, b);
  if (op == "!=") return !values_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (op == "<") return value_less(a, b);
  if (op == ">") return value_less(b, a);
  if (op == "<=") return value_less(a, b) || values_equal(a, b);
  if (op == ">=") return value_less(b, a) || values_equal(a, b);
  throw JinjaError("unknown comparison " + op);
}

bool is_hashable(const Value& v) {
  if (v.is_dict()) return false;
  if (v.is_list() && !v.is_iterator()) {
    if (!v.is_tuple()) return false;
    return std::all_of(v.items().begin(), v.items().end(), [](const Value& x) { return is_hashable(x); });
  }
  return true;
}

void require_hashable(const Value& v) {
  if (!is_hashable(v)) throw JinjaError(std::string("TypeError: unhashable type: '") + v.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      throw JinjaError(std::string("TypeError: 'in <string>' requires string as left operand, not ") +
                       item.type_name());
    return container.str().find(item.str()) != std::string::npos;
  }
  if (container.is_dict()) {
    require_hashable(item);
    return container.dict_data().find(item) != nullptr;
  }
  if (container.is_list()) {
    for (const auto& v : container.items())
      if (values_equal(v, item)) return true;
    return false;
  }
  if (container.is_undefined()) return false;
  throw JinjaError(std::string("TypeError: argument of type '") + container.type_name() +
                   "' is not iterable");
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& e : v.dict_data().entries) keys.push_back(e.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (char32_t c : utf8_decode(v.str())) {
        std::string s;
        utf8_append(s, c);
        chars.emplace_back(std::move(s));
      }
      return chars;
    }
    default:
      throw JinjaError(std::string("TypeError: '") + v.type_name() + "' object is not iterable");
  }
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Kind::kList:
      if (v.is_iterator()) throw JinjaError("TypeError: object of type 'generator' has no len()");
      return static_cast<int64_t>(v.items().size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict_data().entries.size());
    default:
      throw JinjaError(std::string("TypeError: object of type '") + v.type_name() + "' has no len()");
  }
}

Value call_value(const Value& fn, CallArgs& args) {
  if (fn.is_undefined()) fail_undefined(fn);
  // A recursive loop's `loop` object: a mapping that is also callable (its hidden `__call__`).
  if (fn.is_dict()) {
    if (const Value* call = fn.dict_data().find(std::string("__call__")); call && call->is_callable())
      return call->callable().fn(args);
  }
  if (!fn.is_callable())
    throw JinjaError(std::string("TypeError: '") + fn.type_name() + "' object is not callable");
  return fn.callable().fn(args);
}

ArgBinder::ArgBinder(const char* function, CallArgs& args, std::vector<const char*> names)
    : function_(function), bound_(names.size(), nullptr) {
  if (args.positional.size() > names.size())
    throw JinjaError(std::string("TypeError: ") + function + "() takes at most " +
                     std::to_string(names.size()) + " arguments (" + std::to_string(args.positional.size()) +
                     " given)");
  for (size_t i = 0; i < args.positional.size(); ++i) bound_[i] = &args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    bool found = false;
    for (size_t i = 0; i < names.size(); ++i) {
      if (key == names[i]) {
        if (bound_[i])
          throw JinjaError(std::string("TypeError: ") + function + "() got multiple values for argument '" +
                           key + "'");
        bound_[i] = &value;
        found = true;
      }
    }
    if (!found)
      throw JinjaError(std::string("TypeError: ") + function + "() got an unexpected keyword argument '" +
                       key + "'");
  }
}

bool ArgBinder::has(size_t index) const { return index < bound_.size() && bound_[index] != nullptr; }

Value ArgBinder::get(size_t index, Value fallback) const { return has(index) ? *bound_[index] : fallback; }

const Value& ArgBinder::required(size_t index) const {
  if (!has(index))
    throw JinjaError(std::string("TypeError: ") + function_ + "() missing required argument " +
                     std::to_string(index + 1));
  return *bound_[index];
}

std::string require_string_arg(const Value& v, const char* what) {
  if (!v.is_string()) throw JinjaError(std::string("TypeError: ") + what + " must be a string");
  return v.str();
}

}  // namespace tf::jinja
