// Test helper for the synthetic checkpoints (--exl3, --fp8-experts): the model of a
// checkpoint folder on the CPU backend, a fixed 7-token prompt, then greedy decode.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/config.h"
#include "model/glm5/glm5_model.h"
#include "model/weight_source.h"

namespace tf {

// The greedy tokens of `steps` decode steps after the prompt; every step's logits must be
// finite (a failure is recorded and the tokens so far returned).
inline std::vector<int32_t> cpu_greedy_tokens(const std::string& dir, int steps) {
  std::vector<int32_t> out;
  Expected<Glm5Config> c = load_glm5_config(dir);
  if (!c.has_value()) {
    ADD_FAILURE() << c.status().to_string();
    return out;
  }
  auto ws = open_weight_source(dir, *c);
  if (!ws.has_value()) {
    ADD_FAILURE() << ws.status().to_string();
    return out;
  }
  auto ops = make_cpu_ops();
  auto comm = make_single_rank_communicator();
  auto model = Glm5Model::load(*c, **ws, *ops, *comm);
  if (!model.has_value()) {
    ADD_FAILURE() << model.status().to_string();
    return out;
  }
  const std::vector<int32_t> prompt = {11, 22, 33, 44, 55, 66, 77};
  auto seq = (*model)->new_sequence();
  StepEntry prefill{seq.get(), std::span<const int32_t>(prompt.data(), prompt.size()), true};
  auto r = (*model)->step({&prefill, 1});
  if (!r.has_value()) {
    ADD_FAILURE() << r.status().to_string();
    return out;
  }
  std::vector<float> last = (*r)[0].logits.to_vector();
  last.erase(last.begin(), last.end() - c->text.vocab_size);
  for (int i = 0; i < steps; ++i) {
    if (!std::all_of(last.begin(), last.end(), [](float x) { return std::isfinite(x); })) {
      ADD_FAILURE() << "non-finite logits at step " << i;
      return out;
    }
    const int32_t next = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    out.push_back(next);
    StepEntry d{seq.get(), std::span<const int32_t>(&next, 1), false};
    auto rd = (*model)->step({&d, 1});
    if (!rd.has_value()) {
      ADD_FAILURE() << rd.status().to_string();
      return out;
    }
    last = (*rd)[0].logits.to_vector();
  }
  return out;
}

}  // namespace tf
