// The Viterbi search of the Unigram model, run left to right over a word with bounded memory.
//
// The lattice's nodes are fed one start position at a time (positions ascending); a node's best
// score and predecessor are settled as soon as it is added, since every node ending where it
// starts is already known. Scores of the nodes that may still become predecessors live in a ring
// of max_len + 1 end positions; each node keeps only (id, length, predecessor's length) for the
// backtrace. From time to time the search looks for the node that every path through the
// current frontier goes back through (the frontier's common ancestor): the best path up to that
// node is then final, so its ids are emitted and the records before it dropped. On ordinary text
// paths agree within a few tokens, so memory stays a small window whatever the word's length.
//
// The result is the one transformers.js computes over the whole lattice: the same sums in the
// same order (doubles), a node's predecessor is the first, in insertion order (earliest start), of
// the highest-scoring nodes ending where it starts, and the end's predecessor is the first of the
// highest-scoring nodes ending at the word's end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "text/model.h"

namespace tf::text {

class StreamingViterbi {
 public:
  // `num_chars`: the word's length in code points; `max_len`: the longest node, in code points.
  // Ids are appended to `out`.
  StreamingViterbi(size_t num_chars, size_t max_len, std::vector<TokenId>& out);

  // Adds the node [pos, pos + len) with `id` (-1: an unknown character that yields no id) and
  // `score`. `pos` is the position whose nodes are being added (see end_position).
  void add_node(size_t pos, size_t len, TokenId id, double score);
  // Says that every node starting at `pos` was added; positions go 0, 1, ..., num_chars - 1.
  void end_position(size_t pos);
  // Appends the ids of the rest of the best path; call once, after the last position.
  void finish();

 private:
  struct EndingNode {
    double best;  // best score of a path from the word's start through this node
    size_t start;
  };
  struct NodeRecord {
    TokenId id;
    uint32_t len;
    uint32_t prev_len;  // the predecessor ends at the node's start; 0: no predecessor
  };
  struct NodeRef {
    size_t start, end;
    bool operator==(const NodeRef&) const = default;
  };

  const NodeRecord& record(NodeRef node) const;
  NodeRef prev(NodeRef node) const { return {node.start - record(node).prev_len, node.start}; }
  // Sets `out` to the latest node that the chains of `a` and `b` both go back through and returns
  // true, or returns false when they only meet before base_.
  bool common_ancestor(NodeRef a, NodeRef b, NodeRef& out) const;
  // Emits the path that ends with `last`, back to base_.
  void emit_path(NodeRef last);
  // After position `pos`: emits the settled part of the path, if any, and drops its records.
  void try_flush(size_t pos);

  size_t num_chars_;
  size_t window_;                              // max_len + 1
  std::vector<std::vector<EndingNode>> ends_;  // ends_[e % window_]: nodes ending at e, by start
  size_t base_ = 0;                            // the path before this position is emitted
  std::vector<NodeRecord> records_;            // nodes starting at base_ and after, by start
  std::vector<size_t> group_begin_;            // group_begin_[s - base_]: first record of start s
  size_t next_check_ = 0;                      // try_flush looks again once base_ is this far behind
  size_t check_gap_;
  std::vector<TokenId>& out_;
  std::vector<TokenId> path_;  // scratch for emit_path
};

}  // namespace tf::text
