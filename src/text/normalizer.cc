// Each normalizer is a small class; make_normalizer() dispatches on the "type" field. Replace
// accepts both pattern forms of tokenizer.json: {"String": "..."} and {"Regex": "..."}.
#include "text/normalizer.h"

#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "core/replace_all.h"
#include "text/regex.h"
#include "text/tokenizer_pattern.h"
#include "text/unicode.h"
#include "text/utf8.h"

namespace tf::text {
namespace {

using json = nlohmann::json;

// NFC, NFD, NFKC or NFKD.
class UnicodeFormNormalizer final : public Normalizer {
 public:
  using Form = std::string (*)(std::string_view);
  explicit UnicodeFormNormalizer(Form form) : form_(form) {}
  std::string normalize(std::string_view t) const override { return form_(t); }

 private:
  Form form_;
};

class LowercaseNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string_view t) const override { return js_to_lower(t); }
};

// Compiled once: the character classes the normalizers below need (PCRE2's Unicode properties).
const Regex& static_regex(const char* pattern) {
  // Callers pass string literals: one compiled Regex per distinct pattern, kept for the process.
  static std::mutex mu;
  static std::unordered_map<std::string, std::unique_ptr<Regex>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[pattern];
  if (!slot) slot = std::make_unique<Regex>(std::move(Regex::compile(pattern).value()));
  return *slot;
}

// StripAccents (transformers.js): removes every mark (\p{M}); there is no NFD step, so only
// combining characters already decomposed go away.
class StripAccentsNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string_view t) const override { return static_regex(R"(\p{M})").replace_all(t, ""); }
};

// BertNormalizer as transformers.js runs it: clean_text drops U+0000, U+FFFD and control/format/
// private-use characters (Cc, Cf, Co; tab, newline and carriage return excepted) and turns the
// remaining JavaScript whitespace into spaces; handle_chinese_chars puts spaces around CJK
// ideographs; lowercase uses toLowerCase, and then strips accents (NFD, then drop \p{Mn}) unless
// strip_accents is false; strip_accents alone strips them too.
class BertNormalizer final : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, bool lowercase, bool strip_accents)
      : clean_text_(clean_text), chinese_(chinese), lowercase_(lowercase), strip_accents_(strip_accents) {}
  std::string normalize(std::string_view t) const override {
    std::string s = clean_text_
                        ? static_regex(R"((?![\t\n\r])[\x{0}\x{FFFD}\p{Cc}\p{Cf}\p{Co}])").replace_all(t, "")
                        : std::string(t);
    char32_t cp;
    if (clean_text_) {
      std::string out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        i = next_code_point(s, i, cp);
        if (is_js_whitespace(cp)) {
          out.push_back(' ');
        } else {
          append_utf8(out, cp);
        }
      }
      s = std::move(out);
    }
    if (chinese_) {
      std::string out;
      out.reserve(s.size());
      for (size_t i = 0; i < s.size();) {
        i = next_code_point(s, i, cp);
        if (is_bert_chinese_char(cp)) {
          out.push_back(' ');
          append_utf8(out, cp);
          out.push_back(' ');
        } else {
          append_utf8(out, cp);
        }
      }
      s = std::move(out);
    }
    if (lowercase_) s = js_to_lower(s);
    if (strip_accents_) s = static_regex(R"(\p{Mn})").replace_all(nfd(s), "");
    return s;
  }

 private:
  bool clean_text_, chinese_, lowercase_, strip_accents_;
};

// Precompiled (SentencePiece's precompiled_charsmap). transformers.js does not read the charsmap:
// it applies SentencePiece's default rule set (nmt_nfkc) approximately, and so does this class:
// drop some control characters, turn some spaces / separators / U+2581 / U+FFFD into a space, then
// NFKC, except that U+FF5E (fullwidth tilde) is kept as it is.
class PrecompiledNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string_view t) const override {
    std::string s = static_regex(R"([\x{1}-\x{8}\x{B}\x{E}-\x{1F}\x{7F}\x{8F}\x{9F}])").replace_all(t, "");
    s = static_regex(
            R"([\x{9}\x{A}\x{C}\x{D}\x{A0}\x{1680}\x{2000}-\x{200F}\x{2028}\x{2029}\x{202F}\x{205F}\x{2581}\x{3000}\x{FEFF}\x{FFFD}])")
            .replace_all(s, " ");
    static constexpr std::string_view kTilde = "\uFF5E";
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    while (true) {
      const size_t f = s.find(kTilde, pos);
      out += nfkc(std::string_view(s).substr(pos, f == std::string::npos ? std::string::npos : f - pos));
      if (f == std::string::npos) break;
      out += kTilde;
      pos = f + kTilde.size();
    }
    return out;
  }
};

// Nmt (the Rust library's; transformers.js has none): drops the control characters SentencePiece's
// NMT rule drops and turns its other separators (tab, newlines, U+1680, U+200B-U+200F, U+2028/9,
// U+2581, U+FEFF, U+FFFD) into a space. Unlike Precompiled, no NFKC: the files chain that after.
class NmtNormalizer final : public Normalizer {
 public:
  std::string normalize(std::string_view t) const override {
    std::string out;
    out.reserve(t.size());
    char32_t cp;
    for (size_t i = 0; i < t.size();) {
      i = next_code_point(t, i, cp);
      if ((cp >= 0x01 && cp <= 0x08) || cp == 0x0B || (cp >= 0x0E && cp <= 0x1F) || cp == 0x7F ||
          cp == 0x8F || cp == 0x9F) {
        continue;
      }
      const bool space = cp == 0x09 || cp == 0x0A || cp == 0x0C || cp == 0x0D || cp == 0x1680 ||
                         (cp >= 0x200B && cp <= 0x200F) || cp == 0x2028 || cp == 0x2029 || cp == 0x2581 ||
                         cp == 0xFEFF || cp == 0xFFFD;
      if (space) {
        out.push_back(' ');
      } else {
        append_utf8(out, cp);
      }
    }
    return out;
  }
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  // Rust's Prepend leaves an empty string empty.
  std::string normalize(std::string_view t) const override {
    return t.empty() ? std::string() : prepend_ + std::string(t);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, Regex re, std::string content)
      : literal_(std::move(literal)), re_(std::move(re)), content_(std::move(content)) {}
  std::string normalize(std::string_view t) const override {
    if (literal_.empty()) return re_.replace_all(t, content_);
    // A String pattern (the usual " " -> "▁"): plain search. Valid UTF-8 text only holds the
    // pattern at character boundaries, so this finds the matches the regex would.
    return replace_all(t, literal_, content_);
  }

 private:
  std::string literal_;  // the String pattern; empty for a Regex one (an empty String matches nothing)
  Regex re_;
  std::string content_;
};

// JavaScript's trim: its whitespace set (is_js_whitespace), not Rust's.
class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view t) const override { return js_trim(t, left_, right_); }

 private:
  bool left_, right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(std::string_view t) const override {
    if (parts_.empty()) return std::string(t);
    std::string s = parts_[0]->normalize(t);
    for (size_t i = 1; i < parts_.size(); ++i) s = parts_[i]->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

Expected<std::unique_ptr<Normalizer>> build(const json& c) {
  if (c.is_null()) return std::unique_ptr<Normalizer>();
  if (!c.is_object() || !c.contains("type")) return invalid_argument("normalizer: expected an object with \"type\"");
  const std::string type = c.at("type").get<std::string>();
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeFormNormalizer(&nfc));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeFormNormalizer(&nfd));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeFormNormalizer(&nfkc));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeFormNormalizer(&nfkd));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "StripAccents") return std::unique_ptr<Normalizer>(new StripAccentsNormalizer());
  if (type == "Nmt") return std::unique_ptr<Normalizer>(new NmtNormalizer());
  if (type == "Precompiled") {
    // The charsmap is not used (see PrecompiledNormalizer), but a file without one is malformed.
    if (!c.contains("precompiled_charsmap") || !(c.at("precompiled_charsmap").is_string() || c.at("precompiled_charsmap").is_null())) {
      return invalid_argument("normalizer Precompiled: \"precompiled_charsmap\" must be a base64 string");
    }
    return std::unique_ptr<Normalizer>(new PrecompiledNormalizer());
  }
  if (type == "BertNormalizer") {
    auto flag = [&](const char* key, bool def) -> Expected<bool> {
      if (!c.contains(key) || c.at(key).is_null()) return def;
      if (!c.at(key).is_boolean()) return invalid_argument(std::string("normalizer BertNormalizer: \"") + key + "\" must be a boolean");
      return c.at(key).get<bool>();
    };
    // transformers.js reads missing flags as false (undefined is falsy); strip_accents null or
    // missing follows lowercase.
    TF_ASSIGN_OR_RETURN(bool clean, flag("clean_text", false));
    TF_ASSIGN_OR_RETURN(bool chinese, flag("handle_chinese_chars", false));
    TF_ASSIGN_OR_RETURN(bool lower, flag("lowercase", false));
    const bool accents_set = c.contains("strip_accents") && !c.at("strip_accents").is_null();
    TF_ASSIGN_OR_RETURN(bool accents, flag("strip_accents", false));
    const bool strip = lower ? (!accents_set || accents) : accents;
    return std::unique_ptr<Normalizer>(new BertNormalizer(clean, chinese, lower, strip));
  }
  if (type == "Prepend") return std::unique_ptr<Normalizer>(new PrependNormalizer(c.at("prepend").get<std::string>()));
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(c.value("strip_left", false), c.value("strip_right", false)));
  }
  if (type == "Replace") {
    const json& pat = c.at("pattern");
    Expected<Regex> re = compile_tokenizer_pattern(pat);
    if (!re) return re.status().with_context("normalizer Replace");
    std::string literal = pat.contains("Regex") ? std::string() : pat.at("String").get<std::string>();
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(std::move(literal), std::move(*re), c.at("content").get<std::string>()));
  }
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const json& p : c.at("normalizers")) {
      TF_ASSIGN_OR_RETURN(auto n, build(p));
      if (n) parts.push_back(std::move(n));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  return unimplemented("normalizer type \"" + type + "\" is not supported");
}

}  // namespace

Expected<std::unique_ptr<Normalizer>> make_normalizer(const json& config) {
  try {
    return build(config);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("normalizer: ") + e.what());
  }
}

std::string js_remove_space(std::string_view s) {
  const std::string trimmed = js_trim(s);
  std::string out;
  out.reserve(trimmed.size());
  bool in_space = false;
  char32_t cp;
  for (size_t i = 0; i < trimmed.size();) {
    i = next_code_point(trimmed, i, cp);
    if (is_js_whitespace(cp)) {
      if (!in_space) out.push_back(' ');
      in_space = true;
    } else {
      append_utf8(out, cp);
      in_space = false;
    }
  }
  return out;
}

std::string js_lowercase_and_remove_accent(std::string_view s) {
  return static_regex(R"(\p{M})").replace_all(js_to_lower(s), "");
}

bool is_js_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000 || c == 0xFEFF;
}

std::string js_trim(std::string_view s, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t n = utf8_sequence_length(s, b);
      if (n == 0 || !is_js_whitespace(decode_utf8_at(s, b, n))) break;
      b += n;
    }
  }
  if (right) {
    while (e > b) {
      size_t k = e - 1;
      while (k > b && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
      const size_t n = utf8_sequence_length(s, k);
      if (n == 0 || k + n != e || !is_js_whitespace(decode_utf8_at(s, k, n))) break;
      e = k;
    }
  }
  return std::string(s.substr(b, e - b));
}

bool is_bert_chinese_char(char32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0xF900 && cp <= 0xFAFF);
}

std::string js_to_lower(std::string_view s) {
  constexpr char32_t kSigma = 0x3A3;
  if (s.find("\u03A3") == std::string_view::npos) return to_lower(s);
  // Final_Sigma: preceded by a cased letter and not followed by one, skipping case-ignorables.
  const Regex& cased = static_regex(R"(^[\p{Lowercase}\p{Uppercase}\p{Lt}]$)");
  const Regex& ignorable = static_regex(R"(^\p{Case_Ignorable}$)");
  const std::vector<char32_t> cps = to_code_points(s);
  auto is = [](const Regex& re, char32_t cp) {
    std::string u;
    append_utf8(u, cp);
    return re.contains_match(u);
  };
  std::string out, run;
  auto flush = [&] {
    out += to_lower(run);
    run.clear();
  };
  for (size_t i = 0; i < cps.size(); ++i) {
    if (cps[i] != kSigma) {
      append_utf8(run, cps[i]);
      continue;
    }
    flush();
    bool before = false, after = false;
    for (size_t k = i; k-- > 0;) {
      if (is(ignorable, cps[k])) continue;
      before = is(cased, cps[k]);
      break;
    }
    for (size_t k = i + 1; k < cps.size(); ++k) {
      if (is(ignorable, cps[k])) continue;
      after = is(cased, cps[k]);
      break;
    }
    append_utf8(out, before && !after ? char32_t{0x3C2} : char32_t{0x3C3});
  }
  flush();
  return out;
}

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace tf::text
