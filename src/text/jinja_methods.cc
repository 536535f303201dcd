// Methods of str, list and dict that templates call (`content.split('</think>')`, `d.get('x')`).
// jinja2's ImmutableSandboxedEnvironment forbids methods that mutate a list or dict (append, pop,
// update, ...): they raise SecurityError when called, and so do they here.
#include <algorithm>

#include "text/jinja_ops.h"
#include "text/jinja_strings.h"

namespace tf::jinja {
namespace {

std::optional<std::string> opt_string(const Value& v, const char* fn) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) throw JinjaError(std::string("TypeError: ") + fn + " arg must be None or str");
  return v.str();
}

int64_t opt_int(const Value& v, int64_t fallback) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (!v.is_int() && !v.is_bool())
    throw JinjaError(std::string("TypeError: an integer is required, got ") + v.type_name());
  return v.as_int();
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
    } else if (c == '{') {
      size_t close = fmt.find('}', i);
      if (close == std::string::npos) throw JinjaError("ValueError: Single '{' encountered in format string");
      std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find(':') != std::string::npos || field.find('!') != std::string::npos)
        throw JinjaError("str.format: format specs and conversions are not supported");
      const Value* v = nullptr;
      if (field.empty()) {
        if (auto_index < args.positional.size()) v = &args.positional[auto_index++];
      } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
        size_t k = std::stoul(field);
        if (k < args.positional.size()) v = &args.positional[k];
      } else {
        for (const auto& [key, val] : args.keyword)
          if (key == field) v = &val;
      }
      if (!v) throw JinjaError("IndexError: str.format has no argument for field '" + field + "'");
      out += v->to_str();
      i = close;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Value string_method(const Value& self, const std::string& name) {
  const std::string s = self.str();
  auto fn = [&](auto body) { return Value::function("str." + name, body); };
  if (name == "startswith" || name == "endswith") {
    bool prefix = name == "startswith";
    return fn([s, prefix](CallArgs& a) {
      ArgBinder b(prefix ? "startswith" : "endswith", a, {"prefix", "start", "end"});
      if (b.has(1) || b.has(2)) {
        std::u32string u = utf8_decode(s);
        auto idx =
            py_slice_indices(static_cast<int64_t>(u.size()), opt_int(b.get(1), 0),
                             b.has(2) ? std::optional<int64_t>(opt_int(b.get(2), 0)) : std::nullopt, 1);
        std::u32string part;
        for (int64_t i : idx) part.push_back(u[static_cast<size_t>(i)]);
        return Value(affix_match(utf8_encode(part), b.required(0), prefix));
      }
      return Value(affix_match(s, b.required(0), prefix));
    });
  }
  if (name == "split" || name == "rsplit") {
    bool right = name == "rsplit";
    return fn([s, right](CallArgs& a) {
      ArgBinder b("split", a, {"sep", "maxsplit"});
      auto sep = opt_string(b.get(0), "split");
      int64_t maxsplit = opt_int(b.get(1), -1);
      return string_list(right ? py_rsplit(s, sep, maxsplit) : py_split(s, sep, maxsplit));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    bool left = name != "rstrip", right = name != "lstrip";
    return fn([s, left, right](CallArgs& a) {
      ArgBinder b("strip", a, {"chars"});
      return Value(py_strip(s, opt_string(b.get(0), "strip"), left, right));
    });
  }
  if (name == "replace") {
    return fn([s](CallArgs& a) {
      ArgBinder b("replace", a, {"old", "new", "count"});
      const Value& o = b.required(0);
      const Value& n = b.required(1);
      if (!o.is_string() || !n.is_string()) throw JinjaError("TypeError: replace() arguments must be str");
      return Value(py_replace(s, o.str(), n.str(), opt_int(b.get(2), -1)));
    });
  }
  if (name == "upper") return fn([s](CallArgs&) { return Value(py_upper(s)); });
  if (name == "lower") return fn([s](CallArgs&) { return Value(py_lower(s)); });
  if (name == "title") return fn([s](CallArgs&) { return Value(py_str_title(s)); });
  if (name == "capitalize") return fn([s](CallArgs&) { return Value(py_capitalize(s)); });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    bool reverse = name[0] == 'r';
    bool raise = name.find("index") != std::string::npos;
    return fn([s, reverse, raise](CallArgs& a) {
      ArgBinder b("find", a, {"sub"});
      const Value& sub = b.required(0);
      if (!sub.is_string()) throw JinjaError("TypeError: must be str");
      int64_t r = py_find(s, sub.str(), reverse);
      if (r < 0 && raise) throw JinjaError("ValueError: substring not found");
      return Value(r);
    });
  }
  if (name == "count") {
    return fn([s](CallArgs& a) {
      ArgBinder b("count", a, {"sub"});
      const Value& sub = b.required(0);
      if (!sub.is_string()) throw JinjaError("TypeError: must be str");
      return Value(py_count(s, sub.str()));
    });
  }
  if (name == "join") {
    return fn([s](CallArgs& a) {
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
  if (name == "format") return fn([s](CallArgs& a) { return Value(format_string(s, a)); });
  if (name == "splitlines") {
    return fn([s](CallArgs&) {
      std::vector<std::string> lines;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          lines.push_back(s.substr(start, i - start));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < s.size()) lines.push_back(s.substr(start));
      return string_list(lines);
    });
  }
  auto predicate = [&](auto pred) {
    return fn([s, pred](CallArgs&) {
      if (s.empty()) return Value(false);
      return Value(std::all_of(s.begin(), s.end(), pred));
    });
  };
  if (name == "isdigit" || name == "isnumeric" || name == "isdecimal")
    return predicate([](char c) { return c >= '0' && c <= '9'; });
  if (name == "isalpha")
    return predicate([](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; });
  if (name == "isalnum")
    return predicate([](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; });
  if (name == "isspace") return predicate([](char c) { return py_isspace(static_cast<unsigned char>(c)); });
  if (name == "islower" || name == "isupper") {
    bool lower = name == "islower";
    return fn([s, lower](CallArgs&) {
      bool cased = false;
      for (char c : s) {
        if (c >= 'a' && c <= 'z') {
          if (!lower) return Value(false);
          cased = true;
        } else if (c >= 'A' && c <= 'Z') {
          if (lower) return Value(false);
          cased = true;
        }
      }
      return Value(cased);
    });
  }
  return Value();
}

Value unsafe_method(const Value& self, const std::string& name) {
  std::string type = self.type_name();
  return Value::function(type + "." + name, [type, name](CallArgs&) -> Value {
    throw JinjaError("SecurityError: access to attribute '" + name + "' of '" + type + "' object is unsafe.");
  });
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

Value get_method(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kString:
      return string_method(obj, name);
    case Value::Kind::kDict:
      return dict_method(obj, name);
    case Value::Kind::kList:
      return obj.is_iterator() ? Value() : list_method(obj, name);
    default:
      return Value();
  }
}

}  // namespace tf::jinja
