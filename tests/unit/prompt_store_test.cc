// PromptStore (engine/prompt_store.h) on its own, with small made-up snapshots: a state
// written is found by a prompt it starts and read back as written; a longer prompt's state
// writes only the blocks its shorter prefix's did not, and both read back whole; leftovers
// of interrupted writes, unreadable files, blocks no state needs and states whose blocks
// are gone are deleted when the store opens; a corrupt block takes every state that needs
// it along; the folder keeps within its bound, evicting the least recently used state
// (and a block with the last state that needs it), in an order that survives a
// reopening; a full writer queue skips states rather than hold them.
#include "engine/prompt_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

namespace tf::engine {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kBlock = 4;  // tokens per block in these tests

// The made-up rows along the sequence (2 tokens a row) a prompt's tokens give: each row's
// values depend on every token up to its end, as a model's cache rows do.
Tensor rows_for(std::span<const int32_t> tokens) {
  const auto rows = static_cast<int64_t>(tokens.size()) / 2;
  Tensor t = Tensor::empty({rows, 3}, DType::kF32);
  float sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    sum += static_cast<float>(tokens[2 * r] + 2 * tokens[2 * r + 1]);
    t.data<float>()[3 * r] = sum;
    t.data<float>()[3 * r + 1] = static_cast<float>(r);
    t.data<float>()[3 * r + 2] = static_cast<float>(tokens[2 * r + 1]);
  }
  return t;
}

// A snapshot of `tokens`: a tensor "x" of `floats` values from `value` on (not along the
// sequence), and the rows along it from token `from` on.
SequenceSnapshot snapshot_of(std::span<const int32_t> tokens, float value, int64_t floats = 1024,
                             int64_t from = 0) {
  SequenceSnapshot s;
  s.length = static_cast<int64_t>(tokens.size());
  s.from = from;
  Tensor t = Tensor::empty({floats}, DType::kF32);
  for (int64_t i = 0; i < floats; ++i) t.data<float>()[i] = value + static_cast<float>(i);
  s.tensors.emplace_back("x", std::move(t));
  Tensor rows = rows_for(tokens);
  if (rows.size(0) > from / 2)
    s.tensors.emplace_back("rows", rows.slice(0, from / 2, rows.size(0)).contiguous());
  s.tokens_per_row["rows"] = 2;
  return s;
}

// A tensor's pieces (a stored state's rows come in one per block) as one tensor.
Tensor whole(const std::vector<Tensor>& pieces) {
  Shape shape = pieces.at(0).shape();
  shape[0] = 0;
  for (const Tensor& p : pieces) shape[0] += p.size(0);
  Tensor out = Tensor::empty(shape, pieces[0].dtype());
  int64_t at = 0;
  for (const Tensor& p : pieces) {
    out.slice(0, at, at + p.size(0)).copy_from(p);
    at += p.size(0);
  }
  return out;
}

bool equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), static_cast<size_t>(a.nbytes())) == 0;
}

std::vector<fs::path> files_with(const std::string& folder, const std::string& ext) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.path().extension() == ext) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
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
    o.block_tokens = kBlock;
    auto s = PromptStore::open(o);
    EXPECT_TRUE(s.has_value()) << s.status().to_string();
    return s.has_value() ? std::move(*s) : nullptr;
  }
  static std::function<int64_t(int64_t)> bytes_of(int64_t n) {
    return [n](int64_t) { return n; };
  }
  // Stores `tokens`' state as the engine does: from the token the store asks for.
  void store(PromptStore& s, std::vector<int32_t> tokens, float value) {
    const std::optional<int64_t> from = s.wants(tokens, bytes_of(4096));
    ASSERT_TRUE(from.has_value());
    SequenceSnapshot snap = snapshot_of(tokens, value, 1024, *from);
    s.put(std::move(tokens), std::move(snap));
    s.flush();
  }
  // Reads back the state of exactly `tokens` and checks it against what was stored.
  void expect_reads_back(PromptStore& s, const std::vector<int32_t>& tokens, float value) {
    std::vector<int32_t> prompt = tokens;
    prompt.push_back(99);
    auto hit = s.longest_prefix(prompt, static_cast<int64_t>(prompt.size()));
    ASSERT_TRUE(hit.has_value());
    ASSERT_EQ(hit->tokens, static_cast<int64_t>(tokens.size()));
    auto st = s.read(hit->id, prompt);
    ASSERT_TRUE(st.has_value()) << st.status().to_string();
    EXPECT_EQ(st->length, static_cast<int64_t>(tokens.size()));
    ASSERT_EQ(st->tensors.count("x"), 1u);
    ASSERT_EQ(st->tensors.at("x").size(), 1u);
    EXPECT_EQ(st->tensors.at("x")[0].data<float>()[0], value);
    ASSERT_EQ(st->tensors.count("rows"), 1u);
    EXPECT_EQ(st->tensors.at("rows").size(), (tokens.size() + kBlock - 1) / kBlock)
        << "a piece per block, and the rest";
    EXPECT_TRUE(equal(whole(st->tensors.at("rows")), rows_for(tokens))) << "the rows from the blocks";
  }
  fs::path dir_;
};

TEST_F(PromptStoreUnitTest, AStateIsReadBackAsWritten) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ((fs::status(s->folder()).permissions() & fs::perms::all), fs::perms::owner_all);
  store(*s, {5, -7, 9, 11}, 2.5f);  // a negative key: a picture's hash
  EXPECT_FALSE(s->wants(std::vector<int32_t>{5, -7, 9, 11}, bytes_of(4096))) << "stored already";
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
  const Tensor& x = st->tensors.at("x").at(0);
  ASSERT_EQ(x.numel(), 1024);
  EXPECT_EQ(x.data<float>()[0], 2.5f);
  EXPECT_EQ(x.data<float>()[1023], 1025.5f);
  EXPECT_EQ(st->tensors.count("prompt.tokens"), 0u);
  EXPECT_TRUE(equal(whole(st->tensors.at("rows")), rows_for(std::vector<int32_t>{5, -7, 9, 11})));
  EXPECT_EQ(s->stats().blocks, 1);
}

TEST_F(PromptStoreUnitTest, ALongerPromptWritesOnlyItsNewBlocks) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  const std::vector<int32_t> turn1 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 2 blocks + 2 tokens
  std::vector<int32_t> turn2 = turn1;
  for (int32_t t : {11, 12, 13, 14, 15, 16}) turn2.push_back(t);  // 4 blocks
  store(*s, turn1, 1.0f);
  EXPECT_EQ(s->stats().blocks, 2);
  const int64_t first_write = s->stats().written_bytes_total;
  EXPECT_EQ(s->wants(turn2, bytes_of(4096)), 8) << "its first two blocks are stored";
  store(*s, turn2, 2.0f);
  EXPECT_EQ(s->stats().files, 2);
  EXPECT_EQ(s->stats().blocks, 4);
  EXPECT_EQ(files_with(s->folder(), ".tfblock").size(), 4u);
  EXPECT_LT(s->stats().written_bytes_total - first_write, first_write + 64)
      << "two new blocks and a state file, not the whole prefix again";
  expect_reads_back(*s, turn1, 1.0f);
  expect_reads_back(*s, turn2, 2.0f);
  // Another prompt that parts from them inside the first block shares none of them.
  store(*s, {1, 2, 3, 0, 5, 6, 7, 8}, 3.0f);
  EXPECT_EQ(s->stats().blocks, 6);
  expect_reads_back(*s, {1, 2, 3, 0, 5, 6, 7, 8}, 3.0f);
  // After a reopening the blocks are shared as before.
  s.reset();
  s = open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stats().files, 3);
  EXPECT_EQ(s->stats().blocks, 6);
  expect_reads_back(*s, turn2, 2.0f);
  // A block goes with the last state that needs it.
  s->forget(*s->find(turn2));
  EXPECT_EQ(s->stats().blocks, 4);
  expect_reads_back(*s, turn1, 1.0f);
  s->forget(*s->find(turn1));
  s->forget(*s->find(std::vector<int32_t>{1, 2, 3, 0, 5, 6, 7, 8}));
  EXPECT_EQ(s->stats().blocks, 0);
  EXPECT_EQ(s->stats().bytes, 0);
  EXPECT_TRUE(files_with(s->folder(), ".tfblock").empty());
}

TEST_F(PromptStoreUnitTest, AStateWhoseLeftOutBlockWentIsNotWritten) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  const std::vector<int32_t> turn1 = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> turn2 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  store(*s, turn1, 1.0f);
  const std::optional<int64_t> from = s->wants(turn2, bytes_of(4096));
  ASSERT_EQ(from, 8);
  s->forget(*s->find(turn1));  // its blocks go with it, before turn2's state is written
  s->put(turn2, snapshot_of(turn2, 2.0f, 1024, *from));
  s->flush();
  EXPECT_EQ(s->stats().skipped_total, 1);
  EXPECT_EQ(s->stats().files, 0);
  EXPECT_EQ(s->stats().blocks, 0);
  EXPECT_TRUE(files_with(s->folder(), ".tfblock").empty()) << "nothing half written is left";
}

TEST_F(PromptStoreUnitTest, ACorruptBlockTakesTheStatesThatNeedIt) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<int32_t> other = {7, 7, 7, 7};
  store(*s, a, 1.0f);
  store(*s, b, 2.0f);
  store(*s, other, 3.0f);
  // Flip the last byte of a's second block (its data): the CRC catches it.
  const std::string second = block_file_name(block_digests(a, kBlock)[1]);
  const fs::path path = fs::path(s->folder()) / second;
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x40));
  }
  std::vector<int32_t> prompt = b;
  prompt.push_back(0);
  auto hit = s->longest_prefix(prompt, static_cast<int64_t>(prompt.size()));
  ASSERT_TRUE(hit.has_value());
  auto st = s->read(hit->id, prompt);
  ASSERT_FALSE(st.has_value());
  EXPECT_NE(st.status().message().find("CRC"), std::string::npos) << st.status().to_string();
  EXPECT_EQ(s->stats().failed_reads_total, 1);
  EXPECT_EQ(s->stats().files, 1) << "a and b needed the block; only the other state is left";
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(s->stats().blocks, 1);
  expect_reads_back(*s, other, 3.0f);
}

// A block deleted by hand while the store runs: the state that needs it is dropped when read
// (not counted as a failed check: nothing was corrupt).
TEST_F(PromptStoreUnitTest, AMissingBlockDropsTheStateWhenRead) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  store(*s, a, 1.0f);
  fs::remove(fs::path(s->folder()) / block_file_name(block_digests(a, kBlock)[1]));
  std::vector<int32_t> prompt = a;
  prompt.push_back(0);
  auto st = s->read(*s->find(a), prompt);
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(s->stats().failed_reads_total, 0);
  EXPECT_EQ(s->stats().files, 0);
  EXPECT_FALSE(s->longest_prefix(prompt, 9).has_value());
  EXPECT_EQ(s->stats().blocks, 0) << "the block it shared with nobody went with it";
}

TEST_F(PromptStoreUnitTest, BrokenSetsOfFilesAreMendedAtOpen) {
  std::string folder;
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> b = {2, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> c = {3, 2, 3, 4};
  {
    auto s = open();
    ASSERT_NE(s, nullptr);
    store(*s, a, 1.0f);
    store(*s, b, 2.0f);
    store(*s, c, 3.0f);
    folder = s->folder();
  }
  // a's second block is gone (a state whose block is missing goes); b's state file is gone
  // (its blocks, needed by nobody, go); c's block is renamed to a name it does not hold.
  fs::remove(fs::path(folder) / block_file_name(block_digests(a, kBlock)[1]));
  fs::remove(fs::path(folder) / (prompt_state_name(b) + ".tfstate"));
  fs::rename(fs::path(folder) / block_file_name(block_digests(c, kBlock)[0]),
             fs::path(folder) / block_file_name(std::string(64, 'e')));
  auto s = open();
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->stats().files, 0);
  EXPECT_EQ(s->stats().blocks, 0);
  EXPECT_EQ(s->stats().bytes, 0);
  EXPECT_TRUE(files_with(folder, ".tfblock").empty());
  EXPECT_TRUE(files_with(folder, ".tfstate").empty());
}

// prefetch() reads a state on the store's thread; read() then takes that read (or waits for
// it); reads ahead are bounded, the oldest finished one giving way; a dropped one is gone;
// a read ahead of a corrupt file ends in its error, with the file deleted.
TEST_F(PromptStoreUnitTest, AReadAheadIsTakenByTheRead) {
  auto s = open();
  ASSERT_NE(s, nullptr);
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6}, b = {2, 2, 3, 4}, c = {3, 2, 3, 4}, d = {4, 4, 4, 4};
  store(*s, a, 1.0f);
  store(*s, b, 2.0f);
  store(*s, c, 3.0f);
  store(*s, d, 4.0f);
  std::mutex m;
  std::condition_variable cv;
  int done = 0;
  auto signal = [&] {
    std::lock_guard<std::mutex> lock(m);
    ++done;
    cv.notify_all();
  };
  auto wait_done = [&](int n) {
    std::unique_lock<std::mutex> lock(m);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return done >= n; }));
  };
  const uint64_t ia = *s->find(a), ib = *s->find(b), ic = *s->find(c), id = *s->find(d);
  ASSERT_TRUE(s->prefetch(ia, a, signal));
  EXPECT_TRUE(s->prefetch(ia, a, signal)) << "asked for already";
  wait_done(1);
  EXPECT_FALSE(s->prefetching(ia));
  expect_reads_back(*s, a, 1.0f);
  EXPECT_EQ(s->stats().read_ahead_total, 1);
  expect_reads_back(*s, a, 1.0f);  // nothing ahead this time: read now
  EXPECT_EQ(s->stats().read_ahead_total, 1);
  // Two reads ahead at most: a third makes the older finished one give way.
  ASSERT_TRUE(s->prefetch(ib, b, signal));
  wait_done(2);
  ASSERT_TRUE(s->prefetch(ic, c, signal));
  wait_done(3);
  ASSERT_TRUE(s->prefetch(id, d, signal));
  wait_done(4);
  expect_reads_back(*s, c, 3.0f);
  expect_reads_back(*s, d, 4.0f);
  expect_reads_back(*s, b, 2.0f);  // read now: its read ahead gave way
  EXPECT_EQ(s->stats().read_ahead_total, 3);
  // A dropped read ahead is not taken.
  ASSERT_TRUE(s->prefetch(ib, b, signal));
  wait_done(5);
  s->drop_prefetched(ib);
  expect_reads_back(*s, b, 2.0f);
  EXPECT_EQ(s->stats().read_ahead_total, 3);
  // A corrupt state file: the read ahead ends in the error, and the file is gone.
  const fs::path path = fs::path(s->folder()) / (prompt_state_name(d) + ".tfstate");
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x7f');
  }
  ASSERT_TRUE(s->prefetch(id, d, signal));
  wait_done(6);
  auto bad = s->read(id, d);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.status().message().find("CRC"), std::string::npos) << bad.status().to_string();
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(s->stats().failed_reads_total, 1);
  EXPECT_FALSE(s->prefetch(id, d, signal)) << "no such state any more";
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
  s->put({4, 4, 4, 4}, snapshot_of(std::vector<int32_t>{4, 4, 4, 4}, 4.0f, 1 << 16));
  s->flush();
  EXPECT_EQ(s->stats().skipped_total, 1);
  EXPECT_EQ(s->stats().files, 1);
}

TEST_F(PromptStoreUnitTest, AFullQueueSkipsTheState) {
  auto s = open(int64_t{1} << 30, 0);
  ASSERT_NE(s, nullptr);
  EXPECT_FALSE(s->wants(std::vector<int32_t>{1, 2}, bytes_of(4096)));
  EXPECT_EQ(s->stats().skipped_total, 1);
  PromptStoreOptions o;
  o.dir = dir_.string();
  o.fingerprint = "bounded";
  o.max_bytes = int64_t{1} << 30;
  o.max_pending_bytes = 10000;
  auto b = PromptStore::open(o);
  ASSERT_TRUE(b.has_value());
  EXPECT_FALSE((*b)->wants(std::vector<int32_t>{1, 2}, bytes_of(10001)))
      << "more host memory than the queue may hold";
  EXPECT_EQ((*b)->wants(std::vector<int32_t>{1, 2}, bytes_of(10000)), 0);
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
