#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tf {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("tf_st_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // A file with the given raw header and data bytes.
  std::string write_raw(const std::string& name, const std::string& header, size_t data_bytes,
                        uint64_t claimed_len = UINT64_MAX) {
    std::ofstream out(path(name), std::ios::binary);
    uint64_t n = claimed_len == UINT64_MAX ? header.size() : claimed_len;
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(n >> (8 * i)));
    out << header << std::string(data_bytes, '\0');
    return path(name);
  }

  fs::path dir_;
};

// Resident kB of the mapping that holds `p` (/proc/self/smaps), -1 if none does.
int64_t resident_kb_of_mapping(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  while (std::getline(in, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find(' ') != std::string::npos &&
        line.find('-') < line.find(' ')) {
      inside = addr >= lo && addr < hi;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      std::istringstream fields(line.substr(4));
      int64_t kb = -1;
      fields >> kb;
      return kb;
    }
  }
  return -1;
}

TEST_F(SafetensorsTest, WriteThenReadRoundTrip) {
  Tensor a = Tensor::from_floats({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = Tensor::from_floats({4}, {0.5f, -1, 2, 448}).to_dtype(DType::kBF16);
  ASSERT_TRUE(write_safetensors(path("m.safetensors"), {{"a", a}, {"b.weight", b}}, {{"format", "pt"}}).is_ok());
  auto f = SafetensorsFile::open(path("m.safetensors"));
  ASSERT_TRUE(f) << f.status().to_string();
  EXPECT_EQ((*f)->entries().size(), 2u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  auto ta = (*f)->tensor("a");
  ASSERT_TRUE(ta);
  EXPECT_EQ(ta->shape(), (Shape{2, 3}));
  EXPECT_EQ(ta->to_vector(), a.to_vector());
  auto tb = (*f)->tensor("b.weight");
  ASSERT_TRUE(tb);
  EXPECT_EQ(tb->dtype(), DType::kBF16);
  EXPECT_EQ(tb->to_vector(), (std::vector<float>{0.5f, -1, 2, 448}));
  auto missing = (*f)->tensor("c");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("'c'"), std::string::npos);
  EXPECT_NE(missing.status().message().find("m.safetensors"), std::string::npos);
}

// With release_checkpoint_pages on (a GPU sharing the host's memory), a view gives its
// pages back when its last reference goes: they leave this process (and the page cache),
// and a later view of the same tensor reads the same bytes again. Off, they stay.
TEST_F(SafetensorsTest, ReleasedViewsGiveTheirPagesBackAndReadAgain) {
  const int64_t n = 1 << 18;  // 1 MiB of f32
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>(i % 1000) - 500.0f;
  ASSERT_TRUE(write_safetensors(path("r.safetensors"), {{"w", Tensor::from_floats({n}, values)}}).is_ok());
  const auto sum = [](const Tensor& t) {
    double acc = 0;
    for (int64_t i = 0; i < t.numel(); ++i) acc += t.data<float>()[i];
    return acc;
  };
  double expected = 0;
  for (float v : values) expected += v;
  for (bool release : {false, true}) {
    set_release_checkpoint_pages(release);
    auto f = SafetensorsFile::open(path("r.safetensors"));
    ASSERT_TRUE(f) << f.status().to_string();
    const void* where = nullptr;
    {
      auto t = (*f)->tensor("w");
      ASSERT_TRUE(t);
      where = t->raw();
      EXPECT_EQ(sum(*t), expected);  // touches every page
      EXPECT_GE(resident_kb_of_mapping(where), 1000) << "release " << release;
    }
    const int64_t after = resident_kb_of_mapping(where);
    if (release)
      EXPECT_LE(after, 16) << "the view's pages stayed in the process";  // header and boundary pages only
    else
      EXPECT_GE(after, 1000) << "kept: the mapping still holds them";
    auto again = (*f)->tensor("w");
    ASSERT_TRUE(again);
    EXPECT_EQ(sum(*again), expected);
    EXPECT_EQ(again->to_vector(), values);
  }
  set_release_checkpoint_pages(false);
}

TEST_F(SafetensorsTest, TruncatedFileNamesFileAndTensor) {
  Tensor a = Tensor::from_floats({64}, std::vector<float>(64, 1.0f));
  ASSERT_TRUE(write_safetensors(path("t.safetensors"), {{"w", a}}).is_ok());
  fs::resize_file(path("t.safetensors"), fs::file_size(path("t.safetensors")) - 10);
  auto f = SafetensorsFile::open(path("t.safetensors"));
  ASSERT_FALSE(f);
  const std::string msg = f.status().message();
  EXPECT_NE(msg.find("t.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
}

TEST_F(SafetensorsTest, RejectsCorruptHeaders) {
  struct Case { std::string header; size_t data; std::string expect; };
  const Case cases[] = {
      {"{not json", 0, "not valid JSON"},
      {"[1,2]", 0, "not a JSON object"},
      {R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8, "needs 8 bytes"},
      {R"({"w":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}})", 4, "unsupported dtype"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "negative"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4, "begin 4 > end 0"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"v":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})", 8, "overlap"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4, "overflows"},
      {R"({"w":{"dtype":"F32","shape":[1]}})", 4, "data_offsets"},
      {R"({"__metadata__":{"a":1}})", 0, "__metadata__.a"},
  };
  int i = 0;
  for (const auto& c : cases) {
    auto f = SafetensorsFile::open(write_raw("c" + std::to_string(i++) + ".safetensors", c.header, c.data));
    ASSERT_FALSE(f) << c.header;
    EXPECT_NE(f.status().message().find(c.expect), std::string::npos) << f.status().message();
    EXPECT_NE(f.status().message().find(".safetensors"), std::string::npos);
  }
}

TEST_F(SafetensorsTest, RejectsHeaderLengthBeyondFileOrLimit) {
  auto f = SafetensorsFile::open(write_raw("big.safetensors", "{}", 0, 1ull << 62));
  ASSERT_FALSE(f);
  EXPECT_NE(f.status().message().find("limit"), std::string::npos);
  f = SafetensorsFile::open(write_raw("long.safetensors", "{}", 0, 1000));
  ASSERT_FALSE(f);
  EXPECT_NE(f.status().message().find("exceeds the file size"), std::string::npos);
  std::ofstream(path("tiny.safetensors")) << "abc";
  f = SafetensorsFile::open(path("tiny.safetensors"));
  ASSERT_FALSE(f);
  EXPECT_NE(f.status().message().find("too short"), std::string::npos);
}

TEST_F(SafetensorsTest, ShardedCheckpointWithIndex) {
  Tensor a = Tensor::from_floats({2}, {1, 2});
  Tensor b = Tensor::from_floats({3}, {3, 4, 5});
  ASSERT_TRUE(write_safetensors(path("model-00001-of-00002.safetensors"), {{"a", a}}).is_ok());
  ASSERT_TRUE(write_safetensors(path("model-00002-of-00002.safetensors"), {{"b", b}}).is_ok());
  std::ofstream(path("model.safetensors.index.json"))
      << R"({"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}})";
  auto c = Checkpoint::open(dir_.string());
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_EQ((*c)->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ((*c)->tensor("b")->to_vector(), (std::vector<float>{3, 4, 5}));
  EXPECT_NE((*c)->file_of("a").find("00001"), std::string::npos);

  // An index naming a tensor its shard lacks is an error naming both.
  std::ofstream(path("model.safetensors.index.json"))
      << R"({"weight_map":{"a":"model-00001-of-00002.safetensors","zz":"model-00002-of-00002.safetensors"}})";
  c = Checkpoint::open(dir_.string());
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("'zz'"), std::string::npos);
  // A missing shard names the file.
  std::ofstream(path("model.safetensors.index.json")) << R"({"weight_map":{"a":"model-missing.safetensors"}})";
  c = Checkpoint::open(dir_.string());
  ASSERT_FALSE(c);
  EXPECT_NE(c.status().message().find("model-missing.safetensors"), std::string::npos);
}

TEST_F(SafetensorsTest, ReadsTransformersWrittenFixture) {
  auto c = Checkpoint::open(std::string(TF_TEST_DATA_DIR) + "/model/tiny-flat");
  ASSERT_TRUE(c) << c.status().to_string();
  EXPECT_TRUE((*c)->has("lm_head.weight"));
  auto t = (*c)->tensor("lm_head.weight");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->shape(), (Shape{384, 64}));
}

}  // namespace
}  // namespace tf
