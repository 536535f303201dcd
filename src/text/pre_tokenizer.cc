// split_one() implements the Hugging Face tokenizers semantics (SplitDelimiterBehavior): the text
// is cut into alternating match / non-match segments covering it entirely, `invert` swaps the two
// roles, and the behaviour decides what happens to the delimiters (matches): Removed drops them,
// Isolated keeps them alone, MergedWithPrevious / MergedWithNext glue each to its neighbour,
// Contiguous glues runs of adjacent delimiters together. The Split pre-tokenizer itself follows
// transformers.js (the reference), which only knows Removed and Isolated (see its builder).
#include "text/pre_tokenizer.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "text/regex.h"
#include "text/utf8.h"

namespace tf::text {
namespace {

using json = nlohmann::json;

// The pattern GPT-2's ByteLevel pre-tokenizer uses when use_regex is true.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct ByteLevelTables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<std::string, 256> byte_to_utf8;
  ByteLevelTables() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_char[static_cast<size_t>(b)] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(byte_to_utf8[static_cast<size_t>(b)], byte_to_char[static_cast<size_t>(b)]);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Expected<SplitBehavior> parse_behavior(const std::string& s) {
  if (s == "Removed" || s == "removed") return SplitBehavior::kRemoved;
  if (s == "Isolated" || s == "isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious" || s == "mergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext" || s == "mergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous" || s == "contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("pre_tokenizer Split: unknown behavior \"" + s + "\"");
}

// Splits one string by `re` with the given behaviour.
void split_one(const Regex& re, SplitBehavior behavior, bool invert, std::string_view text,
               std::vector<std::string>& out) {
  struct Seg {
    size_t b, e;
    bool is_match;
  };
  std::vector<Seg> segs;
  size_t prev = 0;
  for (auto [b, e] : re.find_all(text)) {
    if (b > prev) segs.push_back({prev, b, false});
    segs.push_back({b, e, true});
    prev = e;
  }
  if (prev < text.size()) segs.push_back({prev, text.size(), false});
  if (invert) {
    for (Seg& s : segs) s.is_match = !s.is_match;
  }
  std::vector<std::pair<size_t, size_t>> parts;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Seg& s : segs) {
        if (!s.is_match) parts.emplace_back(s.b, s.e);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Seg& s : segs) parts.emplace_back(s.b, s.e);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Seg& s : segs) {
        if (s.is_match && !prev_match && !parts.empty()) {
          parts.back().second = s.e;
        } else {
          parts.emplace_back(s.b, s.e);
        }
        prev_match = s.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->is_match && !prev_match && !parts.empty()) {
          parts.back().first = it->b;
        } else {
          parts.emplace_back(it->b, it->e);
        }
        prev_match = it->is_match;
      }
      std::reverse(parts.begin(), parts.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const Seg& s : segs) {
        if (s.is_match == prev_match && !parts.empty()) {
          parts.back().second = s.e;
        } else {
          parts.emplace_back(s.b, s.e);
        }
        prev_match = s.is_match;
      }
      break;
    }
  }
  for (auto [b, e] : parts) {
    if (e > b) out.emplace_back(text.substr(b, e - b));
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& p : pieces) split_one(re_, behavior_, invert_, p, out);
    pieces = std::move(out);
  }

 private:
  Regex re_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void pre_tokenize(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& p : pieces) {
      std::string s = (add_prefix_space_ && (p.empty() || p[0] != ' ')) ? " " + p : p;
      if (re_) {
        std::vector<std::string> words;
        split_one(*re_, SplitBehavior::kIsolated, false, s, words);
        for (const std::string& w : words) out.push_back(byte_level_encode(w));
      } else if (!s.empty()) {
        out.push_back(byte_level_encode(s));
      }
    }
    pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;
};

// Metaspace as transformers.js does it: every " " becomes the replacement string (str_rep when
// given), a replacement is put in front when add_prefix_space is true, the text does not already
// start with it and prepend_scheme ("always" by default) allows it ("first": only in the first
// section of the input). The text is not split ("split" is ignored, as in transformers.js).
class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, std::string str_rep, bool add_prefix_space, Prepend prepend)
      : replacement_(std::move(replacement)), str_rep_(std::move(str_rep)), add_prefix_space_(add_prefix_space),
        prepend_(prepend) {}
  void pre_tokenize(std::vector<std::string>& pieces, bool first_section) const override {
    for (std::string& piece : pieces) {
      std::string s;
      s.reserve(piece.size() + 8);
      for (char c : piece) {
        if (c == ' ') {
          s += str_rep_;
        } else {
          s.push_back(c);
        }
      }
      const bool want = add_prefix_space_ && (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && first_section));
      if (want && s.rfind(replacement_, 0) != 0) s = str_rep_ + s;
      piece = std::move(s);
    }
  }

 private:
  std::string replacement_, str_rep_;
  bool add_prefix_space_;
  Prepend prepend_;
};

// Replace (transformers.js's custom pre-tokenizer, for BlenderbotSmall): each piece with every
// match of the pattern replaced; no splitting.
class ReplacePreTokenizer final : public PreTokenizer {
 public:
  ReplacePreTokenizer(Regex re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void pre_tokenize(std::vector<std::string>& pieces, bool) const override {
    for (std::string& p : pieces) p = re_.replace_all(p, content_);
  }

 private:
  Regex re_;
  std::string content_;
};

// Keeps only the matches of `re` (JavaScript's text.match(/.../g)); empty matches are dropped.
class MatchPreTokenizer final : public PreTokenizer {
 public:
  explicit MatchPreTokenizer(Regex re) : re_(std::move(re)) {}
  void pre_tokenize(std::vector<std::string>& pieces, bool) const override {
    std::vector<std::string> out;
    for (const std::string& p : pieces) {
      for (auto [b, e] : re_.find_all(p)) {
        if (e > b) out.emplace_back(p, b, e - b);
      }
    }
    pieces = std::move(out);
  }

 private:
  Regex re_;
};

// JavaScript's \s (inside a character class) and transformers.js's punctuation class.
constexpr std::string_view kJsSpace =
    R"(\t\n\x{B}\x{C}\r \x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF})";
constexpr std::string_view kPunct = R"(\p{P}\x{21}-\x{2F}\x{3A}-\x{40}\x{5B}-\x{60}\x{7B}-\x{7E})";

Expected<std::unique_ptr<PreTokenizer>> match_pre_tokenizer(const std::string& pattern) {
  TF_ASSIGN_OR_RETURN(Regex re, Regex::compile(pattern));
  return std::unique_ptr<PreTokenizer>(new MatchPreTokenizer(std::move(re)));
}

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<std::string>& pieces, bool first_section) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces, first_section);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

Expected<std::unique_ptr<PreTokenizer>> build(const json& c) {
  if (c.is_null()) return std::unique_ptr<PreTokenizer>();
  if (!c.is_object() || !c.contains("type")) return invalid_argument("pre_tokenizer: expected an object with \"type\"");
  const std::string type = c.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const json& p : c.at("pretokenizers")) {
      TF_ASSIGN_OR_RETURN(auto t, build(p));
      if (t) parts.push_back(std::move(t));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  if (type == "Split") {
    const json& pat = c.at("pattern");
    Expected<Regex> re = pat.contains("Regex") ? Regex::compile(pat.at("Regex").get<std::string>())
                                               : Regex::literal(pat.at("String").get<std::string>());
    if (!re) return re.status().with_context("pre_tokenizer Split");
    TF_ASSIGN_OR_RETURN(SplitBehavior b, parse_behavior(c.value("behavior", std::string("Isolated"))));
    // transformers.js: with invert only the matches are kept; "Removed" drops the delimiters,
    // except for a String pattern (which it wraps in a capturing group, so split() keeps them);
    // every other behaviour isolates them.
    if (c.value("invert", false)) return std::unique_ptr<PreTokenizer>(new MatchPreTokenizer(std::move(*re)));
    const bool removed = b == SplitBehavior::kRemoved && pat.contains("Regex");
    return std::unique_ptr<PreTokenizer>(
        new SplitPreTokenizer(std::move(*re), removed ? SplitBehavior::kRemoved : SplitBehavior::kIsolated, false));
  }
  if (type == "ByteLevel") {
    std::unique_ptr<Regex> re;
    if (c.value("use_regex", true)) {
      TF_ASSIGN_OR_RETURN(Regex r, Regex::compile(kGpt2Pattern));
      re = std::make_unique<Regex>(std::move(r));
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevelPreTokenizer(c.value("add_prefix_space", false), std::move(re)));
  }
  // The next four use JavaScript's regex classes, as transformers.js does: \d and \w are ASCII,
  // \s is JavaScript's whitespace.
  if (type == "Digits") {
    return match_pre_tokenizer(c.value("individual_digits", false) ? "[^0-9]+|[0-9]" : "[^0-9]+|[0-9]+");
  }
  if (type == "Whitespace") {
    return match_pre_tokenizer("[A-Za-z0-9_]+|[^A-Za-z0-9_" + std::string(kJsSpace) + "]+");
  }
  if (type == "WhitespaceSplit") return match_pre_tokenizer("[^" + std::string(kJsSpace) + "]+");
  if (type == "BertPreTokenizer") {
    // Whitespace removed, each punctuation character alone.
    return match_pre_tokenizer("[^" + std::string(kJsSpace) + std::string(kPunct) + "]+|[" + std::string(kPunct) + "]");
  }
  if (type == "Punctuation") {
    // transformers.js ignores "behavior": runs of punctuation and runs of the rest.
    return match_pre_tokenizer("[^" + std::string(kPunct) + "]+|[" + std::string(kPunct) + "]+");
  }
  if (type == "Replace") {
    const json& pat = c.at("pattern");
    if (!pat.is_object() || !(pat.contains("Regex") || pat.contains("String"))) {
      return invalid_argument("pre_tokenizer Replace: \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}");
    }
    Expected<Regex> re = pat.contains("Regex") ? Regex::compile(pat.at("Regex").get<std::string>())
                                               : Regex::literal(pat.at("String").get<std::string>());
    if (!re) return re.status().with_context("pre_tokenizer Replace");
    return std::unique_ptr<PreTokenizer>(new ReplacePreTokenizer(std::move(*re), c.at("content").get<std::string>()));
  }
  if (type == "Metaspace") {
    const std::string replacement = c.value("replacement", std::string("\u2581"));
    std::string str_rep = replacement;
    if (c.contains("str_rep") && c.at("str_rep").is_string() && !c.at("str_rep").get<std::string>().empty()) {
      str_rep = c.at("str_rep").get<std::string>();
    }
    const std::string scheme = (c.contains("prepend_scheme") && c.at("prepend_scheme").is_string())
                                   ? c.at("prepend_scheme").get<std::string>()
                                   : std::string("always");
    MetaspacePreTokenizer::Prepend p = scheme == "always" ? MetaspacePreTokenizer::Prepend::kAlways
                                       : scheme == "first" ? MetaspacePreTokenizer::Prepend::kFirst
                                                           : MetaspacePreTokenizer::Prepend::kNever;
    const bool add_prefix_space = c.contains("add_prefix_space") && c.at("add_prefix_space").is_boolean() &&
                                  c.at("add_prefix_space").get<bool>();
    return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(replacement, str_rep, add_prefix_space, p));
  }
  return unimplemented("pre_tokenizer type \"" + type + "\" is not supported");
}

}  // namespace

Expected<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const json& config) {
  try {
    return build(config);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("pre_tokenizer: ") + e.what());
  }
}

std::string byte_level_encode(std::string_view bytes) {
  const ByteLevelTables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

int byte_level_decode_char(char32_t cp) {
  if (cp < 256) {
    const bool printable = (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF);
    if (printable) return static_cast<int>(cp);
    return -1;
  }
  const ByteLevelTables& t = tables();
  static const std::array<int, 68> rev = [&] {
    std::array<int, 68> r{};
    r.fill(-1);
    for (int b = 0; b < 256; ++b) {
      const char32_t ch = t.byte_to_char[static_cast<size_t>(b)];
      if (ch >= 256) r[ch - 256] = b;
    }
    return r;
  }();
  if (cp - 256 < rev.size()) return rev[cp - 256];
  return -1;
}

}  // namespace tf::text
