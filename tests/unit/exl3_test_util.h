// Test helpers for EXL3: the exllamav3 ground-truth fixture (tests/data/exl3,
// see its README) and small comparisons.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <ostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/api/exl3_weight.h"
#include "model/safetensors.h"

namespace tf::test {

struct Exl3Case {
  std::string key;
  int64_t k = 0, n = 0;
  int bits = 0;
  Exl3Codebook codebook = Exl3Codebook::kMcg;
  std::string states_hash, w_hat_hash;  // FNV-1a 64 of the whole reference tensors
};

// gtest prints parameters; the key says it all (and avoids printing padding bytes).
inline void PrintTo(const Exl3Case& c, std::ostream* os) { *os << c.key; }

inline std::string exl3_fixture_path() { return std::string(TF_TEST_DATA_DIR) + "/exl3/exl3_cases.safetensors"; }

// The fixture file, opened once per test binary.
inline const SafetensorsFile& exl3_fixture() {
  static std::unique_ptr<SafetensorsFile> file = [] {
    auto f = SafetensorsFile::open(exl3_fixture_path());
    if (!f.has_value()) throw StatusError(f.status());
    return std::move(*f);
  }();
  return *file;
}

inline std::vector<Exl3Case> exl3_cases() {
  std::vector<Exl3Case> out;
  const auto& meta = exl3_fixture().metadata();
  auto it = meta.find("meta");
  if (it == meta.end()) return out;
  const nlohmann::json meta_json = nlohmann::json::parse(it->second);  // kept alive for the loop
  for (const auto& c : meta_json.at("cases")) {
    Exl3Case e;
    e.key = c.at("key").get<std::string>();
    e.k = c.at("k").get<int64_t>();
    e.n = c.at("n").get<int64_t>();
    e.bits = c.at("K").get<int>();
    e.codebook = *exl3_codebook_from_name(c.at("codebook").get<std::string>());
    e.states_hash = c.at("states_fnv1a64").get<std::string>();
    e.w_hat_hash = c.at("w_hat_fnv1a64").get<std::string>();
    out.push_back(e);
  }
  return out;
}

inline Tensor exl3_fixture_tensor(const std::string& name) {
  auto t = exl3_fixture().tensor(name);
  if (!t.has_value()) throw StatusError(t.status());
  return *t;
}

// The case's weight as views into the fixture.
inline Exl3Weight exl3_case_weight(const Exl3Case& c) {
  Exl3Weight w;
  w.trellis = exl3_fixture_tensor(c.key + ".trellis");
  w.suh = exl3_fixture_tensor(c.key + ".suh");
  w.svh = exl3_fixture_tensor(c.key + ".svh");
  w.codebook = c.codebook;
  w.bits = c.bits;
  return w;
}

inline std::string fnv1a64_hex(const void* data, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001B3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

using Tensors = std::vector<std::pair<std::string, Tensor>>;

// A fresh folder under the system temp dir, removed with the object.
class TempDir {
 public:
  TempDir() {
    namespace fs = std::filesystem;
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            ("tf_exl3_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Writes DIR/model.safetensors and opens DIR as a checkpoint (null on failure, with a test failure).
inline std::unique_ptr<Checkpoint> write_and_open(const TempDir& dir, const Tensors& tensors) {
  Status s = write_safetensors(dir.str() + "/model.safetensors", tensors);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  auto c = Checkpoint::open(dir.str());
  EXPECT_TRUE(c.has_value()) << c.status().to_string();
  return c.has_value() ? std::move(*c) : nullptr;
}

inline bool bytes_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace tf::test
