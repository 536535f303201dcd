// PromptStore: kept prompts' states on disk (PROMPT_STORE), so that a prompt resumes from
// one after its state left the device (evicted for a request's pages, or past
// KEPT_PROMPTS) or after the server restarted.
//
// A state is a state file, <dir>/<fingerprint>/<hash of its tokens>.tfstate, and the block
// files of its leading tokens' rows along the sequence, shared with every other stored
// state that starts with the same tokens (prompt_state_files.h): the next turn of a chat
// writes its new blocks and a small state file, not its whole history again. The
// fingerprint names the build, the checkpoint and every setting that changes a state's
// bits (engine_prompt_store.cc), so a file is only ever read by a server that would have
// computed the same state; other fingerprints' folders are left alone. Files are written
// by a thread of their own (the engine thread only copies the rows the store does not
// hold yet to the host), mode 0600 in a 0700 folder; a file that fails its checks when read
// is deleted with the states that need it. The folder is bounded by max_bytes: the least
// recently used states go first, and a block goes with the last state that needs it (the
// order survives restarts through the state files' modification times).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cache/prompt_index.h"
#include "core/status.h"
#include "engine/engine_options.h"
#include "engine/prompt_state_files.h"
#include "model/glm5/glm5_model.h"

namespace tf::engine {

struct PromptStoreOptions {
  std::string dir;          // the store's root; created (0700) when missing
  std::string fingerprint;  // names the subfolder this server reads and writes
  int64_t max_bytes = 0;    // the subfolder's bound
  int max_pending = 2;      // states waiting for the writer (each held on the host)
  int64_t max_pending_bytes = int64_t{1} << 31;  // and their bytes together (a larger state is not stored)
  int64_t block_tokens = 2048;  // the rows along the sequence go to blocks of this many tokens
  int max_prefetched = 2;       // reads ahead running or waiting to be taken (prefetch)
  std::vector<std::string> siblings;  // the other ranks' folders of this world (not reported as leftovers)
};

struct PromptStoreStats {
  int64_t files = 0, bytes = 0;  // states, and the bytes of their files and blocks
  int64_t blocks = 0;
  int64_t written_total = 0, skipped_total = 0;  // skipped: the writer's queue was full
  int64_t written_bytes_total = 0;               // new blocks and state files
  int64_t restored_total = 0, failed_reads_total = 0;
  int64_t read_ahead_total = 0;  // reads taken from prefetch() (the disk read before the state was needed)
};

class PromptStore {
 public:
  // Creates the folders when missing and indexes the files of this fingerprint (a file
  // whose header cannot be read is deleted; leftovers of interrupted writes too).
  static Expected<std::unique_ptr<PromptStore>> open(const PromptStoreOptions& options);
  // Writes what is still queued (a clean stop keeps every state it was given).
  ~PromptStore();
  PromptStore(const PromptStore&) = delete;
  PromptStore& operator=(const PromptStore&) = delete;

  const std::string& folder() const { return folder_; }
  // The longest stored state whose tokens are a prefix of prompt[0, limit).
  std::optional<PromptIndex::Hit> longest_prefix(std::span<const int32_t> prompt, int64_t limit);
  // Whether put() would take these tokens' state now, and from which token its snapshot must
  // hold the rows along the sequence (SequenceSnapshot::from: the blocks before it are
  // stored). Not when it is stored or queued already, or when the writer's queue has no room
  // for its `bytes(from)` bytes (counted as skipped).
  std::optional<int64_t> wants(std::span<const int32_t> tokens, const std::function<int64_t(int64_t)>& bytes);
  // Queues a state for the writer (its snapshot from the token wants() gave). Should a block
  // it leaves out be gone by the time it is written, it is skipped.
  void put(std::vector<int32_t> tokens, SequenceSnapshot snapshot);
  // Reads a stored state (a hit of longest_prefix for `prompt`) and checks its files: format,
  // fingerprint, tokens (a prefix of the prompt), digests and CRCs. A state file that fails is
  // deleted and leaves the index; a block file that fails, with every state that needs it.
  // Takes the read prefetch() started for `id`, waiting for it if it still runs.
  Expected<StoredState> read(uint64_t id, std::span<const int32_t> prompt);
  // Reads a stored state ahead (read()'s checks, which bring every byte of its files in
  // from the disk) on the store's reader thread, so that the read() taking it later does
  // not wait for the disk; `done` (may be empty) runs on that thread when it is ready.
  // False when max_prefetched reads are held already (the caller reads when it must).
  bool prefetch(uint64_t id, std::vector<int32_t> prompt, std::function<void()> done);
  // Whether a read prefetch() started for `id` is still running.
  bool prefetching(uint64_t id) const;
  // Lets go of a read ahead nobody will take (its request went away).
  void drop_prefetched(uint64_t id);
  // The stored state with exactly these tokens (a tensor-parallel follower's lookup of
  // what rank 0 found in its own store).
  std::optional<uint64_t> find(std::span<const int32_t> tokens);
  // Deletes a stored state (another rank could not read its own part of it).
  void forget(uint64_t id);
  // Marks a read state as restored (stats).
  void note_restored();
  PromptStoreStats stats() const;
  // Tests: waits until the writer's queue is empty.
  void flush();

 private:
  struct Pending {
    std::vector<int32_t> tokens;
    SequenceSnapshot snapshot;
  };
  struct File {
    std::string path;
    int64_t bytes = 0;
    std::vector<std::string> blocks;  // digests of its blocks, in order (each holds a reference)
  };
  struct Block {
    std::string path;
    int64_t bytes = 0;
    int refs = 0;  // states that need it, and a state being written that will
  };
  struct Prefetch {
    std::vector<int32_t> prompt;
    std::function<void()> done;
    std::optional<Expected<StoredState>> result;  // set when the read ended
    uint64_t ended = 0;                           // the order reads ended in
  };
  explicit PromptStore(PromptStoreOptions options) : options_(std::move(options)) {}
  void scan();
  void note_other_folders() const;
  void writer_loop();
  void reader_loop();
  Expected<StoredState> read_now(uint64_t id, std::span<const int32_t> prompt);
  Status write(const Pending& p);
  std::string block_path(const std::string& digest) const;
  void add_file(std::vector<int32_t> tokens, File file);  // mu_ held; file's blocks referenced already
  void drop_file(uint64_t id, bool delete_it);            // mu_ held
  void release_block(const std::string& digest);          // mu_ held
  void drop_states_needing(const std::string& digest);    // mu_ held
  void make_room(int64_t bytes);                          // mu_ held

  PromptStoreOptions options_;
  std::string folder_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  PromptIndex index_;
  std::map<uint64_t, File> files_;
  std::map<std::string, Block> blocks_;  // by digest
  uint64_t next_id_ = 1;
  std::deque<Pending> queue_;
  std::set<std::string> queued_names_;
  int64_t queued_bytes_ = 0;  // of the queue and the state being written
  bool writing_ = false, stop_ = false;
  PromptStoreStats stats_;
  std::map<uint64_t, Prefetch> prefetches_;  // by state id
  std::deque<uint64_t> to_prefetch_;
  uint64_t prefetches_ended_ = 0;
  std::thread writer_, reader_;
};

// The store's file name for a prompt's tokens (a 64-bit hash of them, in hex).
std::string prompt_state_name(std::span<const int32_t> tokens);

// Where kept states lie (engine_prompt_reuse.cc): multiples of the prefill chunk, the cache
// page and the indexer pool.
int64_t prompt_reuse_grain(const EngineOptions& options, int64_t page_size, int64_t index_kpool);
// Rank `rank` of `world`'s store under options.prompt_store (engine_prompt_store.cc): its
// fingerprint names this binary, the checkpoint's files, the rank, and the settings a
// state's bits depend on (grain: prompt_reuse_grain).
Expected<std::unique_ptr<PromptStore>> open_prompt_store(const EngineOptions& options, int64_t page_size,
                                                         int64_t grain, int rank, int world);

// Copies the part of `seq`'s state that `store` does not hold yet (the rows after its stored
// blocks) to the host and queues it under `tokens`; false when the store wants none of it.
// `who` starts log lines ("rank 1 of 2: ").
bool store_sequence_state(Glm5Model& model, PromptStore& store, const Glm5Sequence& seq,
                          std::span<const int32_t> tokens, const std::string& who);

}  // namespace tf::engine
