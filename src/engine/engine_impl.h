// Engine internals shared by engine.cc (loading, API calls) and
// engine_loop.cc (the engine thread). Not part of the public API.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cache/prompt_index.h"
#include "comm/communicator.h"
#include "core/thread_pool.h"
#include "engine/choice_output.h"
#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "engine/paged_cache_budget.h"
#include "engine/prompt_media.h"
#include "engine/prompt_store.h"
#include "engine/scheduler.h"
#include "engine/step_broadcast.h"
#include "engine/structured_output.h"
#include "kernels/api/ops.h"
#include "model/config.h"
#include "model/glm5/glm5_model.h"
#include "model/glm5/glm5_vision.h"
#include "sampling/repetition_detector.h"
#include "sampling/sampler.h"
#include "sampling/sequence_sampler.h"
#include "spec/copy_drafter.h"
#include "spec/draft_policy.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

namespace tf::engine {

// generation_config.json's sampling defaults (used when a request sets none).
struct SamplingDefaults {
  double temperature = 1.0;
  double top_p = 1.0;
  int top_k = 0;
  double min_p = 0.0;
  double repetition_penalty = 1.0;
};

// One request as submitted; owned by the engine thread once taken from the inbox.
struct LiveRequest {
  GenerationRequest req;
  EventSink sink;
  int open_choices = 0;
  bool failed = false;
  std::shared_ptr<const grammar::Grammar> structured_grammar;  // null: no structured output
  std::shared_ptr<const grammar::TokenVocabulary> grammar_vocab;  // the token bytes it masks over
  std::shared_ptr<grammar::SharedMasks> grammar_masks;            // its choices' masks (shared_masks.h)
  // Images/videos (req.media): their features [placeholders, hidden] f32, encoded on the
  // ops device a bounded number of patches per engine step before the request reaches the
  // scheduler, then held on the host until every choice has prefilled (engine_media.cc).
  Tensor media_features;
  size_t media_item = 0;     // encoding progress: the next item,
  int64_t media_group = 0;   // its next temporal group,
  int64_t media_row = 0;     // and the next feature row
  int media_prefills_left = 0;
  // Prompt reuse: the items before media_first_item (feature rows [0, media_skipped_rows))
  // were not encoded, the prompt being expected to resume past them; should a prefill need
  // them after all (the kept prompt was evicted before admission), encode_skipped_media().
  size_t media_first_item = 0;
  int64_t media_skipped_rows = 0;
  // Prompt reuse: the prompt as kept prompts are matched against it, with each media
  // placeholder replaced by its key (PromptMedia::reuse_keys); empty: the prompt itself.
  std::vector<int32_t> reuse_tokens;
  const std::vector<int32_t>& reuse_prompt() const { return reuse_tokens.empty() ? req.prompt_tokens : reuse_tokens; }
  // PROMPT_STORE: the stored state read ahead while the request waits (wait_for_stored_state).
  uint64_t stored_state = 0;
};

// Why a prompt's state is kept at a point (EngineHealth::kept_mix), in the order of
// precedence when several points coincide.
enum class KeepReason { kPromptEnd, kSystemBlock, kSharedPrefix, kRestored };
struct KeepPoint {
  int64_t tokens = 0;
  KeepReason reason = KeepReason::kPromptEnd;
};

// One choice: a scheduler request with its own sequence, sampler and text pipeline.
struct LiveChoice {
  RequestId id = 0;
  std::shared_ptr<LiveRequest> request;
  int index = 0;
  int64_t prefilled = 0;  // prompt tokens already run
  bool admitted = false;  // holds a scheduler slot (not waiting any more)
  bool in_queue = true;   // still counted in Impl::queued_choices
  int32_t last_token = -1;
  std::unique_ptr<Glm5Sequence> sequence;
  std::unique_ptr<SequenceSampler> sampler;
  std::unique_ptr<ChoiceOutput> output;
  // Structured output: the constraint, and whether it applies yet (it starts after the
  // reasoning, when the choice opened in it).
  std::unique_ptr<grammar::StructuredConstraint> constraint;
  bool constraint_active = false;
  // Prompt reuse: the prompt tokens a kept prompt gave (not run again), and the prefill
  // lengths at which this choice's state is kept (engine_prompt_reuse.cc).
  int64_t cached = 0;
  std::vector<KeepPoint> keep_at;
  // Speculative decoding (engine_speculation.cc): the prompt and reply so far, where copy
  // drafts are searched (empty when they are off), and the span of this step's verify
  // entry (the pending token, then the drafts).
  std::vector<int32_t> history;
  std::vector<int32_t> verify_tokens;
  spec::DraftAcceptance acceptance;  // how often this choice's copy drafts were kept
  std::unique_ptr<spec::CopyIndex> copy_index;  // where history's tokens are (made at the first draft)
  // MTP drafts (DRAFTER=mtp): whether the sequence keeps the MTP layer's cache (each of its
  // steps then runs the layer over the rows whose next token is known), how often its
  // drafts were kept, the drafts made and kept so far, and whether this step's are its.
  bool mtp = false;
  spec::DraftAcceptance mtp_acceptance;
  int64_t mtp_drafted = 0, mtp_kept = 0;
  int64_t mtp_idle_steps = 0;  // decode steps since its last MTP draft
  bool drafts_from_mtp = false;
  // Loops (sampling/repetition_detector.h): the request's repetition_detection over the whole
  // reply, and LOOP_GUARD over its reasoning; once the guard found one, the reasoning is
  // closed at the next token (must_close_reasoning).
  std::optional<RepetitionDetector> reply_loop;
  std::optional<RepetitionDetector> reasoning_loop;
  bool reasoning_loop_found = false;
  // Prompt logprobs (engine_prompt_logprobs.cc): the prompt tokens' entries scored so far.
  std::vector<TokenLogprob> prompt_logprobs;
};

// A kept prompt: a fork of a sequence after its first tokens (kept_index has them), holding
// a reservation of their pages in the budget (evicted when the pool needs them).
struct KeptPrompt {
  std::unique_ptr<Glm5Sequence> sequence;
  CacheHandle handle;
  KeepReason reason = KeepReason::kPromptEnd;
  int64_t source_prompt_tokens = 0;  // the length of the prompt it was kept from (0: unknown)
};

struct Engine::Impl {
  EngineOptions options;
  ModelInfo info;
  Glm5Config config;
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat_template;
  SamplingDefaults defaults;
  std::vector<int32_t> eos_ids;
  std::optional<int32_t> think_start_id;
  std::optional<int32_t> think_end_id;
  // The vocabulary's bytes for structured output's token masks (built at the first such request);
  // tool_grammar_vocab also gives the tool-call markers their text (tool_call_grammar.h).
  std::shared_ptr<const grammar::TokenVocabulary> grammar_vocab;
  std::shared_ptr<const grammar::TokenVocabulary> tool_grammar_vocab;
  std::mutex grammar_vocab_mu;
  int64_t text_vocab = 0;  // ids >= this are padding rows: never sampled

  std::unique_ptr<Ops> ops;
  std::shared_ptr<Communicator> comm;  // options.tp_comm, or a single rank
  // Tensor parallelism: rank 0's step broadcasts to the followers (null: one rank).
  std::unique_ptr<StepBroadcaster> tp;
  bool tp_broken = false;  // engine thread only
  int64_t model_steps = 0;  // engine thread only
  // Seconds of the latest iterations that ran the model (EngineHealth::iteration_s).
  static constexpr size_t kIterationWindow = 64;
  std::deque<double> iteration_seconds;  // engine thread only
  std::unique_ptr<Glm5Model> model;
  // The vision tower (rank 0 only; null for a text-only checkpoint) and what
  // render_chat_media needs to expand placeholders.
  std::unique_ptr<Glm5VisionTower> vision;
  std::string no_vision_reason = "this checkpoint has no vision tower";  // why vision is null
  MediaTokenIds media_ids;
  MediaLimits media_limits;
  MemoryPlan plan;
  std::unique_ptr<PagedCacheBudget> budget;
  // Prompt reuse (engine_prompt_reuse.cc). Kept prompts are forks at multiples of
  // reuse_grain (of the prefill chunk, the page and the indexer pool; 0: reuse off), at
  // most kept_max of them, evicted least recently used first, and by the budget when a
  // request needs their pages.
  struct KeptReclaimer final : PagedCacheBudget::Reclaimer {
    Impl* impl = nullptr;
    int64_t reclaimable_pages() const override;
    bool reclaim_one() override;
  };
  KeptReclaimer kept_reclaimer;
  PromptIndex kept_index;
  std::map<uint64_t, KeptPrompt> kept;
  int64_t kept_pages = 0;
  // PROMPT_STORE: kept states on disk too (null: none). Destroyed before the model (it is
  // declared after it), after the writer has written what was queued.
  std::unique_ptr<PromptStore> store;
  int64_t reuse_grain = 0;
  int kept_max = 0;
  std::unique_ptr<Scheduler> scheduler;
  ThreadPool sample_pool{2};
  std::vector<Sampler> samplers;

  // Inbox (HTTP threads -> engine thread).
  std::mutex mu;
  std::condition_variable wake;
  std::deque<std::shared_ptr<LiveRequest>> inbox;
  std::vector<std::string> cancels;
  bool stopping = false;
  bool read_ahead_done = false;  // the store finished a read ahead (engine_prompt_store.cc)
  // Engine-thread state: requests whose media are being encoded (engine_media.cc); they
  // reach the scheduler once their features are complete.
  std::deque<std::shared_ptr<LiveRequest>> media_pending;
  // Requests that wait while the store reads the state they will resume from (the disk is
  // read on the store's thread, not in the step that admits them).
  std::deque<std::shared_ptr<LiveRequest>> store_pending;
  std::atomic<int64_t> queued_choices{0};  // inbox + scheduler queue, for 429 without the engine thread
  std::atomic<int64_t> step_started_ns{
      0};  // steady clock when the step in flight began; 0: none (step_seconds)

  // Engine-thread state.
  std::map<RequestId, LiveChoice> choices;
  std::multimap<std::string, RequestId> by_request_id;
  RequestId next_id = 1;

  // Health snapshot (written by the engine thread).
  mutable std::mutex health_mu;
  EngineHealth health;

  std::thread thread;

  void run();
  void step_once();
  void note_iteration(double seconds);
  void take_inbox();
  void admit(const std::shared_ptr<LiveRequest>& r);
  void start_choice(LiveChoice& c);
  void finish_choice(RequestId id, FinishReason reason, bool release_in_scheduler);
  void fail_choice(RequestId id, const Status& error);
  // The choice has spent its reasoning budget: its next token is </think>.
  // The next token must be </think>: the reasoning reached thinking_budget, or LOOP_GUARD found
  // it in a loop. Such a row is sampled on the host with every other token masked.
  bool must_close_reasoning(const LiveChoice& c) const;
  // bad_words as token sequences (engine_sampling.cc).
  Expected<std::vector<std::vector<int32_t>>> bad_words_ids(const std::vector<std::string>& words) const;
  // After take_token kept `token`: finishes the choice when its request's repetition_detection
  // found a loop (true: it ended), or marks its reasoning for closing when LOOP_GUARD did.
  bool caught_in_loop(LiveChoice& c, int32_t token);
  void close_reasoning_row(std::span<float> row) const;  // only </think> left to sample
  void drop_choice(RequestId id);
  void leave_queue(LiveChoice& c);
  void publish_health();
  // After a step: the device memory now, and the step's working memory (its peak above
  // `alive_before`, what was alive when it began) into health.
  void note_step_memory(int64_t alive_before);
  // At start (engine_memory_probe.cc): runs the largest step and vision encode once on
  // scratch sequences; an error naming MEMORY_RESERVE_GIB when their working memory does not fit.
  Status probe_working_memory();
  // Patches of the largest single vision encode a request can cause.
  int64_t largest_media_encode_patches() const;
  // Broadcasts the next step's batch (empty: a heartbeat) to the followers. On
  // failure the world is broken: tp_failed() stopped the engine; returns false.
  bool tp_send(std::vector<StepCommandEntry> entries);
  void tp_failed(const Status& error);
  Expected<SamplingParams> sampling_params(const GenerationRequest& r) const;
  // Images and videos (engine_media.cc): one engine step's share of the encoding of the
  // first pending request (admitted when complete; failed on error), a cancel of a
  // pending request, the embedding runs of a prefill chunk [from, from + count) of a
  // prompt, and the release of the features once every choice has prefilled.
  void encode_pending_media();
  Expected<bool> encode_media_step(LiveRequest& r, int64_t patch_budget);
  // Encodes groups [group, group + groups) of item `item` into feature rows from `row`;
  // returns the rows written.
  Expected<int64_t> encode_media_groups(LiveRequest& r, size_t item, int64_t group, int64_t groups, int64_t row);
  // Prompt reuse: starts the encoding past the items wholly before where the prompt will resume.
  void skip_media_before_resume(LiveRequest& r);
  // The items skip_media_before_resume left, when a prefill from `from` needs them.
  Status encode_skipped_media(LiveRequest& r, int64_t from);
  // LiveRequest::reuse_tokens from its media's reuse keys (once).
  void set_reuse_tokens(LiveRequest& r) const;
  bool cancel_pending_media(const std::string& request_id);
  std::vector<StepEntry::EmbedRun> media_runs(const LiveRequest& r, int64_t from, int64_t count) const;
  void media_prefill_done(LiveRequest& r);

  // Prompt reuse (engine_prompt_reuse.cc): set up at load; the scheduler's admission hook
  // (resumes a choice from the longest kept prompt it starts with, and plans where its
  // state is kept); after a step, keeps the state of the choices that reached such a
  // point; evicts one kept prompt. PROMPT_STORE: opens the store (an error when its folder
  // cannot be used); restore_stored makes a stored state a kept prompt (its id, or none).
  Status setup_prompt_reuse();
  std::optional<uint64_t> restore_stored(const PromptIndex::Hit& hit, std::span<const int32_t> prompt);
  void store_prompt_state(const LiveChoice& c, std::span<const int32_t> tokens);
  // A request whose prompt starts with a stored state longer than any kept on the device
  // waits in store_pending while the store reads that state ahead (true); admit_read_ahead
  // admits those whose read ended.
  bool wait_for_stored_state(const std::shared_ptr<LiveRequest>& r);
  void admit_read_ahead();
  bool cancel_pending_store(const std::string& request_id);
  int64_t resume_from_kept(RequestId id);
  // Whether a reply's warm-up (GenerationRequest::warm_from) would keep a new state from
  // `hit`, the longest kept prefix of its prompt (engine_prompt_reuse.cc); it runs only then.
  bool warmup_pays(const LiveRequest& r, const std::optional<PromptIndex::Hit>& hit) const;
  void keep_prompt_states(std::span<LiveChoice* const> prefilled);
  void evict_kept(uint64_t id);
  // Prompt tokens that a kept state may cover: all but the last (which must run for the
  // first logits).
  int64_t reuse_limit(const LiveRequest& r) const;

  // Prompt logprobs (engine_prompt_logprobs.cc): set_prompt_scoring makes c's prefill chunk
  // of `rows` tokens score the prompt tokens its rows predict (on the device, in the model
  // step); score_prompt_rows turns the scores into c's entries and emits the prompt's entries
  // once its last chunk ran.
  void set_prompt_scoring(StepEntry& e, const LiveChoice& c, int64_t rows) const;
  void score_prompt_rows(LiveChoice& c, const StepResult& result, int64_t rows);
  // The choice scores its prompt or its labels and generates nothing (max_tokens 0): it ends
  // at the prompt's end.
  static bool scores_prompt_only(const LiveChoice& c) {
    const GenerationRequest& g = c.request->req;
    return (g.prompt_logprobs >= 0 || !g.label_tokens.empty() || g.embed || g.warm_from >= 0) &&
           g.sampling.max_tokens <= 0;
  }
  // Label scoring (GenerationRequest::label_tokens, engine_label_scores.cc): the raw logprobs
  // of c's labels from the prompt's last row (its logits on the host, or left on the device).
  Status score_labels(LiveChoice& c, StepResult& result);
  // Embedding (GenerationRequest::embed, engine_label_scores.cc): the prompt's last row's
  // final hidden state (its StepResult::hidden, asked for with StepEntry::want_hidden).
  Status emit_embedding(LiveChoice& c, const StepResult& result);

  // Sampling of a step's rows (engine_sampling.cc). A row whose parameters the device
  // sampler supports (device_row) is sampled by Ops::sample_rows on the logits left on
  // the device; every other row, and any row the device leaves undecided, on the host
  // from its downloaded logits. The tokens are the same either way (sample_rows.h).
  // TF_DEVICE_SAMPLING: 0 off, 1 on (also on the CPU backend: tests), unset: on for
  // every backend but the CPU one.
  bool device_sampling_on();
  // A host logits row: the embedding's padding rows (ids >= text_vocab) masked out.
  void mask_padding(std::span<float> row) const;
  std::optional<SampleRowParams> device_row(const LiveChoice& c);
  std::vector<Expected<SequenceStep>> sample_step(std::span<LiveChoice* const> rows,
                                                  std::span<const size_t> sampling_rows,
                                                  std::vector<StepResult>& results,
                                                  std::span<const std::optional<SampleRowParams>> device);
  int device_sampling = -1;  // engine thread only: -1 not decided yet, else 0/1

  // A sampled token's effects on its choice (emitted text, stop conditions, structured
  // output); false when the choice ended (it is gone then).
  bool take_token(LiveChoice& c, const SequenceStep& st);
  // Speculative decoding (engine_speculation.cc). draft_rows_for: how many draft rows the
  // step may add (none beside a prompt chunk; within EXACT_ROWS); drafts_for: the copy
  // drafts of a decoding choice, at most `rows`, as many as pay in a step of `step_rows`
  // rows so far (spec/draft_policy.h); verify_drafts: samples a verify entry's
  // rows as serial decoding would, one after the other while each sample equals the next
  // row's draft, and commits the rows kept.
  int64_t draft_rows_for(const StepPlan& plan) const;
  std::vector<int32_t> drafts_for(LiveChoice& c, int64_t rows, int64_t step_rows);
  // How many tokens the MTP layer drafts for c in this step (0: none), within `rows`.
  int mtp_drafts_for(LiveChoice& c, int64_t rows, int64_t step_rows);
  // For a new choice: false when the layer's drafts have proved worthless on this server (under
  // 1 in 16 of 16 or more kept: an untrained or mismatched layer; logged once) or a step with
  // a draft costs more than a likely draft gains, else sets `acceptance` to start from the
  // share kept so far.
  bool mtp_outlook(spec::DraftAcceptance& acceptance);
  bool mtp_given_up = false;
  // The most drafts c may verify in one step: none under a constraint or a reasoning budget,
  // and the last token a verify step yields must stay within max_tokens.
  int64_t draft_limit(const LiveChoice& c, int64_t rows, int64_t max) const;
  void verify_drafts(LiveChoice& c, StepResult& result);
  Sampler spec_sampler;
  spec::StepCost step_cost;  // a decode step's wall time by its rows (draft_policy.h)
  bool mtp_drafting = false;  // DRAFTER=mtp and the checkpoint has the layer
  spec::StepCost mtp_step_cost;  // the same for steps with MTP drafts (the layer's passes included)
};

}  // namespace tf::engine
