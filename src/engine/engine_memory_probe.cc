// The working-memory probe (Engine::Impl::probe_working_memory): at start, before any
// request, the largest step the scheduler can make and the vision tower's largest encode
// run once on scratch sequences, so that a server whose MEMORY_RESERVE_GIB leaves too
// little room beside the cache pool fails to start with a message saying how much more
// it needs, instead of failing the requests in flight at the first long prompt or large
// picture. The blocks the probe took stay cached in the device allocator for those steps.
#include <algorithm>
#include <cmath>

#include "core/logging.h"
#include "engine/engine_impl.h"
#include "engine/memory_plan.h"
#include "media/video_decode.h"

namespace tf::engine {

int64_t Engine::Impl::largest_media_encode_patches() const {
  if (!vision) return 0;
  // encode_media_step encodes up to media_patches_per_step patches per call, but at least one
  // temporal group whatever its size: an image's (max_image_tokens) or a video's, which its
  // token budget, a frame's largest size (VideoLimits) and the request's patch bytes
  // (MediaLimits::max_pixel_bytes) bound.
  const Glm5VisionConfig& v = vision->config();
  const int64_t merge = v.spatial_merge_size, patch = v.patch_size;
  const int64_t image_group = media_limits.max_image_tokens * merge * merge;
  const int64_t video_group = std::min({media_limits.max_video_tokens * merge * merge,
                                        media::VideoLimits{}.max_pixels_per_frame / (patch * patch),
                                        media_limits.max_pixel_bytes / (vision->patch_width() * 4)});
  return std::max({options.media_patches_per_step, image_group, video_group});
}

Status Engine::Impl::probe_working_memory() {
  if (ops->memory_use().held_bytes == 0) return Status::ok();  // a backend without a device allocator
  const MemoryUse before = ops->memory_use();
  const int64_t chunk = options.prefill_chunk_or_default();
  // The scheduler's largest step: two prefill chunks. Each scratch sequence runs two chunks
  // (the second's rows attend to the first's), within the window and the pool.
  // The other streams decode beside them, a row each (bench/RESULTS.md, session 36: steps with
  // decode rows beside two chunks took more than the chunks alone).
  int rows = std::min(options.parallel, 2);
  int64_t per_sequence = std::min<int64_t>(2 * chunk, plan.context);
  while (rows > 1 && rows * per_sequence > plan.pool_tokens) --rows;
  per_sequence = std::min(per_sequence, plan.pool_tokens / rows);
  const int64_t decode_rows = std::clamp<int64_t>(
      std::min<int64_t>(options.parallel - rows, (plan.pool_tokens - rows * per_sequence) / plan.page_size),
      0, options.parallel);
  auto failed = [&](const Status& s, const std::string& what) {
    const MemoryUse now = ops->memory_use();
    return Status(s.code(), "the working memory of " + what + " does not fit beside the cache pool (" +
                                gib_text(now.peak_in_use_bytes - before.in_use_bytes) +
                                " taken when it failed: " + s.message() +
                                "); raise MEMORY_RESERVE_GIB (now " +
                                gib_text(static_cast<int64_t>(options.memory_reserve_gib * 1073741824.0)) +
                                ") or lower KV_POOL_GIB, CONTEXT or --prefill-chunk");
  };

  // Text: `rows` sequences prefilling a chunk each, every row's logits (prompt_logprobs; the
  // model makes them a block of rows at a time), for two steps: the second chunk's rows also
  // attend to the first's.
  ops->reset_memory_peak();
  {
    std::vector<int32_t> tokens(static_cast<size_t>(per_sequence));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919 + 11) % text_vocab);
    std::vector<std::unique_ptr<Glm5Sequence>> sequences;
    std::vector<RequestId> ids;
    for (int64_t r = 0; r < rows + decode_rows; ++r) {
      sequences.push_back(model->new_sequence());
      ids.push_back(next_id++);
      if (tp) tp->sequence_created(ids.back());
    }
    Status status;
    for (int64_t done = 0; done < per_sequence && status.is_ok(); done += chunk) {
      const std::span<const int32_t> span = std::span<const int32_t>(tokens).subspan(
          static_cast<size_t>(done), static_cast<size_t>(std::min(chunk, per_sequence - done)));
      std::vector<StepEntry> batch;
      std::vector<StepCommandEntry> entries;
      for (int64_t r = 0; r < rows + decode_rows; ++r) {
        // A decode row: one token (its sequence's next position).
        const std::span<const int32_t> row_tokens = r < rows ? span : span.first(1);
        StepEntry e;
        e.sequence = sequences[static_cast<size_t>(r)].get();
        e.tokens = row_tokens;
        e.all_logits = true;
        e.host_logits = false;
        e.mtp = mtp_drafting;
        batch.push_back(e);
        StepCommandEntry ce{ids[static_cast<size_t>(r)],
                            std::vector<int32_t>(row_tokens.begin(), row_tokens.end()), true};
        ce.mtp = mtp_drafting;
        entries.push_back(std::move(ce));
      }
      if (tp && !tp_send(std::move(entries)))
        return unavailable("the working-memory probe: a tensor-parallel rank was lost");
      try {
        if (auto out = model->step(batch); !out) status = out.status();
      } catch (const std::exception& e) {
        status = internal_error(e.what());
      }
    }
    for (RequestId id : ids)
      if (tp) tp->sequence_dropped(id);
    if (!status.is_ok())
      return failed(status, "a step of " + std::to_string(rows) + " prefill chunk(s) of " +
                                std::to_string(chunk) + " tokens and " + std::to_string(decode_rows) +
                                " decode rows");
  }
  const int64_t text_bytes = ops->memory_use().peak_in_use_bytes - before.in_use_bytes;

  // Vision: the largest single encode a request can ask for (zeros: the values do not matter).
  int64_t vision_bytes = 0, patches = 0;
  if (vision) {
    patches = largest_media_encode_patches();
    const int64_t merge = vision->config().spatial_merge_size;
    // A grid of merge blocks about as square as the patches allow.
    const int64_t blocks = patches / (merge * merge);
    const int64_t bh = std::max<int64_t>(1, static_cast<int64_t>(std::sqrt(static_cast<double>(blocks))));
    const VisionGrid grid{1, bh * merge, blocks / bh * merge};
    patches = grid.h * grid.w;
    ops->reset_memory_peak();
    const int64_t alive = ops->memory_use().in_use_bytes;
    Expected<Tensor> out = [&]() -> Expected<Tensor> {
      try {
        // Beside the encode: the request's features on the device until its last picture is
        // encoded (encode_media_step), as many rows as its patch bytes allow.
        const int64_t rows = media_limits.max_pixel_bytes / (vision->patch_width() * 4) / (merge * merge);
        const Tensor features = ops->empty({std::max<int64_t>(1, rows), vision->out_hidden()});
        return vision->encode(Tensor::zeros({patches, vision->patch_width()}, DType::kF32), {&grid, 1});
      } catch (const std::exception& e) {
        return internal_error(e.what());
      }
    }();
    if (!out)
      return failed(out.status(),
                    "the vision tower's largest encode (" + std::to_string(patches) + " patches)");
    vision_bytes = ops->memory_use().peak_in_use_bytes - alive;
  }
  ops->reset_memory_peak();
  {
    std::lock_guard<std::mutex> lock(health_mu);
    health.step_memory_peak_bytes = std::max(text_bytes, vision_bytes);
  }
  TF_LOG_INFO(
      "working memory, measured: {} for {} prefill chunk(s) of {} tokens and {} decode rows{}; {} held from "
      "the driver",
      gib_text(text_bytes), rows, chunk, decode_rows,
      vision ? ", " + gib_text(vision_bytes) + " for the vision tower's largest encode (" +
                   std::to_string(patches) + " patches)"
             : std::string(),
      gib_text(ops->memory_use().held_bytes));
  return Status::ok();
}

}  // namespace tf::engine
