// Speculative decoding in the engine loop: copy drafts (spec/copy_drafter.h) or the MTP
// layer's drafts (StepEntry::mtp_drafts, made inside the model step) verified in a decode
// step, sampled as serial decoding would sample them.
//
// A decoding choice whose recent tokens recur proposes what followed them; otherwise the
// MTP layer drafts from the model's last hidden state. Its entry in
// the step is then [pending token, d1 .. dk] (StepEntry::speculative), with every row's
// logits. Row j is sampled exactly as the serial step would (the choice's sampler: its
// penalties count the tokens before, its random draw is keyed by the position), and the
// next row is used only if that sample equals its draft. So the reply is the serial
// reply token for token (the model's rows equal serial decoding's bit for bit within
// EXACT_ROWS), with up to k tokens more per step. The model keeps the rows used
// (Glm5Model::commit_speculation; the followers get the same commit with the next command).
#include <algorithm>
#include <limits>
#include <string>

#include "core/logging.h"
#include "engine/engine_impl.h"

namespace tf::engine {

int64_t Engine::Impl::draft_rows_for(const StepPlan& plan) const {
  if (!options.copy_drafts && !mtp_drafting) return 0;
  int64_t decode_rows = 0;
  for (const Advance& a : plan.advances) {
    if (a.kind == AdvanceKind::kPrefill) return 0;  // a prompt chunk makes the step large already
    ++decode_rows;
  }
  // Within EXACT_ROWS the step keeps every row equal to serial decoding's bits; with
  // EXACT_ROWS 0 (tensor cores at any size) only COPY_MAX bounds each stream.
  if (options.exact_rows == 0) return std::numeric_limits<int64_t>::max();
  return std::max<int64_t>(0, options.exact_rows - decode_rows);
}

int64_t Engine::Impl::draft_limit(const LiveChoice& c, int64_t rows, int64_t max) const {
  if (rows <= 0 || !c.sampler || c.constraint || c.request->req.reasoning_budget >= 0 ||
      !c.request->req.drafts)
    return 0;
  // The last token a verify step may yield must still be within max_tokens (the cache
  // reserved prompt + max_tokens positions).
  const int64_t left = static_cast<int64_t>(c.request->req.sampling.max_tokens) - c.sampler->generated() - 1;
  return std::max<int64_t>(0, std::min<int64_t>({rows, max, left}));
}

std::vector<int32_t> Engine::Impl::drafts_for(LiveChoice& c, int64_t rows, int64_t step_rows) {
  if (!options.copy_drafts || c.history.empty()) return {};
  int64_t k = draft_limit(c, rows, options.copy_max);
  if (k <= 0) return {};
  if (options.drafter) {  // tests and benchmarks: asked every step, the policy not consulted
    std::vector<int32_t> d = options.drafter(c.history, static_cast<int>(k));
    if (static_cast<int64_t>(d.size()) > k) d.resize(static_cast<size_t>(k));
    for (int32_t t : d)
      if (t < 0 || t >= text_vocab) return {};  // not a token: no drafts this step
    return d;
  }
  // Only as many as pay for their rows (spec/draft_policy.h).
  if (!options.always_draft)
    k = spec::best_draft_count(c.acceptance.value(), step_cost.draft_costs(step_rows, static_cast<int>(k)));
  if (k == 0) {
    c.acceptance.idle_step();
    return {};
  }
  if (!c.copy_index) {
    spec::CopyDraftOptions o;
    o.min_match = options.copy_match;
    o.reply_min_match = 2 * options.copy_match;
    c.copy_index = std::make_unique<spec::CopyIndex>(o);
  }
  return c.copy_index->drafts(c.history, static_cast<int64_t>(c.request->req.prompt_tokens.size()), static_cast<int>(k));
}

bool Engine::Impl::mtp_outlook(spec::DraftAcceptance& acceptance) {
  if (options.always_draft) return true;
  int64_t drafted = 0, kept = 0;
  {
    std::lock_guard<std::mutex> lock(health_mu);
    drafted = health.mtp_drafted_tokens_total;
    kept = health.mtp_accepted_tokens_total;
  }
  // Under 1 in 16 kept of 16 or more: a trained layer keeps most (a run of 16 misses from
  // the start is below 1e-8 at its usual 60-90%), while the per-step pass that keeps its
  // cache costs every stream a few percent of each step.
  if (drafted >= 16 && kept * 16 < drafted) {
    if (!mtp_given_up)
      TF_LOG_WARN("MTP drafts: {} of {} kept; new requests draft without the MTP layer (copy drafts go on)", kept,
                  drafted);
    mtp_given_up = true;
    return false;
  }
  // Where a step with one MTP draft costs more than even a 90% draft would gain (the CPU
  // backend: every row costs as much as the step), the layer's passes would only cost.
  const double plain = step_cost.seconds(1), with_one = mtp_step_cost.seconds(2);
  if (plain > 0 && with_one > 0) {
    const double cost[] = {1.0, with_one / plain};
    if (spec::best_draft_count(0.9, cost) == 0) return false;
  }
  if (drafted < 16) return true;  // the policy's prior until enough is known
  acceptance = spec::DraftAcceptance(std::clamp(static_cast<double>(kept) / static_cast<double>(drafted), 0.05, 0.95));
  return true;
}

int Engine::Impl::mtp_drafts_for(LiveChoice& c, int64_t rows, int64_t step_rows) {
  if (!c.mtp) return 0;
  const int64_t k = draft_limit(c, rows, options.mtp_max);
  if (k <= 0 || options.always_draft) return static_cast<int>(k);
  // A step with j MTP drafts against a plain one: measured where seen (the layer's passes
  // included), else a verify row's prior cost and as much again for the pass that drafts it.
  const double plain = step_cost.seconds(step_rows);
  std::vector<double> cost(static_cast<size_t>(k) + 1, 1.0);
  for (int64_t j = 1; j <= k; ++j) {
    const double t = mtp_step_cost.seconds(step_rows + j);
    cost[static_cast<size_t>(j)] =
        plain > 0 && t > 0 ? t / plain : 1.0 + 2.0 * step_cost.prior_row() * static_cast<double>(j);
  }
  const int best = spec::best_draft_count(c.mtp_acceptance.value(), cost);
  if (best > 0) {
    c.mtp_idle_steps = 0;
    return best;
  }
  c.mtp_acceptance.idle_step();
  // A stream that has not drafted for 64 steps stops paying for the layer's cache.
  if (++c.mtp_idle_steps >= 64) c.mtp = false;
  return 0;
}

void Engine::Impl::verify_drafts(LiveChoice& c, StepResult& result) {
  const RequestId id = c.id;
  if (c.drafts_from_mtp) {  // the drafts the model made in the step
    c.verify_tokens.assign(1, c.last_token);
    c.verify_tokens.insert(c.verify_tokens.end(), result.drafts.begin(), result.drafts.end());
  }
  const int64_t rows = static_cast<int64_t>(c.verify_tokens.size());
  Tensor& logits = result.logits;
  if (logits.is_null() || logits.size(0) != rows) {
    fail_choice(id, internal_error("speculative step: the model returned no logits for every verified row"));
    return;
  }
  const int64_t vocab = logits.size(1);
  int64_t used = 0;
  // The counters before any token is taken: take_token may end the choice, and a client that
  // sees its reply finished reads /health with this step counted. A kept draft is counted as
  // the row after it is reached.
  auto count = [&](int64_t drafted, int64_t kept) {
    std::lock_guard<std::mutex> lock(health_mu);
    health.spec_steps_total += drafted > 0 ? 1 : 0;
    health.drafted_tokens_total += drafted;
    health.accepted_tokens_total += kept;
    if (c.drafts_from_mtp) {
      health.mtp_drafted_tokens_total += drafted;
      health.mtp_accepted_tokens_total += kept;
    }
  };
  count(rows - 1, 0);
  for (int64_t j = 0; j < rows; ++j) {
    const std::span<float> row(logits.data<float>() + j * vocab, static_cast<size_t>(vocab));
    mask_padding(row);
    // LOOP_GUARD may have found a loop at the row before (its token taken below): this row
    // closes the reasoning, and the drafts after it, made for the loop, are dropped.
    if (must_close_reasoning(c)) close_reasoning_row(row);
    auto st = c.sampler->step(row, spec_sampler);
    if (!st) {
      fail_choice(id, st.status().with_context("sampling"));
      return;
    }
    ++used;
    if (j > 0) count(0, 1);  // row j is reached: draft j was kept
    const int32_t token = st->sampled.token;
    if (!take_token(c, *st)) return;  // the choice ended: its sequence goes with it
    if (j + 1 == rows || token != c.verify_tokens[static_cast<size_t>(j + 1)]) break;
  }
  const int drafted = static_cast<int>(rows - 1), kept = static_cast<int>(used - 1);
  if (c.drafts_from_mtp) {
    c.mtp_acceptance.observe(drafted, kept);
    c.mtp_drafted += drafted;
    c.mtp_kept += kept;
    // A layer that does not predict this text (or a checkpoint whose layer is untrained)
    // stops costing its passes: after 16 drafts with under 1 in 16 kept, this choice stops
    // keeping the layer's cache.
    if (!options.always_draft && c.mtp_drafted >= 16 && c.mtp_kept * 16 < c.mtp_drafted) c.mtp = false;
  } else {
    c.acceptance.observe(drafted, kept);
  }
  (void)scheduler->add_samples(id, used - 1);
  if (Status s = model->commit_speculation(*c.sequence, used); !s.is_ok()) {
    fail_choice(id, s.with_context("speculative step"));
    return;
  }
  if (tp) tp->sequence_committed(id, used);
}

}  // namespace tf::engine
