#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace tf {
namespace {

constexpr size_t kMaxHeaderBytes = 100u << 20;  // as the reference implementation

using json = nlohmann::json;

std::string quoted(const std::string& s) { return "'" + s + "'"; }

// Reads a non-negative integer that fits in size_t, or explains why not.
Expected<size_t> as_size(const json& v, const std::string& what) {
  if (!v.is_number_integer() && !v.is_number_unsigned()) return invalid_argument(what + " is not an integer");
  if (v.is_number_unsigned()) return static_cast<size_t>(v.get<uint64_t>());
  const int64_t x = v.get<int64_t>();
  if (x < 0) return invalid_argument(what + " is negative (" + std::to_string(x) + ")");
  return static_cast<size_t>(x);
}

}  // namespace

Expected<std::vector<TensorEntry>> parse_safetensors_header(std::string_view text, size_t data_size,
                                                            const std::string& source,
                                                            std::map<std::string, std::string>* metadata) {
  json header = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return invalid_argument(source + ": header is not valid JSON");
  if (!header.is_object()) return invalid_argument(source + ": header is not a JSON object");

  std::vector<TensorEntry> entries;
  entries.reserve(header.size());
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return invalid_argument(source + ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) return invalid_argument(source + ": __metadata__." + m.key() + " is not a string");
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string where = source + ": tensor " + quoted(name);
    if (!v.is_object()) return invalid_argument(where + ": entry is not an object");
    auto dt = v.find("dtype");
    auto sh = v.find("shape");
    auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) return invalid_argument(where + ": missing or non-string 'dtype'");
    if (sh == v.end() || !sh->is_array()) return invalid_argument(where + ": missing or non-array 'shape'");
    if (off == v.end() || !off->is_array() || off->size() != 2) {
      return invalid_argument(where + ": 'data_offsets' must be [begin, end]");
    }
    TensorEntry e;
    e.name = name;
    auto dtype = dtype_from_safetensors_name(dt->get<std::string>());
    if (!dtype) return unimplemented(where + ": unsupported dtype " + quoted(dt->get<std::string>()));
    e.dtype = *dtype;
    // numel * size with overflow checks: a hostile header must not wrap around.
    size_t numel = 1;
    for (const auto& d : *sh) {
      TF_ASSIGN_OR_RETURN(size_t n, as_size(d, where + ": shape dimension"));
      if (n != 0 && numel > std::numeric_limits<size_t>::max() / n) return out_of_range(where + ": shape overflows");
      e.shape.push_back(static_cast<int64_t>(n));
      numel *= n;
    }
    if (numel > std::numeric_limits<size_t>::max() / dtype_size(e.dtype)) return out_of_range(where + ": size overflows");
    TF_ASSIGN_OR_RETURN(e.data_begin, as_size((*off)[0], where + ": data_offsets[0]"));
    TF_ASSIGN_OR_RETURN(e.data_end, as_size((*off)[1], where + ": data_offsets[1]"));
    if (e.data_begin > e.data_end) {
      return invalid_argument(where + ": data_offsets begin " + std::to_string(e.data_begin) + " > end " +
                              std::to_string(e.data_end));
    }
    if (e.data_end > data_size) {
      return out_of_range(where + ": data ends at byte " + std::to_string(e.data_end) + " but the data section has " +
                          std::to_string(data_size) + " bytes (truncated file?)");
    }
    const size_t want = numel * dtype_size(e.dtype);
    if (e.data_end - e.data_begin != want) {
      return invalid_argument(where + ": " + dt->get<std::string>() + shape_to_string(e.shape) + " needs " +
                              std::to_string(want) + " bytes but data_offsets span " +
                              std::to_string(e.data_end - e.data_begin));
    }
    entries.push_back(std::move(e));
  }
  // No two tensors may share bytes.
  std::vector<const TensorEntry*> by_offset;
  for (const auto& e : entries) if (e.data_end > e.data_begin) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorEntry* a, const TensorEntry* b) { return a->data_begin < b->data_begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->data_begin < by_offset[i - 1]->data_end) {
      return invalid_argument(source + ": tensors " + quoted(by_offset[i - 1]->name) + " and " +
                              quoted(by_offset[i]->name) + " overlap");
    }
  }
  return entries;
}

namespace {

std::atomic<bool> g_release_pages{false};

// Drops this process's mapping of the whole pages inside [offset, offset + bytes) of the
// file `path` mapped at `base`, and asks the kernel to evict them from the page cache
// (pages shared with a neighbour stay).
void give_back_pages(char* base, const std::string& path, size_t offset, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t begin = (offset + page - 1) / page * page, end = (offset + bytes) / page * page;
  if (end <= begin) return;
  (void)madvise(base + begin, end - begin, MADV_DONTNEED);  // file-backed, never written: refaults from the file
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  (void)posix_fadvise(fd, static_cast<off_t>(begin), static_cast<off_t>(end - begin), POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace

void set_release_checkpoint_pages(bool on) { g_release_pages = on; }
bool release_checkpoint_pages() { return g_release_pages.load(); }

Expected<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return not_found(path + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(path + ": not a regular file");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return invalid_argument(path + ": file is " + std::to_string(size) + " bytes, too short for a safetensors header");
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return internal_error(path + ": mmap failed (" + std::strerror(errno) + ")");

  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_ = std::make_shared<Storage>(map, size, Device::cpu(), [size](void* p) { munmap(p, size); });
  const auto* bytes = static_cast<const unsigned char*>(map);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderBytes) {
    return invalid_argument(path + ": header length " + std::to_string(n) + " exceeds the " +
                            std::to_string(kMaxHeaderBytes) + "-byte limit (corrupt file?)");
  }
  if (n > size - 8) {
    return out_of_range(path + ": header length " + std::to_string(n) + " exceeds the file size " +
                        std::to_string(size) + " (truncated file?)");
  }
  f->data_ = reinterpret_cast<const char*>(bytes + 8 + n);
  auto entries = parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(bytes + 8), n),
                                          size - 8 - n, path, &f->metadata_);
  if (!entries) return entries.status();
  f->entries_ = std::move(*entries);
  for (size_t i = 0; i < f->entries_.size(); ++i) f->index_[f->entries_[i].name] = i;
  return f;
}

const TensorEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Expected<Tensor> SafetensorsFile::tensor(const std::string& name) const {
  const TensorEntry* e = find(name);
  if (!e) return not_found(path_ + ": no tensor " + quoted(name));
  const char* p = data_ + e->data_begin;
  // The format does not require aligned offsets (an unpadded header or an odd
  // data_offsets start is valid); typed access to a misaligned address is UB, so
  // such a tensor is handed out as an aligned owning copy instead of a view.
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(e->dtype) != 0) {
    Tensor copy = Tensor::empty(e->shape, e->dtype);
    if (e->data_end > e->data_begin) std::memcpy(copy.raw(), p, e->data_end - e->data_begin);
    return copy;
  }
  // A view that shares the mapping (read-only: PROT_READ).
  const size_t offset = static_cast<size_t>(p - static_cast<const char*>(map_->data()));
  if (!release_checkpoint_pages()) return Tensor::on_storage(map_, offset, e->shape, e->dtype);
  // Its own storage over the range, which keeps the mapping and gives the pages back when it goes.
  const size_t bytes = e->data_end - e->data_begin;
  auto range = std::make_shared<Storage>(const_cast<char*>(p), bytes, Device::cpu(),
                                         [map = map_, path = path_, offset, bytes](void*) {
                                           give_back_pages(static_cast<char*>(map->data()), path, offset, bytes);
                                         });
  return Tensor::on_storage(range, 0, e->shape, e->dtype);
}

Expected<std::unique_ptr<Checkpoint>> Checkpoint::open(const std::string& path) {
  namespace fs = std::filesystem;
  auto ckpt = std::make_unique<Checkpoint>();
  std::error_code ec;
  std::vector<std::string> files;
  std::map<std::string, std::string> expected_location;  // from the index
  if (fs::is_regular_file(path, ec)) {
    ckpt->dir_ = fs::path(path).parent_path().string();
    files.push_back(path);
  } else if (fs::is_directory(path, ec)) {
    ckpt->dir_ = path;
    const fs::path index = fs::path(path) / "model.safetensors.index.json";
    if (fs::exists(index)) {
      std::ifstream in(index);
      json j = json::parse(in, nullptr, false);
      if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
        return invalid_argument(index.string() + ": not a valid index (needs an object 'weight_map')");
      }
      std::set<std::string> shard_set;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string()) return invalid_argument(index.string() + ": weight_map." + it.key() + " is not a string");
        const std::string shard = it.value().get<std::string>();
        if (shard.find('/') != std::string::npos || shard == "..") {
          return invalid_argument(index.string() + ": shard name " + quoted(shard) + " leaves the folder");
        }
        shard_set.insert(shard);
        expected_location[it.key()] = shard;
      }
      for (const auto& s : shard_set) files.push_back((fs::path(path) / s).string());
    } else if (fs::exists(fs::path(path) / "model.safetensors")) {
      files.push_back((fs::path(path) / "model.safetensors").string());
    } else {
      for (const auto& de : fs::directory_iterator(path, ec)) {
        if (de.path().extension() == ".safetensors") files.push_back(de.path().string());
      }
      std::sort(files.begin(), files.end());
      if (files.empty()) return not_found(path + ": no model.safetensors.index.json and no *.safetensors files");
    }
  } else {
    return not_found(path + ": no such checkpoint file or folder");
  }
  for (const auto& file : files) {
    TF_ASSIGN_OR_RETURN(auto f, SafetensorsFile::open(file));
    const size_t idx = ckpt->files_.size();
    for (const auto& e : f->entries()) {
      auto [it, inserted] = ckpt->where_.emplace(e.name, idx);
      if (!inserted) {
        return invalid_argument("tensor " + quoted(e.name) + " is in both " + ckpt->files_[it->second]->path() +
                                " and " + file);
      }
    }
    ckpt->files_.push_back(std::move(f));
  }
  for (const auto& [name, shard] : expected_location) {
    auto it = ckpt->where_.find(name);
    if (it == ckpt->where_.end()) {
      return not_found("tensor " + quoted(name) + " is listed in the index under " + shard + " but that file lacks it");
    }
    if (fs::path(ckpt->files_[it->second]->path()).filename() != shard) {
      return invalid_argument("tensor " + quoted(name) + " is listed under " + shard + " but found in " +
                              ckpt->files_[it->second]->path());
    }
  }
  return ckpt;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  out.reserve(where_.size());
  for (const auto& [name, idx] : where_) out.push_back(name);
  return out;
}

const TensorEntry* Checkpoint::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second]->find(name);
}

Expected<Tensor> Checkpoint::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return not_found(dir_ + ": checkpoint has no tensor " + quoted(name));
  return files_[it->second]->tensor(name);
}

std::string Checkpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? std::string() : files_[it->second]->path();
}

Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (!t.device().is_cpu()) return invalid_argument(path + ": tensor " + quoted(name) + " is not on the host");
    if (header.contains(name)) return invalid_argument(path + ": tensor " + quoted(name) + " given twice");
    header[name] = {{"dtype", dtype_safetensors_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  const std::string tmp = path + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return not_found(path + ": cannot create (" + std::strerror(errno) + ")");
  uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const auto& [name, t] : tensors) {
    const Tensor packed = t.is_contiguous() ? t : t.contiguous();
    out.write(static_cast<const char*>(packed.raw()), static_cast<std::streamsize>(packed.nbytes()));
  }
  out.close();
  if (!out) return internal_error(path + ": write failed");
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return internal_error(path + ": rename failed (" + ec.message() + ")");
  return Status::ok();
}

}  // namespace tf
