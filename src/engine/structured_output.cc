// See structured_output.h.
#include "engine/structured_output.h"

#include <algorithm>

#include "engine/tool_call_grammar.h"
#include "sampling/grammar/grammar_budget.h"
#include "sampling/grammar/json_schema_gbnf.h"
#include "sampling/grammar/regex_gbnf.h"

namespace tf::engine {

namespace {

Expected<std::string> gbnf_for(const StructuredOutput& s) {
  using Kind = StructuredOutput::Kind;
  switch (s.kind) {
    case Kind::kJsonObject:
      return grammar::json_object_gbnf();
    case Kind::kJsonSchema:
      // The client's key order when known: properties are written in the schema's order.
      return s.schema_text.empty() ? grammar::json_schema_to_gbnf(s.schema)
                                   : grammar::json_schema_to_gbnf(std::string_view(s.schema_text));
    case Kind::kRegex:
      return grammar::regex_to_gbnf(s.pattern, "root");
    case Kind::kChoice:
      return grammar::choice_to_gbnf(s.choices);
    case Kind::kGrammar:
      return s.pattern;
    case Kind::kNone:
      break;
  }
  return invalid_argument("structured output: no constraint");
}

}  // namespace

Expected<std::shared_ptr<const grammar::Grammar>> compile_structured_output(const StructuredOutput& structured) {
  auto text = gbnf_for(structured);
  auto compiled =
      text ? grammar::compile_gbnf(*text) : Expected<std::shared_ptr<const grammar::Grammar>>(text.status());
  if (!compiled && !structured.param.empty()) return compiled.status().with_context(structured.param);
  return compiled;
}

Expected<std::shared_ptr<const grammar::Grammar>> compile_request_grammar(const GenerationRequest& request) {
  // A forced tool call wins over a response format: the answer is then calls only (as OpenAI
  // treats tool_choice "required" next to response_format).
  if (request.forces_tool_call()) {
    ToolCallGrammarOptions to;
    if (request.named_tool_choice) to.function = request.tool_choice;
    to.parallel = request.parallel_tool_calls;
    auto text = tool_call_gbnf(request.tools, to);
    if (!text) return text.status();
    auto compiled = grammar::compile_gbnf(*text);
    if (!compiled) return compiled.status().with_context("tool_choice");
    return compiled;
  }
  if (request.structured.kind == StructuredOutput::Kind::kNone)
    return std::shared_ptr<const grammar::Grammar>();
  return compile_structured_output(request.structured);
}

std::shared_ptr<const grammar::TokenVocabulary> grammar_vocabulary(const text::Tokenizer& tokenizer, int64_t vocab,
                                                                   const std::vector<std::string>& markers) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab));
  for (int64_t id = 0; id < vocab; ++id) {
    const auto t = static_cast<text::TokenId>(id);
    if (const text::AddedToken* added = tokenizer.added_token(t)) {
      if (std::find(markers.begin(), markers.end(), added->content) != markers.end())
        bytes[static_cast<size_t>(id)] = added->content;
      continue;
    }
    if (tokenizer.is_special(t)) continue;
    bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(t);
  }
  return std::make_shared<grammar::TokenVocabulary>(std::move(bytes));
}

bool is_grammar_too_large(const Status& status) { return grammar::is_grammar_too_large(status); }

}  // namespace tf::engine
