// MLA sparse attention for prefill rows on BF16 tensor cores, for bf16 and fp8 latent
// caches (Ops::mla_sparse_attention; the TF32 kernel of cuda_mla_prefill.cu keeps the
// f32 cache and the shapes this one does not cover).
//
// One block (16 warps; 8 in the q-in-registers form below) per query row; the heads are
// the M dimension of every product, since all heads of a row attend to the same latents:
//  0. the row's indices become a compact token list, ascending and deduplicated
//     (latent_index_sort.cuh: a bitmap of the cache's tokens in the shared memory the
//     tiles use later, or a sort where the bitmap does not fit); q [H, R] is rounded to
//     bf16 (or split into bf16 hi/lo parts) in shared memory (or straight into each warp's
//     A fragments);
//  1. per tile of 32 tokens (the next tile's latents are gathered from the paged cache
//     into registers while the current one is multiplied, a token's page and slot by
//     shift and mask for a power-of-two page size; fp8 is widened to bf16, exactly):
//       S [H, 32] = q L^T          warps: (H/16 head tiles) x (warps / (H/16) K slices),
//                                  partial sums added in a fixed order;
//       online softmax per head    a warp's heads side by side: running max m, sum l;
//                                  P = exp(S - m) (x fp8 scale) in bf16 (or hi/lo);
//                                  alpha = exp(m_old - m_new);
//       O [H, R] = alpha O + P L   warps: (H/16 head tiles) x (column groups), O in
//                                  registers for the whole row (not rescaled when no max
//                                  of the warp's heads moved: alpha 1);
//  2. O / l is written out (a row with no valid token gets zeros, as on the CPU).
// Accuracy: the latents are exact in bf16. By default q and P are rounded to bf16 once,
// as the reference's bf16 attention rounds them (one mma per product; H200, session 34:
// <= 3.1e-3 of the largest output over the parity shapes). TF_MLA_PREFILL_SPLIT=1 splits
// them into hi/lo parts (two mma per product): ~2^-16 relative, <= 4.9e-6 (the op's 1e-5
// parity tolerance), at ~1.25x the time.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <atomic>
#include <bit>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "core/status.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_mla_prefill.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/latent_index_sort.cuh"
#include "kernels/cuda/mma_bf16.cuh"

namespace tf::cuda {
namespace {

// Two forms of one kernel. The default: 16 warps, q's bf16 hi/lo parts in shared memory
// (~218 KB at 64 heads x 512). Where that does not fit (a 99 KB sm_120 / sm_121 GPU, at its
// 16 or 32 heads per rank): 8 warps holding their q fragments in registers, ~84 KB. The
// products are the same; S's partial sums come in half as many K slices, so its last bits
// can differ from the default form's (a GPU always takes the same form for a shape).
constexpr int kThreads = 512;        // the default form
constexpr int kSmallThreads = 256;   // the q-in-registers form
constexpr int kMaxQSteps = 8;        // its k16 steps of q per warp (kw <= 128)
constexpr int kTile = 32;          // tokens per tile
constexpr int kLdS = kTile + 4;    // f32 partial-score row stride
constexpr int kLdP = kTile + 8;    // bf16 probability row stride (16-byte rows, odd multiple)
constexpr int kMaxWidth = 512;     // latent width: at most 4 gathered chunks per thread per tile
constexpr int kMaxColTiles = 16;   // n8 output tiles per warp (128 columns)

struct Layout {
  size_t q_hi, q_lo, lat, sp, p_hi, p_lo, ids, stats, ls, counts, total;
};

__host__ __device__ inline size_t align16(size_t x) { return (x + 15) / 16 * 16; }

// Shared memory (bytes) for `heads` heads of width r and w indices per row. The sort's
// slots alias the region before p_hi (used only after the sort). Without the split (q and
// P as one bf16 part each) the lo regions are empty.
// The form of `threads` threads: q in shared memory (kThreads) or in registers (kSmallThreads).
__host__ __device__ constexpr bool q_in_registers(int threads) { return threads == kSmallThreads; }

__host__ __device__ inline Layout layout(int heads, int r, int64_t w, int threads, bool split) {
  Layout m{};
  const size_t ldq = static_cast<size_t>(r) + 8, ks = threads / 32 / (heads / 16);
  const size_t q_bytes = q_in_registers(threads) ? 0 : heads * ldq * 2;
  const size_t p_bytes = static_cast<size_t>(heads) * kLdP * 2;
  m.q_hi = 0;
  m.q_lo = m.q_hi + q_bytes;
  m.lat = m.q_lo + (split ? q_bytes : 0);
  m.sp = m.lat + kTile * ldq * 2;
  m.p_hi = m.sp + ks * heads * kLdS * 4;
  m.p_lo = m.p_hi + p_bytes;
  m.ids = m.p_lo + (split ? p_bytes : 0);
  m.stats = align16(m.ids + static_cast<size_t>(w) * 4);
  m.ls = m.stats + static_cast<size_t>(heads) * 3 * 4;
  m.counts = m.ls + kTile * 4;
  m.total = align16(m.counts + 33 * 4);
  return m;
}

struct Pages {
  const void* pages;
  const float* scales;
  const int32_t* page_table;
  int64_t page_size, page_stride, num_tokens;
  int page_shift;  // log2(page_size) when it is a power of two (the usual case), else -1
};

// Token tok's physical page and slot: by shift and mask for a power-of-two page size, else by
// division (a uniform branch: the gather takes 4 of these per thread and tile).
__device__ __forceinline__ void token_page(const Pages& c, int tok, int64_t& page, int64_t& slot) {
  if (c.page_shift >= 0) {
    page = c.page_table[tok >> c.page_shift];
    slot = tok & ((1 << c.page_shift) - 1);
  } else {
    page = c.page_table[tok / c.page_size];
    slot = tok % c.page_size;
  }
}

template <typename T>
struct Chunk;  // 8 latent values as loaded from the cache
template <>
struct Chunk<__nv_bfloat16> {
  using Raw = uint4;
};
template <>
struct Chunk<__nv_fp8_e4m3> {
  using Raw = uint2;
};

// 8 fp8 values (bytes of a uint2) widened to 8 bf16 (exact) as a uint4.
__device__ __forceinline__ uint4 widen_fp8(uint2 v) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t src = i < 2 ? v.x : v.y, sh = (i & 1) * 16;
    __nv_fp8_e4m3 a, b;
    a.__x = static_cast<__nv_fp8_storage_t>((src >> sh) & 0xff);
    b.__x = static_cast<__nv_fp8_storage_t>((src >> (sh + 8)) & 0xff);
    w[i] = pack_bf16(__float2bfloat16_rn(static_cast<float>(a)), __float2bfloat16_rn(static_cast<float>(b)));
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

// kSplit: q and P as bf16 hi + lo parts (two mma per product, ~2^-16 relative), else
// rounded to bf16 once (one mma per product), as the reference's bf16 attention rounds them.
template <typename T, int Threads, bool kSplit>
__global__ void __launch_bounds__(Threads, 1)
    mla_mma_kernel(float* __restrict__ out, const float* __restrict__ q, Pages c,
                   const int32_t* __restrict__ indices, int w, int heads, int r, int padded, float scale,
                   bool sort_tokens, bool heads_in_turn) {
  using Raw = typename Chunk<T>::Raw;
  constexpr bool kFp8 = std::is_same_v<T, __nv_fp8_e4m3>;
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int kThr = Threads, kWarps = Threads / 32;
  constexpr int kPre = kTile * (kMaxWidth / 8) / Threads;  // latent chunks a thread gathers per tile
  constexpr bool QRegs = q_in_registers(Threads);
  const Layout L = layout(heads, r, w, Threads, kSplit);
  const int ldq = r + 8;
  __nv_bfloat16* qh = reinterpret_cast<__nv_bfloat16*>(smem + L.q_hi);
  __nv_bfloat16* ql = reinterpret_cast<__nv_bfloat16*>(smem + L.q_lo);
  __nv_bfloat16* lat = reinterpret_cast<__nv_bfloat16*>(smem + L.lat);  // [kTile][ldq]
  float* sp = reinterpret_cast<float*>(smem + L.sp);                     // [ks][heads][kLdS]
  __nv_bfloat16* ph = reinterpret_cast<__nv_bfloat16*>(smem + L.p_hi);   // [heads][kLdP]
  __nv_bfloat16* pl = reinterpret_cast<__nv_bfloat16*>(smem + L.p_lo);
  int* ids = reinterpret_cast<int*>(smem + L.ids);
  float* mrow = reinterpret_cast<float*>(smem + L.stats);
  float* lrow = mrow + heads;
  float* alpha = lrow + heads;
  float* ls = reinterpret_cast<float*>(smem + L.ls);
  int* counts = reinterpret_cast<int*>(smem + L.counts);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tq = lane & 3;
  const int64_t row = blockIdx.x;
  const int mt = heads >> 4, ks = kWarps / mt, kw = r / ks;  // kw: K slice of S = columns of O per warp
  const int sm = warp % mt, sk = warp / mt;                  // S: head tile, K slice
  const int pm = warp / ks, pc = warp % ks;                  // PV: head tile, column group

  // The row's distinct tokens, ascending: from a bitmap of the cache's tokens where it fits
  // the space before p_hi (q and the tiles come later), else by a sort.
  int nv;
  if (!sort_tokens && latent_bitmap_words(c.num_tokens) * 4 <= static_cast<int64_t>(L.p_hi)) {
    nv = bitmap_row_tokens(ids, reinterpret_cast<uint32_t*>(smem), indices + row * w, w, c.num_tokens, counts);
  } else {
    sort_row_tokens(reinterpret_cast<int*>(smem), indices + row * w, w, c.num_tokens, padded);
    nv = compact_row_tokens(ids, reinterpret_cast<int*>(smem), padded, counts);
  }

  const float* qrow = q + row * heads * r;
  // QRegs: this warp's A fragments of q (heads sm*16.., columns sk*kw..), split as below.
  uint32_t qfh[QRegs ? kMaxQSteps : 1][4], qfl[QRegs ? kMaxQSteps : 1][4];
  if constexpr (QRegs) {
#pragma unroll
    for (int j = 0; j < kMaxQSteps; ++j) {
      if (16 * j < kw) {
        // m16k16 A fragment: regs 0..3 = (row g, k 2tq), (row g+8, k 2tq), (row g, k 2tq+8), (row g+8, k 2tq+8).
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int hh = sm * 16 + g + (i & 1) * 8, x = sk * kw + 16 * j + 2 * tq + (i >> 1) * 8;
          const float2 v = __ldg(reinterpret_cast<const float2*>(qrow + hh * r + x));
          const Bf16Split a = split_bf16(v.x), b = split_bf16(v.y);
          qfh[j][i] = pack_bf16(a.hi, b.hi);
          if constexpr (kSplit) qfl[j][i] = pack_bf16(a.lo, b.lo);
        }
      }
    }
  }
  for (int e = tid; !QRegs && e < heads * r / 4; e += kThr) {
    const int hh = (e * 4) / r, x = (e * 4) % r;
    const float4 v = __ldg(reinterpret_cast<const float4*>(qrow) + e);
    const Bf16Split a = split_bf16(v.x), b = split_bf16(v.y), cc = split_bf16(v.z), d = split_bf16(v.w);
    *reinterpret_cast<uint2*>(qh + hh * ldq + x) = make_uint2(pack_bf16(a.hi, b.hi), pack_bf16(cc.hi, d.hi));
    if constexpr (kSplit)
      *reinterpret_cast<uint2*>(ql + hh * ldq + x) =
          make_uint2(pack_bf16(a.lo, b.lo), pack_bf16(cc.lo, d.lo));
  }
  if (tid < heads) {
    mrow[tid] = -INFINITY;
    lrow[tid] = 0.0f;
  }

  float o[kMaxColTiles][4];
#pragma unroll
  for (int i = 0; i < kMaxColTiles; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  const int col_tiles = kw / 8;

  // Gather a tile's latents (8-value chunks) into registers; rows past nv are zeros.
  // A thread's chunks e = tid + i kThr: token j of the tile, column x (the same every tile).
  const int chunks_per_tok = r / 8, chunks = kTile * chunks_per_tok;
  const int cpt_shift = (chunks_per_tok & (chunks_per_tok - 1)) == 0 ? __ffs(chunks_per_tok) - 1 : -1;
  auto chunk_token = [&](int e) { return cpt_shift >= 0 ? e >> cpt_shift : e / chunks_per_tok; };
  Raw pre[kPre];
  auto fetch = [&](int t0) {
#pragma unroll
    for (int i = 0; i < kPre; ++i) {
      const int e = tid + i * kThr, j = chunk_token(e), x = (e - j * chunks_per_tok) * 8;
      Raw v{};
      if (e < chunks && t0 + j < nv) {
        int64_t page, slot;
        token_page(c, ids[t0 + j], page, slot);
        v = __ldg(reinterpret_cast<const Raw*>(static_cast<const T*>(c.pages) + page * c.page_stride + slot * r + x));
      }
      pre[i] = v;
    }
  };
  auto commit = [&](int t0) {
#pragma unroll
    for (int i = 0; i < kPre; ++i) {
      const int e = tid + i * kThr, j = chunk_token(e), x = (e - j * chunks_per_tok) * 8;
      if (e < chunks) {
        if constexpr (kFp8)
          *reinterpret_cast<uint4*>(lat + j * ldq + x) = widen_fp8(pre[i]);
        else
          *reinterpret_cast<uint4*>(lat + j * ldq + x) = pre[i];
      }
    }
    if (tid < kTile) {
      float s = 1.0f;
      if (kFp8 && t0 + tid < nv) {
        int64_t page, slot;
        token_page(c, ids[t0 + tid], page, slot);
        s = c.scales[page * c.page_size + slot];
      }
      ls[tid] = s;
    }
  };

  // The softmax step of n heads (h0, h0 + kWarps, ...; n <= N) on this warp's lanes (a lane per
  // token of the tile at t0), each head's as a warp per head computes it: its ks partial scores
  // summed in order, max and sum by warp_reduce's butterflies; the N heads' chains side by side.
  constexpr int kMaxHeadsPerWarp = 64 / kWarps;
  auto softmax_heads = [&](auto n_max, int h0, int n, int t0) {
    constexpr int N = decltype(n_max)::value;
    const bool ok = t0 + lane < nv;
    const float lsv = ls[lane];
    float sv[N], mx[N], e[N], sum[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
      sv[i] = 0.0f;
      if (i < n) {
        // The ks partials in order, four loads at a time where ks allows (every form but
        // 64 heads of width <= 128 in 8 warps).
        const float* src = sp + (h0 + i * kWarps) * kLdS + lane;
        const int stride = heads * kLdS;
        int kk = 0;
        if ((ks & 3) == 0) {
          for (; kk < ks; kk += 4) {
            const float a = src[kk * stride], b = src[(kk + 1) * stride], cc = src[(kk + 2) * stride],
                        d = src[(kk + 3) * stride];
            sv[i] += a;
            sv[i] += b;
            sv[i] += cc;
            sv[i] += d;
          }
        }
        for (; kk < ks; ++kk) sv[i] += src[kk * stride];
      }
      sv[i] = ok ? sv[i] * scale * lsv : -INFINITY;
      mx[i] = sv[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int i = 0; i < N; ++i) mx[i] = MaxOp{}(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], o));
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float m_old = i < n ? mrow[h0 + i * kWarps] : 0.0f;
      mx[i] = fmaxf(m_old, mx[i]);  // m_new
      e[i] = ok ? expf(sv[i] - mx[i]) : 0.0f;
      sum[i] = e[i];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int i = 0; i < N; ++i) sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], o);
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if (i >= n) continue;
      const int h = h0 + i * kWarps;
      const Bf16Split p = split_bf16(e[i] * lsv);
      ph[h * kLdP + lane] = p.hi;
      if constexpr (kSplit) pl[h * kLdP + lane] = p.lo;
      if (lane == 0) {
        const float m_old = mrow[h], a = expf(m_old - mx[i]);
        alpha[h] = a;
        lrow[h] = lrow[h] * a + sum[i];
        mrow[h] = mx[i];
      }
    }
  };

  if (nv > 0) fetch(0);
  for (int t0 = 0; t0 < nv; t0 += kTile) {
    __syncthreads();  // the previous tile's latents and probabilities are consumed (and q is stored)
    commit(t0);
    __syncthreads();
    if (t0 + kTile < nv) fetch(t0 + kTile);

    // S partial over this warp's K slice: 16 heads x 32 tokens.
    {
      float s[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
      // Each accumulator takes lo, then hi; the 4 accumulators in turn, so no product
      // waits on the one just issued (back to back, the pairs stalled on each other).
      auto step = [&](int k, const uint32_t(&ah)[4], const uint32_t(&al)[4]) {
        uint32_t b[2][4];
        load_b_frags_nk(b[0], lat + k, ldq, lane);
        load_b_frags_nk(b[1], lat + 16 * ldq + k, ldq, lane);
        if constexpr (kSplit) {
#pragma unroll
          for (int n = 0; n < 4; ++n)
            mma_bf16_16816(s[n], al, b[n >> 1][(n & 1) * 2], b[n >> 1][(n & 1) * 2 + 1]);
        }
#pragma unroll
        for (int n = 0; n < 4; ++n) mma_bf16_16816(s[n], ah, b[n >> 1][(n & 1) * 2], b[n >> 1][(n & 1) * 2 + 1]);
      };
      if constexpr (QRegs) {
#pragma unroll
        for (int j = 0; j < kMaxQSteps; ++j)
          if (16 * j < kw) step(sk * kw + 16 * j, qfh[j], qfl[j]);
      } else {
        for (int k = sk * kw; k < (sk + 1) * kw; k += 16) {
          uint32_t ah[4], al[4];
          load_a_frag(ah, qh + sm * 16 * ldq + k, ldq, lane);
          if constexpr (kSplit) load_a_frag(al, ql + sm * 16 * ldq + k, ldq, lane);
          step(k, ah, al);
        }
      }
      float* spk = sp + (sk * heads + sm * 16 + g) * kLdS;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        const int col = ni * 8 + 2 * tq;
        spk[col] = s[ni][0];
        spk[col + 1] = s[ni][1];
        spk[8 * kLdS + col] = s[ni][2];
        spk[8 * kLdS + col + 1] = s[ni][3];
      }
    }
    __syncthreads();

    // Online softmax: a lane per token; warp w takes heads w, w + kWarps, ...: side by side
    // (their reductions' shuffles interleave), or one after another (heads_in_turn, the
    // first form: the same arithmetic per head, so the same bits).
    if (heads_in_turn) {
      for (int h = warp; h < heads; h += kWarps) softmax_heads(std::integral_constant<int, 1>{}, h, 1, t0);
    } else {
      softmax_heads(std::integral_constant<int, kMaxHeadsPerWarp>{}, warp, heads / kWarps, t0);
    }
    __syncthreads();

    // O = alpha O + P L over this warp's 16 heads x kw columns.
    {
      const float a0 = alpha[pm * 16 + g], a1 = alpha[pm * 16 + g + 8];
      // Most tiles leave every running max of the warp's 16 heads where it was (alpha 1:
      // the product would be the same bits): skip the rescale then.
      if (__any_sync(0xffffffffu, a0 != 1.0f || a1 != 1.0f)) {
#pragma unroll
        for (int i = 0; i < kMaxColTiles; ++i) {
          o[i][0] *= a0;
          o[i][1] *= a0;
          o[i][2] *= a1;
          o[i][3] *= a1;
        }
      }
#pragma unroll
      for (int k = 0; k < kTile; k += 16) {
        uint32_t ah[4], al[4];
        load_a_frag(ah, ph + pm * 16 * kLdP + k, kLdP, lane);
        if constexpr (kSplit) load_a_frag(al, pl + pm * 16 * kLdP + k, kLdP, lane);
          // Two column pairs at a time: 4 accumulators take lo in turn, then hi.
#pragma unroll
        for (int pr = 0; pr < kMaxColTiles / 2; pr += 2) {
          if (2 * pr < col_tiles) {
            const bool two = 2 * pr + 2 < col_tiles;
            uint32_t b[2][4];
            load_b_frags_kn(b[0], lat + k * ldq + pc * kw + pr * 16, ldq, lane);
            if (two) load_b_frags_kn(b[1], lat + k * ldq + pc * kw + pr * 16 + 16, ldq, lane);
            if constexpr (kSplit) {
              mma_bf16_16816(o[2 * pr], al, b[0][0], b[0][1]);
              mma_bf16_16816(o[2 * pr + 1], al, b[0][2], b[0][3]);
              if (two) {
                mma_bf16_16816(o[2 * pr + 2], al, b[1][0], b[1][1]);
                mma_bf16_16816(o[2 * pr + 3], al, b[1][2], b[1][3]);
              }
            }
            mma_bf16_16816(o[2 * pr], ah, b[0][0], b[0][1]);
            mma_bf16_16816(o[2 * pr + 1], ah, b[0][2], b[0][3]);
            if (two) {
              mma_bf16_16816(o[2 * pr + 2], ah, b[1][0], b[1][1]);
              mma_bf16_16816(o[2 * pr + 3], ah, b[1][2], b[1][3]);
            }
          }
        }
      }
    }
  }
  __syncthreads();
  const int h0 = pm * 16 + g;
  const float l0 = lrow[h0], l1 = lrow[h0 + 8];
  const float i0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, i1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  float* o0 = out + (row * heads + h0) * r + pc * kw + 2 * tq;
  float* o1 = o0 + 8 * r;
#pragma unroll
  for (int i = 0; i < kMaxColTiles; ++i) {
    if (i < col_tiles) {
      *reinterpret_cast<float2*>(o0 + i * 8) = make_float2(o[i][0] * i0, o[i][1] * i0);
      *reinterpret_cast<float2*>(o1 + i * 8) = make_float2(o[i][2] * i1, o[i][3] * i1);
    }
  }
}

}  // namespace

std::atomic<bool>& mla_prefill_split() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TF_MLA_PREFILL_SPLIT");
    return e != nullptr && std::string(e) == "1";
  }()};
  return on;
}

std::atomic<bool>& mla_prefill_heads_in_turn() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TF_MLA_PREFILL_HEADS_IN_TURN");
    return e != nullptr && std::string(e) == "1";
  }()};
  return on;
}

std::atomic<bool>& mla_prefill_sort_tokens() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TF_MLA_PREFILL_SORT");
    return e != nullptr && std::string(e) == "1";
  }()};
  return on;
}

namespace {

// Whether the form of `threads` covers the shape on this GPU.
bool form_fits(int64_t heads, int64_t width, int64_t indices_per_row, int threads, bool split) {
  const bool q_regs = q_in_registers(threads);
  const int64_t kw = width * (heads / 16) / (threads / 32);  // K slice of S = O columns per warp
  if (kw <= 0 || kw % 16 != 0 || kw > 8 * kMaxColTiles || (q_regs && kw > 16 * kMaxQSteps)) return false;
  const Layout m = layout(static_cast<int>(heads), static_cast<int>(width), indices_per_row, threads, split);
  return smem_fits(m.total, 1024) && static_cast<size_t>(latent_sort_slots(indices_per_row)) * 4 <= m.p_hi;
}

// 0: not covered; else the block size of the form that runs (kThreads, or kSmallThreads
// with q in registers where the default's shared memory does not fit).
int mma_form(int64_t heads, int64_t width, int64_t indices_per_row, DType cache_dtype, bool split) {
  if (cache_dtype != DType::kBF16 && cache_dtype != DType::kF8E4M3) return 0;
  if (heads != 16 && heads != 32 && heads != 64) return 0;
  if (width <= 0 || width % 16 != 0 || width > kMaxWidth) return 0;
  if (indices_per_row <= 0 || indices_per_row > (int64_t{1} << 14)) return 0;
  for (const int threads : {kThreads, kSmallThreads})
    if (form_fits(heads, width, indices_per_row, threads, split)) return threads;
  return 0;
}

}  // namespace

bool mla_prefill_mma_supported(int64_t heads, int64_t width, int64_t indices_per_row, DType cache_dtype) {
  return mma_form(heads, width, indices_per_row, cache_dtype, mla_prefill_split().load()) != 0;
}

bool mla_sparse_attention_mma(CudaContext& ctx, Tensor& out, const Tensor& q, const LatentPagesView& cache,
                              const Tensor& indices, float scale) {
  const char* op = "mla_sparse_attention (prefill, bf16 tensor cores)";
  const int64_t r = cache.width, w = indices.dim() == 0 ? 0 : indices.size(-1);
  const int64_t t = w == 0 ? 0 : indices.numel() / w;
  if (t == 0 || r == 0 || q.dtype() != DType::kF32) return false;
  const int64_t h = q.numel() / (t * r);
  if (h * t * r != q.numel()) return false;
  const bool split = mla_prefill_split().load();
  const int threads = mma_form(h, r, w, cache.dtype, split);
  if (threads == 0) return false;
  const auto aligned = [](const void* p, uintptr_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; };
  if (!aligned(q.raw(), 16) || !aligned(out.raw(), 8) || !aligned(cache.pages, 16) || cache.page_stride % 8 != 0)
    return false;
  check_dev(ctx, op, q, DType::kF32, t * h * r);
  check_dev(ctx, op, out, DType::kF32, t * h * r);
  check_dev(ctx, op, indices, DType::kI32);
  if (cache.dtype == DType::kF8E4M3 && cache.scales == nullptr)
    throw StatusError(invalid_argument(std::string(op) + ": an fp8 cache needs its scales"));
  const int padded = latent_sort_slots(w);
  const size_t smem = layout(static_cast<int>(h), static_cast<int>(r), w, threads, split).total;
  const uint64_t ps = static_cast<uint64_t>(cache.page_size);
  const int page_shift = std::has_single_bit(ps) && ps <= (uint64_t{1} << 30) ? std::countr_zero(ps) : -1;
  const Pages pg{cache.pages,       cache.scales,     cache.page_table, cache.page_size,
                 cache.page_stride, cache.num_tokens, page_shift};
  auto launch = [&](auto kernel) {
    if (const Status s = set_dynamic_smem(kernel, smem, op); !s.is_ok()) throw StatusError(s);
    kernel<<<static_cast<unsigned>(t), threads, smem, ctx.stream>>>(
        out.data<float>(), q.data<float>(), pg, indices.data<int32_t>(), static_cast<int>(w),
        static_cast<int>(h), static_cast<int>(r), padded, scale, mla_prefill_sort_tokens().load(),
        mla_prefill_heads_in_turn().load());
  };
  // The instance of the cache's dtype for a form (Th threads) and a precision (S: the split pairs).
  auto launch_instance = [&](auto th, auto sp) {
    constexpr int Th = decltype(th)::value;
    constexpr bool S = decltype(sp)::value;
    if (cache.dtype == DType::kBF16)
      launch(mla_mma_kernel<__nv_bfloat16, Th, S>);
    else
      launch(mla_mma_kernel<__nv_fp8_e4m3, Th, S>);
  };
  auto launch_form = [&](auto th) {
    if (split)
      launch_instance(th, std::true_type{});
    else
      launch_instance(th, std::false_type{});
  };
  if (threads == kSmallThreads)
    launch_form(std::integral_constant<int, kSmallThreads>{});
  else
    launch_form(std::integral_constant<int, kThreads>{});
  check_launch(op);
  return true;
}

}  // namespace tf::cuda
