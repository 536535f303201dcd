// UTF-8 helpers shared by the tokenizer pieces. Text inside the tokenizer is always valid UTF-8:
// input that is not gets its invalid bytes replaced by U+FFFD with the "maximal subpart" rule
// (the one WHATWG TextDecoder, Rust's from_utf8_lossy and Python's errors="replace" use), so that
// every layer sees the same string the reference implementations see.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tf::text {

inline constexpr char32_t kReplacementChar = 0xFFFD;

// Appends the UTF-8 encoding of `cp` (U+FFFD for surrogates and values past U+10FFFF).
void append_utf8(std::string& out, char32_t cp);

// Length of the valid UTF-8 sequence starting at s[i] (1-4), or 0 when the bytes there are not a
// complete valid sequence.
size_t utf8_sequence_length(std::string_view s, size_t i);

// Decodes the valid sequence of `len` bytes at s[i] (as reported by utf8_sequence_length).
char32_t decode_utf8_at(std::string_view s, size_t i, size_t len);

// Decodes the code point at s[i] into `cp` and returns the index just after it: a maximal invalid
// subpart decodes as one U+FFFD. Walking a string with it visits what to_code_points lists.
size_t next_code_point(std::string_view s, size_t i, char32_t& cp);

// Code points of a valid UTF-8 string (invalid bytes decode as U+FFFD).
std::vector<char32_t> to_code_points(std::string_view s);
std::string from_code_points(const std::vector<char32_t>& cps);

// True when `s` is well-formed UTF-8.
bool is_valid_utf8(std::string_view s);

// Replaces each maximal invalid subpart with U+FFFD.
std::string sanitize_utf8(std::string_view s);

// Length of the longest prefix of `s` that cannot change when more bytes are appended: everything
// except a trailing sequence that is incomplete but could still become valid. A streaming decoder
// can pass sanitize_utf8(s.substr(0, n)) on and keep the rest.
size_t utf8_stable_prefix(std::string_view s);

}  // namespace tf::text
