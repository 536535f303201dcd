// Tool-call parser for the GLM-4.7/5.x output format (the GLM-5.3-Flash chat template documents it):
//
//   <tool_call>NAME<arg_key>K1</arg_key><arg_value>V1</arg_value>...</tool_call>
//
// (GLM-4.5/4.6 put newlines after NAME and between pairs; both are accepted). Values are typed by
// the tool's JSON schema: a parameter whose type is "string" (also ["string","null"] or an anyOf /
// oneOf with a string branch) keeps its raw text unstripped; any other value is parsed as JSON
// (then True/False/None), falling back to the raw string. Arguments come out as the JSON text
// Python's json.dumps(dict, ensure_ascii=False) writes: {"city": "Paris", "days": 2}.
//
// Content is the text before the first <tool_call>; text between or after calls is dropped, and a
// call cut off before </tool_call> is not a call. Streaming (feed/finish) re-parses everything seen
// so far and emits what was not sent yet (api.md §6): a call's name once it is complete, then
// argument fragments: string values as they grow, other values only once complete, the closing
// brace at </tool_call> ("{}" for a call without arguments). The fragments of a call concatenate to
// exactly the non-streaming `arguments`, however the text was split. Partial tags and incomplete
// UTF-8 sequences are held back. A repeated key is emitted twice (streaming cannot retract).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf {

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON object text
};

struct ToolCallParseResult {
  std::optional<std::string> content;  // nullopt when empty or only whitespace
  std::vector<ToolCall> calls;
};

struct ToolCallDelta {
  size_t index = 0;
  std::optional<std::string> name;  // set once, on the call's first delta
  std::string arguments;            // fragment to append
};

struct ToolParserDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;
};

// Whether a parameter with this JSON schema takes raw text (type "string", ["string", "null"],
// or an anyOf / oneOf with a string branch); other parameters' values are JSON.
bool tool_parameter_is_string(const nlohmann::json& schema);

class GlmToolCallParser {
 public:
  // `tools`: the request's tools (OpenAI {type, function:{name, parameters}} or flat
  // {name, parameters}); null or empty when none.
  explicit GlmToolCallParser(const nlohmann::json& tools = nullptr);

  ToolParserDelta feed(std::string_view text);
  ToolParserDelta finish();
  // Calls whose </tool_call> has been seen.
  size_t completed_calls() const;

  ToolCallParseResult parse(std::string_view text) const;

 private:
  struct PairView {
    std::string key;
    std::string value;
    bool complete = false;
  };
  struct CallView {
    std::string name;
    bool name_complete = false;
    bool closed = false;
    std::vector<PairView> pairs;
  };
  struct Snapshot {
    size_t content_end = 0;  // bytes of content that can be released
    std::vector<CallView> calls;
  };
  Snapshot scan(std::string_view text, bool final) const;
  std::string arguments_so_far(const CallView& call) const;
  std::string typed_value(const std::string& tool, const std::string& key, const std::string& raw) const;
  bool is_string_param(const std::string& tool, const std::string& key) const;
  ToolParserDelta step(bool final);

  nlohmann::json tools_;
  std::string text_;
  size_t content_sent_ = 0;
  struct Sent {
    bool name = false;
    std::string arguments;
  };
  std::vector<Sent> sent_;
  size_t completed_ = 0;
};

}  // namespace tf
