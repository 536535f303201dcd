// The engine thread: one step at a time (see engine.h for the data flow).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "core/logging.h"
#include "engine/engine_impl.h"
#include "sampling/counter_hash.h"

namespace tf::engine {
namespace {

// Tensor parallelism: while idle, rank 0 sends a heartbeat this often, so the
// followers' wait in the command broadcast stays far below the op timeout.
constexpr std::chrono::milliseconds kTpHeartbeat{1000};

void emit(LiveRequest& r, GenerationEvent ev) {
  if (r.failed) return;
  r.sink(std::move(ev));
}

bool has_payload(const GenerationEvent& ev) {
  return !ev.reasoning.empty() || !ev.content.empty() || !ev.tool_calls.empty() || !ev.logprobs.empty() ||
         !ev.prompt_logprobs.empty() || !ev.token_ids.empty();
}

std::string call_id_prefix(const std::string& request_id, int choice) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "call_%016llx_",
                static_cast<unsigned long long>(std::hash<std::string>{}(request_id) ^ (uint64_t(choice) << 48)));
  return buf;
}

}  // namespace

void Engine::Impl::run() {
  for (;;) {
    bool heartbeat = false;
    {
      std::unique_lock<std::mutex> lock(mu);
      auto ready = [&] {
        return stopping || !inbox.empty() || !cancels.empty() || !media_pending.empty() || read_ahead_done ||
               scheduler->has_work();
      };
      if (tp) {
        heartbeat = !wake.wait_for(lock, kTpHeartbeat, ready);
      } else {
        wake.wait(lock, ready);
      }
      if (stopping) break;
    }
    if (heartbeat) {
      tp_send({});
      continue;
    }
    const int64_t alive_before = ops->memory_use().in_use_bytes;
    ops->reset_memory_peak();
    step_started_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
    try {
      const int64_t steps_before = model_steps;
      const auto began = std::chrono::steady_clock::now();
      step_once();
      step_started_ns = 0;
      if (model_steps != steps_before)
        note_iteration(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
      note_step_memory(alive_before);
    } catch (const std::exception& e) {
      step_started_ns = 0;
      // Nothing may take the engine down: fail what was in flight and go on.
      TF_LOG_ERROR("engine step failed: {}", e.what());
      std::vector<RequestId> ids;
      for (const auto& [id, c] : choices) ids.push_back(id);
      for (RequestId id : ids) fail_choice(id, internal_error(std::string("engine step failed: ") + e.what()));
    }
  }
  if (tp && !tp_broken) {
    // The followers return from run_follower; a failure here means they are gone already.
    if (Status s = tp->send_stop(); !s.is_ok()) TF_LOG_WARN("stop command to the follower ranks: {}", s.to_string());
  }
  std::vector<RequestId> ids;
  for (const auto& [id, c] : choices) ids.push_back(id);
  for (RequestId id : ids) fail_choice(id, unavailable("the server is stopping"));
  // Requests not admitted yet (media being encoded, or still in the inbox) get an error too.
  auto refuse_all = [](std::deque<std::shared_ptr<LiveRequest>>& requests) {
    for (auto& r : requests) {
      GenerationEvent ev;
      ev.kind = GenerationEvent::Kind::kError;
      ev.error = unavailable("the server is stopping");
      r->sink(std::move(ev));
    }
    requests.clear();
  };
  refuse_all(media_pending);
  for (const auto& r : store_pending) store->drop_prefetched(r->stored_state);
  refuse_all(store_pending);
  std::lock_guard<std::mutex> lock(mu);
  refuse_all(inbox);
}

void Engine::Impl::take_inbox() {
  std::deque<std::shared_ptr<LiveRequest>> fresh;
  std::vector<std::string> cancel_ids;
  {
    std::lock_guard<std::mutex> lock(mu);
    fresh.swap(inbox);
    cancel_ids.swap(cancels);
  }
  // A request with images or videos is encoded first (encode_pending_media), then admitted.
  for (auto& r : fresh) {
    set_reuse_tokens(*r);  // what the prompt store's read ahead looks up too
    if (r->req.media) {
      media_pending.push_back(r);
    } else if (!wait_for_stored_state(r)) {
      admit(r);
    }
  }
  for (const std::string& rid : cancel_ids) {
    if (cancel_pending_media(rid) || cancel_pending_store(rid)) continue;
    auto [lo, hi] = by_request_id.equal_range(rid);
    for (auto it = lo; it != hi; ++it) scheduler->cancel(it->second);
  }
}

void Engine::Impl::admit(const std::shared_ptr<LiveRequest>& r) {
  const GenerationRequest& g = r->req;
  auto params = sampling_params(g);
  if (!params) {  // validated in submit(); kept for safety
    queued_choices.fetch_sub(g.n);
    GenerationEvent ev;
    ev.kind = GenerationEvent::Kind::kError;
    ev.error = params.status();
    r->sink(std::move(ev));
    return;
  }
  const bool warmup = g.warm_from >= 0;
  if (!warmup) {
    std::lock_guard<std::mutex> lock(health_mu);
    ++health.requests_total;
    health.prompt_tokens_total += static_cast<int64_t>(g.prompt_tokens.size()) * g.n;
  }
  const bool starts_in_reasoning =
      g.parse_reasoning && think_start_id && !g.prompt_tokens.empty() && g.prompt_tokens.back() == *think_start_id;
  r->open_choices = g.n;
  r->media_prefills_left = g.media ? g.n : 0;
  // The kept prompt this request will resume from counts as used now, so that reservations
  // made before its admission evict others first.
  set_reuse_tokens(*r);
  std::optional<PromptIndex::Hit> kept_hit;
  if (reuse_grain > 0 && g.prompt_logprobs < 0)
    kept_hit = kept_index.longest_prefix(r->reuse_prompt(), reuse_limit(*r));
  // Nothing to run: completions with echo and max_tokens 0, unless the prompt is scored (it then
  // runs, and ends at its last row: scores_prompt_only); a reply's warm-up that keeps nothing new.
  const bool nothing_to_run =
      warmup ? !warmup_pays(*r, kept_hit)
             : g.sampling.max_tokens <= 0 && g.prompt_logprobs < 0 && g.label_tokens.empty() && !g.embed;
  for (int i = 0; i < g.n; ++i) {
    const RequestId id = next_id++;
    LiveChoice c;
    c.id = id;
    c.request = r;
    c.index = i;
    c.sampler = std::make_unique<SequenceSampler>(*params, g.prompt_tokens, eos_ids, static_cast<uint32_t>(i));
    if (options.copy_drafts) c.history = g.prompt_tokens;
    // The MTP layer drafts where drafts may be verified at all (draft_limit), starting from
    // what the layer's drafts have been worth so far (mtp_outlook).
    c.mtp = mtp_drafting && g.drafts && !r->structured_grammar && g.reasoning_budget < 0 &&
            mtp_outlook(c.mtp_acceptance);
    if (c.mtp) {
      std::lock_guard<std::mutex> lock(health_mu);
      ++health.mtp_streams_total;
    }
    ChoiceOutputOptions oo;
    oo.skip_special_tokens = g.sampling.skip_special_tokens;
    oo.stop = g.sampling.stop;
    oo.include_stop_str_in_output = g.sampling.include_stop_str_in_output;
    oo.parse_reasoning = g.parse_reasoning;
    oo.starts_in_reasoning = starts_in_reasoning;
    oo.tools = g.tools;
    oo.call_id_prefix = call_id_prefix(g.request_id, i);
    oo.logprobs = params->logprobs;
    oo.token_ids = g.return_token_ids;
    c.output = std::make_unique<ChoiceOutput>(*tokenizer, std::move(oo), i);
    if (g.sampling.repetition_detection.enabled()) c.reply_loop.emplace(g.sampling.repetition_detection);
    if (options.loop_guard > 0 && g.parse_reasoning && think_end_id)
      c.reasoning_loop.emplace(RepetitionRule{1, EngineOptions::kLoopGuardMaxPattern,
                                              EngineOptions::kLoopGuardCopies, options.loop_guard});
    if (r->structured_grammar) {
      c.constraint = std::make_unique<grammar::StructuredConstraint>(
          r->structured_grammar, r->grammar_vocab, eos_ids, grammar::kMaxMaskWork, r->grammar_masks);
      // The constraint is on the answer: a choice that opens in its reasoning starts it at </think>.
      c.constraint_active = !starts_in_reasoning;
    }
    choices.emplace(id, std::move(c));
    by_request_id.emplace(g.request_id, id);
    if (nothing_to_run) {
      finish_choice(id, FinishReason::kLength, false);
      continue;
    }
    RequestSpec spec{id, static_cast<int64_t>(g.prompt_tokens.size()),
                     static_cast<int64_t>(params->max_tokens), 0};
    spec.priority = g.priority;
    const SubmitResult sr = scheduler->submit(spec);
    if (sr != SubmitResult::kQueued) {
      fail_choice(id, resource_exhausted(std::string("the request cannot be scheduled: ") + submit_result_name(sr)));
    }
  }
}

void Engine::Impl::leave_queue(LiveChoice& c) {
  if (!c.in_queue) return;
  c.in_queue = false;
  queued_choices.fetch_sub(1);
}

void Engine::Impl::start_choice(LiveChoice& c) {
  leave_queue(c);
  c.admitted = true;
  if (c.sequence) return;  // resumed from a kept prompt (resume_from_kept)
  c.sequence = model->new_sequence();
  if (tp) tp->sequence_created(c.id);
}

void Engine::Impl::finish_choice(RequestId id, FinishReason reason, bool release_in_scheduler) {
  auto it = choices.find(id);
  if (it == choices.end()) return;
  LiveChoice& c = it->second;
  const std::shared_ptr<LiveRequest> keep = c.request;  // outlives drop_choice below
  LiveRequest& r = *keep;
  GenerationEvent tail = c.output->finish();
  if (has_payload(tail)) emit(r, std::move(tail));
  GenerationEvent fin;
  fin.kind = GenerationEvent::Kind::kFinish;
  fin.choice = c.index;
  // A named tool_choice ends with "stop", as OpenAI's API does (api.md §6).
  fin.finish_reason = reason == FinishReason::kStop && c.output->made_tool_calls() && !r.req.named_tool_choice
                          ? FinishReason::kToolCalls
                          : reason;
  fin.completion_tokens = c.sampler->generated();
  fin.cached_prompt_tokens = c.cached;
  fin.reasoning_tokens = std::min<int64_t>(c.output->reasoning_tokens(), fin.completion_tokens);
  if (fin.finish_reason == FinishReason::kStop) fin.stop_string = c.output->matched_stop();
  fin.token_sha256 = c.output->token_sha256();
  {
    std::lock_guard<std::mutex> lock(health_mu);
    health.completion_tokens_total += fin.completion_tokens;
  }
  // Release first and publish /health, so that a client that sees the reply finished also sees
  // its stream and cache freed.
  if (release_in_scheduler) scheduler->finish(id);
  drop_choice(id);
  publish_health();
  emit(r, std::move(fin));
}

void Engine::Impl::fail_choice(RequestId id, const Status& error) {
  auto it = choices.find(id);
  if (it == choices.end()) return;
  const std::shared_ptr<LiveRequest> keep = it->second.request;  // outlives drop_choice below
  LiveRequest& r = *keep;
  const bool first_error = !r.failed;
  if (first_error) {
    r.failed = true;
    // The error ends every choice of the request: the others leave at the next step.
    auto [lo, hi] = by_request_id.equal_range(r.req.request_id);
    for (auto o = lo; o != hi; ++o) {
      if (o->second != id) scheduler->cancel(o->second);
    }
  }
  if (it->second.admitted) {
    scheduler->finish(id);
  } else {
    scheduler->cancel(id);
  }
  drop_choice(id);
  if (first_error) {
    publish_health();
    GenerationEvent ev;
    ev.kind = GenerationEvent::Kind::kError;
    ev.error = error;
    r.sink(std::move(ev));
  }
}

void Engine::Impl::drop_choice(RequestId id) {
  auto it = choices.find(id);
  if (it == choices.end()) return;
  LiveRequest& r = *it->second.request;
  leave_queue(it->second);
  if (tp && it->second.sequence) tp->sequence_dropped(id);
  auto [lo, hi] = by_request_id.equal_range(r.req.request_id);
  for (auto o = lo; o != hi; ++o) {
    if (o->second == id) {
      by_request_id.erase(o);
      break;
    }
  }
  --r.open_choices;
  choices.erase(it);
}

void Engine::Impl::step_once() {
  take_inbox();
  admit_read_ahead();
  encode_pending_media();
  StepPlan plan = scheduler->schedule();
  for (RequestId id : plan.cancelled) drop_choice(id);
  for (RequestId id : plan.admitted) {
    auto it = choices.find(id);
    if (it != choices.end()) start_choice(it->second);
  }
  for (RequestId id : plan.finished_by_length) finish_choice(id, FinishReason::kLength, false);
  if (plan.idle()) {
    publish_health();
    return;
  }

  std::vector<StepEntry> batch;
  std::vector<LiveChoice*> rows;
  std::vector<std::optional<SampleRowParams>> device_params;
  std::vector<std::vector<StepEntry::EmbedRun>> embed_runs(plan.advances.size());
  batch.reserve(plan.advances.size());
  int64_t draft_rows = draft_rows_for(plan), drafted_rows = 0;
  for (const Advance& a : plan.advances) {
    LiveChoice& c = choices.at(a.id);
    StepEntry e;
    e.sequence = c.sequence.get();
    e.mtp = c.mtp;
    c.drafts_from_mtp = false;
    if (a.kind == AdvanceKind::kPrefill) {
      e.tokens = std::span<const int32_t>(c.request->req.prompt_tokens).subspan(static_cast<size_t>(c.prefilled),
                                                                                 static_cast<size_t>(a.tokens));
      std::vector<StepEntry::EmbedRun>& runs = embed_runs[batch.size()];
      // Pictures prompt reuse skipped, needed after all. A failure is the vision tower's (the
      // device's, as these pictures decoded and sized fine): the step's handler fails what is in flight.
      if (Status s = encode_skipped_media(*c.request, c.prefilled); !s.is_ok()) throw std::runtime_error(s.to_string());
      runs = media_runs(*c.request, c.prefilled, a.tokens);
      if (!runs.empty()) {
        e.embed_runs = runs;
        e.embeds = &c.request->media_features;
      }
      if (c.request->req.prompt_logprobs >= 0) set_prompt_scoring(e, c, a.tokens);  // every row is scored
    } else if (std::vector<int32_t> drafts =
                   drafts_for(c, draft_rows, static_cast<int64_t>(plan.advances.size()) + drafted_rows);
               !drafts.empty()) {
      // A verify step: the pending token and the drafts, every row's logits to the host.
      draft_rows -= static_cast<int64_t>(drafts.size());
      drafted_rows += static_cast<int64_t>(drafts.size());
      c.verify_tokens.assign(1, c.last_token);
      c.verify_tokens.insert(c.verify_tokens.end(), drafts.begin(), drafts.end());
      e.tokens = c.verify_tokens;
      e.all_logits = true;
      e.speculative = true;
    } else if (const int k = mtp_drafts_for(c, draft_rows, static_cast<int64_t>(plan.advances.size()) + drafted_rows);
               k > 0) {
      // A verify step whose drafts the MTP layer makes inside the model step (verify_drafts
      // then reads them from its result).
      draft_rows -= k;
      drafted_rows += k;
      e.tokens = std::span<const int32_t>(&c.last_token, 1);
      e.mtp_drafts = k;
      e.all_logits = true;
      e.speculative = true;
      c.drafts_from_mtp = true;
    } else {
      e.tokens = std::span<const int32_t>(&c.last_token, 1);
    }
    rows.push_back(&c);
    // A row sampled on the device (or not sampled at all) needs no host copy of its logits.
    // A verify step's rows are sampled on the host one after the other (verify_drafts; the
    // device sampler called per verify step measured slower on the H200).
    const bool samples = a.samples && !scores_prompt_only(c);
    device_params.push_back(samples && !e.speculative ? device_row(c) : std::nullopt);
    if (device_params.back() || (!samples && device_sampling_on())) e.host_logits = false;
    // Scored on the device (StepEntry::scored_tokens); sampling downloads the last row if it must.
    if (e.all_logits && a.kind == AdvanceKind::kPrefill) e.host_logits = false;
    // Label scoring reads the prompt's last row on the host (score_labels downloads it when
    // the row was left on the device).
    if (a.samples && !c.request->req.label_tokens.empty() && !e.all_logits) e.host_logits = true;
    // An embedding is the prompt's last row's final hidden state.
    if (a.samples && c.request->req.embed) e.want_hidden = true;
    batch.push_back(e);
  }
  publish_health();
  if (tp) {
    std::vector<StepCommandEntry> entries;
    entries.reserve(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      StepCommandEntry ce{rows[i]->id, std::vector<int32_t>(batch[i].tokens.begin(), batch[i].tokens.end()),
                          batch[i].all_logits};
      ce.speculative = batch[i].speculative;
      ce.mtp = batch[i].mtp;
      ce.mtp_drafts = batch[i].mtp_drafts;
      // The followers get this chunk's image/video features (they hold no vision tower).
      if (!batch[i].embed_runs.empty()) {
        const Tensor& f = *batch[i].embeds;
        ce.embed_width = f.size(1);
        int64_t next = 0;
        for (const StepEntry::EmbedRun& r : batch[i].embed_runs) {
          const Tensor part = f.slice(0, r.src, r.src + r.count);
          const std::vector<float> v = (part.device().is_cpu() ? part : ops->to_host(part)).to_vector();
          ce.embeds.insert(ce.embeds.end(), v.begin(), v.end());
          ce.embed_runs.push_back({r.row, r.count, next});
          next += r.count;
        }
      }
      entries.push_back(std::move(ce));
    }
    if (!tp_send(std::move(entries))) return;  // the choices were failed; rows dangle
  }
  // Structured output: the masks of this step's constrained rows are computed while the
  // model runs (they depend only on the tokens so far); sampling then finds them cached.
  // Joined before anything below may drop a choice.
  std::vector<grammar::StructuredConstraint*> masks_to_prepare;
  for (size_t i = 0; i < rows.size(); ++i)
    if (plan.advances[i].samples && rows[i]->constraint_active) masks_to_prepare.push_back(rows[i]->constraint.get());
  std::future<void> masks;
  if (!masks_to_prepare.empty())
    masks = std::async(std::launch::async, [&masks_to_prepare] {
      for (grammar::StructuredConstraint* c : masks_to_prepare) c->prepare();
    });
  const auto step_start = std::chrono::steady_clock::now();
  auto results = model->step(batch);
  if (masks.valid()) masks.wait();
  ++model_steps;
  if (!results) {
    if (tp && results.status().code() == StatusCode::kUnavailable) {
      tp_failed(results.status().with_context("model step"));  // a collective failed: the world is broken
      return;
    }
    for (LiveChoice* c : rows) fail_choice(c->id, results.status().with_context("model step"));
    return;
  }

  // Sample the rows that yield a token, in parallel (each row is independent).
  std::vector<size_t> sampling_rows;
  std::vector<LiveChoice*> prefilled;
  std::vector<RequestId> scored_only;  // prompts scored to their end that generate nothing
  std::vector<std::pair<RequestId, Status>> label_failures;  // failed after the loop (rows[] stays valid)
  for (size_t i = 0; i < plan.advances.size(); ++i) {
    const Advance& a = plan.advances[i];
    if (a.kind == AdvanceKind::kPrefill) {
      if (batch[i].all_logits) {
        // Before sampling: the prompt's entries come before the first token's.
        score_prompt_rows(*rows[i], (*results)[i], a.tokens);
      }
      if (a.samples && scores_prompt_only(*rows[i])) {
        Status s;
        if (!rows[i]->request->req.label_tokens.empty()) s = score_labels(*rows[i], (*results)[i]);
        if (s.is_ok() && rows[i]->request->req.embed) s = emit_embedding(*rows[i], (*results)[i]);
        if (s.is_ok())
          scored_only.push_back(rows[i]->id);
        else
          label_failures.emplace_back(rows[i]->id, std::move(s));
      }
      rows[i]->prefilled += a.tokens;
      prefilled.push_back(rows[i]);
      LiveRequest& r = *rows[i]->request;
      if (r.req.media && rows[i]->prefilled >= static_cast<int64_t>(r.req.prompt_tokens.size())) media_prefill_done(r);
    }
    if (a.samples && !batch[i].speculative && !scores_prompt_only(*rows[i])) sampling_rows.push_back(i);
  }
  if (reuse_grain > 0) keep_prompt_states(prefilled);
  std::vector<Expected<SequenceStep>> steps = sample_step(rows, sampling_rows, *results, device_params);

  for (size_t k = 0; k < sampling_rows.size(); ++k) {
    LiveChoice& c = *rows[sampling_rows[k]];
    if (!steps[k]) {
      fail_choice(c.id, steps[k].status().with_context("sampling"));
      continue;
    }
    (void)take_token(c, *steps[k]);
  }
  for (RequestId id : scored_only) finish_choice(id, FinishReason::kLength, true);
  for (const auto& [id, s] : label_failures) fail_choice(id, s);
  // Verify steps: their rows sampled one after the other while the drafts hold.
  int64_t step_rows = 0;
  bool decode_only = true, mtp_drafted = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    step_rows += static_cast<int64_t>(batch[i].tokens.size() + (*results)[i].drafts.size());
    decode_only = decode_only && plan.advances[i].kind == AdvanceKind::kDecode;
    mtp_drafted = mtp_drafted || batch[i].mtp_drafts > 0;
    if (batch[i].speculative) verify_drafts(*rows[i], (*results)[i]);
  }
  // The draft policy's cost of a row: decode and verify steps (no prompt chunk), from the
  // step's start to its tokens (the device's work included: sampling waits for it); steps
  // with MTP drafts apart (the layer's passes are part of their cost).
  if ((options.copy_drafts || mtp_drafting) && decode_only) {
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    (mtp_drafted ? mtp_step_cost : step_cost).observe(step_rows, secs);
  }
  publish_health();
}

bool Engine::Impl::take_token(LiveChoice& c, const SequenceStep& st) {
  const RequestId id = c.id;
  const int32_t token = st.sampled.token;
  c.last_token = token;
  if (!c.history.empty()) c.history.push_back(token);
  LiveRequest& r = *c.request;
  const bool stop_token = st.finish == tf::FinishReason::kStop;
  if (c.constraint) {
    if (c.constraint_active) {
      if (Status s = c.constraint->accept(token); !s.is_ok()) {
        fail_choice(id, s);
        return false;
      }
    } else if (think_end_id && token == *think_end_id) {
      c.constraint_active = true;
    }
  }
  if (stop_token) {
    GenerationEvent ev = c.output->add_stop_token(token, st.sampled);
    if (has_payload(ev)) emit(r, std::move(ev));
    finish_choice(id, FinishReason::kStop, true);
    return false;
  }
  bool stopped = false;
  GenerationEvent ev = c.output->add(token, st.sampled, stopped);
  if (has_payload(ev)) emit(r, std::move(ev));
  // A structured answer that is complete and cannot go on ends here, end token or not
  // (ignore_eos, min_tokens and a banned end token cannot stretch it).
  if (stopped || (c.constraint_active && c.constraint->finished())) {
    finish_choice(id, FinishReason::kStop, true);
    return false;
  }
  if (st.finish == tf::FinishReason::kLength) {
    finish_choice(id, FinishReason::kLength, true);
    return false;
  }
  return !caught_in_loop(c, token);
}

bool Engine::Impl::caught_in_loop(LiveChoice& c, int32_t token) {
  if (c.reply_loop) {
    if (const auto loop = c.reply_loop->push(token)) {
      TF_LOG_INFO(
          "request {} choice {}: the reply ends in {} tokens repeating a {}-token block; finished "
          "(repetition_detection)",
          c.request->req.request_id, c.index, loop->tokens, loop->pattern);
      {
        std::lock_guard<std::mutex> lock(health_mu);
        ++health.repetition_stops_total;
      }
      finish_choice(c.id, FinishReason::kRepetition, true);
      return true;
    }
  }
  // The guard counts reasoning tokens only: </think> (the token that left it) is not one.
  if (c.reasoning_loop && !c.reasoning_loop_found && c.output->in_reasoning()) {
    if (const auto loop = c.reasoning_loop->push(token)) {
      c.reasoning_loop_found = true;
      TF_LOG_INFO(
          "request {} choice {}: the reasoning ends in {} tokens repeating a {}-token block; closing it "
          "(LOOP_GUARD {})",
          c.request->req.request_id, c.index, loop->tokens, loop->pattern, options.loop_guard);
      std::lock_guard<std::mutex> lock(health_mu);
      ++health.loop_guard_closed_total;
    }
  }
  return false;
}

bool Engine::Impl::tp_send(std::vector<StepCommandEntry> entries) {
  if (tp_broken) return false;
  Status s = tp->send_step(std::move(entries));
  if (s.is_ok()) return true;
  tp_failed(s);
  return false;
}

void Engine::Impl::tp_failed(const Status& error) {
  tp_broken = true;
  const Status why = unavailable("tensor-parallel rank lost: " + error.message());
  TF_LOG_ERROR("{}; stopping the engine", why.to_string());
  {
    std::lock_guard<std::mutex> lock(mu);
    stopping = true;  // submit() refuses from now on; run() leaves its loop
  }
  std::vector<RequestId> ids;
  for (const auto& [id, c] : choices) ids.push_back(id);
  for (RequestId id : ids) fail_choice(id, why);
  {
    std::lock_guard<std::mutex> lock(health_mu);
    health.ok = false;
  }
  if (options.on_tp_failure) options.on_tp_failure(why);
}

void Engine::Impl::note_iteration(double seconds) {
  iteration_seconds.push_back(seconds);
  if (iteration_seconds.size() > kIterationWindow) iteration_seconds.pop_front();
  const double sum = std::accumulate(iteration_seconds.begin(), iteration_seconds.end(), 0.0);
  std::lock_guard<std::mutex> lock(health_mu);
  health.iteration_s = seconds;
  health.iteration_s_mean = sum / static_cast<double>(iteration_seconds.size());
}

void Engine::Impl::note_step_memory(int64_t alive_before) {
  const MemoryUse now = ops->memory_use();
  std::lock_guard<std::mutex> lock(health_mu);
  health.device_memory_in_use_bytes = now.in_use_bytes;
  health.device_memory_held_bytes = now.held_bytes;
  health.step_memory_peak_bytes =
      std::max(health.step_memory_peak_bytes, now.peak_in_use_bytes - alive_before);
}

void Engine::Impl::publish_health() {
  const SchedulerStats s = scheduler->stats();
  int64_t inbox_size = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    inbox_size = static_cast<int64_t>(inbox.size());
  }
  std::lock_guard<std::mutex> lock(health_mu);
  health.ok = !tp_broken;
  health.requests_running = s.running;
  health.requests_waiting = s.waiting + inbox_size + static_cast<int64_t>(store_pending.size());
  health.busy = s.running > 0 || health.requests_waiting > 0;
  health.streams_decoding = s.decoding;
  health.streams_prefilling = s.prefilling;
  health.streams_max = options.parallel;
  health.context_length = plan.context;
  health.pool_tokens = budget->capacity_tokens();
  health.pool_free_tokens = budget->free_tokens();
  health.kept_prompts = static_cast<int64_t>(kept.size());
  health.kept_prompt_tokens = kept_index.total_tokens();
  health.kept_mix = {};
  for (const auto& [id, k] : kept) {
    switch (k.reason) {
      case KeepReason::kPromptEnd:
        ++health.kept_mix.prompt_end;
        break;
      case KeepReason::kSystemBlock:
        ++health.kept_mix.system_block;
        break;
      case KeepReason::kSharedPrefix:
        ++health.kept_mix.shared_prefix;
        break;
      case KeepReason::kRestored:
        ++health.kept_mix.restored;
        break;
    }
  }
  health.model_steps = model_steps;
  health.tp_world = comm->world_size();
  const CommStats cs = comm->stats();
  health.tp_all_reduce_calls = cs.all_reduce_calls;
  health.tp_all_reduce_seconds = cs.all_reduce_seconds;
}

}  // namespace tf::engine
