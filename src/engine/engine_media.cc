// Images and videos in the engine: rendering a chat with media parts (HTTP threads:
// decoding and preprocessing run there, in parallel across requests), and on the
// engine thread the vision tower's encoding and the features' placement in prefill.
#include <algorithm>

#include "engine/engine_impl.h"

namespace tf::engine {

Expected<RenderedPrompt> Engine::render_chat_media(const ChatPrompt& chat) const {
  auto parts = collect_media_parts(chat.messages);
  if (!parts) return parts.status();
  if (!parts->empty() && !impl_->vision)
    return invalid_argument(impl_->no_vision_reason + ": image and video parts are not supported");
  auto tokens = render_chat(chat);
  if (!tokens) return tokens.status();
  const text::Tokenizer& tok = *impl_->tokenizer;
  auto rendered =
      expand_prompt_media(std::move(*tokens), *parts, impl_->media_ids, impl_->media_limits,
                          [&tok](const std::string& s) { return tok.encode(s, /*add_special_tokens=*/false); });
  if (rendered && chat.find_system_block) rendered->system_tokens = system_block_tokens(chat, rendered->tokens);
  return rendered;
}

Expected<bool> Engine::Impl::encode_media_step(LiveRequest& r, int64_t patch_budget) {
  if (!vision) return invalid_argument(no_vision_reason);
  const PromptMedia& m = *r.req.media;
  const int64_t width = vision->patch_width(), merge = vision->config().spatial_merge_size;
  if (r.media_features.is_null())
    r.media_features = ops->empty({static_cast<int64_t>(m.positions.size()), vision->out_hidden()});
  bool first = true;  // at least one call per step, whatever its size
  while (r.media_item < m.items.size()) {
    const media::VisionPatches& p = m.items[r.media_item].patches;
    const int64_t per_group = p.grid_h * p.grid_w;
    if (static_cast<int64_t>(p.values.size()) != p.grid_t * per_group * width)
      return internal_error("vision tower: patches of an unexpected width");
    const int64_t fit = patch_budget / std::max<int64_t>(1, per_group);
    if (fit == 0 && !first) break;
    const int64_t groups = std::min(std::max<int64_t>(1, fit), p.grid_t - r.media_group);
    Tensor patches = Tensor::view_of(const_cast<float*>(p.values.data()) + r.media_group * per_group * width,
                                     {groups * per_group, width}, DType::kF32);
    const VisionGrid grid{groups, p.grid_h, p.grid_w};
    auto out = vision->encode(patches, {&grid, 1});
    if (!out) return out.status().with_context("vision tower");
    const int64_t rows = groups * per_group / (merge * merge);
    if (out->size(0) != rows || r.media_row + rows > r.media_features.size(0))
      return internal_error("vision tower: " + std::to_string(out->size(0)) + " features for a grid of " +
                            std::to_string(rows) + " placeholders");
    Tensor dst = r.media_features.slice(0, r.media_row, r.media_row + rows);
    ops->copy(dst, *out);
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
  return true;
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
