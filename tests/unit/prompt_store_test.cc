// PromptStore (engine/prompt_store.h) on its own, with small made-up snapshots: a state
// written is found by a prompt it starts and read back as written; leftovers of
// interrupted writes and unreadable files are deleted when the store opens; the folder
// keeps within its bound, evicting the least recently used file, in an order that
// survives a reopening; a full writer queue skips states rather than hold them.
#include "engine/prompt_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace tf::engine {
namespace {

namespace fs = std::filesystem;

SequenceSnapshot snapshot_of(int64_t length, float value, int64_t floats = 1024) {
  SequenceSnapshot s;
  s.length = length;
  Tensor t = Tensor::empty({floats}, DType::kF32);
  for (int64_t i = 0; i < floats; ++i) t.data<float>()[i] = value + static_cast<float>(i);
  s.tensors.emplace_back("x", std::move(t));
  return s;
}

class PromptStoreUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tf-prompt-store-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::unique_ptr<PromptStore> open(int64_t max_bytes = int64_t{1} << 30, int max_pending = 2) {
    PromptStoreOptions o;
    o.dir = dir_.string();
    o.fingerprint = "0123456789abcdef";
    o.max_bytes = max_bytes;
    o.max_pending = max_pending;
    auto s = PromptStore::open(o);
    EXPECT_TRUE(s.has_value()) << s.status().to_string();
    return s.has_value() ? std::move(*s) : nullptr;
  }
  void store(PromptStore& s, std::vector<int32_t> tokens, float value) {
    ASSERT_TRUE(s.wants(tokens, 4096));
    const auto n = static_cast<int64_t>(tokens.size());
    s.put(std::move(tokens), snapshot_of(n, value));
    s.flush();
  }
  fs::path dir_;
};

TEST_F(PromptStoreUnitTest, AStateIsReadBackAsWritten) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ((fs::status(s->folder()).permissions() & fs::perms::all), fs::perms::owner_all);
  store(*s, {5, -7, 9, 11}, 2.5f);  // a negative key: a picture's hash
  EXPECT_FALSE(s->wants(std::vector<int32_t>{5, -7, 9, 11}, 4096)) << "stored already";
  EXPECT_EQ(s->stats().files, 1);
  EXPECT_EQ(s->stats().written_total, 1);
  const std::vector<int32_t> prompt = {5, -7, 9, 11, 13, 2};
  EXPECT_FALSE(s->longest_prefix(prompt, 3).has_value()) << "past the limit";
  auto hit = s->longest_prefix(prompt, 5);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->tokens, 4);
  auto st = s->read(hit->id, prompt);
  ASSERT_TRUE(st.has_value()) << st.status().to_string();
  EXPECT_EQ(st->length, 4);
  EXPECT_EQ(st->mtp_length, 0);
  ASSERT_EQ(st->tensors.count("x"), 1u);
  const Tensor& x = st->tensors.at("x");
  ASSERT_EQ(x.numel(), 1024);
  EXPECT_EQ(x.data<float>()[0], 2.5f);
  EXPECT_EQ(x.data<float>()[1023], 1025.5f);
  EXPECT_EQ(st->tensors.count("prompt.tokens"), 0u);
}

TEST_F(PromptStoreUnitTest, LeftoversAndUnreadableFilesAreDeletedAtOpen) {
  std::string folder;
  {
    auto s = open();
    ASSERT_NE(s, nullptr);
    store(*s, {1, 2, 3, 4}, 1.0f);
    folder = s->folder();
  }
  std::ofstream(fs::path(folder) / "feedfacefeedface.tfstate.part") << "half a file";
  std::ofstream(fs::path(folder) / "0000000000000000.tfstate") << "not safetensors";
  std::ofstream(fs::path(folder) / "notes.txt") << "someone else's";
  auto s = open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stats().files, 1);
  EXPECT_FALSE(fs::exists(fs::path(folder) / "feedfacefeedface.tfstate.part"));
  EXPECT_FALSE(fs::exists(fs::path(folder) / "0000000000000000.tfstate"));
  EXPECT_TRUE(fs::exists(fs::path(folder) / "notes.txt")) << "only the store's own files are touched";
  EXPECT_TRUE(s->longest_prefix(std::vector<int32_t>{1, 2, 3, 4, 5}, 5).has_value());
}

TEST_F(PromptStoreUnitTest, TheLeastRecentlyUsedFileGoesFirstAcrossReopenings) {
  int64_t one = 0;
  {
    auto s = open();
    ASSERT_NE(s, nullptr);
    store(*s, {1, 1, 1, 1}, 1.0f);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    store(*s, {2, 2, 2, 2}, 2.0f);
    one = s->stats().bytes / 2;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::vector<int32_t> first = {1, 1, 1, 1, 0};
    auto hit = s->longest_prefix(first, 5);
    ASSERT_TRUE(hit.has_value());
    ASSERT_TRUE(s->read(hit->id, first).has_value());  // {1,1,1,1} is now the most recent
  }
  // Room for one file: the reopened store evicts {2,2,2,2}, the least recently used.
  auto s = open(one + one / 2);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stats().files, 1);
  EXPECT_TRUE(s->longest_prefix(std::vector<int32_t>{1, 1, 1, 1, 0}, 5).has_value());
  EXPECT_FALSE(s->longest_prefix(std::vector<int32_t>{2, 2, 2, 2, 0}, 5).has_value());
  // A new file evicts the other one to stay within the bound.
  store(*s, {3, 3, 3, 3}, 3.0f);
  EXPECT_EQ(s->stats().files, 1);
  EXPECT_LE(s->stats().bytes, one + one / 2);
  EXPECT_TRUE(s->longest_prefix(std::vector<int32_t>{3, 3, 3, 3, 0}, 5).has_value());
  // A state larger than the whole bound is not written.
  s->put({4, 4, 4, 4}, snapshot_of(4, 4.0f, 1 << 16));
  s->flush();
  EXPECT_EQ(s->stats().skipped_total, 1);
  EXPECT_EQ(s->stats().files, 1);
}

TEST_F(PromptStoreUnitTest, AFullQueueSkipsTheState) {
  auto s = open(int64_t{1} << 30, 0);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->wants(std::vector<int32_t>{1, 2}, 4096));
  EXPECT_EQ(s->stats().skipped_total, 1);
  PromptStoreOptions o;
  o.dir = dir_.string();
  o.fingerprint = "bounded";
  o.max_bytes = int64_t{1} << 30;
  o.max_pending_bytes = 10000;
  auto b = PromptStore::open(o);
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE((*b)->wants(std::vector<int32_t>{1, 2}, 10001)) << "more host memory than the queue may hold";
  EXPECT_TRUE((*b)->wants(std::vector<int32_t>{1, 2}, 10000));
  EXPECT_EQ((*b)->stats().skipped_total, 1);
}

TEST_F(PromptStoreUnitTest, BadOptionsAreRefused) {
  PromptStoreOptions o;
  o.fingerprint = "abc";
  o.max_bytes = 1;
  EXPECT_FALSE(PromptStore::open(o).has_value()) << "no folder";
  o.dir = dir_.string();
  o.max_bytes = 0;
  EXPECT_FALSE(PromptStore::open(o).has_value()) << "no room";
  o.max_bytes = 1;
  o.fingerprint = "../up";
  EXPECT_FALSE(PromptStore::open(o).has_value()) << "a fingerprint is one folder name";
  o.fingerprint = "abc";
  std::ofstream(dir_.string() + "-file") << "x";
  o.dir = dir_.string() + "-file";  // a file, not a folder
  auto refused = PromptStore::open(o);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("PROMPT_STORE"), std::string::npos)
      << refused.status().to_string();
  fs::remove(dir_.string() + "-file");
}

}  // namespace
}  // namespace tf::engine
