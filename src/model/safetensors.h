// Safetensors checkpoints: memory-mapped reading with strict validation, and writing.
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data; offsets are relative to the end of the header.
// Validation (any failure names the file and the tensor): N bounded (100 MB)
// and within the file; valid JSON object; known dtype; non-negative shape;
// begin <= end <= data size; end - begin == numel * dtype size; no two
// tensors overlap. A sharded checkpoint (model.safetensors.index.json) maps each
// tensor to a shard; every listed shard must exist and hold what it claims.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace tf {

struct TensorEntry {
  std::string name;
  DType dtype;
  Shape shape;
  size_t data_begin = 0;  // relative to the data section
  size_t data_end = 0;
};

// Parses and validates a header (the JSON bytes) against a data section of
// data_size bytes. `source` names the file in errors. Exposed for the fuzzer.
Expected<std::vector<TensorEntry>> parse_safetensors_header(std::string_view json, size_t data_size,
                                                            const std::string& source,
                                                            std::map<std::string, std::string>* metadata = nullptr);

// Whether a tensor view gives its file pages back to the OS when its last reference goes
// (madvise + posix_fadvise DONTNEED over the pages it alone covers; the mapping stays, so a
// later read faults the bytes in again). Off by default: on a GPU with its own memory the
// page cache is free and makes the next start fast. On one that shares the host's memory
// (a DGX Spark) the checkpoint's cached pages compete with the GPU's own allocations,
// loading ~75 GB per rank would leave no room for the cache pool, so the engine turns
// this on there (engine/checkpoint_pages.h).
void set_release_checkpoint_pages(bool on);
bool release_checkpoint_pages();

// One memory-mapped .safetensors file. Tensors are zero-copy, read-only views
// into the mapping; each holds a reference to it, so they stay valid after the
// file object is gone (the weight loader hands them straight to the upload).
class SafetensorsFile {
 public:
  static Expected<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile() = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorEntry* find(const std::string& name) const;
  // Non-owning view of the mapped bytes; not_found names the tensor and the file.
  Expected<Tensor> tensor(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::shared_ptr<Storage> map_;  // the whole file; munmap when the last view goes
  const char* data_ = nullptr;    // start of the data section
  std::vector<TensorEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A checkpoint folder: model.safetensors.index.json with its shards, else
// model.safetensors, else every *.safetensors file in it; or a single file.
class Checkpoint {
 public:
  static Expected<std::unique_ptr<Checkpoint>> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  bool has(const std::string& name) const { return where_.count(name) != 0; }
  std::vector<std::string> names() const;
  const TensorEntry* find(const std::string& name) const;
  Expected<Tensor> tensor(const std::string& name) const;
  // Which file holds a tensor (for messages).
  std::string file_of(const std::string& name) const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> where_;  // tensor name -> index in files_
};

// Writes tensors (any host tensors, packed in the order given) to path.
Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace tf
