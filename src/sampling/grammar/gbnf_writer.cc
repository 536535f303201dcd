// See gbnf_writer.h.
#include "sampling/grammar/gbnf_writer.h"

#include <algorithm>
#include <cstdio>

#include "text/utf8.h"

namespace tf::grammar {

std::vector<CharRange> normalize_ranges(std::vector<CharRange> r) {
  std::sort(r.begin(), r.end(), [](const CharRange& a, const CharRange& b) { return a.lo < b.lo; });
  std::vector<CharRange> out;
  for (const CharRange& x : r) {
    if (!out.empty() && x.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, x.hi);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

std::vector<CharRange> complement_ranges(const std::vector<CharRange>& r) {
  std::vector<CharRange> out;
  uint32_t next = 0;
  for (const CharRange& x : r) {
    if (x.lo > next) out.push_back({next, x.lo - 1});
    next = x.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

std::vector<CharRange> class_ranges(const CharClass& cls) {
  std::vector<CharRange> ranges = normalize_ranges(cls.ranges);
  return cls.negated ? complement_ranges(ranges) : ranges;
}

namespace {

std::string hex_escape(uint32_t cp) {
  char buf[16];
  if (cp <= 0xFF) {
    std::snprintf(buf, sizeof buf, "\\x%02X", cp);
  } else if (cp <= 0xFFFF) {
    std::snprintf(buf, sizeof buf, "\\u%04X", cp);
  } else {
    std::snprintf(buf, sizeof buf, "\\U%08X", cp);
  }
  return buf;
}

// Controls, surrogates, invisible spaces / format characters and the private-use planes
// are printed as escapes; other text is printed as UTF-8.
bool print_escaped(uint32_t cp) {
  return cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F) ||
         cp == 0x3000 || (cp >= 0xD800 && cp <= 0xDFFF) || cp == 0xFEFF || (cp >= 0xFFF0 && cp <= 0xFFFF) || cp >= 0xE0000;
}

}  // namespace

void append_gbnf_char(std::string& out, uint32_t cp, bool in_class) {
  switch (cp) {
    case '\n':
      out += "\\n";
      return;
    case '\r':
      out += "\\r";
      return;
    case '\t':
      out += "\\t";
      return;
    case '\\':
      out += "\\\\";
      return;
    case '"':
      out += "\\\"";
      return;
    default:
      break;
  }
  if (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^')) {
    out += '\\';
    out += static_cast<char>(cp);
  } else if (print_escaped(cp)) {
    out += hex_escape(cp);
  } else {
    text::append_utf8(out, static_cast<char32_t>(cp));
  }
}

std::string gbnf_string(const std::vector<uint32_t>& cps) {
  std::string out = "\"";
  for (uint32_t cp : cps) append_gbnf_char(out, cp, false);
  return out + "\"";
}

std::string gbnf_class(const std::vector<CharRange>& ranges) {
  if (ranges.size() == 1 && ranges[0].lo == ranges[0].hi) return gbnf_string({ranges[0].lo});
  const std::vector<CharRange> outside = complement_ranges(ranges);
  // Print whichever side is shorter; an empty set is "nothing outside everything".
  bool negate = ranges.empty() || (!outside.empty() && outside.size() < ranges.size());
  const std::vector<CharRange> everything{{0, kMaxCodePoint}};
  const std::vector<CharRange>& shown = ranges.empty() ? everything : negate ? outside : ranges;
  std::string out = negate ? "[^" : "[";
  for (const CharRange& r : shown) {
    append_gbnf_char(out, r.lo, true);
    if (r.hi == r.lo) continue;
    if (r.hi > r.lo + 1) out += '-';
    append_gbnf_char(out, r.hi, true);
  }
  return out + "]";
}

std::string gbnf_literal(std::string_view text) {
  std::vector<uint32_t> cps;
  for (size_t i = 0; i < text.size();) {
    const size_t len = text::utf8_sequence_length(text, i);
    cps.push_back(len == 0 ? static_cast<uint8_t>(text[i]) : static_cast<uint32_t>(text::decode_utf8_at(text, i, len)));
    i += len == 0 ? 1 : len;
  }
  return gbnf_string(cps);
}

std::string prefix_gbnf_rules(std::string_view gbnf, std::string_view prefix) {
  const auto is_name_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  };
  std::string out;
  out.reserve(gbnf.size() * 2);
  size_t i = 0;
  // Copies a quoted literal or a class up to its unescaped closing character.
  const auto copy_until = [&](char close) {
    out.push_back(gbnf[i++]);
    while (i < gbnf.size() && gbnf[i] != close) {
      if (gbnf[i] == '\\' && i + 1 < gbnf.size()) out.push_back(gbnf[i++]);
      out.push_back(gbnf[i++]);
    }
    if (i < gbnf.size()) out.push_back(gbnf[i++]);
  };
  while (i < gbnf.size()) {
    const char c = gbnf[i];
    if (c == '"') {
      copy_until('"');
    } else if (c == '[') {
      copy_until(']');
    } else if (c == '{') {
      copy_until('}');  // a repetition count
    } else if (c == '#') {
      while (i < gbnf.size() && gbnf[i] != '\n') out.push_back(gbnf[i++]);
    } else if (is_name_char(c)) {
      out += prefix;
      while (i < gbnf.size() && is_name_char(gbnf[i])) out.push_back(gbnf[i++]);
    } else {
      out.push_back(gbnf[i++]);
    }
  }
  return out;
}

}  // namespace tf::grammar
