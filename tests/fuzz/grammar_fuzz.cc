// libFuzzer target for structured output's grammar engine (src/sampling/grammar): grammars,
// regexes and JSON Schemas arrive in requests, so any text must compile or fail with a Status,
// and a compiled grammar must match and mask without crash, sanitizer report, leak or
// runaway time. The first byte picks the input kind (GBNF, regex, JSON Schema text); the
// rest is the text. Every compiled grammar is run over a few sample strings and masked over
// a small vocabulary (with a work budget, as the engine does). Seed corpus: tests/fuzz/grammar_corpus.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sampling/grammar/grammar.h"
#include "sampling/grammar/grammar_matcher.h"
#include "sampling/grammar/json_schema_gbnf.h"
#include "sampling/grammar/regex_gbnf.h"
#include "sampling/grammar/token_mask.h"

namespace {

using namespace tf::grammar;

const TokenVocabulary& vocabulary() {
  static const TokenVocabulary v({"", "a", "b", "ab", "{", "}", "\"", "\":", ",", " ", "1", "12", "-", "true", "null",
                                  "\xC3\xA9", "\xC3", "\xA9", "[", "]", "x", "\n", "(", ")", "+", "0", "\xF0\x9F"});
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  tf::Expected<std::string> gbnf = std::string(text);
  if (data[0] % 3 == 1) gbnf = regex_to_gbnf(text, "root");
  if (data[0] % 3 == 2) gbnf = json_schema_to_gbnf(text);
  if (!gbnf) return 0;
  auto grammar = compile_gbnf(*gbnf);
  if (!grammar) return 0;
  for (const char* s : {"", "a", "ab1", "{\"a\": 1}", "[1,2]", "\xC3\xA9\xE2\x9C\x93", "aaaaaaaaaaaaaaaaaaaa"})
    (void)grammar_matches(**grammar, s);
  GrammarMatcher m(*grammar);
  std::vector<uint8_t> allowed;
  (void)fill_token_mask(m, vocabulary(), allowed, 2'000'000);
  return 0;
}
