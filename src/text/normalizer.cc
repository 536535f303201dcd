// Each normalizer is a small class; make_normalizer() dispatches on the "type" field. Replace
// accepts both pattern forms of tokenizer.json: {"String": "..."} and {"Regex": "..."}.
#include "text/normalizer.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "text/regex.h"
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
  std::string normalize(std::string_view t) const override { return to_lower(t); }
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
  ReplaceNormalizer(Regex re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  std::string normalize(std::string_view t) const override {
    std::string out;
    size_t prev = 0;
    for (auto [b, e] : re_.find_all(t)) {
      out.append(t.substr(prev, b - prev));
      out.append(content_);
      prev = e;
    }
    out.append(t.substr(prev));
    return out;
  }

 private:
  Regex re_;
  std::string content_;
};

class StripNormalizer final : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view t) const override {
    std::vector<char32_t> cps = to_code_points(t);
    size_t b = 0, e = cps.size();
    if (left_) {
      while (b < e && is_unicode_whitespace(cps[b])) ++b;
    }
    if (right_) {
      while (e > b && is_unicode_whitespace(cps[e - 1])) --e;
    }
    return from_code_points(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                                  cps.begin() + static_cast<std::ptrdiff_t>(e)));
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(std::string_view t) const override {
    std::string s(t);
    for (const auto& p : parts_) s = p->normalize(s);
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
  if (type == "Prepend") return std::unique_ptr<Normalizer>(new PrependNormalizer(c.at("prepend").get<std::string>()));
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(c.value("strip_left", false), c.value("strip_right", false)));
  }
  if (type == "Replace") {
    const json& pat = c.at("pattern");
    Expected<Regex> re = pat.contains("Regex") ? Regex::compile(pat.at("Regex").get<std::string>())
                                               : Regex::literal(pat.at("String").get<std::string>());
    if (!re) return re.status().with_context("normalizer Replace");
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(*re), c.at("content").get<std::string>()));
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

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace tf::text
