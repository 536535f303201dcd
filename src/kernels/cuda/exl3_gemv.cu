// EXL3 on the GPU, one weight at a time: W_hat decode and the GEMV behind
// CudaOps::exl3_matmul.
//
// Up to 8 rows (decode): one fused launch (fused_gemv_kernel). Grid (n/128 column
// blocks) x (splits of k), the splits of a column block forming one thread-block
// cluster. Each block: 16 warps, warp (n-tile j, k-half h) streams its tiles through a
// cp.async ring (exl3_stream.cuh, first copies issued before the programmatic-launch
// wait); meanwhile the block rotates its own slice of the input (x * suh, FWHT per
// 128 inputs, hi/lo fragments in shared memory: a k-split is a whole number of
// Hadamard blocks); the halves are summed in shared memory, then block rank 0 of the
// cluster sums the splits' partials in rank order through distributed shared memory,
// applies the output FWHT, svh and bias, and writes the result. No global scratch,
// no atomics; the split count depends on the shape only, so a row's bits do not depend
// on the batch.
//
// More rows (prefill): three launches per pass of 64 rows (rotate, gemv of
// exl3_gemv.cuh: each tile decoded once for all rows, epilogue). Decoding W_hat once
// for a cuBLAS GEMM is future work.
#include <cuda_fp16.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/exl3_gemv.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/exl3_kernels.h"
#include "kernels/cuda/exl3_launch.cuh"
#include "kernels/cuda/exl3_stream.cuh"

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
  exl3::decode_tile_to_w_hat<K, CB>(out, trellis + tile * (8 * K), tile / tiles_n, tile % tiles_n, tiles_n * 16,
                                    static_cast<int>(threadIdx.x & 31));
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

// ---- fused GEMV (up to 8 rows) ----------------------------------------------------

namespace cg = cooperative_groups;

constexpr int kFusedWk = 2;  // warps per n-tile: the block's k range in two halves
constexpr int kFusedWarps = kGemvWarps * kFusedWk;
constexpr int kFusedThreads = kFusedWarps * 32;
constexpr int kMaxCluster = 8;                 // portable cluster size
// Dynamic shared memory the fused kernel may ask for: 200 KB, or less on a GPU with less
// per block (sm_120 / sm_121: 99 KB); above it the three-launch path runs.
size_t fused_max_smem() { return std::min<size_t>(200 * 1024, device_limits().smem_per_block - 1024); }
// kExl3GemvAuto takes the fused kernel from this many tiles on (H200, K = 4, m = 1: 4096x8192
// fused 22.5 us vs 31.6 three-launch; 4096x2048 14.3 vs 11.8, its per-call cost dominating).
constexpr int64_t kFusedMinTiles = 65536;

struct FusedArgs {
  float* out;
  int64_t out_pitch, n_out;
  const float* x;
  int64_t x_pitch, k_in;
  const uint32_t* trellis;
  const __half* suh;
  const __half* svh;
  const __half* bias;  // null when absent
  int64_t tiles_k, tiles_n;
  int per_block;  // k-tiles per split (a multiple of 8: whole Hadamard blocks)
  int rows;       // 1..8
};

// Splits of k (the cluster size) and k-tiles per split, from the shape only: enough
// blocks to cover the GPU (~128), each warp keeping >= 16 tiles.
struct FusedShape {
  int splits, per_block;
};
FusedShape fused_shape(int64_t tiles_k, int64_t tiles_n) {
  const int64_t n_blocks = tiles_n / kGemvWarps;
  int c = 1;
  while (c < kMaxCluster && n_blocks * c < 128 && tiles_k >= 2 * c * 16) c *= 2;
  const int64_t per = (tiles_k + c - 1) / c;
  return {c, static_cast<int>((per + 7) / 8 * 8)};
}

size_t fused_smem_bytes(int bits, int per_block, int rows) {
  const size_t ring = static_cast<size_t>(kFusedWarps) * exl3::kStages * exl3::kStageTiles * 8 * bits * 4;
  const size_t xf = static_cast<size_t>(rows) * per_block * 64;  // 4 uint4 per 16 inputs per row
  const size_t red = static_cast<size_t>(kFusedWk) * rows * 128 * 4;
  return ring + xf + red;
}

template <int K, int CB, int Mode>
__global__ void __launch_bounds__(kFusedThreads, 1) fused_gemv_kernel(FusedArgs p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wn = warp % kGemvWarps, wk = warp / kGemvWarps;
  const int rows = p.rows, per_block = p.per_block;
  const int64_t tn = static_cast<int64_t>(blockIdx.x) * kGemvWarps + wn;
  const int64_t kb0 = static_cast<int64_t>(blockIdx.y) * per_block;
  const int64_t left = p.tiles_k - kb0;
  const int nk_b = left <= 0 ? 0 : (left < per_block ? static_cast<int>(left) : per_block);
  const int per_warp = per_block / kFusedWk, w0 = wk * per_warp;
  const int ntiles = max(0, min(per_warp, nk_b - w0));
  const size_t ring_bytes = static_cast<size_t>(kFusedWarps) * exl3::ring_words<K>() * 4;
  auto* xf = reinterpret_cast<uint4*>(smem_raw + ring_bytes);                         // [rows][per_block][4]
  auto* red = reinterpret_cast<float*>(smem_raw + ring_bytes + static_cast<size_t>(rows) * per_block * 64);
  const int64_t tile_words = 8 * K;
  const exl3::WarpStream<K> ws{p.trellis + ((kb0 + w0) * p.tiles_n + tn) * tile_words, p.tiles_n * tile_words,
                               ntiles, reinterpret_cast<uint32_t*>(smem_raw) + warp * exl3::ring_words<K>()};
  ws.template prologue<Mode>(lane);  // weights only: before waiting on the previous kernel
  pdl_launch_dependents();
  pdl_wait();

  // This block's inputs: FWHT128(x * suh) per 128-input block, as hi/lo fragments.
  const int chunks = nk_b / 8;
  for (int item = warp; item < rows * chunks; item += kFusedWarps) {
    const int r = item / chunks, ch = item % chunks;
    float v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t c = (kb0 + ch * 8) * 16 + lane + 32 * q;
      v[q] = c < p.k_in ? __fmul_rn(p.x[r * p.x_pitch + c], __half2float(p.suh[c])) : 0.0f;
    }
    exl3::warp_fwht128(v, exl3::kHadamardNorm);
#pragma unroll
    for (int q = 0; q < 4; ++q)
      exl3::store_fragment_value(xf + static_cast<int64_t>(r) * per_block * 4, ch * 128 + lane + 32 * q, v[q]);
  }
  __syncthreads();

  float acc[1][4] = {{0.0f, 0.0f, 0.0f, 0.0f}};
  ws.template run<CB, 1, Mode>(xf + w0 * 4, static_cast<int64_t>(per_block) * 4, rows, acc);

  // This warp's partial sums: red[k half][row][column].
  {
    const int g = lane >> 2, t = lane & 3, col = wn * 16 + g;
    float* mine = red + wk * rows * 128;
    if (2 * t < rows) {
      mine[(2 * t) * 128 + col] = acc[0][0];
      mine[(2 * t) * 128 + col + 8] = acc[0][2];
    }
    if (2 * t + 1 < rows) {
      mine[(2 * t + 1) * 128 + col] = acc[0][1];
      mine[(2 * t + 1) * 128 + col + 8] = acc[0][3];
    }
  }

  // Rank 0 of the cluster sums every non-empty partial in k order (rank, then half:
  // the legacy path's split order, so both give the same bits), FWHT, * svh + bias.
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // a block barrier too
  if (cluster.block_rank() == 0 && warp < rows) {
    const int r = warp;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    const int splits = static_cast<int>(cluster.num_blocks());
    for (int s = 0; s < splits; ++s) {
      const int64_t left_s = p.tiles_k - static_cast<int64_t>(s) * per_block;
      const float* part = cluster.map_shared_rank(red, s) + r * 128;
      for (int w = 0; w < kFusedWk; ++w) {
        if (left_s - static_cast<int64_t>(w) * per_warp <= 0) break;  // empty partial: skipped, as legacy has none
#pragma unroll
        for (int q = 0; q < 4; ++q) v[q] = __fadd_rn(v[q], part[w * rows * 128 + lane + 32 * q]);
      }
    }
    exl3::warp_fwht128(v, exl3::kHadamardNorm);
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int64_t c = static_cast<int64_t>(blockIdx.x) * 128 + lane + 32 * q;
      if (c < p.n_out) {
        float y = __fmul_rn(v[q], __half2float(p.svh[c]));
        if (p.bias) y = __fadd_rn(y, __half2float(p.bias[c]));
        p.out[r * p.out_pitch + c] = y;
      }
    }
  }
  cluster.sync();  // the other blocks' shared memory must outlive rank 0's reads
}

// GEMV variant knob (exl3_set_gemv_variant); TF_EXL3_GEMV=legacy and TF_EXL3_PDL=0 at start.
std::atomic<int> g_variant{-1};
std::atomic<int> g_pdl{-2};  // -2: TF_EXL3_PDL not read yet
std::atomic<int64_t> g_refusals{0};  // fused launches the device refused (exl3_fused_gemv_refusals)

int gemv_variant() {
  int v = g_variant.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("TF_EXL3_GEMV");
    v = e && std::strcmp(e, "legacy") == 0 ? kExl3GemvLegacy : kExl3GemvAuto;
    g_variant.store(v, std::memory_order_relaxed);
  }
  return v;
}

// PDL mode: -1 = defaults (off for the fused GEMV: measured slower on the H200, its
// early-launched blocks crowd the SMs; on for the grouped MoE), 0 = off, 1 = on.
int pdl_mode() {
  int v = g_pdl.load(std::memory_order_relaxed);
  if (v == -2) {
    const char* e = std::getenv("TF_EXL3_PDL");
    v = !e || !*e ? -1 : (std::strcmp(e, "0") == 0 ? 0 : 1);
    g_pdl.store(v, std::memory_order_relaxed);
  }
  return v;
}

bool use_pdl() { return pdl_mode() == 1; }

}  // namespace

bool exl3::pdl_enabled() { return pdl_mode() != 0; }

namespace {

template <typename Kernel>
cudaError_t launch_fused(Kernel kernel, const FusedArgs& a, int splits, size_t smem, cudaStream_t stream) {
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return e;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(a.tiles_n / kGemvWarps), static_cast<unsigned>(splits));
  cfg.blockDim = dim3(kFusedThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = 1;
  at[0].val.clusterDim.y = static_cast<unsigned>(splits);
  at[0].val.clusterDim.z = 1;
  at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[1].val.programmaticStreamSerializationAllowed = use_pdl() ? 1 : 0;
  cfg.attrs = at;
  cfg.numAttrs = 2;
  return cudaLaunchKernelEx(&cfg, kernel, a);
}

template <int K, int CB>
struct FusedKernels {
  static cudaError_t launch(int variant, const FusedArgs& a, int splits, size_t smem, cudaStream_t s) {
    // The timing-only variants exist for K = 4 mcg, the format of GLM-5.3-Flash's experts.
    if constexpr (K == 4 && CB == exl3::kCbMcg) {
      if (variant == kExl3GemvLoadOnly)
        return launch_fused(fused_gemv_kernel<K, CB, exl3::kLoadOnly>, a, splits, smem, s);
      if (variant == kExl3GemvDecodeOnly)
        return launch_fused(fused_gemv_kernel<K, CB, exl3::kDecodeOnly>, a, splits, smem, s);
    }
    return launch_fused(fused_gemv_kernel<K, CB, exl3::kNormal>, a, splits, smem, s);
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
  const int variant = gemv_variant();
  const bool large = tiles_k * tiles_n >= kFusedMinTiles;
  if (rows <= 8 && variant != kExl3GemvLegacy && (variant != kExl3GemvAuto || large)) {
    const FusedShape fs = fused_shape(tiles_k, tiles_n);
    const size_t smem = fused_smem_bytes(w.bits, fs.per_block, static_cast<int>(rows));
    if (smem <= fused_max_smem()) {
      FusedArgs a;
      a.out = static_cast<float*>(out.raw());
      a.out_pitch = pitch;
      a.n_out = n_out;
      a.x = x.data<float>();
      a.x_pitch = k_in;
      a.k_in = k_in;
      a.trellis = w.trellis.data<uint32_t>();
      a.suh = static_cast<const __half*>(w.suh.raw());
      a.svh = static_cast<const __half*>(w.svh.raw());
      a.bias = w.bias.is_null() ? nullptr : static_cast<const __half*>(w.bias.raw());
      a.tiles_k = tiles_k;
      a.tiles_n = tiles_n;
      a.per_block = fs.per_block;
      a.rows = static_cast<int>(rows);
      if (reinterpret_cast<uintptr_t>(a.trellis) % 16 == 0) {
        cudaError_t e = cudaSuccess;
        exl3_dispatch<FusedKernels>(w.bits, w.codebook, [&](auto kernels) {
          e = decltype(kernels)::launch(variant, a, fs.splits, smem, ctx.stream);
        });
        if (e == cudaSuccess) return;
        // A launch the device refuses (cluster or PDL support): the three-launch path gives
        // the same bits. Said once; a sticky error shows up at the next check anyway.
        (void)cudaGetLastError();
        if (g_refusals.fetch_add(1) == 0)
          std::fprintf(stderr, "exl3_matmul: fused GEMV launch refused (%s); using the three-launch path\n",
                       cudaGetErrorString(e));
      }
    }
  }
  // The fused kernel's partials (one per warp's k range), so that both paths give a row
  // the same bits whatever the batch.
  const int per = fused_shape(tiles_k, tiles_n).per_block / kFusedWk;
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

void exl3_set_gemv_variant(int variant) { g_variant.store(variant, std::memory_order_relaxed); }

void exl3_set_pdl(int mode) { g_pdl.store(mode < 0 ? -1 : (mode ? 1 : 0), std::memory_order_relaxed); }

int64_t exl3_fused_gemv_refusals() { return g_refusals.load(); }

}  // namespace tf::cuda
