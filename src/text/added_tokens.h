// Added tokens (tokenizer.json "added_tokens"): strings that are cut out of the input before
// normalization and the model, each becoming its own id. Flags as in Hugging Face tokenizers:
// special (skipped by decode(skip_special_tokens)), lstrip / rstrip (swallow the whitespace on that
// side), normalized (matched in the normalized text instead of the raw text), single_word (only
// matched when not inside a word).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/bpe.h"
#include "text/function_ref.h"

namespace tf::text {

struct AddedToken {
  std::string content;
  TokenId id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// One segment of input text: either plain text for the normalizer/model, or an added token.
struct TextSegment {
  std::string_view text;
  const AddedToken* token = nullptr;  // null for plain text
};

// Receives the segments of a text one at a time, in order; the segment is valid only during the call.
using SegmentSink = FunctionRef<void(const TextSegment&)>;

// Finds added tokens in text: leftmost-longest matches over a byte trie, then the single_word
// filter and the lstrip/rstrip extensions, all in one left-to-right pass.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `tokens` must outlive the matcher; only those with normalized == `normalized` are matched.
  AddedTokenMatcher(const std::vector<AddedToken>& tokens, bool normalized);

  // Cuts `text` into segments and hands them to `sink` as they are found (plain text segments
  // may be empty only when `text` is).
  void for_each_segment(std::string_view text, SegmentSink sink) const;
  bool empty() const { return nodes_.size() <= 1; }

 private:
  struct Node {
    std::unordered_map<unsigned char, int> next;
    const AddedToken* token = nullptr;
  };
  std::vector<Node> nodes_{1};
  bool first_byte_[256] = {};
};

}  // namespace tf::text
