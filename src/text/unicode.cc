// NFC = canonical decomposition, canonical ordering by combining class, then canonical composition
// (UAX #15); NFKC / NFKD use the compatibility decompositions as well. Tables are sorted by code
// point and searched with std::lower_bound; a quick check returns ASCII-only text untouched, which
// is the common case on the hot path.
#include "text/unicode.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "text/utf8.h"

namespace tf::text {
namespace {

struct CccRange {
  char32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp, first, second;
};
struct CompatDecomposition {
  char32_t cp;
  uint16_t offset, count;  // a slice of kCompatCodePoints
};
struct Composition {
  char32_t first, second, composite;
};
struct LowerMapping {
  char32_t cp;
  char32_t lower[3];
};

#include "text/unicode_tables.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

const Decomposition* find_decomposition(char32_t cp) {
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                    [](const Decomposition& d, char32_t c) { return d.cp < c; });
  return (it != end && it->cp == cp) ? it : nullptr;
}

const CompatDecomposition* find_compat_decomposition(char32_t cp) {
  const auto* end = std::end(kCompatDecompositions);
  const auto* it = std::lower_bound(std::begin(kCompatDecompositions), end, cp,
                                    [](const CompatDecomposition& d, char32_t c) { return d.cp < c; });
  return (it != end && it->cp == cp) ? it : nullptr;
}

// Full decomposition of one code point: canonical mappings, and with `compat` the compatibility
// ones too, applied recursively.
void decompose(char32_t cp, std::vector<char32_t>& out, bool compat) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (compat) {
    if (const CompatDecomposition* k = find_compat_decomposition(cp)) {
      for (uint16_t i = 0; i < k->count; ++i) decompose(kCompatCodePoints[k->offset + i], out, compat);
      return;
    }
  }
  const Decomposition* d = find_decomposition(cp);
  if (d == nullptr) {
    out.push_back(cp);
    return;
  }
  decompose(d->first, out, compat);
  if (d->second != 0) decompose(d->second, out, compat);
}

char32_t compose_pair(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* end = std::end(kCompositions);
  const auto* it = std::lower_bound(std::begin(kCompositions), end, std::pair{a, b},
                                    [](const Composition& c, const std::pair<char32_t, char32_t>& k) {
                                      return c.first < k.first || (c.first == k.first && c.second < k.second);
                                    });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

// Decomposition (canonical, or compatibility with `compat`) followed by canonical ordering.
std::vector<char32_t> decomposition(std::string_view s, bool compat) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    i = next_code_point(s, i, cp);
    decompose(cp, out, compat);
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  size_t i = 0;
  while (i < out.size()) {
    if (combining_class(out[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < out.size() && combining_class(out[j]) != 0) ++j;
    std::stable_sort(out.begin() + static_cast<std::ptrdiff_t>(i), out.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  return out;
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<uint8_t>(c) < 0x80; });
}

}  // namespace

int combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kCccRanges);
  const auto* it = std::upper_bound(std::begin(kCccRanges), end, cp,
                                    [](char32_t c, const CccRange& r) { return c < r.first; });
  if (it == std::begin(kCccRanges)) return 0;
  --it;
  return (cp >= it->first && cp <= it->last) ? it->ccc : 0;
}

namespace {

// Canonical composition: each character may combine with the last starter when it is not blocked
// (no character in between has a class >= its own, or class 0).
std::string compose(const std::vector<char32_t>& d) {
  std::vector<char32_t> out;
  out.reserve(d.size());
  ptrdiff_t starter = -1;
  int last_ccc = -1;
  for (char32_t cp : d) {
    const int ccc = combining_class(cp);
    if (starter >= 0) {
      const bool blocked = last_ccc != -1 && (last_ccc == 0 || last_ccc >= ccc);
      if (!blocked) {
        const char32_t c = compose_pair(out[static_cast<size_t>(starter)], cp);
        if (c != 0) {
          out[static_cast<size_t>(starter)] = c;
          continue;
        }
      }
    }
    if (ccc == 0) {
      starter = static_cast<ptrdiff_t>(out.size());
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
    out.push_back(cp);
  }
  return from_code_points(out);
}

// True when a normal form of text that continues with `cp` is the normal form of what comes
// before plus that of the rest: the (full) decomposition of `cp` starts with a starter that never
// composes with a character before it. Canonical reordering never moves anything across a starter,
// and composition only joins a character to the last starter before it, so nothing crosses.
bool starts_independent_run(char32_t cp, bool compat) {
  if (cp < 0x80) return true;  // ASCII: its own decomposition, a starter, never a second of a pair
  static const std::vector<char32_t> seconds = [] {
    std::vector<char32_t> v;
    for (const Composition& c : kCompositions) v.push_back(c.second);
    std::sort(v.begin(), v.end());
    return v;
  }();
  std::vector<char32_t> d;
  decompose(cp, d, compat);
  const char32_t first = d.empty() ? cp : d[0];
  const bool hangul_second =
      (first >= kVBase && first < kVBase + kVCount) || (first > kTBase && first < kTBase + kTCount);
  return combining_class(first) == 0 && !hangul_second &&
         !std::binary_search(seconds.begin(), seconds.end(), first);
}

// Applies a normal form a chunk of about kFormChunkBytes at a time, each cut before a character
// that starts an independent run: the same result as on the whole text, without code point
// buffers of the whole text (a few times its size).
constexpr size_t kFormChunkBytes = 1 << 16;

std::string normal_form(std::string_view s, bool compat, bool composed) {
  if (is_ascii(s)) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t begin = 0;
  while (begin < s.size()) {
    size_t end = s.size();
    if (s.size() - begin > 2 * kFormChunkBytes) {
      size_t i = begin + kFormChunkBytes;
      while (i > begin && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
      while (i < s.size()) {
        char32_t cp;
        const size_t next = next_code_point(s, i, cp);
        if (starts_independent_run(cp, compat)) break;
        i = next;
      }
      end = i;
    }
    const std::vector<char32_t> d = decomposition(s.substr(begin, end - begin), compat);
    out += composed ? compose(d) : from_code_points(d);
    begin = end;
  }
  return out;
}

}  // namespace

std::string nfd(std::string_view s) { return normal_form(s, /*compat=*/false, /*composed=*/false); }
std::string nfkd(std::string_view s) { return normal_form(s, /*compat=*/true, /*composed=*/false); }
std::string nfc(std::string_view s) { return normal_form(s, /*compat=*/false, /*composed=*/true); }
std::string nfkc(std::string_view s) { return normal_form(s, /*compat=*/true, /*composed=*/true); }

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    i = next_code_point(s, i, cp);
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
      continue;
    }
    const auto* end = std::end(kLowerMappings);
    const auto* it = std::lower_bound(std::begin(kLowerMappings), end, cp,
                                      [](const LowerMapping& m, char32_t c) { return m.cp < c; });
    if (it != end && it->cp == cp) {
      for (char32_t l : it->lower) {
        if (l != 0) append_utf8(out, l);
      }
    } else {
      append_utf8(out, cp);
    }
  }
  return out;
}

}  // namespace tf::text
