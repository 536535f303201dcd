// See regex_gbnf.h.
#include "sampling/grammar/regex_gbnf.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <utility>

#include "sampling/grammar/gbnf_writer.h"
#include "text/utf8.h"

namespace tf::grammar {
namespace {

constexpr uint32_t kUnbounded = UINT32_MAX;  // Node::max of * and +
constexpr uint32_t kMaxRepeatCount = 10000;
constexpr int kMaxGroupDepth = 200;
constexpr uint64_t kMaxExpandedItems = 1'000'000;
constexpr uint32_t kNone = UINT32_MAX;  // peek() past the end

// ---------------------------------------------------------------- code-point sets

using Ranges = std::vector<CharRange>;  // sorted, disjoint, non-adjacent once normalized

Ranges digit_set() { return {{'0', '9'}}; }
Ranges word_set() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
// ECMAScript's WhiteSpace and LineTerminator code points.
Ranges space_set() {
  return {{0x09, 0x0D},     {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}

// ---------------------------------------------------------------- the tree

struct Node {
  enum class Kind : uint8_t { kEmpty, kSet, kConcat, kAlt, kRepeat };
  Kind kind = Kind::kEmpty;
  Ranges set;                 // kSet: the code points one character may be
  std::vector<Node> kids;     // kConcat, kAlt: the parts; kRepeat: the body
  uint32_t min = 0, max = 0;  // kRepeat: count bounds, max may be kUnbounded
  uint64_t items = 1;         // size of the tree once repetitions are expanded (a guard)
};

uint64_t saturating_mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
  return a * b;
}

Node make_set(Ranges r) {
  Node n;
  n.kind = Node::Kind::kSet;
  n.set = normalize_ranges(std::move(r));
  return n;
}

Node make_char(uint32_t cp) { return make_set({{cp, cp}}); }

Node make_concat(std::vector<Node> parts) {
  Node n;
  n.kind = Node::Kind::kConcat;
  n.items = 0;
  for (Node& p : parts) {
    if (p.kind == Node::Kind::kEmpty) continue;
    n.items = std::min(UINT64_MAX - p.items, n.items) + p.items;
    if (p.kind == Node::Kind::kConcat) {
      for (Node& k : p.kids) n.kids.push_back(std::move(k));
    } else {
      n.kids.push_back(std::move(p));
    }
  }
  if (n.kids.empty()) return Node{};
  if (n.kids.size() == 1) return std::move(n.kids[0]);
  return n;
}

Node make_alt(std::vector<Node> alts) {
  if (alts.size() == 1) return std::move(alts[0]);
  Node n;
  n.kind = Node::Kind::kAlt;
  n.items = 0;
  for (const Node& a : alts) n.items = std::min(UINT64_MAX - a.items, n.items) + a.items;
  n.kids = std::move(alts);
  return n;
}

Node make_repeat(Node body, uint32_t min, uint32_t max) {
  if (max == 0 || body.kind == Node::Kind::kEmpty) return Node{};
  if (min == 1 && max == 1) return body;
  // (x*){m,n} and (x+){m,n} collapse to one repetition of x (fewer ambiguous parses).
  if (body.kind == Node::Kind::kRepeat && body.max == kUnbounded && body.min <= 1) {
    uint32_t inner_min = body.min;
    Node inner = std::move(body.kids[0]);
    return make_repeat(std::move(inner), inner_min == 0 ? 0 : min, kUnbounded);
  }
  Node n;
  n.kind = Node::Kind::kRepeat;
  n.min = min;
  n.max = max;
  uint64_t copies = max == kUnbounded ? uint64_t{min} + 1 : uint64_t{max};
  n.items = saturating_mul(body.items, std::max<uint64_t>(copies, 1));
  n.kids.push_back(std::move(body));
  return n;
}

bool nullable(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kEmpty:
      return true;
    case Node::Kind::kSet:
      return false;
    case Node::Kind::kConcat:
      return std::all_of(n.kids.begin(), n.kids.end(), [](const Node& k) { return nullable(k); });
    case Node::Kind::kAlt:
      return std::any_of(n.kids.begin(), n.kids.end(), [](const Node& k) { return nullable(k); });
    case Node::Kind::kRepeat:
      return n.min == 0 || nullable(n.kids[0]);
  }
  return false;
}

// The same language without "" (nullopt when nothing else is left). Needed before
// repeating a part: GBNF's x* is x x* | "", left recursive when x can match "".
std::optional<Node> without_empty(const Node& n) {
  if (!nullable(n)) return n;
  switch (n.kind) {
    case Node::Kind::kEmpty:
    case Node::Kind::kSet:
      return std::nullopt;
    case Node::Kind::kAlt: {
      std::vector<Node> alts;
      for (const Node& k : n.kids) {
        if (std::optional<Node> ne = without_empty(k)) alts.push_back(std::move(*ne));
      }
      if (alts.empty()) return std::nullopt;
      return make_alt(std::move(alts));
    }
    case Node::Kind::kConcat: {
      // Every part can be empty: the first non-empty part is part i.
      std::vector<Node> alts;
      for (size_t i = 0; i < n.kids.size(); ++i) {
        std::optional<Node> first = without_empty(n.kids[i]);
        if (!first) continue;
        std::vector<Node> seq{std::move(*first)};
        seq.insert(seq.end(), n.kids.begin() + static_cast<std::ptrdiff_t>(i) + 1, n.kids.end());
        alts.push_back(make_concat(std::move(seq)));
      }
      if (alts.empty()) return std::nullopt;
      return make_alt(std::move(alts));
    }
    case Node::Kind::kRepeat: {
      // A nullable body can stand in for missing copies: x{n,m} = x'{0,m}.
      std::optional<Node> body = without_empty(n.kids[0]);
      if (!body) return std::nullopt;
      return make_repeat(std::move(*body), 1, n.max);
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------- UTF-8

// Decodes `text`; nullopt with *bad_offset set at the first invalid byte.
std::optional<std::vector<uint32_t>> decode_utf8(std::string_view text, size_t* bad_offset) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < text.size();) {
    const size_t len = text::utf8_sequence_length(text, i);
    if (len == 0) {
      *bad_offset = i;
      return std::nullopt;
    }
    out.push_back(static_cast<uint32_t>(text::decode_utf8_at(text, i, len)));
    i += len;
  }
  return out;
}

bool is_hex(uint32_t c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
uint32_t hex_value(uint32_t c) { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; }
bool is_digit(uint32_t c) { return c >= '0' && c <= '9'; }
bool is_ascii_alnum(uint32_t c) { return is_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'z'); }
bool is_surrogate(uint32_t c) { return c >= 0xD800 && c <= 0xDFFF; }

// ---------------------------------------------------------------- the parser

// One item of a bracket class, or one escape: a single code point or a set (\d ...).
struct ClassAtom {
  bool is_set = false;
  uint32_t cp = 0;
  Ranges set;
  Ranges as_ranges() const { return is_set ? set : Ranges{{cp, cp}}; }
};

struct RepeatBounds {
  uint32_t min = 0, max = 0;
  size_t end = 0;  // position after the quantifier
};

class Parser {
 public:
  explicit Parser(std::vector<uint32_t> cps) : cps_(std::move(cps)) {}

  Expected<Node> parse() {
    TF_ASSIGN_OR_RETURN(Node root, parse_alternation(0));
    if (!at_end()) return error(pos_, "unbalanced ')' with no '(' before it");
    return root;
  }

 private:
  bool at_end() const { return pos_ >= cps_.size(); }
  uint32_t peek(size_t ahead = 0) const { return pos_ + ahead < cps_.size() ? cps_[pos_ + ahead] : kNone; }

  static Status error(size_t offset, const std::string& what) {
    return invalid_argument("regex: " + what + " at offset " + std::to_string(offset));
  }
  static std::string quoted(uint32_t cp) {
    std::string s = "'";
    text::append_utf8(s, static_cast<char32_t>(cp));
    return s + "'";
  }

  Expected<Node> parse_alternation(int depth) {
    std::vector<Node> alts;
    TF_ASSIGN_OR_RETURN(Node first, parse_sequence(depth));
    alts.push_back(std::move(first));
    while (peek() == '|') {
      ++pos_;
      TF_ASSIGN_OR_RETURN(Node next, parse_sequence(depth));
      alts.push_back(std::move(next));
    }
    Node n = make_alt(std::move(alts));
    TF_RETURN_IF_ERROR(check_size(n, pos_));
    return n;
  }

  Expected<Node> parse_sequence(int depth) {
    std::vector<Node> items;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (quantifier_at(pos_)) return error(pos_, "quantifier " + quoted(peek()) + " has nothing to repeat");
      TF_ASSIGN_OR_RETURN(std::optional<Node> atom, parse_atom(depth));
      if (!atom) continue;  // an ignored anchor
      TF_ASSIGN_OR_RETURN(Node item, parse_quantifiers(std::move(*atom)));
      items.push_back(std::move(item));
    }
    Node n = make_concat(std::move(items));
    TF_RETURN_IF_ERROR(check_size(n, pos_));
    return n;
  }

  static Status check_size(const Node& n, size_t offset) {
    if (n.items <= kMaxExpandedItems) return Status::ok();
    return error(offset, "repetitions expand to more than " + std::to_string(kMaxExpandedItems) + " items");
  }

  // nullopt: an anchor that full-match semantics makes redundant.
  Expected<std::optional<Node>> parse_atom(int depth) {
    size_t start = pos_;
    switch (peek()) {
      case '(':
        return parse_group(depth);
      case '[':
        return parse_class();
      case '.':
        ++pos_;
        return std::optional<Node>(make_set(complement_ranges({{'\n', '\n'}})));
      case '^':
        if (start != 0) return error(start, "unsupported anchor '^' (only allowed at the very start)");
        ++pos_;
        return std::optional<Node>();
      case '$':
        if (start + 1 != cps_.size())
          return error(start, "unsupported anchor '$' (only allowed at the very end)");
        ++pos_;
        return std::optional<Node>();
      case '\\': {
        TF_ASSIGN_OR_RETURN(ClassAtom e, parse_escape(/*in_class=*/false));
        return std::optional<Node>(make_set(e.as_ranges()));
      }
      default:
        return std::optional<Node>(make_char(cps_[pos_++]));
    }
  }

  Expected<std::optional<Node>> parse_group(int depth) {
    size_t open = pos_++;
    if (depth >= kMaxGroupDepth)
      return error(open, "groups nested deeper than " + std::to_string(kMaxGroupDepth));
    if (peek() == '?') TF_RETURN_IF_ERROR(parse_group_kind(open));
    TF_ASSIGN_OR_RETURN(Node inner, parse_alternation(depth + 1));
    if (peek() != ')') return error(open, "unbalanced '(' that is never closed");
    ++pos_;
    return std::optional<Node>(std::move(inner));
  }

  // After "(?": accepts ?: ?P<name> ?<name> (plain groups here), refuses the rest.
  Status parse_group_kind(size_t open) {
    uint32_t c = peek(1), c2 = peek(2);
    if (c == ':') {
      pos_ += 2;
      return Status::ok();
    }
    if (c == '=' || c == '!')
      return error(open, "unsupported lookahead '(?" + std::string(1, static_cast<char>(c)) + "'");
    if (c == '<' && (c2 == '=' || c2 == '!')) {
      return error(open, "unsupported lookbehind '(?<" + std::string(1, static_cast<char>(c2)) + "'");
    }
    if (c == 'P' && c2 == '=') return error(open, "unsupported backreference '(?P='");
    if (c == '<' || (c == 'P' && c2 == '<')) {
      pos_ += c == '<' ? 2 : 3;
      return parse_group_name(open);
    }
    if (c == 'P') return error(open, "unsupported group syntax '(?P'");
    if (c == '>') return error(open, "unsupported atomic group '(?>'");
    if (c == '#') return error(open, "unsupported comment group '(?#'");
    if (c == '-' || (is_ascii_alnum(c) && !is_digit(c))) {
      return error(open, "unsupported inline flags '(?" + std::string(1, static_cast<char>(c)) + "'");
    }
    return error(open, "unsupported group syntax '(?'");
  }

  Status parse_group_name(size_t open) {
    size_t start = pos_;
    while (!at_end() && (is_ascii_alnum(peek()) || peek() == '_')) ++pos_;
    if (pos_ == start || is_digit(cps_[start]) || peek() != '>') return error(open, "bad group name");
    ++pos_;
    return Status::ok();
  }

  // The quantifier starting at `at`, if one does ({ that starts none is a literal).
  std::optional<RepeatBounds> quantifier_bounds(size_t at) const {
    if (at >= cps_.size()) return std::nullopt;
    uint32_t c = cps_[at];
    if (c == '*') return RepeatBounds{0, kUnbounded, at + 1};
    if (c == '+') return RepeatBounds{1, kUnbounded, at + 1};
    if (c == '?') return RepeatBounds{0, 1, at + 1};
    if (c != '{') return std::nullopt;
    size_t i = at + 1;
    auto number = [&](std::optional<uint64_t>& out) {
      uint64_t v = 0;
      size_t begin = i;
      while (i < cps_.size() && is_digit(cps_[i]))
        v = std::min<uint64_t>(v * 10 + (cps_[i++] - '0'), 1u << 30);
      if (i > begin) out = v;
    };
    std::optional<uint64_t> lo, hi;
    number(lo);
    bool comma = i < cps_.size() && cps_[i] == ',';
    if (comma) {
      ++i;
      number(hi);
    }
    if (i >= cps_.size() || cps_[i] != '}' || (!lo && !hi)) return std::nullopt;
    uint32_t min = static_cast<uint32_t>(lo.value_or(0));
    uint32_t max = comma ? (hi ? static_cast<uint32_t>(*hi) : kUnbounded) : min;
    return RepeatBounds{min, max, i + 1};
  }

  bool quantifier_at(size_t at) const { return quantifier_bounds(at).has_value(); }

  Expected<Node> parse_quantifiers(Node atom) {
    bool quantified = false;
    while (std::optional<RepeatBounds> q = quantifier_bounds(pos_)) {
      size_t start = pos_;
      if (quantified) return error(start, "quantifier " + quoted(peek()) + " follows another quantifier");
      if (q->max != kUnbounded && q->min > q->max) return error(start, "repeat count {n,m} has n > m");
      if (q->min > kMaxRepeatCount || (q->max != kUnbounded && q->max > kMaxRepeatCount)) {
        return error(start, "repeat count above " + std::to_string(kMaxRepeatCount));
      }
      pos_ = q->end;
      if (peek() == '?') {
        ++pos_;  // lazy: the same language
      } else if (peek() == '+') {
        return error(pos_, "unsupported possessive quantifier");
      }
      atom = make_repeat(std::move(atom), q->min, q->max);
      TF_RETURN_IF_ERROR(check_size(atom, start));
      quantified = true;
    }
    return atom;
  }

  Expected<std::optional<Node>> parse_class() {
    size_t open = pos_++;
    bool negated = peek() == '^';
    if (negated) ++pos_;
    Ranges set;
    for (bool first = true;; first = false) {
      if (at_end()) return error(open, "unbalanced '[' that is never closed");
      if (peek() == ']' && !first) break;
      size_t item = pos_;
      TF_ASSIGN_OR_RETURN(ClassAtom lo, parse_class_atom(open));
      if (peek() == '-' && peek(1) != ']' && peek(1) != kNone) {
        ++pos_;
        TF_ASSIGN_OR_RETURN(ClassAtom hi, parse_class_atom(open));
        if (lo.is_set || hi.is_set)
          return error(item, "bad character range: a class like \\d cannot end a range");
        if (lo.cp > hi.cp)
          return error(item, "bad character range: " + quoted(lo.cp) + " > " + quoted(hi.cp));
        set.push_back({lo.cp, hi.cp});
      } else {
        Ranges r = lo.as_ranges();
        set.insert(set.end(), r.begin(), r.end());
      }
    }
    ++pos_;  // ']'
    set = normalize_ranges(std::move(set));
    return std::optional<Node>(make_set(negated ? complement_ranges(set) : set));
  }

  Expected<ClassAtom> parse_class_atom(size_t open) {
    if (at_end()) return error(open, "unbalanced '[' that is never closed");
    if (peek() == '\\') return parse_escape(/*in_class=*/true);
    return ClassAtom{false, cps_[pos_++], {}};
  }

  static ClassAtom set_atom(Ranges r, bool negate) {
    r = normalize_ranges(std::move(r));
    return ClassAtom{true, 0, negate ? complement_ranges(r) : r};
  }

  Expected<ClassAtom> parse_escape(bool in_class) {
    size_t start = pos_++;
    if (at_end()) return error(start, "pattern ends with a lone backslash");
    uint32_t c = cps_[pos_++];
    auto cp = [](uint32_t v) { return ClassAtom{false, v, {}}; };
    switch (c) {
      case 'd':
      case 'D':
        return set_atom(digit_set(), c == 'D');
      case 'w':
      case 'W':
        return set_atom(word_set(), c == 'W');
      case 's':
      case 'S':
        return set_atom(space_set(), c == 'S');
      case 'n':
        return cp('\n');
      case 'r':
        return cp('\r');
      case 't':
        return cp('\t');
      case 'f':
        return cp('\f');
      case 'v':
        return cp('\v');
      case '0':
        if (is_digit(peek())) return error(start, "unsupported octal escape");
        return cp(0);
      case 'b':
        if (in_class) return cp('\b');
        return error(start, "unsupported word boundary \\b");
      case 'B':
        return error(start, "unsupported word boundary \\B");
      case 'k':
        return error(start, "unsupported backreference \\k");
      case 'x':
        return parse_hex_escape(start, 2);
      case 'u':
        if (peek() == '{') return parse_braced_hex_escape(start);
        return parse_hex_escape(start, 4);
      case 'U':
        return parse_hex_escape(start, 8);
      case 'A':
      case 'Z':
      case 'z':
      case 'G':
        return error(start, "unsupported anchor \\" + std::string(1, static_cast<char>(c)));
      case 'p':
      case 'P':
        return error(start, "unsupported Unicode property escape");
      case 'N':
        return error(start, "unsupported named character escape");
      case 'c':
        return error(start, "unsupported control escape");
      default:
        break;
    }
    if (is_digit(c)) {
      return error(start, in_class ? "unsupported octal escape" : "unsupported backreference");
    }
    if (is_ascii_alnum(c)) return error(start, "unknown escape \\" + std::string(1, static_cast<char>(c)));
    return cp(c);  // \. \\ \[ \/ ...: the character itself
  }

  // \xHH, \uHHHH (a surrogate pair \uD83D\uDE00 is one code point), \UHHHHHHHH.
  Expected<ClassAtom> parse_hex_escape(size_t start, int digits) {
    TF_ASSIGN_OR_RETURN(uint32_t v, read_hex(start, digits));
    if (digits == 4 && v >= 0xD800 && v <= 0xDBFF && peek() == '\\' && peek(1) == 'u') {
      size_t save = pos_;
      pos_ += 2;
      Expected<uint32_t> low = read_hex(start, 4);
      if (low.has_value() && *low >= 0xDC00 && *low <= 0xDFFF) {
        return ClassAtom{false, 0x10000 + ((v - 0xD800) << 10) + (*low - 0xDC00), {}};
      }
      pos_ = save;
    }
    return checked_code_point(start, v);
  }

  Expected<ClassAtom> parse_braced_hex_escape(size_t start) {
    ++pos_;  // '{'
    uint64_t v = 0;
    size_t digits = 0;
    while (is_hex(peek()) && digits < 8) {
      v = v * 16 + hex_value(cps_[pos_++]);
      ++digits;
    }
    if (digits == 0 || peek() != '}') return error(start, "bad escape \\u{...}: expected hex digits and '}'");
    ++pos_;
    return checked_code_point(start, v);
  }

  Expected<uint32_t> read_hex(size_t start, int digits) {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (!is_hex(peek()))
        return error(start, "bad hex escape: expected " + std::to_string(digits) + " hex digits");
      v = v * 16 + hex_value(cps_[pos_++]);
    }
    return v;
  }

  static Expected<ClassAtom> checked_code_point(size_t start, uint64_t v) {
    if (v > kMaxCodePoint) return error(start, "escape beyond U+10FFFF");
    if (is_surrogate(static_cast<uint32_t>(v)))
      return error(start, "lone surrogate escape (it cannot match UTF-8 text)");
    return ClassAtom{false, static_cast<uint32_t>(v), {}};
  }

  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------- printing GBNF

bool is_single_char(const Node& n) {
  return n.kind == Node::Kind::kSet && n.set.size() == 1 && n.set[0].lo == n.set[0].hi;
}

std::string emit_alternatives(const Node& n);

// Something a quantifier can follow.
std::string emit_primary(const Node& n) {
  if (n.kind == Node::Kind::kSet) return gbnf_class(n.set);
  return "(" + emit_alternatives(n) + ")";
}

std::string emit_repeat(const Node& n) {
  const Node* body = &n.kids[0];
  uint32_t min = n.min;
  std::optional<Node> non_empty;
  if (nullable(*body)) {
    non_empty = without_empty(*body);
    if (!non_empty) return "\"\"";
    body = &*non_empty;
    min = 0;
  }
  std::string out = emit_primary(*body);
  if (min == 0 && n.max == kUnbounded) return out + "*";
  if (min == 1 && n.max == kUnbounded) return out + "+";
  if (min == 0 && n.max == 1) return out + "?";
  if (min == n.max) return out + "{" + std::to_string(min) + "}";
  if (n.max == kUnbounded) return out + "{" + std::to_string(min) + ",}";
  return out + "{" + std::to_string(min) + "," + std::to_string(n.max) + "}";
}

// One alternative: items separated by spaces, runs of single characters as one literal.
std::string emit_sequence(const Node& n) {
  switch (n.kind) {
    case Node::Kind::kEmpty:
      return "\"\"";
    case Node::Kind::kAlt:
      return "(" + emit_alternatives(n) + ")";
    case Node::Kind::kRepeat:
      return emit_repeat(n);
    case Node::Kind::kSet:
      return gbnf_class(n.set);
    case Node::Kind::kConcat:
      break;
  }
  std::string out;
  std::vector<uint32_t> run;
  auto flush = [&] {
    if (run.empty()) return;
    out += (out.empty() ? "" : " ") + gbnf_string(run);
    run.clear();
  };
  for (const Node& k : n.kids) {
    if (is_single_char(k)) {
      run.push_back(k.set[0].lo);
      continue;
    }
    flush();
    out += (out.empty() ? "" : " ") + emit_sequence(k);
  }
  flush();
  return out;
}

std::string emit_alternatives(const Node& n) {
  if (n.kind != Node::Kind::kAlt) return emit_sequence(n);
  std::string out;
  for (const Node& k : n.kids) out += (out.empty() ? "" : " | ") + emit_sequence(k);
  return out;
}

bool valid_rule_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return is_ascii_alnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

}  // namespace

Expected<std::string> regex_to_gbnf(std::string_view pattern, std::string_view rule_prefix) {
  if (!valid_rule_name(rule_prefix)) {
    return invalid_argument("regex: rule name '" + std::string(rule_prefix) + "' is not [A-Za-z0-9_-]+");
  }
  size_t bad = 0;
  std::optional<std::vector<uint32_t>> cps = decode_utf8(pattern, &bad);
  if (!cps) return invalid_argument("regex: invalid UTF-8 at byte offset " + std::to_string(bad));
  TF_ASSIGN_OR_RETURN(Node tree, Parser(std::move(*cps)).parse());
  return std::string(rule_prefix) + " ::= " + emit_alternatives(tree) + "\n";
}

std::string choice_to_gbnf(const std::vector<std::string>& choices) {
  std::set<std::string> seen;
  std::string alts;
  for (const std::string& c : choices) {
    if (!seen.insert(c).second) continue;
    alts += (alts.empty() ? "" : " | ") + gbnf_literal(c);
  }
  if (alts.empty()) alts = gbnf_class({});  // matches nothing
  return "root ::= " + alts + "\n";
}

}  // namespace tf::grammar
