// PCRE2 wrapper. Match data is allocated per call so that one compiled Regex can be used from many
// threads at once (the JIT code itself is read-only after compilation).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

#include "text/oniguruma_pattern.h"
#include "text/utf8.h"

namespace tf::text {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;
Regex::~Regex() = default;

Expected<Regex> Regex::compile(std::string_view pattern, Syntax syntax) {
  const bool onig = syntax == Syntax::kOniguruma;
  const std::string translated = onig ? pcre2_from_oniguruma(pattern) : std::string(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  // Newlines are LF alone whatever the library was built with: Oniguruma's '.' and line anchors
  // know only \n.
  pcre2_compile_context* context = pcre2_compile_context_create(nullptr);
  if (context != nullptr) pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (onig ? PCRE2_MULTILINE : 0u),
                                   &error, &offset, context);
  if (context != nullptr) pcre2_compile_context_free(context);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(error, buf, sizeof(buf));
    const std::string as_compiled =
        translated == pattern ? "" : " (rewritten for PCRE2 as '" + translated + "')";
    return invalid_argument("regex '" + std::string(pattern) + "'" + as_compiled + ": " +
                            reinterpret_cast<char*>(buf) + " at offset " + std::to_string(offset));
  }
  Regex r;
  r.impl_ = std::make_unique<Impl>();
  r.impl_->code = code;
  r.impl_->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  r.pattern_ = std::string(pattern);
  return r;
}

Expected<Regex> Regex::literal(std::string_view literal) {
  // \Q...\E quotes everything except a literal "\E", which is spliced in escaped.
  std::string p = "\\Q";
  size_t i = 0;
  while (i < literal.size()) {
    const size_t e = literal.find("\\E", i);
    if (e == std::string_view::npos) {
      p.append(literal.substr(i));
      break;
    }
    p.append(literal.substr(i, e - i));
    p.append("\\E\\\\E\\Q");
    i = e + 2;
  }
  p.append("\\E");
  return compile(p);
}

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  RegexMatches matches(*this, text);
  for (size_t b, e; matches.next(b, e);) out.emplace_back(b, e);
  return out;
}

std::string Regex::replace_all(std::string_view text, std::string_view content) const {
  std::string out;
  out.reserve(text.size());  // enough when matches are replaced by something no longer
  size_t prev = 0;
  RegexMatches matches(*this, text);
  for (size_t b, e; matches.next(b, e);) {
    out.append(text.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

bool Regex::contains_match(std::string_view text) const {
  RegexMatches matches(*this, text);
  size_t b, e;
  return matches.next(b, e);
}

RegexMatches::RegexMatches(const Regex& re, std::string_view text)
    : re_(re.impl_.get()), text_(text), done_(re_ == nullptr) {}

RegexMatches::~RegexMatches() {
  if (match_data_ != nullptr) pcre2_match_data_free(static_cast<pcre2_match_data*>(match_data_));
}

bool RegexMatches::next(size_t& begin, size_t& end) {
  if (match_data_ == nullptr && !done_)
    match_data_ = pcre2_match_data_create_from_pattern(re_->code, nullptr);
  auto* md = static_cast<pcre2_match_data*>(match_data_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text_.data());
  while (!done_ && start_ <= text_.size()) {
    // Text is valid UTF-8 by construction (sanitized on entry), so the check is skipped.
    int rc = re_->jit ? pcre2_jit_match(re_->code, subject, text_.size(), start_, 0, md, nullptr)
                      : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // The JIT's small machine stack can run out on long runs (e.g. 100k spaces against
      // \s+(?!\S)); the interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(re_->code, subject, text_.size(), start_, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                       nullptr);
    }
    if (rc < 0) break;  // no match (or a resource limit of the interpreter: the rest stays one piece)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e < b) break;  // \K tricks can report end < begin; our patterns never do
    if (e == b) {
      // Empty match: step over one whole character.
      if (e >= text_.size()) break;
      const size_t n = utf8_sequence_length(text_, e);
      start_ = e + (n == 0 ? 1 : n);
      continue;
    }
    start_ = e;
    begin = b;
    end = e;
    return true;
  }
  done_ = true;
  return false;
}

}  // namespace tf::text
