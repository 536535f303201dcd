// String helpers with Python semantics for the Jinja engine. Python strings are sequences of code
// points while ours are UTF-8 bytes, so length, indexing and slicing decode to code points first
// (only when the string holds non-ASCII bytes). Case mapping and case predicates use Python's full
// Unicode data (text/unicode_case.h), final sigma included.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tf::jinja {

std::u32string utf8_decode(std::string_view s);  // invalid bytes decode as U+FFFD
std::string utf8_encode(std::u32string_view s);
void utf8_append(std::string& out, char32_t cp);
bool is_ascii(std::string_view s);
size_t utf8_length(std::string_view s);

bool py_isspace(char32_t c);
// Python's character classes beyond ASCII (Unicode general categories, via PCRE2's tables):
// re's \w, str.isalpha, str.isdecimal, str.isnumeric and str.isprintable (which repr() uses).
bool py_is_word_char(char32_t c);
bool py_isalpha(char32_t c);
bool py_isdecimal(char32_t c);
bool py_isnumeric(char32_t c);
bool py_isprintable(char32_t c);
// Python identifiers (str.isidentifier) beyond ASCII: XID_Start (start) or XID_Continue, taken as
// their general categories (L, Nl; + Mn, Mc, Nd, Pc) and Other_ID_Start / Other_ID_Continue.
bool py_is_identifier_char(char32_t c, bool start);
// str.strip/lstrip/rstrip: `chars` unset strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / str.rsplit: `sep` unset splits on whitespace runs; maxsplit < 0 means no limit.
std::vector<std::string> py_split(std::string_view s, const std::optional<std::string>& sep,
                                  int64_t maxsplit);
std::vector<std::string> py_rsplit(std::string_view s, const std::optional<std::string>& sep,
                                   int64_t maxsplit);
std::string py_replace(std::string_view s, std::string_view old, std::string_view repl, int64_t count);
std::string py_upper(std::string_view s);
std::string py_lower(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_str_title(std::string_view s);  // str.title()
std::string py_casefold(std::string_view s);
std::string py_swapcase(std::string_view s);
// str.islower / str.isupper: every cased character has that case, and there is at least one.
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);
bool py_istitle(std::string_view s);
int64_t py_count(std::string_view s, std::string_view sub);
// str.find in code points, or -1.
int64_t py_find(std::string_view s, std::string_view sub, bool reverse);

// markupsafe.escape of a str: & < > " ' become &amp; &lt; &gt; &#34; &#39;.
std::string html_escape(std::string_view s);

// Python's str.splitlines (every Unicode line boundary; "\r\n" is one).
std::vector<std::string> py_splitlines(const std::string& s);

// html.unescape: HTML5 named and numeric character references, with Python's rules for invalid
// and semicolon-less ones.
std::string html_unescape(std::string_view s);
// markupsafe's Markup.striptags (3.x): removes <!-- comments --> and <tags>, collapses whitespace
// runs into single spaces and unescapes character references.
std::string strip_tags(std::string_view s);
// jinja2's url_quote: percent-encodes the UTF-8 bytes except letters, digits and "_.-~", and "/"
// unless `for_query`, which also writes spaces as "+".
std::string url_quote(std::string_view s, bool for_query);
// textwrap.wrap(text, width, expand_tabs=False, replace_whitespace=False, break_long_words,
// break_on_hyphens), which jinja2's wordwrap filter applies to each line. Needs width > 0.
struct TextWrapOptions {
  int64_t width = 79;
  bool break_long_words = true;
  // textwrap splits words at hyphens only when break_on_hyphens `is True`, but breaks a long word
  // after a hyphen whenever it is truthy.
  bool split_at_hyphens = true;
  bool break_long_at_hyphens = true;
};
std::vector<std::string> text_wrap(std::string_view text, const TextWrapOptions& options);

// Whether the PCRE2 pattern (compiled once, then cached) matches somewhere in `text`; anchor it
// with ^ and \z for Python's re.fullmatch.
bool regex_search(const char* pattern, std::string_view text);

// Python repr() of a string: quotes and escapes as CPython does.
std::string py_repr_string(std::string_view s);
// A JSON string literal as json.dumps writes it (ensure_ascii escapes non-ASCII as \uXXXX).
void json_escape_string(std::string& out, std::string_view s, bool ensure_ascii);

// Normalises slice bounds the way Python's slice.indices(length) does; returns the indices.
std::vector<int64_t> py_slice_indices(int64_t length, std::optional<int64_t> start,
                                      std::optional<int64_t> stop, std::optional<int64_t> step);

}  // namespace tf::jinja
