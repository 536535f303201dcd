// Template parsing and rendering with transformers' globals (see jinja_template.h).
#include "text/jinja_template.h"

#include <new>
#include <stdexcept>
#include <type_traits>

#include "text/jinja_check.h"
#include "text/jinja_interpreter.h"
#include "text/jinja_lexer.h"
#include "text/jinja_ops.h"
#include "text/jinja_parser.h"

namespace tf::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

Status to_status(const TemplateOptions& options, const JinjaError& e) {
  std::string where = options.name;
  if (e.line >= 0) where += ":" + std::to_string(e.line) + ":" + std::to_string(e.column);
  return invalid_argument(where + ": " + e.what());
}

Value make_range() {
  return Value::function("range", [](CallArgs& a) {
    if (!a.keyword.empty()) throw JinjaError("TypeError: range() takes no keyword arguments");
    if (a.positional.empty() || a.positional.size() > 3)
      throw JinjaError("TypeError: range expected 1 to 3 arguments");
    for (const auto& v : a.positional)
      if (!v.is_int() && !v.is_bool())
        throw JinjaError(std::string("TypeError: '") + v.type_name() +
                         "' object cannot be interpreted as an integer");
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = a.positional[0].as_int();
    } else {
      start = a.positional[0].as_int();
      stop = a.positional[1].as_int();
      if (a.positional.size() == 3) step = a.positional[2].as_int();
    }
    if (step == 0) throw JinjaError("ValueError: range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (static_cast<int64_t>(out.size()) >= kMaxRange)
        throw JinjaError(
            "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      out.emplace_back(i);
    }
    return Value::list(std::move(out));
  });
}

// The bytes of the strings in a context: about what a chat template prints of it.
template <typename Json>
size_t text_bytes(const Json& j) {
  if (j.is_string()) return j.template get_ref<const std::string&>().size();
  size_t n = 0;
  if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it) n += it.key().size() + text_bytes(it.value());
  else if (j.is_array())
    for (const auto& e : j) n += text_bytes(e);
  return n;
}

// Namespaces are the only mutable values a template can make, hence the only way to build a
// reference cycle (`set ns.me = ns`); the registry lets render() break them when it is done.
using NamespaceRegistry = std::shared_ptr<std::vector<Value>>;

Value make_namespace(const NamespaceRegistry& registry) {
  std::weak_ptr<std::vector<Value>> weak = registry;
  return Value::function("namespace", [weak](CallArgs& a) {
    Value ns = Value::new_namespace();
    if (auto r = weak.lock()) r->push_back(ns);
    for (const auto& p : a.positional) {
      if (!p.is_dict()) throw JinjaError("TypeError: namespace() positional argument must be a mapping");
      for (const auto& [k, v] : p.dict_data().entries) ns.dict_data().set(k, v);
    }
    for (const auto& [k, v] : a.keyword) ns.dict_data().set(Value(k), v);
    return ns;
  });
}

// jinja2's cycler(*items): .next() returns the current item and advances, .reset(), .current.
// Its methods refer back to the object, a cycle the registry breaks after rendering.
Value make_cycler(const NamespaceRegistry& registry) {
  std::weak_ptr<std::vector<Value>> weak = registry;
  return Value::function("cycler", [weak](CallArgs& a) {
    if (!a.keyword.empty()) throw JinjaError("TypeError: cycler() takes no keyword arguments");
    if (a.positional.empty()) throw JinjaError("RuntimeError: at least one item has to be provided");
    Value obj = Value::new_namespace();
    if (auto r = weak.lock()) r->push_back(obj);
    auto items = std::make_shared<std::vector<Value>>(a.positional);
    auto pos = std::make_shared<size_t>(0);
    DictData& d = obj.dict_data();
    d.set(Value("current"), (*items)[0]);
    d.set(Value("next"), Value::function("cycler.next", [obj, items, pos](CallArgs&) {
            Value rv = (*items)[*pos];
            *pos = (*pos + 1) % items->size();
            obj.dict_data().set(Value("current"), (*items)[*pos]);
            return rv;
          }));
    d.set(Value("reset"), Value::function("cycler.reset", [obj, items, pos](CallArgs&) {
            *pos = 0;
            obj.dict_data().set(Value("current"), (*items)[0]);
            return Value::none();
          }));
    return obj;
  });
}

// jinja2's joiner(sep=", "): returns "" the first time it is called, then `sep`.
Value make_joiner() {
  return Value::function("joiner", [](CallArgs& a) {
    ArgBinder b("joiner", a, {"sep"});
    std::string sep = b.get(0, Value(", ")).to_str();
    auto used = std::make_shared<bool>(false);
    return Value::function("joiner", [sep, used](CallArgs&) {
      if (!*used) {
        *used = true;
        return Value("");
      }
      return Value(sep);
    });
  });
}

Value make_dict() {
  return Value::function("dict", [](CallArgs& a) {
    Value d = Value::dict();
    for (const auto& p : a.positional) {
      if (!p.is_dict()) throw JinjaError("TypeError: dict() positional argument must be a mapping");
      for (const auto& [k, v] : p.dict_data().entries) d.dict_data().set(k, v);
    }
    for (const auto& [k, v] : a.keyword) d.dict_data().set(Value(k), v);
    return d;
  });
}

Value make_strftime_now(std::optional<std::time_t> fixed) {
  return Value::function("strftime_now", [fixed](CallArgs& a) {
    ArgBinder b("strftime_now", a, {"format"});
    const Value& fmt = b.required(0);
    if (!fmt.is_string()) throw JinjaError("TypeError: strftime() argument 1 must be str");
    std::time_t t = fixed ? *fixed : std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    std::string out(256, '\0');
    size_t n = fmt.str().empty() ? 0 : std::strftime(out.data(), out.size(), fmt.str().c_str(), &tm);
    if (n == 0 && !fmt.str().empty())
      throw JinjaError("ValueError: strftime format produced no output or is too long");
    out.resize(n);
    return Value(out);
  });
}

}  // namespace

Expected<Template> Template::parse(std::string_view source, const TemplateOptions& options) {
  try {
    LexerOptions lex;
    lex.trim_blocks = options.trim_blocks;
    lex.lstrip_blocks = options.lstrip_blocks;
    lex.keep_trailing_newline = options.keep_trailing_newline;
    auto body = std::make_shared<Body>(jinja::parse(tokenize(source, lex)));
    check_template(*body);
    return Template(std::move(body), options);
  } catch (const JinjaError& e) {
    return to_status(options, e);
  }
}

Expected<std::string> Template::render(const nlohmann::ordered_json& context,
                                       const RenderOptions& options) const {
  return render_context(context, options);
}

Expected<std::string> Template::render(nlohmann::ordered_json&& context, const RenderOptions& options) const {
  return render_context(std::move(context), options);
}

template <typename Context>
Expected<std::string> Template::render_context(Context&& context, const RenderOptions& options) const {
  if (!context.is_object()) return invalid_argument(options_.name + ": render context must be a JSON object");
  auto registry = std::make_shared<std::vector<Value>>();
  struct BreakCycles {
    NamespaceRegistry registry;
    ~BreakCycles() {
      for (auto& ns : *registry) ns.dict_data().entries.clear();
    }
  } break_cycles{registry};
  // The output is made room for up front: the context's text (which a chat template prints
  // about once) and a little for the template's own.
  const size_t reserve = text_bytes(context) + 4096;
  try {
    Value globals = Value::dict();
    auto& g = globals.dict_data();
    g.set(Value("range"), make_range());
    g.set(Value("namespace"), make_namespace(registry));
    g.set(Value("dict"), make_dict());
    g.set(Value("cycler"), make_cycler(registry));
    g.set(Value("joiner"), make_joiner());
    g.set(Value("raise_exception"), Value::function("raise_exception", [](CallArgs& a) -> Value {
            ArgBinder b("raise_exception", a, {"message"});
            throw JinjaError("raise_exception: " + b.required(0).to_str());
          }));
    g.set(Value("strftime_now"), make_strftime_now(options.now));
    for (auto it = context.begin(); it != context.end(); ++it) {
      if constexpr (std::is_const_v<std::remove_reference_t<Context>>)
        g.set(Value(it.key()), Value::from_json(it.value()));
      else
        g.set(Value(it.key()), Value::from_json(std::move(it.value())));
    }
    Interpreter interpreter(std::move(globals), options.max_steps, options.max_output_bytes);
    return interpreter.render(*body_, reserve);
  } catch (const JinjaError& e) {
    return to_status(options_, e);
  } catch (const std::bad_alloc&) {  // a value too large for memory fails this render, not the process
    return invalid_argument(options_.name + ": MemoryError: out of memory while rendering");
  } catch (const std::length_error&) {
    return invalid_argument(options_.name + ": MemoryError: value too large");
  }
}

}  // namespace tf::jinja
