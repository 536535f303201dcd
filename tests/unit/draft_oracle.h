// A drafter for speculative decoding's engine tests (EngineOptions::drafter): while
// recording, it notes every prompt + reply it is asked about and drafts nothing; replaying,
// it drafts the tokens that followed the asked tokens in a recorded run that starts with
// them (so every draft is right), or with wrong_at >= 0 one wrong draft per call at an
// index that moves from call to call (so rejections happen at every position).
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace tf::engine {

struct DraftOracle {
  std::mutex mu;
  bool recording = true;
  std::vector<std::vector<int32_t>> runs;
  int wrong_at = -1;
  int calls = 0;

  std::vector<int32_t> drafts(std::span<const int32_t> tokens, int max) {
    std::lock_guard<std::mutex> lock(mu);
    if (recording) {
      for (auto& r : runs)
        if (r.size() < tokens.size() && std::equal(r.begin(), r.end(), tokens.begin())) {
          r.assign(tokens.begin(), tokens.end());
          return {};
        }
      runs.emplace_back(tokens.begin(), tokens.end());
      return {};
    }
    for (const auto& r : runs) {
      if (r.size() <= tokens.size() || !std::equal(tokens.begin(), tokens.end(), r.begin())) continue;
      std::vector<int32_t> d(r.begin() + static_cast<std::ptrdiff_t>(tokens.size()),
                             r.begin() + static_cast<std::ptrdiff_t>(std::min(r.size(), tokens.size() + max)));
      if (wrong_at >= 0 && !d.empty()) {
        const size_t at = static_cast<size_t>(calls++ % (wrong_at + 1)) % d.size();
        d[at] = d[at] == 7 ? 8 : 7;
      }
      return d;
    }
    return {};
  }
};

}  // namespace tf::engine
