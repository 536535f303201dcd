// FNV-1a, 64 bits: a fast hash for names and keys (not for security). `h` continues an earlier
// hash, so a sequence of pieces hashes as their bytes one after another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tf {

inline constexpr uint64_t kFnv1aOffset = 0xcbf29ce484222325ull;

inline uint64_t fnv1a_bytes(const void* data, size_t bytes, uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aOffset) {
  return fnv1a_bytes(s.data(), s.size(), h);
}

}  // namespace tf
