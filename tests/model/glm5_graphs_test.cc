// The decode-step graph path (StepGraphs: row-only segments padded to a bucket of
// rows, captured and replayed) against the eager step, on the CPU backend, where
// Ops::capture keeps the segment and replays it by calling it again: the padding,
// the fixed input/output buffers and the chaining of segments are the same code as
// on CUDA (tests/model/glm5_graphs_cuda_test.cc runs the real graphs). Also the
// step's one batched lm_head: entries mixing "last row" and "all rows", the
// host_logits / want_hidden flags, device_logits, and many rows' logits in blocks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "glm5_fixture.h"
#include "graph_schedule.h"
#include "kernels/cpu/cpu_sampling.h"

namespace tf::test {
namespace {

Glm5Options opts(Glm5Options::Graphs graphs) {
  Glm5Options o;
  o.latent_dtype = DType::kBF16;
  o.page_size = 16;
  o.num_pages = 256;
  o.graphs = graphs;
  return o;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i)
    if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) return false;
  return true;
}

// Decodes `streams` sequences (each first prefilled with a different prompt slice)
// in steps whose batches take the sequences [0, sizes[s]) at step s; returns every
// step's logits per sequence and checks the hidden states come back when asked.
std::vector<Tensor> decode_schedule(const Fixture& f, Glm5Options::Graphs graphs, int streams,
                                    const std::vector<int>& sizes, bool refuse_captures = false) {
  auto comm = make_single_rank_communicator();
  auto model = load_model(f, *comm, opts(graphs));
  EXPECT_TRUE(model);
  if (!model) return {};
  model->mutable_step_graphs().refuse_captures(refuse_captures);
  std::vector<std::unique_ptr<Glm5Sequence>> seqs;
  std::vector<int32_t> next(streams);
  for (int s = 0; s < streams; ++s) {
    seqs.push_back(model->new_sequence());
    const size_t len = 5 + 3 * static_cast<size_t>(s);
    std::vector<int32_t> prompt(f.prompt_ids.begin() + s, f.prompt_ids.begin() + s + len);
    StepEntry e{seqs.back().get(), prompt, false};
    auto r = model->step({&e, 1});
    EXPECT_TRUE(r.has_value()) << r.status().to_string();
    if (!r.has_value()) return {};
    next[s] = f.prompt_ids[s + len];
  }
  std::vector<Tensor> out;
  for (size_t step = 0; step < sizes.size(); ++step) {
    std::vector<StepEntry> batch;
    for (int s = 0; s < sizes[step]; ++s) {
      StepEntry e{seqs[s].get(), std::span<const int32_t>(&next[s], 1), false};
      e.want_hidden = s % 2 == 0;
      batch.push_back(e);
    }
    auto r = model->step(batch);
    EXPECT_TRUE(r.has_value()) << r.status().to_string();
    if (!r.has_value()) return {};
    for (int s = 0; s < sizes[step]; ++s) {
      const StepResult& res = (*r)[s];
      EXPECT_EQ(res.logits.size(0), 1);
      EXPECT_EQ(res.hidden.is_null(), s % 2 != 0);
      if (!res.hidden.is_null()) {
        EXPECT_EQ(res.hidden.size(1), f.config.text.hidden_size);
      }
      out.push_back(res.logits);
      // Feed a token that depends on the logits (as greedy decoding would).
      const std::vector<float> v = res.logits.to_vector();
      next[s] = static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
    }
  }
  const StepGraphs::Stats& st = model->step_graphs().stats();
  if (refuse_captures) {
    // Every whole-layer segment of a MoE layer failed, so the layer ran cut around its
    // routed experts: two more segments per MoE layer and bucket, also "failed".
    int moe = 0;
    for (const auto& t : f.config.text.mlp_layer_types) moe += t == MlpKind::kSparse ? 1 : 0;
    EXPECT_GT(moe, 0);
    EXPECT_EQ(st.captured, 0);
    // (A bucket's first step runs the whole segment; the cut ones from its second step on.)
    std::map<int64_t, int> uses;
    for (int n : sizes) ++uses[StepGraphs::bucket_for(n)];
    int64_t want = 0;
    for (const auto& [b, k] : uses) want += f.config.text.num_hidden_layers + 2 + (k > 1 ? 2 * moe : 0);
    EXPECT_EQ(st.eager_fallbacks, want);
  } else if (graphs == Glm5Options::Graphs::kOn) {
    // Every segment of every bucket used (1, 2, 4, 8) was "captured" and later replayed.
    EXPECT_EQ(st.captured, 4 * static_cast<int64_t>(f.config.text.num_hidden_layers + 2));
    EXPECT_EQ(st.eager_fallbacks, 0);
    EXPECT_GT(st.replays, 0);
  } else {
    EXPECT_EQ(st.captured + st.replays, 0);
  }
  return out;
}

TEST(Glm5Graphs, DecodeGraphPathEqualsEager) {
  for (const auto& dir : fixture_dirs()) {
    Fixture f = load_fixture(dir);
    // Buckets 1, 2, 4 and 8, each several times (capture, then replays), with
    // padded rows (3 -> 4, 5 -> 8) and a bucket revisited after others.
    const std::vector<int> sizes{1, 1, 3, 4, 5, 2, 3, 8, 1, 5, 4};
    const auto eager = decode_schedule(f, Glm5Options::Graphs::kOff, 8, sizes);
    const auto graph = decode_schedule(f, Glm5Options::Graphs::kOn, 8, sizes);
    ASSERT_EQ(eager.size(), graph.size()) << f.name;
    ASSERT_FALSE(eager.empty());
    for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bits(eager[i], graph[i])) << f.name << " row " << i;
  }
}

// Segments that cannot be captured run eagerly on their buffers; MoE layers then
// run as two segments around the routed experts (what CUDA does at buckets above
// EXACT_ROWS, where the experts group their tokens on the host).
TEST(Glm5Graphs, FailedCapturesFallBackAndSplitAtTheExperts) {
  const Fixture f = load_fixture(fixture_dirs().front());
  const std::vector<int> sizes{1, 3, 4, 5, 2, 8, 1, 4};
  const auto eager = decode_schedule(f, Glm5Options::Graphs::kOff, 8, sizes);
  const auto split = decode_schedule(f, Glm5Options::Graphs::kOn, 8, sizes, true);
  ASSERT_EQ(eager.size(), split.size());
  ASSERT_FALSE(eager.empty());
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_TRUE(same_bits(eager[i], split[i])) << "row " << i;
}

TEST(Glm5Graphs, PrefillAndDecodeMixedStaysEager) {
  const Fixture f = load_fixture(fixture_dirs().front());
  auto comm = make_single_rank_communicator();
  auto eager = load_model(f, *comm, opts(Glm5Options::Graphs::kOff));
  auto graph = load_model(f, *comm, opts(Glm5Options::Graphs::kOn));
  ASSERT_TRUE(eager && graph);
  std::vector<Tensor> got[2];
  Glm5Model* models[2] = {eager.get(), graph.get()};
  for (int k = 0; k < 2; ++k) {
    auto a = models[k]->new_sequence(), b = models[k]->new_sequence();
    std::vector<int32_t> pa(f.prompt_ids.begin(), f.prompt_ids.begin() + 12), pb(f.short_ids);
    StepEntry e{a.get(), pa, false};
    ASSERT_TRUE(models[k]->step({&e, 1}).has_value());
    // a decodes (graph-eligible alone) then decodes while b prefills (mixed: eager).
    const int32_t t1 = f.prompt_ids[12], t2 = f.prompt_ids[13];
    StepEntry d{a.get(), std::span<const int32_t>(&t1, 1), false};
    auto r1 = models[k]->step({&d, 1});
    ASSERT_TRUE(r1.has_value());
    got[k].push_back((*r1)[0].logits);
    std::vector<StepEntry> mixed{{a.get(), std::span<const int32_t>(&t2, 1), false}, {b.get(), pb, true}};
    auto r2 = models[k]->step(mixed);
    ASSERT_TRUE(r2.has_value()) << r2.status().to_string();
    got[k].push_back((*r2)[0].logits);
    got[k].push_back((*r2)[1].logits);
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  for (size_t i = 0; i < got[0].size(); ++i) EXPECT_TRUE(same_bits(got[0][i], got[1][i])) << i;
}

TEST(Glm5Graphs, OneLmHeadForMixedEntriesEqualsEachAlone) {
  const Fixture f = load_fixture(fixture_dirs().front());
  auto comm = make_single_rank_communicator();
  auto model = load_model(f, *comm, opts(Glm5Options::Graphs::kOff));
  ASSERT_TRUE(model);
  const std::vector<int32_t> pa(f.prompt_ids.begin(), f.prompt_ids.begin() + 9),
      pb(f.prompt_ids.begin() + 20, f.prompt_ids.begin() + 26), pc(f.short_ids);
  // Alone.
  std::vector<Tensor> alone;
  std::vector<bool> all{false, true, false};
  const std::vector<int32_t>* prompts[3] = {&pa, &pb, &pc};
  for (int i = 0; i < 3; ++i) {
    auto s = model->new_sequence();
    StepEntry e{s.get(), *prompts[i], all[i]};
    e.want_hidden = true;
    auto r = model->step({&e, 1});
    ASSERT_TRUE(r.has_value());
    alone.push_back((*r)[0].logits);
    EXPECT_EQ((*r)[0].hidden.size(0), (*r)[0].logits.size(0));
  }
  // Together: the middle entry wants every row, the others the last; the third
  // does not want host logits (device_logits still has its row).
  auto a = model->new_sequence(), b = model->new_sequence(), c = model->new_sequence();
  std::vector<StepEntry> batch{{a.get(), pa, false}, {b.get(), pb, true}, {c.get(), pc, false}};
  batch[2].host_logits = false;
  auto r = model->step(batch);
  ASSERT_TRUE(r.has_value()) << r.status().to_string();
  EXPECT_EQ((*r)[0].logits.size(0), 1);
  EXPECT_EQ((*r)[1].logits.size(0), static_cast<int64_t>(pb.size()));
  EXPECT_TRUE((*r)[2].logits.is_null());
  EXPECT_TRUE((*r)[0].hidden.is_null());
  EXPECT_TRUE(same_bits((*r)[0].logits, alone[0]));
  EXPECT_TRUE(same_bits((*r)[1].logits, alone[1]));
  // CPU backend: the device logits are host memory too.
  EXPECT_TRUE(same_bits((*r)[2].device_logits.contiguous(), alone[2]));
  EXPECT_TRUE(same_bits((*r)[1].device_logits.contiguous(), alone[1]));
}

// Many rows' logits are made a block of rows at a time (Glm5Options::logits_block_rows):
// the same host rows as one lm_head call, each entry's last row on the device, and the
// same scores for the rows that score given tokens (StepEntry::scored_tokens).
TEST(Glm5Graphs, LogitsInBlocksEqualOneCall) {
  const Fixture f = load_fixture(fixture_dirs().front());
  auto comm = make_single_rank_communicator();
  const std::vector<int32_t> pa(f.prompt_ids.begin(), f.prompt_ids.begin() + 9),
      pb(f.prompt_ids.begin() + 20, f.prompt_ids.begin() + 26),
      pc(f.prompt_ids.begin() + 30, f.prompt_ids.begin() + 37);
  std::vector<std::vector<StepResult>> got;
  for (const int64_t block : {int64_t{0}, int64_t{3}, int64_t{4}}) {
    Glm5Options o = opts(Glm5Options::Graphs::kOff);
    o.logits_block_rows = block;
    auto model = load_model(f, *comm, o);
    ASSERT_TRUE(model);
    // Rows wanted: a's 9, b's last, c's 7 (c not downloaded): blocks cut inside entries.
    auto a = model->new_sequence(), b = model->new_sequence(), c = model->new_sequence();
    std::vector<StepEntry> batch{{a.get(), pa, true}, {b.get(), pb, false}, {c.get(), pc, true}};
    batch[0].want_hidden = true;
    batch[2].host_logits = false;
    // c's first 6 rows score given tokens (the last one a padding id) on the device.
    const std::vector<int32_t> scored{pa[1], pa[2], pa[3],
                                      pa[4], pa[5], static_cast<int32_t>(f.config.text.vocab_size - 1)};
    batch[2].scored_tokens = scored;
    batch[2].score_params.logprob = true;
    batch[2].score_params.top_logprobs = 3;
    batch[2].score_params.vocab_limit = static_cast<int32_t>(f.config.text.vocab_size - 2);
    auto r = model->step(batch);
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    got.push_back(std::move(*r));
  }
  // The scores are the CPU op's on the rows' logits (c's rows, from a step that downloads them).
  {
    auto model = load_model(f, *comm, opts(Glm5Options::Graphs::kOff));
    ASSERT_TRUE(model);
    auto a = model->new_sequence(), b = model->new_sequence(), c = model->new_sequence();
    std::vector<StepEntry> batch{{a.get(), pa, true}, {b.get(), pb, false}, {c.get(), pc, true}};
    auto r = model->step(batch);
    ASSERT_TRUE(r.has_value()) << r.status().to_string();
    const Tensor& rows = (*r)[2].logits;
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_EQ(got[k][2].scores.size(), 6u);
      EXPECT_TRUE(got[k][0].scores.empty());
      for (int64_t j = 0; j < 6; ++j) {
        SampleRowParams p;
        p.logprob = true;
        p.top_logprobs = 3;
        p.vocab_limit = static_cast<int32_t>(f.config.text.vocab_size - 2);
        p.scored_token =
            j < 5 ? pa[static_cast<size_t>(j) + 1] : static_cast<int32_t>(f.config.text.vocab_size - 1);
        const Tensor row = rows.select(0, j).contiguous();
        const SampleRowResult want = cpu::sample_row(row.data<float>(), row.numel(), p);
        const SampleRowResult& s = got[k][2].scores[static_cast<size_t>(j)];
        EXPECT_EQ(s.status, SampleRowStatus::kOk);
        EXPECT_EQ(s.token, p.scored_token);
        EXPECT_EQ(s.logprob, want.logprob) << k << " " << j;
        ASSERT_EQ(s.top_count, 3);
        for (int t = 0; t < 3; ++t) {
          EXPECT_EQ(s.top_tokens[t], want.top_tokens[t]);
          EXPECT_EQ(s.top_values[t], want.top_values[t]);
        }
      }
      EXPECT_EQ(got[k][2].scores[5].logprob, -std::numeric_limits<float>::infinity());  // a padding id
    }
  }
  const std::vector<StepResult>& whole = got[0];
  ASSERT_EQ(whole[0].logits.size(0), static_cast<int64_t>(pa.size()));
  for (size_t k = 1; k < got.size(); ++k) {
    const std::vector<StepResult>& blocks = got[k];
    EXPECT_TRUE(same_bits(blocks[0].logits, whole[0].logits)) << k;
    EXPECT_TRUE(same_bits(blocks[1].logits, whole[1].logits)) << k;
    EXPECT_TRUE(blocks[2].logits.is_null());
    EXPECT_TRUE(same_bits(blocks[0].hidden, whole[0].hidden)) << k;
    for (size_t i = 0; i < 3; ++i) {
      const Tensor& dw = whole[i].device_logits;
      ASSERT_EQ(blocks[i].device_logits.size(0), 1);
      EXPECT_TRUE(same_bits(blocks[i].device_logits.contiguous(),
                            dw.slice(0, dw.size(0) - 1, dw.size(0)).contiguous()))
          << k << " " << i;
    }
  }
}

// Sequences joining and leaving between steps (bucket rows change sequences, pages
// are reused), bf16 and fp8 latent caches: the graph path (attention cores inside the
// segments, padded rows on scratch state) equals the eager step bit for bit.
TEST(Glm5Graphs, JoinsAndLeavesEqualEager) {
  for (const auto& dir : fixture_dirs()) {
    const Fixture f = load_fixture(dir);
    for (DType latent : {DType::kBF16, DType::kF8E4M3}) {
      std::vector<Tensor> got[2];
      int k = 0;
      for (Glm5Options::Graphs mode : {Glm5Options::Graphs::kOff, Glm5Options::Graphs::kOn}) {
        auto comm = make_single_rank_communicator();
        Glm5Options o = opts(mode);
        o.latent_dtype = latent;
        auto model = load_model(f, *comm, o);
        ASSERT_TRUE(model);
        got[k++] = run_join_leave(*model, f, join_leave_schedule());
        if (mode == Glm5Options::Graphs::kOn) {
          EXPECT_GT(model->step_graphs().stats().replays, 0);
          EXPECT_EQ(model->step_graphs().stats().eager_fallbacks, 0);
        }
      }
      ASSERT_FALSE(got[0].empty()) << f.name;
      ASSERT_EQ(got[0].size(), got[1].size()) << f.name;
      for (size_t i = 0; i < got[0].size(); ++i)
        EXPECT_TRUE(same_bits(got[0][i], got[1][i])) << f.name << " " << dtype_name(latent) << " row " << i;
    }
  }
}

TEST(Glm5Graphs, Buckets) {
  EXPECT_EQ(StepGraphs::bucket_for(1), 1);
  EXPECT_EQ(StepGraphs::bucket_for(3), 4);
  EXPECT_EQ(StepGraphs::bucket_for(33), 64);
  EXPECT_EQ(StepGraphs::bucket_for(64), 64);
  EXPECT_EQ(StepGraphs::bucket_for(65), 0);
  EXPECT_EQ(StepGraphs::bucket_for(0), 0);
}

}  // namespace
}  // namespace tf::test
