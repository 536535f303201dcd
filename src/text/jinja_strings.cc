// Python string semantics over UTF-8 (see jinja_strings.h).
#include "text/jinja_strings.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "text/jinja_value.h"
#include "text/regex.h"
#include "text/unicode_case.h"
#include "text/utf8.h"

namespace tf::jinja {

std::u32string utf8_decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    int extra;
    if (c < 0x80) {
      cp = c;
      extra = 0;
    } else if ((c & 0xE0) == 0xC0) {
      cp = c & 0x1F;
      extra = 1;
    } else if ((c & 0xF0) == 0xE0) {
      cp = c & 0x0F;
      extra = 2;
    } else if ((c & 0xF8) == 0xF0) {
      cp = c & 0x07;
      extra = 3;
    } else {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    bool ok = true;
    for (int k = 1; ok && k <= extra; ++k) {
      if (i + k >= s.size()) {
        ok = false;
        break;
      }
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) {
        ok = false;
        break;
      }
      cp = (cp << 6) | (cc & 0x3F);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += extra + 1;
  }
  return out;
}

void utf8_append(std::string& out, char32_t cp) { text::append_utf8(out, cp); }

std::string utf8_encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) utf8_append(out, c);
  return out;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

size_t utf8_length(std::string_view s) {
  if (is_ascii(s)) return s.size();
  return utf8_decode(s).size();
}

bool py_isspace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set = chars ? utf8_decode(*chars) : std::u32string();
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && strip_it(u[b])) ++b;
  if (right)
    while (e > b && strip_it(u[e - 1])) --e;
  return utf8_encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit) {
  std::vector<std::string> out;
  if (!sep) {
    std::u32string u = utf8_decode(s);
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && py_isspace(u[i])) ++i;
      if (i >= u.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        // The remainder keeps its trailing whitespace, as in Python.
        out.push_back(utf8_encode(std::u32string_view(u).substr(i)));
        return out;
      }
      size_t j = i;
      while (j < u.size() && !py_isspace(u[j])) ++j;
      out.push_back(utf8_encode(std::u32string_view(u).substr(i, j - i)));
      i = j;
    }
    return out;
  }
  if (sep->empty()) throw JinjaError("ValueError: empty separator");
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    size_t p = s.find(*sep, start);
    if (p == std::string_view::npos) break;
    out.emplace_back(s.substr(start, p - start));
    start = p + sep->size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (!sep) {
    std::u32string u = utf8_decode(s);
    int64_t i = static_cast<int64_t>(u.size());
    while (i > 0) {
      while (i > 0 && py_isspace(u[i - 1])) --i;
      if (i <= 0) break;
      if (static_cast<int64_t>(out.size()) == maxsplit) {
        out.push_back(utf8_encode(std::u32string_view(u).substr(0, i)));
        break;
      }
      int64_t j = i;
      while (j > 0 && !py_isspace(u[j - 1])) --j;
      out.push_back(utf8_encode(std::u32string_view(u).substr(j, i - j)));
      i = j;
    }
    std::reverse(out.begin(), out.end());
    return out;
  }
  if (sep->empty()) throw JinjaError("ValueError: empty separator");
  size_t end = s.size();
  while (static_cast<int64_t>(out.size()) < maxsplit) {
    if (end < sep->size()) break;
    size_t p = s.rfind(*sep, end - sep->size());
    if (p == std::string_view::npos) break;
    out.emplace_back(s.substr(p + sep->size(), end - p - sep->size()));
    end = p;
  }
  out.emplace_back(s.substr(0, end));
  std::reverse(out.begin(), out.end());
  return out;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts `repl` between every code point and at both ends.
    std::u32string u = utf8_decode(s);
    int64_t n = 0;
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || n < count) {
        out += repl;
        ++n;
      }
      if (i < u.size()) utf8_append(out, u[i]);
    }
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t p = s.find(old, start);
    if (p == std::string_view::npos) break;
    out.append(s.substr(start, p - start));
    out.append(repl);
    start = p + old.size();
    ++n;
  }
  out.append(s.substr(start));
  return out;
}

// Case mapping and properties with CPython's full Unicode data (text/unicode_case.h); ASCII fast paths.
std::string py_upper(std::string_view s) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out)
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    return out;
  }
  std::u32string out;
  for (char32_t c : utf8_decode(s)) text::append_upper(out, c);
  return utf8_encode(out);
}

std::string py_lower(std::string_view s) {
  if (is_ascii(s)) {
    std::string out(s);
    for (char& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return out;
  }
  std::u32string u = utf8_decode(s), out;
  for (size_t i = 0; i < u.size(); ++i) text::append_lower_at(out, u, i);
  return utf8_encode(out);
}

std::string py_casefold(std::string_view s) {
  if (is_ascii(s)) return py_lower(s);
  std::u32string out;
  for (char32_t c : utf8_decode(s)) text::append_casefold(out, c);
  return utf8_encode(out);
}

std::string py_swapcase(std::string_view s) {
  std::u32string u = utf8_decode(s), out;
  for (size_t i = 0; i < u.size(); ++i) {
    uint8_t p = text::case_properties(u[i]);
    if (p & text::kUppercase) {
      text::append_lower_at(out, u, i);
    } else if (p & text::kLowercase) {
      text::append_upper(out, u[i]);
    } else {
      out.push_back(u[i]);
    }
  }
  return utf8_encode(out);
}

// str.islower / str.isupper: no character of the other case (or titlecase), at least one of this one.
static bool cased_predicate(std::string_view s, uint8_t want, uint8_t reject) {
  bool cased = false;
  for (char32_t c : utf8_decode(s)) {
    uint8_t p = text::case_properties(c);
    if (p & reject) return false;
    cased = cased || (p & want);
  }
  return cased;
}

bool py_islower(std::string_view s) {
  return cased_predicate(s, text::kLowercase, text::kUppercase | text::kTitlecase);
}
bool py_isupper(std::string_view s) {
  return cased_predicate(s, text::kUppercase, text::kLowercase | text::kTitlecase);
}

bool py_istitle(std::string_view s) {
  bool cased = false, previous_is_cased = false;
  for (char32_t c : utf8_decode(s)) {
    uint8_t p = text::case_properties(c);
    if (p & (text::kUppercase | text::kTitlecase)) {
      if (previous_is_cased) return false;
      previous_is_cased = cased = true;
    } else if (p & text::kLowercase) {
      if (!previous_is_cased) return false;
      previous_is_cased = cased = true;
    } else {
      previous_is_cased = false;
    }
  }
  return cased;
}

// str.capitalize (Python 3.8+): the first character in titlecase, the rest in lower case.
std::string py_capitalize(std::string_view s) {
  std::u32string u = utf8_decode(s), out;
  for (size_t i = 0; i < u.size(); ++i) {
    if (i == 0) {
      text::append_title(out, u[0]);
    } else {
      text::append_lower_at(out, u, i);
    }
  }
  return utf8_encode(out);
}

// str.title: titlecase after an uncased character, lower case after a cased one.
std::string py_str_title(std::string_view s) {
  std::u32string u = utf8_decode(s), out;
  bool previous_is_cased = false;
  for (size_t i = 0; i < u.size(); ++i) {
    if (previous_is_cased) {
      text::append_lower_at(out, u, i);
    } else {
      text::append_title(out, u[i]);
    }
    previous_is_cased = text::is_cased(u[i]);
  }
  return utf8_encode(out);
}

int64_t py_count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s)) + 1;
  int64_t n = 0;
  size_t p = 0;
  while ((p = s.find(sub, p)) != std::string_view::npos) {
    ++n;
    p += sub.size();
  }
  return n;
}

int64_t py_find(std::string_view s, std::string_view sub, bool reverse) {
  size_t p = reverse ? s.rfind(sub) : s.find(sub);
  if (p == std::string_view::npos) return -1;
  return static_cast<int64_t>(utf8_length(s.substr(0, p)));
}


namespace {

// Whether one code point matches a PCRE2 (UCP) character class; used for the non-ASCII cases of
// Python's str predicates. The classes are compiled once.
bool class_matches(const char* pattern, char32_t c) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::unique_ptr<tf::text::Regex>> cache;
  const tf::text::Regex* re = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& slot = cache[pattern];
    if (!slot) {
      auto compiled = tf::text::Regex::compile(pattern);
      if (!compiled.has_value()) return false;
      slot = std::make_unique<tf::text::Regex>(std::move(*compiled));
    }
    re = slot.get();
  }
  std::string one;
  utf8_append(one, c);
  return !re->find_all(one).empty();
}

}  // namespace

bool py_is_word_char(char32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) != 0 || c == '_';
  return class_matches("^[\\p{L}\\p{N}_]$", c);  // re: str.isalnum() or "_" (no combining marks)
}

bool py_isalpha(char32_t c) {
  if (c < 0x80) return std::isalpha(static_cast<int>(c)) != 0;
  return class_matches("^\\p{L}$", c);
}

bool py_isdecimal(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return class_matches("^\\p{Nd}$", c);
}

bool py_isnumeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return class_matches("^\\p{N}$", c);
}

bool py_isprintable(char32_t c) {
  if (c < 0x80) return c >= 0x20 && c < 0x7F;
  if (c < 0xA0) return false;
  // Python: not printable = categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs (except the ASCII space).
  return !class_matches("^[\\p{C}\\p{Z}]$", c);
}

bool py_is_identifier_char(char32_t c, bool start) {
  if (c < 0x80)
    return std::isalpha(static_cast<int>(c)) != 0 || c == '_' ||
           (!start && std::isdigit(static_cast<int>(c)) != 0);
  if (c == 0x1885 || c == 0x1886 || c == 0x2118 || c == 0x212E || c == 0x309B || c == 0x309C) return true;
  if (class_matches("^[\\p{L}\\p{Nl}]$", c)) return true;
  if (start) return false;
  if (c == 0xB7 || c == 0x387 || (c >= 0x1369 && c <= 0x1371) || c == 0x19DA) return true;
  return class_matches("^[\\p{Mn}\\p{Mc}\\p{Nd}\\p{Pc}]$", c);
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

namespace {

struct HtmlEntity {
  const char* name;
  const char* value;
};

constexpr HtmlEntity kHtmlEntities[] = {
#include "text/jinja_html_entities.inc"
};

const char* find_html_entity(const std::string& name) {
  auto it = std::lower_bound(
      std::begin(kHtmlEntities), std::end(kHtmlEntities), name,
      [](const HtmlEntity& e, const std::string& n) { return std::strcmp(e.name, n.c_str()) < 0; });
  if (it == std::end(kHtmlEntities) || name != it->name) return nullptr;
  return it->value;
}

// Python's html._invalid_charrefs: what a numeric reference to a C1 control (read as windows-1252),
// NUL or CR stands for.
std::optional<char32_t> remapped_char_reference(uint32_t n) {
  static constexpr char32_t kWindows1252[32] = {
      0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
      0x2039, 0x0152, 0x8D,   0x017D, 0x8F,   0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
      0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};
  if (n == 0) return 0xFFFD;
  if (n == 0x0D) return U'\r';
  if (n >= 0x80 && n <= 0x9F) return kWindows1252[n - 0x80];
  return std::nullopt;
}

// Python's html._invalid_codepoints: references to these expand to nothing.
bool dropped_char_reference(uint32_t n) {
  return (n >= 0x1 && n <= 0x8) || n == 0xB || (n >= 0xE && n <= 0x1F) || (n >= 0x7F && n <= 0x9F) ||
         (n >= 0xFDD0 && n <= 0xFDEF) || (n & 0xFFFE) == 0xFFFE;
}

// The text of a numeric reference (digits in `base`, at least one), saturating above U+10FFFF.
std::string numeric_reference(std::string_view digits, int base) {
  uint32_t n = 0;
  for (char c : digits) {
    uint32_t d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
    n = std::min<uint32_t>(n * base + d, 0x110000);
  }
  char32_t cp;
  if (auto remapped = remapped_char_reference(n)) {
    cp = *remapped;
  } else if ((n >= 0xD800 && n <= 0xDFFF) || n > 0x10FFFF) {
    cp = 0xFFFD;
  } else if (dropped_char_reference(n)) {
    return "";
  } else {
    cp = n;
  }
  std::string out;
  utf8_append(out, cp);
  return out;
}

// A named reference: the whole name (with its ";" if any), else its longest known prefix of at
// least two characters followed by the rest, else the text unchanged.
std::string named_reference(std::string_view name) {
  if (const char* v = find_html_entity(std::string(name))) return v;
  std::u32string u = utf8_decode(name);
  for (size_t len = u.size() - 1; len > 1; --len) {
    std::string prefix = utf8_encode(std::u32string_view(u).substr(0, len));
    if (const char* v = find_html_entity(prefix)) return v + utf8_encode(std::u32string_view(u).substr(len));
  }
  return "&" + std::string(name);
}

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ascii_hex_digit(char c) { return is_ascii_digit(c) || ((c | 0x20) >= 'a' && (c | 0x20) <= 'f'); }

// Length of a run of `pred` characters starting at `from`.
template <typename Pred>
size_t run_length(std::string_view s, size_t from, Pred pred) {
  size_t end = from;
  while (end < s.size() && pred(s[end])) ++end;
  return end - from;
}

// Bytes of the longest name html.unescape's pattern accepts at `from`: 1 to 32 code points, none
// of them tab, newline, form feed, space, "<", "&", "#" or ";".
size_t entity_name_length(std::string_view s, size_t from) {
  size_t end = from;
  for (int count = 0; count < 32 && end < s.size(); ++count) {
    char c = s[end];
    if (c == '\t' || c == '\n' || c == '\f' || c == ' ' || c == '<' || c == '&' || c == '#' || c == ';')
      break;
    ++end;
    while (end < s.size() && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) ++end;
  }
  return end - from;
}

}  // namespace

std::string html_unescape(std::string_view s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    size_t amp = s.find('&', i);
    if (amp == std::string_view::npos) break;
    out.append(s.substr(i, amp - i));
    size_t j = amp + 1;
    size_t digits = 0, name = 0;
    int base = 10;
    if (j + 1 < s.size() && s[j] == '#' && is_ascii_digit(s[j + 1])) {
      digits = run_length(s, j + 1, is_ascii_digit);
      j += 1;
    } else if (j + 2 < s.size() && s[j] == '#' && (s[j + 1] | 0x20) == 'x' && is_ascii_hex_digit(s[j + 2])) {
      digits = run_length(s, j + 2, is_ascii_hex_digit);
      base = 16;
      j += 2;
    } else {
      name = entity_name_length(s, j);
    }
    if (digits == 0 && name == 0) {  // a lone "&"
      out.push_back('&');
      i = j;
      continue;
    }
    size_t end = j + digits + name;
    if (end < s.size() && s[end] == ';') ++end;
    out += digits ? numeric_reference(s.substr(j, digits), base) : named_reference(s.substr(j, end - j));
    i = end;
  }
  if (i < s.size()) out.append(s.substr(i));
  return out;
}

std::string strip_tags(std::string_view s) {
  std::string value(s);
  // Comments first, then tags; each pass resumes a little before the last cut, where removing
  // text may have joined a new "<!--" together.
  size_t from = 0;
  for (size_t start; (start = value.find("<!--", from)) != std::string::npos;) {
    size_t end = value.find("-->", start);
    if (end == std::string::npos) break;
    value.erase(start, end + 3 - start);
    from = start >= 3 ? start - 3 : 0;
  }
  from = 0;
  for (size_t start; (start = value.find('<', from)) != std::string::npos;) {
    size_t end = value.find('>', start);
    if (end == std::string::npos) break;
    value.erase(start, end + 1 - start);
    from = start;
  }
  std::string collapsed;
  for (const auto& word : py_split(value, std::nullopt, -1)) {
    if (!collapsed.empty()) collapsed.push_back(' ');
    collapsed += word;
  }
  return html_unescape(collapsed);
}

std::string url_quote(std::string_view s, bool for_query) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) && c < 0x80) {
      out.push_back(ch);
    } else if (c == '_' || c == '.' || c == '-' || c == '~' || (c == '/' && !for_query)) {
      out.push_back(ch);
    } else if (c == ' ' && for_query) {
      out.push_back('+');
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xF]);
    }
  }
  return out;
}

namespace {

// textwrap.TextWrapper.wordsep_re (hyphen-aware) and wordsep_simple_re, with Python's \w, \d and
// [^\d\W] spelled as explicit Unicode classes so that PCRE2 agrees with Python's re.
constexpr const char* kWordSeparatorPattern =
    R"([\t\n\x0b\x0c\r ]+)"
    R"(|(?<=[\p{L}\p{N}_!"'&.,?])-{2,}(?=[\p{L}\p{N}_]))"
    R"(|[^\t\n\x0b\x0c\r ]+?(?:)"
    R"(-(?:(?<=[\p{L}\p{Nl}\p{No}_]{2}-)|(?<=[\p{L}\p{Nl}\p{No}_]-[\p{L}\p{Nl}\p{No}_]-)))"
    R"((?=[\p{L}\p{Nl}\p{No}_]-?[\p{L}\p{Nl}\p{No}_]))"
    R"(|(?=[\t\n\x0b\x0c\r ]|\z))"
    R"(|(?<=[\p{L}\p{N}_!"'&.,?])(?=-{2,}[\p{L}\p{N}_])))";
constexpr const char* kWhitespaceRunPattern = R"([\t\n\x0b\x0c\r ]+)";

const tf::text::Regex& cached_regex(const char* pattern) {
  static std::mutex mu;
  static std::unordered_map<std::string, std::unique_ptr<tf::text::Regex>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = cache[pattern];
  if (!slot) {
    auto compiled = tf::text::Regex::compile(pattern);
    if (!compiled.has_value()) throw JinjaError("internal error: " + compiled.status().to_string());
    slot = std::make_unique<tf::text::Regex>(std::move(*compiled));
  }
  return *slot;
}

// re.split(pattern, text) with one capturing group around the whole pattern, empty pieces dropped:
// the matches and the text between them, in order.
std::vector<std::u32string> split_keeping_matches(std::string_view text, const tf::text::Regex& re) {
  std::vector<std::u32string> chunks;
  size_t last = 0;
  for (auto [begin, end] : re.find_all(text)) {
    if (begin > last) chunks.push_back(utf8_decode(text.substr(last, begin - last)));
    if (end > begin) chunks.push_back(utf8_decode(text.substr(begin, end - begin)));
    last = end;
  }
  if (last < text.size()) chunks.push_back(utf8_decode(text.substr(last)));
  return chunks;
}

bool is_blank(const std::u32string& chunk) {
  return std::all_of(chunk.begin(), chunk.end(), [](char32_t c) { return py_isspace(c); });
}

// TextWrapper._handle_long_word: puts as much of the next (too long) chunk on the line as fits.
void break_long_word(std::vector<std::u32string>& reversed_chunks, std::vector<std::u32string>& line,
                     int64_t line_length, const TextWrapOptions& o) {
  int64_t space_left = o.width < 1 ? 1 : o.width - line_length;
  std::u32string& chunk = reversed_chunks.back();
  if (!o.break_long_words) {
    if (line.empty()) {
      line.push_back(std::move(chunk));
      reversed_chunks.pop_back();
    }
    return;
  }
  size_t end = static_cast<size_t>(space_left);
  if (o.break_long_at_hyphens && static_cast<int64_t>(chunk.size()) > space_left) {
    // After the last hyphen that fits, if something other than hyphens comes before it.
    size_t hyphen = chunk.substr(0, end).rfind(U'-');
    if (hyphen != std::u32string::npos && hyphen > 0 && chunk.find_first_not_of(U'-') < hyphen)
      end = hyphen + 1;
  }
  line.push_back(chunk.substr(0, end));
  chunk = chunk.size() > end ? chunk.substr(end) : std::u32string();
}

}  // namespace

bool regex_search(const char* pattern, std::string_view text) {
  return cached_regex(pattern).contains_match(text);
}

std::vector<std::string> text_wrap(std::string_view text, const TextWrapOptions& o) {
  if (o.width <= 0)
    throw JinjaError("ValueError: invalid width " + std::to_string(o.width) + " (must be > 0)");
  const auto& re = cached_regex(o.split_at_hyphens ? kWordSeparatorPattern : kWhitespaceRunPattern);
  std::vector<std::u32string> chunks = split_keeping_matches(text, re);
  std::reverse(chunks.begin(), chunks.end());
  std::vector<std::string> lines;
  while (!chunks.empty()) {
    std::vector<std::u32string> line;
    int64_t length = 0;
    // Whitespace at the start of every line but the first is dropped.
    if (is_blank(chunks.back()) && !lines.empty()) chunks.pop_back();
    while (!chunks.empty() && length + static_cast<int64_t>(chunks.back().size()) <= o.width) {
      length += static_cast<int64_t>(chunks.back().size());
      line.push_back(std::move(chunks.back()));
      chunks.pop_back();
    }
    if (!chunks.empty() && static_cast<int64_t>(chunks.back().size()) > o.width)
      break_long_word(chunks, line, length, o);
    if (!line.empty() && is_blank(line.back())) line.pop_back();
    if (line.empty()) continue;
    std::u32string joined;
    for (const auto& piece : line) joined += piece;
    lines.push_back(utf8_encode(joined));
  }
  return lines;
}

std::string py_repr_string(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  static const char* kHex = "0123456789abcdef";
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x100 && !py_isprintable(c)) {
      out += "\\x";
      out.push_back(kHex[(c >> 4) & 0xF]);
      out.push_back(kHex[c & 0xF]);
    } else if (c >= 0x100 && !py_isprintable(c)) {
      // CPython: \uXXXX below U+10000, \UXXXXXXXX above (e.g. U+200B, U+2028, U+E000).
      int digits = c < 0x10000 ? 4 : 8;
      out += digits == 4 ? "\\u" : "\\U";
      for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) out.push_back(kHex[(c >> shift) & 0xF]);
    } else {
      utf8_append(out, c);
    }
  }
  out.push_back(quote);
  return out;
}

void json_escape_string(std::string& out, std::string_view s, bool ensure_ascii) {
  static const char* kHex = "0123456789abcdef";
  auto u_escape = [&](uint32_t v) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out.push_back(kHex[(v >> shift) & 0xF]);
  };
  out.push_back('"');
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          u_escape(c);
        } else if (ensure_ascii && c >= 0x7F) {
          if (c >= 0x10000) {
            uint32_t v = c - 0x10000;
            u_escape(0xD800 | (v >> 10));
            u_escape(0xDC00 | (v & 0x3FF));
          } else {
            u_escape(c);
          }
        } else {
          utf8_append(out, c);
        }
    }
  }
  out.push_back('"');
}

std::vector<int64_t> py_slice_indices(int64_t length, std::optional<int64_t> start,
                                      std::optional<int64_t> stop, std::optional<int64_t> step_opt) {
  int64_t step = step_opt.value_or(1);
  if (step == 0) throw JinjaError("ValueError: slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) -> int64_t {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += length;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= length) {
      x = step < 0 ? length - 1 : length;
    }
    return x;
  };
  int64_t b = clamp(start, step < 0 ? length - 1 : 0);
  int64_t e = clamp(stop, step < 0 ? -1 : length);
  std::vector<int64_t> out;
  if (step > 0) {
    for (int64_t i = b; i < e; i += step) out.push_back(i);
  } else {
    for (int64_t i = b; i > e; i += step) out.push_back(i);
  }
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s) {
  std::vector<std::string> lines;
  std::u32string u = utf8_decode(s);
  size_t start = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    char32_t c = u[i];
    bool boundary = c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1C || c == 0x1D || c == 0x1E ||
                    c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    lines.push_back(utf8_encode(std::u32string_view(u).substr(start, i - start)));
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < u.size()) lines.push_back(utf8_encode(std::u32string_view(u).substr(start)));
  return lines;
}

}  // namespace tf::jinja
