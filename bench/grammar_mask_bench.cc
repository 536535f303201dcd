// Cost of structured output's token masks (src/sampling/grammar) on a real vocabulary.
//   grammar_mask_bench TOKENIZER_DIR [REPEAT=3]
// Decodes a JSON answer token by token under its schema's grammar, the way the engine
// does (StructuredConstraint::mask, then accept), and prints the mask time per token:
// cold (every mask computed: fill_token_mask) and as served (masks cached by matcher
// state), the worst single mask, and how many tokens each state allows on average.
// The figure is compared with a decode step's budget: the engine prepares a mask on the
// host while the model's step runs, so a mask only costs time where it is longer than the
// step (7.5 ms per token at the ~133 tok/s batch-1 decode measured on the H200,
// bench/RESULTS.md); the last line is that decode rate with each token's measured mask.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/structured_output.h"
#include "sampling/grammar/json_schema_gbnf.h"
#include "text/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

constexpr const char* kSchema = R"({"type": "object", "properties": {
  "title": {"type": "string"}, "year": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},
  "rating": {"enum": ["good", "bad"]}}, "required": ["title", "year", "tags", "rating"]})";
constexpr const char* kAnswer =
    R"({"title": "The lighthouse keeper's long winter, and what the sea brought back", "year": 1987, )"
    R"("tags": ["sea", "solitude", "weather", "memory"], "rating": "good"})";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR [REPEAT]\n", argv[0]);
    return 2;
  }
  const int repeat = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  auto tok = tf::text::Tokenizer::from_directory(argv[1]);
  if (!tok) {
    std::fprintf(stderr, "error: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  const auto vocab_size = static_cast<int64_t>((*tok)->vocab_size());
  Clock::time_point t0 = Clock::now();
  auto vocab = tf::engine::grammar_vocabulary(**tok, vocab_size);
  const double vocab_ms = ms_since(t0);
  auto gbnf = tf::grammar::json_schema_to_gbnf(std::string_view(kSchema));
  auto grammar = gbnf ? tf::grammar::compile_gbnf(*gbnf) : tf::Expected<std::shared_ptr<const tf::grammar::Grammar>>(gbnf.status());
  if (!grammar) {
    std::fprintf(stderr, "error: %s\n", grammar.status().to_string().c_str());
    return 1;
  }
  const std::vector<int32_t> answer = (*tok)->encode(kAnswer, false);
  std::printf("vocabulary %lld tokens (built in %.1f ms); answer %zu tokens\n", static_cast<long long>(vocab_size),
              vocab_ms, answer.size());

  constexpr double kStepMs = 7.5;
  double cold_total = 0, cold_worst = 0, served_total = 0, overlapped_total = 0;
  double allowed_sum = 0;
  std::vector<float> logits(static_cast<size_t>(vocab_size));
  for (int r = 0; r < repeat; ++r) {
    // Cold: every state's mask computed from scratch.
    tf::grammar::GrammarMatcher m(*grammar);
    std::vector<uint8_t> allowed;
    for (int32_t t : answer) {
      t0 = Clock::now();
      if (!tf::grammar::fill_token_mask(m, *vocab, allowed)) {
        std::fprintf(stderr, "error: a mask took more work than allowed\n");
        return 1;
      }
      const double ms = ms_since(t0);
      cold_total += ms;
      cold_worst = std::max(cold_worst, ms);
      if (r == 0) allowed_sum += static_cast<double>(std::count(allowed.begin(), allowed.end(), 1));
      if (!allowed[static_cast<size_t>(t)] || !m.accept(vocab->bytes(t))) {
        std::fprintf(stderr, "error: the grammar refused answer token %d\n", t);
        return 1;
      }
    }
    // As served: the constraint's mask (cached by state) on a logits row, then accept.
    tf::grammar::StructuredConstraint c(*grammar, vocab, (*tok)->eos_token_ids());
    for (int32_t t : answer) {
      std::fill(logits.begin(), logits.end(), 0.0f);
      t0 = Clock::now();
      if (!c.mask(logits).is_ok()) return 1;
      const double ms = ms_since(t0);
      served_total += ms;
      overlapped_total += std::max(kStepMs, ms);  // the engine prepares the mask beside the model's step
      if (std::isinf(logits[static_cast<size_t>(t)]) || !c.accept(t).is_ok()) {
        std::fprintf(stderr, "error: the constraint refused answer token %d\n", t);
        return 1;
      }
    }
  }
  const double n = static_cast<double>(answer.size()) * repeat;
  std::printf("mask per token, cold:      %.3f ms (worst %.3f ms); %.0f tokens allowed on average\n", cold_total / n,
              cold_worst, allowed_sum / static_cast<double>(answer.size()));
  std::printf("mask per token, as served: %.3f ms (masks cached by matcher state)\n", served_total / n);
  std::printf("budget: a decode step of %.1f ms (133 tok/s, batch 1, H200): served mask = %.1f%% of it\n", kStepMs,
              100.0 * served_total / n / kStepMs);
  std::printf("prepared beside %.1f ms steps: %.1f tok/s (%.1f%% of the unconstrained %.1f tok/s)\n", kStepMs,
              1000.0 * n / overlapped_total, 100.0 * kStepMs * n / overlapped_total, 1000.0 / kStepMs);
  return 0;
}
