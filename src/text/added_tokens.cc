// The "word character" test for single_word follows Hugging Face tokenizers: a letter, a number
// or '_' (checked with PCRE2's \w under UCP, which is exactly that set plus marks/connectors).
#include "text/added_tokens.h"

#include "text/normalizer.h"
#include "text/regex.h"
#include "text/utf8.h"

namespace tf::text {
namespace {

bool is_word_char(char32_t cp) {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
  static const Expected<Regex> re = Regex::compile(R"([\p{L}\p{N}_])");
  if (!re) return false;
  std::string s;
  append_utf8(s, cp);
  return !re->find_all(s).empty();
}

// Last / first code point of a valid UTF-8 string.
char32_t last_cp(std::string_view s) {
  size_t i = s.size();
  while (i > 0 && (static_cast<uint8_t>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i == 0) return 0;
  --i;
  const size_t n = utf8_sequence_length(s, i);
  return n ? decode_utf8_at(s, i, n) : kReplacementChar;
}
char32_t first_cp(std::string_view s) {
  const size_t n = utf8_sequence_length(s, 0);
  return n ? decode_utf8_at(s, 0, n) : kReplacementChar;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens, bool normalized) {
  for (const AddedToken& t : tokens) {
    if (t.normalized != normalized || t.content.empty()) continue;
    int node = 0;
    for (char ch : t.content) {
      const auto c = static_cast<unsigned char>(ch);
      auto it = nodes_[static_cast<size_t>(node)].next.find(c);
      if (it == nodes_[static_cast<size_t>(node)].next.end()) {
        nodes_.emplace_back();
        const int id = static_cast<int>(nodes_.size()) - 1;
        nodes_[static_cast<size_t>(node)].next[c] = id;
        node = id;
      } else {
        node = it->second;
      }
    }
    // A duplicate content keeps the first definition.
    if (nodes_[static_cast<size_t>(node)].token == nullptr) nodes_[static_cast<size_t>(node)].token = &t;
    first_byte_[static_cast<unsigned char>(t.content[0])] = true;
  }
}

void AddedTokenMatcher::for_each_segment(std::string_view text, SegmentSink sink) const {
  struct Match {
    size_t b, e;
    const AddedToken* t;
  };
  size_t prev_end = 0;  // end of the previous kept match, its rstrip included
  size_t pos = 0;       // end of the text handed to the sink so far
  bool any = false;
  // Filters and whitespace extensions, applied left to right, then the segments up to the match.
  const auto keep = [&](Match m) {
    if (m.t->single_word) {
      const bool word_before = m.b > 0 && is_word_char(last_cp(text.substr(0, m.b)));
      const bool word_after = m.e < text.size() && is_word_char(first_cp(text.substr(m.e)));
      if (word_before || word_after) return;
    }
    if (m.t->lstrip) {
      while (m.b > prev_end) {
        const std::string_view before = text.substr(prev_end, m.b - prev_end);
        const char32_t cp = last_cp(before);
        if (!is_unicode_whitespace(cp)) break;
        std::string enc;
        append_utf8(enc, cp);
        m.b -= enc.size();
      }
    }
    if (m.t->rstrip) {
      while (m.e < text.size()) {
        const char32_t cp = first_cp(text.substr(m.e));
        if (!is_unicode_whitespace(cp)) break;
        std::string enc;
        append_utf8(enc, cp);
        m.e += enc.size();
      }
    }
    prev_end = m.e;
    // An rstrip that ran into the next match's lstrip region is clipped by m.b >= pos.
    const size_t b = std::max(m.b, pos);
    if (b > pos) sink(TextSegment{text.substr(pos, b - pos), nullptr});
    sink(TextSegment{text.substr(b, std::max(m.e, b) - b), m.t});
    pos = std::max(m.e, b);
    any = true;
  };
  if (!empty()) {
    size_t i = 0;
    while (i < text.size()) {
      if (!first_byte_[static_cast<unsigned char>(text[i])]) {
        ++i;
        continue;
      }
      int node = 0;
      const AddedToken* best = nullptr;
      size_t best_end = 0;
      for (size_t j = i; j < text.size(); ++j) {
        const Node& n = nodes_[static_cast<size_t>(node)];
        auto it = n.next.find(static_cast<unsigned char>(text[j]));
        if (it == n.next.end()) break;
        node = it->second;
        if (nodes_[static_cast<size_t>(node)].token != nullptr) {
          best = nodes_[static_cast<size_t>(node)].token;
          best_end = j + 1;
        }
      }
      if (best != nullptr) {
        keep({i, best_end, best});
        i = best_end;
      } else {
        ++i;
      }
    }
  }
  if (pos < text.size() || !any) sink(TextSegment{text.substr(pos), nullptr});
}

}  // namespace tf::text
