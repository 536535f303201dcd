// See structured_output.h.
#include "engine/structured_output.h"

#include <algorithm>

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
  if (!text) return text.status();
  return grammar::compile_gbnf(*text);
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

}  // namespace tf::engine
