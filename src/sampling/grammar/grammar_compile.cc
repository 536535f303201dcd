// GBNF text -> Grammar (grammar.h): a recursive-descent parser into a small AST, then
// the AST lowered into flat alternatives, with groups and repetitions as generated
// rules, and the checks the matcher relies on (every reference defined, a root, no
// left recursion). Everything built is charged to a GrammarBudget (grammar_budget.h).
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "sampling/grammar/gbnf_writer.h"
#include "sampling/grammar/grammar_budget.h"
#include "sampling/grammar/grammar_matcher.h"
#include "text/utf8.h"

namespace tf::grammar {

namespace {

constexpr int kMaxRepeat = 10000;
constexpr int kMaxNesting = 200;
// Generated rules are named after their parent; a long parent name is cut to this many
// bytes first, so 10,000 generated rules do not each copy a megabyte-long name.
constexpr size_t kMaxNameBase = 64;

struct Node {
  enum class Kind { kAlt, kSeq, kClass, kLiteral, kRef, kRepeat };
  Kind kind = Kind::kSeq;
  std::vector<Node> kids;      // kAlt: sequences; kSeq: items; kRepeat: the repeated item
  CharClass cls;               // kClass
  std::vector<uint32_t> text;  // kLiteral: its code points (one node, not one per character)
  std::string ref;         // kRef
  int min = 0, max = -1;   // kRepeat; max -1 = unbounded
};

Node class_node(uint32_t lo, uint32_t hi, bool negated = false) {
  Node n;
  n.kind = Node::Kind::kClass;
  n.cls.ranges.push_back({lo, hi});
  n.cls.negated = negated;
  return n;
}

// Decodes one UTF-8 code point at text[pos]; a byte that is not UTF-8 stands for itself.
uint32_t decode_utf8(std::string_view text, size_t& pos) {
  const size_t len = text::utf8_sequence_length(text, pos);
  const uint32_t cp = len == 0 ? static_cast<uint8_t>(text[pos]) : static_cast<uint32_t>(text::decode_utf8_at(text, pos, len));
  pos += len == 0 ? 1 : len;
  return cp;
}

class Parser {
 public:
  Parser(std::string_view text, GrammarBudget& budget) : s_(text), budget_(budget) {}

  Status parse(std::vector<std::pair<std::string, Node>>& rules) {
    skip_space();
    while (pos_ < s_.size()) {
      std::string name = parse_name();
      if (name.empty()) return error("expected a rule name");
      // The name is kept three times (the rule list, the name map, Grammar::rule_names).
      if (!budget_.charge(3 * (sizeof(std::string) + name.size())))
        return grammar_too_large("its text parses into more than the limit");
      skip_space();
      if (s_.substr(pos_, 3) != "::=") return error("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      Node body;
      if (Status st = parse_alternatives(body, 0); !st.is_ok()) return st;
      rules.emplace_back(std::move(name), std::move(body));
      skip_space();
    }
    return Status::ok();
  }

 private:
  Status error(const std::string& what) const {
    int line = 1 + static_cast<int>(std::count(s_.begin(), s_.begin() + static_cast<std::ptrdiff_t>(std::min(pos_, s_.size())), '\n'));
    return invalid_argument("grammar: line " + std::to_string(line) + ": " + what);
  }

  // Charges one more tree node (and `extra` bytes it owns) to the budget.
  Status charge_node(size_t extra = 0) {
    if (budget_.charge(sizeof(Node) + extra)) return Status::ok();
    return grammar_too_large("its text parses into more than the limit");
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }

  void skip_space() {
    while (pos_ < s_.size()) {
      char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    size_t start = pos_;
    while (pos_ < s_.size() && name_char(s_[pos_])) ++pos_;
    return std::string(s_.substr(start, pos_ - start));
  }

  // True when the next thing is `name ::=`: the start of the next rule.
  bool at_rule_start() const {
    size_t p = pos_;
    while (p < s_.size() && name_char(s_[p])) ++p;
    if (p == pos_) return false;
    while (p < s_.size() && (s_[p] == ' ' || s_[p] == '\t' || s_[p] == '\n' || s_[p] == '\r')) ++p;
    return s_.substr(p, 3) == "::=";
  }

  Status parse_hex(int digits, uint32_t& cp) {
    cp = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= s_.size()) return error("truncated escape");
      char c = s_[pos_++];
      int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (v < 0) return error("bad hexadecimal digit in escape");
      cp = cp * 16 + static_cast<uint32_t>(v);
    }
    if (cp > 0x10FFFF) return error("escape beyond U+10FFFF");
    return Status::ok();
  }

  // One (possibly escaped) character of a literal or class.
  Status parse_char(uint32_t& cp) {
    if (pos_ >= s_.size()) return error("unexpected end of grammar");
    if (s_[pos_] != '\\') {
      cp = decode_utf8(s_, pos_);
      return Status::ok();
    }
    ++pos_;
    if (pos_ >= s_.size()) return error("truncated escape");
    char c = s_[pos_++];
    switch (c) {
      case 'n': cp = '\n'; return Status::ok();
      case 'r': cp = '\r'; return Status::ok();
      case 't': cp = '\t'; return Status::ok();
      case 'x': return parse_hex(2, cp);
      case 'u': return parse_hex(4, cp);
      case 'U': return parse_hex(8, cp);
      case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
        cp = static_cast<unsigned char>(c);
        return Status::ok();
      default:
        return error(std::string("unknown escape '\\") + c + "'");
    }
  }

  Status parse_literal(Node& lit) {
    lit.kind = Node::Kind::kLiteral;
    const size_t start = pos_++;  // the opening quote
    while (true) {
      if (pos_ >= s_.size()) {
        pos_ = start;
        return error("unterminated string literal");
      }
      if (s_[pos_] == '"') {
        ++pos_;
        return Status::ok();
      }
      uint32_t cp = 0;
      if (Status st = parse_char(cp); !st.is_ok()) return st;
      if (!budget_.charge(sizeof(uint32_t)))
        return grammar_too_large("its text parses into more than the limit");
      lit.text.push_back(cp);
    }
  }

  Status parse_class(Node& out) {
    ++pos_;  // [
    out.kind = Node::Kind::kClass;
    if (pos_ < s_.size() && s_[pos_] == '^') {
      out.cls.negated = true;
      ++pos_;
    }
    while (true) {
      if (pos_ >= s_.size()) return error("unterminated character class");
      if (s_[pos_] == ']') {
        ++pos_;
        return Status::ok();
      }
      uint32_t lo = 0, hi = 0;
      if (Status st = parse_char(lo); !st.is_ok()) return st;
      hi = lo;
      if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
        ++pos_;
        if (Status st = parse_char(hi); !st.is_ok()) return st;
        if (hi < lo) return error("character range out of order");
      }
      if (!budget_.charge(sizeof(CharRange)))
        return grammar_too_large("its text parses into more than the limit");
      out.cls.ranges.push_back({lo, hi});
    }
  }

  Status parse_int(int& v) {
    size_t start = pos_;
    v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (s_[pos_++] - '0');
      if (v > kMaxRepeat) return error("repetition count above " + std::to_string(kMaxRepeat));
    }
    return pos_ == start ? error("expected a number in '{}'") : Status::ok();
  }

  // Applies a postfix operator to the last item of `seq`, if there is one.
  Status parse_postfix(Node& seq) {
    if (pos_ >= s_.size()) return Status::ok();
    char c = s_[pos_];
    int lo = 0, hi = -1;
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      lo = 1;
      ++pos_;
    } else if (c == '?') {
      hi = 1;
      ++pos_;
    } else if (c == '{') {
      ++pos_;
      skip_space();
      if (Status st = parse_int(lo); !st.is_ok()) return st;
      skip_space();
      hi = lo;
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        skip_space();
        hi = -1;
        if (pos_ < s_.size() && s_[pos_] != '}')
          if (Status st = parse_int(hi); !st.is_ok()) return st;
        skip_space();
      }
      if (pos_ >= s_.size() || s_[pos_] != '}') return error("expected '}'");
      ++pos_;
      if (hi >= 0 && hi < lo) return error("repetition {m,n} with n < m");
    } else {
      return Status::ok();
    }
    if (seq.kids.empty()) return error(std::string("'") + c + "' follows nothing");
    if (Status st = charge_node(); !st.is_ok()) return st;
    Node rep;
    rep.kind = Node::Kind::kRepeat;
    rep.min = lo;
    rep.max = hi;
    rep.kids.push_back(std::move(seq.kids.back()));
    seq.kids.back() = std::move(rep);
    return Status::ok();
  }

  Status parse_sequence(Node& seq, int depth) {
    seq.kind = Node::Kind::kSeq;
    while (true) {
      skip_space();
      if (pos_ >= s_.size()) return Status::ok();
      char c = s_[pos_];
      if (c == '|' || c == ')') return Status::ok();
      if (depth == 0 && at_rule_start()) return Status::ok();
      if (Status st = charge_node(c == '.' ? sizeof(CharRange) : 0); !st.is_ok()) return st;
      if (c == '"') {
        // A postfix applies to the whole literal.
        Node lit;
        if (Status st = parse_literal(lit); !st.is_ok()) return st;
        seq.kids.push_back(std::move(lit));
      } else if (c == '[') {
        Node cls;
        if (Status st = parse_class(cls); !st.is_ok()) return st;
        seq.kids.push_back(std::move(cls));
      } else if (c == '.') {
        ++pos_;
        seq.kids.push_back(class_node(0, 0x10FFFF));
      } else if (c == '(') {
        ++pos_;
        if (depth + 1 > kMaxNesting) return error("groups nest too deeply");
        Node group;
        if (Status st = parse_alternatives(group, depth + 1); !st.is_ok()) return st;
        skip_space();
        if (pos_ >= s_.size() || s_[pos_] != ')') return error("expected ')'");
        ++pos_;
        seq.kids.push_back(std::move(group));
      } else if (name_char(c)) {
        Node ref;
        ref.kind = Node::Kind::kRef;
        ref.ref = parse_name();
        if (!budget_.charge(ref.ref.size()))
          return grammar_too_large("its text parses into more than the limit");
        seq.kids.push_back(std::move(ref));
      } else {
        return error(std::string("unexpected character '") + c + "'");
      }
      if (Status st = parse_postfix(seq); !st.is_ok()) return st;
    }
  }

  Status parse_alternatives(Node& alt, int depth) {
    alt.kind = Node::Kind::kAlt;
    while (true) {
      if (Status st = charge_node(); !st.is_ok()) return st;
      Node seq;
      if (Status st = parse_sequence(seq, depth); !st.is_ok()) return st;
      alt.kids.push_back(std::move(seq));
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return Status::ok();
    }
  }

  std::string_view s_;
  GrammarBudget& budget_;
  size_t pos_ = 0;
};

// Lowers the AST into Grammar's flat form.
class Lowering {
 public:
  Lowering(Grammar& g, const std::map<std::string, uint32_t>& names, GrammarBudget& budget)
      : g_(g), names_(names), budget_(budget) {}

  Status rule(uint32_t index, const Node& body) { return emit_alternatives(index, body); }

 private:
  Status spend(size_t bytes) {
    if (budget_.charge(bytes)) return Status::ok();
    return grammar_too_large("it compiles to more than the limit");
  }

  // `elements` elements in `alts` alternatives (their offsets in rule_alts).
  Status spend_elements(size_t elements, size_t alts = 0) {
    return spend(elements * sizeof(Element) + alts * sizeof(uint32_t));
  }

  Status new_rule(uint32_t parent, uint32_t& id) {
    std::string name =
        g_.rule_names[parent].substr(0, kMaxNameBase) + "_" + std::to_string(g_.rule_alts.size());
    // The rule's alternatives vector and name, each with a heap block.
    if (Status st = spend(sizeof(std::vector<uint32_t>) + sizeof(std::string) + name.size() + 32);
        !st.is_ok())
      return st;
    id = static_cast<uint32_t>(g_.rule_alts.size());
    g_.rule_alts.emplace_back();
    g_.rule_names.push_back(std::move(name));
    return Status::ok();
  }

  // Equal classes are stored once (a literal's characters repeat: "aaaa" needs one class).
  Status add_class(const CharClass& c, uint32_t& index) {
    CharClass cls{normalize_ranges(c.ranges), c.negated};
    std::string key(cls.negated ? 1 : 0, '!');
    key.append(reinterpret_cast<const char*>(cls.ranges.data()), cls.ranges.size() * sizeof(CharRange));
    auto [it, fresh] = class_index_.try_emplace(std::move(key), static_cast<uint32_t>(g_.classes.size()));
    index = it->second;
    if (!fresh) return Status::ok();
    if (Status st = spend(sizeof(CharClass) + 2 * cls.ranges.size() * sizeof(CharRange) + 64); !st.is_ok())
      return st;
    g_.classes.push_back(std::move(cls));
    return Status::ok();
  }

  Status emit_alternatives(uint32_t rule, const Node& alt) {
    if (alt.kind != Node::Kind::kAlt) {
      Node wrap;
      wrap.kind = Node::Kind::kAlt;
      wrap.kids.push_back(alt);
      return emit_alternatives(rule, wrap);
    }
    for (const Node& seq : alt.kids) {
      std::vector<Element> elems;
      if (Status st = emit_sequence(rule, seq, elems); !st.is_ok()) return st;
      if (Status st = spend_elements(elems.size() + 1, 1); !st.is_ok()) return st;
      g_.rule_alts[rule].push_back(static_cast<uint32_t>(g_.elements.size()));
      g_.elements.insert(g_.elements.end(), elems.begin(), elems.end());
      g_.elements.push_back({Element::Kind::kEnd, 0});
    }
    return Status::ok();
  }

  Status emit_sequence(uint32_t rule, const Node& seq, std::vector<Element>& out) {
    if (seq.kind != Node::Kind::kSeq) return emit_item(rule, seq, out);
    for (const Node& item : seq.kids)
      if (Status st = emit_item(rule, item, out); !st.is_ok()) return st;
    return Status::ok();
  }

  // An item as one element (a class, a reference, or a generated rule).
  Status single_element(uint32_t rule, const Node& item, Element& out) {
    if (item.kind == Node::Kind::kClass || (item.kind == Node::Kind::kLiteral && item.text.size() == 1)) {
      uint32_t index = 0;
      const CharClass& cls =
          item.kind == Node::Kind::kClass ? item.cls : CharClass{{{item.text[0], item.text[0]}}, false};
      if (Status st = add_class(cls, index); !st.is_ok()) return st;
      out = {Element::Kind::kChar, index};
      return Status::ok();
    }
    if (item.kind == Node::Kind::kRef) return reference(item.ref, out);
    uint32_t sub = 0;
    if (Status st = new_rule(rule, sub); !st.is_ok()) return st;
    if (Status st = emit_alternatives(sub, item); !st.is_ok()) return st;
    out = {Element::Kind::kRule, sub};
    return Status::ok();
  }

  Status reference(const std::string& name, Element& out) {
    auto it = names_.find(name);
    if (it == names_.end()) return invalid_argument("grammar: rule '" + name + "' is used but never defined");
    out = {Element::Kind::kRule, it->second};
    return Status::ok();
  }

  Status emit_item(uint32_t rule, const Node& item, std::vector<Element>& out) {
    switch (item.kind) {
      case Node::Kind::kClass:
      case Node::Kind::kRef:
      case Node::Kind::kAlt:
      case Node::Kind::kSeq: {
        Element e;
        if (item.kind == Node::Kind::kSeq) return emit_sequence(rule, item, out);
        if (Status st = single_element(rule, item, e); !st.is_ok()) return st;
        if (Status st = spend_elements(1); !st.is_ok()) return st;
        out.push_back(e);
        return Status::ok();
      }
      case Node::Kind::kLiteral:
        if (Status st = spend_elements(item.text.size()); !st.is_ok()) return st;
        for (uint32_t cp : item.text) {
          uint32_t index = 0;
          if (Status st = add_class(CharClass{{{cp, cp}}, false}, index); !st.is_ok()) return st;
          out.push_back({Element::Kind::kChar, index});
        }
        return Status::ok();
      case Node::Kind::kRepeat:
        return emit_repeat(rule, item, out);
    }
    return Status::ok();
  }

  // x{min,max}: x min times, then a chain of optional copies (or a star rule).
  Status emit_repeat(uint32_t rule, const Node& rep, std::vector<Element>& out) {
    Element x;
    if (Status st = single_element(rule, rep.kids[0], x); !st.is_ok()) return st;
    if (Status st = spend_elements(static_cast<size_t>(rep.min) + 1); !st.is_ok()) return st;
    for (int i = 0; i < rep.min; ++i) out.push_back(x);
    if (rep.max < 0) {  // star: s ::= x s | ""
      uint32_t s = 0;
      if (Status st = new_rule(rule, s); !st.is_ok()) return st;
      if (Status st = spend_elements(4, 2); !st.is_ok()) return st;
      g_.rule_alts[s].push_back(static_cast<uint32_t>(g_.elements.size()));
      g_.elements.insert(g_.elements.end(), {x, {Element::Kind::kRule, s}, {Element::Kind::kEnd, 0}});
      g_.rule_alts[s].push_back(static_cast<uint32_t>(g_.elements.size()));
      g_.elements.push_back({Element::Kind::kEnd, 0});
      out.push_back({Element::Kind::kRule, s});
      return Status::ok();
    }
    // Optional tail of up to k copies: o_k ::= x o_{k-1} | "", built from o_1 up.
    Element tail{Element::Kind::kEnd, 0};
    for (int k = 1; k <= rep.max - rep.min; ++k) {
      uint32_t o = 0;
      if (Status st = new_rule(rule, o); !st.is_ok()) return st;
      if (Status st = spend_elements(4, 2); !st.is_ok()) return st;
      g_.rule_alts[o].push_back(static_cast<uint32_t>(g_.elements.size()));
      g_.elements.push_back(x);
      if (tail.kind == Element::Kind::kRule) g_.elements.push_back(tail);
      g_.elements.push_back({Element::Kind::kEnd, 0});
      g_.rule_alts[o].push_back(static_cast<uint32_t>(g_.elements.size()));
      g_.elements.push_back({Element::Kind::kEnd, 0});
      tail = {Element::Kind::kRule, o};
    }
    if (tail.kind == Element::Kind::kRule) out.push_back(tail);
    return Status::ok();
  }

  Grammar& g_;
  const std::map<std::string, uint32_t>& names_;
  GrammarBudget& budget_;
  std::unordered_map<std::string, uint32_t> class_index_;  // add_class(): a class's ranges -> its index
};

// Rules that can derive the empty string: each alternative without a character counts its
// rule references not yet known nullable, and a rule found nullable counts down those of
// the alternatives using it. Linear: passes over every rule until nothing changed took one
// pass per link of a chain of nullable rules (50,000 rules: seconds, on an HTTP thread).
std::vector<char> nullable_rules(const Grammar& g) {
  const size_t n = g.rule_alts.size();
  std::vector<char> nullable(n, 0);
  std::vector<uint32_t> alt_rule, pending;      // per alternative without a character
  std::vector<std::vector<uint32_t>> users(n);  // per rule: those alternatives, once a reference
  std::vector<uint32_t> found;                  // nullable rules whose users are not counted down yet
  for (size_t r = 0; r < n; ++r) {
    for (uint32_t a : g.rule_alts[r]) {
      uint32_t i = a;
      while (g.elements[i].kind == Element::Kind::kRule) ++i;
      if (g.elements[i].kind == Element::Kind::kChar) continue;  // never empty
      const auto id = static_cast<uint32_t>(alt_rule.size());
      alt_rule.push_back(static_cast<uint32_t>(r));
      pending.push_back(i - a);
      for (uint32_t k = a; k < i; ++k) users[g.elements[k].value].push_back(id);
      if (i == a && !nullable[r]) {
        nullable[r] = 1;
        found.push_back(static_cast<uint32_t>(r));
      }
    }
  }
  while (!found.empty()) {
    const uint32_t r = found.back();
    found.pop_back();
    for (uint32_t id : users[r]) {
      if (--pending[id] != 0 || nullable[alt_rule[id]]) continue;
      nullable[alt_rule[id]] = 1;
      found.push_back(alt_rule[id]);
    }
  }
  return nullable;
}

// Left recursion: a cycle in "rule A may start with rule B" (through nullable prefixes).
Status check_left_recursion(const Grammar& g) {
  const std::vector<char> nullable = nullable_rules(g);
  const size_t n = g.rule_alts.size();
  std::vector<std::vector<uint32_t>> starts(n);
  for (size_t r = 0; r < n; ++r)
    for (uint32_t a : g.rule_alts[r])
      for (uint32_t i = a; g.elements[i].kind == Element::Kind::kRule; ++i) {
        starts[r].push_back(g.elements[i].value);
        if (!nullable[g.elements[i].value]) break;
      }
  std::vector<int> color(n, 0);  // 0 new, 1 on the path, 2 done
  for (size_t root = 0; root < n; ++root) {
    if (color[root]) continue;
    std::vector<std::pair<uint32_t, size_t>> path{{static_cast<uint32_t>(root), 0}};
    color[root] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == starts[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      uint32_t s = starts[r][next++];
      if (color[s] == 1) return invalid_argument("grammar: rule '" + g.rule_names[s] + "' is left-recursive");
      if (color[s] == 0) {
        color[s] = 1;
        path.emplace_back(s, 0);
      }
    }
  }
  return Status::ok();
}

// The matcher's start state within its limits (grammar_matcher.h): past them the grammar
// could never match a character, and decoding used to fail with "every token is excluded".
Status check_start(const std::shared_ptr<Grammar>& g) {
  if (!GrammarMatcher(g).start_over_limit()) return Status::ok();
  return invalid_argument("grammar: its start has " + matcher_limits_text() +
                          " before a character (alternatives that begin alike, repeated optional items)");
}

}  // namespace

bool CharClass::matches(uint32_t cp) const {
  bool in = false;
  for (const CharRange& r : ranges)
    if (cp >= r.lo && cp <= r.hi) {
      in = true;
      break;
    }
  return in != negated;
}

bool CharClass::matches_any(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const CharRange& r : ranges)
      if (r.lo <= hi && r.hi >= lo) return true;
    return false;
  }
  // Some point of [lo, hi] lies outside every range (the ranges are sorted and disjoint).
  uint32_t cur = lo;
  for (const CharRange& r : ranges) {
    if (r.hi < cur) continue;
    if (r.lo > cur) return true;
    if (r.hi >= hi) return false;
    cur = r.hi + 1;
  }
  return cur <= hi;
}

Expected<std::shared_ptr<const Grammar>> compile_gbnf(std::string_view text) {
  std::vector<std::pair<std::string, Node>> rules;
  GrammarBudget budget;
  Parser parser(text, budget);
  if (Status st = parser.parse(rules); !st.is_ok()) return st;
  auto g = std::make_shared<Grammar>();
  std::map<std::string, uint32_t> names;
  for (const auto& [name, body] : rules) {
    if (names.count(name)) return invalid_argument("grammar: rule '" + name + "' is defined twice");
    names[name] = static_cast<uint32_t>(g->rule_names.size());
    g->rule_names.push_back(name);
  }
  auto root = names.find("root");
  if (root == names.end()) return invalid_argument("grammar: no 'root' rule");
  g->root = root->second;
  g->rule_alts.resize(g->rule_names.size());
  Lowering lower(*g, names, budget);
  for (const auto& [name, body] : rules)
    if (Status st = lower.rule(names[name], body); !st.is_ok()) return st;
  if (Status st = check_left_recursion(*g); !st.is_ok()) return st;
  if (Status st = check_start(g); !st.is_ok()) return st;
  return std::shared_ptr<const Grammar>(std::move(g));
}

}  // namespace tf::grammar
