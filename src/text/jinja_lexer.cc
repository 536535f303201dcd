// Jinja lexer (see jinja_lexer.h). Mirrors the rules of jinja2.lexer.Lexer for the default
// delimiters; line statements and custom delimiters are not supported (no chat template uses them).
#include "text/jinja_lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "text/jinja_strings.h"
#include "text/jinja_value.h"
#include "text/utf8.h"

namespace tf::jinja {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// The code point at s[p] and its length in bytes (0 past the end or at an invalid sequence).
size_t code_point_at(std::string_view s, size_t p, char32_t& cp) {
  if (p >= s.size()) return 0;
  const auto c = static_cast<unsigned char>(s[p]);
  if (c < 0x80) {
    cp = c;
    return 1;
  }
  const size_t len = text::utf8_sequence_length(s, p);
  if (len != 0) cp = text::decode_utf8_at(s, p, len);
  return len;
}

// Every strip of jinja2's lexer (str.rstrip, re's \s) takes Python's whitespace, which goes beyond
// ASCII (U+00A0, U+3000, U+2028, ...). Returns the byte length of the whitespace code point at s[p],
// or 0 when there is none.
size_t ws_len(std::string_view s, size_t p) {
  char32_t cp = 0;
  const size_t len = code_point_at(s, p, cp);
  return len != 0 && py_isspace(cp) ? len : 0;
}
size_t skip_ws(std::string_view s, size_t p) {
  while (size_t len = ws_len(s, p)) p += len;
  return p;
}
// The start of the whitespace run that ends at byte e.
size_t ws_run_start(std::string_view s, size_t e) {
  while (e > 0) {
    size_t b = e - 1;
    while (b > 0 && e - b < 4 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    if (ws_len(s, b) != e - b) break;
    e = b;
  }
  return e;
}

// Names as jinja2 lexes them: a run of word characters (re's \w: letters, digits, `_`) and the other
// characters an identifier may continue with (combining marks, connector punctuation, U+00B7, ...),
// which must then be a Python identifier (str.isidentifier: XID_Start or `_`, then XID_Continue).
// Digits never start one: the number rules come first.
bool is_name_char(char32_t c) {
  if (c < 0x80) return std::isalnum(static_cast<int>(c)) != 0 || c == '_';
  return py_is_word_char(c) || py_is_identifier_char(c, false);
}
bool is_name_start(char32_t c) {
  if (c < 0x80) return std::isalpha(static_cast<int>(c)) != 0 || c == '_';
  return is_name_char(c);
}

class Lexer {
 public:
  Lexer(std::string source, const LexerOptions& options) : src_(std::move(source)), opt_(options) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    const size_t n = src_.size();
    while (pos < n) {
      size_t start = find_tag(pos);
      if (start == std::string::npos) {
        emit(TokenType::kText, src_.substr(pos), pos);
        break;
      }
      char kind = src_[start + 1];
      char sign = (start + 2 < n && (src_[start + 2] == '-' || src_[start + 2] == '+')) ? src_[start + 2] : 0;
      size_t after_sign = start + 2 + (sign ? 1 : 0);
      std::string text = src_.substr(pos, start - pos);
      size_t raw_body = kind == '%' ? match_raw_begin(after_sign) : std::string::npos;
      text = strip_text(std::move(text), sign, kind != '{', line_starting);
      if (!text.empty()) emit(TokenType::kText, text, pos);
      if (raw_body != std::string::npos) {
        pos = lex_raw(raw_body, &line_starting);
      } else if (kind == '#') {
        pos = lex_comment(start, after_sign, &line_starting);
      } else {
        pos = lex_tag(start, after_sign, kind == '%', &line_starting);
      }
    }
    tokens_.push_back(Token{TokenType::kEof, "", position_line(n), position_column(n)});
    return std::move(tokens_);
  }

 private:
  size_t find_tag(size_t pos) const {
    size_t p = pos;
    while ((p = src_.find('{', p)) != std::string::npos) {
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#')) return p;
      ++p;
    }
    return std::string::npos;
  }

  // jinja2's OptionalLStrip: `-` strips all trailing whitespace of the text; otherwise lstrip_blocks
  // removes the whitespace-only tail after the last newline (or of the whole text at a line start).
  std::string strip_text(std::string text, char sign, bool block_or_comment, bool line_starting) const {
    if (sign == '-') {
      text.resize(ws_run_start(text, text.size()));
    } else if (sign != '+' && opt_.lstrip_blocks && block_or_comment) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        bool all_ws = l_pos < text.size() && skip_ws(text, l_pos) == text.size();
        if (all_ws) text.resize(l_pos);
      }
    }
    return text;
  }

  // `{%[-+]? raw [-]?%}`: returns the position after the tag, or npos when this is not a raw tag.
  size_t match_raw_begin(size_t p) const {
    p = skip_ws(src_, p);
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p += 3;
    p = skip_ws(src_, p);
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      p = skip_ws(src_, p);
      return p;
    }
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  size_t lex_raw(size_t body, bool* line_starting) {
    size_t p = body;
    while ((p = src_.find("{%", p)) != std::string::npos) {
      size_t q = p + 2;
      char sign = (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ? src_[q] : 0;
      if (sign) ++q;
      q = skip_ws(src_, q);
      if (src_.compare(q, 6, "endraw") == 0) {
        q += 6;
        q = skip_ws(src_, q);
        size_t end = match_block_end(q);
        if (end != std::string::npos) {
          std::string text = strip_text(src_.substr(body, p - body), sign, true, false);
          if (!text.empty()) emit(TokenType::kText, text, body);
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      p += 2;
    }
    fail("Missing end of raw directive", body);
  }

  // At `-%}`, `+%}` or `%}`: returns the position after the end (with the whitespace it eats).
  size_t match_block_end(size_t p) const {
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      p = skip_ws(src_, p);
      return p;
    }
    if (src_.compare(p, 3, "+%}") == 0) return p + 3;
    if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
      if (opt_.trim_blocks && p < src_.size() && src_[p] == '\n') ++p;
      return p;
    }
    return std::string::npos;
  }

  size_t lex_comment(size_t start, size_t content, bool* line_starting) {
    size_t q = src_.find("#}", content);
    if (q == std::string::npos) fail("Missing end of comment tag", start);
    size_t end = q + 2;
    if (q > content && src_[q - 1] == '-') {
      end = skip_ws(src_, end);
    } else if (q > content && src_[q - 1] == '+') {
      // keep whitespace
    } else if (opt_.trim_blocks && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    *line_starting = src_[end - 1] == '\n';
    return end;
  }

  size_t lex_tag(size_t start, size_t p, bool block, bool* line_starting) {
    emit(block ? TokenType::kBlockBegin : TokenType::kVarBegin, block ? "{%" : "{{", start);
    std::vector<char> balance;
    const size_t n = src_.size();
    while (true) {
      if (p >= n)
        fail(
            block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'",
            start);
      if (balance.empty()) {
        size_t end = std::string::npos;
        if (block) {
          end = match_block_end(p);
        } else if (src_.compare(p, 3, "-}}") == 0) {
          end = p + 3;
          end = skip_ws(src_, end);
        } else if (src_.compare(p, 2, "}}") == 0) {
          end = p + 2;
        }
        if (end != std::string::npos) {
          emit(block ? TokenType::kBlockEnd : TokenType::kVarEnd, block ? "%}" : "}}", p);
          *line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      char c = src_[p];
      if (size_t len = ws_len(src_, p)) {
        p += len;
        continue;
      }
      if (is_digit(c)) {
        p = lex_number(p);
        continue;
      }
      char32_t cp = 0;
      const size_t cp_len = code_point_at(src_, p, cp);
      if (cp_len != 0 && is_name_start(cp)) {
        p = lex_name(p);
        continue;
      }
      if (c == '\'' || c == '"') {
        p = lex_string(p);
        continue;
      }
      static const char* kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                   "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
      bool matched = false;
      for (const char* op : kOps) {
        size_t len = std::char_traits<char>::length(op);
        if (src_.compare(p, len, op) == 0) {
          if (len == 1 && (c == '{' || c == '(' || c == '[')) {
            balance.push_back(c == '{' ? '}' : c == '(' ? ')' : ']');
          } else if (len == 1 && (c == '}' || c == ')' || c == ']')) {
            if (balance.empty()) fail(std::string("unexpected '") + c + "'", p);
            if (balance.back() != c)
              fail(std::string("unexpected '") + c + "', expected '" + balance.back() + "'", p);
            balance.pop_back();
          }
          emit(TokenType::kOperator, op, p);
          p += len;
          matched = true;
          break;
        }
      }
      if (!matched) fail("unexpected char " + quoted_code_point(p), p);
    }
  }

  // A name token (see is_name_char), checked as a Python identifier as jinja2 checks it.
  size_t lex_name(size_t p) {
    size_t e = p;
    char32_t cp = 0;
    bool identifier = true;
    while (size_t len = code_point_at(src_, e, cp)) {
      if (!is_name_char(cp)) break;
      if (cp >= 0x80 && !py_is_identifier_char(cp, e == p)) identifier = false;
      e += len;
    }
    if (!identifier) fail("Invalid character in identifier", p);
    emit(TokenType::kName, src_.substr(p, e - p), p);
    return e;
  }

  // The code point at p for a message: 'x', or U+XXXX for one that is not printable or not valid
  // UTF-8 (a message must stay valid UTF-8).
  std::string quoted_code_point(size_t p) const {
    char32_t cp = 0;
    const size_t len = code_point_at(src_, p, cp);
    if (len != 0 && py_isprintable(cp)) return "'" + src_.substr(p, len) + "'";
    char buf[32];
    std::snprintf(
        buf, sizeof buf, len != 0 ? "U+%04X" : "byte 0x%02X",
        len != 0 ? static_cast<unsigned>(cp) : static_cast<unsigned>(static_cast<unsigned char>(src_[p])));
    return buf;
  }

  // jinja2's decimal integers have no leading zero: "0(_?0)*" is the only one starting with 0, so
  // `007` lexes as 00 then 7 and `0_1` as 0 then the name _1 (both syntax errors in the parser).
  size_t zero_integer_end(size_t p) const {
    size_t e = p + 1;
    while (e < src_.size()) {
      if (src_[e] == '0') {
        ++e;
      } else if (src_[e] == '_' && e + 1 < src_.size() && src_[e + 1] == '0') {
        e += 2;
      } else {
        break;
      }
    }
    return e;
  }

  size_t lex_number(size_t p) {
    const size_t n = src_.size();
    // 0x.., 0o.., 0b.. (with optional _ between digits), as jinja2's integer_re; emitted in decimal.
    if (src_[p] == '0' && p + 2 < n && std::strchr("xXoObB", src_[p + 1]) != nullptr) {
      char kind = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[p + 1])));
      int base = kind == 'x' ? 16 : kind == 'o' ? 8 : 2;
      auto digit_value = [&](char c) -> int {
        int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                : std::isxdigit(static_cast<unsigned char>(c)) ? std::tolower(static_cast<unsigned char>(c)) - 'a' + 10
                                                                : 99;
        return d < base ? d : -1;
      };
      size_t q = p + 2;
      uint64_t value = 0;
      bool any = false, overflow = false;
      while (q < n) {
        if (src_[q] == '_' && q + 1 < n && digit_value(src_[q + 1]) >= 0) ++q;
        int d = digit_value(src_[q]);
        if (d < 0) break;
        if (value > (UINT64_MAX - static_cast<uint64_t>(d)) / static_cast<uint64_t>(base)) overflow = true;
        value = value * static_cast<uint64_t>(base) + static_cast<uint64_t>(d);
        any = true;
        ++q;
      }
      if (any) {
        if (overflow || value > static_cast<uint64_t>(INT64_MAX)) fail("integer literal too large", p);
        emit(TokenType::kInteger, std::to_string(value), p);
        return q;
      }
    }
    auto digits = [&](size_t q) {  // (\d+_)*\d+
      size_t e = q;
      while (e < n && (is_digit(src_[e]) || (src_[e] == '_' && e + 1 < n && is_digit(src_[e + 1]) && e > q)))
        ++e;
      return e;
    };
    size_t e = digits(p);
    bool is_float = false;
    // The float rule requires that the number does not follow a '.', so `a.0.b` stays an index.
    bool after_dot = p > 0 && src_[p - 1] == '.';
    if (!after_dot) {
      size_t q = e;
      if (q + 1 < n && src_[q] == '.' && is_digit(src_[q + 1])) {
        q = digits(q + 1);
        is_float = true;
      }
      if (q < n && (src_[q] == 'e' || src_[q] == 'E')) {
        size_t r = q + 1;
        if (r < n && (src_[r] == '+' || src_[r] == '-')) ++r;
        if (r < n && is_digit(src_[r])) {
          q = digits(r);
          is_float = true;
        }
      }
      if (is_float) e = q;
    }
    if (!is_float && src_[p] == '0') e = zero_integer_end(p);
    std::string text;
    for (size_t i = p; i < e; ++i)
      if (src_[i] != '_') text.push_back(src_[i]);
    emit(is_float ? TokenType::kFloat : TokenType::kInteger, text, p);
    return e;
  }

  size_t lex_string(size_t p) {
    char quote = src_[p];
    size_t q = p + 1;
    std::string raw;
    while (true) {
      if (q >= src_.size()) fail("unexpected end of string", p);
      char c = src_[q];
      if (c == '\\' && q + 1 < src_.size()) {
        raw.push_back(c);
        raw.push_back(src_[q + 1]);
        q += 2;
        continue;
      }
      if (c == quote) break;
      raw.push_back(c);
      ++q;
    }
    emit(TokenType::kString, unescape(raw, p), p);
    return q + 1;
  }

  // Python's "unicode-escape" decoding, as jinja2 applies it to string literals.
  std::string unescape(const std::string& raw, size_t at) const {
    std::string out;
    for (size_t i = 0; i < raw.size(); ++i) {
      char c = raw[i];
      if (c != '\\' || i + 1 >= raw.size()) {
        out.push_back(c);
        continue;
      }
      char e = raw[++i];
      auto hex = [&](int count) -> char32_t {
        if (i + count >= raw.size()) fail("truncated escape in string literal", at);
        char32_t v = 0;
        for (int k = 1; k <= count; ++k) {
          char h = raw[i + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail("truncated escape in string literal", at);
          v = v * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                 ? h - '0'
                                                 : (std::tolower(h) - 'a' + 10));
        }
        i += count;
        return v;
      };
      switch (e) {
        case '\n':
          break;  // line continuation
        case '\\':
          out.push_back('\\');
          break;
        case '\'':
          out.push_back('\'');
          break;
        case '"':
          out.push_back('"');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'x':
          utf8_append(out, hex(2));
          break;
        case 'u':
          utf8_append(out, hex(4));
          break;
        case 'U':
          utf8_append(out, hex(8));
          break;
        case 'N':
          fail("malformed \\N character escape (named escapes are not supported)", at);
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < raw.size() && raw[i + 1] >= '0' && raw[i + 1] <= '7'; ++k)
              v = v * 8 + static_cast<char32_t>(raw[++i] - '0');
            utf8_append(out, v);
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    return out;
  }

  int position_line(size_t pos) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
    return static_cast<int>(it - line_starts_.begin());
  }
  int position_column(size_t pos) const {
    return static_cast<int>(pos - line_starts_[static_cast<size_t>(position_line(pos) - 1)]) + 1;
  }
  void emit(TokenType type, std::string value, size_t pos) {
    tokens_.push_back(Token{type, std::move(value), position_line(pos), position_column(pos)});
  }
  [[noreturn]] void fail(const std::string& message, size_t pos) const {
    throw JinjaError(message, position_line(pos), position_column(pos));
  }

  std::string src_;
  LexerOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source, const LexerOptions& options) {
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized.push_back(source[i]);
    }
  }
  if (!options.keep_trailing_newline && !normalized.empty() && normalized.back() == '\n')
    normalized.pop_back();
  return Lexer(std::move(normalized), options).run();
}

}  // namespace tf::jinja
