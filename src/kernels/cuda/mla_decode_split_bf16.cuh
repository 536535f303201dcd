// MLA sparse decode, step 2 on BF16 tensor cores (cuda_mla_decode.cu): split_bf16_kernel, the default
// for bf16 and fp8 pages. Included by cuda_mla_decode.cu only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/mla_decode_layout.cuh"
#include "kernels/cuda/mla_decode_mma_steps.cuh"
#include "kernels/cuda/mla_decode_tile_steps.cuh"
#include "kernels/cuda/mma_bf16.cuh"

namespace tf::cuda {
namespace {

// ---- 2c. BF16 tensor-core split (the default for bf16 and fp8 pages) -------------
// split_mma_kernel's layout (S^T = L Q^T over each warp's R/8 channels, partials added in
// warp order; O^T += L^T P^T, a warp owning R/128 16-channel accumulator tiles) with one
// mma.m16n8k16 BF16 per product instead of TF32 hi/lo pairs: q and the probabilities
// (x token scale) are rounded to bf16 once each, as the reference's bf16 attention rounds
// them and as the prefill kernel does by default (cuda_mla_prefill_mma.cu); the latents are
// exact in bf16 (fp8 is widened once per tile). q's B fragments live in registers for the
// whole chunk, the latents' A fragments come by ldmatrix (transposed for L^T) straight from
// the tile: bf16 pages are used as copied (two tiles in flight, no conversion pass), fp8
// tiles are widened into a bf16 tile. ncu had the TF32 kernel at ~2,000 instructions per
// warp and tile (conversion to f32, hi/lo splits, scalar fragment loads; run29s49).
// mla_decode_bf16() = false (TF_MLA_DECODE_MMA=tf32) keeps the TF32 kernel.
constexpr int kBf16Pad = 8;  // bf16 tile rows of R + 8 elements: 16-byte rows, ldmatrix without conflicts

template <typename T>
__host__ __device__ constexpr int bf16_raw_stride(int r) {  // a raw tile row in elements of T
  return std::is_same_v<T, __nv_bfloat16> ? r + kBf16Pad : r + 16;
}

struct Bf16Smem {
  int tile0, tile1, sp, pr, alpha, offs, total;  // byte offsets
};

// bf16 pages: two raw tiles (the one in use and the next); fp8: the raw tile and its bf16
// widening. Then the partial scores, probabilities, rescales, and the chunk's offsets and
// scales (chunk_tokens of them).
template <typename T>
__host__ __device__ inline Bf16Smem bf16_smem(int r, int chunk_tokens) {
  Bf16Smem s{};
  const int bf16_tile = kTile * (r + kBf16Pad) * 2;
  const int raw_tile = (kTile * bf16_raw_stride<T>(r) * static_cast<int>(sizeof(T)) + 15) / 16 * 16;
  s.tile0 = 0;                                // raw tile (fp8) or tile A (bf16)
  s.tile1 = s.tile0 + raw_tile;               // bf16 widening (fp8) or tile B (bf16)
  s.sp = s.tile1 + bf16_tile;                 // [kWarps][kGroup][kTile] f32
  s.pr = s.sp + kWarps * kGroup * kTile * 4;  // [kTile][kGroup] f32
  s.alpha = s.pr + kTile * kGroup * 4;        // [kGroup] f32
  s.offs = s.alpha + 16 * ((kGroup * 4 + 15) / 16);
  s.total = s.offs + chunk_tokens * 12;  // int64 offsets, then f32 scales
  return s;
}

// Copies of one tile's `valid` tokens into dst [kTile][stride] (16 bytes a copy); rows past
// `valid` are zeroed (they meet a zero probability, and must not be NaN).
template <typename T>
__device__ __forceinline__ void issue_tile16(T* dst, const void* __restrict__ pages, const int64_t* offs,
                                             int valid, int r, int stride) {
  constexpr int kPer = 16 / sizeof(T);  // elements a copy
  const int per_row = r / kPer;
  for (int e = threadIdx.x; e < kTile * per_row; e += kThreads) {
    const int t = e / per_row, x = (e - t * per_row) * kPer;
    T* d = dst + t * stride + x;
    if (t < valid)
      cp_async_ca<16>(d, static_cast<const T*>(pages) + offs[t] + x);
    else
      *reinterpret_cast<uint4*>(d) = make_uint4(0u, 0u, 0u, 0u);
  }
}

// fp8 e4m3 pairs to bf16 pairs, exactly (e4m3 -> f16 -> f32 -> bf16: every step exact).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint16_t v) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(v), __NV_E4M3);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  const __nv_bfloat162 b = __floats2bfloat162_rn(f.x, f.y);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// The raw fp8 tile [kTile][r + 16] widened into bf16 [kTile][r + kBf16Pad], 16 values a step.
__device__ __forceinline__ void widen_tile(__nv_bfloat16* dst, const __nv_fp8_e4m3* src, int r) {
  const int per_row = r / 16;
  for (int e = threadIdx.x; e < kTile * per_row; e += kThreads) {
    const int t = e / per_row, x = (e - t * per_row) * 16;
    const uint4 v = *reinterpret_cast<const uint4*>(src + t * (r + 16) + x);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint32_t o[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[2 * i] = e4m3x2_to_bf16x2(static_cast<uint16_t>(w[i] & 0xffffu));
      o[2 * i + 1] = e4m3x2_to_bf16x2(static_cast<uint16_t>(w[i] >> 16));
    }
    uint4* d = reinterpret_cast<uint4*>(dst + t * (r + kBf16Pad) + x);
    d[0] = make_uint4(o[0], o[1], o[2], o[3]);
    d[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
}

__device__ __forceinline__ uint32_t bf16x2_bits(float lo, float hi) {
  const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&b);
}

// kR > 0: R known at compile time (the model's 512); else R % 128 == 0, R <= kMaxWidth.
template <typename T, int kR = 0>
__global__ void __launch_bounds__(kThreads, 2) split_bf16_kernel(SplitArgs args) {
  static_assert(std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __nv_fp8_e4m3>, "bf16 or fp8 pages");
  constexpr bool kWiden = std::is_same_v<T, __nv_fp8_e4m3>;
  constexpr int kMaxSteps = kMaxWidth / 128;  // 16-channel k-steps of a warp's score slice
  extern __shared__ __align__(16) unsigned char smb[];
  const int r = kR > 0 ? kR : args.r, heads = args.heads, w = args.w;
  const int ld = r + kBf16Pad, raw_ld = bf16_raw_stride<T>(r);
  const int chunk = blockIdx.y, chunks = gridDim.y;
  const int64_t b = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tq = lane & 3;
  const int h0 = int(blockIdx.x) * kGroup, nh = min(kGroup, heads - h0);
  const int steps = r / 128, kbase = warp * (r / kWarps);  // score k-steps and channels of this warp
  const int mtiles = r / 128, mbase = warp * mtiles * 16;  // output channel tiles of this warp
  // q's B fragments (head g, this warp's channels), rounded to bf16 once: q does not depend
  // on prep, so they load while prep finishes.
  uint32_t qb[kMaxSteps][2];
#pragma unroll
  for (int s = 0; s < kMaxSteps; ++s) {
    qb[s][0] = qb[s][1] = 0u;
    if (s < steps && g < nh) {
      const float* qr = args.q + (b * heads + h0 + g) * int64_t(r) + kbase + 16 * s + 2 * tq;
      qb[s][0] = bf16x2_bits(qr[0], qr[1]);
      qb[s][1] = bf16x2_bits(qr[8], qr[9]);
    }
  }
  pdl_launch_dependents();
  pdl_wait();
  const Workspace& ws = args.ws;
  const SplitBlock blk = split_block(ws, heads);
  if (blk.t0 >= blk.t1) return;  // an empty chunk (the combine skips it)
  const int n = blk.n, t0 = blk.t0, t1 = blk.t1;
  const Bf16Smem L = bf16_smem<T>(r, 0);
  float* sp = reinterpret_cast<float*>(smb + L.sp);
  float* pr = reinterpret_cast<float*>(smb + L.pr);
  float* alpha = reinterpret_cast<float*>(smb + L.alpha);
  int64_t* offs = reinterpret_cast<int64_t*>(smb + L.offs);
  const int tok0 = t0 * kTile, ntok = (t1 - t0) * kTile, nvalid = min(n, t1 * kTile) - tok0;
  float* tsc = reinterpret_cast<float*>(smb + L.offs + ntok * 8);
  for (int i = threadIdx.x; i < ntok; i += kThreads) {
    offs[i] = i < nvalid ? ws.offset[b * w + tok0 + i] : 0;
    tsc[i] = i < nvalid ? ws.tscale[b * w + tok0 + i] : 0.0f;
  }
  __syncthreads();
  T* const raw0 = reinterpret_cast<T*>(smb + L.tile0);
  T* const raw1 = reinterpret_cast<T*>(smb + L.tile1);
  issue_tile16<T>(raw0, args.pages, offs, nvalid, r, raw_ld);
  cp_async_commit();
  float acc[kMaxMmaTiles][4];
#pragma unroll
  for (int i = 0; i < kMaxMmaTiles; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  float m_run = -INFINITY, l_run = 0.0f;
  for (int tile = t0; tile < t1; ++tile) {
    const int k = tile - t0, base = tile * kTile;
    cp_async_wait<0>();
    __syncthreads();  // tile k has arrived; every warp is done with tile k - 1
    const __nv_bfloat16* lt;
    if constexpr (kWiden) {
      __nv_bfloat16* wide = reinterpret_cast<__nv_bfloat16*>(smb + L.tile1);
      widen_tile(wide, reinterpret_cast<const __nv_fp8_e4m3*>(raw0), r);
      __syncthreads();  // the raw tile is free again
      if (tile + 1 < t1) {
        issue_tile16<T>(raw0, args.pages, offs + (k + 1) * kTile, nvalid - (k + 1) * kTile, r, raw_ld);
        cp_async_commit();
      }
      lt = wide;
    } else {
      if (tile + 1 < t1) {  // into the other buffer (tile k - 1's, free since the barrier)
        issue_tile16<T>((k & 1) ? raw0 : raw1, args.pages, offs + (k + 1) * kTile, nvalid - (k + 1) * kTile,
                        r, raw_ld);
        cp_async_commit();
      }
      lt = reinterpret_cast<const __nv_bfloat16*>((k & 1) ? raw1 : raw0);
    }
    {  // Scores: two 16-token tiles x 8 heads over this warp's channels.
      float c[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
      for (int s = 0; s < kMaxSteps; ++s) {
        if (s >= steps) break;
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          uint32_t a[4];
          load_a_frag(a, lt + (mt * 16) * ld + kbase + 16 * s, ld, lane);
          mma_bf16_16816(c[mt], a, qb[s][0], qb[s][1]);
        }
      }
      store_score_partials(sp, warp, g, tq, c);
    }
    __syncthreads();
    online_softmax_tile(sp, pr, alpha, tsc + k * kTile, base, n, args.scale, m_run, l_run);
    __syncthreads();
    {  // O^T [channels x heads] += L^T [channels x 32 tokens] P^T [32 x 8].
      rescale_accumulators(acc, alpha, tq);
#pragma unroll
      for (int k0 = 0; k0 < kTile; k0 += 16) {
        // P^T's B fragment: tokens k0 + 2tq (+1), + 8 (+9); head g.
        const uint32_t p0 = bf16x2_bits(pr[(k0 + 2 * tq) * kGroup + g], pr[(k0 + 2 * tq + 1) * kGroup + g]);
        const uint32_t p1 =
            bf16x2_bits(pr[(k0 + 2 * tq + 8) * kGroup + g], pr[(k0 + 2 * tq + 9) * kGroup + g]);
#pragma unroll
        for (int i = 0; i < kMaxMmaTiles; ++i) {
          if (i < mtiles) {
            // L^T's A fragment (channels mbase + 16i.., tokens k0..): the [token][channel]
            // tile read transposed.
            uint32_t a[4];
            ldmatrix_x4_trans(
                a, lt + (k0 + (lane & 7) + ((lane >> 4) << 3)) * ld + mbase + i * 16 + ((lane >> 3) & 1) * 8);
            mma_bf16_16816(acc[i], a, p0, p1);
          }
        }
      }
    }
  }
  store_chunk_partials(ws, (b * chunks + chunk) * heads + h0, r, mbase, mtiles, nh, acc, m_run, l_run);
}

}  // namespace
}  // namespace tf::cuda
