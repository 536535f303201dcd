// Each pre-tokenizer hands its words to the sink as it cuts them (see pre_tokenizer.h); a Sequence
// nests the stages depth-first. A word that a stage rewrites (ByteLevel, Metaspace, Replace) lives
// in a buffer of that stage's call, only until the sink returns.
#include "text/pre_tokenizer.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <utility>

#include "text/metaspace.h"
#include "text/regex.h"
#include "text/split_behavior.h"
#include "text/tokenizer_pattern.h"
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

// Appends the ByteLevel characters of `bytes` to `out`.
void append_byte_level(std::string& out, std::string_view bytes) {
  const ByteLevelTables& t = tables();
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::string_view piece, bool, PieceSink sink) const override {
    split_by_matches(re_, behavior_, invert_, piece, sink);
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
  void pre_tokenize(std::string_view piece, bool, PieceSink sink) const override {
    std::string prefixed;
    std::string_view s = piece;
    if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) {
      prefixed.reserve(piece.size() + 1);
      prefixed.push_back(' ');
      prefixed.append(piece);
      s = prefixed;
    }
    std::string encoded;
    const auto encode = [&](std::string_view word) {
      encoded.clear();
      append_byte_level(encoded, word);
      sink(encoded);
    };
    if (re_) {
      split_by_matches(*re_, SplitBehavior::kIsolated, false, s, encode);
    } else if (!s.empty()) {
      encode(s);
    }
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
  MetaspacePreTokenizer(std::string replacement, std::string str_rep, MetaspacePrepend prepend)
      : replacement_(std::move(replacement)), str_rep_(std::move(str_rep)), prepend_(prepend) {}
  void pre_tokenize(std::string_view piece, bool first_section, PieceSink sink) const override {
    // Sized once, the prefix included: the piece may be a whole long section.
    const size_t spaces = static_cast<size_t>(std::count(piece.begin(), piece.end(), ' '));
    std::string s;
    s.reserve(piece.size() + spaces * str_rep_.size() + str_rep_.size());
    for (char c : piece) {
      if (c == ' ') {
        s += str_rep_;
      } else {
        s.push_back(c);
      }
    }
    const bool want =
        prepend_ == MetaspacePrepend::kAlways || (prepend_ == MetaspacePrepend::kFirst && first_section);
    if (want && s.rfind(replacement_, 0) != 0) s.insert(0, str_rep_);
    sink(s);
  }

 private:
  std::string replacement_, str_rep_;
  MetaspacePrepend prepend_;
};

// Replace (transformers.js's custom pre-tokenizer, for BlenderbotSmall): each piece with every
// match of the pattern replaced; no splitting.
class ReplacePreTokenizer final : public PreTokenizer {
 public:
  ReplacePreTokenizer(Regex re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void pre_tokenize(std::string_view piece, bool, PieceSink sink) const override {
    sink(re_.replace_all(piece, content_));
  }

 private:
  Regex re_;
  std::string content_;
};

// Keeps only the matches of `re` (JavaScript's text.match(/.../g)); empty matches are dropped.
class MatchPreTokenizer final : public PreTokenizer {
 public:
  explicit MatchPreTokenizer(Regex re) : re_(std::move(re)) {}
  void pre_tokenize(std::string_view piece, bool, PieceSink sink) const override {
    RegexMatches matches(re_, piece);
    for (size_t b, e; matches.next(b, e);) sink(piece.substr(b, e - b));
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
  void pre_tokenize(std::string_view piece, bool first_section, PieceSink sink) const override {
    run_from(0, piece, first_section, sink);
  }

 private:
  // Runs stages `stage`..n on `piece`, depth-first: each word of a stage goes through the later
  // stages before that stage cuts the next one.
  void run_from(size_t stage, std::string_view piece, bool first_section, PieceSink sink) const {
    if (stage == parts_.size()) {
      sink(piece);
      return;
    }
    parts_[stage]->pre_tokenize(
        piece, first_section, [&](std::string_view word) { run_from(stage + 1, word, first_section, sink); });
  }

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
    Expected<Regex> re = compile_tokenizer_pattern(pat);
    if (!re) return re.status().with_context("pre_tokenizer Split");
    TF_ASSIGN_OR_RETURN(SplitBehavior b, parse_split_behavior(c.value("behavior", std::string("Isolated"))));
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
      TF_ASSIGN_OR_RETURN(Regex r, Regex::compile(kGpt2Pattern, Regex::Syntax::kOniguruma));
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
    Expected<Regex> re = compile_tokenizer_pattern(pat);
    if (!re) return re.status().with_context("pre_tokenizer Replace");
    return std::unique_ptr<PreTokenizer>(new ReplacePreTokenizer(std::move(*re), c.at("content").get<std::string>()));
  }
  if (type == "Metaspace") {
    const std::string replacement = c.value("replacement", std::string("\u2581"));
    std::string str_rep = replacement;
    if (c.contains("str_rep") && c.at("str_rep").is_string() && !c.at("str_rep").get<std::string>().empty()) {
      str_rep = c.at("str_rep").get<std::string>();
    }
    return std::unique_ptr<PreTokenizer>(
        new MetaspacePreTokenizer(replacement, str_rep, metaspace_prepend(c)));
  }
  return unimplemented("pre_tokenizer type \"" + type + "\" is not supported");
}

}  // namespace

void PreTokenizer::pre_tokenize(std::vector<std::string>& pieces, bool first_section) const {
  std::vector<std::string> words;
  for (const std::string& p : pieces) {
    pre_tokenize(p, first_section, [&](std::string_view word) { words.emplace_back(word); });
  }
  pieces = std::move(words);
}

Expected<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const json& config) {
  try {
    return build(config);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("pre_tokenizer: ") + e.what());
  }
}

std::string byte_level_encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  append_byte_level(out, bytes);
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
