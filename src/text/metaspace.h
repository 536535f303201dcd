// Metaspace's prepend rule, shared by its pre-tokenizer and its decoder. Files written by current
// `tokenizers` carry only "prepend_scheme" ("always", "first" or "never"; "always" when absent);
// older ones carry "add_prefix_space", where false means never. The Rust library reads both that
// way (transformers.js 3 prepended only when add_prefix_space was true, so the newer files lost
// their leading "▁").
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tf::text {

enum class MetaspacePrepend { kAlways, kFirst, kNever };

inline MetaspacePrepend metaspace_prepend(const nlohmann::json& c) {
  const auto legacy = c.find("add_prefix_space");
  if (legacy != c.end() && legacy->is_boolean() && !legacy->get<bool>()) return MetaspacePrepend::kNever;
  const auto scheme = c.find("prepend_scheme");
  if (scheme == c.end() || !scheme->is_string()) return MetaspacePrepend::kAlways;
  const std::string s = scheme->get<std::string>();
  return s == "first"   ? MetaspacePrepend::kFirst
         : s == "never" ? MetaspacePrepend::kNever
                        : MetaspacePrepend::kAlways;
}

}  // namespace tf::text
