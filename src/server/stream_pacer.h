// Smooth streaming (STREAM_SMOOTH): a playout buffer between the engine and a stream.
//
// Speculative decoding makes a stream's tokens arrive in bursts: a verify step that kept
// five drafts delivers five tokens at once, then nothing for a step. Read by a person, text
// that jumps and stalls looks slower than the same tokens at an even pace. The pacer holds
// the tokens of a burst and lets them go one by one, spaced by the stream's own recent mean
// gap between tokens, and never holds one longer than the playout limit: the stream runs as
// fast as before on average, only more evenly. Its end is never delayed: once the reply
// finished, what is held goes at once (GenerationSession), so its first and last tokens
// arrive when they would unpaced and a client's measured rate is the same.
//
// Pure timing logic over given times (no clock of its own): GenerationSession asks it when
// the oldest held token may go.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>

namespace tf::server {

class StreamPacer {
 public:
  using Clock = std::chrono::steady_clock;

  // `max_hold`: the longest a token is held; zero turns pacing off (everything goes at once).
  explicit StreamPacer(std::chrono::milliseconds max_hold) : max_hold_(max_hold) {}

  bool enabled() const { return max_hold_.count() > 0; }
  // A token arrived at `t` (in arrival order).
  void arrived(Clock::time_point t);
  // When the oldest of `held` tokens, which arrived at `oldest`, may go: one gap after the
  // previous release, and no later than `oldest` + the limit. Off: `oldest` (at once). The gap
  // is the mean one, shortened in proportion when more tokens are held than a burst brings
  // (mean_burst): a backlog left by a stall drains instead of keeping the stream behind.
  Clock::time_point due(Clock::time_point oldest, size_t held = 1) const;
  // A token went at `t`.
  void released(Clock::time_point t) { last_release_ = t; }
  // The mean gap between the latest arrivals (zero until two arrived), and the mean number of
  // tokens that arrived together (within kTogether of each other) among them.
  Clock::duration mean_gap() const;
  double mean_burst() const;

 private:
  static constexpr size_t kWindow = 16;  // arrivals the mean gap is taken over
  static constexpr auto kTogether = std::chrono::milliseconds(1);
  std::chrono::milliseconds max_hold_;
  std::deque<Clock::time_point> arrivals_;
  Clock::time_point last_release_{};
};

}  // namespace tf::server
