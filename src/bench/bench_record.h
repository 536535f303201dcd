// What a driver observed for each request, and for the run as a whole.
//
// Times are seconds since the start of the measured run (a steady clock), so
// records from different client threads compare directly. A "token time" is the
// arrival of a chunk or engine event that carried generated text: a chunk may
// hold several tokens (speculative decoding, stream intervals), so the token
// count comes from the server's usage (HTTP) or the finish event (offline), and
// falls back to the number of such chunks only when neither is reported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tf::bench {

struct RequestRecord {
  int index = 0;                   // 0..requests-1, in submission order
  bool ok = false;
  std::string error;               // set when !ok: what failed, e.g. "HTTP 404: ..."
  int http_status = 0;             // 0 in offline mode or when no response arrived
  double start_s = 0.0;            // request sent / submitted
  double first_token_s = -1.0;     // first generated text; < 0: none arrived
  double end_s = 0.0;              // last byte / finish event
  std::vector<double> token_times_s;  // arrival of each text-bearing chunk or event
  int64_t prompt_tokens = 0;       // as sent, or the server's usage.prompt_tokens when reported
  int64_t output_tokens = 0;       // generated tokens (see above)
  bool output_tokens_from_usage = false;  // false: counted chunks/events
  std::string finish_reason;
};

struct BenchRun {
  std::string mode;                // "http" or "offline"
  std::string model;               // resolved model name
  double wall_s = 0.0;             // first request sent .. last request ended
  std::vector<RequestRecord> records;  // measured requests only (not warmup)
  std::vector<std::string> notes;  // caveats about how the figures were obtained
};

}  // namespace tf::bench
