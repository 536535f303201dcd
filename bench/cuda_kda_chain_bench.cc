// A KDA layer's decode core on the GPU at the model's shape (64 heads x 128 x 128 f32 state, C = 8192,
// conv width 4): kda_conv_qkv_rows then kda_recurrent_state_rows, graph-replayed, at 1 and 8 rows,
// with the recurrence launched plainly and with programmatic dependent launch behind the conv
// (kernels/cuda/cuda_kda_rows_pdl.h: its states loaded while the conv runs). Prints us per pair and
// per op beside the state-traffic floor, and checks that both launches give the same bits (outputs
// and states, from the same initial states). Then the low-rank gates (kda_lowrank_gates, bf16 f_b /
// g_b [C, 128]) before the conv vs on a side branch beside it: a measurement only. H200 run7s10, 1 row:
// conv+recurrence 7.52 -> 6.62 us with PDL; gates+conv+recurrence 9.27 in order vs 8.92 beside. The
// model tried the gates on that branch in the layer's own segment (TF_KDA_GATES, session 10): decode-1
// showed no gain (115.9 tok/s without either change vs 114.5 / 115.7 with both), so it was not kept.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "cuda_graph_timing.h"
#include "kernels/cuda/cuda_kda_rows_pdl.h"
#include "kernels/cuda/cuda_ops.h"

namespace {

using tf::Ops;
using tf::Tensor;

Tensor random_host(tf::Shape shape, uint32_t seed, float scale, float mean = 0.0f) {
  Tensor t = Tensor::empty(shape, tf::DType::kF32);
  uint32_t s = seed * 2654435761u + 1;
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    s ^= s << 13;
    s ^= s >> 17;
    s ^= s << 5;
    p[i] = mean + scale * (static_cast<float>(s & 0xFFFFFF) / 8388608.0f - 1.0f);
  }
  return t;
}

bool same_bytes(Ops& ops, const Tensor& a, const Tensor& b) {
  const Tensor ha = ops.to_host(a), hb = ops.to_host(b);
  return ha.nbytes() == hb.nbytes() && std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
}

struct Rows {
  std::vector<Tensor> conv, rec;  // per row: [3, K-1, C], [H, Dk, Dv]
  Tensor conv_addr, rec_addr;     // device int64 [b]
};

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "kda chain bench: %s\n", what);
    std::exit(1);
  }
}

}  // namespace

int main() {
  auto made = tf::make_cuda_ops(0);
  check(made.has_value(), "no CUDA ops");
  Ops& ops = **made;
  cudaStream_t stream = tf::cuda_ops_stream(ops);
  const int64_t h = 64, dk = 128, dv = 128, c = h * dk, kw = 4;
  const Tensor weight = ops.to_device(random_host({3, c, kw}, 1, 0.5f));
  for (int64_t b : {1, 8}) {
    const Tensor xq = ops.to_device(random_host({b, c}, 2, 1.0f)),
                 xk = ops.to_device(random_host({b, c}, 3, 1.0f)),
                 xv = ops.to_device(random_host({b, c}, 4, 1.0f));
    const Tensor g = ops.to_device(random_host({b, c}, 5, 0.05f, -0.1f));
    const Tensor beta = ops.to_device(random_host({b, h}, 6, 0.2f, 0.5f));
    const Tensor conv0 = ops.to_device(random_host({3, kw - 1, c}, 7, 1.0f));
    const Tensor rec0 = ops.to_device(random_host({h, dk, dv}, 8, 0.1f));
    Rows r;
    std::vector<int64_t> ca, ra;
    for (int64_t i = 0; i < b; ++i) {
      r.conv.push_back(ops.empty({3, kw - 1, c}));
      r.rec.push_back(ops.empty({h, dk, dv}));
      ca.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(r.conv.back().raw())));
      ra.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(r.rec.back().raw())));
    }
    r.conv_addr = ops.to_device(Tensor::view_of(ca.data(), {b}, tf::DType::kI64));
    r.rec_addr = ops.to_device(Tensor::view_of(ra.data(), {b}, tf::DType::kI64));
    tf::KdaRowsView view;
    view.rows = b;
    view.conv_states = r.conv_addr.data<int64_t>();
    view.recurrent_states = r.rec_addr.data<int64_t>();
    view.heads = h;
    view.key_dim = dk;
    view.value_dim = dv;
    Tensor cq = ops.empty({b, c}), ck = ops.empty({b, c}), cv = ops.empty({b, c}),
           core = ops.empty({b, h * dv});
    auto reset = [&] {
      for (int64_t i = 0; i < b; ++i) {
        ops.copy(r.conv[i], conv0);
        ops.copy(r.rec[i], rec0);
      }
    };
    const int64_t rank = 128;
    const Tensor fa = ops.to_device(random_host({b, rank}, 9, 1.0f)),
                 ga = ops.to_device(random_host({b, rank}, 10, 1.0f));
    const Tensor blog = ops.to_device(random_host({b, h}, 11, 1.0f));
    Tensor f_b = ops.empty({c, rank}, tf::DType::kBF16), g_b = ops.empty({c, rank}, tf::DType::kBF16);
    cudaMemset(f_b.raw(), 0x3c, f_b.nbytes());  // bf16 0x3c3c: ~0.011
    cudaMemset(g_b.raw(), 0x3c, g_b.nbytes());
    const Tensor dt_bias = ops.to_device(random_host({c}, 12, 0.5f)),
                 a_log = ops.to_device(random_host({h}, 13, 0.5f));
    Tensor g2 = ops.empty({b, c}), gate = ops.empty({b, c}), beta2 = ops.empty({b, h});
    auto gates = [&] {
      ops.kda_lowrank_gates(g2, gate, beta2, fa, ga, blog, f_b, g_b, dt_bias, a_log, false, 0.0f);
    };
    auto conv = [&] { ops.kda_conv_qkv_rows(cq, ck, cv, xq, xk, xv, view, weight); };
    auto rec = [&] { ops.kda_recurrent_state_rows(core, cq, ck, cv, g, beta, view); };
    // Bits: two steps from the same states, plain vs PDL, eagerly.
    Tensor out_plain, state_plain;
    for (bool pdl : {false, true}) {
      tf::cuda::kda_recurrent_rows_pdl() = pdl;
      reset();
      for (int step = 0; step < 2; ++step) {
        conv();
        rec();
      }
      if (!pdl) {
        out_plain = ops.empty({b, h * dv});
        ops.copy(out_plain, core);
        state_plain = ops.empty({h, dk, dv});
        ops.copy(state_plain, r.rec[b - 1]);
      } else {
        check(same_bytes(ops, out_plain, core), "outputs differ between plain and PDL launches");
        check(same_bytes(ops, state_plain, r.rec[b - 1]), "states differ between plain and PDL launches");
      }
    }
    std::printf("[kda-chain] %lld rows: plain and PDL recurrences give the same bits (2 steps)\n",
                static_cast<long long>(b));
    // Timing: 20 steps per graph, replayed.
    auto graph_us = [&](const std::function<void()>& step) {
      constexpr int kSteps = 20, kReps = 20;
      auto graph = ops.capture([&] {
        for (int i = 0; i < kSteps; ++i) step();
      });
      check(graph.has_value(), "capture failed");
      check(ops.replay(**graph).is_ok(), "replay failed");
      const double per_replay =
          tf::bench::event_seconds(stream, kReps, [&] { check(ops.replay(**graph).is_ok(), "replay failed"); });
      return per_replay * 1e6 / kSteps;
    };
    const double floor_us = 2.0 * static_cast<double>(b * h * dk * dv * 4) / 4.2e12 * 1e6;
    for (bool pdl : {false, true}) {
      tf::cuda::kda_recurrent_rows_pdl() = pdl;
      const double both = graph_us([&] {
        conv();
        rec();
      });
      const double conv_only = graph_us(conv), rec_only = graph_us(rec);
      std::printf(
          "[kda-chain] %lld rows, recurrence %-5s: conv+recurrence %.2f us (conv alone %.2f, recurrence "
          "alone "
          "%.2f; state floor %.2f us)\n",
          static_cast<long long>(b), pdl ? "PDL" : "plain", both, conv_only, rec_only, floor_us);
    }
    tf::cuda::kda_recurrent_rows_pdl() = true;
    const double serial = graph_us([&] {
      gates();
      conv();
      ops.kda_recurrent_state_rows(core, cq, ck, cv, g2, beta2, view);
    });
    const double beside = graph_us([&] {
      Ops::SideBranch side(ops);
      gates();
      side.end();
      conv();
      side.join();
      ops.kda_recurrent_state_rows(core, cq, ck, cv, g2, beta2, view);
    });
    std::printf(
        "[kda-chain] %lld rows, recurrence PDL: gates+conv+recurrence %.2f us in order, %.2f us with the "
        "gates "
        "beside the conv (gates alone %.2f)\n",
        static_cast<long long>(b), serial, beside, graph_us(gates));
  }
  return 0;
}
