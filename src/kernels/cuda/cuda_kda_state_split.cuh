// The KDA chunked prefill's state pass split in two (3xTF32 tensor cores, raw m16n8k8):
//  1. kda_state_split_kernel (grid: head x 32 value columns, chunks in order): only
//     what the next chunk needs, v_new = u - w S and S = e^G_last S + (k e^(G_last - G))^T
//     v_new. Each warp keeps 16 rows of S in its accumulators from chunk to chunk; S also
//     goes to shared memory (the B operand of v_new) and to scratch (kOffS: the state at
//     the chunk's start), v_new over u in scratch.
//  2. kda_out_kernel (grid: chunk x head, all independent): out = (q e^G) S_c + P v_new.
// cuda_kda_chunked.cu's state kernel does both in its sequential loop; the outputs'
// products (two thirds of its work) are off the chain here. Same function, the same
// sums in the same order per output (S's update and v_new as there).
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_kda_scratch.cuh"
#include "kernels/cuda/mma_tf32.cuh"

namespace tf::cuda::kda {

constexpr int kSplitThreads = 256;  // 8 warps
constexpr int kSplitCols = 32;      // value columns per state block
constexpr int kSplitLd = kSplitCols + 8;  // smem row stride: B fragments (rows t, columns g) on 32 banks
constexpr size_t kSplitSmem = (kD * kSplitLd + kC * kSplitLd + kD) * sizeof(float);

// a[4] of an A fragment (rows r0, r0 + 8; columns c0, c0 + 4) of a row-major matrix.
__device__ __forceinline__ void load_a_rm(float (&a)[4], const float* m, int ld, int r0, int c0) {
  a[0] = m[r0 * ld + c0];
  a[1] = m[(r0 + 8) * ld + c0];
  a[2] = m[r0 * ld + c0 + 4];
  a[3] = m[(r0 + 8) * ld + c0 + 4];
}

__global__ void __launch_bounds__(kSplitThreads)
    kda_state_split_kernel(float* __restrict__ state, float* __restrict__ scratch, int64_t chunks, int heads, int dk,
                           int dv) {
  extern __shared__ __align__(16) float sm[];
  float* s = sm;                      // [D][kSplitLd] S: keys x this block's columns
  float* vn = s + kD * kSplitLd;      // [C][kSplitLd] v_new
  float* decay = vn + kC * kSplitLd;  // [D]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int h = blockIdx.x, col0 = blockIdx.y * kSplitCols;
  float* st = state + static_cast<int64_t>(h) * dk * dv;
  // This warp's rows of S (16 warp + gq, + 8) and columns 8 nt + 2 tq (+ 1), in C-fragment order.
  const int r0 = 16 * warp + gq, r1 = r0 + 8;
  const auto st_at = [&](int r, int c) { return r < dk && col0 + c < dv ? st[r * dv + col0 + c] : 0.0f; };
  float sacc[4][4];
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int c = 8 * nt + 2 * tq;
    sacc[nt][0] = st_at(r0, c);
    sacc[nt][1] = st_at(r0, c + 1);
    sacc[nt][2] = st_at(r1, c);
    sacc[nt][3] = st_at(r1, c + 1);
  }
  const auto put_s = [&] {
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = 8 * nt + 2 * tq;
      *reinterpret_cast<float2*>(s + r0 * kSplitLd + c) = make_float2(sacc[nt][0], sacc[nt][1]);
      *reinterpret_cast<float2*>(s + r1 * kSplitLd + c) = make_float2(sacc[nt][2], sacc[nt][3]);
    }
  };
  put_s();
  // v_new's tile of this warp: rows 16 mb + gq (+ 8), n-tiles nb and nb + 1.
  const int mb = warp >> 1, nb = (warp & 1) * 2;
  const int i0 = 16 * mb + gq, i1 = i0 + 8;
  __syncthreads();
  for (int64_t ci = 0; ci < chunks; ++ci) {
    float* sc = scratch + (ci * heads + h) * kPer;
    // The state at the chunk's start, for the output kernel.
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = col0 + 8 * nt + 2 * tq;
      *reinterpret_cast<float2*>(sc + kOffS + r0 * kD + c) = make_float2(sacc[nt][0], sacc[nt][1]);
      *reinterpret_cast<float2*>(sc + kOffS + r1 * kD + c) = make_float2(sacc[nt][2], sacc[nt][3]);
    }
    if (tid < kD) decay[tid] = sc[kOffDecay + tid];
    // v_new = u + (-w) S.
    float acc[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = col0 + 8 * (nb + j) + 2 * tq;
      const float2 u0 = *reinterpret_cast<const float2*>(sc + kOffU + i0 * kD + c);
      const float2 u1 = *reinterpret_cast<const float2*>(sc + kOffU + i1 * kD + c);
      acc[j][0] = u0.x;
      acc[j][1] = u0.y;
      acc[j][2] = u1.x;
      acc[j][3] = u1.y;
    }
#pragma unroll 4
    for (int ks = 0; ks < kD / 8; ++ks) {
      const int x0 = 8 * ks + tq;
      float a[4];
      load_a_rm(a, sc + kOffW, kD, i0, x0);
      uint32_t ah[4], al[4];
      split_tf32x(a, ah, al);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int c = 8 * (nb + j) + gq;
        const float b[2] = {s[x0 * kSplitLd + c], s[(x0 + 4) * kSplitLd + c]};
        uint32_t bh[2], bl[2];
        split_tf32x(b, bh, bl);
        mma_3xtf32(acc[j], ah, al, bh, bl);
      }
    }
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = 8 * (nb + j) + 2 * tq;
      *reinterpret_cast<float2*>(vn + i0 * kSplitLd + c) = make_float2(acc[j][0], acc[j][1]);
      *reinterpret_cast<float2*>(vn + i1 * kSplitLd + c) = make_float2(acc[j][2], acc[j][3]);
      *reinterpret_cast<float2*>(sc + kOffU + i0 * kD + col0 + c) = make_float2(acc[j][0], acc[j][1]);
      *reinterpret_cast<float2*>(sc + kOffU + i1 * kD + col0 + c) = make_float2(acc[j][2], acc[j][3]);
    }
    __syncthreads();  // v_new and decay complete; every warp is done reading S
    // S = e^G_last S + (k e^(G_last - G))^T v_new on this warp's rows.
    const float d0 = decay[r0], d1 = decay[r1];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      sacc[nt][0] *= d0;
      sacc[nt][1] *= d0;
      sacc[nt][2] *= d1;
      sacc[nt][3] *= d1;
    }
    const float* kd = sc + kOffKd;
#pragma unroll 4
    for (int ks = 0; ks < kC / 8; ++ks) {
      const int j0 = 8 * ks + tq, j1 = j0 + 4;
      // kd^T: element (key r, token j) = kd[j][r].
      const float a[4] = {kd[j0 * kD + r0], kd[j0 * kD + r1], kd[j1 * kD + r0], kd[j1 * kD + r1]};
      uint32_t ah[4], al[4];
      split_tf32x(a, ah, al);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int c = 8 * nt + gq;
        const float b[2] = {vn[j0 * kSplitLd + c], vn[j1 * kSplitLd + c]};
        uint32_t bh[2], bl[2];
        split_tf32x(b, bh, bl);
        mma_3xtf32(sacc[nt], ah, al, bh, bl);
      }
    }
    put_s();
    __syncthreads();  // S complete for the next chunk; v_new and decay free
  }
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
    const int c = 8 * nt + 2 * tq;
    const float v[4] = {sacc[nt][0], sacc[nt][1], sacc[nt][2], sacc[nt][3]};
    const int rr[4] = {r0, r0, r1, r1}, cc[4] = {c, c + 1, c, c + 1};
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (rr[e] < dk && col0 + cc[e] < dv) st[rr[e] * dv + col0 + cc[e]] = v[e];
  }
}

constexpr int kOutThreads = 256;

__global__ void __launch_bounds__(kOutThreads)
    kda_out_kernel(float* __restrict__ out, const float* __restrict__ scratch, int64_t t_len, int64_t chunk0,
                   int heads, int dv) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int h = blockIdx.y;
  const int64_t c0 = (chunk0 + blockIdx.x) * kC;
  const int n = static_cast<int>(t_len - c0 < kC ? t_len - c0 : kC);
  const float* sc = scratch + (static_cast<int64_t>(blockIdx.x) * heads + h) * kPer;
  // This warp: rows 16 mb + gq (+ 8), 64 columns from n0.
  const int mb = warp & 3, n0 = (warp >> 2) * 64;
  const int i0 = 16 * mb + gq, i1 = i0 + 8;
  if (n0 >= dv) return;
  float acc[8][4] = {};
  // (q e^G) S_c over the keys ...
#pragma unroll 2
  for (int ks = 0; ks < kD / 8; ++ks) {
    const int x0 = 8 * ks + tq;
    float a[4];
    load_a_rm(a, sc + kOffQg, kD, i0, x0);
    uint32_t ah[4], al[4];
    split_tf32x(a, ah, al);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int c = n0 + 8 * nt + gq;
      const float b[2] = {sc[kOffS + x0 * kD + c], sc[kOffS + (x0 + 4) * kD + c]};
      uint32_t bh[2], bl[2];
      split_tf32x(b, bh, bl);
      mma_3xtf32(acc[nt], ah, al, bh, bl);
    }
  }
  // ... + P v_new over the chunk's tokens up to this row block (P is zero above the diagonal).
  for (int ks = 0; ks < 2 * mb + 2; ++ks) {
    const int j0 = 8 * ks + tq;
    float a[4];
    load_a_rm(a, sc + kOffP, kC, i0, j0);
    uint32_t ah[4], al[4];
    split_tf32x(a, ah, al);
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int c = n0 + 8 * nt + gq;
      const float b[2] = {sc[kOffU + j0 * kD + c], sc[kOffU + (j0 + 4) * kD + c]};
      uint32_t bh[2], bl[2];
      split_tf32x(b, bh, bl);
      mma_3xtf32(acc[nt], ah, al, bh, bl);
    }
  }
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const int c = n0 + 8 * nt + 2 * tq;
    if (i0 < n) {
      float* o = out + ((c0 + i0) * heads + h) * dv;
      if (c < dv) o[c] = acc[nt][0];
      if (c + 1 < dv) o[c + 1] = acc[nt][1];
    }
    if (i1 < n) {
      float* o = out + ((c0 + i1) * heads + h) * dv;
      if (c < dv) o[c] = acc[nt][2];
      if (c + 1 < dv) o[c + 1] = acc[nt][3];
    }
  }
}

}  // namespace tf::cuda::kda
