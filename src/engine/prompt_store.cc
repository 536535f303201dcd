// PromptStore: the files, their index and the writer thread (see prompt_store.h).
#include "engine/prompt_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <tuple>

#include "core/fnv1a.h"
#include "core/logging.h"

namespace tf::engine {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "tensorfold-prompt-state/1";
constexpr const char* kSuffix = ".tfstate";
constexpr const char* kPartSuffix = ".part";  // a write not yet complete
constexpr const char* kTokens = "prompt.tokens";

uint32_t crc_of(uint32_t crc, const void* data, size_t bytes) {
  return static_cast<uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}

// Flushes a file (or a folder's entries) to the disk.
void sync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

// The prompt's tokens of a stored file, after its format and fingerprint are checked.
Expected<std::vector<int32_t>> tokens_of(const SafetensorsFile& file, const std::string& fingerprint) {
  const auto& meta = file.metadata();
  auto field = [&](const char* key) {
    auto it = meta.find(key);
    return it == meta.end() ? std::string() : it->second;
  };
  if (field("format") != kFormat)
    return invalid_argument(file.path() + ": not a prompt state of this format (" + field("format") + ")");
  if (field("fingerprint") != fingerprint)
    return invalid_argument(file.path() + ": made by another build or model");
  TF_ASSIGN_OR_RETURN(Tensor t, file.tensor(kTokens));
  if (t.dtype() != DType::kI32 || t.dim() != 1 || t.numel() == 0)
    return invalid_argument(file.path() + ": " + kTokens + " is " + t.describe());
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

Expected<int64_t> int_field(const SafetensorsFile& file, const char* key) {
  auto it = file.metadata().find(key);
  if (it == file.metadata().end()) return invalid_argument(file.path() + ": no " + key);
  int64_t v = 0;
  if (std::sscanf(it->second.c_str(), "%lld", reinterpret_cast<long long*>(&v)) != 1 || v < 0)
    return invalid_argument(file.path() + ": " + key + " is '" + it->second + "'");
  return v;
}

// The CRC-32 of a file's data section: its tensors in the order they lie there.
uint32_t data_crc(const SafetensorsFile& file) {
  std::vector<const TensorEntry*> order;
  for (const TensorEntry& e : file.entries()) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->data_begin < b->data_begin; });
  uint32_t crc = crc_of(0, nullptr, 0);
  for (const TensorEntry* e : order) {
    Expected<Tensor> t = file.tensor(e->name);
    if (t) crc = crc_of(crc, t->raw(), t->nbytes());
  }
  return crc;
}

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
  s->writer_ = std::thread([p = s.get()] { p->writer_loop(); });
  return s;
}

PromptStore::~PromptStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

void PromptStore::scan() {
  struct Found {
    fs::file_time_type when;
    std::vector<int32_t> tokens;
    File file;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    const std::string path = entry.path().string();
    const std::string ext = entry.path().extension().string();
    if (ext == kPartSuffix || ext == ".tmp") {  // an interrupted write
      fs::remove(entry.path(), ec);
      continue;
    }
    if (ext != kSuffix || !entry.is_regular_file(ec)) continue;
    auto file = SafetensorsFile::open(path);
    Expected<std::vector<int32_t>> tokens =
        file ? tokens_of(**file, options_.fingerprint) : Expected<std::vector<int32_t>>(file.status());
    if (!tokens) {
      TF_LOG_WARN("prompt store: deleting {}: {}", path, tokens.status().to_string());
      fs::remove(entry.path(), ec);
      continue;
    }
    found.push_back({entry.last_write_time(ec), std::move(*tokens),
                     File{path, static_cast<int64_t>(entry.file_size(ec))}});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.when < b.when; });
  std::lock_guard<std::mutex> lock(mu_);
  for (Found& f : found) add_file(std::move(f.tokens), std::move(f.file));  // oldest first: least recent
  make_room(0);
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
  files_.erase(it);
}

void PromptStore::make_room(int64_t bytes) {
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

bool PromptStore::wants(std::span<const int32_t> tokens, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.find(tokens) || queued_names_.count(prompt_state_name(tokens))) return false;
  if (static_cast<int>(queue_.size()) >= options_.max_pending ||
      queued_bytes_ + bytes > options_.max_pending_bytes || bytes > options_.max_bytes) {
    ++stats_.skipped_total;
    return false;
  }
  return true;
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
  const int64_t bytes = static_cast<int64_t>(p.snapshot.bytes() + p.tokens.size() * sizeof(int32_t));
  if (bytes > options_.max_bytes)
    return resource_exhausted(std::to_string(bytes) + " bytes, more than PROMPT_STORE_GIB allows");
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back(kTokens, Tensor::view_of(const_cast<int32_t*>(p.tokens.data()),
                                                {static_cast<int64_t>(p.tokens.size())}, DType::kI32));
  for (const auto& t : p.snapshot.tensors) tensors.push_back(t);
  uint32_t crc = crc_of(0, nullptr, 0);
  for (const auto& [name, t] : tensors) crc = crc_of(crc, t.raw(), t.nbytes());
  const std::map<std::string, std::string> meta = {{"format", kFormat},
                                                   {"fingerprint", options_.fingerprint},
                                                   {"length", std::to_string(p.snapshot.length)},
                                                   {"mtp_length", std::to_string(p.snapshot.mtp_length)},
                                                   {"crc32", std::to_string(crc)}};
  const std::string path = (fs::path(folder_) / (prompt_state_name(p.tokens) + kSuffix)).string();
  const std::string part = path + kPartSuffix;
  {
    std::lock_guard<std::mutex> lock(mu_);
    make_room(bytes);  // before the bytes land: the folder stays within its bound
  }
  if (Status s = write_safetensors(part, tensors, meta); !s.is_ok()) {
    std::error_code ec;  // e.g. the disk is full: leave nothing behind
    fs::remove(part + ".tmp", ec);
    fs::remove(part, ec);
    return s;
  }
  ::chmod(part.c_str(), 0600);
  sync_path(part);
  std::error_code ec;
  fs::rename(part, path, ec);
  if (ec) {
    fs::remove(part, ec);
    return internal_error(path + ": rename failed (" + ec.message() + ")");
  }
  sync_path(folder_);
  const auto size = static_cast<int64_t>(fs::file_size(path, ec));
  std::lock_guard<std::mutex> lock(mu_);
  add_file(p.tokens, File{path, ec ? bytes : size});
  make_room(0);
  return Status::ok();
}

Expected<StoredState> PromptStore::read(uint64_t id, std::span<const int32_t> prompt) {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = files_.find(id);
    if (it == files_.end()) return not_found("prompt store: the state was deleted");
    path = it->second.path;
  }
  auto check = [&]() -> Expected<StoredState> {
    StoredState st;
    TF_ASSIGN_OR_RETURN(st.file, SafetensorsFile::open(path));
    TF_ASSIGN_OR_RETURN(std::vector<int32_t> tokens, tokens_of(*st.file, options_.fingerprint));
    if (tokens.size() > prompt.size() || !std::equal(tokens.begin(), tokens.end(), prompt.begin()))
      return invalid_argument(path + ": its tokens are not the prompt's");
    TF_ASSIGN_OR_RETURN(st.length, int_field(*st.file, "length"));
    TF_ASSIGN_OR_RETURN(st.mtp_length, int_field(*st.file, "mtp_length"));
    TF_ASSIGN_OR_RETURN(const int64_t crc, int_field(*st.file, "crc32"));
    if (st.length != static_cast<int64_t>(tokens.size()))
      return invalid_argument(path + ": length " + std::to_string(st.length) + " for " +
                              std::to_string(tokens.size()) + " tokens");
    if (data_crc(*st.file) != static_cast<uint32_t>(crc)) return invalid_argument(path + ": CRC mismatch");
    for (const TensorEntry& e : st.file->entries()) {
      if (e.name == kTokens) continue;
      TF_ASSIGN_OR_RETURN(Tensor t, st.file->tensor(e.name));
      st.tensors.emplace(e.name, std::move(t));
    }
    return st;
  };
  Expected<StoredState> st = check();
  std::lock_guard<std::mutex> lock(mu_);
  if (!st) {
    ++stats_.failed_reads_total;
    drop_file(id, true);
    return st.status();
  }
  // The file's modification time is its last use: the order of eviction after a restart.
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
  return s;
}

void PromptStore::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

}  // namespace tf::engine
