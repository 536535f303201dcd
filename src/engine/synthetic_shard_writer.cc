// Sharded, multi-threaded, streaming safetensors writing; see synthetic_shard_writer.h.
#include "engine/synthetic_shard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

namespace tf {
namespace {

namespace fs = std::filesystem;

// Elements per work item: 8 MiB of BF16, small enough that threads share even a small tensor's
// work, large enough that pwrite calls stay few.
constexpr int64_t kChunkElements = int64_t{4} << 20;

std::string shard_file_name(size_t index, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

std::string header_json(const std::vector<GeneratedTensor>& tensors, const ShardPlan::Shard& shard,
                        const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  for (const ShardPlan::Entry& e : shard.entries) {
    const GeneratedTensor& t = tensors[e.tensor];
    h[t.name] = {{"dtype", dtype_safetensors_name(t.recipe.dtype)},
                 {"shape", t.shape},
                 {"data_offsets", {e.begin, e.end}}};
  }
  std::string text = h.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  return text;
}

std::string errno_text(int err) { return std::strerror(err); }

// pwrite until done (it may write less than asked, or be interrupted).
Status pwrite_all(int fd, const char* data, uint64_t size, uint64_t offset, const fs::path& path) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return internal_error(path.string() + ": write failed at byte " + std::to_string(offset) + " (" +
                            (n < 0 ? errno_text(errno) : std::string("no progress")) + ")");
    }
    data += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::ok();
}

struct Job {
  size_t shard = 0, tensor = 0;
  int64_t first = 0, count = 0;  // elements of the tensor
  uint64_t offset = 0;           // in the file
};

// The open .tmp files; removes them unless released.
class TmpFiles {
 public:
  ~TmpFiles() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
    std::error_code ec;
    for (const fs::path& p : paths_) fs::remove(p, ec);
  }
  Status open(const fs::path& path, uint64_t size) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return not_found(path.string() + ": cannot create (" + errno_text(errno) + ")");
    fds_.push_back(fd);
    paths_.push_back(path);
    // Reserve the space now: a full disk is reported before any time is spent. File systems
    // without fallocate simply skip this.
    if (size > 0 && ::fallocate(fd, 0, 0, static_cast<off_t>(size)) != 0 && errno != EOPNOTSUPP && errno != ENOSYS) {
      return internal_error(path.string() + ": cannot reserve " + std::to_string(size) + " bytes (" +
                            errno_text(errno) + ")");
    }
    return Status::ok();
  }
  int fd(size_t i) const { return fds_[i]; }
  const fs::path& path(size_t i) const { return paths_[i]; }
  Status close_all() {
    for (size_t i = 0; i < fds_.size(); ++i) {
      const int fd = fds_[i];
      fds_[i] = -1;
      if (fd >= 0 && ::close(fd) != 0) return internal_error(paths_[i].string() + ": close failed (" + errno_text(errno) + ")");
    }
    return Status::ok();
  }
  void release() { paths_.clear(); }

 private:
  std::vector<int> fds_;
  std::vector<fs::path> paths_;
};

}  // namespace

ShardPlan plan_shards(const std::vector<GeneratedTensor>& tensors, uint64_t shard_bytes,
                      const std::map<std::string, std::string>& metadata) {
  ShardPlan plan;
  std::vector<std::vector<size_t>> groups;
  uint64_t current = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t b = tensors[i].nbytes();
    if (groups.empty() || (current > 0 && current + b > shard_bytes)) {
      groups.emplace_back();
      current = 0;
    }
    groups.back().push_back(i);
    current += b;
  }
  for (size_t s = 0; s < groups.size(); ++s) {
    ShardPlan::Shard shard;
    shard.file = shard_file_name(s, groups.size());
    std::vector<size_t> order = groups[s];
    // F32 first, then the rest; stable, so spec order holds inside each dtype.
    std::stable_partition(order.begin(), order.end(),
                          [&](size_t i) { return tensors[i].recipe.dtype == DType::kF32; });
    for (size_t i : order) {
      const uint64_t b = tensors[i].nbytes();
      shard.entries.push_back({i, shard.data_bytes, shard.data_bytes + b});
      shard.data_bytes += b;
    }
    shard.header = header_json(tensors, shard, metadata);
    plan.data_bytes += shard.data_bytes;
    plan.file_bytes += shard.file_bytes();
    plan.shards.push_back(std::move(shard));
  }
  return plan;
}

std::string shard_index_json(const std::vector<GeneratedTensor>& tensors, const ShardPlan& plan) {
  // nlohmann::json keeps keys sorted, as transformers writes the weight map.
  nlohmann::json map = nlohmann::json::object();
  for (const ShardPlan::Shard& s : plan.shards)
    for (const ShardPlan::Entry& e : s.entries) map[tensors[e.tensor].name] = s.file;
  nlohmann::json index = {{"metadata", {{"total_size", plan.data_bytes}}}, {"weight_map", std::move(map)}};
  return index.dump(2) + "\n";
}

Status write_shards(const fs::path& dir, const std::vector<GeneratedTensor>& tensors, const ShardPlan& plan,
                    const ShardWriteOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  TmpFiles files;
  std::vector<Job> jobs;
  std::vector<size_t> jobs_left(plan.shards.size(), 0);
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    const ShardPlan::Shard& shard = plan.shards[s];
    const fs::path tmp = dir / (shard.file + ".tmp");
    TF_RETURN_IF_ERROR(files.open(tmp, shard.file_bytes()));
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(static_cast<uint64_t>(shard.header.size()) >> (8 * i));
    TF_RETURN_IF_ERROR(pwrite_all(files.fd(s), reinterpret_cast<const char*>(len), 8, 0, tmp));
    TF_RETURN_IF_ERROR(pwrite_all(files.fd(s), shard.header.data(), shard.header.size(), 8, tmp));
    const uint64_t data_start = 8 + shard.header.size();
    const size_t jobs_before = jobs.size();
    for (const ShardPlan::Entry& e : shard.entries) {
      const GeneratedTensor& t = tensors[e.tensor];
      const int64_t n = shape_numel(t.shape);
      const uint64_t esize = dtype_size(t.recipe.dtype);
      for (int64_t first = 0; first < n; first += kChunkElements) {
        const int64_t count = std::min(kChunkElements, n - first);
        jobs.push_back({s, e.tensor, first, count, data_start + e.begin + static_cast<uint64_t>(first) * esize});
      }
    }
    jobs_left[s] = jobs.size() - jobs_before;
  }

  unsigned threads = options.threads != 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(jobs.size(), 1)));
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> bytes_done{0};
  std::atomic<size_t> shards_done{static_cast<size_t>(std::count(jobs_left.begin(), jobs_left.end(), size_t{0}))};
  std::vector<std::atomic<size_t>> left(plan.shards.size());
  for (size_t s = 0; s < left.size(); ++s) left[s] = jobs_left[s];
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable cv;
  Status first_error;
  unsigned running = threads;

  auto worker = [&] {
    std::vector<uint32_t> buffer(static_cast<size_t>(kChunkElements));  // 4-byte elements at most
    for (;;) {
      const size_t j = next.fetch_add(1);
      if (j >= jobs.size() || failed.load()) break;
      const Job& job = jobs[j];
      const GeneratedTensor& t = tensors[job.tensor];
      fill_demo_elements(t.recipe, job.first, job.count, buffer.data());
      const uint64_t bytes = static_cast<uint64_t>(job.count) * dtype_size(t.recipe.dtype);
      Status s = pwrite_all(files.fd(job.shard), reinterpret_cast<const char*>(buffer.data()), bytes, job.offset,
                            files.path(job.shard));
      if (!s.is_ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.is_ok()) first_error = s;
        failed = true;
        break;
      }
      bytes_done += bytes;
      if (left[job.shard].fetch_sub(1) == 1) ++shards_done;
    }
    std::lock_guard<std::mutex> lock(mu);
    --running;
    cv.notify_all();
  };

  auto report = [&] {
    if (!options.progress) return;
    ShardWriteProgress p;
    p.bytes_done = bytes_done.load();
    p.bytes_total = plan.data_bytes;
    p.shards_done = shards_done.load();
    p.shards_total = plan.shards.size();
    p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    options.progress(p);
  };

  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) pool.emplace_back(worker);
  {
    std::unique_lock<std::mutex> lock(mu);
    const auto interval = std::chrono::duration<double>(std::max(options.progress_interval_s, 0.05));
    while (running > 0) {
      if (!cv.wait_for(lock, interval, [&] { return running == 0; })) {
        lock.unlock();
        report();
        lock.lock();
      }
    }
  }
  for (std::thread& t : pool) t.join();
  if (!first_error.is_ok()) return first_error;
  TF_RETURN_IF_ERROR(files.close_all());
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    std::error_code ec;
    fs::rename(files.path(s), dir / plan.shards[s].file, ec);
    if (ec) return internal_error((dir / plan.shards[s].file).string() + ": rename failed (" + ec.message() + ")");
  }
  files.release();
  report();
  return Status::ok();
}

}  // namespace tf
