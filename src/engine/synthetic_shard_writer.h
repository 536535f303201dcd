// Streams generated tensors into sharded safetensors files, for the synthetic checkpoint
// generator (synthetic_checkpoint.h), without ever holding a whole tensor or shard in memory.
//
// Planning is pure arithmetic: tensors are assigned to shards in the order given, a new shard
// starting when the next tensor would push the current one past the target size (a tensor larger
// than the target gets a shard of its own). Inside a shard F32 tensors come first, then BF16, so
// every tensor starts at an offset aligned for its dtype (the release groups its headers by dtype
// the same way). Shards are named model-00001-of-0000N.safetensors, as Hugging Face names them.
//
// Writing: each shard is created as "<name>.tmp", its header written and its full size reserved
// (fallocate, so a full disk fails at once rather than after an hour); the data is cut into
// chunks of at most 8 MiB, which worker threads take in file order, fill from the tensor's
// recipe (demo_weights.h: values depend only on (seed, name, element index)) and pwrite at their
// offsets. The bytes therefore never depend on the thread count or timing. When every chunk is
// written the shards are renamed to their final names; on failure the .tmp files are removed.
// Memory use is one chunk buffer per thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "engine/demo_weights.h"

namespace tf {

struct GeneratedTensor {
  std::string name;
  Shape shape;
  DemoTensorRecipe recipe;  // dtype and how the elements are drawn
  uint64_t nbytes() const { return static_cast<uint64_t>(shape_numel(shape)) * dtype_size(recipe.dtype); }
};

struct ShardPlan {
  struct Entry {
    size_t tensor = 0;  // index into the tensor list
    uint64_t begin = 0, end = 0;  // data offsets inside the shard
  };
  struct Shard {
    std::string file;
    std::vector<Entry> entries;  // in data order
    uint64_t data_bytes = 0;
    std::string header;  // the JSON header, padded with spaces to a multiple of 8 bytes
    uint64_t file_bytes() const { return 8 + header.size() + data_bytes; }
  };
  std::vector<Shard> shards;
  uint64_t data_bytes = 0;  // all tensors (model.safetensors.index.json's total_size)
  uint64_t file_bytes = 0;  // all shard files, headers included
};

// Assigns tensors to shards of about `shard_bytes` each (> 0) and builds their headers, with
// `metadata` as each header's __metadata__.
ShardPlan plan_shards(const std::vector<GeneratedTensor>& tensors, uint64_t shard_bytes,
                      const std::map<std::string, std::string>& metadata);

// model.safetensors.index.json for a plan: {"metadata": {"total_size"}, "weight_map": {name: file}}.
std::string shard_index_json(const std::vector<GeneratedTensor>& tensors, const ShardPlan& plan);

struct ShardWriteProgress {
  uint64_t bytes_done = 0, bytes_total = 0;  // tensor data
  size_t shards_done = 0, shards_total = 0;
  double seconds = 0;
};

struct ShardWriteOptions {
  unsigned threads = 0;  // 0: one per hardware thread
  // Called from the calling thread about every progress_interval_s while writing, and once at the end.
  std::function<void(const ShardWriteProgress&)> progress;
  double progress_interval_s = 2.0;
};

// Writes every shard of `plan` into `dir` (which must exist). Errors name the file at fault.
Status write_shards(const std::filesystem::path& dir, const std::vector<GeneratedTensor>& tensors,
                    const ShardPlan& plan, const ShardWriteOptions& options = {});

}  // namespace tf
