// The op interface: defaults for the ops a backend may leave out.
#include "kernels/api/ops.h"

#include <string>

#include "core/status.h"

namespace tf {

void Ops::exl3_matmul(Tensor& /*out*/, const Tensor& /*x*/, const Exl3Weight& /*w*/) {
  throw StatusError(unimplemented(std::string(name()) + " backend: EXL3 weights (exl3_matmul)"));
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

}  // namespace tf
