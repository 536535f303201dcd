// The q4 decode GEMV with the weights as the MMA's B operand (issue #8; QuantGemvArgs::b_operand).
// Included by quant_gemv.cu after quant_gemv_legacy.cuh (its Params, Seg and stage_x; run_many calls launch_bop): the same plan (blocks of
// 128 rows x a K slice, quant_gemv_plan), the same x tile, workspace and slice sums, so a row's
// bits are a function of (n, k, SM count) and its own x row only, as for the slice kernel.
//
// mma.m16n8k16 f16 (f32 accumulate) with A = x and B = 8 weight rows (g = lane / 4 picks the
// weight row, t = lane % 4 the quarter of a 64-wide group): lane (g, t) loads ONE 8-byte word per
// (row, group), bytes 8t..8t+7 of weight row g's 32-byte group = its 16 consecutive k. The four
// lanes of a row cover the row's group (one whole 32-byte sector), so one LDG.64 warp instruction
// reads 8 rows' groups with every sector fully used; no shared-memory staging of the weights.
// The 16 nibbles become 8 f16x2 pairs in the order of qfrag::pair_elem (pair j: nibbles j, j+4 of
// a word) with the 0x6400 magic: (w & 0x000F000F) | 0x6400.. is 1024 + q (minus 1032), (w &
// 0x00F000F0) | 0x6400.. is 1024 + 16q (times 1/16 minus 72, one hfma2): 9 instructions per word,
// exact (q - 8 is an integer in -8..7). Those are the B fragments of 4 MMAs (k = 64 = one q4
// group, one accumulator per group, then times the row's scale in f32).
// A = x: rows 0..7 of the MMA are the hi terms of x rows 0..7, rows 8..15 the lo terms (the x
// tile of the slice kernel: f16 hi + lo of x * 2^e per (row, chunk), 22 significant bits), so one
// MMA does both terms and C rows g / g + 8 hold the hi / lo sums of x row g for weight rows 2t,
// 2t + 1. A row of C depends on its row of A only: x row g's bits do not depend on the others.
// Per warp and 64-wide chunk of its 16 rows (two 8-row blocks): 2 LDG.64, 36 dequantize, 8 MMAs,
// 9 LDS (x fragments, 2^-e), 2 LDS (scales) and ~16 f32: ~2.1 lane-instructions per weight (the
// slice kernel ~5.3). Each lane keeps D chunks (2D LDG.64) of weights in flight, issued before the
// dependency wait (programmatic dependent launch); 8 warps per block, <= 64 registers (4 blocks,
// 32 warps per SM).
#pragma once

#include "kernels/cuda/quant_gemv_legacy.cuh"

namespace tf::cuda::legacy_gemv {
namespace {

constexpr int kBopRedStride = static_cast<int>(kQuantBlockRows) + 8;  // padded: fewer bank conflicts

__device__ __forceinline__ uint2 bop_load(const uint8_t* p, bool ok) {
  return ok ? __ldg(reinterpret_cast<const uint2*>(p)) : make_uint2(0x88888888u, 0x88888888u);  // q = 8: zero
}

// D: chunks of weights in flight per lane (2 LDG.64 each).
template <int D>
__global__ void __launch_bounds__(256, 4) quant_gemv_bop_kernel(const __grid_constant__ Params p) {
  extern __shared__ uint4 smem_x[];
  __shared__ float negs[kQuantMaxSliceChunks * kQuantGemvRows];
  __shared__ float red[kQuantGemvRows * kBopRedStride];
  uint32_t* xs = reinterpret_cast<uint32_t*>(smem_x);
  auto* stile = reinterpret_cast<unsigned short*>(xs + p.xtile_words);
  // The block's segment, row block and slice (as the slice kernel).
  const int64_t unit = blockIdx.x;
  int si = 0;
  for (int i = 1; i < p.count; ++i)
    if (unit >= p.seg[i].unit0) si = i;
  const Seg& sg = p.seg[si];
  const int64_t local = unit - sg.unit0;
  const int64_t rb = p.cluster ? local / sg.slices : local % sg.row_blocks;
  const int64_t slice = p.cluster ? local % sg.slices : local / sg.row_blocks;
  const int64_t c0 = slice * sg.cps;
  const int nck = static_cast<int>(std::min<int64_t>(sg.cps, p.chunks - c0));
  const int row_words = nck * kChunkWords + kRowPadWords;
  const int sstride = (nck + 1) & ~1;  // scales tile row (even: 4-byte pieces stay aligned)
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t brow0 = rb * kQuantBlockRows;
  const int wr = warp * 16;  // the warp's rows in the block: two 8-row MMA blocks

  // The weights in flight first: rows wr + g and wr + 8 + g, bytes 8t.. of each chunk's 32.
  const int64_t row_bytes = p.chunks * 32;
  const uint8_t* wp[2];
  bool wok[2];
#pragma unroll
  for (int b = 0; b < 2; ++b) {
    const int64_t row = brow0 + wr + 8 * b + g;
    wok[b] = row < sg.n;
    wp[b] = sg.codes + (wok[b] ? row : 0) * row_bytes + c0 * 32 + 8 * t;
  }
  uint2 ring[D][2];
  constexpr int kPre = D < 4 ? D : 4;  // the rest after x is staged (fewer registers live while it is: spills)
#pragma unroll
  for (int u = 0; u < kPre; ++u)
#pragma unroll
    for (int b = 0; b < 2; ++b)
      if (u < nck) ring[u][b] = bop_load(wp[b] + u * 32, wok[b]);
  // The slice's scales into shared memory, [row][sstride] f16 (weights too: before the dependency
  // wait): by cp.async in 4-byte pairs of chunks when aligned (no registers held), else loads.
  {
    const auto* sc = static_cast<const unsigned short*>(sg.scales);
    const int pairs = nck / 2;
    if (p.scale_pairs) {
      for (int i = threadIdx.x; i < static_cast<int>(kQuantBlockRows) * pairs; i += blockDim.x) {
        const int r = i / pairs, j = 2 * (i % pairs);
        const int64_t grow = brow0 + r;
        const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(stile + r * sstride + j));
        const unsigned short* src = sc + (grow < sg.n ? grow : 0) * p.chunks + c0 + j;
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                     "r"(grow < sg.n ? 4 : 0)
                     : "memory");
      }
    }
    for (int r = threadIdx.x; r < static_cast<int>(kQuantBlockRows); r += blockDim.x) {
      const int64_t grow = brow0 + r;
      for (int j = p.scale_pairs ? 2 * pairs : 0; j < nck; ++j)
        stile[r * sstride + j] = grow < sg.n ? __ldg(sc + grow * p.chunks + c0 + j) : static_cast<unsigned short>(0);
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  }
  // Up to here only the weights were read: under programmatic dependent launch this runs while
  // the kernel before still finishes; x, out and the workspace come after it has.
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  stage_x<MatrixFormat::kQ4>(xs, negs, row_words, p, c0, nck);
  asm volatile("cp.async.wait_all;\n" ::: "memory");
  __syncthreads();
#pragma unroll
  for (int u = kPre; u < D; ++u)
#pragma unroll
    for (int b = 0; b < 2; ++b)
      if (u < nck) ring[u][b] = bop_load(wp[b] + u * 32, wok[b]);

  const bool has_x = g < p.m;
  const uint32_t* xrow = xs + g * row_words + 4 * t;
  float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  for (int c = 0; c < nck; c += D) {
#pragma unroll
    for (int u = 0; u < D; ++u) {
      const int cc = c + u;
      if (cc >= nck) break;
      const float xscale = negs[cc * kQuantGemvRows + g];  // 2^-e of x row g (0 for rows >= m)
      float d[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
      // Word hw of the lane's weights (pairs 4hw..4hw+3) against quads hw (hi pairs 4hw..) and
      // 2 + hw (lo pairs) of x row g's fragments: A rows 0..7 the hi terms, 8..15 the lo terms.
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int hw = s >> 1, half = s & 1;
        // Hi pairs 2s, 2s + 1 (quad hw) and lo pairs 2s, 2s + 1 (quad 2 + hw): 8-byte reads, fewer registers live.
        const uint2 xh = has_x ? *reinterpret_cast<const uint2*>(xrow + cc * kChunkWords + 16 * hw + 2 * half)
                               : make_uint2(0, 0);
        const uint2 xl = has_x ? *reinterpret_cast<const uint2*>(xrow + cc * kChunkWords + 16 * (2 + hw) + 2 * half)
                               : make_uint2(0, 0);
        const uint32_t a[4] = {xh.x, xl.x, xh.y, xl.y};
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          const uint32_t w = hw ? ring[u][b].y : ring[u][b].x;
          uint32_t p0, p1;
          qfrag::q4_pairs_f16(half ? w >> 8 : w, p0, p1);
          qfrag::mma_16816_f16(d[b], a, p0, p1);
        }
      }
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const unsigned short* srow = stile + (wr + 8 * b + 2 * t) * sstride + cc;
        const float s0 = __half2float(__ushort_as_half(srow[0])), s1 = __half2float(__ushort_as_half(srow[sstride]));
        acc[b][0] = fmaf(s0 * xscale, d[b][0] + d[b][2], acc[b][0]);  // 2^-e: the product is exact
        acc[b][1] = fmaf(s1 * xscale, d[b][1] + d[b][3], acc[b][1]);
      }
      // This slot is used: the chunk D ahead into it.
      if (cc + D < nck) {
#pragma unroll
        for (int b = 0; b < 2; ++b) ring[u][b] = bop_load(wp[b] + (cc + D) * 32, wok[b]);
      }
    }
  }

  // C: x row g, weight rows wr + 8b + 2t + i. Through shared memory so that every sum path
  // below reads [x row][block row].
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int i = 0; i < 2; ++i) red[g * kBopRedStride + wr + 8 * b + 2 * t + i] = acc[b][i];
  if (p.cluster) {
    // Cluster rank 0 adds the slices in rank (= slice) order, as the second kernel would.
    cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // a block barrier too
    if (cluster.block_rank() == 0) {
      for (int i = threadIdx.x; i < kQuantBlockRows * p.m; i += blockDim.x) {
        const int rr = i % kQuantBlockRows, xr = i / kQuantBlockRows;
        const int64_t row = brow0 + rr;
        if (row >= sg.n) continue;
        float v = red[xr * kBopRedStride + rr];
        for (int s = 1; s < static_cast<int>(sg.slices); ++s)
          v += cluster.map_shared_rank(red, s)[xr * kBopRedStride + rr];
        float* o = sg.out + xr * sg.ldo + row;
        *o = p.accumulate ? *o + v : v;
      }
    }
    cluster.sync();  // the other blocks' shared memory must outlive rank 0's reads
    return;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kQuantBlockRows * p.m; i += blockDim.x) {
    const int rr = i % kQuantBlockRows, xr = i / kQuantBlockRows;
    const int64_t row = brow0 + rr;
    if (row >= sg.n) continue;
    const float v = red[xr * kBopRedStride + rr];
    if (sg.slices == 1) {
      float* o = sg.out + xr * sg.ldo + row;
      *o = p.accumulate ? *o + v : v;
    } else {
      sg.ws[(slice * p.m + xr) * sg.n + row] = v;
    }
  }
  if (sg.slices == 1 || sg.counters == nullptr) return;
  // The last block of this row block to finish adds the slices in slice order (as the slice
  // kernel's fused sum).
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* ctr = sg.counters + rb;
    last = atomicAdd(ctr, 1u) == static_cast<unsigned>(sg.slices - 1);
    if (last) atomicExch(ctr, 0u);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = threadIdx.x; i < kQuantBlockRows * p.m; i += blockDim.x) {
    const int64_t row = brow0 + i % kQuantBlockRows, xr = i / kQuantBlockRows;
    if (row >= sg.n) continue;
    float v = __ldcg(sg.ws + xr * sg.n + row);
    for (int64_t s = 1; s < sg.slices; ++s) v += __ldcg(sg.ws + (s * p.m + xr) * sg.n + row);
    float* o = sg.out + xr * sg.ldo + row;
    *o = p.accumulate ? *o + v : v;
  }
}

// Shared memory of a launch: the x tile, then the scales tile [128][nck rounded up to even] f16.
inline size_t bop_smem_bytes(int64_t xtile_words, int64_t cps_max) {
  return size_t(xtile_words) * 4 + size_t(cps_max + 1) * kQuantBlockRows * 2;
}

template <int D>
void launch_bop_d(cudaStream_t stream, Params p, int64_t units, int64_t cps_max, bool pdl) {
  p.xtile_words = p.m * (cps_max * kChunkWords + kRowPadWords);
  p.scale_pairs = p.chunks % 2 == 0;
  for (int i = 0; i < p.count; ++i)
    p.scale_pairs = p.scale_pairs && aligned_to(p.seg[i].scales, 4) && p.seg[i].cps % 2 == 0;
  const size_t smem = bop_smem_bytes(p.xtile_words, cps_max);
  static const bool attrs = [] {
    (void)cudaFuncSetAttribute(quant_gemv_bop_kernel<D>, cudaFuncAttributePreferredSharedMemoryCarveout,
                               int{cudaSharedmemCarveoutMaxShared});
    (void)cudaFuncSetAttribute(
        quant_gemv_bop_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(bop_smem_bytes(kQuantGemvRows * (kQuantMaxSliceChunks * kChunkWords + kRowPadWords),
                                        kQuantMaxSliceChunks)));
    (void)cudaGetLastError();
    return true;
  }();
  (void)attrs;
  const dim3 cluster(static_cast<unsigned>(p.seg[0].slices), 1, 1);
  const cudaError_t e = launch_kernel_ex(quant_gemv_bop_kernel<D>, dim3(static_cast<unsigned>(units)), dim3(256),
                                         smem, stream, p.cluster ? &cluster : nullptr, pdl, p);
  if (e != cudaSuccess)
    throw StatusError(internal_error(std::string("quant_gemv (b operand): launch failed: ") + cudaGetErrorString(e)));
}

// Chunks in flight per lane (QuantGemvArgs::inflight): 0 the default (kBopInflightDefault), 2, 4 or 8.
// run1s8 (graph, m = 1): 2 is the fastest at every model shape (4096->8192 16.9 us, 4: 18.5, 8: 20.7;
// 16384->4096 27.1 / 30.0 / 33.4), then the only depth without register spills at 64 registers; the x
// fragments are now read 8 bytes at a time and no depth spills (the bench sweeps 4 and 8).
constexpr int kBopInflightDefault = 2;
void launch_bop(cudaStream_t stream, int inflight, const Params& p, int64_t units, int64_t cps_max, bool pdl) {
  const int d = inflight > 0 ? inflight : kBopInflightDefault;
  if (d <= 2) return launch_bop_d<2>(stream, p, units, cps_max, pdl);
  if (d <= 4) return launch_bop_d<4>(stream, p, units, cps_max, pdl);
  return launch_bop_d<8>(stream, p, units, cps_max, pdl);
}

}  // namespace
}  // namespace tf::cuda::legacy_gemv
