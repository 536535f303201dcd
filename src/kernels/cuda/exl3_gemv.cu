// EXL3 on the GPU, one weight at a time: W_hat decode and the GEMV behind
// CudaOps::exl3_matmul (scheme and numerics: exl3_gemv.cuh).
//
// Three launches per pass of up to 8 rows (64 when the call has more than 8): rotate
// (x * suh, FWHT, hi/lo fragments), gemv (grid: 128-column blocks x k-splits; 8 warps,
// one n-tile each, every decoded tile applied to all rows of the pass), epilogue (sum of
// the k-splits, FWHT, * svh + bias, cut to the caller's width and pitch). Prefill thus
// decodes each weight once per 64 rows; decoding W_hat once for a cuBLAS GEMM is future work.
#include <cuda_fp16.h>

#include <algorithm>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/exl3_kernels.h"
#include "kernels/cuda/exl3_launch.cuh"

namespace tf::cuda {
namespace {

using exl3::kGemvWarps;

// One warp per tile: the lane's eight values scattered to W_hat [k, n] (fp16).
template <int K, int CB>
__global__ void __launch_bounds__(256)
    decode_w_hat_kernel(__half* __restrict__ out, const uint32_t* __restrict__ trellis, int64_t tiles_k,
                        int64_t tiles_n) {
  const int64_t tile = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  if (tile >= tiles_k * tiles_n) return;  // warp-uniform
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  uint32_t own[exl3::LaneWords<K>::kOwn];
  exl3::load_fragment_words<K>(trellis + tile * (8 * K), lane, own);
  uint32_t a[4];
  exl3::decode_fragment<K, CB>(own, lane, a);
  const int64_t tk = tile / tiles_n, tn = tile % tiles_n, n = tiles_n * 16;
  // a[q] holds positions j = (0,1), (4,5), (2,3), (6,7): row 2t + (j&1) + 8*((j>>1)&1), col g + 8*(j>>2).
  const int jfirst[4] = {0, 4, 2, 6};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int j = jfirst[q];
    const int row = 2 * t + 8 * ((j >> 1) & 1), col = g + 8 * (j >> 2);
    __half* o = out + (tk * 16 + row) * n + tn * 16 + col;
    o[0] = __ushort_as_half(static_cast<unsigned short>(a[q] & 0xFFFFu));
    o[n] = __ushort_as_half(static_cast<unsigned short>(a[q] >> 16));
  }
}

// xr rows: FWHT128(x * suh) as hi/lo fragments. grid (k/128, rows), 128 threads.
__global__ void __launch_bounds__(128)
    rotate_kernel(uint4* __restrict__ xr, const float* __restrict__ x, int64_t x_pitch, int64_t k_in,
                  const __half* __restrict__ suh, int64_t k) {
  __shared__ float smem[128];
  const int64_t row = blockIdx.y, c = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  const float v = c < k_in ? __fmul_rn(x[row * x_pitch + c], __half2float(suh[c])) : 0.0f;
  const float r = exl3::block_fwht128(v, smem);
  exl3::store_fragment_value(xr + row * (k / 16) * 4, static_cast<int>(c), r);
}

// RT 8-row tiles per pass (1: up to 8 rows; 8: up to 64 rows, each tile decoded once for all).
template <int K, int CB, int RT>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(float* __restrict__ partial, const uint32_t* __restrict__ trellis, const uint4* __restrict__ xr,
                int64_t tiles_k, int64_t tiles_n, int per_split, int rows) {
  const int warp = threadIdx.x >> 5;
  const int64_t tn = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  const int64_t tk0 = static_cast<int64_t>(blockIdx.y) * per_split;
  const int ntiles = static_cast<int>(std::min<int64_t>(per_split, tiles_k - tk0));
  const int64_t tile_words = 8 * K, n = tiles_n * 16;
  float acc[RT][4];
  exl3::gemv_warp<K, CB, RT>(trellis + (tk0 * tiles_n + tn) * tile_words, tiles_n * tile_words, ntiles,
                             xr + tk0 * 4, tiles_k * 4, rows, acc);
  exl3::store_partial<RT>(partial + blockIdx.y * rows * n, n, tn * 16, rows, acc);
}

// out[row, c] = FWHT128(sum_s partial[s, row, :])[c] * svh[c] + bias[c] for c < n_out.
// grid (ceil(n_out/128), rows), 128 threads.
__global__ void __launch_bounds__(128)
    epilogue_kernel(float* __restrict__ out, int64_t out_pitch, int64_t n_out, const float* __restrict__ partial,
                    int splits, int rows, int64_t n, const __half* __restrict__ svh, const __half* __restrict__ bias) {
  __shared__ float smem[128];
  const int64_t row = blockIdx.y, c = static_cast<int64_t>(blockIdx.x) * 128 + threadIdx.x;
  float v = 0.0f;
  for (int s = 0; s < splits; ++s) v = __fadd_rn(v, partial[(static_cast<int64_t>(s) * rows + row) * n + c]);
  v = exl3::block_fwht128(v, smem);
  if (c < n_out) {
    float y = __fmul_rn(v, __half2float(svh[c]));
    if (bias) y = __fadd_rn(y, __half2float(bias[c]));
    out[row * out_pitch + c] = y;
  }
}

template <int K, int CB>
struct GemvKernels {
  static void decode(dim3 grid, cudaStream_t s, __half* out, const uint32_t* tr, int64_t tk, int64_t tn) {
    decode_w_hat_kernel<K, CB><<<grid, 256, 0, s>>>(out, tr, tk, tn);
  }
  static void gemv(dim3 grid, cudaStream_t s, float* part, const uint32_t* tr, const uint4* xr, int64_t tk,
                   int64_t tn, int per, int rows) {
    if (rows <= 8) gemv_kernel<K, CB, 1><<<grid, kGemvWarps * 32, 0, s>>>(part, tr, xr, tk, tn, per, rows);
    else gemv_kernel<K, CB, 8><<<grid, kGemvWarps * 32, 0, s>>>(part, tr, xr, tk, tn, per, rows);
  }
};

void check_device_weight(const CudaContext& ctx, const Exl3Weight& w, const char* op) {
  const Status s = check_exl3_weight(w, op);
  if (!s.is_ok()) throw StatusError(s);
  const Device d = w.trellis.device();
  if (d.kind != DeviceKind::kCuda || d.index != ctx.device)
    throw StatusError(invalid_argument(std::string(op) + ": EXL3 trellis " + w.trellis.describe() +
                                       " is not on cuda:" + std::to_string(ctx.device) +
                                       " (upload the weight first: Ops::upload_exl3_experts or to_device)"));
}

int64_t round_up(int64_t n, int64_t a) { return (n + a - 1) / a * a; }

}  // namespace

Tensor exl3_decode_w_hat(CudaContext& ctx, const Exl3Weight& w) {
  check_device_weight(ctx, w, "exl3_decode_w_hat");
  const int64_t tk = w.trellis.size(0), tn = w.trellis.size(1);
  auto storage = ctx.alloc->allocate(static_cast<size_t>(tk * tn * 256 * 2));
  if (!storage) throw StatusError(storage.status());
  Tensor out = Tensor::on_storage(*storage, 0, {tk * 16, tn * 16}, DType::kF16);
  const dim3 grid(grid_1d(tk * tn * 32, 256));
  exl3_dispatch<GemvKernels>(w.bits, w.codebook, [&](auto kernels) {
    decltype(kernels)::decode(grid, ctx.stream, static_cast<__half*>(out.raw()), w.trellis.data<uint32_t>(), tk,
                              tn);
  });
  check_launch("exl3_decode_w_hat");
  return out;
}

void exl3_matmul(CudaContext& ctx, Tensor& out, const Tensor& x, const Exl3Weight& w) {
  check_device_weight(ctx, w, "exl3_matmul");
  check_dev(ctx, "exl3_matmul x", x, DType::kF32);
  const int64_t k = w.in_features(), n = w.out_features();
  if (x.dim() < 1 || x.size(-1) == 0 || x.size(-1) > k)
    throw StatusError(invalid_argument("exl3_matmul: input " + x.describe() + " is wider than the " +
                                       std::to_string(k) + " (padded) inputs of the EXL3 weight, or empty"));
  const int64_t k_in = x.size(-1), rows = x.numel() / k_in;
  const bool out_on_dev = out.device().kind == DeviceKind::kCuda && out.device().index == ctx.device;
  if (out.dtype() != DType::kF32 || !out_on_dev || out.dim() < 1 || out.size(-1) == 0 || out.size(-1) > n ||
      out.stride(-1) != 1 || out.numel() != rows * out.size(-1) ||
      !(out.is_contiguous() || out.dim() == 2))
    throw StatusError(invalid_argument("exl3_matmul: output " + out.describe() + " must be f32 on cuda:" +
                                       std::to_string(ctx.device) + ", [" + std::to_string(rows) +
                                       ", <= " + std::to_string(n) + "] with a packed last dimension"));
  const int64_t n_out = out.size(-1);
  const int64_t pitch = out.is_contiguous() ? n_out : out.stride(0);
  if (rows == 0) return;

  const int64_t tiles_k = k / 16, tiles_n = n / 16;
  const int per = exl3::tiles_per_split(tiles_k);
  const int splits = static_cast<int>((tiles_k + per - 1) / per);
  // Passes of up to 8 rows (decode), else of up to 64 (prefill: each tile decoded once per
  // 64 rows). A row's arithmetic is the same in either (same k-split, MMA columns independent).
  const int64_t pass = rows <= 8 ? 8 : 64;
  const int64_t chunk = std::min<int64_t>(rows, pass);
  const int64_t xr_bytes = round_up(chunk * k * 4, 256);
  Tensor scratch = ctx.scratch(xr_bytes + splits * chunk * n * 4);
  auto* xr = static_cast<uint4*>(scratch.raw());
  auto* partial = reinterpret_cast<float*>(static_cast<char*>(scratch.raw()) + xr_bytes);
  const __half* suh = static_cast<const __half*>(w.suh.raw());
  const __half* svh = static_cast<const __half*>(w.svh.raw());
  const __half* bias = w.bias.is_null() ? nullptr : static_cast<const __half*>(w.bias.raw());
  for (int64_t r0 = 0; r0 < rows; r0 += pass) {
    const int rs = static_cast<int>(std::min<int64_t>(pass, rows - r0));
    rotate_kernel<<<dim3(static_cast<unsigned>(k / 128), rs), 128, 0, ctx.stream>>>(
        xr, x.data<float>() + r0 * k_in, k_in, k_in, suh, k);
    check_launch("exl3_matmul (rotate)");
    const dim3 grid(static_cast<unsigned>(tiles_n / kGemvWarps), static_cast<unsigned>(splits));
    exl3_dispatch<GemvKernels>(w.bits, w.codebook, [&](auto kernels) {
      decltype(kernels)::gemv(grid, ctx.stream, partial, w.trellis.data<uint32_t>(), xr, tiles_k, tiles_n, per, rs);
    });
    check_launch("exl3_matmul (gemv)");
    epilogue_kernel<<<dim3(static_cast<unsigned>((n_out + 127) / 128), rs), 128, 0, ctx.stream>>>(
        static_cast<float*>(out.raw()) + r0 * pitch, pitch, n_out, partial, splits, rs, n, svh, bias);
    check_launch("exl3_matmul (epilogue)");
  }
}

}  // namespace tf::cuda
