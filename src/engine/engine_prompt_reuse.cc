// Prompt reuse: the states of prompts' leading tokens are kept and later prompts that
// start with the same tokens resume from them instead of running them again.
//
// Where a state is kept: only at multiples of the prefill chunk (reuse_grain: also of the
// cache page and the indexer pool). Prefill chunks always end at those multiples
// (align_prefill_chunks), so a choice resumed from a kept state runs exactly the chunks a
// fresh run would run after that point, on a bit-for-bit copy of the state the fresh run
// had there: its reply is the fresh run's, bit for bit.
// A choice keeps its state at the last multiple before its prompt's end (a repeated prompt,
// or the next turn of a chat, which starts with this prompt), before the end of its chat's
// system block (every chat with the same system prompt and tools starts with it), and
// before the point where it stops agreeing with a kept prompt (a prefix several prompts
// share that no system block marked).
//
// What a kept state holds: a Glm5Model::fork of the sequence (KDA and indexer states
// copied, latent pages shared) and a reservation of its pages in the budget. Kept states
// give way to requests: the budget evicts them (least recently used first) when a
// reservation would not fit otherwise, and at most kept_max are held (their KDA states are
// part of the memory plan). Prompts with images or videos are matched with each placeholder
// standing for a hash of its picture (PromptMedia::reuse_keys). With tensor parallelism every fork and eviction reaches the followers
// with the next step command (StepCommand::forks / drop).
#include <algorithm>
#include <numeric>
#include <utility>

#include "core/logging.h"
#include "engine/engine_impl.h"

namespace tf::engine {

int64_t Engine::Impl::KeptReclaimer::reclaimable_pages() const { return impl->kept_pages; }

bool Engine::Impl::KeptReclaimer::reclaim_one() {
  const std::optional<uint64_t> id = impl->kept_index.least_recent();
  if (!id) return false;
  impl->evict_kept(*id);
  return true;
}

Status Engine::Impl::setup_prompt_reuse() {
  const int64_t page = budget ? plan.page_size : 0;
  if (options.kept_prompts <= 0 || page <= 0) {
    if (!options.prompt_store.empty())
      TF_LOG_WARN("PROMPT_STORE is not used: prompt reuse is off (KEPT_PROMPTS=0)");
    return Status::ok();
  }
  // A kept length ends a prefill chunk (bit-equal resumes), fills its last cache page (a
  // shared page is never written again) and its last indexer pool (no partial pool to carry).
  reuse_grain = prompt_reuse_grain(options, page, config.text.index_kpool);
  kept_max = options.kept_prompts;
  kept_reclaimer.impl = this;
  budget->set_reclaimer(&kept_reclaimer);
  scheduler->set_prefix_hit([this](const RequestSpec& spec) { return resume_from_kept(spec.id); });
  if (options.prompt_store.empty()) return Status::ok();
  // Under tensor parallelism every rank keeps its own shard's states in a store of its own
  // (tp_follower.cc), told what to write and read by the step commands.
  const int world = options.tp_comm ? options.tp_comm->world_size() : 1;
  TF_ASSIGN_OR_RETURN(store, open_prompt_store(options, page, reuse_grain, 0, world));
  const PromptStoreStats st = store->stats();
  TF_LOG_INFO("prompt store: {} ({} states, {:.2f} GiB of {:.2f})", store->folder(), st.files,
              st.bytes / 1073741824.0, options.prompt_store_gib);
  return Status::ok();
}

int64_t Engine::Impl::reuse_limit(const LiveRequest& r) const {
  // Through images and videos too: their placeholders match only the same pixels (reuse_prompt).
  return static_cast<int64_t>(r.req.prompt_tokens.size()) - 1;
}

int64_t Engine::Impl::resume_from_kept(RequestId id) {
  auto it = choices.find(id);
  if (it == choices.end() || reuse_grain == 0) return 0;
  LiveChoice& c = it->second;
  // A scored prompt runs every row, in chunks of its own (not the ones kept states end at).
  if (c.request->req.prompt_logprobs >= 0) return 0;
  const std::vector<int32_t>& prompt = c.request->reuse_prompt();
  const int64_t limit = reuse_limit(*c.request);
  auto round_down = [this](int64_t n) { return n / reuse_grain * reuse_grain; };
  // Where this choice keeps its state: before its prompt's end, and where it stops
  // agreeing with the kept prompts (each beyond what it resumes from).
  const int64_t shared = std::min(kept_index.shared_prefix(prompt), limit);
  const int64_t system = std::min(c.request->req.shared_prefix_tokens, limit);
  c.keep_at = {{round_down(limit), KeepReason::kPromptEnd},
               {round_down(system), KeepReason::kSystemBlock},
               {round_down(shared), KeepReason::kSharedPrefix}};
  int64_t from = 0;
  std::optional<PromptIndex::Hit> hit = kept_index.longest_prefix(prompt, limit);
  if (store) {
    // A longer prefix on disk than on the device: it becomes a kept prompt first.
    const std::optional<PromptIndex::Hit> stored = store->longest_prefix(prompt, limit);
    if (stored && stored->tokens > (hit ? hit->tokens : 0)) {
      if (const std::optional<uint64_t> id = restore_stored(*stored, prompt))
        hit = PromptIndex::Hit{*id, stored->tokens};
    }
    // A state read ahead for this request and not taken (it resumes otherwise) is let go.
    if (c.request->stored_state != 0) store->drop_prefetched(std::exchange(c.request->stored_state, 0));
  }
  bool continued = false;
  if (hit) {
    const KeptPrompt& from_kept = kept.at(hit->id);
    auto forked = model->fork(*from_kept.sequence);
    if (forked) {
      continued = from_kept.reason == KeepReason::kPromptEnd &&
                  static_cast<int64_t>(prompt.size()) > from_kept.source_prompt_tokens;
      c.sequence = std::move(*forked);
      if (tp) tp->sequence_forked(c.id, hit->id);
      from = hit->tokens;
    } else {
      TF_LOG_WARN("prompt reuse: resuming from a kept prompt failed: {}", forked.status().to_string());
    }
  }
  std::erase_if(c.keep_at, [from](const KeepPoint& at) { return at.tokens <= from; });
  c.cached = from;
  c.prefilled = from;
  if (c.request->req.warm_from >= 0) {  // not a request of a client's: counted apart
    std::lock_guard<std::mutex> lock(health_mu);
    ++health.reply_warmups_total;
    health.reply_warmup_tokens_total += static_cast<int64_t>(prompt.size()) - from;
    return from;
  }
  if (from > 0) {
    std::lock_guard<std::mutex> lock(health_mu);
    health.cached_tokens_total += from;
    ++health.prompts_resumed_total;
    if (continued) ++health.chats_continued_total;
  }
  return from;
}

bool Engine::Impl::warmup_pays(const LiveRequest& r, const std::optional<PromptIndex::Hit>& hit) const {
  // Without a state to resume from, the warm-up would run the whole chat again: a state that
  // gave way (or a chat never seen) is left to the next turn, which would run it anyway.
  if (reuse_grain == 0 || r.req.media) return false;
  const int64_t limit = reuse_limit(r);
  auto round_down = [this](int64_t n) { return n / reuse_grain * reuse_grain; };
  // The reply's prompt kept its state at the last point before its end (as any prompt does).
  return hit && hit->tokens >= round_down(std::min(r.req.warm_from - 1, limit)) &&
         round_down(limit) > hit->tokens;
}

void Engine::Impl::keep_prompt_states(std::span<LiveChoice* const> prefilled) {
  for (LiveChoice* c : prefilled) {
    const auto point = std::find_if(c->keep_at.begin(), c->keep_at.end(),
                                    [c](const KeepPoint& at) { return at.tokens == c->prefilled; });
    if (point == c->keep_at.end()) continue;
    const std::vector<int32_t>& prompt = c->request->reuse_prompt();
    const std::span<const int32_t> tokens(prompt.data(), static_cast<size_t>(c->prefilled));
    if (store) store_prompt_state(*c, tokens);
    if (kept_index.find(tokens)) continue;  // kept already (and now the most recently used)
    while (static_cast<int>(kept.size()) >= kept_max) {
      if (!kept_reclaimer.reclaim_one()) break;
    }
    Expected<CacheHandle> handle = budget->reserve(c->prefilled);
    if (!handle) continue;  // the pool is full of live requests: keep nothing
    auto forked = model->fork(*c->sequence);
    if (!forked) {
      budget->release(*handle);
      TF_LOG_WARN("prompt reuse: keeping a prompt's state failed: {}", forked.status().to_string());
      continue;
    }
    const uint64_t id = next_id++;
    if (tp) tp->sequence_forked(id, c->id);
    kept_pages += budget->pages_for(c->prefilled);
    kept.emplace(id,
                 KeptPrompt{std::move(*forked), *handle, point->reason, static_cast<int64_t>(prompt.size())});
    kept_index.add(id, std::vector<int32_t>(tokens.begin(), tokens.end()));
  }
}

int64_t Engine::system_block_tokens(const ChatPrompt& chat, std::span<const int32_t> full) const {
  if (impl_->reuse_grain == 0 || !chat.messages.is_array()) return 0;
  size_t k = 0;
  for (const auto& m : chat.messages) {
    const std::string role = m.is_object() ? m.value("role", "") : "";
    if (role != "system" && role != "developer") break;
    ++k;
  }
  if (k == 0 || k == chat.messages.size()) return 0;
  ChatPrompt block;  // the leading system messages only (the others may hold a whole request body)
  static_cast<ChatOptions&>(block) = chat;
  for (size_t i = 0; i < k; ++i) block.messages.push_back(chat.messages[i]);
  block.add_generation_prompt = false;
  block.continue_final_message = false;
  auto tokens = render_chat(block);  // a template that wants more than a system message: no hint
  if (!tokens) return 0;
  // Where the block alone and the whole prompt agree (a template may end the block differently
  // when nothing follows it).
  const size_t n = std::min(tokens->size(), full.size());
  return std::mismatch(tokens->begin(), tokens->begin() + static_cast<std::ptrdiff_t>(n), full.begin()).first -
         tokens->begin();
}

void Engine::Impl::evict_kept(uint64_t id) {
  auto it = kept.find(id);
  const int64_t pages = budget->pages_for(kept_index.tokens(id));
  kept_index.remove(id);
  if (it == kept.end()) return;
  kept_pages -= pages;
  budget->release(it->second.handle);
  if (tp) tp->sequence_dropped(id);
  kept.erase(it);
}

}  // namespace tf::engine
