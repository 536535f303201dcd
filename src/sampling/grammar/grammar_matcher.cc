// See grammar_matcher.h.
#include "sampling/grammar/grammar_matcher.h"

#include <algorithm>

namespace tf::grammar {

namespace {

// Expected length of a UTF-8 sequence from its lead byte; 0 for a byte that cannot lead.
int utf8_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

uint32_t decode(const std::string& seq) {
  const int len = static_cast<int>(seq.size());
  uint32_t cp = static_cast<uint8_t>(seq[0]) & (0x7Fu >> len);
  for (int i = 1; i < len; ++i) cp = (cp << 6) | (static_cast<uint8_t>(seq[static_cast<size_t>(i)]) & 0x3Fu);
  return cp;
}

void normalize(std::vector<std::vector<uint32_t>>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  const Grammar& g = *grammar_;
  size_t elements = 0;
  for (uint32_t a : g.rule_alts[g.root])
    expand(g.elements[a].kind == Element::Kind::kEnd ? std::vector<uint32_t>{} : std::vector<uint32_t>{a},
           state_.stacks, 0, elements);
  // A truncated start would silently drop sentences: dead, and said so (start_over_limit()).
  start_over_limit_ = over_limits(state_.stacks, elements);
  if (start_over_limit_) state_.stacks.clear();
  normalize(state_.stacks);
}

// Brings `stack` to a character on top (or empty), one stack per way of doing so.
void GrammarMatcher::expand(std::vector<uint32_t> stack, std::vector<std::vector<uint32_t>>& out, int depth,
                            size_t& elements) const {
  const Grammar& g = *grammar_;
  // Past the depth the step fails like one past the other limits, rather than drop this path.
  if (depth > kMaxExpansionDepth) elements = kMaxStateElements + 1;
  if (over_limits(out, elements)) return;
  elements += stack.size();  // this call's copy
  if (stack.empty() || g.elements[stack.back()].kind == Element::Kind::kChar) {
    elements += stack.size();
    out.push_back(std::move(stack));
    return;
  }
  const uint32_t top = stack.back();
  const uint32_t rule = g.elements[top].value;
  stack.pop_back();
  // The rest of this alternative resumes after the rule (tail position: nothing to resume).
  if (g.elements[top + 1].kind != Element::Kind::kEnd) stack.push_back(top + 1);
  for (uint32_t a : g.rule_alts[rule]) {
    std::vector<uint32_t> next = stack;
    if (g.elements[a].kind != Element::Kind::kEnd) next.push_back(a);
    expand(std::move(next), out, depth + 1, elements);
  }
}

bool GrammarMatcher::step_code_point(const MatchState& from, uint32_t cp, MatchState& to, size_t* work,
                                     bool* over_limit) const {
  const Grammar& g = *grammar_;
  to.stacks.clear();
  to.pending.clear();
  size_t elements = 0;
  for (const std::vector<uint32_t>& s : from.stacks) {
    if (s.empty()) continue;
    const uint32_t top = s.back();
    if (!g.classes[g.elements[top].value].matches(cp)) continue;
    std::vector<uint32_t> next(s.begin(), s.end() - 1);
    if (g.elements[top + 1].kind != Element::Kind::kEnd) next.push_back(top + 1);
    expand(std::move(next), to.stacks, 0, elements);
    if (over_limits(to.stacks, elements)) {
      to.stacks.clear();
      if (work) *work += elements;
      if (over_limit) *over_limit = true;
      return false;
    }
  }
  if (work) *work += elements;
  normalize(to.stacks);
  return !to.stacks.empty();
}

bool GrammarMatcher::pending_feasible(const MatchState& s) const {
  const Grammar& g = *grammar_;
  const size_t len = static_cast<size_t>(utf8_length(static_cast<uint8_t>(s.pending[0])));
  std::string lo = s.pending, hi = s.pending;
  lo.resize(len, static_cast<char>(0x80));
  hi.resize(len, static_cast<char>(0xBF));
  // Completions with the fewest and most continuation bits, clipped to the code points a
  // sequence of this length may encode (no overlong forms, nothing past U+10FFFF).
  static constexpr uint32_t kShortest[5] = {0, 0, 0x80, 0x800, 0x10000};
  const uint32_t clo = std::max(decode(lo), kShortest[len]), chi = std::min<uint32_t>(decode(hi), 0x10FFFF);
  if (clo > chi) return false;
  // Surrogates are not text either (ED A0..BF leads only to them): the completions are the
  // interval's parts outside U+D800..U+DFFF.
  std::pair<uint32_t, uint32_t> parts[2];
  int n = 0;
  if (clo < 0xD800) parts[n++] = {clo, std::min<uint32_t>(chi, 0xD7FF)};
  if (chi > 0xDFFF) parts[n++] = {std::max<uint32_t>(clo, 0xE000), chi};
  for (const std::vector<uint32_t>& st : s.stacks) {
    if (st.empty()) continue;
    const CharClass& cls = g.classes[g.elements[st.back()].value];
    for (int i = 0; i < n; ++i)
      if (cls.matches_any(parts[i].first, parts[i].second)) return true;
  }
  return false;
}

bool GrammarMatcher::step_byte(const MatchState& from, uint8_t byte, MatchState& to, size_t* work,
                               bool* over_limit) const {
  if (from.pending.empty()) {
    const int len = utf8_length(byte);
    if (len == 0) return false;
    if (len == 1) return step_code_point(from, byte, to, work, over_limit);
    to.stacks = from.stacks;
    if (work)
      for (const auto& s : from.stacks) *work += s.size();
    to.pending.assign(1, static_cast<char>(byte));
    return pending_feasible(to);
  }
  if ((byte & 0xC0) != 0x80) return false;
  std::string seq = from.pending + static_cast<char>(byte);
  const size_t len = static_cast<size_t>(utf8_length(static_cast<uint8_t>(seq[0])));
  if (seq.size() < len) {
    to.stacks = from.stacks;
    if (work)
      for (const auto& s : from.stacks) *work += s.size();
    to.pending = std::move(seq);
    return pending_feasible(to);
  }
  const uint32_t cp = decode(seq);
  // Overlong forms and surrogates are not text.
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
    return false;
  return step_code_point(from, cp, to, work, over_limit);
}

bool GrammarMatcher::accept(std::string_view bytes) {
  MatchState cur = state_, next;
  for (char c : bytes) {
    if (!step_byte(cur, static_cast<uint8_t>(c), next)) return false;
    std::swap(cur, next);
  }
  state_ = std::move(cur);
  return true;
}

bool GrammarMatcher::complete(const MatchState& s) {
  return s.pending.empty() && !s.stacks.empty() && s.stacks.front().empty();  // sorted: an empty stack is first
}

bool GrammarMatcher::alive_with_chars(const MatchState& s) const {
  if (!s.pending.empty()) return true;
  for (const auto& st : s.stacks)
    if (!st.empty()) return true;
  return false;
}

std::string GrammarMatcher::key(const MatchState& s) {
  std::string k = s.pending;
  k += '\xff';
  for (const auto& st : s.stacks) {
    const auto n = static_cast<uint32_t>(st.size());
    k.append(reinterpret_cast<const char*>(&n), sizeof(n));
    k.append(reinterpret_cast<const char*>(st.data()), st.size() * sizeof(uint32_t));
  }
  return k;
}

bool grammar_matches(const Grammar& grammar, std::string_view text) {
  // The matcher only reads the grammar; wrap it without taking ownership.
  GrammarMatcher m(std::shared_ptr<const Grammar>(std::shared_ptr<const Grammar>(), &grammar));
  return m.accept(text) && m.is_complete();
}

}  // namespace tf::grammar
