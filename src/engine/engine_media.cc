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
    return invalid_argument("this checkpoint has no vision tower: image and video parts are not supported");
  auto tokens = render_chat(chat);
  if (!tokens) return tokens.status();
  const text::Tokenizer& tok = *impl_->tokenizer;
  return expand_prompt_media(std::move(*tokens), *parts, impl_->media_ids, impl_->media_limits,
                             [&tok](const std::string& s) { return tok.encode(s, /*add_special_tokens=*/false); });
}

// The tower runs on at most this many patches per call (whole segments: an image, or a
// video's temporal groups), so its activations stay bounded whatever the request holds.
constexpr int64_t kMaxPatchesPerEncode = 32768;

Status Engine::Impl::encode_media(LiveRequest& r) {
  if (!r.req.media || !r.media_features.is_null()) return Status::ok();
  if (!vision) return invalid_argument("this checkpoint has no vision tower");
  const PromptMedia& m = *r.req.media;
  const int64_t width = vision->patch_width(), merge = vision->config().spatial_merge_size;
  Tensor features = ops->empty({static_cast<int64_t>(m.positions.size()), vision->out_hidden()});
  int64_t row = 0;
  for (const PromptMediaItem& it : m.items) {
    const media::VisionPatches& p = it.patches;
    const int64_t per_group = p.grid_h * p.grid_w;
    if (static_cast<int64_t>(p.values.size()) != p.grid_t * per_group * width)
      return internal_error("vision tower: patches of an unexpected width");
    const int64_t groups_per_call = std::max<int64_t>(1, kMaxPatchesPerEncode / std::max<int64_t>(1, per_group));
    for (int64_t g0 = 0; g0 < p.grid_t; g0 += groups_per_call) {
      const int64_t groups = std::min(groups_per_call, p.grid_t - g0);
      Tensor patches = Tensor::view_of(const_cast<float*>(p.values.data()) + g0 * per_group * width,
                                       {groups * per_group, width}, DType::kF32);
      const VisionGrid grid{groups, p.grid_h, p.grid_w};
      auto out = vision->encode(patches, {&grid, 1});
      if (!out) return out.status().with_context("vision tower");
      const int64_t rows = groups * per_group / (merge * merge);
      if (out->size(0) != rows || row + rows > features.size(0))
        return internal_error("vision tower: " + std::to_string(out->size(0)) + " features for a grid of " +
                              std::to_string(rows) + " placeholders");
      Tensor dst = features.slice(0, row, row + rows);
      ops->copy(dst, *out);
      row += rows;
    }
  }
  if (row != features.size(0))
    return internal_error("vision tower: " + std::to_string(row) + " features for " +
                          std::to_string(features.size(0)) + " placeholders");
  r.media_features = std::move(features);
  return Status::ok();
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
