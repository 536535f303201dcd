// Cost of LOOP_GUARD's loop check (sampling/repetition_detector.h) per generated token, on
// the engine's thread, beside a decode step's budget.
//   loop_guard_bench [TOKENS=1000000]
// Pushes random token ids (no loop: every block length is checked and none fires) and a reply
// that loops on a 300-token paragraph, at the server's rule (blocks of 1-512 tokens, 3 copies,
// LOOP_GUARD=1024 tokens), and prints ns per token. The budget line: a decode step of 4 streams
// with 8 verified tokens each at the ~131 tok/s batch-1 step of the H200 (7.6 ms,
// bench/RESULTS.md), and the share of it the checks take.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "sampling/repetition_detector.h"

namespace {

double ns_per_token(const std::vector<int32_t>& tokens, int* fired) {
  tf::RepetitionDetector d(tf::RepetitionRule{1, 512, 3, 1024});
  const auto t0 = std::chrono::steady_clock::now();
  *fired = 0;
  for (int32_t t : tokens) *fired += d.push(t).has_value() ? 1 : 0;
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  return ns / static_cast<double>(tokens.size());
}

}  // namespace

int main(int argc, char** argv) {
  const long n = argc > 1 ? std::atol(argv[1]) : 1000000;
  if (n < 2000) {
    std::fprintf(stderr, "usage: loop_guard_bench [TOKENS >= 2000]\n");
    return 2;
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<int32_t> id(0, 154879);
  std::vector<int32_t> random(static_cast<size_t>(n)), looping(static_cast<size_t>(n));
  for (auto& t : random) t = id(rng);
  for (size_t i = 0; i < looping.size(); ++i) looping[i] = i < 300 ? id(rng) : looping[i - 300];
  int fired_random = 0, fired_loop = 0;
  const double a = ns_per_token(random, &fired_random);
  const double b = ns_per_token(looping, &fired_loop);
  std::printf("random ids:        %7.1f ns/token (%d loops found)\n", a, fired_random);
  std::printf("300-token loop:    %7.1f ns/token (first found at token %d of every check after it)\n", b,
              fired_loop > 0 ? static_cast<int>(n) - fired_loop + 1 : -1);
  const double step_ns = 7.6e6, tokens_per_step = 4 * 8;
  std::printf("budget: %.0f tokens a 7.6 ms decode step -> %.3f%% of the step\n", tokens_per_step,
              100.0 * std::max(a, b) * tokens_per_step / step_ns);
  return fired_random == 0 && fired_loop > 0 ? 0 : 1;
}
