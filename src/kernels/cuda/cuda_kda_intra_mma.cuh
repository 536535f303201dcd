// The KDA chunked prefill's intra-chunk kernel on tensor cores (3xTF32): the same
// outputs as cuda_kda_chunked.cu's scalar kda_intra_kernel (scratch layout in
// cuda_kda_scratch.cuh) for one (chunk, head) per block.
//
// Where the work goes:
//  - A[i][j] = -b_i sum_x k_i k_j e^(G_i - G_j) and P[i][j] = sum_x q_i k_j e^(G_i - G_j)
//    split into 16x16 blocks. Below the diagonal (block row I > block column J) the
//    exponent factors through the block's first row r = 16 I:
//      e^(G_i - G_j) = e^(G_i - G_r) e^(G_r - G_j),  i >= r > j,
//    and both factors are <= 1 (the gates are <= 0, G falls), so neither overflows however
//    strong the decay; the six blocks are then MMAs over x, and so are the lower-left 8x8
//    quadrants of the four diagonal blocks (factored through their row 8). The 8x8
//    diagonal blocks keep the exact pairwise exponent (a factor there could overflow: G
//    may fall by far more than f32's e^88 over 8 tokens).
//  - T = (I - A)^-1 blockwise: each diagonal 16x16 block by forward substitution in one
//    warp, then T_IJ = T_II sum_{J<=M<I} A_IM T_MJ in three rounds by distance I - J.
//  - w = T (b k e^G) and u = T (b v): MMAs over T's lower block triangle.
// The shared-memory tiles are [rows][128] (and T [64][64]) with a column swizzle (sw)
// that keeps the fragment reads of both MMA operand shapes free of bank conflicts; at
// 112 KB a block, two blocks share an SM so one's loads overlap the other's math.
// Where 112 KB do not fit (a DGX Spark: 99 KB per block), a second form (QShared = false,
// 80.5 KB) keeps no q tile: it reads q from global memory where the products need it
// (times the row's norm, the same product as the tile held) and stages b v in the gates'
// tile once T is done. Same operations in the same order: the same bits.
#pragma once

#include <cstdint>

#include "kernels/cuda/cuda_kda_scratch.cuh"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/mma_tf32.cuh"

namespace tf::cuda::kda {

constexpr int kMmaIntraThreads = 256;
constexpr size_t kMmaIntraSmem = (3 * kC * kD + kC * kC + kC) * sizeof(float);       // 114,944 bytes
constexpr size_t kMmaIntraSmallSmem = (2 * kC * kD + kC * kC + 2 * kC) * sizeof(float);  // 82,432 bytes

// Column swizzle of row `row`: rows g = 0..7 reading columns t, t + 4 (fragments along k)
// and rows t = 0..3 reading columns g (B fragments along n) fall on 32 distinct banks.
__device__ __forceinline__ int kda_sw(int row) { return ((row & 3) << 3) | (row & 4); }
__device__ __forceinline__ int at_d(int row, int col) { return row * kD + (col ^ kda_sw(row)); }
__device__ __forceinline__ int at_c(int row, int col) { return row * kC + (col ^ kda_sw(row)); }

// Block (I, J), I > J, of the strict lower block triangle as one index: (1,0) 0, (2,0) 1,
// (2,1) 2, (3,0) 3, (3,1) 4, (3,2) 5.
__device__ __forceinline__ int lower_block_id(int bi, int bj) { return bi * (bi - 1) / 2 + bj; }
// Its inverse over the 6 blocks: id -> (I, J).
__device__ __forceinline__ void lower_block_of(int id, int& bi, int& bj) {
  bi = id < 1 ? 1 : id < 3 ? 2 : 3;
  bj = id - lower_block_id(bi, 0);
}

template <bool QShared>
__global__ void __launch_bounds__(kMmaIntraThreads, 2)
    kda_intra_mma_kernel(float* __restrict__ scratch, const float* __restrict__ q,
                         const float* __restrict__ k, const float* __restrict__ v,
                         const float* __restrict__ g, const float* __restrict__ beta, int64_t t_len,
                         int64_t chunk0, int heads, int dk, int dv, float qscale) {
  extern __shared__ float sh[];
  float* qn = sh;                            // [C][D] normalised q, later b v (QShared only)
  float* kn = QShared ? qn + kC * kD : sh;   // [C][D] normalised k (later b k e^G)
  float* gc = kn + kC * kD;                  // [C][D] cumulative gates (later the blocked inverse's work space,
                                             // then b v where q has no tile)
  float* tm = gc + kC * kD;                  // [C][C] A, then T
  float* bet = tm + kC * kC;                 // [C]
  float* qinv_row = bet + kC;                // [C] q's scale per row (!QShared only)
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gq = lane >> 2, tq = lane & 3;
  const int h = blockIdx.y;
  const int64_t c0 = (chunk0 + blockIdx.x) * kC;
  const int n = static_cast<int>(t_len - c0 < kC ? t_len - c0 : kC);
  // Normalised q at (row i, channel x): the tile's value, or the same product from global memory.
  const auto q_at = [&](int i, int x) -> float {
    if constexpr (QShared) {
      return qn[at_d(i, x)];
    } else {
      const float qv = (i < n && x < dk) ? q[((c0 + i) * heads + h) * dk + x] : 0.0f;
      return qv * qinv_row[i];
    }
  };
  float* out = scratch + (static_cast<int64_t>(blockIdx.x) * heads + h) * kPer;
  float* pout = out + kOffP;

  // 1. l2-normalised q (times Dk^-1/2) and k, a warp per row, four rows' loads in flight;
  // b; the cumulative gates, one thread per channel in token order (the reference's sums).
  for (int i0 = warp * 4; i0 < kC; i0 += 4 * (kMmaIntraThreads / 32)) {
    float qv[4][kD / 32], kv[4][kD / 32];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t row = (c0 + i0 + r) * heads + h;
#pragma unroll
      for (int m = 0; m < kD / 32; ++m) {
        const int x = lane + 32 * m;
        const bool ok = i0 + r < n && x < dk;
        qv[r][m] = ok ? q[row * dk + x] : 0.0f;
        kv[r][m] = ok ? k[row * dk + x] : 0.0f;
      }
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      float qs = 0, ks = 0;
#pragma unroll
      for (int m = 0; m < kD / 32; ++m) {
        qs += qv[r][m] * qv[r][m];
        ks += kv[r][m] * kv[r][m];
      }
      qs = warp_reduce(qs, SumOp{});
      ks = warp_reduce(ks, SumOp{});
      const float qinv = qscale / sqrtf(qs + 1e-6f), kinv = 1.0f / sqrtf(ks + 1e-6f);
      const int i = i0 + r;
#pragma unroll
      for (int m = 0; m < kD / 32; ++m) {
        if constexpr (QShared) qn[at_d(i, lane + 32 * m)] = qv[r][m] * qinv;
        kn[at_d(i, lane + 32 * m)] = kv[r][m] * kinv;
      }
      if (lane == 0) {
        bet[i] = i < n ? beta[(c0 + i) * heads + h] : 0.0f;
        if constexpr (!QShared) qinv_row[i] = qinv;
      }
    }
  }
  if (tid < kD) {
    float acc = 0;
    for (int i0 = 0; i0 < kC; i0 += 16) {
      float gv[16];
#pragma unroll
      for (int r = 0; r < 16; ++r)
        gv[r] = (i0 + r < n && tid < dk) ? g[((c0 + i0 + r) * heads + h) * dk + tid] : 0.0f;
#pragma unroll
      for (int r = 0; r < 16; ++r) {
        acc += gv[r];
        gc[at_d(i0 + r, tid)] = acc;
      }
    }
  }
  __syncthreads();

  // v (this thread's channel, every other row) at (row i, channel x).
  const auto v_at = [&](int i, int x) { return (i < n && x < dv) ? v[((c0 + i) * heads + h) * dv + x] : 0.0f; };
  // With a q tile: v for step 4, loaded now so that the loads overlap step 2.
  float vv[QShared ? kC / 2 : 1];
  if constexpr (QShared) {
    const int x = tid % kD, half = tid / kD;
#pragma unroll
    for (int r = 0; r < kC / 2; ++r) vv[r] = v_at(half + 2 * r, x);
  }

  // 2a. Pairs j <= i inside the 8x8 diagonal blocks, exact exponents; warp w takes block
  // w (rows 8 w .. 8 w + 7: one swizzle each, so a warp's reads at one channel are
  // conflict-free). Lane l has pair l over every channel; pairs 32-35 go to 8 lanes each,
  // 16 channels per lane, summed by shuffles.
  {
    const auto pair_at = [](int p, int& il, int& jl) {
      il = static_cast<int>((sqrtf(8.0f * p + 1.0f) - 1.0f) * 0.5f);
      while ((il + 1) * (il + 2) / 2 <= p) ++il;
      while (il * (il + 1) / 2 > p) --il;
      jl = p - il * (il + 1) / 2;
    };
    const auto pair_sums = [&](int i, int j, int x0, int nx, float& acc_a, float& acc_p) {
      const float* ki = kn + i * kD;
      const float* qi = qn + i * kD;
      const float* gi = gc + i * kD;
      const float* kj = kn + j * kD;
      const float* gj = gc + j * kD;
      const int si = kda_sw(i), sj = kda_sw(j);
#pragma unroll 8
      for (int x = x0; x < x0 + nx; ++x) {
        const float e = kj[x ^ sj] * __expf(gi[x ^ si] - gj[x ^ sj]);
        acc_a += ki[x ^ si] * e;
        if constexpr (QShared) acc_p += qi[x ^ si] * e;
        else acc_p += q_at(i, x) * e;
      }
    };
    const auto put = [&](int il, int jl, float acc_a, float acc_p) {
      const int i = 8 * warp + il, j = 8 * warp + jl;
      tm[at_c(i, j)] = jl < il ? -bet[i] * acc_a : 0.0f;
      pout[i * kC + j] = acc_p;
    };
    int il, jl;
    float acc_a = 0, acc_p = 0;
    pair_at(lane, il, jl);
    pair_sums(8 * warp + il, 8 * warp + jl, 0, kD, acc_a, acc_p);
    put(il, jl, acc_a, acc_p);
    pair_at(32 + (lane >> 3), il, jl);
    acc_a = acc_p = 0;
    pair_sums(8 * warp + il, 8 * warp + jl, (lane & 7) * (kD / 8), kD / 8, acc_a, acc_p);
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) {
      acc_a += __shfl_xor_sync(0xffffffffu, acc_a, o);
      acc_p += __shfl_xor_sync(0xffffffffu, acc_p, o);
    }
    if ((lane & 7) == 0) put(il, jl, acc_a, acc_p);
  }
  // 2a'. The lower-left 8x8 quadrant of each 16x16 diagonal block (rows r .. r + 7,
  // columns r - 8 .. r - 1 with r = 16 d + 8), factored through row r like the blocks
  // below; one MMA tile gives A (fragment rows 0-7: k) and P (rows 8-15: q) at once.
  // Warps 6 and 7 take two blocks each (warps 0-5 have the six full blocks).
  if (warp >= 6) {
#pragma unroll 1
    for (int d = warp - 6; d < 4; d += 2) {
      const int r = 16 * d + 8, i = r + gq, j = r - 8 + gq;
      float acc[4] = {};
#pragma unroll 2
      for (int ks = 0; ks < kD / 8; ++ks) {
        const int x0 = 8 * ks + tq, x1 = x0 + 4;
        const float gr0 = gc[at_d(r, x0)], gr1 = gc[at_d(r, x1)];
        const float e0 = __expf(gc[at_d(i, x0)] - gr0), e1 = __expf(gc[at_d(i, x1)] - gr1);
        const float a[4] = {kn[at_d(i, x0)] * e0, q_at(i, x0) * e0, kn[at_d(i, x1)] * e1, q_at(i, x1) * e1};
        const float b[2] = {kn[at_d(j, x0)] * __expf(gr0 - gc[at_d(j, x0)]),
                            kn[at_d(j, x1)] * __expf(gr1 - gc[at_d(j, x1)])};
        uint32_t ah[4], al[4], bh[2], bl[2];
        split_tf32x(a, ah, al);
        split_tf32x(b, bh, bl);
        mma_3xtf32(acc, ah, al, bh, bl);
      }
      const int jc = r - 8 + 2 * tq;
      tm[at_c(i, jc)] = -bet[i] * acc[0];
      tm[at_c(i, jc + 1)] = -bet[i] * acc[1];
      *reinterpret_cast<float2*>(pout + i * kC + jc) = make_float2(acc[2], acc[3]);
    }
  }
  // 2b. The six blocks below the diagonal, one warp each: A and P share the B operand.
  if (warp < 6) {
    int bi, bj;
    lower_block_of(warp, bi, bj);
    const int r = 16 * bi;  // i >= r > j: both factors' exponents are <= 0
    const int i0 = r + gq, i1 = i0 + 8;
    float acc_a[2][4] = {}, acc_p[2][4] = {};
#pragma unroll 2
    for (int ks = 0; ks < kD / 8; ++ks) {
      const int x0 = 8 * ks + tq, x1 = x0 + 4;
      const float gr0 = gc[at_d(r, x0)], gr1 = gc[at_d(r, x1)];
      const float e[4] = {__expf(gc[at_d(i0, x0)] - gr0), __expf(gc[at_d(i1, x0)] - gr0),
                          __expf(gc[at_d(i0, x1)] - gr1), __expf(gc[at_d(i1, x1)] - gr1)};
      const float ak[4] = {kn[at_d(i0, x0)] * e[0], kn[at_d(i1, x0)] * e[1], kn[at_d(i0, x1)] * e[2],
                           kn[at_d(i1, x1)] * e[3]};
      const float aq[4] = {q_at(i0, x0) * e[0], q_at(i1, x0) * e[1], q_at(i0, x1) * e[2], q_at(i1, x1) * e[3]};
      uint32_t akh[4], akl[4], aqh[4], aql[4];
      split_tf32x(ak, akh, akl);
      split_tf32x(aq, aqh, aql);
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const int j = 16 * bj + 8 * nt + gq;
        const float b[2] = {kn[at_d(j, x0)] * __expf(gr0 - gc[at_d(j, x0)]),
                            kn[at_d(j, x1)] * __expf(gr1 - gc[at_d(j, x1)])};
        uint32_t bh[2], bl[2];
        split_tf32x(b, bh, bl);
        mma_3xtf32(acc_a[nt], akh, akl, bh, bl);
        mma_3xtf32(acc_p[nt], aqh, aql, bh, bl);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      const int j = 16 * bj + 8 * nt + 2 * tq;
      tm[at_c(i0, j)] = -bet[i0] * acc_a[nt][0];
      tm[at_c(i0, j + 1)] = -bet[i0] * acc_a[nt][1];
      tm[at_c(i1, j)] = -bet[i1] * acc_a[nt][2];
      tm[at_c(i1, j + 1)] = -bet[i1] * acc_a[nt][3];
      *reinterpret_cast<float2*>(pout + i0 * kC + j) = make_float2(acc_p[nt][0], acc_p[nt][1]);
      *reinterpret_cast<float2*>(pout + i1 * kC + j) = make_float2(acc_p[nt][2], acc_p[nt][3]);
    }
  }
  for (int e = tid; e < kC * kC; e += kMmaIntraThreads)
    if ((e & (kC - 1)) > (e >> 6)) pout[e] = 0.0f;
  __syncthreads();

  // 4. q e^G, k e^(G_last - G), e^G_last; then b v and b k e^G in place of q and k (b v
  // after step 3 where q has no tile).
  {
    const int x = tid % kD, half = tid / kD;
    const float glast = gc[at_d(kC - 1, x)];
    if (half == 0) out[kOffDecay + x] = x < dk ? __expf(glast) : 0.0f;
#pragma unroll
    for (int rr = 0; rr < kC / 2; ++rr) {
      const int i = half + 2 * rr;
      const float gi = gc[at_d(i, x)];
      const float e = __expf(gi);
      out[kOffQg + i * kD + x] = q_at(i, x) * e;
      out[kOffKd + i * kD + x] = kn[at_d(i, x)] * __expf(glast - gi);
      kn[at_d(i, x)] *= bet[i] * e;
      if constexpr (QShared) qn[at_d(i, x)] = bet[i] * vv[rr];
    }
  }

  // 3a. T's diagonal blocks, one warp each, in place: T[i][j] = A[i][j] + sum_{j<m<i}
  // A[i][m] T[m][j], right-looking (step m adds row m's terms to every later row).
  if (warp < 4) {
    const int b0 = 16 * warp;
    for (int m = 1; m < 15; ++m) {
      const int rows = 15 - m;  // i = m + 1 .. 15, j = 0 .. m - 1
      for (int e = lane; e < rows * m; e += 32) {
        const int i = b0 + m + 1 + e / m, j = b0 + e % m;
        tm[at_c(i, j)] += tm[at_c(i, b0 + m)] * tm[at_c(b0 + m, j)];
      }
      __syncwarp();
    }
    for (int e = lane; e < 256; e += 32) {
      const int il = e >> 4, jl = e & 15;
      if (jl >= il) tm[at_c(b0 + il, b0 + jl)] = jl == il ? 1.0f : 0.0f;
    }
  }
  __syncthreads();  // also: gc is free from here on
  // 3b. T_IJ = T_II X with X = sum_{J<=M<I} A_IM T_MJ, by distance d = I - J; the new
  // blocks wait in toff (A's blocks are read until the last round).
  {
    float* toff = gc;                                         // [6][16][16]
    float* xs = gc + 6 * 256;                                 // [3][16][16]
    const auto t_blk = [&](int bm, int bn, int il, int jl) {  // T[16 bm + il][16 bn + jl], bm >= bn
      return bm == bn ? tm[at_c(16 * bm + il, 16 * bn + jl)]
                      : toff[lower_block_id(bm, bn) * 256 + il * 16 + jl];
    };
    for (int d = 1; d < 4; ++d) {
      const int pairs = 4 - d;  // I = d .. 3
      for (int e = tid; e < pairs * 256; e += kMmaIntraThreads) {
        const int bi = d + e / 256, bj = bi - d, il = (e >> 4) & 15, jl = e & 15;
        float acc = 0;
        for (int bm = bj; bm < bi; ++bm)
#pragma unroll
          for (int m = 0; m < 16; ++m) acc += tm[at_c(16 * bi + il, 16 * bm + m)] * t_blk(bm, bj, m, jl);
        xs[e] = acc;
      }
      __syncthreads();
      for (int e = tid; e < pairs * 256; e += kMmaIntraThreads) {
        const int bi = d + e / 256, bj = bi - d, il = (e >> 4) & 15, jl = e & 15;
        const float* x = xs + (e / 256) * 256;
        float acc = 0;
        for (int m = 0; m <= il; ++m) acc += tm[at_c(16 * bi + il, 16 * bi + m)] * x[m * 16 + jl];
        toff[lower_block_id(bi, bj) * 256 + il * 16 + jl] = acc;
      }
      __syncthreads();
    }
    for (int e = tid; e < 6 * 256; e += kMmaIntraThreads) {
      const int id = e / 256;
      int bi, bj;
      lower_block_of(id, bi, bj);
      tm[at_c(16 * bi + ((e >> 4) & 15), 16 * bj + (e & 15))] = toff[e];
    }
  }
  __syncthreads();
  float* bv = qn;  // b v: step 5's u source
  if constexpr (!QShared) {
    bv = gc;  // free again
    const int x = tid % kD, half = tid / kD;
#pragma unroll 4
    for (int rr = 0; rr < kC / 2; ++rr) {
      const int i = half + 2 * rr;
      gc[at_d(i, x)] = bet[i] * v_at(i, x);
    }
    __syncthreads();
  }

  // 5. -w = -T (b k e^G) (warps 0-3) and u = T (b v) (warps 4-7), 32 columns per warp,
  // over T's nonzero blocks only.
  {
    const bool is_u = warp >= 4;
    const float* src = is_u ? bv : kn;
    const int n0 = (warp & 3) * 32;
    float* dst = out + (is_u ? kOffU : kOffW);
    const float sign = is_u ? 1.0f : -1.0f;
    for (int bi = 0; bi < 4; ++bi) {
      float acc[4][4] = {};
      const int i0 = 16 * bi + gq, i1 = i0 + 8;
      for (int ks = 0; ks < 2 * bi + 2; ++ks) {
        const int j0 = 8 * ks + tq, j1 = j0 + 4;
        const float a[4] = {tm[at_c(i0, j0)], tm[at_c(i1, j0)], tm[at_c(i0, j1)], tm[at_c(i1, j1)]};
        uint32_t ah[4], al[4];
        split_tf32x(a, ah, al);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const int col = n0 + 8 * nt + gq;
          const float b[2] = {src[at_d(j0, col)], src[at_d(j1, col)]};
          uint32_t bh[2], bl[2];
          split_tf32x(b, bh, bl);
          mma_3xtf32(acc[nt], ah, al, bh, bl);
        }
      }
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = n0 + 8 * nt + 2 * tq;
        *reinterpret_cast<float2*>(dst + i0 * kD + col) = make_float2(sign * acc[nt][0], sign * acc[nt][1]);
        *reinterpret_cast<float2*>(dst + i1 * kD + col) = make_float2(sign * acc[nt][2], sign * acc[nt][3]);
      }
    }
  }
}

}  // namespace tf::cuda::kda
