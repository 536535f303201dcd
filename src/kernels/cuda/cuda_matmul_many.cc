// Ops::matmul_many on the GPU (cuda_matmul_many.h): grouping and dispatch, host side.
#include "kernels/cuda/cuda_matmul_many.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/quant_gemv.h"
#include "kernels/cuda/side_stream.h"
#include "kernels/cuda/small_gemm.h"

namespace tf::cuda {
namespace {

bool on_this_device(const CudaContext& ctx, const Tensor& t) {
  return t.device().kind == DeviceKind::kCuda && t.device().index == ctx.device;
}

bool overlaps(const Tensor& a, const Tensor& b) {
  const auto* a0 = static_cast<const char*>(a.raw());
  const auto* b0 = static_cast<const char*>(b.raw());
  return a.nbytes() > 0 && b.nbytes() > 0 && a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

// One matrix a group can take: what matmul would accept at decode rows. `k` its depth.
bool groupable(const CudaContext& ctx, const Tensor& out, const Tensor& x, const Matrix& w, int64_t& k) {
  if (w.dim() != 2 || w.device() != Device::cuda(ctx.device)) return false;
  k = w.size(1);
  const int64_t n = w.size(0);
  if (k <= 0 || n <= 0 || x.numel() % k != 0) return false;
  const int64_t m = x.numel() / k;
  if (m <= 0 || m > ctx.exact_rows) return false;
  if (out.dtype() != DType::kF32 || !on_this_device(ctx, out) || !out.is_contiguous() || out.numel() != m * n)
    return false;
  if (w.is_dense()) {
    const Tensor& d = w.dense();
    return (d.dtype() == DType::kF32 || d.dtype() == DType::kBF16) && d.is_contiguous();
  }
  return check_matrix(w, "matmul_many").is_ok();
}

// A group's key: matrices with equal keys go to one launch.
struct Key {
  MatrixFormat format;
  DType dtype;
  int64_t k;
  bool operator==(const Key&) const = default;
};

void run_quant(CudaContext& ctx, const Tensor& x, int64_t k, MatrixFormat format, const QuantGemvSegment* segs,
               int count) {
  const int64_t m = x.numel() / k;
  QuantGemvArgs a;
  a.x = x.data<float>();
  a.ldx = k;
  a.format = format;
  a.m = m;
  a.k = k;
  // As quant_matmul sets them for a matrix alone.
  a.legacy = !stream_gemv_selected();
  Tensor ws;
  if (a.legacy) {
    a.sm_count = current_sm_count();
    const int64_t bytes = quant_gemv_many_workspace_bytes(m, segs, count, k, a.sm_count);
    if (bytes > 0) {
      ws = ctx.scratch(bytes);
      a.workspace = ws.data<float>();
    }
  }
  quant_gemv_many(ctx.stream, a, segs, count);
}

void run_one(CudaContext& ctx, Tensor& out, const Tensor& x, const Matrix& w) {
  if (w.is_dense()) {
    matmul(ctx, out, x, w.dense(), false);
  } else {
    quant_matmul(ctx, out, x, w, false);
  }
}

}  // namespace

void matmul_many(CudaContext& ctx, const std::vector<Tensor*>& outs, const Tensor& x,
                 const std::vector<const Matrix*>& ws, SideStream* side, bool concurrent) {
  if (outs.size() != ws.size())
    throw StatusError(invalid_argument("matmul_many: " + std::to_string(outs.size()) + " outputs for " +
                                       std::to_string(ws.size()) + " matrices"));
  const size_t count = ws.size();
  for (size_t i = 0; i < count; ++i)
    if (outs[i] == nullptr || ws[i] == nullptr)
      throw StatusError(invalid_argument("matmul_many: null output or matrix at " + std::to_string(i)));

  // Grouping changes the order of the writes: only when no output overlaps x or
  // another output (then every order gives the loop's result).
  bool group = x.dtype() == DType::kF32 && on_this_device(ctx, x) && x.is_contiguous() && count >= 2;
  std::vector<int64_t> kdim(count, 0);
  std::vector<bool> ok(count, false);
  for (size_t i = 0; group && i < count; ++i) {
    ok[i] = groupable(ctx, *outs[i], x, *ws[i], kdim[i]);
    if (overlaps(*outs[i], x)) group = false;
    for (size_t j = 0; j < i; ++j)
      if (overlaps(*outs[i], *outs[j])) group = false;
  }
  // The launches in order: each group, then the matrices left alone.
  std::vector<std::function<void()>> launches;
  std::vector<bool> done(count, false);
  if (group) {
    for (size_t i = 0; i < count; ++i) {
      if (!ok[i] || done[i]) continue;
      const Matrix& wi = *ws[i];
      const Key key{wi.format(), wi.dtype(), kdim[i]};
      std::vector<size_t> members;
      for (size_t j = i; j < count; ++j)
        if (ok[j] && !done[j] && Key{ws[j]->format(), ws[j]->dtype(), kdim[j]} == key) members.push_back(j);
      if (members.size() < 2) continue;  // alone: the loop below
      // Launches of at most 8 matrices (both kernels' limit).
      for (size_t c0 = 0; c0 < members.size(); c0 += kSmallGemmMaxMatrices) {
        const size_t c1 = std::min(members.size(), c0 + kSmallGemmMaxMatrices);
        const int cnt = static_cast<int>(c1 - c0);
        if (key.format == MatrixFormat::kDense) {
          std::array<SmallGemmMatrix, kSmallGemmMaxMatrices> mats{};
          for (size_t c = c0; c < c1; ++c) {
            const size_t j = members[c];
            SmallGemmMatrix& s = mats[c - c0];
            s.out = outs[j]->data<float>();
            s.ldo = ws[j]->size(0);
            s.w = ws[j]->dense().raw();
            s.w_dtype = ws[j]->dtype();
            s.n = ws[j]->size(0);
          }
          launches.push_back([&ctx, &x, key, mats, cnt] {
            try {
              small_gemm_many(ctx.stream, x.data<float>(), key.k, x.numel() / key.k, key.k, mats.data(), cnt, false);
            } catch (const StatusError& e) {
              throw StatusError(Status(e.status().code(), "matmul_many: " + e.status().message()));
            }
          });
        } else {
          static_assert(kQuantGemvMaxSegments >= kSmallGemmMaxMatrices);
          std::array<QuantGemvSegment, kSmallGemmMaxMatrices> segs{};
          for (size_t c = c0; c < c1; ++c) {
            const size_t j = members[c];
            QuantGemvSegment& s = segs[c - c0];
            s.out = outs[j]->data<float>();
            s.ldo = ws[j]->size(0);
            s.codes = ws[j]->codes().raw();
            s.scales = ws[j]->scales().raw();
            s.n = ws[j]->size(0);
          }
          launches.push_back([&ctx, &x, key, segs, cnt] { run_quant(ctx, x, key.k, key.format, segs.data(), cnt); });
        }
      }
      for (size_t j : members) done[j] = true;
    }
  }
  for (size_t i = 0; i < count; ++i)
    if (!done[i]) launches.push_back([&ctx, &x, out = outs[i], w = ws[i]] { run_one(ctx, *out, x, *w); });

  // With a side stream, everything after the first launch runs beside it: the outputs do
  // not overlap (group), and the first launch (a KDA layer's q/k/v GEMV) takes the longest.
  // Only at decode rows (a grouped launch exists, so m <= exact_rows): latency-bound kernels.
  const bool grouped = std::find(done.begin(), done.end(), true) != done.end();
  if (side != nullptr && group && grouped && launches.size() >= 2 && !side->open()) {
    side->begin(ctx, concurrent);
    try {
      for (size_t i = 1; i < launches.size(); ++i) launches[i]();
      side->end(ctx);
    } catch (...) {
      (void)side->close(ctx);
      throw;
    }
    launches[0]();
    side->join(ctx);
    return;
  }
  for (const auto& launch : launches) launch();
}

}  // namespace tf::cuda
