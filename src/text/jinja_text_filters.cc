// jinja2's filters that rework text as HTML/URL/paragraphs (see jinja_text_filters.h).
#include "text/jinja_text_filters.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "text/jinja_ops.h"
#include "text/jinja_strings.h"

namespace tf::jinja {
namespace {

std::string join_strings(const std::vector<std::string>& parts, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? separator : "") + parts[i];
  return out;
}

// clang-format off
// Python's \s, \S, \w and \d as explicit classes, so that PCRE2 matches what Python's re does.
#define TF_PY_SPACE "\\t\\n\\x0b\\x0c\\r\\x1c-\\x1f \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"
#define TF_PY_WORD "\\p{L}\\p{N}_"
// jinja2.utils._http_re, _email_re and filters._uri_scheme_re.
constexpr const char* kUrlizeHttpPattern =
    "(?i)^(?:(?:https?://|www\\.)(?:(?:[" TF_PY_WORD "%-]+\\.)+)?(?:[a-z]{2,63}|xn--[" TF_PY_WORD "%]{2,59})"
    "|(?:[" TF_PY_WORD "%-]{2,63}\\.)+(?:com|net|int|edu|gov|org|info|mil)"
    "|https?://(?:\\p{Nd}{1,3}(?:\\.\\p{Nd}{1,3}){3}|\\[(?:[\\p{Nd}a-f]{0,4}:){2}(?:[\\p{Nd}a-f]{0,4}:?){1,6}\\]))"
    "(?::\\p{Nd}{1,5})?(?:[/?#][^" TF_PY_SPACE "]*)?$";
constexpr const char* kUrlizeEmailPattern =
    "^[^" TF_PY_SPACE "]+@[" TF_PY_WORD "][" TF_PY_WORD ".-]*\\.[" TF_PY_WORD "]+$";
constexpr const char* kUriSchemePattern = "^[" TF_PY_WORD ".+-]{2,}:/{0,2}\\z";
#undef TF_PY_SPACE
#undef TF_PY_WORD
// clang-format on

struct UrlizeOptions {
  std::optional<int64_t> trim_url_limit;
  std::string link_attributes;  // ` rel="..."` and ` target="..."`
  std::vector<std::string> extra_schemes;
};

// The text of a link: the URL, cut to trim_url_limit code points (Python slicing) plus "...".
std::string trimmed_url(const std::string& url, const UrlizeOptions& o) {
  if (!o.trim_url_limit) return url;
  std::u32string u = utf8_decode(url);
  int64_t n = static_cast<int64_t>(u.size()), limit = *o.trim_url_limit;
  if (n <= limit) return url;
  int64_t keep = limit >= 0 ? limit : std::max<int64_t>(0, n + limit);
  return utf8_encode(std::u32string_view(u).substr(0, static_cast<size_t>(keep))) + "...";
}

bool starts_with(const std::string& s, std::string_view prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Splits one word into its leading "(", "<", "&lt;" run, the middle and its trailing punctuation,
// moving closing brackets back into the middle while they balance opening ones there.
void split_word_punctuation(std::string& head, std::string& middle, std::string& tail) {
  size_t h = 0;
  while (true) {
    if (h < middle.size() && (middle[h] == '(' || middle[h] == '<')) {
      ++h;
    } else if (middle.compare(h, 4, "&lt;") == 0) {
      h += 4;
    } else {
      break;
    }
  }
  head = middle.substr(0, h);
  middle.erase(0, h);
  size_t t = middle.size();
  while (true) {
    if (t > 0 && std::string_view(")>.,\n").find(middle[t - 1]) != std::string_view::npos) {
      --t;
    } else if (t >= 4 && middle.compare(t - 4, 4, "&gt;") == 0) {
      t -= 4;
    } else {
      break;
    }
  }
  tail = middle.substr(t);
  middle.erase(t);
  static const std::pair<std::string_view, std::string_view> kBrackets[] = {
      {"(", ")"}, {"<", ">"}, {"&lt;", "&gt;"}};
  for (const auto& [open, close] : kBrackets) {
    int64_t opened = py_count(middle, open);
    if (opened <= py_count(middle, close)) continue;
    for (int64_t moves = std::min(opened, py_count(tail, close)); moves > 0; --moves) {
      size_t end = tail.find(close) + close.size();
      middle += tail.substr(0, end);
      tail.erase(0, end);
    }
  }
}

std::string urlize_word(const std::string& word, const UrlizeOptions& o) {
  std::string head, middle = word, tail;
  split_word_punctuation(head, middle, tail);
  if (regex_search(kUrlizeHttpPattern, middle)) {
    std::string href =
        starts_with(middle, "https://") || starts_with(middle, "http://") ? middle : "https://" + middle;
    middle = "<a href=\"" + href + "\"" + o.link_attributes + ">" + trimmed_url(middle, o) + "</a>";
  } else if (starts_with(middle, "mailto:") && regex_search(kUrlizeEmailPattern, middle.substr(7))) {
    middle = "<a href=\"" + middle + "\">" + middle.substr(7) + "</a>";
  } else if (middle.find('@') != std::string::npos && !starts_with(middle, "www.") &&
             !starts_with(middle, "@") && middle.find(':') == std::string::npos &&
             regex_search(kUrlizeEmailPattern, middle)) {
    middle = "<a href=\"mailto:" + middle + "\">" + middle + "</a>";
  } else {
    for (const auto& scheme : o.extra_schemes)
      if (middle != scheme && starts_with(middle, scheme))
        middle = "<a href=\"" + middle + "\"" + o.link_attributes + ">" + middle + "</a>";
  }
  return head + middle + tail;
}

}  // namespace

// jinja2's urlencode: a string (or anything not iterable) is quoted as a URL path; a dict, or an
// iterable of (key, value) pairs, becomes a query string.
Value urlencode_filter(const Value& v) {
  if (v.is_string() || v.is_number() || v.is_none() || v.is_namespace() || v.is_callable())
    return Value(url_quote(v.to_str(), false));
  std::vector<Value> pairs;
  if (v.is_dict()) {
    for (const auto& [k, val] : v.dict_data().entries) pairs.push_back(Value::tuple({k, val}));
  } else {
    pairs = iterate(v);
  }
  std::vector<std::string> fields;
  for (const auto& pair : pairs) {
    std::vector<Value> kv = iterate(pair);  // Python unpacks `for k, v in items`
    if (kv.size() != 2)
      throw JinjaError("ValueError: urlencode expects (key, value) pairs, got " + std::to_string(kv.size()) +
                       " values");
    fields.push_back(url_quote(kv[0].to_str(), true) + "=" + url_quote(kv[1].to_str(), true));
  }
  return Value(join_strings(fields, "&"));
}

// jinja2's xmlattr: ` key="value"` for each item whose value is neither none nor undefined, both
// HTML-escaped; keys with whitespace, "/", ">" or "=" are refused.
Value xmlattr_filter(const Value& v, CallArgs& a) {
  ArgBinder b("xmlattr", a, {"autospace"});
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_dict())
    throw JinjaError(std::string("AttributeError: '") + v.type_name() + "' object has no attribute 'items'");
  std::vector<std::string> items;
  for (const auto& [key, val] : v.dict_data().entries) {
    if (val.is_none() || val.is_undefined()) continue;
    if (!key.is_string()) throw JinjaError("TypeError: expected string or bytes-like object");
    if (key.str().find_first_of(" \t\n\r\f\v/>=") != std::string::npos)
      throw JinjaError("ValueError: Invalid character in attribute name: " + key.repr());
    items.push_back(markup_escape(key).str() + "=\"" + markup_escape(val).str() + "\"");
  }
  std::string out = join_strings(items, " ");
  if (b.get(0, Value(true)).truthy() && !out.empty()) out = " " + out;
  return Value(out);
}

// jinja2's wordwrap: textwrap.wrap on each line of the string, all pieces joined by `wrapstring`.
Value wordwrap_filter(const Value& v, CallArgs& a) {
  ArgBinder b("wordwrap", a, {"width", "break_long_words", "wrapstring", "break_on_hyphens"});
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string())
    throw JinjaError(std::string("AttributeError: '") + v.type_name() +
                     "' object has no attribute 'splitlines'");
  Value width = b.get(0, Value(int64_t{79}));
  if (!width.is_int() && !width.is_bool()) throw JinjaError("TypeError: wordwrap width must be an integer");
  Value wrapstring = b.get(2, Value::none());
  std::string separator = wrapstring.is_none() ? "\n" : require_string_arg(wrapstring, "wrapstring");
  Value hyphens = b.get(3, Value(true));
  TextWrapOptions options{.width = width.as_int(),
                          .break_long_words = b.get(1, Value(true)).truthy(),
                          .split_at_hyphens = hyphens.is_bool() && hyphens.as_bool(),
                          .break_long_at_hyphens = hyphens.truthy()};
  std::vector<std::string> paragraphs;
  for (const auto& line : py_splitlines(v.str()))
    paragraphs.push_back(join_strings(text_wrap(line, options), separator));
  return Value(join_strings(paragraphs, separator));
}

// jinja2's urlize filter (utils.urlize with the default policies: rel="noopener", no target).
Value urlize_filter(const Value& v, CallArgs& a) {
  ArgBinder b("urlize", a, {"trim_url_limit", "nofollow", "target", "rel", "extra_schemes"});
  UrlizeOptions o;
  Value limit = b.get(0, Value::none());
  if (!limit.is_none()) {
    if (!limit.is_int() && !limit.is_bool()) throw JinjaError("TypeError: trim_url_limit must be an integer");
    o.trim_url_limit = limit.as_int();
  }
  Value rel = b.get(3, Value::none());
  std::vector<std::string> rel_parts = {"noopener"};
  if (rel.truthy()) {
    for (auto& part : py_split(require_string_arg(rel, "rel"), std::nullopt, -1)) rel_parts.push_back(part);
  }
  if (b.get(1, Value(false)).truthy()) rel_parts.push_back("nofollow");
  std::sort(rel_parts.begin(), rel_parts.end());
  rel_parts.erase(std::unique(rel_parts.begin(), rel_parts.end()), rel_parts.end());
  o.link_attributes = " rel=\"" + html_escape(join_strings(rel_parts, " ")) + "\"";
  Value target = b.get(2, Value::none());
  if (target.truthy()) o.link_attributes += " target=\"" + markup_escape(target).str() + "\"";
  Value schemes = b.get(4, Value::none());
  if (!schemes.is_none()) {
    for (const auto& scheme : iterate(schemes)) {
      if (!scheme.is_string() || !regex_search(kUriSchemePattern, scheme.str()))
        throw JinjaError("FilterArgumentError: " + scheme.repr() + " is not a valid URI scheme prefix.");
      o.extra_schemes.push_back(scheme.str());
    }
  }
  // Words are the runs between whitespace (Python's \s); the whitespace is kept as it is.
  std::u32string text = utf8_decode(markup_escape(v).str());
  std::string out;
  for (size_t i = 0; i < text.size();) {
    bool space = py_isspace(text[i]);
    size_t j = i;
    while (j < text.size() && py_isspace(text[j]) == space) ++j;
    std::string piece = utf8_encode(std::u32string_view(text).substr(i, j - i));
    out += space ? piece : urlize_word(piece, o);
    i = j;
  }
  return Value(out);
}

}  // namespace tf::jinja
