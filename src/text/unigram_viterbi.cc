// Why flushing at the frontier's common ancestor C is exact: after position p, every path that
// can still be extended crosses the boundary between characters p and p + 1 through a node that
// covers character p (a frontier node: start <= p < end); all of those go back through C, so the
// best path of the whole word does too, and its part up to C can no longer change. Nodes that
// start before C's end and end after it are not frontier nodes (their chains would skip C), so
// none is left in the ring, and later backtraces stop at the first node starting at C's end.
#include "text/unigram_viterbi.h"

#include <algorithm>

namespace tf::text {
namespace {

// Positions between two looks for a settled prefix; the gap doubles after each miss.
constexpr size_t kFirstCheckGap = 64;

}  // namespace

StreamingViterbi::StreamingViterbi(size_t num_chars, size_t max_len, std::vector<TokenId>& out)
    : num_chars_(num_chars),
      window_(std::max<size_t>(max_len, 1) + 1),
      ends_(window_),
      next_check_(kFirstCheckGap),
      check_gap_(kFirstCheckGap),
      out_(out) {}

void StreamingViterbi::add_node(size_t pos, size_t len, TokenId id, double score) {
  double best = 0;
  size_t prev_len = 0;
  if (pos == 0) {
    best = 0.0 + score;
  } else {
    bool have = false;
    for (const EndingNode& l : ends_[pos % window_]) {
      const double s = l.best + score;
      if (!have || s > best) {
        have = true;
        best = s;
        prev_len = pos - l.start;
      }
    }
  }
  if (group_begin_.size() == pos - base_) group_begin_.push_back(records_.size());
  ends_[(pos + len) % window_].push_back({best, pos});
  records_.push_back({id, static_cast<uint32_t>(len), static_cast<uint32_t>(prev_len)});
}

void StreamingViterbi::end_position(size_t pos) {
  ends_[pos % window_].clear();
  if (pos + 1 < num_chars_ && pos + 1 - base_ >= next_check_) try_flush(pos);
}

const StreamingViterbi::NodeRecord& StreamingViterbi::record(NodeRef node) const {
  const size_t group = node.start - base_;
  const size_t end = group + 1 < group_begin_.size() ? group_begin_[group + 1] : records_.size();
  const size_t len = node.end - node.start;
  size_t i = group_begin_[group];
  while (i + 1 < end && records_[i].len != len) ++i;
  return records_[i];
}

bool StreamingViterbi::common_ancestor(NodeRef a, NodeRef b, NodeRef& out) const {
  while (!(a == b)) {
    if (a.start > b.start) {
      a = prev(a);
    } else if (b.start > a.start) {
      b = prev(b);
    } else {
      if (a.start == base_) return false;  // two different first nodes: no common ancestor
      a = prev(a);
      b = prev(b);
    }
  }
  out = a;
  return true;
}

void StreamingViterbi::emit_path(NodeRef last) {
  path_.clear();
  for (NodeRef x = last;; x = prev(x)) {
    const NodeRecord& r = record(x);
    if (r.id >= 0) path_.push_back(r.id);
    if (x.start == base_) break;
  }
  out_.insert(out_.end(), path_.rbegin(), path_.rend());
}

void StreamingViterbi::try_flush(size_t pos) {
  const auto miss = [&] {
    check_gap_ *= 2;
    next_check_ = pos + 1 - base_ + check_gap_;
  };
  bool have = false;
  NodeRef settled{0, 0};
  const size_t last_end = std::min(pos + window_ - 1, num_chars_);
  for (size_t e = pos + 1; e <= last_end; ++e) {
    for (const EndingNode& l : ends_[e % window_]) {
      const NodeRef node{l.start, e};
      if (!have) {
        settled = node;
        have = true;
      } else if (!common_ancestor(settled, node, settled)) {
        return miss();
      }
    }
  }
  if (!have) return miss();
  // A lone frontier node may reach past p + 1; what is settled is then the path up to its start.
  if (settled.end > pos + 1) {
    if (settled.start == base_) return miss();
    settled = prev(settled);
  }
  emit_path(settled);
  const size_t dropped_groups = settled.end - base_;
  const size_t dropped_records =
      dropped_groups < group_begin_.size() ? group_begin_[dropped_groups] : records_.size();
  records_.erase(records_.begin(), records_.begin() + static_cast<std::ptrdiff_t>(dropped_records));
  group_begin_.erase(group_begin_.begin(), group_begin_.begin() + static_cast<std::ptrdiff_t>(std::min(
                                                                      dropped_groups, group_begin_.size())));
  for (size_t& g : group_begin_) g -= dropped_records;
  base_ = settled.end;
  check_gap_ = kFirstCheckGap;
  next_check_ = pos + 1 - base_ + check_gap_;
}

void StreamingViterbi::finish() {
  bool have = false;
  double best = 0;
  size_t start = 0;
  for (const EndingNode& l : ends_[num_chars_ % window_]) {
    if (!have || l.best > best) {
      have = true;
      best = l.best;
      start = l.start;
    }
  }
  if (have) emit_path({start, num_chars_});
}

}  // namespace tf::text
