// Grouped expert products on BF16 tensor cores (mma.sync m16n8k16, f32 accumulate)
// for moe_experts above ctx.exact_rows tokens: decode batches of 9-64 rows and prefill.
//
// The weights are the MMA's A operand (16 output channels per m-tile) and the tile's
// tokens its B operand (8 per n-tile), so an expert's weight rows stream from HBM once
// per row tile (once per call up to 64 tokens per expert) straight into registers;
// nothing is staged in shared memory. Grid: (column blocks, row tiles of the grouping);
// a block's 8 warps split K: warp w takes the 64-wide K chunks w, w + 8, ... and the
// block sums the warps' partial tiles in a fixed tree (4+4, 2+2, 1+1) in shared memory,
// then applies the epilogue (SwiGLU to a bf16 act row, or the f32 down output).
//
// K order within a chunk: lane (g = lane / 4, q = lane % 4) loads elements
// [8q, 8q + 8) and [32 + 8q, 32 + 8q + 8) of its weight rows g, g + 8 and of its token
// g as two 16-byte vectors (each load instruction covers 64 contiguous bytes per row);
// MMA step s in 0..3 takes words 2(s%2), 2(s%2)+1 of vector s/2 as the fragment's k
// pairs {2q, 2q+1} and {2q+8, 2q+9}. A and B use the same permutation of k, so each
// product is the dot product in a fixed order: every output depends only on its token's
// row and the weights (never on the other rows of the call or the tile it lands in).
#include "kernels/cuda/moe_tc_gemm.h"

#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_util.cuh"

namespace tf::cuda {
namespace {

constexpr int kWarps = 8;

__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// MT m-tiles (16 weight rows each) x NT n-tiles (8 tokens each) per block.
// kSwiglu: the first MT/2 m-tiles are gate rows, the rest the matching up rows
// (n_out = intermediate; out = act bf16). Else out = y f32 [rows, n_out].
// 8 bf16 values at p + e: from bf16 rows as they are, from f32 rows (x of gate_up)
// rounded to nearest even.
template <bool kF32>
__device__ __forceinline__ uint4 load_b(const void* p, int64_t e) {
  if constexpr (kF32) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(p) + e));
    const float4 b = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(p) + e + 4));
    auto pack = [](float lo, float hi) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
      return *reinterpret_cast<const uint32_t*>(&v);
    };
    return make_uint4(pack(a.x, a.y), pack(a.z, a.w), pack(b.x, b.y), pack(b.z, b.w));
  } else {
    return __ldg(reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(p) + e));
  }
}

// tiles_fast: blockIdx.x is the row tile and blockIdx.y the column block (the tiles of
// one expert then run side by side and share its weight rows through L2); else the
// reverse (prefill: a tile's activations stay in L2 across the column blocks).
template <int MT, int NT, bool kSwiglu>
__global__ void __launch_bounds__(kWarps * 32, 2)
    moe_tc_kernel(void* __restrict__ out, int64_t n_out, const void* __restrict__ in, int64_t k,
                  const __nv_bfloat16* __restrict__ w, int64_t w_stride, MoeGroups g, float limit, bool tiles_fast) {
  using InT = std::conditional_t<kSwiglu, float, __nv_bfloat16>;  // gate_up reads x (f32), down act (bf16)
  constexpr int BN = MT * 16, TR = NT * 8, LD = TR + 1;
  constexpr int COLS = kSwiglu ? BN / 2 : BN;
  constexpr int HALF = kSwiglu ? MT / 2 : MT;
  __shared__ float red[4][BN * LD];
  const int tile = tiles_fast ? blockIdx.x : blockIdx.y;
  if (tile >= *g.num_tiles) return;  // block-uniform
  const int slot = g.tile_slot[tile], row0 = g.tile_row0[tile];
  const int ex = g.slot_expert[slot];
  const int rows = min(TR, g.slot_first[slot] + g.slot_count[slot] - row0);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gi = lane >> 2, q = lane & 3;
  const int64_t col0 = static_cast<int64_t>(tiles_fast ? blockIdx.y : blockIdx.x) * COLS;
  const __nv_bfloat16* we = w + ex * w_stride;
  const __nv_bfloat16* wrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t c = min(col0 + (mt % HALF) * 16 + gi + 8 * h, n_out - 1);  // clamped: dropped at the end
      wrow[mt][h] = we + ((kSwiglu && mt >= HALF ? n_out : 0) + c) * k;
    }
  const InT* xrow[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int rr = row0 + min(nt * 8 + gi, rows - 1);
    xrow[nt] = static_cast<const InT*>(in) + static_cast<int64_t>(kSwiglu ? g.row_token[rr] : rr) * k;
  }
  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int64_t chunks = (k + 63) / 64;
  for (int64_t ch = warp; ch < chunks; ch += kWarps) {
    const int64_t e0 = ch * 64 + 8 * q, e1 = e0 + 32;
    uint4 a[MT][2][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        a[mt][h][0] = e0 < k ? __ldg(reinterpret_cast<const uint4*>(wrow[mt][h] + e0)) : zero;
        a[mt][h][1] = e1 < k ? __ldg(reinterpret_cast<const uint4*>(wrow[mt][h] + e1)) : zero;
      }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      uint4 b[2];
      b[0] = e0 < k ? load_b<kSwiglu>(xrow[nt], e0) : zero;
      b[1] = e1 < k ? load_b<kSwiglu>(xrow[nt], e1) : zero;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int v = s >> 1, wd = (s & 1) * 2;
        const uint32_t b0 = word(b[v], wd), b1 = word(b[v], wd + 1);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          mma_16816(acc[mt][nt], word(a[mt][0][v], wd), word(a[mt][1][v], wd), word(a[mt][0][v], wd + 1),
                    word(a[mt][1][v], wd + 1), b0, b1);
      }
    }
  }

  // Fixed-order sum of the 8 warps' tiles: 4..7 into 0..3, 2..3 into 0..1, 1 into 0.
  auto at = [&](int mt, int nt, int i) { return (mt * 16 + gi + (i >= 2 ? 8 : 0)) * LD + nt * 8 + 2 * q + (i & 1); };
  for (int half = kWarps / 2; half >= 1; half >>= 1) {
    if (warp >= half && warp < 2 * half) {
      float* r = red[warp - half];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) r[at(mt, nt, i)] = acc[mt][nt][i];
    }
    __syncthreads();
    if (warp < half) {
      const float* r = red[warp];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) acc[mt][nt][i] += r[at(mt, nt, i)];
    }
    __syncthreads();
  }
  if (warp == 0) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) red[0][at(mt, nt, i)] = acc[mt][nt][i];
  }
  __syncthreads();
  // Epilogue, columns fastest (coalesced stores).
  for (int i = threadIdx.x; i < rows * COLS; i += kWarps * 32) {
    const int n = i / COLS, j = i % COLS;
    const int64_t c = col0 + j;
    if (c >= n_out) continue;
    const int64_t o = static_cast<int64_t>(row0 + n) * n_out + c;
    if constexpr (kSwiglu) {
      const float gc = fminf(red[0][j * LD + n], limit);
      const float uc = fminf(fmaxf(red[0][(COLS + j) * LD + n], -limit), limit);
      static_cast<__nv_bfloat16*>(out)[o] = __float2bfloat16_rn(gc / (1.0f + expf(-gc)) * uc);
    } else {
      static_cast<float*>(out)[o] = red[0][j * LD + n];
    }
  }
}

template <int MT, int NT, bool kSwiglu>
void launch(cudaStream_t stream, void* out, int64_t n_out, const void* in, int64_t k, const __nv_bfloat16* w,
            int64_t w_stride, const MoeGroups& g, int64_t max_tiles, float limit) {
  constexpr int64_t cols = kSwiglu ? MT * 8 : MT * 16;
  const unsigned col_blocks = static_cast<unsigned>((n_out + cols - 1) / cols);
  // Decode-sized calls (tiles of up to 32 rows): tiles fastest, so an expert's weights are read from HBM once.
  const bool tiles_fast = NT <= 4;
  const dim3 grid = tiles_fast ? dim3(static_cast<unsigned>(max_tiles), col_blocks)
                               : dim3(col_blocks, static_cast<unsigned>(max_tiles));
  moe_tc_kernel<MT, NT, kSwiglu>
      <<<grid, kWarps * 32, 0, stream>>>(out, n_out, in, k, w, w_stride, g, limit, tiles_fast);
}

template <bool kSwiglu>
void launch_rows(cudaStream_t stream, void* out, int64_t n_out, const void* in, int64_t k,
                 const __nv_bfloat16* w, int64_t w_stride, const MoeGroups& g, int64_t max_tiles, int tile_rows,
                 float limit) {
  // Accumulators per thread: MT * NT * 4 (<= 64 registers).
  if (tile_rows <= 16) launch<4, 2, kSwiglu>(stream, out, n_out, in, k, w, w_stride, g, max_tiles, limit);
  else if (tile_rows <= 32) launch<2, 4, kSwiglu>(stream, out, n_out, in, k, w, w_stride, g, max_tiles, limit);
  else launch<2, 8, kSwiglu>(stream, out, n_out, in, k, w, w_stride, g, max_tiles, limit);
}

__global__ void to_bf16_kernel(__nv_bfloat16* __restrict__ out, const float* __restrict__ x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(x[i]);
}

}  // namespace

// Up to 64 tokens, tiles of at most 32 rows (an expert with more rows gets two tiles, which
// run side by side: tiles_fast); 64-row tiles (more accumulators) only for prefill.
int moe_tc_tile_rows(int64_t tokens) { return tokens <= 16 ? 16 : tokens <= 64 ? 32 : 64; }

void moe_tc_gate_up(cudaStream_t stream, __nv_bfloat16* act, const float* x, const __nv_bfloat16* gate_up,
                    int64_t idim, int64_t h, const MoeGroups& g, int64_t max_tiles, int tile_rows, float limit) {
  launch_rows<true>(stream, act, idim, x, h, gate_up, 2 * idim * h, g, max_tiles, tile_rows, limit);
}

void moe_tc_down(cudaStream_t stream, float* y, const __nv_bfloat16* act, const __nv_bfloat16* down, int64_t h,
                 int64_t idim, const MoeGroups& g, int64_t max_tiles, int tile_rows) {
  launch_rows<false>(stream, y, h, act, idim, down, h * idim, g, max_tiles, tile_rows, 0.0f);
}

void moe_to_bf16(cudaStream_t stream, __nv_bfloat16* xb, const float* x, int64_t n) {
  to_bf16_kernel<<<grid_1d(n), 256, 0, stream>>>(xb, x, n);
}

}  // namespace tf::cuda
