// See json_schema_gbnf.h.
#include "sampling/grammar/json_schema_gbnf.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>
#include <vector>

#include "sampling/grammar/gbnf_writer.h"
#include "sampling/grammar/grammar.h"
#include "sampling/grammar/grammar_budget.h"
#include "sampling/grammar/json_schema_numbers.h"
#include "sampling/grammar/regex_gbnf.h"
#include "text/json_parse.h"

namespace tf::grammar {
namespace {

using Json = nlohmann::ordered_json;

// --- Fixed rules: the JSON lexical pieces every grammar shares -------------------------

struct FixedRule {
  const char* name;
  const char* body;
  std::vector<const char*> uses;  // fixed rules its body references
};

// In emission order.
const std::vector<FixedRule>& fixed_rules() {
  static const std::vector<FixedRule> rules = {
      {"value",
       "object | array | string | number | boolean | null",
       {"object", "array", "string", "number", "boolean", "null"}},
      {"object", R"("{" ws ( member ( ws "," ws member )* ws )? "}")", {"ws", "member"}},
      {"member", R"(string ws ":" ws value)", {"string", "ws", "value"}},
      {"array", R"("[" ws ( value ( ws "," ws value )* ws )? "]")", {"ws", "value"}},
      {"string", R"("\"" char* "\"")", {"char"}},
      // Any code point but '"', '\' and controls, or an escape sequence.
      {"char", R"([^\"\\\x00-\x1F] | "\\" ( [\"\\/bfnrt] | "u" [0-9a-fA-F]{4} ))", {}},
      {"number", R"(integer ( "." [0-9]+ )? ( [eE] [+\-]? [0-9]+ )?)", {"integer"}},
      {"integer", R"("-"? ( "0" | [1-9] [0-9]* ))", {}},
      {"boolean", R"("true" | "false")", {}},
      {"null", R"("null")", {}},
      // Bounded, so a model cannot emit whitespace forever.
      {"ws", R"(( " " | "\n" [ \t]{0,20} )?)", {}},
      {"format-date",
       R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))",
       {}},
      {"format-time",
       R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" ( [0-5] [0-9] | "60" ) ( "." [0-9]{1,9} )? )"
       R"(( [zZ] | [+\-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))",
       {}},
      {"format-date-time", R"(format-date [tT] format-time)", {"format-date", "format-time"}},
      {"format-uuid",
       R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})",
       {}},
      {"format-email", R"([A-Za-z0-9._%+\-]+ "@" [A-Za-z0-9\-]+ ( "." [A-Za-z0-9\-]+ )+)", {}},
  };
  return rules;
}

const FixedRule* find_fixed(std::string_view name) {
  for (const FixedRule& rule : fixed_rules()) {
    if (name == rule.name) return &rule;
  }
  return nullptr;
}

// Adds `name` and every fixed rule it reaches to `used`.
void mark_fixed(std::string_view name, std::set<std::string>& used) {
  const FixedRule* rule = find_fixed(name);
  if (rule == nullptr || !used.insert(rule->name).second) return;
  for (const char* dep : rule->uses) mark_fixed(dep, used);
}

std::string fixed_rules_text(const std::set<std::string>& used) {
  std::string out;
  for (const FixedRule& rule : fixed_rules()) {
    if (used.count(rule.name)) out += std::string(rule.name) + " ::= " + rule.body + "\n";
  }
  return out;
}

constexpr const char* kQuote = R"("\"")";
constexpr const char* kComma = R"(ws "," ws)";

// --- Keywords ---------------------------------------------------------------------------

enum class Keyword { kAnnotation, kValue, kCombinator, kObject, kArray, kString, kNumber, kUnknown };

Keyword keyword_kind(std::string_view key) {
  static const std::vector<std::pair<Keyword, std::vector<std::string_view>>> kGroups = {
      {Keyword::kAnnotation,
       {"$schema", "$id", "title", "description", "default", "examples", "$comment", "deprecated", "readOnly",
        "writeOnly", "$defs", "definitions"}},
      {Keyword::kValue, {"type", "enum", "const"}},
      {Keyword::kCombinator, {"$ref", "anyOf", "oneOf", "allOf"}},
      {Keyword::kObject,
       {"properties", "required", "additionalProperties", "minProperties", "maxProperties"}},
      {Keyword::kArray, {"items", "prefixItems", "minItems", "maxItems", "uniqueItems"}},
      {Keyword::kString, {"minLength", "maxLength", "format", "pattern"}},
      {Keyword::kNumber, {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}},
  };
  for (const auto& [kind, keys] : kGroups) {
    if (std::find(keys.begin(), keys.end(), key) != keys.end()) return kind;
  }
  return Keyword::kUnknown;
}

// --- Small helpers ----------------------------------------------------------------------

Status schema_error(const std::string& path, const std::string& what) {
  return invalid_argument("json_schema: " + (path.empty() ? std::string("/") : path) + ": " + what);
}

// A JSON Pointer reference token for `key` (RFC 6901: '~' -> "~0", '/' -> "~1").
std::string pointer_token(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string unescape_pointer_token(std::string_view token) {
  std::string out;
  for (size_t i = 0; i < token.size(); ++i) {
    if (token[i] == '~' && i + 1 < token.size() && (token[i + 1] == '0' || token[i + 1] == '1')) {
      out += token[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      out += token[i];
    }
  }
  return out;
}

// A readable rule-name fragment: letters and digits kept, anything else becomes '-'.
std::string name_part(std::string_view text) {
  std::string out;
  for (char c : text) {
    bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    out += keep ? c : '-';
  }
  return out.empty() ? "empty" : out;
}

std::string join(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

// `atom` (a rule name or a parenthesized group) repeated lo..hi times (hi absent: unbounded).
// Empty when it may appear zero times only.
std::string repeat(const std::string& atom, uint64_t lo, std::optional<uint64_t> hi) {
  if (hi && *hi == 0) return "";
  if (!hi) {
    if (lo == 0) return atom + "*";
    if (lo == 1) return atom + "+";
    return atom + "{" + std::to_string(lo) + ",}";
  }
  if (lo == 0 && *hi == 1) return atom + "?";
  if (lo == *hi) return lo == 1 ? atom : atom + "{" + std::to_string(lo) + "}";
  return atom + "{" + std::to_string(lo) + "," + std::to_string(*hi) + "}";
}

// The grammar core's (and regex_gbnf's) largest repetition count. A larger maximum
// (maxLength, maxItems) is not enforced; a larger minimum is refused.
constexpr uint64_t kMaxRepeat = 10000;
// Nested definitions (schema nodes inside nodes, or $ref chains); JSON bodies nest at most
// 256 levels, so only $ref chains reach it.
constexpr int kMaxDefinitionDepth = 256;
// Rule names are derived from where a node sits (root-a-b-...): cut to this many bytes, so
// deep schemas with long property names do not write names as long as their whole path.
constexpr size_t kMaxRuleBase = 64;

Status fit_bounds(uint64_t min, std::optional<uint64_t>& max, const char* what, const std::string& path) {
  if (max && min > *max) return schema_error(path, std::string("min") + what + " is greater than max" + what);
  if (min > kMaxRepeat) {
    return schema_error(
        path, std::string("min") + what + " above " + std::to_string(kMaxRepeat) + " is not supported");
  }
  if (max && *max > kMaxRepeat) max.reset();
  return Status::ok();
}

// Joins two sequences with a space, either may be empty.
std::string concat(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + " " + b;
}

const Json* member_of(const Json& node, const char* key) {
  auto it = node.find(key);
  return it == node.end() ? nullptr : &*it;
}

// A non-negative integer keyword such as minItems, or nothing when absent.
Expected<std::optional<uint64_t>> count_keyword(const Json& node, const char* key, const std::string& path) {
  const Json* value = member_of(node, key);
  if (value == nullptr) return std::optional<uint64_t>();
  if (value->is_number_unsigned()) return std::optional<uint64_t>(value->get<uint64_t>());
  if (value->is_number_integer() && value->get<int64_t>() >= 0) {
    return std::optional<uint64_t>(static_cast<uint64_t>(value->get<int64_t>()));
  }
  return schema_error(path,
                      std::string("'") + key + "' must be a non-negative integer, got " + value->dump());
}

// One object member in the grammar: its key literal, then its value rule.
std::string member_expr(const std::string& key_literal, const std::string& value_rule) {
  return key_literal + R"( ws ":" ws )" + value_rule;
}

// --- Patterns ---------------------------------------------------------------------------

// JSON Schema's `pattern` searches: a side without its anchor (^ or $) may have any
// text there. regex_gbnf.h matches the whole string, so the free sides are spelled out.
std::string search_as_full_match(const std::string& pattern) {
  if (pattern.empty()) return "[\\s\\S]*";
  bool starts = pattern.front() == '^';
  size_t backslashes = 0;  // before the last character: an odd count escapes a final '$'
  for (size_t i = pattern.size() - 1; i > 0 && pattern[i - 1] == '\\'; --i) ++backslashes;
  bool ends = pattern.size() > (starts ? 1 : 0) && pattern.back() == '$' && backslashes % 2 == 0;
  if (starts && ends) return pattern;
  std::string body = pattern.substr(starts ? 1 : 0, pattern.size() - (starts ? 1 : 0) - (ends ? 1 : 0));
  return (starts ? "^" : "[\\s\\S]*") + ("(?:" + body + ")") + (ends ? "$" : "[\\s\\S]*");
}

// A class as JSON string content: the characters JSON writes as they are in one class,
// '"', '\' and control characters as escape sequences (all controls at once as
// "\u00XX" or their short forms).
std::string json_escaped_class(const CharClass& cls) {
  std::vector<CharRange> plain;
  std::vector<uint32_t> escaped;  // code points JSON must escape
  for (const CharRange& r : class_ranges(cls)) {
    uint32_t lo = r.lo;
    for (uint32_t cp = r.lo; cp <= r.hi && cp <= 0x5C; ++cp) {  // the escaped ones are all <= '\'
      if (cp >= 0x20 && cp != '"' && cp != '\\') continue;
      if (cp > lo) plain.push_back({lo, cp - 1});
      escaped.push_back(cp);
      lo = cp + 1;
    }
    if (lo <= r.hi) plain.push_back({lo, r.hi});
  }
  std::vector<std::string> alternatives;
  if (!plain.empty()) alternatives.push_back(gbnf_class(normalize_ranges(plain)));
  size_t controls = std::count_if(escaped.begin(), escaped.end(), [](uint32_t cp) { return cp < 0x20; });
  if (controls == 0x20) {
    std::string after_backslash = "bfnrt";
    for (uint32_t cp : escaped) {
      if (cp >= 0x20) after_backslash += cp == '"' ? "\\\"" : "\\\\";
    }
    alternatives.push_back(R"("\\" ( [)" + after_backslash + R"(] | "u00" [01] [0-9a-fA-F] ))");
  } else {
    for (uint32_t cp : escaped) {
      std::string json = Json(std::string(1, static_cast<char>(cp))).dump();  // "\n", "\u0001", ...
      alternatives.push_back(gbnf_literal(json.substr(1, json.size() - 2)));
    }
  }
  if (alternatives.empty()) return R"([^\x00-\U0010FFFF])";  // matches nothing, as the class did
  return alternatives.size() == 1 ? alternatives[0] : "( " + join(alternatives, " | ") + " )";
}

// --- The converter ----------------------------------------------------------------------

class Converter {
 public:
  explicit Converter(const Json& root) : root_(root) {}

  Expected<std::string> convert() {
    std::string root = reserve("root");
    ref_rules_["#"] = root;
    open_refs_.push_back("#");
    TF_RETURN_IF_ERROR(define(root, root_, ""));
    std::string out;
    for (const Rule& rule : rules_) out += rule.name + " ::= " + rule.body + "\n";
    return out + fixed_rules_text(fixed_used_);
  }

 private:
  struct Rule {
    std::string name, body;
  };
  struct Member {  // one element of an object's member sequence
    std::string expr;
    bool required = false;
  };

  // A fresh rule name derived from `base`; its body is filled in by define(). Each base
  // remembers the next suffix to try: many nodes with the same base (100,000 properties
  // whose names differ only in punctuation) would otherwise try every taken suffix again.
  std::string reserve(const std::string& full_base) {
    const std::string base = full_base.substr(0, kMaxRuleBase);
    std::string name = base;
    if (rule_index_.count(name) || find_fixed(name)) {
      int& next = next_suffix_.try_emplace(base, 2).first->second;
      do name = base + "-" + std::to_string(next++);
      while (rule_index_.count(name) || find_fixed(name));
    }
    rule_index_[name] = rules_.size();
    rules_.push_back({name, ""});
    charge_text(2 * name.size());  // the rule list and the index
    return name;
  }

  // GBNF text written so far (grammar_budget.h): the converter stops once it is over the
  // budget (a schema's patterns each compile within it, but there may be thousands).
  void charge_text(size_t bytes) { (void)text_budget_.charge(bytes); }
  Status check_text_budget() const {
    if (text_budget_.used() <= text_budget_.limit()) return Status::ok();
    return grammar_too_large("the schema's grammar text is larger than the limit");
  }
  void set_body(const std::string& name, std::string body) {
    charge_text(body.size());
    rules_[rule_index_.at(name)].body = std::move(body);
  }

  std::string use(const char* fixed) {
    mark_fixed(fixed, fixed_used_);
    return fixed;
  }

  Status define(const std::string& name, const Json& node, const std::string& path) {
    // Definitions nest through $ref chains as well as through the JSON: bound the
    // recursion (a chain of 20000 $defs overflowed the stack).
    if (open_definitions_ >= kMaxDefinitionDepth)
      return schema_error(path, "definitions nest deeper than " + std::to_string(kMaxDefinitionDepth) +
                                    " levels (through $ref or nesting)");
    TF_RETURN_IF_ERROR(check_text_budget());
    ++open_definitions_;
    Expected<std::string> body = node_body(node, name, path);
    --open_definitions_;
    if (!body) return body.status();
    set_body(name, std::move(*body));
    return check_text_budget();
  }

  // The rule for a schema node (a new rule named after `base`).
  Expected<std::string> node_rule(const Json& node, const std::string& base, const std::string& path) {
    std::string name = reserve(base);
    TF_RETURN_IF_ERROR(define(name, node, path));
    return name;
  }

  // The rule for a node inside an object or array: text ('{' or '[') comes before it, so a
  // $ref back to an enclosing definition is not left recursion there.
  Expected<std::string> contained_rule(const Json& node, const std::string& base, const std::string& path) {
    std::vector<std::string> outer;
    outer.swap(open_refs_);
    auto rule = node_rule(node, base, path);
    open_refs_.swap(outer);
    return rule;
  }

  Expected<std::string> node_body(const Json& node, const std::string& name, const std::string& path) {
    if (node.is_boolean()) {
      if (node.get<bool>()) return use("value");
      return schema_error(path, "schema 'false' matches nothing");
    }
    if (!node.is_object())
      return schema_error(path, "a schema must be an object or a boolean, got " + node.dump());
    TF_ASSIGN_OR_RETURN(std::string combinator, check_keywords(node, path));
    if (!combinator.empty()) return combinator_body(node, combinator, name, path);
    if (const Json* value = member_of(node, "const")) return gbnf_literal(value->dump());
    if (const Json* values = member_of(node, "enum")) return enum_body(*values, path);
    TF_ASSIGN_OR_RETURN(std::vector<std::string> types, types_of(node, path));
    if (types.empty()) return use("value");
    std::vector<std::string> alternatives;
    for (const std::string& type : types) {
      TF_ASSIGN_OR_RETURN(std::string body, type_body(type, node, name, path));
      alternatives.push_back(std::move(body));
    }
    return join(alternatives, " | ");
  }

  // Refuses unknown keywords and combinators mixed with constraints; returns the
  // combinator keyword ($ref, anyOf, oneOf, allOf) if the node has one.
  Expected<std::string> check_keywords(const Json& node, const std::string& path) {
    std::string combinator, constraint;
    for (const auto& item : node.items()) {
      const std::string& key = item.key();
      switch (keyword_kind(key)) {
        case Keyword::kUnknown:
          return schema_error(path, "unsupported keyword '" + key + "'");
        case Keyword::kCombinator:
          if (!combinator.empty())
            return schema_error(path, "'" + combinator + "' cannot be combined with '" + key + "'");
          combinator = key;
          break;
        case Keyword::kAnnotation:
          break;
        case Keyword::kNumber:
          // Draft 4 and OpenAPI 3.0 spell exclusiveMinimum / exclusiveMaximum as a boolean
          // that makes minimum / maximum exclusive (json_schema_numbers.cc).
          if (!item.value().is_number() && !(item.value().is_boolean() && key.rfind("exclusive", 0) == 0)) {
            return schema_error(path, "'" + key + "' must be a number, got " + item.value().dump());
          }
          if (constraint.empty()) constraint = key;
          break;
        default:
          if (constraint.empty()) constraint = key;
      }
    }
    if (!combinator.empty() && !constraint.empty()) {
      return schema_error(path, "'" + combinator + "' cannot be combined with '" + constraint + "'");
    }
    return combinator;
  }

  Expected<std::string> combinator_body(const Json& node, const std::string& keyword, const std::string& name,
                                        const std::string& path) {
    const Json& value = node.at(keyword);
    if (keyword == "$ref") {
      if (!value.is_string()) return schema_error(path, "'$ref' must be a string");
      return ref_rule(value.get<std::string>(), path);
    }
    std::string at = path + "/" + keyword;
    if (!value.is_array() || value.empty())
      return schema_error(path, "'" + keyword + "' must be a non-empty array");
    if (keyword == "allOf") {
      if (value.size() != 1) {
        return schema_error(path, "allOf with " + std::to_string(value.size()) +
                                      " schemas is not supported (only a single schema)");
      }
      return node_body(value[0], name, at + "/0");
    }
    std::vector<std::string> alternatives;  // anyOf, oneOf
    for (size_t i = 0; i < value.size(); ++i) {
      if (value[i].is_boolean() && !value[i].get<bool>()) continue;  // matches nothing: no alternative
      TF_ASSIGN_OR_RETURN(std::string rule,
                          node_rule(value[i], name + "-" + std::to_string(i), at + "/" + std::to_string(i)));
      alternatives.push_back(std::move(rule));
    }
    if (alternatives.empty()) return schema_error(path, "every schema of '" + keyword + "' is false");
    return join(alternatives, " | ");
  }

  // The rule of a $ref target ("#", "#/$defs/NAME", "#/definitions/NAME"), defined once.
  Expected<std::string> ref_rule(const std::string& ref, const std::string& path) {
    if (std::find(open_refs_.begin(), open_refs_.end(), ref) != open_refs_.end()) {
      return schema_error(path, "$ref '" + ref + "' reaches itself without an object or array in between");
    }
    if (auto it = ref_rules_.find(ref); it != ref_rules_.end()) return it->second;
    for (const char* container : {"$defs", "definitions"}) {
      std::string prefix = std::string("#/") + container + "/";
      if (ref.rfind(prefix, 0) != 0) continue;
      std::string key = unescape_pointer_token(std::string_view(ref).substr(prefix.size()));
      const Json* defs = root_.is_object() ? member_of(root_, container) : nullptr;
      if (defs == nullptr || !defs->is_object() || !defs->contains(key)) break;
      std::string name = reserve("def-" + name_part(key));
      ref_rules_[ref] = name;
      open_refs_.push_back(ref);
      Status status = define(name, defs->at(key), std::string("/") + container + "/" + pointer_token(key));
      open_refs_.pop_back();
      TF_RETURN_IF_ERROR(status);
      return name;
    }
    return schema_error(path, "unresolvable $ref '" + ref + "'");
  }

  Expected<std::string> enum_body(const Json& values, const std::string& path) {
    if (!values.is_array() || values.empty()) return schema_error(path, "'enum' must be a non-empty array");
    std::vector<std::string> literals;
    for (const Json& value : values) literals.push_back(gbnf_literal(value.dump()));
    return join(literals, " | ");
  }

  // The node's types: its `type`, else the kinds its keywords constrain (none: any value).
  Expected<std::vector<std::string>> types_of(const Json& node, const std::string& path) {
    static const std::set<std::string> kKnown = {"object",  "array",   "string", "number",
                                                 "integer", "boolean", "null"};
    std::vector<std::string> types;
    if (const Json* type = member_of(node, "type")) {
      std::vector<Json> listed = type->is_array() ? type->get<std::vector<Json>>() : std::vector<Json>{*type};
      if (listed.empty()) return schema_error(path, "'type' must not be empty");
      for (const Json& t : listed) {
        if (!t.is_string() || !kKnown.count(t.get<std::string>())) {
          return schema_error(path, "unknown type " + t.dump());
        }
        if (std::find(types.begin(), types.end(), t.get<std::string>()) == types.end()) {
          types.push_back(t.get<std::string>());
        }
      }
    } else {
      const std::pair<Keyword, const char*> kinds[] = {{Keyword::kObject, "object"},
                                                       {Keyword::kArray, "array"},
                                                       {Keyword::kString, "string"},
                                                       {Keyword::kNumber, "number"}};
      for (const auto& [kind, type] : kinds) {
        for (const auto& item : node.items()) {
          if (keyword_kind(item.key()) == kind) {
            types.push_back(type);
            break;
          }
        }
      }
    }
    // number covers integer: keep the grammar unambiguous.
    if (std::find(types.begin(), types.end(), "number") != types.end()) std::erase(types, "integer");
    return types;
  }

  Expected<std::string> type_body(const std::string& type, const Json& node, const std::string& name,
                                  const std::string& path) {
    if (type == "object") return object_body(node, name, path);
    if (type == "array") return array_body(node, name, path);
    if (type == "string") return string_body(node, name, path);
    if (type == "number" || type == "integer") return number_body(type == "integer", node, name, path);
    if (type == "boolean") return use("boolean");
    return use("null");
  }

  // --- Numbers ---

  // JSON's number or integer rule, or digit-by-digit ranges when the node has bounds.
  Expected<std::string> number_body(bool integer, const Json& node, const std::string& name,
                                    const std::string& path) {
    AddRule add_rule = [&](const std::string& body) {
      std::string rule = reserve(name + "-range");
      set_body(rule, body);
      return rule;
    };
    Expected<std::optional<std::string>> bounded = bounded_number_gbnf(node, integer, add_rule);
    if (!bounded) return schema_error(path, bounded.status().message());
    if (*bounded) return **bounded;
    return use(integer ? "integer" : "number");
  }

  // --- Objects ---

  Expected<std::string> object_body(const Json& node, const std::string& name, const std::string& path) {
    const Json* properties = member_of(node, "properties");
    if (properties != nullptr && !properties->is_object())
      return schema_error(path, "'properties' must be an object");
    TF_ASSIGN_OR_RETURN(std::vector<std::string> required, required_names(node, path));
    // Sets, not searches of the lists: an ordered_json object's lookup is linear too, and
    // 100,000 properties, all required, took minutes.
    const std::unordered_set<std::string> required_set(required.begin(), required.end());
    auto is_required = [&](const std::string& key) { return required_set.count(key) > 0; };
    std::unordered_set<std::string> declared;
    if (properties != nullptr)
      for (const auto& item : properties->items()) declared.insert(item.key());

    std::vector<Member> members;
    if (properties != nullptr) {
      for (const auto& [key, schema] : properties->items()) {
        std::string at = path + "/properties/" + pointer_token(key);
        if (schema.is_boolean() && !schema.get<bool>()) {
          if (is_required(key)) return schema_error(at, "required property '" + key + "' has schema false");
          continue;  // can never appear
        }
        TF_ASSIGN_OR_RETURN(std::string rule, contained_rule(schema, name + "-" + name_part(key), at));
        members.push_back({member_expr(gbnf_literal(Json(key).dump()), rule), is_required(key)});
      }
    }

    // Extra members: the value rule for them, empty when none are allowed.
    const Json* additional = member_of(node, "additionalProperties");
    std::string extra_value;
    if (additional == nullptr) {
      if (properties == nullptr) extra_value = use("value");
    } else if (additional->is_boolean()) {
      if (additional->get<bool>()) extra_value = use("value");
    } else {
      TF_ASSIGN_OR_RETURN(extra_value,
                          contained_rule(*additional, name + "-additional", path + "/additionalProperties"));
    }
    bool extra_forbidden = additional != nullptr && additional->is_boolean() && !additional->get<bool>();

    // Required names that `properties` does not declare take the extra-member schema.
    for (const std::string& key : required) {
      if (declared.count(key)) continue;
      if (extra_forbidden) {
        return schema_error(
            path, "required property '" + key + "' is not in 'properties' and additionalProperties is false");
      }
      std::string value = extra_value.empty() ? use("value") : extra_value;
      members.push_back({member_expr(gbnf_literal(Json(key).dump()), value), true});
    }
    TF_RETURN_IF_ERROR(check_property_counts(node, members, !extra_value.empty(), path));

    if (members.empty() && extra_value == "value") return use("object");
    if (!extra_value.empty()) {
      use("string");
      std::string kv = member_expr("string", extra_value);
      members.push_back({kv + " ( " + kComma + " " + kv + " )*", false});
    }
    use("ws");
    if (members.empty()) return std::string(R"("{" ws "}")");
    return member_sequence(members, name);
  }

  Expected<std::vector<std::string>> required_names(const Json& node, const std::string& path) {
    std::vector<std::string> names;
    const Json* required = member_of(node, "required");
    if (required == nullptr) return names;
    if (!required->is_array()) return schema_error(path, "'required' must be an array of strings");
    std::unordered_set<std::string> seen;  // a linear search per name was quadratic in 100,000 names
    for (const Json& key : *required) {
      if (!key.is_string()) return schema_error(path, "'required' must be an array of strings");
      if (seen.insert(key.get<std::string>()).second) names.push_back(key.get<std::string>());
    }
    return names;
  }

  // minProperties/maxProperties are accepted only when every object the grammar allows
  // satisfies them anyway.
  Status check_property_counts(const Json& node, const std::vector<Member>& members, bool open,
                               const std::string& path) {
    TF_ASSIGN_OR_RETURN(std::optional<uint64_t> min, count_keyword(node, "minProperties", path));
    TF_ASSIGN_OR_RETURN(std::optional<uint64_t> max, count_keyword(node, "maxProperties", path));
    uint64_t required =
        std::count_if(members.begin(), members.end(), [](const Member& m) { return m.required; });
    if (min && *min > required) {
      return schema_error(path, "minProperties " + std::to_string(*min) +
                                    " is not supported (only up to the number of required properties, " +
                                    std::to_string(required) + ")");
    }
    if (max && (open || members.size() > *max)) {
      return schema_error(path, "maxProperties " + std::to_string(*max) +
                                    " is not supported (only when additional properties are not allowed and "
                                    "at most that many properties are declared)");
    }
    return Status::ok();
  }

  // "{" members "}" where required members must appear and optional ones may not, in
  // order, with commas only between present members. A member sequence is one of:
  // member i (the first present: every member before it is optional) followed by the
  // tail after i, where tail(k) is each later member preceded by a comma (optional ones
  // optional). Tails reachable from more than one start become rules, keeping the
  // grammar linear in the number of members.
  std::string member_sequence(const std::vector<Member>& members, const std::string& name) {
    size_t first_required = members.size();
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i].required) {
        first_required = i;
        break;
      }
    }
    size_t last_start = std::min(first_required, members.size() - 1);
    std::map<size_t, std::string> tail_rules;
    std::vector<std::string> starts;
    for (size_t i = 0; i <= last_start; ++i) {
      starts.push_back(concat(members[i].expr, tail(members, i + 1, last_start, name, tail_rules)));
    }
    std::string sequence = starts.size() == 1 ? starts[0] : "( " + join(starts, " | ") + " )";
    if (first_required == members.size()) return R"("{" ws ( )" + sequence + R"( ws )? "}")";
    return R"("{" ws )" + sequence + R"( ws "}")";
  }

  // Members k.. each preceded by a comma; a rule when k is also a start's tail (k <= last_start + 1).
  // Built from the last member back and joined once: a recursion as deep as the members are
  // many overflowed the stack (100,000 optional properties), and prepending to the text
  // built so far was quadratic (100,000 required ones).
  std::string tail(const std::vector<Member>& members, size_t k, size_t last_start, const std::string& name,
                   std::map<size_t, std::string>& rules) {
    size_t end = k;  // the first member whose tail is known (a rule already, or past the end)
    while (end < members.size() && !rules.count(end)) ++end;
    // Names are reserved first to last, as the rules are listed.
    std::vector<std::string> names(end - k);
    for (size_t j = k; j < end; ++j)
      if (last_start > 0 && j >= 2 && j <= last_start + 1)
        names[j - k] = reserve(name + "-tail-" + std::to_string(j));
    std::vector<std::string> pieces;  // the sequence after member j, last piece first
    if (end < members.size()) pieces.push_back(rules[end]);
    for (size_t j = end; j-- > k;) {
      std::string item = std::string(kComma) + " " + members[j].expr;
      pieces.push_back(members[j].required ? std::move(item) : "( " + item + " )?");
      if (names[j - k].empty()) continue;
      set_body(names[j - k], joined_backwards(pieces));
      rules[j] = names[j - k];
      pieces.assign(1, names[j - k]);
    }
    return joined_backwards(pieces);
  }

  static std::string joined_backwards(std::vector<std::string> pieces) {
    std::reverse(pieces.begin(), pieces.end());
    return join(pieces, " ");
  }

  // --- Arrays ---

  Expected<std::string> array_body(const Json& node, const std::string& name, const std::string& path) {
    TF_ASSIGN_OR_RETURN(std::optional<uint64_t> min_items, count_keyword(node, "minItems", path));
    TF_ASSIGN_OR_RETURN(std::optional<uint64_t> max, count_keyword(node, "maxItems", path));
    uint64_t min = min_items.value_or(0);
    TF_RETURN_IF_ERROR(fit_bounds(min, max, "Items", path));
    if (const Json* unique = member_of(node, "uniqueItems"); unique != nullptr && !unique->is_boolean()) {
      return schema_error(path, "'uniqueItems' must be a boolean");
    }

    const Json* prefix_items = member_of(node, "prefixItems");
    if (prefix_items != nullptr && !prefix_items->is_array())
      return schema_error(path, "'prefixItems' must be an array");
    size_t count = prefix_items == nullptr ? 0 : prefix_items->size();
    if (max && *max < count) count = *max;  // later tuple positions can never be filled
    std::vector<std::string> prefix;
    for (size_t i = 0; i < count; ++i) {
      TF_ASSIGN_OR_RETURN(std::string rule,
                          contained_rule((*prefix_items)[i], name + "-item-" + std::to_string(i),
                                         path + "/prefixItems/" + std::to_string(i)));
      prefix.push_back(std::move(rule));
    }

    // The rule for items after the tuple, empty when there may be none.
    std::string rest;
    const Json* items = member_of(node, "items");
    if (items == nullptr || (items->is_boolean() && items->get<bool>())) {
      rest = use("value");
    } else if (!items->is_boolean()) {
      TF_ASSIGN_OR_RETURN(rest, contained_rule(*items, name + "-items", path + "/items"));
    }
    if (rest.empty()) {
      if (min > count)
        return schema_error(path, "minItems is greater than the number of prefixItems with items false");
      max = count;
    }
    use("ws");
    if (max && *max == 0) return std::string(R"("[" ws "]")");
    std::string content = array_content(prefix, rest, min, max);
    if (min == 0) return R"("[" ws ( )" + content + R"( ws )? "]")";
    return R"("[" ws )" + content + R"( ws "]")";
  }

  // At least one item (the caller makes the whole optional when minItems is 0): tuple
  // positions nested so a later one needs the earlier ones, then `rest` items.
  static std::string array_content(const std::vector<std::string>& prefix, const std::string& rest,
                                   uint64_t min, std::optional<uint64_t> max) {
    std::string more_item = "( " + std::string(kComma) + " " + rest + " )";
    if (prefix.empty()) {
      const uint64_t lo = min > 0 ? min - 1 : 0;
      return concat(rest, max ? repeat(more_item, lo, *max - 1) : repeat(more_item, lo, std::nullopt));
    }
    uint64_t count = prefix.size();
    std::string sequence;
    if (!rest.empty()) {
      const uint64_t lo = min > count ? min - count : 0;
      sequence = max ? repeat(more_item, lo, *max - count) : repeat(more_item, lo, std::nullopt);
    }
    for (size_t pos = count; pos-- > 0;) {
      std::string item = pos == 0 ? prefix[0] : std::string(kComma) + " " + prefix[pos];
      sequence = concat(item, sequence);
      if (pos > 0 && pos >= min) sequence = "( " + sequence + " )?";
    }
    return sequence;
  }

  // --- Strings ---

  Expected<std::string> string_body(const Json& node, const std::string& name, const std::string& path) {
    TF_ASSIGN_OR_RETURN(std::optional<uint64_t> min_length, count_keyword(node, "minLength", path));
    TF_ASSIGN_OR_RETURN(std::optional<uint64_t> max_length, count_keyword(node, "maxLength", path));
    bool has_length = min_length || max_length;
    const Json* format = member_of(node, "format");
    if (const Json* pattern = member_of(node, "pattern")) {
      if (format != nullptr || has_length) {
        return schema_error(path, "'pattern' cannot be combined with 'format', 'minLength' or 'maxLength'");
      }
      return pattern_body(*pattern, name, path);
    }
    if (format != nullptr) {
      if (has_length)
        return schema_error(path, "'format' cannot be combined with 'minLength' or 'maxLength'");
      return format_body(*format, path);
    }
    if (!has_length) return use("string");
    uint64_t min = min_length.value_or(0);
    TF_RETURN_IF_ERROR(fit_bounds(min, max_length, "Length", path));
    return concat(concat(kQuote, repeat(use("char"), min, max_length)), kQuote);
  }

  Expected<std::string> format_body(const Json& format, const std::string& path) {
    static const std::set<std::string> kFormats = {"date", "time", "date-time", "uuid", "email"};
    if (!format.is_string() || !kFormats.count(format.get<std::string>())) {
      return schema_error(path, "unsupported format " + format.dump());
    }
    std::string rule = "format-" + format.get<std::string>();
    return std::string(kQuote) + " " + use(find_fixed(rule)->name) + " " + kQuote;
  }

  // The string's characters as the regex allows them, each written the way JSON needs it
  // ('"', '\' and control characters escaped): the regex's grammar is compiled and
  // printed back with every character class split into its plain and escaped parts.
  Expected<std::string> pattern_body(const Json& pattern, const std::string& name, const std::string& path) {
    if (!pattern.is_string()) return schema_error(path, "'pattern' must be a string");
    auto regex_rules = regex_to_gbnf(search_as_full_match(pattern.get<std::string>()), "root");
    if (!regex_rules) return schema_error(path, "pattern: " + regex_rules.status().message());
    auto regex_grammar = compile_gbnf(*regex_rules);
    if (!regex_grammar) return schema_error(path, "pattern: " + regex_grammar.status().message());
    std::string start = emit_json_escaped(**regex_grammar, name + "-pattern");
    TF_RETURN_IF_ERROR(check_text_budget());
    return std::string(kQuote) + " " + start + " " + kQuote;
  }

  // Adds `grammar`'s rules (its root renamed `base`) with characters JSON-escaped.
  std::string emit_json_escaped(const Grammar& grammar, const std::string& base) {
    std::vector<std::string> names(grammar.rule_names.size());
    names[grammar.root] = reserve(base);
    for (size_t i = 0; i < names.size(); ++i) {
      if (i != grammar.root) names[i] = reserve(base + "-" + std::to_string(i));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      std::vector<std::string> alternatives;
      for (uint32_t offset : grammar.rule_alts[i]) {
        std::vector<std::string> items;
        for (size_t e = offset; grammar.elements[e].kind != Element::Kind::kEnd; ++e) {
          const Element& element = grammar.elements[e];
          items.push_back(element.kind == Element::Kind::kRule
                              ? names[element.value]
                              : json_escaped_class(grammar.classes[element.value]));
        }
        alternatives.push_back(items.empty() ? std::string(R"("")") : join(items, " "));
      }
      set_body(names[i], join(alternatives, " | "));
    }
    return names[grammar.root];
  }

  const Json& root_;
  std::vector<Rule> rules_;
  std::map<std::string, size_t> rule_index_;
  std::map<std::string, int> next_suffix_;  // reserve(): per base, the next suffix to try
  GrammarBudget text_budget_;
  std::set<std::string> fixed_used_;
  std::map<std::string, std::string> ref_rules_;  // $ref -> rule name
  std::vector<std::string> open_refs_;            // $refs being defined, since the last '{' or '['
  int open_definitions_ = 0;                      // define() calls on the stack
};

}  // namespace

std::string json_object_gbnf() {
  std::set<std::string> used;
  mark_fixed("object", used);
  return "root ::= object\n" + fixed_rules_text(used);
}

Expected<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  try {
    return Converter(schema).convert();
  } catch (const nlohmann::json::exception& e) {  // a keyword of an unexpected JSON type
    return invalid_argument(std::string("json_schema: ") + e.what());
  }
}

Expected<std::string> json_schema_to_gbnf(const nlohmann::json& schema) {
  return json_schema_to_gbnf(Json::parse(schema.dump()));
}

Expected<std::string> json_schema_to_gbnf(std::string_view schema_text) {
  Expected<Json> schema = text::parse_json(schema_text);
  if (!schema) return invalid_argument("json_schema: invalid JSON: " + schema.status().message());
  return json_schema_to_gbnf(*schema);
}

}  // namespace tf::grammar
