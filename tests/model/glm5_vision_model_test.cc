// The whole model with images and a video against transformers 5.17
// (tests/data/model/tiny-vision, made by tools/reference/make_vision_fixtures.py): the
// vision tower's features put at the placeholder tokens (StepEntry::embed_runs), then
// the text model's logits at every prompt position, in one prefill and in chunks whose
// edges cut through an image, and the greedy continuation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "glm5_fixture.h"
#include "vision_fixture.h"

namespace tf::test {
namespace {

constexpr double kTol = 1e-4;

std::vector<int32_t> ids_of(const VisionFixture& f, const std::string& name) {
  std::vector<int32_t> out;
  for (float v : f.f32(name).to_vector()) out.push_back(static_cast<int32_t>(v));
  return out;
}

Glm5Options exact_cache() {
  Glm5Options c;
  c.latent_dtype = DType::kF32;
  c.page_size = 16;
  c.num_pages = 64;
  c.indexer_ties = TopkTies::kTorchCpu;
  return c;
}

// Prompt positions of the placeholders (the image token), as transformers fills them:
// images and videos alike, in order.
std::vector<int64_t> placeholders(const std::vector<int32_t>& ids, int32_t image_token) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == image_token) out.push_back(static_cast<int64_t>(i));
  return out;
}

// The runs of one chunk [from, from + count) of the prompt.
std::vector<StepEntry::EmbedRun> runs_of(const std::vector<int64_t>& pos, int64_t from, int64_t count) {
  std::vector<StepEntry::EmbedRun> runs;
  for (size_t k = 0; k < pos.size(); ++k) {
    if (pos[k] < from || pos[k] >= from + count) continue;
    const int64_t row = pos[k] - from, src = static_cast<int64_t>(k);
    if (!runs.empty() && runs.back().row + runs.back().count == row && runs.back().src + runs.back().count == src)
      ++runs.back().count;
    else
      runs.push_back({row, 1, src});
  }
  return runs;
}

// Prefill of `ids` in chunks of `chunk` tokens with the features at the placeholders;
// the logits of every position [prompt, vocab].
Tensor prefill(Glm5Model& model, Glm5Sequence& seq, const std::vector<int32_t>& ids, const Tensor& features,
               int32_t image_token, int64_t chunk) {
  const std::vector<int64_t> pos = placeholders(ids, image_token);
  EXPECT_EQ(static_cast<int64_t>(pos.size()), features.size(0));
  const int64_t n = static_cast<int64_t>(ids.size()), vocab = model.config().vocab_size;
  Tensor logits = Tensor::empty({n, vocab}, DType::kF32);
  for (int64_t from = 0; from < n; from += chunk) {
    const int64_t count = std::min(chunk, n - from);
    std::vector<StepEntry::EmbedRun> runs = runs_of(pos, from, count);
    StepEntry e{&seq, std::span<const int32_t>(ids).subspan(static_cast<size_t>(from), static_cast<size_t>(count)), true};
    e.embed_runs = runs;
    e.embeds = &features;
    auto res = model.step({&e, 1});
    EXPECT_TRUE(res.has_value()) << res.status().to_string();
    if (!res) return logits;
    std::copy_n((*res)[0].logits.data<float>(), count * vocab, logits.data<float>() + from * vocab);
  }
  return logits;
}

// The text model and the tower on the CPU backend, and the tower's features of the
// reference's pixel values (one grid per named tensor pair, in prompt order).
struct Loaded {
  std::unique_ptr<Glm5Model> model;
  Tensor features;  // host f32 [placeholders, hidden]
};
Loaded load_and_encode(const VisionFixture& f, const std::vector<std::pair<std::string, std::string>>& inputs) {
  Ops& ops = cpu_ops();
  static auto comm = make_single_rank_communicator();
  Loaded l;
  auto model = Glm5Model::load(f.config, *f.weights, ops, *comm, exact_cache());
  EXPECT_TRUE(model.has_value()) << model.status().to_string();
  if (!model) return l;
  l.model = std::move(*model);
  auto tower = Glm5VisionTower::load(f.config, *f.weights, ops);
  EXPECT_TRUE(tower.has_value()) << tower.status().to_string();
  if (!tower) return l;
  std::vector<Tensor> pixels;
  std::vector<VisionGrid> grids;
  for (const auto& [px, grid] : inputs) {
    pixels.push_back(f.f32(px));
    grids.push_back(f.grid(grid));
  }
  auto features = (*tower)->encode(concat_rows(pixels), grids);
  EXPECT_TRUE(features.has_value()) << features.status().to_string();
  if (features) l.features = ops.to_host(*features);
  return l;
}

TEST(Glm5VisionModel, ImagePromptMatchesTransformers) {
  const VisionFixture f = load_vision_fixture();
  Loaded l = load_and_encode(f, {{"img0_pixels", "img0_grid"}, {"img1_pixels", "img1_grid"}});
  ASSERT_TRUE(l.model && !l.features.is_null());
  Glm5Model* model = l.model.get();
  const Tensor& feats = l.features;
  const std::vector<int32_t> ids = ids_of(f, "prompt_ids");
  const auto image = static_cast<int32_t>(f.config.image_token_id);
  const Tensor ref = f.f32("prompt_logits");
  for (int64_t chunk : {int64_t{1000}, int64_t{16}, int64_t{7}}) {
    auto seq = model->new_sequence();
    const Tensor logits = prefill(*model, *seq, ids, feats, image, chunk);
    const double err = rel_err(logits, ref);
    std::printf("[tiny-vision] image prompt (%zu tokens, %lld features), chunks of %lld: max|d|/max|ref| = %.3g\n",
                ids.size(), static_cast<long long>(feats.size(0)), static_cast<long long>(chunk), err);
    EXPECT_LE(err, kTol) << "chunk " << chunk;
  }

  // Greedy continuation: generate()'s tokens.
  auto seq = model->new_sequence();
  Tensor logits = prefill(*model, *seq, ids, feats, image, 1000);
  const std::vector<int32_t> want = ids_of(f, "generate_ids");
  std::vector<int32_t> got;
  Tensor last = rows_of(logits, logits.size(0) - 1, logits.size(0));
  for (size_t i = 0; i < want.size(); ++i) {
    const float* p = last.data<float>();
    const auto tok = static_cast<int32_t>(std::max_element(p, p + last.numel()) - p);
    got.push_back(tok);
    StepEntry e{seq.get(), std::span<const int32_t>(&got.back(), 1), false};
    auto res = model->step({&e, 1});
    ASSERT_TRUE(res.has_value()) << res.status().to_string();
    last = (*res)[0].logits;
  }
  EXPECT_EQ(got, want);
}

TEST(Glm5VisionModel, VideoPromptMatchesTransformers) {
  const VisionFixture f = load_vision_fixture();
  // The prompt holds image 1, then the video: features in that order.
  Loaded l = load_and_encode(f, {{"img1_pixels", "img1_grid"}, {"video_pixels", "video_grid"}});
  ASSERT_TRUE(l.model && !l.features.is_null());
  Glm5Model* model = l.model.get();
  const Tensor& feats = l.features;
  const std::vector<int32_t> ids = ids_of(f, "video_prompt_ids");
  const Tensor ref = f.f32("video_prompt_logits");
  const auto image = static_cast<int32_t>(f.config.image_token_id);
  auto seq = model->new_sequence();
  const Tensor logits = prefill(*model, *seq, ids, feats, image, 1000);
  const double err = rel_err(logits, ref);
  std::printf("[tiny-vision] image + video prompt (%zu tokens, %lld features): max|d|/max|ref| = %.3g\n", ids.size(),
              static_cast<long long>(feats.size(0)), err);
  EXPECT_LE(err, kTol);
  // In chunks of 24 (edges inside the video's groups): the f32 sums of a 24-row chunk differ
  // from a 71-row one in the last bits, which flips a near-tie (a top-k choice, by all signs in
  // the last layer) for one row: measured row 21 alone at 0.26, every later row agrees, so no
  // state carried to later tokens differs.
  auto chunked_seq = model->new_sequence();
  const Tensor chunked = prefill(*model, *chunked_seq, ids, feats, image, 24);
  int off = 0;
  for (int64_t r = 0; r < chunked.size(0); ++r) off += rel_err(rows_of(chunked, r, r + 1), rows_of(ref, r, r + 1)) > kTol;
  std::printf("[tiny-vision] the same in chunks of 24: %d of %lld rows beyond the tolerance\n", off,
              static_cast<long long>(chunked.size(0)));
  EXPECT_LE(off, 1);
  const int64_t last = chunked.size(0) - 1;
  EXPECT_LE(rel_err(rows_of(chunked, last, last + 1), rows_of(ref, last, last + 1)), kTol);
}

TEST(Glm5VisionModel, BadEmbeddingRunsAreRefused) {
  const VisionFixture f = load_vision_fixture();
  auto comm = make_single_rank_communicator();
  auto model = Glm5Model::load(f.config, *f.weights, cpu_ops(), *comm, exact_cache());
  ASSERT_TRUE(model.has_value()) << model.status().to_string();
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  Tensor feats = Tensor::zeros({2, f.config.text.hidden_size}, DType::kF32);
  Tensor narrow = Tensor::zeros({2, 3}, DType::kF32);
  for (const auto& [run, embeds] : std::vector<std::pair<StepEntry::EmbedRun, const Tensor*>>{
           {{3, 2, 0}, &feats},   // past the span
           {{0, 3, 0}, &feats},   // past the embeddings
           {{0, 1, 0}, &narrow},  // wrong width
           {{0, 1, 0}, nullptr}}) {
    auto seq = (*model)->new_sequence();
    StepEntry e{seq.get(), ids, false};
    e.embed_runs = std::span<const StepEntry::EmbedRun>(&run, 1);
    e.embeds = embeds;
    auto res = (*model)->step({&e, 1});
    ASSERT_FALSE(res.has_value());
    EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument) << res.status().to_string();
  }
}

}  // namespace
}  // namespace tf::test
