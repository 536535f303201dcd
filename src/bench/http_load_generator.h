// The HTTP load generator: drives an OpenAI-compatible server the way a user's
// benchmark does (reference-deployment.md §1.3, DecodeBench / PrefillBench).
//
// Design: a thread per concurrent client, each with its own keep-alive
// connection, taking the next request index from a shared counter until all are
// sent, so exactly `concurrency` requests are in flight while work remains.
// /v1/completions gets token-id prompts of exactly prompt_tokens ids (synthesized
// with the server's /tokenize); /v1/chat/completions gets their text (via
// /detokenize), so its prompt count is the server's usage.prompt_tokens (template
// included). Streaming responses are parsed as they arrive and timestamped per
// chunk. Every failure (connection refused, 4xx/5xx, an error inside the stream,
// a malformed chunk, a timeout) becomes an error on that request's record; only a
// server that cannot be reached at all before the run fails the whole run.
#pragma once

#include <string>

#include "bench/bench_record.h"
#include "bench/bench_spec.h"
#include "core/status.h"

namespace tf::bench {

struct HttpTarget {
  std::string base;    // scheme://host:port, what the client connects to
  std::string prefix;  // path prefix before /v1/... ("" or e.g. "/api")
};

// Accepts http[s]://host[:port][/prefix]; a trailing "/v1" is dropped from the
// prefix so both http://h:8888 and http://h:8888/v1 work.
Expected<HttpTarget> parse_bench_url(const std::string& url);

// Preflight (GET /v1/models; fills the model name when the spec has none), prompt
// synthesis, `spec.warmup` discarded requests, then `spec.requests` measured ones.
Expected<BenchRun> run_http_bench(const BenchSpec& spec);

}  // namespace tf::bench
