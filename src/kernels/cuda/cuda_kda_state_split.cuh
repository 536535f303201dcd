// The KDA chunked prefill's state pass split in two (3xTF32 tensor cores, raw m16n8k8):
//  1. kda_state_split_kernel (grid: head x 32 value columns, chunks in order): only
//     what the next chunk needs, v_new = u - w S and S = e^G_last S + (k e^(G_last - G))^T
//     v_new. Each warp keeps 16 rows of S in its accumulators from chunk to chunk; S also
//     goes to shared memory (the B operand of v_new) and to scratch (kOffS: the state at
//     the chunk's start), v_new over u in scratch. The next step's operands are staged
//     in shared memory by cp.async while the current one computes.
//  2. kda_out_kernel (grid: chunk x head, all independent): out = (q e^G) S_c + P v_new.
// cuda_kda_chunked.cu's state kernel does both in its sequential loop; the outputs'
// products (two thirds of its work) are off the chain here. Same function and the same
// products; the bits differ by the order of the sums inside the MMAs.
#pragma once

#include <cstdint>

#include "kernels/cuda/cp_async.cuh"
#include "kernels/cuda/cuda_kda_scratch.cuh"
#include "kernels/cuda/mma_tf32.cuh"

namespace tf::cuda::kda {

constexpr int kSplitThreads = 256;        // 8 warps
constexpr int kSplitCols = 32;            // value columns per state block
constexpr int kSplitLd = kSplitCols + 8;  // S / v_new / u rows: B fragments (rows t, columns g) on 32 banks
constexpr int kWLd = kD + 4;              // -w rows: A fragments (rows g, columns t) on 32 banks
constexpr int kKdLd = kD + 8;             // kd rows read transposed (rows t, columns g) on 32 banks
// Shared memory in floats: S, v_new, and the chunk's operands staged by cp.async: -w, u
// (this block's columns), kd, e^G_last.
constexpr int kSmS = 0;
constexpr int kSmVn = kSmS + kD * kSplitLd;
constexpr int kSmW = kSmVn + kC * kSplitLd;
constexpr int kSmU = kSmW + kC * kWLd;
constexpr int kSmKd = kSmU + kC * kSplitLd;
constexpr int kSmDecay = kSmKd + kC * kKdLd;
constexpr size_t kSplitSmem = (kSmDecay + kD) * sizeof(float);  // 110,080 bytes: two blocks per SM

// a[4] of an A fragment (rows r0, r0 + 8; columns c0, c0 + 4) of a row-major matrix.
__device__ __forceinline__ void load_a_rm(float (&a)[4], const float* m, int ld, int r0, int c0) {
  a[0] = m[r0 * ld + c0];
  a[1] = m[(r0 + 8) * ld + c0];
  a[2] = m[r0 * ld + c0 + 4];
  a[3] = m[(r0 + 8) * ld + c0 + 4];
}

// acc[nt] += A B over `steps` k-steps of 8 (3xTF32), for kNt n8 tiles: A's rows i0 and
// i0 + 8 from a (row-major, row stride lda), B from the [k][ldb] tile b (shared memory),
// columns col0 + 8 nt.
template <int kNt, int kUnroll>
__device__ __forceinline__ void rows_times_tile(float (&acc)[kNt][4], const float* a_src, int lda, const float* b,
                                                int ldb, int steps, int i0, int col0, int gq, int tq) {
#pragma unroll kUnroll
  for (int ks = 0; ks < steps; ++ks) {
    const int k0 = 8 * ks + tq;
    float a[4];
    load_a_rm(a, a_src, lda, i0, k0);
    uint32_t ah[4], al[4];
    split_tf32x(a, ah, al);
#pragma unroll
    for (int nt = 0; nt < kNt; ++nt) {
      const int c = col0 + 8 * nt + gq;
      const float bb[2] = {b[k0 * ldb + c], b[(k0 + 4) * ldb + c]};
      uint32_t bh[2], bl[2];
      split_tf32x(bb, bh, bl);
      mma_3xtf32(acc[nt], ah, al, bh, bl);
    }
  }
}

// The state block's 16-byte copies of one chunk's -w and u (this block's columns) ...
__device__ __forceinline__ void stage_w_u(float* sm, const float* sc, int col0, int tid) {
  cp_async_tile<kSplitThreads, kC, kD>(sm + kSmW, kWLd, sc + kOffW, kD, tid);
  cp_async_tile<kSplitThreads, kC, kSplitCols>(sm + kSmU, kSplitLd, sc + kOffU + col0, kD, tid);
  cp_async_commit();
}
// ... and of its kd and e^G_last.
__device__ __forceinline__ void stage_kd(float* sm, const float* sc, int tid) {
  cp_async_tile<kSplitThreads, kC, kD>(sm + kSmKd, kKdLd, sc + kOffKd, kD, tid);
  if (tid < kD / 4) cp_async16(sm + kSmDecay + 4 * tid, sc + kOffDecay + 4 * tid);
  cp_async_commit();
}

// Chunk c's -w / u are copied while chunk c - 1 updates S, its kd while it computes
// v_new: the loads of the chain's next step are never waited on.
__global__ void __launch_bounds__(kSplitThreads, 2)
    kda_state_split_kernel(float* __restrict__ state, float* __restrict__ scratch, int64_t chunks, int heads,
                           int dk, int dv) {
  extern __shared__ __align__(16) float sm[];
  float* s = sm + kSmS;
  float* vn = sm + kSmVn;
  const float* wsm = sm + kSmW;
  const float* usm = sm + kSmU;
  const float* kdsm = sm + kSmKd;
  const float* decay = sm + kSmDecay;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int h = blockIdx.x, col0 = blockIdx.y * kSplitCols;
  const auto slot = [&](int64_t ci) { return scratch + (ci * heads + h) * kPer; };
  if (chunks > 0) {
    stage_w_u(sm, slot(0), col0, tid);
    stage_kd(sm, slot(0), tid);
  }
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
  cp_async_wait<1>();  // -w and u of chunk 0
  __syncthreads();
  for (int64_t ci = 0; ci < chunks; ++ci) {
    float* sc = slot(ci);
    // The state at the chunk's start, for the output kernel.
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      const int c = col0 + 8 * nt + 2 * tq;
      *reinterpret_cast<float2*>(sc + kOffS + r0 * kD + c) = make_float2(sacc[nt][0], sacc[nt][1]);
      *reinterpret_cast<float2*>(sc + kOffS + r1 * kD + c) = make_float2(sacc[nt][2], sacc[nt][3]);
    }
    // v_new = u + (-w) S.
    float acc[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = 8 * (nb + j) + 2 * tq;
      const float2 u0 = *reinterpret_cast<const float2*>(usm + i0 * kSplitLd + c);
      const float2 u1 = *reinterpret_cast<const float2*>(usm + i1 * kSplitLd + c);
      acc[j][0] = u0.x;
      acc[j][1] = u0.y;
      acc[j][2] = u1.x;
      acc[j][3] = u1.y;
    }
    rows_times_tile<2, 4>(acc, wsm, kWLd, s, kSplitLd, kD / 8, i0, 8 * nb, gq, tq);
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const int c = 8 * (nb + j) + 2 * tq;
      *reinterpret_cast<float2*>(vn + i0 * kSplitLd + c) = make_float2(acc[j][0], acc[j][1]);
      *reinterpret_cast<float2*>(vn + i1 * kSplitLd + c) = make_float2(acc[j][2], acc[j][3]);
      *reinterpret_cast<float2*>(sc + kOffU + i0 * kD + col0 + c) = make_float2(acc[j][0], acc[j][1]);
      *reinterpret_cast<float2*>(sc + kOffU + i1 * kD + col0 + c) = make_float2(acc[j][2], acc[j][3]);
    }
    cp_async_wait<0>();  // kd and e^G_last of this chunk
    __syncthreads();     // v_new complete; -w, u and S are free
    if (ci + 1 < chunks) stage_w_u(sm, slot(ci + 1), col0, tid);
    // S = e^G_last S + (k e^(G_last - G))^T v_new on this warp's rows.
    const float d0 = decay[r0], d1 = decay[r1];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
      sacc[nt][0] *= d0;
      sacc[nt][1] *= d0;
      sacc[nt][2] *= d1;
      sacc[nt][3] *= d1;
    }
#pragma unroll 4
    for (int ks = 0; ks < kC / 8; ++ks) {
      const int j0 = 8 * ks + tq, j1 = j0 + 4;
      // kd^T: element (key r, token j) = kd[j][r].
      const float a[4] = {kdsm[j0 * kKdLd + r0], kdsm[j0 * kKdLd + r1], kdsm[j1 * kKdLd + r0],
                          kdsm[j1 * kKdLd + r1]};
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
    cp_async_wait<0>();  // -w and u of the next chunk
    __syncthreads();     // S complete; kd, e^G_last and v_new are free
    if (ci + 1 < chunks) stage_kd(sm, slot(ci + 1), tid);
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
constexpr int kOutLd = kD + 8;  // staged S_c / v_new rows: B fragments (rows t, columns g) on 32 banks
constexpr size_t kOutSmem = static_cast<size_t>(kD + kC) * kOutLd * sizeof(float);  // 104,448 bytes


// S_c and v_new (the B operands every warp reads) are staged in shared memory by cp.async,
// S_c first so that the first product starts while v_new is still in flight; a warp's A
// rows (q e^G, P) are its own and come straight from global memory.
__global__ void __launch_bounds__(kOutThreads, 2)
    kda_out_kernel(float* __restrict__ out, const float* __restrict__ scratch, int64_t t_len, int64_t chunk0,
                   int heads, int dv) {
  extern __shared__ __align__(16) float osm[];
  float* s_sm = osm;                 // [D][kOutLd] S_c
  float* vn_sm = osm + kD * kOutLd;  // [C][kOutLd] v_new
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gq = lane >> 2, tq = lane & 3;
  const int h = blockIdx.y;
  const int64_t c0 = (chunk0 + blockIdx.x) * kC;
  const int n = static_cast<int>(t_len - c0 < kC ? t_len - c0 : kC);
  const float* sc = scratch + (static_cast<int64_t>(blockIdx.x) * heads + h) * kPer;
  cp_async_tile<kOutThreads, kD, kD>(s_sm, kOutLd, sc + kOffS, kD, tid);
  cp_async_commit();
  cp_async_tile<kOutThreads, kC, kD>(vn_sm, kOutLd, sc + kOffU, kD, tid);
  cp_async_commit();
  // This warp: rows 16 mb + gq (+ 8), 64 columns from n0.
  const int mb = warp & 3, n0 = (warp >> 2) * 64;
  const int i0 = 16 * mb + gq, i1 = i0 + 8;
  float acc[8][4] = {};
  cp_async_wait<1>();
  __syncthreads();
  // (q e^G) S_c over the keys ...
  rows_times_tile<8, 2>(acc, sc + kOffQg, kD, s_sm, kOutLd, kD / 8, i0, n0, gq, tq);
  cp_async_wait<0>();
  __syncthreads();
  // ... + P v_new over the chunk's tokens up to this row block (P is zero above the diagonal).
  rows_times_tile<8, 1>(acc, sc + kOffP, kC, vn_sm, kOutLd, 2 * mb + 2, i0, n0, gq, tq);
  if (n0 >= dv) return;
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
