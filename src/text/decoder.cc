// ByteLevel maps each character of a (non-added) token back to its byte and decodes each run of
// bytes between added tokens as UTF-8, replacing invalid sequences by U+FFFD (maximal subparts),
// like transformers.js. ByteFallback follows the Rust implementation: a run of <0xNN> tokens that
// is not valid UTF-8 becomes one U+FFFD per byte token.
#include "text/decoder.h"

#include <nlohmann/json.hpp>

#include "core/replace_all.h"
#include "text/metaspace.h"
#include "text/normalizer.h"
#include "text/pre_tokenizer.h"
#include "text/regex.h"
#include "text/tokenizer.h"
#include "text/tokenizer_pattern.h"
#include "text/utf8.h"

namespace tf::text {
namespace {

using json = nlohmann::json;

class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    std::vector<DecodePiece> out;
    std::string bytes;
    auto flush = [&] {
      if (!bytes.empty()) out.push_back({sanitize_utf8(bytes), false});
      bytes.clear();
    };
    for (DecodePiece& p : pieces) {
      if (p.added) {
        flush();
        out.push_back(std::move(p));
        continue;
      }
      for (char32_t cp : to_code_points(p.text)) {
        const int b = byte_level_decode_char(cp);
        if (b >= 0) {
          bytes.push_back(static_cast<char>(b));
        } else {
          append_utf8(bytes, cp);  // not in the alphabet: keep the character itself
        }
      }
    }
    flush();
    pieces = std::move(out);
  }
  bool is_byte_level() const override { return true; }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(Regex re, std::string content) : re_(std::move(re)), content_(std::move(content)) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    for (DecodePiece& p : pieces) {
      std::string out;
      size_t prev = 0;
      for (auto [b, e] : re_.find_all(p.text)) {
        out.append(p.text, prev, b - prev);
        out += content_;
        prev = e;
      }
      out.append(p.text, prev, std::string::npos);
      p.text = std::move(out);
    }
  }

 private:
  Regex re_;
  std::string content_;
};

class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    std::vector<DecodePiece> out;
    std::string bytes;
    size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      if (is_valid_utf8(bytes)) {
        out.push_back({bytes, false});
      } else {
        std::string rep;
        for (size_t i = 0; i < count; ++i) append_utf8(rep, kReplacementChar);
        out.push_back({rep, false});
      }
      bytes.clear();
      count = 0;
    };
    for (DecodePiece& p : pieces) {
      const std::string& t = p.text;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4]))) {
        bytes.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
        ++count;
        continue;
      }
      flush();
      out.push_back(std::move(p));
    }
    flush();
    pieces = std::move(out);
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    DecodePiece all;
    for (const DecodePiece& p : pieces) all.text += p.text;
    pieces.assign(1, std::move(all));
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    for (DecodePiece& p : pieces) {
      std::vector<char32_t> cps = to_code_points(p.text);
      size_t b = 0, e = cps.size();
      for (size_t i = 0; i < start_ && b < e && cps[b] == content_; ++i) ++b;
      for (size_t i = 0; i < stop_ && e > b && cps[e - 1] == content_; ++i) --e;
      p.text = from_code_points(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                                      cps.begin() + static_cast<std::ptrdiff_t>(e)));
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

// transformers.js's Metaspace decoder: the replacement becomes a space in every token, and the
// first token loses one leading space when add_prefix_space is true (prepend_scheme is not read).
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string out = replace_all(pieces[i].text, replacement_, " ");
      if (i == 0 && strip_first_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
      pieces[i].text = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool strip_first_;
};

// WordPiece: every token but the first gets a space in front unless it starts with the prefix
// ("##"), which is removed; cleanup applies clean_up_tokenization to each token.
class WordPieceDecoder final : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string& t = pieces[i].text;
      if (i != 0) {
        if (t.starts_with(prefix_)) {
          t.erase(0, prefix_.size());
        } else {
          t = std::string(1, ' ') + t;
        }
      }
      if (cleanup_) t = clean_up_tokenization(t);
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

// CTC: runs of the same token collapse to one, pad (blank) tokens go, and with cleanup the text is
// cleaned up, the word delimiter becomes a space and the result is trimmed. One piece out.
class CtcDecoder final : public Decoder {
 public:
  CtcDecoder(std::string pad, std::string delimiter, bool cleanup)
      : pad_(std::move(pad)), delimiter_(std::move(delimiter)), cleanup_(cleanup) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    if (pieces.empty()) {
      pieces.assign(1, DecodePiece{});
      return;
    }
    std::string text;
    const std::string* prev = nullptr;
    for (const DecodePiece& p : pieces) {
      if (prev != nullptr && p.text == *prev) continue;
      prev = &p.text;
      if (p.text != pad_) text += p.text;
    }
    if (cleanup_) text = js_trim(replace_all(clean_up_tokenization(text), delimiter_, " "));
    pieces.assign(1, DecodePiece{std::move(text), false});
  }

 private:
  std::string pad_, delimiter_;
  bool cleanup_;
};

// BPEDecoder: the suffix (e.g. "</w>") becomes a space, or nothing in the last token.
class BpeDecoder final : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    for (size_t i = 0; i < pieces.size(); ++i) {
      pieces[i].text = replace_all(pieces[i].text, suffix_, i + 1 == pieces.size() ? "" : " ");
    }
  }

 private:
  std::string suffix_;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<DecodePiece>& pieces) const override {
    for (const auto& d : parts_) d->decode_chain(pieces);
  }
  bool is_byte_level() const override {
    for (const auto& d : parts_) {
      if (!d->is_byte_level()) return false;
    }
    return !parts_.empty();
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

std::string string_field(const json& c, const char* key, const char* def) {
  return (c.contains(key) && c.at(key).is_string()) ? c.at(key).get<std::string>() : std::string(def);
}

bool bool_field(const json& c, const char* key, bool def) {
  return (c.contains(key) && c.at(key).is_boolean()) ? c.at(key).get<bool>() : def;
}

char32_t single_char(const std::string& s) {
  const std::vector<char32_t> cps = to_code_points(s);
  return cps.size() == 1 ? cps[0] : kReplacementChar;
}

Expected<std::unique_ptr<Decoder>> build(const json& c) {
  if (c.is_null()) return std::unique_ptr<Decoder>();
  if (!c.is_object() || !c.contains("type")) return invalid_argument("decoder: expected an object with \"type\"");
  const std::string type = c.at("type").get<std::string>();
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    return std::unique_ptr<Decoder>(new StripDecoder(single_char(c.at("content").get<std::string>()),
                                                     c.value("start", size_t{0}), c.value("stop", size_t{0})));
  }
  if (type == "Replace") {
    const json& pat = c.at("pattern");
    Expected<Regex> re = compile_tokenizer_pattern(pat);
    if (!re) return re.status().with_context("decoder Replace");
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(*re), c.at("content").get<std::string>()));
  }
  if (type == "Metaspace") {
    // The first token's leading space is the one the pre-tokenizer prepended.
    const bool strip = metaspace_prepend(c) != MetaspacePrepend::kNever;
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(c.value("replacement", std::string("\u2581")), strip));
  }
  if (type == "WordPiece") {
    return std::unique_ptr<Decoder>(new WordPieceDecoder(string_field(c, "prefix", "##"), bool_field(c, "cleanup", true)));
  }
  if (type == "CTC") {
    return std::unique_ptr<Decoder>(new CtcDecoder(string_field(c, "pad_token", "<pad>"),
                                                   string_field(c, "word_delimiter_token", "|"), bool_field(c, "cleanup", true)));
  }
  if (type == "BPEDecoder") return std::unique_ptr<Decoder>(new BpeDecoder(string_field(c, "suffix", "</w>")));
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const json& d : c.at("decoders")) {
      TF_ASSIGN_OR_RETURN(auto p, build(d));
      if (p) parts.push_back(std::move(p));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  return unimplemented("decoder type \"" + type + "\" is not supported");
}

}  // namespace

Expected<std::unique_ptr<Decoder>> make_decoder(const json& config) {
  try {
    return build(config);
  } catch (const json::exception& e) {
    return invalid_argument(std::string("decoder: ") + e.what());
  }
}

}  // namespace tf::text
