// IncrementalDetokenizer: turns a stream of generated ids into text pieces for streaming
// responses. Guarantees: every piece is valid UTF-8 (a character split across tokens is held back
// until it is complete), and the concatenation of all pieces, including finish(), equals
// Tokenizer::decode(all ids) — nothing is lost or repeated.
//
// Byte-level decoders (GPT-2 style, all current targets) are streamed in O(1) amortized work per
// token: a token adds bytes; the complete UTF-8 prefix is passed on, an incomplete trailing
// sequence waits. Other decoder chains are re-decoded in full at each step (O(n) per token) with
// trailing U+FFFD and whitespace held back, since a later token may still change them.
// With clean_up_tokenization_spaces, the text is also held back where a later token could change
// it: the clean-up rules only ever touch a space and the three characters after it, so when the
// text's last three characters hold no space, everything so far is final; otherwise the last 19
// characters (the sum over the ten rules of their length minus one) wait.
#pragma once

#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace tf::text {

class IncrementalDetokenizer {
 public:
  // `tokenizer` must outlive the detokenizer.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  // Feeds one id; returns the text that became final (possibly empty).
  std::string add(TokenId id);
  // Ends the stream; returns everything still held back.
  std::string finish();

  // All text returned so far.
  const std::string& emitted() const { return emitted_; }
  const std::vector<TokenId>& ids() const { return ids_; }

 private:
  // Appends final raw (pre-clean-up) text and returns what becomes emittable.
  std::string push_raw(const std::string& raw, bool at_end);
  std::string add_generic(bool at_end);

  const Tokenizer& tok_;
  bool skip_special_;
  bool byte_level_;
  bool clean_up_;
  std::vector<TokenId> ids_;
  std::string pending_bytes_;  // byte-level: an incomplete UTF-8 sequence at the end
  // Clean-up window: raw text since the last point where clean-up is known to split, and how
  // much of its cleaned form was already emitted.
  std::string window_raw_;
  size_t window_emitted_ = 0;
  std::string emitted_;
  std::string generic_raw_emitted_;  // generic path: raw text already accounted for
  bool finished_ = false;
};

}  // namespace tf::text
