// MLA sparse decode, step 2 on TF32 tensor cores (cuda_mla_decode.cu): split_mma_kernel, about f32
// accuracy (f32 pages; all pages with TF_MLA_DECODE_MMA=tf32). Included by cuda_mla_decode.cu only.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/mla_decode_layout.cuh"
#include "kernels/cuda/mla_decode_mma_steps.cuh"
#include "kernels/cuda/mla_decode_tile_steps.cuh"

namespace tf::cuda {
namespace {

// The same split on tensor cores (R a multiple of 128): scores S^T [32 tokens x 8 heads]
// = L [32 x R] Q^T, each warp over R/8 channels (partials added in warp order as
// above), and O^T [R x 8] += L^T P^T, each warp owning R/128 16-channel tiles of the
// accumulator (no cross-warp sum). mma.m16n8k8 TF32 with f32 operands split into a
// TF32 high and low part (q and P always; the latents when f32, bf16/fp8 values are
// exact in TF32), so products keep about f32 accuracy.
__device__ __forceinline__ uint32_t tf32_hi(float x) { return __float_as_uint(x) & 0xffffe000u; }
__device__ __forceinline__ uint32_t tf32_lo(float x) {
  return __float_as_uint(x - __uint_as_float(__float_as_uint(x) & 0xffffe000u)) & 0xffffe000u;
}

__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

struct MmaSmem {
  int qf, lat, sp, pr, alpha, total;  // offsets in floats; rows of R + 4
};

__host__ __device__ inline MmaSmem mma_smem(int r) {
  const int rs = r + 4;
  MmaSmem s{};
  s.qf = 0;                               // [kGroup][rs] q (f32; split into TF32 high and low parts as read)
  s.lat = s.qf + kGroup * rs;             // [kTile][rs] tile latents (f32)
  s.sp = s.lat + kTile * rs;              // [kWarps][kGroup][kTile] partial scores
  s.pr = s.sp + kWarps * kGroup * kTile;  // [kTile][kGroup] probabilities x token scale
  s.alpha = s.pr + kTile * kGroup;        // [kGroup]
  s.total = s.alpha + kGroup;
  return s;
}

// The tensor-core kernel's raw tile after its mma_smem floats, then the chunk's offsets
// and scales (chunk_tokens of them).
__host__ __device__ inline int mma_raw_bytes(int r, int es) { return (kTile * (r + 4) * es + 15) / 16 * 16; }
__host__ __device__ inline int mma_smem_bytes(int r, int es, int chunk_tokens) {
  return (mma_smem(r).total * 4 + 15) / 16 * 16 + mma_raw_bytes(r, es) + chunk_tokens * 12;
}

// kR > 0: R known at compile time (the model's 512), so the tile loops' divisions and
// bounds fold (fewer integer instructions on a latency-bound kernel); the same arithmetic.
template <typename T, bool kInline, int kR = 0>
__global__ void __launch_bounds__(kThreads, 2) split_mma_kernel(SplitArgs args) {
  constexpr bool kSplitLat = std::is_same_v<T, float>;
  extern __shared__ __align__(16) float sm[];
  const int r = kR > 0 ? kR : args.r, heads = args.heads, w = args.w;
  const float scale = args.scale;
  const MmaSmem L = mma_smem(r);
  float* qf = sm + L.qf;
  float* lat = sm + L.lat;
  float* sp = sm + L.sp;
  float* pr = sm + L.pr;
  float* alpha = sm + L.alpha;
  const int rs = r + 4, nq = r / 4;
  T* raw =
      reinterpret_cast<T*>(reinterpret_cast<unsigned char*>(sm) + (L.total * 4 + 15) / 16 * 16);  // next tile
  int64_t* offs =
      reinterpret_cast<int64_t*>(reinterpret_cast<unsigned char*>(raw) + mma_raw_bytes(r, sizeof(T)));
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
  {  // q does not depend on prep: split it while prep finishes.
    const int h0 = int(blockIdx.x) * kGroup, nh = min(kGroup, heads - h0);
    for (int i = threadIdx.x; i < kGroup * r; i += kThreads) {
      const int hh = i / r, x = i % r;
      const float v = hh < nh ? args.q[(b * heads + h0 + hh) * int64_t(r) + x] : 0.0f;
      qf[hh * rs + x] = v;
    }
  }
  const Workspace& ws = args.ws;
  const int h0 = int(blockIdx.x) * kGroup, nh = min(kGroup, heads - h0);
  int n = 0, t0 = 0, t1 = 0;
  if constexpr (kInline) {  // no prep kernel: the token list here (the f32 tile's space as scratch)
    n = inline_prep<std::is_same_v<T, __nv_fp8_e4m3>>(reinterpret_cast<int*>(lat), args, b, offs, t0, t1);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) ws.count[b] = n;  // for the combine
    pdl_launch_dependents();
    __syncthreads();
    if (t0 >= t1) return;  // an empty chunk (the combine skips it)
  } else {
    pdl_launch_dependents();
    pdl_wait();
    const SplitBlock blk = split_block(ws, heads);
    if (blk.t0 >= blk.t1) return;  // an empty chunk (the combine skips it)
    n = blk.n;
    t0 = blk.t0;
    t1 = blk.t1;
  }
  const int tok0 = t0 * kTile, ntok = (t1 - t0) * kTile, nvalid = min(n, t1 * kTile) - tok0;
  float* tsc = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(offs) + ntok * 8);
  if constexpr (!kInline) {
    for (int i = threadIdx.x; i < ntok; i += kThreads) {
      offs[i] = i < nvalid ? ws.offset[b * w + tok0 + i] : 0;
      tsc[i] = i < nvalid ? ws.tscale[b * w + tok0 + i] : 0.0f;
    }
    __syncthreads();
  }
  issue_tile<T>(raw, args.pages, offs, nvalid, nq, rs);
  cp_async_commit();
  const int kc = r / kWarps, kbase = warp * kc;            // score channels of this warp
  const int mtiles = r / 128, mbase = warp * mtiles * 16;  // output channels of this warp
  float acc[kMaxMmaTiles][4];
#pragma unroll
  for (int i = 0; i < kMaxMmaTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;
  for (int tile = t0; tile < t1; ++tile) {
    const int k = tile - t0, base = tile * kTile;
    cp_async_wait<0>();
    __syncthreads();
    for (int e = threadIdx.x; e < kTile * nq; e += kThreads) {  // dequantize (exact) into f32
      const int t = e / nq, x = (e - t * nq) * 4;
      *reinterpret_cast<float4*>(lat + t * rs + x) = load4<T>(raw, t * rs + x);
    }
    __syncthreads();
    if (tile + 1 < t1) {  // the next tile's copies run during this tile's products
      issue_tile<T>(raw, args.pages, offs + (k + 1) * kTile, nvalid - (k + 1) * kTile, nq, rs);
      cp_async_commit();
    }
    {  // Scores: two 16-token tiles x 8 heads over this warp's channels.
      float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      for (int k0 = kbase; k0 < kbase + kc; k0 += 8) {
        const float q0 = qf[g * rs + k0 + tq], q1 = qf[g * rs + k0 + tq + 4];
        const uint32_t bh0 = tf32_hi(q0), bh1 = tf32_hi(q1), bl0 = tf32_lo(q0), bl1 = tf32_lo(q1);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          const float* l0 = lat + (mt * 16 + g) * rs + k0 + tq;
          const float f[4] = {l0[0], l0[8 * rs], l0[4], l0[8 * rs + 4]};
          uint32_t a[4];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            a[i] = kSplitLat ? tf32_hi(f[i]) : __float_as_uint(f[i]);  // bf16/fp8: exact
          mma_tf32(c[mt], a, bh0, bh1);
          mma_tf32(c[mt], a, bl0, bl1);
          if constexpr (kSplitLat) {
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = tf32_lo(f[i]);
            mma_tf32(c[mt], a, bh0, bh1);
          }
        }
      }
      store_score_partials(sp, warp, g, tq, c);
    }
    __syncthreads();
    online_softmax_tile(sp, pr, alpha, tsc + k * kTile, base, n, scale, m_run, l_run);
    __syncthreads();
    {  // O^T [channels x heads] += L^T [channels x 32 tokens] P^T [32 x 8].
      rescale_accumulators(acc, alpha, tq);
#pragma unroll
      for (int k0 = 0; k0 < kTile; k0 += 8) {
        const float p0 = pr[(k0 + tq) * kGroup + g], p1 = pr[(k0 + tq + 4) * kGroup + g];
        const uint32_t bh0 = tf32_hi(p0), bh1 = tf32_hi(p1), bl0 = tf32_lo(p0), bl1 = tf32_lo(p1);
#pragma unroll
        for (int i = 0; i < kMaxMmaTiles; ++i) {
          if (i < mtiles) {
            const float* l0 = lat + (k0 + tq) * rs + mbase + i * 16 + g;
            const float f[4] = {l0[0], l0[8], l0[4 * rs], l0[4 * rs + 8]};
            uint32_t a[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) a[j] = kSplitLat ? tf32_hi(f[j]) : __float_as_uint(f[j]);
            mma_tf32(acc[i], a, bh0, bh1);
            mma_tf32(acc[i], a, bl0, bl1);
            if constexpr (kSplitLat) {
#pragma unroll
              for (int j = 0; j < 4; ++j) a[j] = tf32_lo(f[j]);
              mma_tf32(acc[i], a, bh0, bh1);
            }
          }
        }
      }
    }
    __syncthreads();
  }
  store_chunk_partials(ws, (b * chunks + chunk) * heads + h0, r, mbase, mtiles, nh, acc, m_run, l_run);
}

}  // namespace
}  // namespace tf::cuda
