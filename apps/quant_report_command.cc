// `tensorfold quant-report --model DIR [--dense q4|fp8|dense] [--lm-head dense|q4|fp8]
// [--device cpu|cuda] [--tokens N]`: how far DENSE=q4 / fp8 (and LM_HEAD) move the
// model's next-token distributions (issue #8). Loads
// the checkpoint unquantized (bf16 matrices on cuda, f32 on cpu), runs one prefill of N
// random prompt tokens (fixed seed) with logits at every position, frees it, loads it
// again with the large dense matrices (and lm_head) re-quantized and runs the same prefill; prints
// the mean / max KL(ref || quant) per position, the top-1 agreement and both load times.
// Meant for the synthetic full-geometry checkpoint on the GPU (`synth-checkpoint`).
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "apps/commands.h"
#include "apps/text_command_util.h"
#include "comm/communicator.h"
#include "kernels/cpu/cpu_ops.h"
#include "model/config.h"
#include "model/dense_quant.h"
#include "model/glm5/glm5_model.h"
#include "model/logit_agreement.h"
#include "model/weight_source.h"
#if TF_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace tf::apps {
namespace {

struct QuantReportArgs {
  std::string model, dense = "q4", lm_head = "dense", device = "cpu";
  int64_t tokens = 256;
  uint32_t seed = 1;
};

struct Run {
  Tensor logits;
  double load_s = 0, prefill_s = 0;
};

Expected<Run> prefill(const Glm5Config& cfg, const std::string& dir, Ops& ops, Glm5Options mo,
                      const std::vector<int32_t>& ids) {
  TF_ASSIGN_OR_RETURN(std::unique_ptr<WeightSource> ws, open_weight_source(dir, cfg));
  auto comm = make_single_rank_communicator();
  const auto t0 = std::chrono::steady_clock::now();
  TF_ASSIGN_OR_RETURN(std::unique_ptr<Glm5Model> model, Glm5Model::load(cfg, *ws, ops, *comm, mo));
  const auto t1 = std::chrono::steady_clock::now();
  auto seq = model->new_sequence();
  StepEntry e{seq.get(), ids, true};
  TF_ASSIGN_OR_RETURN(std::vector<StepResult> res, model->step({&e, 1}));
  const auto t2 = std::chrono::steady_clock::now();
  Run r;
  r.logits = res[0].logits.contiguous();
  r.load_s = std::chrono::duration<double>(t1 - t0).count();
  r.prefill_s = std::chrono::duration<double>(t2 - t1).count();
  return r;
}

Status run_report(const QuantReportArgs& a) {
  const auto format = dense_quant_format(a.dense);
  if (!format && a.dense != "dense") return invalid_argument("--dense must be q4, fp8 or dense, got '" + a.dense + "'");
  const auto head = dense_quant_format(a.lm_head);
  if (!head && a.lm_head != "dense")
    return invalid_argument("--lm-head must be dense, q4 or fp8, got '" + a.lm_head + "'");
  if (!format && !head) return invalid_argument("nothing to compare: --dense and --lm-head are both dense");
  TF_ASSIGN_OR_RETURN(Glm5Config cfg, load_glm5_config(a.model + "/config.json"));
  std::unique_ptr<Ops> ops;
  if (a.device == "cuda") {
#if TF_HAVE_CUDA
    TF_ASSIGN_OR_RETURN(ops, make_cuda_ops(0, 8));
#else
    return unimplemented("--device cuda: this build has no CUDA");
#endif
  } else if (a.device == "cpu") {
    ops = make_cpu_ops();
  } else {
    return invalid_argument("--device must be cpu or cuda, got '" + a.device + "'");
  }
  std::mt19937 rng(a.seed);
  std::uniform_int_distribution<int32_t> pick(3, static_cast<int32_t>(cfg.text.vocab_size) - 61);
  std::vector<int32_t> ids(static_cast<size_t>(a.tokens));
  for (int32_t& id : ids) id = pick(rng);
  Glm5Options mo;
  mo.latent_dtype = DType::kF32;
  mo.page_size = 64;
  mo.num_pages = (a.tokens + 63) / 64 + 1;
  mo.weight_dtype = a.device == "cuda" ? DType::kBF16 : DType::kF32;
  TF_ASSIGN_OR_RETURN(Run ref, prefill(cfg, a.model, *ops, mo, ids));
  mo.dense_quant = format.value_or(MatrixFormat::kDense);
  mo.head_quant = head.value_or(MatrixFormat::kDense);
  TF_ASSIGN_OR_RETURN(Run q, prefill(cfg, a.model, *ops, mo, ids));
  const std::string quant = "DENSE=" + a.dense + " LM_HEAD=" + a.lm_head;
  TF_ASSIGN_OR_RETURN(LogitAgreement ag, compare_logits(ref.logits, q.logits));
  std::printf("quant-report: %s on %s, %lld prompt positions (seed %u)\n", a.model.c_str(), a.device.c_str(),
              static_cast<long long>(ag.rows), a.seed);
  std::printf("  reference (%s matrices): load %.1f s, prefill %.2f s\n", dtype_name(mo.weight_dtype), ref.load_s,
              ref.prefill_s);
  std::printf("  %s: load %.1f s (re-quantization included), prefill %.2f s\n", quant.c_str(), q.load_s,
              q.prefill_s);
  std::printf("  %s vs %s: mean KL %.4g nats (max %.4g), top-1 agreement %.4f\n", quant.c_str(),
              dtype_name(mo.weight_dtype), ag.mean_kl, ag.max_kl, ag.top1);
  return Status::ok();
}

}  // namespace

void add_quant_report_command(CLI::App& app) {
  auto args = std::make_shared<QuantReportArgs>();
  CLI::App* cmd = app.add_subcommand(
      "quant-report",
      "KL divergence and top-1 agreement of DENSE=q4/fp8 and LM_HEAD=q4/fp8 vs unquantized matrices on a checkpoint");
  cmd->add_option("--model", args->model, "checkpoint folder (e.g. from synth-checkpoint)")->required();
  cmd->add_option("--dense", args->dense, "q4, fp8 or dense (the large dense matrices as loaded)")->capture_default_str();
  cmd->add_option("--lm-head", args->lm_head, "dense, q4 or fp8 (LM_HEAD)")->capture_default_str();
  cmd->add_option("--device", args->device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--tokens", args->tokens, "random prompt tokens in the prefill")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "prompt seed")->capture_default_str();
  cmd->callback([args] {
    if (Status s = run_report(*args); !s.is_ok()) fail(s.to_string());
  });
}

}  // namespace tf::apps
