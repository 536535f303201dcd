// The MoE layers' shared expert on a side branch (glm5_model.cc moe_forward,
// Ops::SideBranch) gives the bits of the in-order layer (the shared expert's down
// projection accumulating into the routed sum): the fixture models on CUDA ops with
// side branches (TF_BRANCHES=1, each TF_BRANCH_MOE mode) and without (TF_BRANCHES=0),
// eager and with graphs, over a prefill of the whole prompt and the join/leave decode
// schedule; every logits row must be identical. "[branches]" lines print the counts.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "glm5_fixture.h"
#include "graph_schedule.h"
#include "kernels/cuda/cuda_ops.h"

namespace tf::test {
namespace {

// CUDA ops made with TF_BRANCHES set to `value` (read when the backend is made).
std::unique_ptr<Ops> ops_with_branches(const char* value) {
  const char* old = std::getenv("TF_BRANCHES");
  const std::string saved = old ? old : "";
  setenv("TF_BRANCHES", value, 1);
  auto o = make_cuda_ops(0);
  if (old) setenv("TF_BRANCHES", saved.c_str(), 1); else unsetenv("TF_BRANCHES");
  EXPECT_TRUE(o.has_value()) << o.status().to_string();
  return o.has_value() ? std::move(*o) : nullptr;
}

bool bits_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// The prompt's prefill logits (every row), then the join/leave decode schedule's.
std::vector<Tensor> run_model(Ops& ops, const Fixture& f, Glm5Options::Graphs graphs) {
  auto ws = open_weights(f);
  EXPECT_TRUE(ws);
  if (!ws) return {};
  auto comm = make_single_rank_communicator();
  Glm5Options o;
  o.latent_dtype = DType::kBF16;
  o.page_size = 16;
  o.num_pages = 512;
  o.graphs = graphs;
  auto m = Glm5Model::load(f.config, *ws, ops, *comm, o);
  EXPECT_TRUE(m.has_value()) << m.status().to_string();
  if (!m.has_value()) return {};
  std::vector<Tensor> out;
  auto seq = (*m)->new_sequence();
  StepEntry e{seq.get(), f.prompt_ids, true};
  auto r = (*m)->step({&e, 1});
  EXPECT_TRUE(r.has_value()) << r.status().to_string();
  if (!r.has_value()) return {};
  out.push_back((*r)[0].logits);
  for (Tensor& t : run_join_leave(**m, f, join_leave_schedule())) out.push_back(std::move(t));
  return out;
}

TEST(Glm5BranchesCuda, SharedExpertBranchKeepsTheBits) {
  auto on = ops_with_branches("1"), off = ops_with_branches("0");
  ASSERT_NE(on, nullptr);
  ASSERT_NE(off, nullptr);
  ASSERT_TRUE(on->concurrent_branches(1));
  ASSERT_FALSE(off->concurrent_branches(1));
  const char* saved = std::getenv("TF_BRANCH_MOE");
  const std::string saved_mode = saved ? saved : "";
  for (const auto& dir : fixture_dirs()) {
    const Fixture f = load_fixture(dir);
    for (Glm5Options::Graphs graphs : {Glm5Options::Graphs::kOff, Glm5Options::Graphs::kOn}) {
      const std::vector<Tensor> a = run_model(*off, f, graphs);
      ASSERT_FALSE(a.empty()) << f.name;
      for (const char* branch_moe : {"router", "experts-gateup", "experts"}) {
        setenv("TF_BRANCH_MOE", branch_moe, 1);  // read at each MoE layer
        const std::vector<Tensor> b = run_model(*on, f, graphs);
        ASSERT_EQ(a.size(), b.size()) << f.name;
        size_t differ = 0;
        for (size_t i = 0; i < a.size(); ++i)
          if (!bits_equal(a[i], b[i])) ++differ;
        const char* mode = graphs == Glm5Options::Graphs::kOn ? "graphs" : "eager";
        EXPECT_EQ(differ, 0u) << f.name << " " << mode << " TF_BRANCH_MOE=" << branch_moe
                              << ": logits that differ with the shared expert on a branch";
        std::printf("[branches] %s %s TF_BRANCH_MOE=%s: prefill of %zu tokens + %zu decode rows, %zu differ "
                    "(TF_BRANCHES=0 vs 1)\n",
                    f.name.c_str(), mode, branch_moe, f.prompt_ids.size(), a.size() - 1, differ);
      }
    }
  }
  if (saved) setenv("TF_BRANCH_MOE", saved_mode.c_str(), 1); else unsetenv("TF_BRANCH_MOE");
}

}  // namespace
}  // namespace tf::test
