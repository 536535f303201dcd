// Built-in filters and tests (see jinja_builtins.h). Each follows the jinja2 3.1 implementation of
// the same name: argument names and defaults, what an Undefined input gives, and that map/select/
// selectattr/reverse return one-shot iterators (truthy, no len()) rather than lists.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>
#include <unordered_map>

#include "text/jinja_builtins.h"
#include "text/jinja_ops.h"
#include "text/jinja_strings.h"
#include "text/jinja_text_filters.h"

namespace tf::jinja {
namespace {

using Filter = std::function<Value(const Value&, CallArgs&)>;
using Test = std::function<bool(const Value&, CallArgs&)>;

// jinja2's make_attrgetter: "a.b.0" looks up each part with getitem (item first, then attribute);
// an integer attribute is a single index.
Value attribute_of(const Value& item, const std::string& path);
Value attribute_of(const Value& item, const Value& attr) {
  if (attr.is_int()) return get_item(item, attr);
  return attribute_of(item, attr.to_str());
}

Value attribute_of(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = numeric ? get_item(v, Value::integer_from_text(part)) : get_item(v, Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// Python's round(int, ndigits): unchanged for ndigits >= 0, else to a multiple of 10**-ndigits, ties to even.
Value round_int(int64_t n, int64_t ndigits) {
  if (ndigits >= 0) return Value(n);
  if (ndigits < -18) {
    if (n > 5'000'000'000'000'000'000 || n < -5'000'000'000'000'000'000)
      throw JinjaError("OverflowError: integer result does not fit in 64 bits");
    return Value(int64_t{0});
  }
  int64_t p = 1;
  for (int64_t i = 0; i < -ndigits; ++i) p *= 10;
  int64_t q = n / p, r = n % p;
  if (r < 0) {  // floor division, as Python's divmod
    r += p;
    q -= 1;
  }
  if (2 * r > p || (2 * r == p && (q & 1))) q += 1;
  int64_t out = 0;
  if (__builtin_mul_overflow(q, p, &out))
    throw JinjaError("OverflowError: integer result does not fit in 64 bits");
  return Value(out);
}

// Sort/unique/min/max key: lowercased strings unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.str()));
  return v;
}

CallArgs rest_args(CallArgs& args, size_t from) {
  CallArgs rest;
  for (size_t i = from; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  rest.keyword = args.keyword;
  return rest;
}

// select/reject/selectattr/rejectattr share this: args are (value, [attribute,] test, test args...).
Value select_impl(const Value& input, CallArgs& args, bool with_attr, bool keep_on) {
  // jinja2's select_or_reject starts with `if value:`: a falsy input (None, 0, "", []) selects nothing
  // and its arguments are not even looked at.
  if (!input.truthy()) return Value::iterator({});
  size_t next = 0;
  std::string attr;
  if (with_attr) {
    if (args.positional.empty()) throw JinjaError("TypeError: missing attribute name");
    attr = require_string_arg(args.positional[0], "attribute");
    next = 1;
  }
  std::string test;
  if (args.positional.size() > next) test = require_string_arg(args.positional[next++], "test name");
  CallArgs test_args = rest_args(args, next);
  std::vector<Value> out;
  for (const auto& item : iterate(input)) {
    Value v = with_attr ? attribute_of(item, attr) : item;
    CallArgs call = test_args;
    bool r = test.empty() ? v.truthy() : apply_test(test, v, call);
    if (r == keep_on) out.push_back(item);
  }
  return Value::iterator(std::move(out));
}

Value aggregate(const Value& input, CallArgs& args, bool want_max) {
  ArgBinder b(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool cs = b.get(0, Value(false)).truthy();
  Value attr = b.get(1, Value::none());
  std::vector<Value> items = iterate(input);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  auto key = [&](const Value& v) { return sort_key(attr.is_string() ? attribute_of(v, attr.str()) : v, cs); };
  for (size_t i = 1; i < items.size(); ++i) {
    Value a = key(items[i]), c = key(items[best]);
    if (want_max ? value_less(c, a) : value_less(a, c)) best = i;
  }
  return items[best];
}

// Python's int(text, base): surrounding whitespace, a sign, the 0x/0o/0b prefix of the base (any
// of them for base 0), single underscores between digits. nullopt where Python raises ValueError.
std::optional<int64_t> parse_python_int(const std::string& text, int64_t base) {
  if (base != 0 && (base < 2 || base > 36)) return std::nullopt;
  std::string s = py_strip(text, std::nullopt, true, true);
  size_t i = 0;
  bool negative = i < s.size() && s[i] == '-';
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  bool after_prefix = false;
  if (i + 1 < s.size() && s[i] == '0') {
    char p = static_cast<char>(s[i + 1] | 0x20);
    int64_t prefixed = p == 'x' ? 16 : p == 'o' ? 8 : p == 'b' ? 2 : 0;
    if (prefixed && (base == 0 || base == prefixed)) {
      base = prefixed;
      i += 2;
      after_prefix = true;
    }
  }
  bool decimal_auto = base == 0;  // base 0 without a prefix: decimal, and no leading zeros
  if (decimal_auto) base = 10;
  uint64_t magnitude = 0;
  bool any_digit = false, nonzero = false, leading_zero = false;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (!(any_digit || after_prefix) || i + 1 >= s.size() || s[i + 1] == '_') return std::nullopt;
      continue;
    }
    int digit = std::isdigit(static_cast<unsigned char>(c))   ? c - '0'
                : std::isalpha(static_cast<unsigned char>(c)) ? (c | 0x20) - 'a' + 10
                                                              : 99;
    if (digit >= base) return std::nullopt;
    if (!any_digit && digit == 0) leading_zero = true;
    nonzero = nonzero || digit != 0;
    any_digit = true;
    if (__builtin_mul_overflow(magnitude, static_cast<uint64_t>(base), &magnitude) ||
        __builtin_add_overflow(magnitude, static_cast<uint64_t>(digit), &magnitude) ||
        magnitude > uint64_t{1} << 63 || (!negative && magnitude == uint64_t{1} << 63))
      throw JinjaError("OverflowError: integer result does not fit in 64 bits");
  }
  if (!any_digit || (decimal_auto && leading_zero && nonzero)) return std::nullopt;
  return negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
}

// Python's float(text): surrounding whitespace, a sign, decimal digits (single underscores between
// them) with an optional exponent, or inf / infinity / nan in any case. No hexadecimal.
std::optional<double> parse_python_float(const std::string& text) {
  std::string s = py_strip(text, std::nullopt, true, true);
  std::string cleaned;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      cleaned.push_back(s[i]);
      continue;
    }
    bool between_digits = i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                          std::isdigit(static_cast<unsigned char>(s[i + 1]));
    if (!between_digits) return std::nullopt;
  }
  bool negative = !cleaned.empty() && cleaned[0] == '-';
  std::string_view body(cleaned);
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) body.remove_prefix(1);
  if (body.empty() || body.find_first_of("xX(") != std::string_view::npos || body[0] == '-' || body[0] == '+')
    return std::nullopt;
  double d = 0;
  auto [end, ec] = std::from_chars(body.data(), body.data() + body.size(), d, std::chars_format::general);
  if (end != body.data() + body.size()) return std::nullopt;
  if (ec == std::errc::result_out_of_range) {  // Python rounds to inf or 0 instead of failing
    d = std::strtod(std::string(body).c_str(), nullptr);
  } else if (ec != std::errc()) {
    return std::nullopt;
  }
  return negative ? -d : d;
}

// int(float): a NaN is a ValueError (the int filter's fallback), an infinity an OverflowError.
std::optional<int64_t> float_to_int(double d) {
  if (std::isnan(d)) return std::nullopt;
  if (std::isinf(d)) throw JinjaError("OverflowError: cannot convert float infinity to integer");
  return Value(d).as_int();
}

// jinja2's int filter: int(value) (int(value, base) for a string), else int(float(value)), else the
// default. An Undefined raises, and so does an infinite float (only the fallback catches OverflowError).
Value to_int(const Value& v, const Value& fallback, int64_t base) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_bool() || v.is_int()) return Value(v.as_int());
  if (v.is_big_int()) return v;
  std::optional<int64_t> r;
  if (v.is_float()) r = float_to_int(v.as_double());
  if (v.is_string()) {
    r = parse_python_int(v.str(), base);
    if (!r) {  // the fallback int(float(value)) also catches OverflowError
      if (auto d = parse_python_float(v.str()); d && !std::isinf(*d)) r = float_to_int(*d);
    }
  }
  return r ? Value(*r) : fallback;
}

// jinja2's float filter: float(value), else the default; an Undefined raises.
Value to_float(const Value& v, const Value& fallback) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number() || v.is_big_int()) return Value(v.as_double());
  if (v.is_string()) {
    if (auto d = parse_python_float(v.str())) return Value(*d);
  }
  return fallback;
}

// Python's float(value) where nothing catches its errors (filesizeformat).
double require_float(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number() || v.is_big_int()) return v.as_double();
  if (v.is_string()) {
    if (auto d = parse_python_float(v.str())) return *d;
    throw JinjaError("ValueError: could not convert string to float: " + v.repr());
  }
  throw JinjaError(std::string("TypeError: float() argument must be a string or a real number, not '") +
                   v.type_name() + "'");
}

// Python's round(x, n) rounds the exact binary value correctly (2.675 -> 2.67); printf does the same.
double py_round(double x, int64_t digits) {
  if (!std::isfinite(x)) return x;
  if (digits >= 0 && digits < 300) {
    char buf[400];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(digits), x);
    return std::strtod(buf, nullptr);
  }
  double scale = std::pow(10.0, static_cast<double>(digits));
  return std::nearbyint(x * scale) / scale;
}

// truncate on a value that is not a string: jinja2 returns anything whose len() is short enough
// unchanged (an Undefined has length 0), and fails on the rest as Python's slicing and + do.
Value truncate_non_string(const Value& v, const ArgBinder& b) {
  int64_t length = b.get(0, Value(int64_t{255})).as_int();
  int64_t leeway = b.get(3, Value::none()).is_none() ? 5 : b.get(3).as_int();
  if (length_of(v) <= length + leeway) return v;
  throw JinjaError(std::string("TypeError: can only truncate strings, not '") + v.type_name() + "'");
}

// jinja2's title filter: splits at runs of "-", "(", "{", "[", "<" and whitespace (re's \s: every
// str.isspace character), and writes each other run as piece[0].upper() + piece[1:].lower(). It
// works on code points: the bytes of a character such as "à" (C3 A0) are no separators.
std::string title_case(std::string_view s) {
  auto is_sep = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
  };
  std::u32string u = utf8_decode(s);
  std::u32string_view text(u);
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const bool sep = is_sep(text[i]);
    size_t j = i;
    while (j < text.size() && is_sep(text[j]) == sep) ++j;
    std::u32string_view piece = text.substr(i, j - i);
    out += sep ? utf8_encode(piece)
               : py_upper(utf8_encode(piece.substr(0, 1))) + py_lower(utf8_encode(piece.substr(1)));
    i = j;
  }
  return out;
}

const std::unordered_map<std::string, Filter>& filters() {
  static const std::unordered_map<std::string, Filter> table = [] {
    std::unordered_map<std::string, Filter> f;
    f["abs"] = [](const Value& v, CallArgs&) {
      if (v.is_float()) return Value(std::fabs(v.as_double()));
      // Negatives past int64 (and -2**63 itself) negate as unary minus does.
      if (v.is_big_int() || (v.is_int() && v.as_int() == INT64_MIN))
        return v.is_int() || v.str()[0] == '-' ? unary_op("-", v) : v;
      if (v.is_int() || v.is_bool()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
      throw JinjaError(std::string("TypeError: bad operand type for abs(): '") + v.type_name() + "'");
    };
    f["attr"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("attr", a, {"name"});
      std::string name = require_string_arg(b.required(0), "attribute name");
      // jinja2's attr filter is Python's getattr alone: a dict's methods are attributes, its keys are not.
      if (v.is_dict() && get_method(v, name).is_undefined() && v.dict_data().find(name))
        return Value::undefined("'dict object' has no attribute '" + name + "'");
      return get_attr(v, name);
    };
    f["batch"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("batch", a, {"linecount", "fill_with"});
      int64_t n = b.required(0).as_int();
      if (n <= 0) throw JinjaError("ValueError: batch size must be positive");
      std::vector<Value> out, cur;
      for (const auto& item : iterate(v)) {
        cur.push_back(item);
        if (static_cast<int64_t>(cur.size()) == n) {
          out.push_back(Value::list(std::move(cur)));
          cur.clear();
        }
      }
      if (!cur.empty()) {
        if (b.has(1) && !b.get(1).is_none()) check_built_size(n, "batch");
        if (b.has(1) && !b.get(1).is_none())
          while (static_cast<int64_t>(cur.size()) < n) cur.push_back(b.get(1));
        out.push_back(Value::list(std::move(cur)));
      }
      return Value::iterator(std::move(out));
    };
    f["capitalize"] = [](const Value& v, CallArgs&) {
      return as_markup_if(v.is_markup(), Value(py_capitalize(v.to_str())));
    };
    f["center"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("center", a, {"width"});
      std::string s = v.to_str();
      int64_t width = b.get(0, Value(int64_t{80})).as_int();
      int64_t len = static_cast<int64_t>(utf8_length(s));
      if (width <= len) return Value(s);
      check_built_size(width, "centered string");
      int64_t total = width - len;
      int64_t left = total / 2 + (total & width & 1);
      return Value(std::string(static_cast<size_t>(left), ' ') + s +
                   std::string(static_cast<size_t>(total - left), ' '));
    };
    f["default"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("default", a, {"default_value", "boolean"});
      bool boolean = b.get(1, Value(false)).truthy();
      if (v.is_undefined() || (boolean && !v.truthy())) return b.get(0, Value(""));
      return v;
    };
    f["d"] = f["default"];
    f["dictsort"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("dictsort", a, {"case_sensitive", "by", "reverse"});
      if (!v.is_dict()) throw JinjaError("FilterArgumentError: dictsort expects a mapping");
      bool cs = b.get(0, Value(false)).truthy();
      std::string by = b.get(1, Value("key")).to_str();
      if (by != "key" && by != "value")
        throw JinjaError("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
      size_t pos = by == "key" ? 0 : 1;
      std::vector<Value> items;
      for (const auto& [k, val] : v.dict_data().entries) items.push_back(Value::tuple({k, val}));
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return value_less(sort_key(x.items()[pos], cs), sort_key(y.items()[pos], cs));
      });
      if (b.get(2, Value(false)).truthy()) std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    f["escape"] = [](const Value& v, CallArgs&) { return markup_escape(v); };
    f["e"] = f["escape"];
    f["forceescape"] = [](const Value& v, CallArgs&) { return Value::markup(html_escape(v.to_str())); };
    f["format"] = [](const Value& v, CallArgs& a) {
      if (!a.keyword.empty() && !a.positional.empty())
        throw JinjaError("FilterArgumentError: can't handle positional and keyword arguments at the same time");
      if (!a.keyword.empty()) {  // `soft_str(value) % kwargs`
        Value mapping = Value::dict();
        for (const auto& [k, x] : a.keyword) mapping.dict_data().set(Value(k), x);
        return as_markup_if(v.is_markup(), Value(percent_format(v.to_str(), {mapping}, true)));
      }
      if (v.is_markup()) {
        std::vector<Value> args = a.positional;
        for (auto& x : args)
          if (x.is_string()) x = markup_escape(x);
        return Value::markup(percent_format(v.to_str(), args));
      }
      return Value(percent_format(v.to_str(), a.positional));
    };
    f["first"] = [](const Value& v, CallArgs&) {
      std::vector<Value> items = iterate(v);
      if (items.empty()) return Value::undefined("No first item, sequence was empty.");
      return items.front();
    };
    f["last"] = [](const Value& v, CallArgs&) {
      // reversed(Undefined) is empty in jinja2 (len 0), so `undefined | last` is Undefined too.
      if (v.is_iterator())
        throw JinjaError(std::string("TypeError: '") + v.type_name() + "' object is not reversible");
      std::vector<Value> items = iterate(v);
      if (items.empty()) return Value::undefined("No last item, sequence was empty.");
      return items.back();
    };
    f["float"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("float", a, {"default"});
      return to_float(v, b.get(0, Value(0.0)));
    };
    f["int"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("int", a, {"default", "base"});
      return to_int(v, b.get(0, Value(int64_t{0})), b.get(1, Value(int64_t{10})).as_int());
    };
    f["indent"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("indent", a, {"width", "first", "blank"});
      // jinja2 starts with `s += "\n"`, which only a string survives.
      if (v.is_undefined()) fail_undefined(v);
      if (!v.is_string())
        throw JinjaError(std::string("TypeError: unsupported operand type(s) for +=: '") + v.type_name() +
                         "' and 'str'");
      Value width = b.get(0, Value(int64_t{4}));
      if (!width.is_string()) check_built_size(width.as_int(), "indent");
      std::string ind = width.is_string()
                            ? width.str()
                            : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
      std::string s = v.to_str() + "\n";
      std::vector<std::string> lines = py_splitlines(s);
      std::string rv;
      if (b.get(2, Value(false)).truthy()) {
        for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
      } else {
        rv = lines.empty() ? "" : lines[0];
        for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind + lines[i]);
      }
      if (b.get(1, Value(false)).truthy()) rv = ind + rv;
      return as_markup_if(v.is_markup(), Value(rv));
    };
    f["groupby"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("groupby", a, {"attribute", "default", "case_sensitive"});
      Value attr = b.required(0);
      Value fallback = b.get(1, Value::none());
      bool cs = b.get(2, Value(false)).truthy();
      auto key_of = [&](const Value& item) {
        Value k = attribute_of(item, attr);
        // A missing attribute groups under Undefined (two of them cannot be sorted, as in Python).
        if (k.is_undefined() && !fallback.is_none()) k = fallback;
        return k;
      };
      std::vector<Value> items = iterate(v);
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return value_less(sort_key(key_of(x), cs), sort_key(key_of(y), cs));
      });
      std::vector<Value> out;
      for (size_t i = 0; i < items.size();) {
        Value group_key = sort_key(key_of(items[i]), cs);
        std::vector<Value> members;
        size_t j = i;
        while (j < items.size() && values_equal(sort_key(key_of(items[j]), cs), group_key)) members.push_back(items[j++]);
        // Without case_sensitive the grouper is the first member's own value, not the lowered key.
        out.push_back(Value::named_tuple({"grouper", "list"}, {key_of(items[i]), Value::list(std::move(members))}));
        i = j;
      }
      return Value::list(std::move(out));
    };
    f["slice"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("slice", a, {"slices", "fill_with"});
      int64_t slices = b.required(0).as_int();
      Value fill = b.get(1, Value::none());
      std::vector<Value> seq = iterate(v);
      int64_t length = static_cast<int64_t>(seq.size());
      if (slices <= 0) throw JinjaError("ZeroDivisionError: integer division or modulo by zero");
      check_built_size(slices, "slice count");
      int64_t per = length / slices, extra = length % slices, offset = 0;
      std::vector<Value> out;
      for (int64_t n = 0; n < slices; ++n) {
        int64_t start = offset + n * per;
        if (n < extra) ++offset;
        int64_t end = offset + (n + 1) * per;
        std::vector<Value> part(seq.begin() + start, seq.begin() + end);
        if (!fill.is_none() && n >= extra) part.push_back(fill);
        out.push_back(Value::list(std::move(part)));
      }
      return Value::iterator(std::move(out));
    };
    f["truncate"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("truncate", a, {"length", "killwords", "end", "leeway"});
      if (!v.is_string()) return truncate_non_string(v, b);
      std::u32string s = utf8_decode(v.to_str());
      int64_t length = b.get(0, Value(int64_t{255})).as_int();
      bool killwords = b.get(1, Value(false)).truthy();
      std::u32string end = utf8_decode(b.get(2, Value("...")).to_str());
      int64_t leeway = b.get(3, Value::none()).is_none() ? 5 : b.get(3).as_int();
      int64_t n = static_cast<int64_t>(s.size()), e = static_cast<int64_t>(end.size());
      if (length < e) throw JinjaError("AssertionError: expected length >= " + std::to_string(e) + ", got " + std::to_string(length));
      if (leeway < 0) throw JinjaError("AssertionError: expected leeway >= 0, got " + std::to_string(leeway));
      if (n <= length + leeway) return Value(v.to_str());
      std::u32string head = s.substr(0, static_cast<size_t>(length - e));
      if (!killwords) {
        size_t sp = head.rfind(U' ');
        if (sp != std::u32string::npos) head = head.substr(0, sp);
      }
      return Value(utf8_encode(head + end));
    };
    f["filesizeformat"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("filesizeformat", a, {"binary"});
      bool binary = b.get(0, Value(false)).truthy();
      double bytes = require_float(v);
      double base = binary ? 1024 : 1000;
      static const char* kDec[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
      static const char* kBin[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
      if (bytes == 1) return Value("1 Byte");
      if (bytes < base) return Value(std::to_string(static_cast<int64_t>(bytes)) + " Bytes");
      char buf[512];  // a float up to 1e308 printed in full
      for (int i = 0; i < 8; ++i) {
        double unit = std::pow(base, i + 2);
        if (bytes < unit || i == 7) {
          std::snprintf(buf, sizeof(buf), "%.1f %s", base * bytes / unit, binary ? kBin[i] : kDec[i]);
          return Value(std::string(buf));
        }
      }
      return Value("");
    };
    f["pprint"] = [](const Value& v, CallArgs&) {
      // pprint.pformat: repr with dict keys sorted. A list or dict whose repr exceeds 80 columns,
      // which Python wraps over several lines, is refused with an error saying so.
      std::function<Value(const Value&)> sorted = [&](const Value& x) -> Value {
        if (x.is_dict()) {
          std::vector<std::pair<Value, Value>> entries = x.dict_data().entries;
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto& p, const auto& q) { return value_less(p.first, q.first); });
          Value d = Value::dict();
          for (auto& [k, val] : entries) d.dict_data().set(k, sorted(val));
          return d;
        }
        if (x.is_list() && !x.is_iterator()) {
          std::vector<Value> items;
          for (const auto& i : x.items()) items.push_back(sorted(i));
          return x.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
        }
        return x;
      };
      std::string r = sorted(v).repr();
      if (utf8_length(r) > 80 && (v.is_dict() || v.is_list()))
        throw JinjaError("pprint: values longer than 80 columns (wrapped by Python's pprint) are not supported");
      return Value(r);
    };
    f["items"] = [](const Value& v, CallArgs&) {
      if (v.is_undefined()) return Value::iterator({});
      if (!v.is_dict()) throw JinjaError("TypeError: Can only get item pairs from a mapping.");
      std::vector<Value> items;
      for (const auto& [k, val] : v.dict_data().entries) items.push_back(Value::tuple({k, val}));
      return Value::iterator(std::move(items));
    };
    f["join"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("join", a, {"d", "attribute"});
      std::string sep = b.get(0, Value("")).to_str();
      Value attr = b.get(1, Value::none());
      std::string out;
      bool first = true;
      for (const auto& item : iterate(v)) {
        if (!first) out += sep;
        first = false;
        out += (attr.is_none() ? item : attribute_of(item, attr.to_str())).to_str();
      }
      return Value(out);
    };
    f["length"] = [](const Value& v, CallArgs&) { return Value(length_of(v)); };
    f["count"] = f["length"];
    f["list"] = [](const Value& v, CallArgs&) { return Value::list(iterate(v)); };
    // These go through soft_str, so a Markup input gives a Markup result.
    f["lower"] = [](const Value& v, CallArgs&) { return as_markup_if(v.is_markup(), Value(py_lower(v.to_str()))); };
    f["upper"] = [](const Value& v, CallArgs&) { return as_markup_if(v.is_markup(), Value(py_upper(v.to_str()))); };
    f["map"] = [](const Value& v, CallArgs& a) {
      std::vector<Value> out;
      if (!v.truthy()) return Value::iterator({});  // jinja2's do_map: `if value:` first
      const Value* attr = nullptr;
      Value fallback;
      for (const auto& [k, val] : a.keyword) {
        if (k == "attribute")
          attr = &val;
        else if (k == "default")
          fallback = val;
      }
      if (attr) {
        for (const auto& item : iterate(v)) {
          Value r = attribute_of(item, attr->to_str());
          out.push_back(r.is_undefined() && !fallback.is_undefined() ? fallback : r);
        }
        return Value::iterator(std::move(out));
      }
      if (a.positional.empty()) throw JinjaError("FilterArgumentError: map requires a filter argument");
      std::string name = require_string_arg(a.positional[0], "filter name");
      CallArgs rest = rest_args(a, 1);
      for (const auto& item : iterate(v)) {
        CallArgs call = rest;
        out.push_back(apply_filter(name, item, call));
      }
      return Value::iterator(std::move(out));
    };
    f["max"] = [](const Value& v, CallArgs& a) { return aggregate(v, a, true); };
    f["min"] = [](const Value& v, CallArgs& a) { return aggregate(v, a, false); };
    f["select"] = [](const Value& v, CallArgs& a) { return select_impl(v, a, false, true); };
    f["reject"] = [](const Value& v, CallArgs& a) { return select_impl(v, a, false, false); };
    f["selectattr"] = [](const Value& v, CallArgs& a) { return select_impl(v, a, true, true); };
    f["rejectattr"] = [](const Value& v, CallArgs& a) { return select_impl(v, a, true, false); };
    f["replace"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("replace", a, {"old", "new", "count"});
      Value count = b.get(2, Value::none());
      return Value(py_replace(v.to_str(), b.required(0).to_str(), b.required(1).to_str(),
                              count.is_none() ? -1 : count.as_int()));
    };
    f["reverse"] = [](const Value& v, CallArgs&) {
      if (v.is_string()) {
        std::u32string u = utf8_decode(v.str());
        std::reverse(u.begin(), u.end());
        return Value(utf8_encode(u));
      }
      std::vector<Value> items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::iterator(std::move(items));
    };
    f["round"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("round", a, {"precision", "method"});
      int64_t precision = b.get(0, Value(int64_t{0})).as_int();
      std::string method = b.get(1, Value("common")).to_str();
      if (method != "common" && method != "ceil" && method != "floor")
        throw JinjaError("FilterArgumentError: method must be common, ceil or floor");
      if (v.is_big_int() && method == "common" && precision >= 0) return v;  // round(int, n >= 0) is the int
      if (!v.is_number())
        throw JinjaError(std::string("TypeError: type ") + v.type_name() +
                         " doesn't define __round__ method");
      if (method == "common") {
        if (!v.is_float()) return round_int(v.as_int(), precision);
        return Value(py_round(v.as_double(), precision));
      }
      double scale = std::pow(10.0, static_cast<double>(precision));
      double x = v.as_double() * scale;
      return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
    };
    f["safe"] = [](const Value& v, CallArgs&) { return Value::markup(v.to_str()); };
    f["sort"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("sort", a, {"reverse", "case_sensitive", "attribute"});
      bool reverse = b.get(0, Value(false)).truthy();
      bool cs = b.get(1, Value(false)).truthy();
      Value attr = b.get(2, Value::none());
      std::vector<Value> items = iterate(v);
      // jinja2's make_multi_attrgetter: "a,b" sorts by a, then b (each part as written, spaces kept).
      std::vector<std::string> parts;
      if (attr.is_string()) parts = py_split(attr.str(), std::string(","), -1);
      auto key = [&](const Value& x) {
        if (parts.size() < 2) return sort_key(attr.is_none() ? x : attribute_of(x, attr.to_str()), cs);
        std::vector<Value> keys;
        for (const auto& part : parts) keys.push_back(sort_key(attribute_of(x, part), cs));
        return Value::list(std::move(keys));
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return reverse ? value_less(key(y), key(x)) : value_less(key(x), key(y));
      });
      return Value::list(std::move(items));
    };
    f["string"] = [](const Value& v, CallArgs&) { return v.is_markup() ? v : Value(v.to_str()); };
    f["sum"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("sum", a, {"attribute", "start"});
      Value attr = b.get(0, Value::none());
      Value total = b.get(1, Value(int64_t{0}));
      if (total.is_string())
        throw JinjaError("TypeError: sum() can't sum strings [use ''.join(seq) instead]");
      if (!attr.is_none()) {
        for (const auto& item : iterate(v)) total = binary_op("+", total, attribute_of(item, attr));
        return total;
      }
      for (const auto& item : iterate(v))
        total = binary_op("+", total, attr.is_none() ? item : attribute_of(item, attr.to_str()));
      return total;
    };
    f["title"] = [](const Value& v, CallArgs&) {
      return as_markup_if(v.is_markup(), Value(title_case(v.to_str())));
    };
    f["tojson"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("tojson", a, {"ensure_ascii", "indent", "separators", "sort_keys"});
      JsonDumpOptions o;
      o.ensure_ascii = b.get(0, Value(false)).truthy();
      Value indent = b.get(1, Value::none());
      if (indent.is_string()) {
        o.has_indent = true;
        o.indent = indent.str();
      } else if (indent.is_int() || indent.is_bool()) {
        check_built_size(indent.as_int(), "tojson indent");
        o.has_indent = true;
        o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
      } else if (!indent.is_none()) {
        throw JinjaError("TypeError: tojson indent must be an int or a string");
      }
      Value seps = b.get(2, Value::none());
      if (!seps.is_none()) {
        if (!seps.is_list() || seps.items().size() != 2)
          throw JinjaError("ValueError: separators must be a pair");
        o.has_separators = true;
        o.item_separator = seps.items()[0].to_str();
        o.key_separator = seps.items()[1].to_str();
      }
      o.sort_keys = b.get(3, Value(false)).truthy();
      return Value(json_dumps(v, o));
    };
    f["trim"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("trim", a, {"chars"});
      Value chars = b.get(0, Value::none());
      return as_markup_if(
          v.is_markup(),
          Value(py_strip(v.to_str(), chars.is_none() ? std::nullopt : std::optional<std::string>(chars.to_str()),
                         true, true)));
    };
    f["unique"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("unique", a, {"case_sensitive", "attribute"});
      bool cs = b.get(0, Value(false)).truthy();
      Value attr = b.get(1, Value::none());
      std::vector<Value> out, seen;
      for (const auto& item : iterate(v)) {
        Value key = sort_key(attr.is_none() ? item : attribute_of(item, attr.to_str()), cs);
        require_hashable(key);  // jinja2 keeps the keys seen in a set
        bool dup =
            std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); });
        if (!dup) {
          seen.push_back(key);
          out.push_back(item);
        }
      }
      return Value::iterator(std::move(out));
    };
    f["striptags"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("striptags", a, {});
      return Value(strip_tags(v.to_str()));
    };
    f["urlencode"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("urlencode", a, {});
      return urlencode_filter(v);
    };
    f["urlize"] = urlize_filter;
    f["wordwrap"] = wordwrap_filter;
    f["xmlattr"] = xmlattr_filter;
    f["wordcount"] = [](const Value& v, CallArgs&) {
      // jinja2 counts the matches of the regex \w+ (letters, digits and underscore runs).
      std::u32string u = utf8_decode(v.to_str());
      int64_t words = 0;
      bool in_word = false;
      for (char32_t c : u) {
        bool w = py_is_word_char(c);
        if (w && !in_word) ++words;
        in_word = w;
      }
      return Value(words);
    };
    return f;
  }();
  return table;
}

// jinja2's odd/even/divisibleby tests are `value % n == remainder`, whatever `%` means for the
// value: 0.1 is not odd, and a string is formatted.
bool remainder_is(const Value& v, const Value& d, int64_t remainder) {
  return values_equal(binary_op("%", v, d), Value(remainder));
}

bool same_as(const Value& a, const Value& b) {
  if (a.kind() != b.kind()) return false;
  if (a.identity() || b.identity()) return a.identity() == b.identity();
  return values_equal(a, b);
}

const std::unordered_map<std::string, Test>& tests() {
  static const std::unordered_map<std::string, Test> table = [] {
    std::unordered_map<std::string, Test> t;
    auto arg0 = [](CallArgs& a, const char* name) -> const Value& {
      ArgBinder b(name, a, {"other"});
      return b.required(0);
    };
    t["defined"] = [](const Value& v, CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](const Value& v, CallArgs&) { return v.is_undefined(); };
    t["none"] = [](const Value& v, CallArgs&) { return v.is_none(); };
    t["boolean"] = [](const Value& v, CallArgs&) { return v.is_bool(); };
    t["true"] = [](const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); };
    t["false"] = [](const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); };
    t["integer"] = [](const Value& v, CallArgs&) { return v.is_integral(); };
    t["float"] = [](const Value& v, CallArgs&) { return v.is_float(); };
    t["number"] = [](const Value& v, CallArgs&) { return v.is_number() || v.is_big_int(); };
    t["string"] = [](const Value& v, CallArgs&) { return v.is_string(); };
    t["mapping"] = [](const Value& v, CallArgs&) { return v.is_dict(); };
    t["iterable"] = [](const Value& v, CallArgs&) {
      return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
    };
    t["sequence"] = [](const Value& v, CallArgs&) {  // has len() and [] (an Undefined has both)
      return v.is_undefined() || v.is_string() || (v.is_list() && !v.is_iterator()) || v.is_dict();
    };
    // An Undefined has __call__ (which raises), so Python's callable() says yes.
    t["callable"] = [](const Value& v, CallArgs&) { return v.is_callable() || v.is_undefined(); };
    t["lower"] = [](const Value& v, CallArgs&) { return py_islower(v.to_str()); };  // str(value).islower()
    t["upper"] = [](const Value& v, CallArgs&) { return py_isupper(v.to_str()); };
    t["escaped"] = [](const Value& v, CallArgs&) { return v.is_markup(); };  // has __html__
    t["odd"] = [](const Value& v, CallArgs&) { return remainder_is(v, Value(int64_t{2}), 1); };
    t["even"] = [](const Value& v, CallArgs&) { return remainder_is(v, Value(int64_t{2}), 0); };
    t["divisibleby"] = [arg0](const Value& v, CallArgs& a) {
      return remainder_is(v, arg0(a, "divisibleby"), 0);
    };
    t["eq"] = [arg0](const Value& v, CallArgs& a) { return values_equal(v, arg0(a, "eq")); };
    t["equalto"] = t["=="] = t["eq"];
    t["ne"] = [arg0](const Value& v, CallArgs& a) { return !values_equal(v, arg0(a, "ne")); };
    t["!="] = t["ne"];
    t["lt"] = [arg0](const Value& v, CallArgs& a) { return compare_op("<", v, arg0(a, "lt")); };
    t["lessthan"] = t["<"] = t["lt"];
    t["le"] = [arg0](const Value& v, CallArgs& a) { return compare_op("<=", v, arg0(a, "le")); };
    t["<="] = t["le"];
    t["gt"] = [arg0](const Value& v, CallArgs& a) { return compare_op(">", v, arg0(a, "gt")); };
    t["greaterthan"] = t[">"] = t["gt"];
    t["ge"] = [arg0](const Value& v, CallArgs& a) { return compare_op(">=", v, arg0(a, "ge")); };
    t[">="] = t["ge"];
    t["in"] = [](const Value& v, CallArgs& a) {
      ArgBinder b("in", a, {"seq"});
      return contains(b.required(0), v);
    };
    t["sameas"] = [arg0](const Value& v, CallArgs& a) { return same_as(v, arg0(a, "sameas")); };
    t["filter"] = [](const Value& v, CallArgs&) { return v.is_string() && has_filter(v.str()); };
    t["test"] = [](const Value& v, CallArgs&) { return v.is_string() && has_test(v.str()); };
    return t;
  }();
  return table;
}

}  // namespace

bool has_filter(const std::string& name) { return filters().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& input, CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) throw JinjaError("TemplateAssertionError: No filter named '" + name + "'.");
  return it->second(input, args);
}

bool has_test(const std::string& name) { return tests().count(name) != 0; }

bool apply_test(const std::string& name, const Value& input, CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) throw JinjaError("TemplateAssertionError: No test named '" + name + "'.");
  return it->second(input, args);
}

}  // namespace tf::jinja
