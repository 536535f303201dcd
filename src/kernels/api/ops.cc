// The op interface: defaults for the ops a backend may leave out.
#include "kernels/api/ops.h"

#include <string>
#include <vector>

#include "core/status.h"

namespace tf {

void Ops::exl3_matmul(Tensor& /*out*/, const Tensor& /*x*/, const Exl3Weight& /*w*/) {
  throw StatusError(unimplemented(std::string(name()) + " backend: EXL3 weights (exl3_matmul)"));
}

Status Ops::upload_exl3_experts(Exl3ExpertTable& experts) {
  return check_exl3_expert_table(experts, "EXL3 experts");
}

// The quantized-expert ops' default: tokens grouped on the host (one download of ids and
// weights), experts in ascending id, each active expert's rows gathered, its gate and up
// projections (gate_up(e, g, u, xe)) and SwiGLU, its down projection (down(e, y, a)),
// then added into the rows in token order, so each token's outputs are summed in the
// order of its (ascending) ids.
void Ops::moe_experts_by_host_grouping(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                                       int64_t ne, int64_t h, int64_t il, float swiglu_limit, const char* op,
                                       const ExpertGateUp& gate_up, const ExpertDown& down) {
  if (x.dim() != 2 || x.size(1) != h || out.dim() != 2 || out.size(0) != x.size(0) || out.size(1) != h)
    throw StatusError(invalid_argument(std::string(op) + ": x " + x.describe() + " and out " + out.describe() +
                                       " must be [T, " + std::to_string(h) + "]"));
  const int64_t n = x.size(0);
  if (ids.dim() != 2 || ids.size(0) != n || ids.dtype() != DType::kI32 || weights.shape() != ids.shape())
    throw StatusError(invalid_argument(std::string(op) + ": ids " + ids.describe() + " and weights " +
                                       weights.describe() + " must both be [T, k] (ids int32)"));
  const int64_t k = ids.size(1);
  const Tensor ids_h = to_host(ids), wts_h = to_host(weights);
  std::vector<std::vector<int32_t>> tok(static_cast<size_t>(ne));
  std::vector<std::vector<float>> sc(static_cast<size_t>(ne));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t id = ids_h.data<int32_t>()[t * k + j];
      if (id < 0 || id >= ne)
        throw StatusError(out_of_range(std::string(op) + ": expert id " + std::to_string(id) + " at token " +
                                       std::to_string(t) + " outside [0, " + std::to_string(ne) + ")"));
      tok[id].push_back(static_cast<int32_t>(t));
      sc[id].push_back(wts_h.data<float>()[t * k + j]);
    }
  Tensor acc = zeros({n, h});
  for (int64_t e = 0; e < ne; ++e) {
    if (tok[e].empty()) continue;
    const int64_t m = static_cast<int64_t>(tok[e].size());
    const Tensor idx = to_device(Tensor::view_of(tok[e].data(), {m}, DType::kI32));
    const Tensor scale = to_device(Tensor::view_of(sc[e].data(), {m}, DType::kF32));
    Tensor xe = empty({m, h});
    gather_rows(xe, x, idx);
    Tensor gu = empty({m, 2 * il});
    Tensor g = gu.slice(1, 0, il), u = gu.slice(1, il, 2 * il);
    gate_up(e, g, u, xe);
    Tensor a = empty({m, il});
    swiglu(a, gu, swiglu_limit);
    Tensor y = empty({m, h});
    down(e, y, a);
    scatter_add_rows(acc, y, idx, scale);
  }
  copy(out, acc);
}

void Ops::moe_experts_exl3(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                           const Exl3ExpertTable& experts, float swiglu_limit) {
  const Status st = check_exl3_expert_table(experts, "moe_experts_exl3");
  if (!st.is_ok()) throw StatusError(st);
  moe_experts_by_host_grouping(
      out, x, ids, weights, experts.num_experts(), experts.hidden, experts.intermediate, swiglu_limit,
      "moe_experts_exl3",
      [&](int64_t e, Tensor& g, Tensor& u, const Tensor& xe) {
        exl3_matmul(g, xe, experts.gate[e]);
        exl3_matmul(u, xe, experts.up[e]);
      },
      [&](int64_t e, Tensor& y, const Tensor& a) { exl3_matmul(y, a, experts.down[e]); });
}

void Ops::moe_experts_fp8(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                          const Fp8ExpertStack& experts, float swiglu_limit) {
  const Status st = check_fp8_expert_stack(experts, "moe_experts_fp8");
  if (!st.is_ok()) throw StatusError(st);
  moe_experts_by_host_grouping(
      out, x, ids, weights, experts.num_experts(), experts.hidden(), experts.intermediate(), swiglu_limit,
      "moe_experts_fp8",
      [&](int64_t e, Tensor& g, Tensor& u, const Tensor& xe) {
        // matmul writes packed rows: each projection apart, then into its columns.
        Tensor packed = empty({xe.size(0), experts.intermediate()});
        matmul(packed, xe, experts.gate_of(e));
        copy(g, packed);
        matmul(packed, xe, experts.up_of(e));
        copy(u, packed);
      },
      [&](int64_t e, Tensor& y, const Tensor& a) { matmul(y, a, experts.down_of(e)); });
}

void Ops::quant_matmul(Tensor& /*out*/, const Tensor& /*x*/, const Matrix& w, bool /*accumulate*/) {
  throw StatusError(unimplemented(std::string(name()) + " backend: quantized weights (" + w.describe() + ")"));
}

void Ops::matmul_many(const std::vector<Tensor*>& outs, const Tensor& x, const std::vector<const Matrix*>& ws) {
  if (outs.size() != ws.size())
    throw StatusError(invalid_argument("matmul_many: " + std::to_string(outs.size()) + " outputs for " +
                                       std::to_string(ws.size()) + " matrices"));
  for (size_t i = 0; i < ws.size(); ++i)
    if (outs[i] == nullptr || ws[i] == nullptr)
      throw StatusError(invalid_argument("matmul_many: null output or matrix at " + std::to_string(i)));
  for (size_t i = 0; i < ws.size(); ++i) matmul(*outs[i], x, *ws[i]);
}

// Today's sequence of the KDA low-rank ups (the reference of the fused GPU op).
void Ops::kda_lowrank_gates(Tensor& g, Tensor& gate, Tensor& beta, const Tensor& fa, const Tensor& ga,
                            const Tensor& beta_logits, const Tensor& f_b, const Tensor& g_b, const Tensor& dt_bias,
                            const Tensor& a_log, bool has_lower_bound, float lower_bound) {
  if (fa.dim() != 2 || f_b.dim() != 2)
    throw StatusError(invalid_argument("kda_lowrank_gates: fa " + fa.describe() + " and f_b " + f_b.describe() +
                                       " must be [T, R] and [H*Dk, R]"));
  Tensor f = empty({fa.size(0), f_b.size(0)});
  matmul(f, fa, f_b);
  kda_gate(g, f, dt_bias, a_log, has_lower_bound, lower_bound);
  sigmoid(beta, beta_logits);
  matmul(gate, ga, g_b);
}

void Ops::mhc_pre(Tensor& post, Tensor& comb, Tensor& out, const Tensor& streams, const Tensor& fn,
                  const Tensor& base, const Tensor& scale, const Tensor& norm_weight, float norm_eps, float hc_eps,
                  int sinkhorn_iters) {
  if (streams.dim() != 3)
    throw StatusError(invalid_argument("mhc_pre: streams " + streams.describe() + " must be [T, M, D]"));
  const int64_t n = streams.size(0), m = streams.size(1), d = streams.size(2), mix = (2 + m) * m;
  if (fn.dim() != 2 || fn.size(0) != mix || fn.size(1) != m * d)
    throw StatusError(invalid_argument("mhc_pre: fn " + fn.describe() + " must be [" + std::to_string(mix) + ", " +
                                       std::to_string(m * d) + "] for streams " + streams.describe()));
  Tensor flat = streams.reshape({n, m * d});
  Tensor normed = empty({n, m * d});
  rms_norm(normed, flat, Tensor(), norm_eps);
  Tensor logits = empty({n, mix});
  matmul(logits, normed, fn);
  Tensor pre = empty({n, m});
  mhc_coefficients(pre, post, comb, logits, base, scale, hc_eps, sinkhorn_iters);
  Tensor collapsed = empty({n, d});
  mhc_collapse(collapsed, streams, pre);
  rms_norm(out, collapsed, norm_weight, norm_eps);
}

void Ops::mhc_expand_pre(Tensor& streams_out, Tensor& post, Tensor& comb, Tensor& out, const Tensor& y,
                         const Tensor& prev_post, const Tensor& prev_comb, const Tensor& residual, const Tensor& fn,
                         const Tensor& base, const Tensor& scale, const Tensor& norm_weight, float norm_eps,
                         float hc_eps, int sinkhorn_iters) {
  mhc_expand(streams_out, y, prev_post, prev_comb, residual);
  mhc_pre(post, comb, out, streams_out, fn, base, scale, norm_weight, norm_eps, hc_eps, sinkhorn_iters);
}

void Ops::sample_rows(std::span<SampleRowResult> /*out*/, std::span<const Tensor> /*rows*/,
                      std::span<const SampleRowParams> /*params*/) {
  throw StatusError(unimplemented(std::string(name()) + " backend: sampling on the device (sample_rows)"));
}

namespace {

// Without device graphs the "graph" is the function itself, called again on replay.
class CallAgainGraph final : public Ops::Graph {
 public:
  explicit CallAgainGraph(std::function<void()> fn) : fn(std::move(fn)) {}
  std::function<void()> fn;
};

}  // namespace

Expected<std::unique_ptr<Ops::Graph>> Ops::capture(std::function<void()> fn) {
  if (!fn) return invalid_argument("Ops::capture: no function");
  return std::unique_ptr<Graph>(new CallAgainGraph(std::move(fn)));
}

Status Ops::replay(Graph& graph) {
  auto* g = dynamic_cast<CallAgainGraph*>(&graph);
  if (g == nullptr) return invalid_argument(std::string(name()) + " backend: replay of a graph it did not capture");
  try {
    g->fn();
  } catch (const StatusError& e) {
    return e.status().with_context("graph replay");
  }
  return Status();
}

namespace {

void check_rows(const char* op, const Tensor& t, size_t rows) {
  if (t.dim() == 0 || t.size(0) != static_cast<int64_t>(rows))
    throw StatusError(invalid_argument(std::string(op) + ": " + t.describe() + " does not have one row per state (" +
                                       std::to_string(rows) + ")"));
}

}  // namespace

void Ops::causal_conv1d_silu_rows(Tensor& out, const Tensor& x, std::span<Tensor* const> states,
                                  const Tensor& weight) {
  check_rows("causal_conv1d_silu_rows x", x, states.size());
  check_rows("causal_conv1d_silu_rows out", out, states.size());
  for (size_t b = 0; b < states.size(); ++b) {
    const int64_t r = static_cast<int64_t>(b);
    Tensor ob = out.slice(0, r, r + 1);
    causal_conv1d_silu(ob, x.slice(0, r, r + 1), *states[b], weight);
  }
}

void Ops::kda_recurrent_rows(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                             const Tensor& beta, std::span<Tensor* const> states) {
  for (const Tensor* t : {static_cast<const Tensor*>(&out), &q, &k, &v, &g, &beta}) check_rows("kda_recurrent_rows", *t, states.size());
  for (size_t b = 0; b < states.size(); ++b) {
    const int64_t r = static_cast<int64_t>(b);
    Tensor ob = out.slice(0, r, r + 1);
    kda_recurrent(ob, q.slice(0, r, r + 1), k.slice(0, r, r + 1), v.slice(0, r, r + 1), g.slice(0, r, r + 1),
                  beta.slice(0, r, r + 1), *states[b]);
  }
}

void Ops::kda_conv_qkv_rows(Tensor& /*out_q*/, Tensor& /*out_k*/, Tensor& /*out_v*/, const Tensor& /*x_q*/,
                            const Tensor& /*x_k*/, const Tensor& /*x_v*/, const KdaRowsView& /*rows*/,
                            const Tensor& /*weight*/) {
  throw StatusError(unimplemented(std::string(name()) + " backend: kda_conv_qkv_rows"));
}

void Ops::kda_recurrent_state_rows(Tensor& /*out*/, const Tensor& /*q*/, const Tensor& /*k*/, const Tensor& /*v*/,
                                   const Tensor& /*g*/, const Tensor& /*beta*/, const KdaRowsView& /*rows*/) {
  throw StatusError(unimplemented(std::string(name()) + " backend: kda_recurrent_state_rows"));
}

}  // namespace tf
