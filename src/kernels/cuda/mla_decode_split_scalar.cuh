// MLA sparse decode, step 2 on CUDA cores (cuda_mla_decode.cu): the first split kernel (a synchronous
// gather per tile; TF_MLA_DECODE_SPLIT=v1) and the pipelined one (split_pipe_kernel: the same
// arithmetic with the next tile copied while this one is used). Included by cuda_mla_decode.cu only.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/mla_decode_layout.cuh"
#include "kernels/cuda/mla_decode_tile_steps.cuh"

namespace tf::cuda {
namespace {

struct SplitSmem {
  int q, lat, sp, pr, alpha, total;  // offsets in floats
};

__host__ __device__ inline SplitSmem split_smem(int r) {
  const int groups = kThreads / quads_pow2(r);
  SplitSmem s{};
  s.q = 0;                   // [kGroup][R] the group's queries
  s.lat = s.q + kGroup * r;  // [kTile][R + 4] tile latents; at the end [groups][kGroup][R]
  s.sp = s.lat + max(kTile * (r + 4), groups * kGroup * r);
  s.pr = s.sp + kWarps * kGroup * kTile;  // [kWarps][kGroup][kTile] partial scores
  s.alpha = s.pr + kTile * kGroup;        // [kTile][kGroup] probabilities x token scale
  s.total = s.alpha + kGroup;             // [kGroup] rescale of the accumulators
  return s;
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 2)
    split_kernel(Workspace ws, const void* __restrict__ pages, const float* __restrict__ q, int w, int heads,
                 int r, float scale) {
  extern __shared__ __align__(16) float sm[];
  const SplitSmem L = split_smem(r);
  float* qs = sm + L.q;
  float* lat = sm + L.lat;
  float* sp = sm + L.sp;
  float* pr = sm + L.pr;
  float* alpha = sm + L.alpha;
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t b = blockIdx.z;
  const SplitBlock blk = split_block(ws, heads);
  if (blk.t0 >= blk.t1) return;  // an empty chunk (the combine skips it)
  const int n = blk.n, t0 = blk.t0, t1 = blk.t1, h0 = blk.h0, nh = blk.nh;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rs = r + 4, nq = r / 4;
  for (int i = threadIdx.x; i < kGroup * r; i += kThreads) {
    const int hh = i / r;
    qs[i] = hh < nh ? q[(b * heads + h0 + hh) * int64_t(r) + i % r] : 0.0f;
  }
  const int64_t* offs = ws.offset + b * w;
  const float* tsc = ws.tscale + b * w;
  // Scores: warp `warp` takes channels [c0, c1) (a multiple of 4 wide), lane = token.
  const int ks = (r + 4 * kWarps - 1) / (4 * kWarps) * 4;
  const int c0 = min(r, warp * ks), c1 = min(r, c0 + ks);
  // Weighted sum: thread = channel quad `quad` x token group `grp`.
  const int qp = quads_pow2(r), groups = kThreads / qp, quad = threadIdx.x % qp, grp = threadIdx.x / qp;
  float acc[kGroup][4];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) acc[h][0] = acc[h][1] = acc[h][2] = acc[h][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;  // warp h: head h's running max and sum
  for (int tile = t0; tile < t1; ++tile) {
    const int base = tile * kTile;
    gather_tile_latents<T>(lat, pages, offs, base, n, nq, rs);
    __syncthreads();
    {
      float s[kGroup];
#pragma unroll
      for (int h = 0; h < kGroup; ++h) s[h] = 0.0f;
      const float* lrow = lat + lane * rs;
      for (int x = c0; x < c1; x += 4) {
        const float4 lv = *reinterpret_cast<const float4*>(lrow + x);
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          const float4 qv = *reinterpret_cast<const float4*>(qs + h * r + x);
          s[h] = fmaf(qv.x, lv.x, s[h]);
          s[h] = fmaf(qv.y, lv.y, s[h]);
          s[h] = fmaf(qv.z, lv.z, s[h]);
          s[h] = fmaf(qv.w, lv.w, s[h]);
        }
      }
#pragma unroll
      for (int h = 0; h < kGroup; ++h) sp[(warp * kGroup + h) * kTile + lane] = s[h];
    }
    __syncthreads();
    online_softmax_tile(sp, pr, alpha, tsc + base, base, n, scale, m_run, l_run);
    __syncthreads();
    if (quad < nq) {
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float a = alpha[h];
        acc[h][0] *= a;
        acc[h][1] *= a;
        acc[h][2] *= a;
        acc[h][3] *= a;
      }
      for (int t = grp; t < kTile; t += groups) {
        const float4 lv = *reinterpret_cast<const float4*>(lat + t * rs + quad * 4);
        const float4 p0 = *reinterpret_cast<const float4*>(pr + t * kGroup);
        const float4 p1 = *reinterpret_cast<const float4*>(pr + t * kGroup + 4);
        const float p[kGroup] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          acc[h][0] = fmaf(p[h], lv.x, acc[h][0]);
          acc[h][1] = fmaf(p[h], lv.y, acc[h][1]);
          acc[h][2] = fmaf(p[h], lv.z, acc[h][2]);
          acc[h][3] = fmaf(p[h], lv.w, acc[h][3]);
        }
      }
    }
    __syncthreads();
  }
  // The token groups' accumulators, added in group order.
  float* red = lat;  // [groups][kGroup][R]
  if (quad < nq) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h)
      *reinterpret_cast<float4*>(red + (grp * kGroup + h) * r + quad * 4) =
          make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
  }
  __syncthreads();
  const int64_t part = (b * chunks + chunk) * heads + h0;  // (row, chunk, first head of the group)
  for (int i = threadIdx.x; i < nh * r; i += kThreads) {
    const int h = i / r, x = i % r;
    float o = 0.0f;
    for (int g = 0; g < groups; ++g) o += red[(g * kGroup + h) * r + x];
    ws.part_o[(part + h) * r + x] = o;
  }
  if (lane == 0 && warp < nh) {
    ws.part_ml[(part + warp) * 2] = m_run;
    ws.part_ml[(part + warp) * 2 + 1] = l_run;
  }
}

template <typename T, bool kInline>
__global__ void __launch_bounds__(kThreads, 2) split_pipe_kernel(SplitArgs a) {
  extern __shared__ __align__(16) unsigned char smb[];
  const int r = a.r, heads = a.heads, w = a.w;
  const PipeSmem L = pipe_smem(r, int(sizeof(T)), 0);
  float* qs = reinterpret_cast<float*>(smb + L.q);
  float* sp = reinterpret_cast<float*>(smb + L.sp);
  float* pr = reinterpret_cast<float*>(smb + L.pr);
  float* alpha = reinterpret_cast<float*>(smb + L.alpha);
  T* tiles = reinterpret_cast<T*>(smb + L.tiles);
  int64_t* offs = reinterpret_cast<int64_t*>(smb + L.offs);
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t b = blockIdx.z;
  const int h0 = int(blockIdx.x) * kGroup, nh = min(kGroup, heads - h0);
  // q does not depend on prep: load it while prep finishes.
  for (int i = threadIdx.x; i < kGroup * r; i += kThreads) {
    const int hh = i / r;
    qs[i] = hh < nh ? a.q[(b * heads + h0 + hh) * int64_t(r) + i % r] : 0.0f;
  }
  const Workspace& ws = a.ws;
  int n = 0, t0 = 0, t1 = 0;
  if constexpr (kInline) {  // no prep kernel: the token list here (tiles' space as scratch)
    n = inline_prep<std::is_same_v<T, __nv_fp8_e4m3>>(reinterpret_cast<int*>(tiles), a, b, offs, t0, t1);
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
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rs = r + 4, nq = r / 4;
  const int tok0 = t0 * kTile, ntok = (t1 - t0) * kTile, nvalid = min(n, t1 * kTile) - tok0;
  float* tsc = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(offs) + ntok * 8);
  if constexpr (!kInline) {
    for (int i = threadIdx.x; i < ntok; i += kThreads) {
      offs[i] = i < nvalid ? ws.offset[b * w + tok0 + i] : 0;
      tsc[i] = i < nvalid ? ws.tscale[b * w + tok0 + i] : 0.0f;
    }
    __syncthreads();
  }
  const int tile_elems = kTile * rs;
  issue_tile<T>(tiles, a.pages, offs, nvalid, nq, rs);
  cp_async_commit();
  const int ks = (r + 4 * kWarps - 1) / (4 * kWarps) * 4;
  const int c0 = min(r, warp * ks), c1 = min(r, c0 + ks);
  const int qp = quads_pow2(r), groups = kThreads / qp, quad = threadIdx.x % qp, grp = threadIdx.x / qp;
  float acc[kGroup][4];
#pragma unroll
  for (int h = 0; h < kGroup; ++h) acc[h][0] = acc[h][1] = acc[h][2] = acc[h][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;
  for (int tile = t0; tile < t1; ++tile) {
    const int k = tile - t0, base = tile * kTile;
    if (tile + 1 < t1) {
      issue_tile<T>(tiles + ((k + 1) & 1) * tile_elems, a.pages, offs + (k + 1) * kTile,
                    nvalid - (k + 1) * kTile, nq, rs);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const T* lat = tiles + (k & 1) * tile_elems;
    {
      float s[kGroup];
#pragma unroll
      for (int h = 0; h < kGroup; ++h) s[h] = 0.0f;
      const int lrow = lane * rs;
      for (int x = c0; x < c1; x += 4) {
        const float4 lv = load4<T>(lat, lrow + x);
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          const float4 qv = *reinterpret_cast<const float4*>(qs + h * r + x);
          s[h] = fmaf(qv.x, lv.x, s[h]);
          s[h] = fmaf(qv.y, lv.y, s[h]);
          s[h] = fmaf(qv.z, lv.z, s[h]);
          s[h] = fmaf(qv.w, lv.w, s[h]);
        }
      }
#pragma unroll
      for (int h = 0; h < kGroup; ++h) sp[(warp * kGroup + h) * kTile + lane] = s[h];
    }
    __syncthreads();
    online_softmax_tile(sp, pr, alpha, tsc + k * kTile, base, n, a.scale, m_run, l_run);
    __syncthreads();
    if (quad < nq) {
#pragma unroll
      for (int h = 0; h < kGroup; ++h) {
        const float al = alpha[h];
        acc[h][0] *= al;
        acc[h][1] *= al;
        acc[h][2] *= al;
        acc[h][3] *= al;
      }
      for (int t = grp; t < kTile; t += groups) {
        const float4 lv = load4<T>(lat, t * rs + quad * 4);
        const float4 p0 = *reinterpret_cast<const float4*>(pr + t * kGroup);
        const float4 p1 = *reinterpret_cast<const float4*>(pr + t * kGroup + 4);
        const float p[kGroup] = {p0.x, p0.y, p0.z, p0.w, p1.x, p1.y, p1.z, p1.w};
#pragma unroll
        for (int h = 0; h < kGroup; ++h) {
          acc[h][0] = fmaf(p[h], lv.x, acc[h][0]);
          acc[h][1] = fmaf(p[h], lv.y, acc[h][1]);
          acc[h][2] = fmaf(p[h], lv.z, acc[h][2]);
          acc[h][3] = fmaf(p[h], lv.w, acc[h][3]);
        }
      }
    }
    __syncthreads();
  }
  // The token groups' accumulators, added in group order (the tiles' space is free).
  float* red = reinterpret_cast<float*>(tiles);  // [groups][kGroup][R]
  if (quad < nq) {
#pragma unroll
    for (int h = 0; h < kGroup; ++h)
      *reinterpret_cast<float4*>(red + (grp * kGroup + h) * r + quad * 4) =
          make_float4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]);
  }
  __syncthreads();
  const int64_t part = (b * chunks + chunk) * heads + h0;
  for (int i = threadIdx.x; i < nh * r; i += kThreads) {
    const int h = i / r, x = i % r;
    float o = 0.0f;
    for (int g = 0; g < groups; ++g) o += red[(g * kGroup + h) * r + x];
    ws.part_o[(part + h) * r + x] = o;
  }
  if (lane == 0 && warp < nh) {
    ws.part_ml[(part + warp) * 2] = m_run;
    ws.part_ml[(part + warp) * 2 + 1] = l_run;
  }
}

}  // namespace
}  // namespace tf::cuda
