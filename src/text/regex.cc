// PCRE2 wrapper. Match data is allocated per call so that one compiled Regex can be used from many
// threads at once (the JIT code itself is read-only after compilation).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.h"

#include <pcre2.h>

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

Expected<Regex> Regex::compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(error, buf, sizeof(buf));
    return invalid_argument("regex '" + std::string(pattern) + "': " + reinterpret_cast<char*>(buf) +
                            " at offset " + std::to_string(offset));
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
  if (!impl_) return out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    // Text is valid UTF-8 by construction (sanitized on entry), so the check is skipped.
    int rc = impl_->jit ? pcre2_jit_match(impl_->code, subject, text.size(), start, 0, md, nullptr)
                        : PCRE2_ERROR_JIT_STACKLIMIT;
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // The JIT's small machine stack can run out on long runs (e.g. 100k spaces against
      // \s+(?!\S)); the interpreter keeps its backtracking state on the heap.
      rc = pcre2_match(impl_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) break;  // no match (or a resource limit of the interpreter: the rest stays one piece)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t b = ov[0], e = ov[1];
    if (e < b) break;  // \K tricks can report end < begin; our patterns never do
    if (e > b) out.emplace_back(b, e);
    if (e == b) {
      // Empty match: step over one whole character.
      if (e >= text.size()) break;
      const size_t n = utf8_sequence_length(text, e);
      start = e + (n == 0 ? 1 : n);
    } else {
      start = e;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

std::string Regex::replace_all(std::string_view text, std::string_view content) const {
  std::string out;
  size_t prev = 0;
  for (auto [b, e] : find_all(text)) {
    out.append(text.substr(prev, b - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace tf::text
