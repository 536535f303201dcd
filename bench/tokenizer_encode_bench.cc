// Encode throughput of our tokenizer (src/text) on one thread, the measured side of
// bench/run_tokenizer_bench.sh; tokenizer_encode_bench.js measures transformers.js on the same
// corpus file (a JSON array of documents written by `tokenizer_encode_bench.js --make-corpus`).
//   tokenizer_encode_bench TOKENIZER_DIR CORPUS.json [NAME] [REPEAT=1]
// A plain timing program rather than Google Benchmark: the figure compared is one whole pass over
// the same 10 MB both sides encode, document by document, with add_special_tokens=true as
// transformers.js's encode() does; a warm-up pass over the first MB comes first on both sides.
// Prints "ours NAME: BYTES bytes, TOKENS tokens, SECONDS s, MB/s" (MB = 1e6 bytes of UTF-8 input);
// the token count must match the transformers.js line (same work done).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "text/tokenizer.h"
#include "text/tokenizer_config.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR CORPUS.json [NAME] [REPEAT]\n", argv[0]);
    return 2;
  }
  const std::string name = argc > 3 ? argv[3] : "tokenizer";
  const int repeat = argc > 4 ? std::max(1, std::atoi(argv[4])) : 1;
  auto tok = tf::text::Tokenizer::from_directory(argv[1]);
  if (!tok) {
    std::fprintf(stderr, "error: %s\n", tok.status().to_string().c_str());
    return 1;
  }
  auto corpus = tf::text::read_json_file(argv[2]);
  if (!corpus || !corpus->is_array()) {
    std::fprintf(stderr, "error: %s: %s\n", argv[2],
                 corpus ? "not a JSON array of documents" : corpus.status().to_string().c_str());
    return 1;
  }
  std::vector<std::string> docs;
  size_t bytes = 0;
  for (const auto& d : *corpus) {
    if (!d.is_string()) {
      std::fprintf(stderr, "error: %s: every document must be a string\n", argv[2]);
      return 1;
    }
    docs.push_back(d.get<std::string>());
    bytes += docs.back().size();
  }
  size_t warm = 0;
  for (const auto& d : docs) {
    warm += (*tok)->encode(d).size();
    if (warm > 250000) break;  // ~1 MB of text
  }
  double best = 1e300;
  size_t tokens = 0;
  for (int r = 0; r < repeat; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    size_t n = 0;
    for (const auto& d : docs) n += (*tok)->encode(d).size();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    tokens = n;
  }
  std::printf("ours %s: %zu bytes, %zu tokens, %.3f s, %.2f MB/s\n", name.c_str(), bytes, tokens, best,
              static_cast<double>(bytes) / 1e6 / best);
  return 0;
}
