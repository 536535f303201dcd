// Unicode normalization (NFC, NFD, NFKC, NFKD) and lowercasing without ICU. The data comes from
// unicode_tables.inc, generated from the Unicode Character Database by
// tests/tools/gen_unicode_tables.py; the algorithms follow UAX #15 (canonical ordering,
// canonical composition, algorithmic Hangul).
#pragma once

#include <string>
#include <string_view>

namespace tf::text {

// Canonical Composition of valid UTF-8 text (Normalization Form C).
std::string nfc(std::string_view s);

// Canonical Decomposition (Normalization Form D).
std::string nfd(std::string_view s);

// Compatibility Decomposition (Normalization Form KD).
std::string nfkd(std::string_view s);

// Compatibility Decomposition followed by Canonical Composition (Normalization Form KC).
std::string nfkc(std::string_view s);

// Full lowercase mapping of each code point (context-free, like Rust's char::to_lowercase).
std::string to_lower(std::string_view s);

// Canonical combining class of a code point (0 for starters).
int combining_class(char32_t cp);

}  // namespace tf::text
