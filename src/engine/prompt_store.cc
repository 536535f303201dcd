// PromptStore: the index of its files, their blocks' references and the writer thread (see
// prompt_store.h; the files themselves: prompt_state_files.h).
#include "engine/prompt_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/fnv1a.h"
#include "core/logging.h"

namespace tf::engine {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSuffix = ".tfstate";
constexpr const char* kBlockSuffix = ".tfblock";

}  // namespace

std::string prompt_state_name(std::span<const int32_t> tokens) {
  const uint64_t h =
      fnv1a_bytes(tokens.data(), tokens.size_bytes());  // the ranks of one world share a byte order
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Expected<std::unique_ptr<PromptStore>> PromptStore::open(const PromptStoreOptions& options) {
  if (options.dir.empty()) return invalid_argument("PROMPT_STORE: no folder given");
  if (options.fingerprint.empty() || options.fingerprint.find('/') != std::string::npos)
    return invalid_argument("prompt store: bad fingerprint '" + options.fingerprint + "'");
  if (options.max_bytes <= 0) return invalid_argument("PROMPT_STORE_GIB must be positive");
  std::unique_ptr<PromptStore> s(new PromptStore(options));
  s->folder_ = (fs::path(options.dir) / options.fingerprint).string();
  std::error_code ec;
  fs::create_directories(s->folder_, ec);
  if (ec || !fs::is_directory(s->folder_))
    return invalid_argument("PROMPT_STORE: cannot create the folder " + s->folder_ + " (" + ec.message() +
                            ")");
  if (::chmod(s->folder_.c_str(), 0700) != 0 || ::access(s->folder_.c_str(), R_OK | W_OK | X_OK) != 0)
    return invalid_argument("PROMPT_STORE: the folder " + s->folder_ + " is not ours to read and write");
  s->scan();
  s->note_other_folders();
  s->writer_ = std::thread([p = s.get()] { p->writer_loop(); });
  s->reader_ = std::thread([p = s.get()] { p->reader_loop(); });
  return s;
}

PromptStore::~PromptStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  if (reader_.joinable()) reader_.join();
}

void PromptStore::scan() {
  struct Found {
    fs::file_time_type when;
    std::vector<int32_t> tokens;
    File file;
  };
  std::vector<Found> found;
  std::error_code ec;
  auto remove = [&ec](const fs::path& path, const std::string& why) {
    if (!why.empty()) TF_LOG_WARN("prompt store: deleting {}: {}", path.string(), why);
    fs::remove(path, ec);
  };
  std::vector<fs::directory_entry> states;
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    const std::string ext = entry.path().extension().string();
    if (ext == ".part" || ext == ".tmp") {  // an interrupted write
      remove(entry.path(), "");
      continue;
    }
    if (!entry.is_regular_file(ec)) continue;
    if (ext == kSuffix) states.push_back(entry);
    if (ext != kBlockSuffix) continue;
    auto file = SafetensorsFile::open(entry.path().string());
    Expected<std::string> digest =
        file ? block_file_digest(**file, options_.fingerprint) : Expected<std::string>(file.status());
    if (!digest || block_file_name(*digest) != entry.path().filename().string()) {
      remove(entry.path(), digest ? "its name is not its digest's" : digest.status().to_string());
      continue;
    }
    blocks_[*digest] = Block{entry.path().string(), static_cast<int64_t>(entry.file_size(ec)), 0};
  }
  for (const auto& entry : states) {
    const std::string path = entry.path().string();
    auto file = SafetensorsFile::open(path);
    Expected<StateFileInfo> info =
        file ? state_file_info(**file, options_.fingerprint) : Expected<StateFileInfo>(file.status());
    if (!info) {
      remove(entry.path(), info.status().to_string());
      continue;
    }
    if (info->block_tokens != options_.block_tokens) {
      remove(entry.path(), "blocks of another size");
      continue;
    }
    File f{path, static_cast<int64_t>(entry.file_size(ec)),
           block_digests(info->tokens, options_.block_tokens)};
    auto missing = std::find_if(f.blocks.begin(), f.blocks.end(),
                                [this](const std::string& d) { return !blocks_.count(d); });
    if (missing != f.blocks.end()) {
      remove(entry.path(), "its block " + block_file_name(*missing) + " is gone");
      continue;
    }
    for (const std::string& d : f.blocks) ++blocks_.at(d).refs;
    found.push_back({entry.last_write_time(ec), std::move(info->tokens), std::move(f)});
  }
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    if (it->second.refs > 0) {
      stats_.bytes += it->second.bytes;
      ++it;
    } else {
      remove(it->second.path, "");  // no state needs it (its state's write was interrupted)
      it = blocks_.erase(it);
    }
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.when < b.when; });
  std::lock_guard<std::mutex> lock(mu_);
  for (Found& f : found) add_file(std::move(f.tokens), std::move(f.file));  // oldest first: least recent
  make_room(0);
}

void PromptStore::note_other_folders() const {
  // Other fingerprints' folders (another build, checkpoint or setting) are never read
  // by this server, nor deleted: another server may use them. Say what they hold, so that
  // an upgrade's leftovers do not fill the disk unnoticed.
  std::error_code ec;
  int64_t folders = 0, bytes = 0;
  for (const auto& dir : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = dir.path().filename().string();
    if (!dir.is_directory(ec) || dir.path() == fs::path(folder_) ||
        std::find(options_.siblings.begin(), options_.siblings.end(), name) != options_.siblings.end())
      continue;
    bool ours = false;
    for (const auto& f : fs::directory_iterator(dir.path(), ec)) {
      const std::string ext = f.path().extension().string();
      if (ext != kSuffix && ext != kBlockSuffix) continue;
      ours = true;
      bytes += static_cast<int64_t>(f.file_size(ec));
    }
    folders += ours;
  }
  if (folders > 0)
    TF_LOG_WARN(
        "prompt store: {} other folder(s) under {} ({:.2f} GiB) hold states of other builds, checkpoints "
        "or settings, which this server never reads; delete them when no other server uses them",
        folders, options_.dir, static_cast<double>(bytes) / 1073741824.0);
}

std::string PromptStore::block_path(const std::string& digest) const {
  return (fs::path(folder_) / block_file_name(digest)).string();
}

void PromptStore::add_file(std::vector<int32_t> tokens, File file) {
  // A file rewritten under the same name (the same tokens, or a hash collision) replaces its entry.
  for (auto it = files_.begin(); it != files_.end();) {
    const uint64_t old = it->first;
    const bool same = it->second.path == file.path;
    ++it;
    if (same) drop_file(old, false);
  }
  const uint64_t id = next_id_++;
  stats_.bytes += file.bytes;
  files_.emplace(id, std::move(file));
  index_.add(id, std::move(tokens));
}

void PromptStore::drop_file(uint64_t id, bool delete_it) {
  auto it = files_.find(id);
  index_.remove(id);
  if (it == files_.end()) return;
  if (delete_it) {
    std::error_code ec;
    fs::remove(it->second.path, ec);
  }
  stats_.bytes -= it->second.bytes;
  for (const std::string& d : it->second.blocks) release_block(d);
  files_.erase(it);
}

void PromptStore::release_block(const std::string& digest) {
  auto it = blocks_.find(digest);
  if (it == blocks_.end() || --it->second.refs > 0) return;
  std::error_code ec;
  fs::remove(it->second.path, ec);
  stats_.bytes -= it->second.bytes;
  blocks_.erase(it);
}

void PromptStore::drop_states_needing(const std::string& digest) {
  std::vector<uint64_t> ids;
  for (const auto& [id, f] : files_)
    if (std::find(f.blocks.begin(), f.blocks.end(), digest) != f.blocks.end()) ids.push_back(id);
  for (uint64_t id : ids) drop_file(id, true);
}

void PromptStore::make_room(int64_t bytes) {
  // Blocks a state being written holds a reference to stay; the states before it go.
  while (stats_.bytes + bytes > options_.max_bytes) {
    const std::optional<uint64_t> id = index_.least_recent();
    if (!id) break;
    drop_file(*id, true);
  }
}

std::optional<PromptIndex::Hit> PromptStore::longest_prefix(std::span<const int32_t> prompt, int64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.longest_prefix(prompt, limit);
}

std::optional<int64_t> PromptStore::wants(std::span<const int32_t> tokens,
                                          const std::function<int64_t(int64_t)>& bytes) {
  // The digests before the lock: hashing a long prompt is the slow part.
  const std::vector<std::string> digests = block_digests(tokens, options_.block_tokens);
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.find(tokens) || queued_names_.count(prompt_state_name(tokens))) return std::nullopt;
  size_t stored = 0;
  while (stored < digests.size() && blocks_.count(digests[stored])) ++stored;
  const int64_t from = static_cast<int64_t>(stored) * options_.block_tokens;
  const int64_t n = bytes(from);
  if (static_cast<int>(queue_.size()) >= options_.max_pending ||
      queued_bytes_ + n > options_.max_pending_bytes || bytes(0) > options_.max_bytes) {
    ++stats_.skipped_total;
    return std::nullopt;
  }
  return from;
}

void PromptStore::put(std::vector<int32_t> tokens, SequenceSnapshot snapshot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_names_.insert(prompt_state_name(tokens));
    queued_bytes_ += static_cast<int64_t>(snapshot.bytes());
    queue_.push_back(Pending{std::move(tokens), std::move(snapshot)});
  }
  cv_.notify_all();
}

void PromptStore::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything is written
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    const Status s = write(p);
    lock.lock();
    queued_names_.erase(prompt_state_name(p.tokens));
    queued_bytes_ -= static_cast<int64_t>(p.snapshot.bytes());
    writing_ = false;
    if (s.is_ok()) {
      ++stats_.written_total;
    } else {
      ++stats_.skipped_total;
      TF_LOG_WARN("prompt store: a state of {} tokens was not written: {}", p.tokens.size(), s.to_string());
    }
    cv_.notify_all();
  }
}

Status PromptStore::write(const Pending& p) {
  const SequenceSnapshot& snap = p.snapshot;
  const int64_t bytes = static_cast<int64_t>(snap.bytes() + p.tokens.size() * sizeof(int32_t));
  if (bytes > options_.max_bytes)
    return resource_exhausted(std::to_string(bytes) + " bytes, more than PROMPT_STORE_GIB allows");
  const std::vector<std::string> digests = block_digests(p.tokens, options_.block_tokens);
  std::vector<std::string> held;  // references this write holds (they become the state's)
  auto let_go = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& d : held) release_block(d);
  };
  std::vector<size_t> to_write;
  bool gone = false;  // a block the snapshot left out was deleted meanwhile
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t k = 0; k < digests.size() && !gone; ++k) {
      auto it = blocks_.find(digests[k]);
      if (it != blocks_.end()) {
        ++it->second.refs;  // kept from here on, whatever make_room evicts
        held.push_back(digests[k]);
      } else if (static_cast<int64_t>(k) * options_.block_tokens < snap.from) {
        gone = true;
      } else {
        to_write.push_back(k);
      }
    }
    if (!gone) make_room(bytes);  // before the bytes land: the folder stays within its bound
  }
  if (gone) {
    let_go();
    return not_found("a block its snapshot left out was deleted meanwhile");
  }
  const int64_t block = options_.block_tokens;
  for (size_t k : to_write) {
    const std::string path = block_path(digests[k]);
    if (Status s = write_block_file(path, options_.fingerprint, digests[k], snap,
                                    static_cast<int64_t>(k) * block, block);
        !s.is_ok()) {
      let_go();
      return s;
    }
    std::error_code ec;
    const auto size = static_cast<int64_t>(fs::file_size(path, ec));
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[digests[k]] = Block{path, ec ? 0 : size, 1};
    stats_.bytes += ec ? 0 : size;
    stats_.written_bytes_total += ec ? 0 : size;
    held.push_back(digests[k]);
  }
  const std::string path = (fs::path(folder_) / (prompt_state_name(p.tokens) + kSuffix)).string();
  if (Status s = write_state_file(path, options_.fingerprint, p.tokens, snap, block); !s.is_ok()) {
    let_go();
    return s;
  }
  std::error_code ec;
  const auto size = static_cast<int64_t>(fs::file_size(path, ec));
  std::lock_guard<std::mutex> lock(mu_);
  stats_.written_bytes_total += ec ? 0 : size;
  add_file(p.tokens, File{path, ec ? 0 : size, digests});  // takes over the references held
  make_room(0);
  return Status::ok();
}

Expected<StoredState> PromptStore::read(uint64_t id, std::span<const int32_t> prompt) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = prefetches_.find(id);
    if (it != prefetches_.end()) {
      cv_.wait(lock, [&] {
        it = prefetches_.find(id);
        return it == prefetches_.end() || it->second.result.has_value();
      });
      if (it != prefetches_.end()) {
        Expected<StoredState> st = std::move(*it->second.result);
        prefetches_.erase(it);
        if (st) ++stats_.read_ahead_total;
        return st;
      }
    }
  }
  return read_now(id, prompt);
}

bool PromptStore::prefetch(uint64_t id, std::vector<int32_t> prompt, std::function<void()> done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (prefetches_.count(id)) return true;  // asked for already
    if (!files_.count(id)) return false;
    // At the bound, the read that ended first and was not taken makes room (its request went
    // away, or waits; it will read when admitted).
    while (static_cast<int>(prefetches_.size()) >= options_.max_prefetched) {
      auto oldest = prefetches_.end();
      for (auto it = prefetches_.begin(); it != prefetches_.end(); ++it)
        if (it->second.result && (oldest == prefetches_.end() || it->second.ended < oldest->second.ended))
          oldest = it;
      if (oldest == prefetches_.end()) return false;  // all still running
      prefetches_.erase(oldest);
    }
    prefetches_[id] = Prefetch{std::move(prompt), std::move(done), std::nullopt};
    to_prefetch_.push_back(id);
  }
  cv_.notify_all();
  return true;
}

bool PromptStore::prefetching(uint64_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = prefetches_.find(id);
  return it != prefetches_.end() && !it->second.result.has_value();
}

void PromptStore::drop_prefetched(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  prefetches_.erase(id);  // a read still running finds no entry and lets its result go
}

void PromptStore::reader_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !to_prefetch_.empty(); });
    if (stop_) return;
    const uint64_t id = to_prefetch_.front();
    to_prefetch_.pop_front();
    auto it = prefetches_.find(id);
    if (it == prefetches_.end() || it->second.result) continue;  // dropped before it started, or done
    const std::vector<int32_t> prompt = it->second.prompt;
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    Expected<StoredState> st = read_now(id, prompt);
    if (st) {
      size_t bytes = 0;
      for (const auto& [name, pieces] : st->tensors)
        for (const Tensor& t : pieces) bytes += t.nbytes();
      TF_LOG_INFO("prompt store: read a state of {} tokens ahead ({:.1f} MB) in {:.1f} ms", st->length,
                  static_cast<double>(bytes) / 1e6,
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    lock.lock();
    it = prefetches_.find(id);
    if (it == prefetches_.end() || it->second.result) continue;  // dropped meanwhile
    it->second.result = std::move(st);
    it->second.ended = ++prefetches_ended_;
    std::function<void()> done = it->second.done;
    cv_.notify_all();
    lock.unlock();
    if (done) done();
    lock.lock();
  }
}

Expected<StoredState> PromptStore::read_now(uint64_t id, std::span<const int32_t> prompt) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(id);
    if (it == files_.end()) return not_found("prompt store: the state was deleted");
    path = it->second.path;
  }
  StateReadFault fault;
  Expected<StoredState> st = read_stored_state(
      path, prompt, options_.fingerprint, options_.block_tokens,
      [this](const std::string& digest) { return block_path(digest); }, fault);
  std::lock_guard<std::mutex> lock(mu_);
  if (!st) {
    if (fault.missing_file) {
      // Deleted meanwhile (made room, or by hand): nothing is corrupt, but the state is no use.
      drop_file(id, true);
      return st.status();
    }
    ++stats_.failed_reads_total;
    if (!fault.bad_block.empty()) drop_states_needing(fault.bad_block);
    drop_file(id, true);
    return st.status();
  }
  // The state file's modification time is its last use: the order of eviction after a restart.
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
  return st;
}

std::optional<uint64_t> PromptStore::find(std::span<const int32_t> tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.find(tokens);
}

void PromptStore::forget(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  drop_file(id, true);
}

void PromptStore::note_restored() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.restored_total;
}

PromptStoreStats PromptStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PromptStoreStats s = stats_;
  s.files = static_cast<int64_t>(files_.size());
  s.blocks = static_cast<int64_t>(blocks_.size());
  return s;
}

void PromptStore::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

}  // namespace tf::engine
