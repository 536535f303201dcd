// See token_mask.h.
#include "sampling/grammar/token_mask.h"

#include <algorithm>
#include <array>
#include <unordered_map>

namespace tf::grammar {

namespace {

// The states one mask walk meets, each stored once, with their byte transitions as
// they are computed: most bytes of a walk lead from a state back to a state already
// seen (inside a string the state after a character is the state before it), so a
// transition is computed once and then looked up.
class StateGraph {
 public:
  static constexpr int32_t kUnknown = -2, kDead = -1;

  StateGraph(const GrammarMatcher& matcher, uint64_t max_work) : m_(matcher), max_work_(max_work) {
    intern_first(matcher.state());
  }

  // The state after `byte` from state `id` (kDead when refused); false when over budget.
  bool step(int32_t id, uint8_t byte, int32_t& out) {
    int32_t& t = next_[static_cast<size_t>(id)][byte];
    if (t == kUnknown) {
      work_ += states_[static_cast<size_t>(id)].stacks.size() + 1;
      if (work_ > max_work_) return false;
      MatchState to;
      int32_t result = kDead;
      size_t copied = 0;
      bool over_limit = false;
      const bool alive = m_.step_byte(states_[static_cast<size_t>(id)], byte, to, &copied, &over_limit);
      copied_ += copied;
      // A state past the matcher's limits is not known dead: refuse the mask rather than
      // leave out tokens the grammar allows (or every token, with a misleading error).
      if (copied_ > kMaxMaskCopied || over_limit) return false;
      // `t` may dangle once intern() grows next_: store through the index.
      if (alive) {
        size_t elements = 0;
        for (const auto& s : to.stacks) elements += s.size();
        if (!intern(std::move(to), elements, result)) return false;
      }
      next_[static_cast<size_t>(id)][byte] = result;
      out = result;
      return true;
    }
    out = t;
    return true;
  }

 private:
  // False when a new state would take the walk past kMaxMaskStateBytes.
  bool intern(MatchState s, size_t elements, int32_t& id, bool always = false) {
    std::string key = GrammarMatcher::key(s);
    auto it = ids_.find(key);
    if (it != ids_.end()) {
      id = it->second;
      return true;
    }
    bytes_ +=
        2 * (elements * sizeof(uint32_t) + s.stacks.size() * sizeof(s.stacks[0])) + sizeof(next_[0]) + 64;
    if (bytes_ > kMaxMaskStateBytes && !always) return false;
    id = static_cast<int32_t>(states_.size());
    ids_.emplace(std::move(key), id);
    states_.push_back(std::move(s));
    next_.emplace_back();
    next_.back().fill(kUnknown);
    return true;
  }

  int32_t intern_first(MatchState s) {
    size_t elements = 0;
    for (const auto& st : s.stacks) elements += st.size();
    int32_t id = 0;
    (void)intern(std::move(s), elements, id, /*always=*/true);  // the matcher's own state
    return id;
  }

  const GrammarMatcher& m_;
  uint64_t max_work_;
  uint64_t work_ = 0;
  uint64_t copied_ = 0;  // stack elements of the states steps made
  uint64_t bytes_ = 0;   // what the interned states keep
  std::vector<MatchState> states_;
  std::vector<std::array<int32_t, 256>> next_;
  std::unordered_map<std::string, int32_t> ids_;
};

}  // namespace

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes) : bytes_(std::move(token_bytes)) {
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty()) order_.push_back(static_cast<int32_t>(i));
  std::sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  lcp_.assign(order_.size(), 0);
  for (size_t i = 1; i < order_.size(); ++i) {
    const std::string& a = bytes_[static_cast<size_t>(order_[i - 1])];
    const std::string& b = bytes_[static_cast<size_t>(order_[i])];
    const size_t n = std::min(a.size(), b.size());
    size_t k = 0;
    while (k < n && a[k] == b[k]) ++k;
    lcp_[i] = static_cast<uint32_t>(k);
  }
}

bool fill_token_mask(const GrammarMatcher& matcher, const TokenVocabulary& vocab, std::vector<uint8_t>& allowed,
                     uint64_t max_work) {
  allowed.assign(vocab.size(), 0);
  StateGraph graph(matcher, max_work);
  // path[d]: the state after the current token's first d bytes (path[0] = now).
  std::vector<int32_t> path(1, 0);
  size_t dead_at = SIZE_MAX;  // the previous token died on its byte dead_at
  for (size_t i = 0; i < vocab.order_.size(); ++i) {
    const int32_t id = vocab.order_[i];
    const std::string& b = vocab.bytes_[static_cast<size_t>(id)];
    const size_t shared = vocab.lcp_[i];
    if (dead_at != SIZE_MAX && shared > dead_at) continue;  // same dead byte at the same place
    dead_at = SIZE_MAX;
    size_t depth = std::min(shared, path.size() - 1);
    path.resize(depth + 1);
    for (; depth < b.size(); ++depth) {
      int32_t next = StateGraph::kDead;
      if (!graph.step(path[depth], static_cast<uint8_t>(b[depth]), next)) return false;
      if (next == StateGraph::kDead) break;
      path.push_back(next);
    }
    if (depth == b.size()) {
      allowed[static_cast<size_t>(id)] = 1;
    } else {
      dead_at = depth;
    }
  }
  return true;
}

}  // namespace tf::grammar
