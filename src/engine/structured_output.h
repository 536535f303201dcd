// A request's StructuredOutput (json_object, json_schema, regex, choice, grammar) as the
// one grammar it is decoded under (sampling/grammar/), and the vocabulary's bytes the
// token masks are computed over.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine_api.h"
#include "sampling/grammar/grammar.h"
#include "sampling/grammar/structured_constraint.h"
#include "sampling/grammar/token_mask.h"
#include "text/tokenizer.h"

namespace tf::engine {

// kInvalidArgument naming what is wrong (a schema keyword, a regex offset, a grammar line),
// after "<structured.param>: " when the request says where it came from.
Expected<std::shared_ptr<const grammar::Grammar>> compile_structured_output(const StructuredOutput& structured);

// The grammar a request is decoded under: its forced tool calls' (errors name tool_choice),
// else its structured output's; null when it has neither.
Expected<std::shared_ptr<const grammar::Grammar>> compile_request_grammar(const GenerationRequest& request);

// Whether an engine refusal is a grammar past its size budget (sampling/grammar/
// grammar_budget.h): the server then names the field that brought the grammar.
bool is_grammar_too_large(const Status& status);

// Token ids [0, vocab) with their bytes; added and special tokens (end of text, the
// reasoning and tool-call markers) get none, so no grammar ever allows them, except the
// added tokens whose text is one of `markers` (the tool-call grammar's tags).
std::shared_ptr<const grammar::TokenVocabulary> grammar_vocabulary(const text::Tokenizer& tokenizer, int64_t vocab,
                                                                   const std::vector<std::string>& markers = {});

}  // namespace tf::engine
