// See tool_call_grammar.h.
#include "engine/tool_call_grammar.h"

#include <set>

#include "sampling/grammar/gbnf_writer.h"
#include "sampling/grammar/grammar_budget.h"
#include "sampling/grammar/json_schema_gbnf.h"
#include "text/tool_call_parser.h"

namespace tf::engine {

const std::vector<std::string> kToolCallMarkers = {"<tool_call>", "</tool_call>", "<arg_key>",
                                                   "</arg_key>",  "<arg_value>",  "</arg_value>"};

namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kValueEnd = "</arg_value>";

// `raw`: any text in which kValueEnd does not occur (it may end with a part of it). Rule s<i>
// is the state "the text ends with the first i characters of kValueEnd"; '<' occurs only
// first in it, so a mismatch goes back to s1 on '<' and to s0 on anything else.
std::string raw_text_rules() {
  using grammar::CharRange;
  const auto cls_not = [](std::initializer_list<char> cs) {
    std::vector<CharRange> r;
    for (char c : cs) r.push_back({static_cast<uint32_t>(c), static_cast<uint32_t>(c)});
    return grammar::gbnf_class(grammar::complement_ranges(grammar::normalize_ranges(r)));
  };
  std::string out = "raw ::= s0\n";
  out += "s0 ::= (" + cls_not({'<'}) + " s0 | \"<\" s1)?\n";
  for (size_t i = 1; i < kValueEnd.size(); ++i) {
    const char next = kValueEnd[i];
    out += "s" + std::to_string(i) + " ::= (" + cls_not({'<', next}) + " s0 | \"<\" s1";
    if (i + 1 < kValueEnd.size()) out += " | " + grammar::gbnf_literal(std::string(1, next)) + " s" + std::to_string(i + 1);
    out += ")?\n";
  }
  return out;
}

const json* function_of(const json& tool) {
  if (!tool.is_object()) return nullptr;
  const json& fn = tool.contains("function") && tool["function"].is_object() ? tool["function"] : tool;
  return fn.contains("name") && fn["name"].is_string() ? &fn : nullptr;
}

// A string parameter's raw text: one of its values when the schema lists them (enum / const of
// strings: "red" is written red), else any text without "</arg_value>".
std::string string_value(const json& schema) {
  std::vector<std::string> options;
  if (auto c = schema.find("const"); c != schema.end() && c->is_string()) options.push_back(c->get<std::string>());
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array()) {
    for (const json& v : *e) {
      if (!v.is_string()) return "raw";  // e.g. [..., null]: not only strings
      options.push_back(v.get<std::string>());
    }
  }
  if (options.empty()) return "raw";
  std::string alts;
  for (const std::string& o : options) alts += (alts.empty() ? "(" : " | ") + grammar::gbnf_literal(o);
  return alts + ")";
}

// The grammar text of the whole tool set, past the budget (grammar_budget.h): many tools,
// each within the budget, must not add up to gigabytes before the compiler sees them.
Status check_size(size_t bytes) {
  if (bytes <= grammar::kMaxGrammarBytes) return Status::ok();
  return grammar::grammar_too_large("the tools' call grammar is larger than the limit");
}

// The rules of one function's call body: NAME and its argument pairs.
Expected<std::string> function_rules(const json& fn, const std::string& rule, bool& uses_any_value) {
  std::string out;
  const std::string name = grammar::gbnf_literal(fn["name"].get<std::string>());
  const json* props = nullptr;
  if (auto p = fn.find("parameters"); p != fn.end() && p->is_object()) {
    if (auto q = p->find("properties"); q != p->end() && q->is_object()) props = &*q;
  }
  if (props != nullptr && props->empty()) {  // declares that it takes no arguments
    out += rule + " ::= " + name + " \"\\n\"?\n";
    return out;
  }
  if (props == nullptr) {  // no declared parameters: any keys
    const std::string arg = rule + "-arg";
    out += rule + " ::= " + name + " \"\\n\"? " + arg + "*\n";
    out += arg + " ::= \"<arg_key>\" [^<]+ \"</arg_key>\" \"<arg_value>\" raw \"</arg_value>\" \"\\n\"?\n";
    return out;
  }
  const auto strict_it = fn.find("strict");
  const bool strict = strict_it != fn.end() && strict_it->is_boolean() && strict_it->get<bool>();
  std::set<std::string> required;
  const json& params = fn.at("parameters");
  if (auto r = params.find("required"); r != params.end() && r->is_array()) {
    for (const json& k : *r)
      if (k.is_string()) required.insert(k.get<std::string>());
  }
  // The declared parameters in order, each optional unless required.
  std::string seq, values;
  int index = 0;
  for (const auto& [key, schema] : props->items()) {
    const std::string pair = rule + "-p" + std::to_string(index++), value = pair + "-v";
    seq += " " + pair + (required.count(key) ? "" : "?");
    out += pair + " ::= \"<arg_key>\" " + grammar::gbnf_literal(key) + " \"</arg_key>\" \"<arg_value>\" " + value +
           " \"</arg_value>\" \"\\n\"?\n";
    if (tool_parameter_is_string(schema)) {
      values += value + " ::= " + string_value(schema) + "\n";
      continue;
    }
    // A JSON value of the parameter's schema, its rules renamed into this grammar.
    auto g = grammar::json_schema_to_gbnf(schema);
    // A schema the converter does not support takes any JSON value (agents send schemas of every
    // kind), unless the function is `strict` (OpenAI's promise that its calls follow the schema):
    // then it is refused, naming the parameter, as response_format never fails open. One too
    // large is refused either way.
    if (!g && grammar::is_grammar_too_large(g.status())) return g.status();
    if (!g && strict)
      return invalid_argument("'tools': function " + name + " is strict, but its parameter '" + key +
                              "' cannot be enforced: " + g.status().message());
    TF_RETURN_IF_ERROR(check_size(out.size() + values.size() + (g ? g->size() * 2 : 0)));
    if (g) {
      values += grammar::prefix_gbnf_rules(*g, value + "-");
      values += value + " ::= " + value + "-root\n";
    } else {
      uses_any_value = true;
      values += value + " ::= any-root\n";
    }
  }
  out += rule + " ::= " + name + " \"\\n\"?" + seq + "\n" + values;
  return out;
}

}  // namespace

Expected<std::string> tool_call_gbnf(const json& tools, const ToolCallGrammarOptions& options) {
  if (!tools.is_array()) return invalid_argument("tool_choice: the request has no tools");
  std::string functions, bodies;
  bool uses_any_value = false;
  int index = 0;
  for (const json& tool : tools) {
    const json* fn = function_of(tool);
    if (fn == nullptr) continue;
    if (options.function && (*fn)["name"] != *options.function) continue;
    const std::string rule = "f" + std::to_string(index++);
    functions += (functions.empty() ? "" : " | ") + rule;
    auto body = function_rules(*fn, rule, uses_any_value);
    if (!body) return body.status();
    bodies += *body;
    TF_RETURN_IF_ERROR(check_size(functions.size() + bodies.size()));
  }
  if (functions.empty()) {
    return invalid_argument(options.function ? "tool_choice names function '" + *options.function +
                                                   "' which is not in 'tools'"
                                             : std::string("tool_choice required: 'tools' has no function"));
  }
  std::string out;
  const bool many = !options.function && options.parallel;
  out += std::string("root ::= call") + (many ? " (\"\\n\"? call)*" : "") + "\n";
  out += "call ::= \"<tool_call>\" (" + functions + ") \"</tool_call>\"\n";
  out += bodies;
  out += raw_text_rules();
  if (uses_any_value) out += grammar::prefix_gbnf_rules(*grammar::json_schema_to_gbnf(json::object()), "any-");
  return out;
}

}  // namespace tf::engine
