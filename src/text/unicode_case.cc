// Case mapping tables (see unicode_case.h): sorted by code point, searched with std::lower_bound.
#include "text/unicode_case.h"

#include <algorithm>
#include <iterator>

#include "text/unicode.h"
#include "text/utf8.h"

namespace tf::text {
namespace {

struct CaseMapping {
  char32_t cp;
  char32_t to[3];
};
struct CaseRange {
  char32_t first, last;
  uint8_t properties;
};

#include "text/unicode_case_tables.inc"

template <size_t N>
bool append_mapping(std::u32string& out, const CaseMapping (&table)[N], char32_t c) {
  const CaseMapping* end = std::end(table);
  const CaseMapping* it =
      std::lower_bound(std::begin(table), end, c, [](const CaseMapping& m, char32_t x) { return m.cp < x; });
  if (it == end || it->cp != c) return false;
  for (char32_t x : it->to)
    if (x != 0) out.push_back(x);
  return true;
}

void append_lower(std::u32string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  std::string one;
  append_utf8(one, c);
  for (char32_t x : to_code_points(to_lower(one))) out.push_back(x);
}

// CPython's handle_capital_sigma: final when a cased letter comes before (past case-ignorable ones)
// and none comes after.
bool is_final_sigma(const std::u32string& u, size_t i) {
  size_t j = i;
  while (j > 0 && (case_properties(u[j - 1]) & kCaseIgnorable)) --j;
  bool before = j > 0 && is_cased(u[j - 1]);
  size_t k = i + 1;
  while (k < u.size() && (case_properties(u[k]) & kCaseIgnorable)) ++k;
  bool after = k < u.size() && is_cased(u[k]);
  return before && !after;
}

}  // namespace

uint8_t case_properties(char32_t c) {
  const CaseRange* end = std::end(kCaseRanges);
  const CaseRange* it = std::upper_bound(std::begin(kCaseRanges), end, c,
                                         [](char32_t x, const CaseRange& r) { return x < r.first; });
  if (it == std::begin(kCaseRanges)) return 0;
  --it;
  return c <= it->last ? it->properties : 0;
}

void append_upper(std::u32string& out, char32_t c) {
  if (!append_mapping(out, kUpperMappings, c)) out.push_back(c);
}

void append_title(std::u32string& out, char32_t c) {
  if (!append_mapping(out, kTitleMappings, c)) append_upper(out, c);
}

void append_casefold(std::u32string& out, char32_t c) {
  if (!append_mapping(out, kFoldMappings, c)) append_lower(out, c);
}

void append_lower_at(std::u32string& out, const std::u32string& u, size_t i) {
  if (u[i] == 0x3A3) {
    out.push_back(is_final_sigma(u, i) ? 0x3C2 : 0x3C3);
    return;
  }
  append_lower(out, u[i]);
}

}  // namespace tf::text
