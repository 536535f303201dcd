// Methods of str, list and dict that templates call (`content.split('</think>')`, `d.get('x')`).
// jinja2's ImmutableSandboxedEnvironment forbids methods that mutate a list or dict (append, pop,
// update, ...): they raise SecurityError when called, and so do they here.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "text/jinja_ops.h"
#include "text/jinja_strings.h"

namespace tf::jinja {
namespace {

std::optional<std::string> opt_string(const Value& v, const char* fn) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) throw JinjaError(std::string("TypeError: ") + fn + " arg must be None or str");
  return v.str();
}

// An argument Python reads with __index__: an int or a bool, nothing else (not None).
int64_t require_int(const Value& v) {
  if (!v.is_int() && !v.is_bool())
    throw JinjaError(std::string("TypeError: '") + v.type_name() +
                     "' object cannot be interpreted as an integer");
  return v.as_int();
}

int64_t opt_int(const Value& v, int64_t fallback) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_int() && !v.is_bool())
    throw JinjaError(std::string("TypeError: an integer is required, got ") + v.type_name());
  return v.as_int();
}

// s[start:end] (code points, Python's clamping) for the start/end arguments of find, count,
// startswith...; the offset is where the window begins, or -1 when start lies past the end.
std::pair<std::string, int64_t> window(const std::string& s, const Value& start, const Value& end) {
  std::u32string u = utf8_decode(s);
  int64_t n = static_cast<int64_t>(u.size());
  int64_t b = opt_int(start, 0), e = opt_int(end, n);
  if (b < 0) b = std::max<int64_t>(0, b + n);
  if (e < 0) e = std::max<int64_t>(0, e + n);
  e = std::min(e, n);
  if (b > n) return {std::string(), -1};
  if (e < b) e = b;
  return {utf8_encode(std::u32string_view(u).substr(static_cast<size_t>(b), static_cast<size_t>(e - b))), b};
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.emplace_back(p);
  return Value::list(std::move(out));
}

// startswith/endswith accept a string or a tuple of strings.
bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string())
      throw JinjaError("TypeError: startswith/endswith first arg must be str or a tuple of str");
    const std::string& x = a.str();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    return std::any_of(affix.items().begin(), affix.items().end(), one);
  }
  return one(affix);
}

// Python's format(x, ".N") for a float x >= 0 (no presentation type): like "g" with N significant
// digits, but scientific from exponent N - 1 on, and fixed-point output keeps one digit after the point.
static std::string format_general_add_dot(double x, int precision) {
  if (std::isinf(x)) return "inf";
  if (std::isnan(x)) return "nan";
  int p = std::max(precision, 1);
  std::vector<char> buf(static_cast<size_t>(p) + 32);
  std::snprintf(buf.data(), buf.size(), "%.*e", p - 1, x);
  std::string sci = buf.data();
  int exp = std::atoi(sci.c_str() + sci.find('e') + 1);
  auto strip_zeros = [](std::string s) {
    if (s.find('.') == std::string::npos) return s;
    while (s.back() == '0') s.pop_back();
    if (s.back() == '.') s.pop_back();
    return s;
  };
  if (exp < -4 || exp >= p - 1) {
    size_t e = sci.find('e');
    return strip_zeros(sci.substr(0, e)) + sci.substr(e);
  }
  std::vector<char> fixed(static_cast<size_t>(p) + 400);
  std::snprintf(fixed.data(), fixed.size(), "%.*f", p - 1 - exp, x);
  std::string out = strip_zeros(fixed.data());
  if (out.find('.') == std::string::npos) out += ".0";
  return out;
}

// Python's "," / "_" format options: `sep` between groups of `size` digits, from the right.
static std::string group_digits(const std::string& digits, char sep, size_t size) {
  std::string out;
  for (size_t k = 0; k < digits.size(); ++k) {
    if (k && (digits.size() - k) % size == 0) out.push_back(sep);
    out.push_back(digits[k]);
  }
  return out;
}

// One replacement field of str.format: the value formatted by Python's format-spec mini-language
// ([[fill]align][sign][#][0][width][,][.precision][type]) for str, int and float values.
std::string format_field(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.to_str();
  size_t i = 0;
  std::string fill = " ";
  char align = 0;
  std::u32string u = utf8_decode(spec);
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  std::string rest;
  const bool fill_given = u.size() >= 2 && is_align(u[1]);
  if (fill_given) {
    fill = utf8_encode(u.substr(0, 1));
    align = static_cast<char>(u[1]);
    rest = utf8_encode(u.substr(2));
  } else if (!u.empty() && is_align(u[0])) {
    align = static_cast<char>(u[0]);
    rest = utf8_encode(u.substr(1));
  } else {
    rest = spec;
  }
  char sign = 0;  // none given: "-"
  if (i < rest.size() && (rest[i] == '+' || rest[i] == '-' || rest[i] == ' ')) sign = rest[i++];
  bool alt = false;
  if (i < rest.size() && rest[i] == '#') alt = true, ++i;
  // A "0" before the width pads with zeros unless a fill is given; numbers then default to "=".
  bool zero_flag = false;
  if (i < rest.size() && rest[i] == '0') {
    zero_flag = true;
    if (!fill_given) fill = "0";
    ++i;
  }
  size_t width = 0;
  while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) {
    width = width * 10 + static_cast<size_t>(rest[i++] - '0');
    check_built_size(static_cast<int64_t>(width), "formatted string");
  }
  char grouping = 0;
  if (i < rest.size() && (rest[i] == ',' || rest[i] == '_')) grouping = rest[i++];
  int precision = -1;
  if (i < rest.size() && rest[i] == '.') {
    ++i;
    precision = 0;
    while (i < rest.size() && std::isdigit(static_cast<unsigned char>(rest[i]))) {
      precision = precision * 10 + (rest[i++] - '0');
      check_built_size(precision, "formatted string");
    }
  }
  char type = i < rest.size() ? rest[i++] : 0;
  // Not supported: "#" for a float without a presentation type.
  if (i != rest.size() || (alt && v.is_number() && !type && v.is_float()))
    throw JinjaError("str.format: format spec '" + spec + "' is not supported");
  if (grouping && v.is_string())
    throw JinjaError(std::string("ValueError: Cannot specify '") + grouping + "' with 's'.");
  std::string body, prefix;
  size_t group_size = 0, int_digits = std::string::npos;  // how to group the digits of a number
  if (v.is_string()) {
    if (type && type != 's') throw JinjaError(std::string("ValueError: Unknown format code '") + type + "' for object of type 'str'");
    if (sign) throw JinjaError("ValueError: Sign not allowed in string format specifier");
    if (alt) throw JinjaError("ValueError: Alternate form (#) not allowed in string format specifier");
    body = v.str();
    if (precision >= 0) {
      std::u32string b = utf8_decode(body);
      if (b.size() > static_cast<size_t>(precision)) body = utf8_encode(std::u32string_view(b).substr(0, static_cast<size_t>(precision)));
    }
    if (align == '=') throw JinjaError("ValueError: '=' alignment not allowed in string format specifier");
    if (!align) align = '<';
  } else if (v.is_number() && !v.is_none()) {
    bool as_float = v.is_float() || (type && std::strchr("fFeEgG%", type));
    if (!as_float) {
      if (precision >= 0) throw JinjaError("ValueError: Precision not allowed in integer format specifier");
      int64_t n = v.as_int();
      uint64_t mag = n < 0 ? static_cast<uint64_t>(-(n + 1)) + 1 : static_cast<uint64_t>(n);
      char buf[80];
      if (!type || type == 'd' || type == 'n') std::snprintf(buf, sizeof(buf), "%llu", static_cast<unsigned long long>(mag));
      else if (type == 'x' || type == 'X' || type == 'o') std::snprintf(buf, sizeof(buf), type == 'x' ? "%llx" : type == 'X' ? "%llX" : "%llo", static_cast<unsigned long long>(mag));
      else if (type == 'b') {
        std::string bits;
        for (uint64_t m = mag; m; m >>= 1) bits.insert(bits.begin(), static_cast<char>('0' + (m & 1)));
        std::snprintf(buf, sizeof(buf), "%s", bits.empty() ? "0" : bits.c_str());
      } else if (type == 'c') {
        if (alt)
          throw JinjaError("ValueError: Alternate form (#) not allowed with integer format specifier 'c'");
        if (n < 0 || n > 0x10FFFF) throw JinjaError("OverflowError: %c arg not in range(0x110000)");
        std::string c;
        utf8_append(c, static_cast<char32_t>(n));
        std::snprintf(buf, sizeof(buf), "%s", c.c_str());
      } else throw JinjaError(std::string("ValueError: Unknown format code '") + type + "' for object of type 'int'");
      body = buf;
      bool radix = type == 'x' || type == 'X' || type == 'o' || type == 'b';
      if (grouping && (type == 'c' || type == 'n' || (radix && grouping == ',')))
        throw JinjaError(std::string("ValueError: Cannot specify '") + grouping + "' with '" + type + "'.");
      group_size = radix ? 4 : 3;
      int_digits = body.size();
      prefix = n < 0 ? "-" : (sign == '+' ? "+" : sign == ' ' ? " " : "");
      if (alt && radix) prefix += std::string("0") + type;
    } else {
      double d = v.as_double();
      // Python's float codes only (another letter would also reach snprintf as a bogus conversion).
      if (type && !std::strchr("eEfFgGn%", type))
        throw JinjaError(std::string("ValueError: Unknown format code '") + type +
                         "' for object of type 'float'");
      if (grouping && type == 'n')
        throw JinjaError(std::string("ValueError: Cannot specify '") + grouping + "' with 'n'.");
      if (type == 'n') type = 'g';  // locale-aware "g"; the C locale has no grouping
      std::string text;
      if (!type && precision >= 0) {
        text = format_general_add_dot(std::fabs(d), precision);
      } else if (!type) {
        text = format_python_float(std::fabs(d));
      } else {
        double x = std::fabs(d);
        char t = type == '%' ? 'f' : type;
        if (type == '%') x *= 100;
        std::string f = std::string(alt ? "%#." : "%.") + std::to_string(precision < 0 ? 6 : precision) + t;
        // Sized by a first call: 1e300 with a large precision runs to hundreds of digits.
        std::vector<char> buf(static_cast<size_t>(std::snprintf(nullptr, 0, f.c_str(), x)) + 1);
        std::snprintf(buf.data(), buf.size(), f.c_str(), x);
        text = buf.data();
        if (type == '%') text += "%";
      }
      if (std::isfinite(d)) {  // the digits before the point (or the exponent) are grouped
        group_size = 3;
        int_digits = std::min(text.find_first_of(".eE%"), text.size());
      }
      body = text;
      prefix = std::signbit(d) && !std::isnan(d) ? "-" : (sign == '+' ? "+" : sign == ' ' ? " " : "");
    }
    if (!align) align = zero_flag && !fill_given ? '=' : '>';
  } else {
    throw JinjaError(std::string("TypeError: unsupported format string passed to ") + v.type_name() + ".__format__");
  }
  if (grouping && group_size) {
    // Zero padding counts as digits and is grouped with them (a leading separator gets a zero).
    bool zero_padded = fill == "0" && align == '=';
    std::string digits = body.substr(0, int_digits), tail = body.substr(int_digits);
    size_t needed =
        zero_padded && width > prefix.size() + tail.size() ? width - prefix.size() - tail.size() : 0;
    std::string grouped = group_digits(digits, grouping, group_size);
    while (grouped.size() < needed) grouped = group_digits(digits = "0" + digits, grouping, group_size);
    body = grouped + tail;
  }
  size_t len = utf8_length(prefix) + utf8_length(body);
  if (len >= width) return prefix + body;
  size_t pad = width - len;
  auto rep = [&](size_t n) {
    std::string out;
    for (size_t k = 0; k < n; ++k) out += fill;
    return out;
  };
  if (align == '<') return prefix + body + rep(pad);
  if (align == '>') return rep(pad) + prefix + body;
  if (align == '^') return rep(pad / 2) + prefix + body + rep(pad - pad / 2);
  return prefix + rep(pad) + body;  // '=': padding after the sign
}

std::string format_string(const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out.push_back('}');
      ++i;
    } else if (c == '}') {
      throw JinjaError("ValueError: Single '}' encountered in format string");
    } else if (c == '{') {
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) throw JinjaError("ValueError: Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      std::string spec;
      char conversion = 0;
      if (size_t colon = field.find(':'); colon != std::string::npos) {
        spec = field.substr(colon + 1);
        field = field.substr(0, colon);
      }
      if (size_t bang = field.find('!'); bang != std::string::npos) {
        if (bang + 2 != field.size() || (field[bang + 1] != 'r' && field[bang + 1] != 's'))
          throw JinjaError("ValueError: str.format: unsupported conversion in '{" + field + "}'");
        conversion = field[bang + 1];
        field = field.substr(0, bang);
      }
      if (field.find_first_of(".[") != std::string::npos)
        throw JinjaError("str.format: attribute and index fields ('" + field + "') are not supported");
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index < args.positional.size()) v = &args.positional[auto_index++];
        else throw JinjaError("IndexError: Replacement index " + std::to_string(auto_index) + " out of range for positional args tuple");
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        // More digits than any index (stoul would throw past 2^64).
        size_t k = field.size() > 9 ? SIZE_MAX : std::stoul(field);
        if (k < args.positional.size()) v = &args.positional[k];
        else throw JinjaError("IndexError: Replacement index " + field + " out of range for positional args tuple");
      } else {
        for (const auto& [key, val] : args.keyword)
          if (key == field) v = &val;
        if (!v) throw JinjaError("KeyError: '" + field + "'");
      }
      Value shown = conversion == 'r' ? Value(v->repr()) : conversion == 's' ? Value(v->to_str()) : *v;
      out += format_field(shown, spec);
      i = close;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// Each method's closure holds `self` (sharing its bytes) rather than a copy of the string: every
// attribute read on a string looks its name up here first.
Value string_method(const Value& self, const std::string& name) {
  auto fn = [&](auto body) { return Value::function("str." + name, body); };
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return fn([self, prefix](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b(prefix ? "startswith" : "endswith", a, {"prefix", "start", "end"});
      affix_match("", b.required(0), prefix);  // checks the type of the affix before the bounds
      if (b.has(1) || b.has(2)) {
        auto [part, offset] = window(s, b.get(1), b.get(2));
        if (offset < 0) return Value(false);
        return Value(affix_match(part, b.required(0), prefix));
      }
      return Value(affix_match(s, b.required(0), prefix));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return fn([self, right](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b("split", a, {"sep", "maxsplit"});
      auto sep = opt_string(b.get(0), "split");
      int64_t maxsplit = require_int(b.get(1, Value(int64_t{-1})));
      return string_list(right ? py_rsplit(s, sep, maxsplit) : py_split(s, sep, maxsplit));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip", right = name != "lstrip";
    return fn([self, left, right](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b("strip", a, {"chars"});
      return Value(py_strip(s, opt_string(b.get(0), "strip"), left, right));
    });
  }
  if (name == "replace") {
    return fn([self](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b("replace", a, {"old", "new", "count"});
      const Value& o = b.required(0);
      const Value& n = b.required(1);
      if (!o.is_string() || !n.is_string()) throw JinjaError("TypeError: replace() arguments must be str");
      return Value(py_replace(s, o.str(), n.str(), opt_int(b.get(2), -1)));
    });
  }
  if (name == "upper") return fn([self](CallArgs&) { return Value(py_upper(self.str())); });
  if (name == "lower") return fn([self](CallArgs&) { return Value(py_lower(self.str())); });
  if (name == "title") return fn([self](CallArgs&) { return Value(py_str_title(self.str())); });
  if (name == "capitalize") return fn([self](CallArgs&) { return Value(py_capitalize(self.str())); });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    bool reverse = name[0] == 'r';
    bool raise = name.find("index") != std::string::npos;
    return fn([self, reverse, raise](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b("find", a, {"sub", "start", "end"});
      const Value& sub = b.required(0);
      if (!sub.is_string()) throw JinjaError("TypeError: must be str, not " + std::string(sub.type_name()));
      auto [part, offset] = window(s, b.get(1), b.get(2));
      int64_t r = offset < 0 ? -1 : py_find(part, sub.str(), reverse);
      if (r >= 0) r += offset;
      if (r < 0 && raise) throw JinjaError("ValueError: substring not found");
      return Value(r);
    });
  }
  if (name == "count") {
    return fn([self](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b("count", a, {"sub", "start", "end"});
      const Value& sub = b.required(0);
      if (!sub.is_string()) throw JinjaError("TypeError: must be str, not " + std::string(sub.type_name()));
      auto [part, offset] = window(s, b.get(1), b.get(2));
      return Value(offset < 0 ? int64_t{0} : py_count(part, sub.str()));
    });
  }
  if (name == "partition" || name == "rpartition") {
    bool right = name == "rpartition";
    return fn([self, right](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b("partition", a, {"sep"});
      const Value& sep = b.required(0);
      if (!sep.is_string()) throw JinjaError("TypeError: must be str, not " + std::string(sep.type_name()));
      if (sep.str().empty()) throw JinjaError("ValueError: empty separator");
      size_t p = right ? s.rfind(sep.str()) : s.find(sep.str());
      if (p == std::string::npos)
        return right ? Value::tuple({Value(""), Value(""), Value(s)}) : Value::tuple({Value(s), Value(""), Value("")});
      return Value::tuple({Value(s.substr(0, p)), sep, Value(s.substr(p + sep.str().size()))});
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    bool prefix = name == "removeprefix";
    return fn([self, prefix](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b(prefix ? "removeprefix" : "removesuffix", a, {"affix"});
      const Value& x = b.required(0);
      if (!x.is_string()) throw JinjaError("TypeError: must be str, not " + std::string(x.type_name()));
      const std::string& t = x.str();
      if (t.size() <= s.size() && (prefix ? s.compare(0, t.size(), t) == 0
                                          : s.compare(s.size() - t.size(), t.size(), t) == 0))
        return Value(prefix ? s.substr(t.size()) : s.substr(0, s.size() - t.size()));
      return Value(s);
    });
  }
  if (name == "ljust" || name == "rjust" || name == "center" || name == "zfill") {
    return fn([self, name](CallArgs& a) {
      const std::string& s = self.str();
      bool zfill = name == "zfill";
      ArgBinder b(name.c_str(), a,
                  zfill ? std::vector<const char*>{"width"} : std::vector<const char*>{"width", "fillchar"});
      const Value& w = b.required(0);
      if (!w.is_int() && !w.is_bool())
        throw JinjaError("TypeError: '" + std::string(w.type_name()) + "' object cannot be interpreted as an integer");
      Value fill_char = zfill ? Value("0") : b.get(1, Value(" "));
      if (!fill_char.is_string())
        throw JinjaError(std::string("TypeError: The fill character must be a unicode character, not ") +
                         fill_char.type_name());
      std::string fill = fill_char.str();
      if (utf8_length(fill) != 1)
        throw JinjaError("TypeError: The fill character must be exactly one character long");
      int64_t len = static_cast<int64_t>(utf8_length(s));
      int64_t pad = w.as_int() - len;
      if (pad <= 0) return Value(s);
      if (pad > (int64_t{1} << 24)) throw JinjaError("MemoryError: padded string is too large");
      auto rep = [&](int64_t n) {
        std::string out;
        for (int64_t i = 0; i < n; ++i) out += fill;
        return out;
      };
      if (name == "ljust") return Value(s + rep(pad));
      if (name == "rjust") return Value(rep(pad) + s);
      if (zfill) {
        if (!s.empty() && (s[0] == '+' || s[0] == '-')) return Value(s.substr(0, 1) + rep(pad) + s.substr(1));
        return Value(rep(pad) + s);
      }
      int64_t left = pad / 2 + (pad & w.as_int() & 1);  // CPython's str.center
      return Value(rep(left) + s + rep(pad - left));
    });
  }
  if (name == "swapcase") return fn([self](CallArgs&) { return Value(py_swapcase(self.str())); });
  if (name == "casefold") return fn([self](CallArgs&) { return Value(py_casefold(self.str())); });
  if (name == "expandtabs") {
    return fn([self](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b("expandtabs", a, {"tabsize"});
      int64_t tab = require_int(b.get(0, Value(int64_t{8})));
      check_built_size(tab, "expanded tab");
      std::string out;
      int64_t col = 0;
      for (char32_t c : utf8_decode(s)) {
        if (c == '\t') {
          if (tab > 0) {
            int64_t n = tab - col % tab;
            out.append(static_cast<size_t>(n), ' ');
            col += n;
          }
        } else {
          utf8_append(out, c);
          col = (c == '\n' || c == '\r') ? 0 : col + 1;
        }
      }
      return Value(out);
    });
  }
  if (name == "join") {
    return fn([self](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b("join", a, {"iterable"});
      std::string out;
      bool first = true;
      for (const auto& v : iterate(b.required(0))) {
        if (!v.is_string())
          throw JinjaError(std::string("TypeError: sequence item: expected str instance, ") + v.type_name() +
                           " found");
        if (!first) out += s;
        first = false;
        out += v.str();
      }
      return Value(std::move(out));
    });
  }
  if (name == "format") return fn([self](CallArgs& a) { return Value(format_string(self.str(), a)); });
  if (name == "splitlines") {
    return fn([self](CallArgs& a) {
      const std::string& s = self.str();
      ArgBinder b("splitlines", a, {"keepends"});
      bool keep = require_int(b.get(0, Value(false))) != 0;
      std::vector<std::string> lines;
      std::u32string u = utf8_decode(s);
      size_t start = 0;
      for (size_t i = 0; i < u.size(); ++i) {
        char32_t c = u[i];
        bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                   c == 0x85 || c == 0x2028 || c == 0x2029;
        if (!brk) continue;
        size_t end = i;
        if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
        lines.push_back(utf8_encode(std::u32string_view(u).substr(start, (keep ? i + 1 : end) - start)));
        start = i + 1;
      }
      if (start < u.size()) lines.push_back(utf8_encode(std::u32string_view(u).substr(start)));
      return string_list(lines);
    });
  }
  auto predicate = [&](auto pred) {
    return fn([self, pred](CallArgs&) {
      const std::string& s = self.str();
      std::u32string u = utf8_decode(s);
      if (u.empty()) return Value(false);
      return Value(std::all_of(u.begin(), u.end(), pred));
    });
  };
  if (name == "isdigit" || name == "isdecimal") return predicate([](char32_t c) { return py_isdecimal(c); });
  if (name == "isnumeric") return predicate([](char32_t c) { return py_isnumeric(c); });
  if (name == "isalpha") return predicate([](char32_t c) { return py_isalpha(c); });
  if (name == "isalnum") return predicate([](char32_t c) { return py_isalpha(c) || py_isnumeric(c); });
  if (name == "isspace") return predicate([](char32_t c) { return py_isspace(c); });
  if (name == "isascii") return fn([self](CallArgs&) { return Value(is_ascii(self.str())); });
  if (name == "isprintable")
    return fn([self](CallArgs&) {
      const std::string& s = self.str();
      std::u32string u = utf8_decode(s);
      return Value(std::all_of(u.begin(), u.end(), [](char32_t c) { return py_isprintable(c); }));
    });
  if (name == "istitle") return fn([self](CallArgs&) { return Value(py_istitle(self.str())); });
  if (name == "islower") return fn([self](CallArgs&) { return Value(py_islower(self.str())); });
  if (name == "isupper") return fn([self](CallArgs&) { return Value(py_isupper(self.str())); });
  return Value();
}

// ImmutableSandboxedEnvironment hands out an Undefined for a mutating method (`is defined` is false,
// it prints as ""); only calling it raises SecurityError.
Value unsafe_method(const Value& self, const std::string& name) {
  return Value::undefined("SecurityError: access to attribute '" + name + "' of '" +
                          std::string(self.type_name()) + "' object is unsafe.");
}

Value dict_method(const Value& self, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    return Value::function("dict." + name, [self, name](CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : self.dict_data().entries) {
        if (name == "items")
          out.push_back(Value::tuple({k, v}));
        else
          out.push_back(name == "keys" ? k : v);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "get") {
    return Value::function("dict.get", [self](CallArgs& a) {
      ArgBinder b("get", a, {"key", "default"});
      const Value* v = self.dict_data().find(b.required(0));
      return v ? *v : b.get(1, Value::none());
    });
  }
  if (name == "copy") {
    return Value::function("dict.copy", [self](CallArgs&) {
      Value d = Value::dict();
      d.dict_data().entries = self.dict_data().entries;
      return d;
    });
  }
  if (name == "pop" || name == "popitem" || name == "update" || name == "setdefault" || name == "clear")
    return unsafe_method(self, name);
  return Value();
}

Value list_method(const Value& self, const std::string& name) {
  if (name == "index") {
    return Value::function("list.index", [self](CallArgs& a) {
      ArgBinder b("index", a, {"value"});
      const auto& items = self.items();
      for (size_t i = 0; i < items.size(); ++i)
        if (values_equal(items[i], b.required(0))) return Value(static_cast<int64_t>(i));
      throw JinjaError("ValueError: value is not in list");
    });
  }
  if (name == "count") {
    return Value::function("list.count", [self](CallArgs& a) {
      ArgBinder b("count", a, {"value"});
      int64_t n = 0;
      for (const auto& v : self.items()) n += values_equal(v, b.required(0)) ? 1 : 0;
      return Value(n);
    });
  }
  if (name == "copy" && !self.is_tuple()) {
    return Value::function("list.copy", [self](CallArgs&) { return Value::list(self.items()); });
  }
  if (!self.is_tuple() && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                           name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
    return unsafe_method(self, name);
  return Value();
}

}  // namespace

// Markup's overrides of str methods: the result is Markup again, and the arguments that end up in
// the text (replace's `new`, the padding fill, join's items, format's arguments) are escaped first.
Value markup_method(const Value& self, const std::string& name) {
  static const char* const kKeep[] = {"capitalize", "title",      "lower",      "upper",        "replace",
                                      "ljust",      "rjust",      "lstrip",     "rstrip",       "center",
                                      "strip",      "expandtabs", "swapcase",   "zfill",        "casefold",
                                      "removeprefix", "removesuffix", "partition", "rpartition", "split",
                                      "rsplit",     "splitlines", "join",       "format"};
  Value inner = string_method(self, name);
  if (inner.is_undefined() || !inner.is_callable()) return inner;
  bool keep = std::any_of(std::begin(kKeep), std::end(kKeep), [&](const char* k) { return name == k; });
  if (!keep) return inner;
  return Value::function("Markup." + name, [inner, name](CallArgs& a) {
    CallArgs args = a;
    auto esc = [](Value& v) {
      if (v.is_string()) v = markup_escape(v);
    };
    if (name == "replace" && args.positional.size() >= 2) esc(args.positional[1]);
    if ((name == "ljust" || name == "rjust" || name == "center") && args.positional.size() >= 2)
      esc(args.positional[1]);
    if (name == "format") {
      for (auto& v : args.positional) v = v.is_string() || v.is_number() || v.is_none() ? markup_escape(v) : v;
      for (auto& [k, v] : args.keyword) v = v.is_string() || v.is_number() || v.is_none() ? markup_escape(v) : v;
    }
    if (name == "join" && args.positional.size() == 1) {
      std::vector<Value> items;
      for (const auto& v : iterate(args.positional[0])) items.push_back(markup_escape(v));
      args.positional[0] = Value::list(std::move(items));
    }
    return as_markup_if(true, inner.callable().fn(args));
  });
}

namespace {

// What Python checks of a built-in method's arguments before our implementation sees them: most
// str, dict and list methods are positional-only, and some take no argument at all.
enum class ArgumentRule { kAny, kPositionalOnly, kNone };

ArgumentRule argument_rule(const Value& obj, const std::string& name) {
  static const std::set<std::string> kStringNone = {
      "upper",   "lower",       "title",     "capitalize", "swapcase", "casefold",
      "isdigit", "isdecimal",   "isnumeric", "isalpha",    "isalnum",  "isspace",
      "isascii", "isprintable", "istitle",   "islower",    "isupper"};
  static const std::set<std::string> kStringKeywords = {"split", "rsplit", "splitlines", "expandtabs",
                                                        "format"};
  static const std::set<std::string> kDictNone = {"items", "keys", "values", "copy", "popitem", "clear"};
  static const std::set<std::string> kListNone = {"copy", "clear", "reverse"};
  if (obj.is_string()) {
    if (kStringNone.count(name)) return ArgumentRule::kNone;
    return kStringKeywords.count(name) ? ArgumentRule::kAny : ArgumentRule::kPositionalOnly;
  }
  if (obj.is_dict()) return kDictNone.count(name) ? ArgumentRule::kNone : ArgumentRule::kPositionalOnly;
  if (obj.is_list() && !obj.is_tuple() && kListNone.count(name)) return ArgumentRule::kNone;
  return name == "sort" ? ArgumentRule::kAny : ArgumentRule::kPositionalOnly;
}

Value method_of(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kString:
      return obj.is_markup() ? markup_method(obj, name) : string_method(obj, name);
    case Value::Kind::kDict:
      return dict_method(obj, name);
    case Value::Kind::kList:
      return obj.is_iterator() ? Value() : list_method(obj, name);
    default:
      return Value();
  }
}

}  // namespace

Value get_method(const Value& obj, const std::string& name) {
  Value method = method_of(obj, name);
  ArgumentRule rule = argument_rule(obj, name);
  if (!method.is_callable() || rule == ArgumentRule::kAny) return method;
  std::string qualified = std::string(obj.is_string() ? "str" : obj.type_name()) + "." + name + "()";
  return Value::function(method.callable().name, [method, qualified, rule](CallArgs& a) {
    if (!a.keyword.empty()) throw JinjaError("TypeError: " + qualified + " takes no keyword arguments");
    if (rule == ArgumentRule::kNone && !a.positional.empty())
      throw JinjaError("TypeError: " + qualified + " takes no arguments (" +
                       std::to_string(a.positional.size()) + " given)");
    return method.callable().fn(a);
  });
}

}  // namespace tf::jinja
