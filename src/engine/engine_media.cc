// Images and videos in the engine: rendering a chat with media parts (HTTP threads:
// decoding and preprocessing run there, in parallel across requests), and on the
// engine thread the vision tower's encoding and the features' placement in prefill.
#include <algorithm>
#include <mutex>
#include <optional>

#include "cache/prompt_salt.h"
#include "core/logging.h"
#include "engine/engine_impl.h"

namespace tf::engine {

Expected<RenderedPrompt> Engine::render_chat_media(const ChatPrompt& chat) const {
  auto parts = collect_media_parts(chat.messages);
  if (!parts) return parts.status();
  if (!parts->empty() && !impl_->vision)
    return invalid_argument(parts->front().where + ": " + impl_->no_vision_reason +
                            ": image and video parts are not supported");
  auto tokens = render_chat(chat);
  if (!tokens) return tokens.status();
  const text::Tokenizer& tok = *impl_->tokenizer;
  auto rendered =
      expand_prompt_media(std::move(*tokens), *parts, impl_->media_ids, impl_->media_limits,
                          [&tok](const std::string& s) { return tok.encode(s, /*add_special_tokens=*/false); });
  if (rendered && chat.find_system_block) rendered->system_tokens = system_block_tokens(chat, rendered->tokens);
  return rendered;
}

Expected<int64_t> Engine::Impl::encode_media_groups(LiveRequest& r, size_t item, int64_t group, int64_t groups,
                                                    int64_t row) {
  const media::VisionPatches& p = r.req.media->items[item].patches;
  const int64_t width = vision->patch_width(), merge = vision->config().spatial_merge_size;
  const int64_t per_group = p.grid_h * p.grid_w;
  if (static_cast<int64_t>(p.values.size()) != p.grid_t * per_group * width)
    return internal_error("vision tower: patches of an unexpected width");
  Tensor patches = Tensor::view_of(const_cast<float*>(p.values.data()) + group * per_group * width,
                                   {groups * per_group, width}, DType::kF32);
  const VisionGrid grid{groups, p.grid_h, p.grid_w};
  auto out = vision->encode(patches, {&grid, 1});
  if (!out) return out.status().with_context("vision tower");
  const int64_t rows = groups * per_group / (merge * merge);
  if (out->size(0) != rows || row + rows > r.media_features.size(0))
    return internal_error("vision tower: " + std::to_string(out->size(0)) + " features for a grid of " +
                          std::to_string(rows) + " placeholders");
  Tensor dst = r.media_features.slice(0, row, row + rows);
  ops->copy(dst, *out);
  {
    std::lock_guard<std::mutex> lock(health_mu);
    health.vision_patches_total += groups * per_group;
  }
  return rows;
}

void Engine::Impl::skip_media_before_resume(LiveRequest& r) {
  if (reuse_grain == 0) return;
  const std::optional<PromptIndex::Hit> hit = kept_index.longest_prefix(r.reuse_prompt(), reuse_limit(r));
  if (!hit) return;
  const PromptMedia& m = *r.req.media;
  const int64_t merge = vision->config().spatial_merge_size;
  size_t item = 0;
  int64_t row = 0, patches = 0;
  for (; item < m.items.size(); ++item) {
    const media::VisionPatches& p = m.items[item].patches;
    const int64_t rows = p.grid_t * p.grid_h * p.grid_w / (merge * merge);
    // An item is skipped only when its last placeholder comes before the resume point.
    if (rows <= 0 || m.positions[static_cast<size_t>(row + rows - 1)] >= hit->tokens) break;
    row += rows;
    patches += p.grid_t * p.grid_h * p.grid_w;
  }
  r.media_item = r.media_first_item = item;
  r.media_row = r.media_skipped_rows = row;
  if (patches > 0) {
    std::lock_guard<std::mutex> lock(health_mu);
    health.vision_patches_skipped_total += patches;
  }
}

Status Engine::Impl::encode_skipped_media(LiveRequest& r, int64_t from) {
  if (r.media_skipped_rows == 0) return Status::ok();
  // Needed when a skipped placeholder lies at or after where this prefill starts.
  if (r.req.media->positions[static_cast<size_t>(r.media_skipped_rows - 1)] < from) return Status::ok();
  TF_LOG_INFO("request {}: encoding {} picture(s) that prompt reuse had skipped (it resumes earlier than planned)",
              r.req.request_id, r.media_first_item);
  const int64_t budget = std::max<int64_t>(1, options.media_patches_per_step);
  int64_t row = 0;
  for (size_t item = 0; item < r.media_first_item; ++item) {
    const media::VisionPatches& p = r.req.media->items[item].patches;
    const int64_t per_group = std::max<int64_t>(1, p.grid_h * p.grid_w);
    {
      std::lock_guard<std::mutex> lock(health_mu);
      health.vision_patches_skipped_total -= p.grid_t * p.grid_h * p.grid_w;  // not skipped after all
    }
    for (int64_t group = 0; group < p.grid_t;) {
      const int64_t groups = std::min(std::max<int64_t>(1, budget / per_group), p.grid_t - group);
      TF_ASSIGN_OR_RETURN(const int64_t rows, encode_media_groups(r, item, group, groups, row));
      row += rows;
      group += groups;
    }
  }
  if (row != r.media_skipped_rows)
    return internal_error("vision tower: " + std::to_string(row) + " features for the " +
                          std::to_string(r.media_skipped_rows) + " skipped placeholders");
  r.media_skipped_rows = 0;
  r.media_first_item = 0;
  return Status::ok();
}

Expected<bool> Engine::Impl::encode_media_step(LiveRequest& r, int64_t patch_budget) {
  if (!vision) return invalid_argument(no_vision_reason);
  const PromptMedia& m = *r.req.media;
  if (r.media_features.is_null()) {
    r.media_features = ops->empty({static_cast<int64_t>(m.positions.size()), vision->out_hidden()});
    skip_media_before_resume(r);
  }
  bool first = true;  // at least one call per step, whatever its size
  while (r.media_item < m.items.size()) {
    const media::VisionPatches& p = m.items[r.media_item].patches;
    const int64_t per_group = p.grid_h * p.grid_w;
    const int64_t fit = patch_budget / std::max<int64_t>(1, per_group);
    if (fit == 0 && !first) break;
    const int64_t groups = std::min(std::max<int64_t>(1, fit), p.grid_t - r.media_group);
    TF_ASSIGN_OR_RETURN(const int64_t rows, encode_media_groups(r, r.media_item, r.media_group, groups, r.media_row));
    r.media_row += rows;
    patch_budget -= groups * per_group;
    first = false;
    r.media_group += groups;
    if (r.media_group == p.grid_t) {
      ++r.media_item;
      r.media_group = 0;
    }
  }
  if (r.media_item < m.items.size()) return false;
  if (r.media_row != r.media_features.size(0))
    return internal_error("vision tower: " + std::to_string(r.media_row) + " features for " +
                          std::to_string(r.media_features.size(0)) + " placeholders");
  // The request may now wait for the cache pool (up to MAX_QUEUED of them), and the memory
  // plan counts no device memory for that: its features wait on the host, and each prefill
  // chunk copies up the rows it places (StepEntry::embeds may be on the host).
  if (!r.media_features.device().is_cpu()) r.media_features = ops->to_host(r.media_features);
  // Nor are the patches needed again, but those of the pictures prompt reuse skipped
  // (encode_skipped_media): the request keeps their placements and grids.
  r.req.media = without_patches_from(*r.req.media, r.media_first_item);
  return true;
}

void Engine::Impl::set_reuse_tokens(LiveRequest& r) const {
  const GenerationRequest& g = r.req;
  if (reuse_grain == 0 || !r.reuse_tokens.empty()) return;
  const bool media = g.media && g.media->reuse_keys.size() == g.media->positions.size();
  if (!media && g.cache_salt.empty()) return;
  r.reuse_tokens = g.prompt_tokens;
  if (media) {
    for (size_t k = 0; k < g.media->positions.size(); ++k)
      r.reuse_tokens[static_cast<size_t>(g.media->positions[k])] = g.media->reuse_keys[k];
  }
  salt_prompt_tokens(r.reuse_tokens, g.cache_salt);
}

void Engine::Impl::encode_pending_media() {
  if (media_pending.empty()) return;
  std::shared_ptr<LiveRequest> r = media_pending.front();
  auto done = encode_media_step(*r, std::max<int64_t>(1, options.media_patches_per_step));
  if (done && !*done) return;  // more next step
  media_pending.pop_front();
  if (done) {
    admit(r);
    return;
  }
  queued_choices.fetch_sub(r->req.n);
  GenerationEvent ev;
  ev.kind = GenerationEvent::Kind::kError;
  ev.error = done.status();
  r->sink(std::move(ev));
}

bool Engine::Impl::cancel_pending_media(const std::string& request_id) {
  auto it = std::find_if(media_pending.begin(), media_pending.end(),
                         [&](const auto& r) { return r->req.request_id == request_id; });
  if (it == media_pending.end()) return false;
  queued_choices.fetch_sub((*it)->req.n);
  media_pending.erase(it);
  return true;
}

std::vector<StepEntry::EmbedRun> Engine::Impl::media_runs(const LiveRequest& r, int64_t from, int64_t count) const {
  std::vector<StepEntry::EmbedRun> runs;
  if (!r.req.media) return runs;
  const std::vector<int64_t>& pos = r.req.media->positions;
  auto it = std::lower_bound(pos.begin(), pos.end(), from);
  for (; it != pos.end() && *it < from + count; ++it) {
    const int64_t src = it - pos.begin();
    const int64_t row = *it - from;
    if (!runs.empty() && runs.back().row + runs.back().count == row && runs.back().src + runs.back().count == src) {
      ++runs.back().count;
    } else {
      runs.push_back({row, 1, src});
    }
  }
  return runs;
}

void Engine::Impl::media_prefill_done(LiveRequest& r) {
  if (r.media_prefills_left > 0 && --r.media_prefills_left == 0) r.media_features = Tensor();
}

}  // namespace tf::engine
