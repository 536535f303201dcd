// tool_choice "required" or a named function, enforced: the answer (after the reasoning) is
// decoded under a grammar whose sentences are tool calls in the model's format
// (text/tool_call_parser.h, GLM-5.x):
//
//   <tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>
//
// NAME is one of the request's functions (or the named one). Its arguments are the declared
// parameters in declaration order, each at most once, the `required` ones always (as
// json_schema_gbnf.h writes an object's members); none when `properties` is empty; any keys
// (without '<') when the function has no `properties` at all. V is raw text for a string
// parameter (tool_parameter_is_string): one of its `enum` / `const` strings when it lists them,
// else any text without "</arg_value>"; for other parameters a JSON value of their schema (any
// JSON value where json_schema_gbnf.h cannot express the schema).
// "required" allows one call, or several when parallel_tool_calls is on; a named choice
// exactly one. The answer starts with the first call (no text); a newline may come between
// calls and after NAME or a value (the GLM-4.5 layout the parser also reads). The markers are
// added tokens of the vocabulary, so the grammar's token vocabulary gives them their text
// (kToolCallMarkers, structured_output.h).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tf::engine {

struct ToolCallGrammarOptions {
  std::optional<std::string> function;  // a named tool_choice; nullopt: "required"
  bool parallel = true;                 // more than one call ("required" only)
};

// GBNF for the calls `tools` (the OpenAI tools array: {type, function: {name, parameters}})
// allows. kInvalidArgument when there is no function to call, or the named one is missing.
Expected<std::string> tool_call_gbnf(const nlohmann::ordered_json& tools, const ToolCallGrammarOptions& options);

// The tool-call markers the grammar writes as literals.
extern const std::vector<std::string> kToolCallMarkers;

}  // namespace tf::engine
