// Test helpers: the reference fixtures under tests/data/model/*/ (every folder
// with a reference.safetensors), the model loaded from them on the CPU backend,
// and the greedy run the tensor-parallel tests compare across world sizes (also
// used by the glm5_tp_worker processes, which is why it returns a Status).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/api/ops.h"
#include "model/config.h"
#include "model/glm5/glm5_model.h"
#include "model/weight_source.h"

namespace tf::test {

struct Fixture {
  std::string name, dir;
  Glm5Config config;
  std::vector<int32_t> prompt_ids, greedy_ids, short_ids;
  Tensor prompt_logits, greedy_step_logits, short_logits;  // f32 [n, vocab]
  std::vector<int32_t> generate_ids;  // generate()'s greedy continuation (absent in older fixtures)
  Tensor generate_logits;
};

std::vector<std::string> fixture_dirs();
Fixture load_fixture(const std::string& dir);
Ops& cpu_ops();
std::unique_ptr<WeightSource> open_weights(const Fixture& f);
std::unique_ptr<Glm5Model> load_model(const Fixture& f, Communicator& comm, Glm5Options cache = {});
// A pool of 256 16-token pages, bf16 latents: pool and page boundaries within a fixture's prompt.
Glm5Options small_pool();

// A WeightSource that hides, reshapes or adds tensors of another one.
class EditedWeights final : public WeightSource {
 public:
  explicit EditedWeights(const WeightSource& base) : base_(base) {}
  std::string hide;
  std::string misshape;
  std::map<std::string, std::string> alias;  // name -> base name
  std::map<std::string, Tensor> extra;
  Expected<Tensor> get_f32(const std::string& name, const Shape& shape) const override {
    if (name == hide) return not_found("tensor " + name + " is missing");
    if (auto it = extra.find(name); it != extra.end()) return it->second;
    if (name == misshape) {
      TF_ASSIGN_OR_RETURN(Tensor t, base_.get_f32(name, {}));
      Tensor bad = t.reshape({-1}).slice(0, 0, t.numel() - 1).contiguous();
      if (!shape.empty() && bad.shape() != shape)
        return invalid_argument("tensor " + name + " has shape " + shape_to_string(bad.shape()) + ", expected " +
                                shape_to_string(shape));
      return bad;
    }
    if (auto it = alias.find(name); it != alias.end()) return base_.get_f32(it->second, shape);
    return base_.get_f32(name, shape);
  }
  bool has(const std::string& name) const override {
    return name != hide && (extra.count(name) || alias.count(name) || base_.has(name));
  }
  std::vector<std::string> unknown_tensors() const override { return base_.unknown_tensors(); }

 private:
  const WeightSource& base_;
};

// The fixtures have no MTP layer: adds one to `w` (the last full-indexer DSA + MoE layer's
// tensors under layer num_hidden_layers, plus deterministic eh_proj, enorm, hnorm and
// shared_head.norm) and counts it in `config` (num_nextn_predict_layers = 1). False when
// the fixture has no such layer.
bool add_mtp_layer(const Fixture& f, EditedWeights& w, Glm5Config& config);
// load_model with that layer (null when the fixture cannot have one, or the load failed).
std::unique_ptr<Glm5Model> load_model_with_mtp(const Fixture& f, Communicator& comm, Ops& ops, Glm5Options cache = {});

// Runs `fn(rank, comm)` on `world` threads joined by an in-process communicator
// (sums in rank order, so every rank gets bitwise the same result).
void run_ranks(int world, const std::function<void(int, Communicator&)>& fn);

// The prompt prefill (logits at every position) and greedy decode steps through
// the batched step, with an exact (f32) latent cache.
struct TpRun {
  Tensor prefill;               // [prompt, vocab]
  std::vector<Tensor> decode;   // [1, vocab] per decode step
  std::vector<int32_t> tokens;  // greedy tokens (argmax of the previous logits)
};
Expected<TpRun> run_greedy(const Fixture& f, Communicator& comm, int decode_steps = 6);
// A TpRun as a safetensors file (prefill, decode.<i>, tokens), for worker processes.
Status write_tp_run(const std::string& path, const TpRun& run);
Expected<TpRun> read_tp_run(const std::string& path);

// max|a - b| / max|b| over all elements.
double rel_err(const Tensor& a, const Tensor& b);
// Rows [r0, r1) of a 2-D tensor, packed.
Tensor rows_of(const Tensor& t, int64_t r0, int64_t r1);

}  // namespace tf::test
