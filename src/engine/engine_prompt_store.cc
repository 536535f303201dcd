// Prompt reuse's store on disk (PROMPT_STORE, prompt_store.h): a kept state is also written
// to a file, and a prompt that starts with a stored state longer than any kept on the device
// resumes from it (it becomes a kept prompt first). A stored state must be one this server
// would have computed itself, bit for bit: the fingerprint names the build, the checkpoint
// and the settings that change a state's bits, and a file is read only under its own.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "core/fnv1a.h"
#include "core/logging.h"
#include "core/version.h"
#include "engine/engine_impl.h"

extern char** environ;

namespace tf::engine {

namespace fs = std::filesystem;

namespace {

// The fingerprint's pieces hashed one after another (a file is also checked by its tokens and CRC).
struct Fnv {
  uint64_t h = kFnv1aOffset;
  Fnv& add(std::string_view s) {
    h = fnv1a(std::string_view("\xff"), fnv1a(s, h));  // a separator: ("ab", "c") differs from ("a", "bc")
    return *this;
  }
  Fnv& add(int64_t v) { return add(std::to_string(v)); }
};

// A file's identity without reading it: size and modification time (a rebuilt binary or a
// re-downloaded checkpoint shard counts as another).
void add_file_identity(Fnv& f, const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    f.add(path.string()).add(-1);
    return;
  }
  f.add(path.filename().string())
      .add(static_cast<int64_t>(st.st_size))
      .add(static_cast<int64_t>(st.st_mtim.tv_sec))
      .add(static_cast<int64_t>(st.st_mtim.tv_nsec));
}

}  // namespace

namespace {

std::string prompt_store_fingerprint(const EngineOptions& options, int64_t page_size, int64_t grain,
                                     int world) {
  Fnv f;
  f.add(kVersion);
  std::error_code ec;
  add_file_identity(f, fs::read_symlink("/proc/self/exe", ec));
  // The checkpoint: every file of its folder (config.json, the shards, the tokenizer).
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(options.model_dir, ec))
    if (e.is_regular_file(ec)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) add_file_identity(f, p);
  // The settings a state's bits depend on, and the TF_* knobs that pick kernels.
  f.add(options.device).add(options.kv).add(options.dense).add(options.lm_head);
  f.add(page_size).add(options.prefill_chunk_or_default()).add(options.exact_rows).add(grain);
  f.add(world);
  f.add(options.draft_model);
  // Kernels size themselves from the GPU they run on: its model too.
  if (options.device == "cuda") {
    for (const auto& gpu : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
      std::ifstream info(gpu.path() / "information");
      for (std::string line; std::getline(info, line);)
        if (line.rfind("Model:", 0) == 0) f.add(line);
    }
  }
  std::vector<std::string> knobs;
  for (char** e = environ; e && *e; ++e)
    if (std::string_view(*e).substr(0, 3) == "TF_") knobs.emplace_back(*e);
  std::sort(knobs.begin(), knobs.end());
  for (const std::string& k : knobs) f.add(k);
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(f.h));
  return buf;
}

}  // namespace

int64_t prompt_reuse_grain(const EngineOptions& options, int64_t page_size, int64_t index_kpool) {
  return std::lcm(std::lcm<int64_t>(options.prefill_chunk_or_default(), page_size),
                  std::max<int64_t>(1, index_kpool));
}

Expected<std::unique_ptr<PromptStore>> open_prompt_store(const EngineOptions& options, int64_t page_size,
                                                         int64_t grain, int rank, int world) {
  PromptStoreOptions so;
  so.dir = options.prompt_store;
  so.block_tokens = options.prompt_store_block_tokens > 0 ? options.prompt_store_block_tokens
                                                          : (2048 + grain - 1) / grain * grain;
  if (so.block_tokens % grain != 0)
    return invalid_argument("prompt store: blocks of " + std::to_string(so.block_tokens) +
                            " tokens, not a multiple of the " + std::to_string(grain) +
                            " tokens kept states lie at");
  // The block size is part of the name: another size's blocks are never read.
  // One fingerprint for the world, then the rank: the other ranks' folders are known by name.
  const std::string world_print = prompt_store_fingerprint(options, page_size, grain, world);
  auto folder = [&](int r) {
    return world_print + "-r" + std::to_string(r) + "-b" + std::to_string(so.block_tokens);
  };
  so.fingerprint = folder(rank);
  for (int r = 0; r < world; ++r)
    if (r != rank) so.siblings.push_back(folder(r));
  so.max_bytes = static_cast<int64_t>(options.prompt_store_gib * 1073741824.0);
  // States wait for the writer in host memory: at most half of what MEMORY_RESERVE_GIB leaves
  // free for such work (at least 512 MiB), so a long prompt's state cannot crowd the host.
  so.max_pending_bytes =
      std::max<int64_t>(int64_t{512} << 20, static_cast<int64_t>(options.memory_reserve_gib * 536870912.0));
  return PromptStore::open(so);
}

std::optional<uint64_t> Engine::Impl::restore_stored(const PromptIndex::Hit& hit,
                                                     std::span<const int32_t> prompt) {
  if (hit.tokens % reuse_grain != 0) return std::nullopt;
  Expected<StoredState> state = store->read(hit.id, prompt);
  if (!state) {
    TF_LOG_WARN("prompt store: not resuming from a stored state: {}", state.status().to_string());
    return std::nullopt;
  }
  while (static_cast<int>(kept.size()) >= kept_max) {
    if (!kept_reclaimer.reclaim_one()) break;
  }
  Expected<CacheHandle> handle = budget->reserve(hit.tokens);
  if (!handle) return std::nullopt;  // the pool is full of live requests: prefill instead
  auto seq = model->restore(state->length, state->mtp_length, state->tensors);
  if (!seq) {
    budget->release(*handle);
    TF_LOG_WARN("prompt store: restoring a stored state failed: {}", seq.status().to_string());
    return std::nullopt;
  }
  const uint64_t id = next_id++;
  std::vector<int32_t> tokens(prompt.begin(), prompt.begin() + hit.tokens);
  if (tp) {
    // Every follower reads its own part; the prompt is kept only if all of them could.
    Status sent =
        tp_broken ? unavailable("the tensor-parallel world is broken") : tp->send_restores({{id, tokens}});
    Expected<bool> agreed = sent.is_ok() ? all_ranks_agree(*options.tp_comm, true) : Expected<bool>(sent);
    if (!agreed || !*agreed) {
      budget->release(*handle);
      if (!agreed) {
        // The world is broken: the next step command fails too and stops the engine there
        // (not here, inside the scheduler's admission).
        TF_LOG_WARN("prompt store: {}", agreed.status().to_string());
        return std::nullopt;
      }
      store->forget(hit.id);  // a follower lacks its part: the file is no use
      TF_LOG_WARN(
          "prompt store: not resuming from a stored state: another rank could not read its part of it");
      return std::nullopt;  // the followers dropped theirs
    }
  }
  kept_pages += budget->pages_for(hit.tokens);
  kept.emplace(id, KeptPrompt{std::move(*seq), *handle, KeepReason::kRestored, 0});
  kept_index.add(id, std::move(tokens));
  store->note_restored();
  return id;
}

bool Engine::Impl::wait_for_stored_state(const std::shared_ptr<LiveRequest>& r) {
  if (!store || reuse_grain == 0 || r->req.prompt_logprobs >= 0 || tp_broken) return false;
  const std::vector<int32_t>& prompt = r->reuse_prompt();
  const int64_t limit = reuse_limit(*r);
  const std::optional<PromptIndex::Hit> stored = store->longest_prefix(prompt, limit);
  if (!stored || stored->tokens % reuse_grain != 0) return false;
  const std::optional<PromptIndex::Hit> kept = kept_index.longest_prefix(prompt, limit);
  if (kept && kept->tokens >= stored->tokens) return false;
  auto done = [this] {
    {
      std::lock_guard<std::mutex> lock(mu);
      read_ahead_done = true;
    }
    wake.notify_all();
  };
  if (!store->prefetch(stored->id, prompt, done)) return false;  // reads enough ahead: read it at admission
  r->stored_state = stored->id;
  store_pending.push_back(r);
  // Each follower reads its own part ahead too (its store finds it by the tokens).
  if (tp) {
    tp->prefetch_stored(std::vector<int32_t>(prompt.begin(), prompt.begin() + stored->tokens));
    tp_send({});
  }
  return true;
}

void Engine::Impl::admit_read_ahead() {
  {
    std::lock_guard<std::mutex> lock(mu);
    read_ahead_done = false;
  }
  for (auto it = store_pending.begin(); it != store_pending.end();) {
    if (store->prefetching((*it)->stored_state)) {
      ++it;
      continue;
    }
    const std::shared_ptr<LiveRequest> r = *it;
    it = store_pending.erase(it);
    admit(r);  // its admission takes the read (restore_stored), or drops it should it resume otherwise
  }
}

bool Engine::Impl::cancel_pending_store(const std::string& request_id) {
  auto it = std::find_if(store_pending.begin(), store_pending.end(),
                         [&](const auto& r) { return r->req.request_id == request_id; });
  if (it == store_pending.end()) return false;
  store->drop_prefetched((*it)->stored_state);
  queued_choices.fetch_sub((*it)->req.n);
  store_pending.erase(it);
  return true;
}

bool store_sequence_state(Glm5Model& model, PromptStore& store, const Glm5Sequence& seq,
                          std::span<const int32_t> tokens, const std::string& who) {
  const std::optional<int64_t> from =
      store.wants(tokens, [&](int64_t at) { return model.snapshot_bytes(seq, at); });
  if (!from) return false;
  // The copy to the host happens here, on the caller's thread; the files are written by the store's own.
  Expected<SequenceSnapshot> snap = model.snapshot(seq, *from);
  if (!snap) {
    TF_LOG_WARN("{}prompt store: no snapshot of a prompt's state: {}", who, snap.status().to_string());
    return false;
  }
  store.put(std::vector<int32_t>(tokens.begin(), tokens.end()), std::move(*snap));
  return true;
}

void Engine::Impl::store_prompt_state(const LiveChoice& c, std::span<const int32_t> tokens) {
  if (!store_sequence_state(*model, *store, *c.sequence, tokens, "")) return;
  // Each follower writes its own part of the same state before its next step.
  if (tp) tp->sequence_stored(c.id, std::vector<int32_t>(tokens.begin(), tokens.end()));
}

}  // namespace tf::engine
