// KDA chunked prefill on the GPU: the delta rule with per-channel decay in the WY
// (UT-transform) form over chunks of 64 tokens, the same function as
// kernels/cpu/cpu_kda.cc's kda_chunked (the reference).
//
// Two kernels per group of chunks:
//  1. intra (grid: chunk x head, all independent; by default the tensor-core kernel of
//     cuda_kda_intra_mma.cuh (its 80 KB form where 112 KB do not fit), the scalar one
//     below with TF_KDA_INTRA_MMA=0; the same function, different summation orders): l2-normalised q/k, the cumulative
//     gates G, the strictly lower A[i][j] = -b_i sum_x k_i k_j e^(G_i - G_j) and the
//     scores P[i][j] = sum_x q_i k_j e^(G_i - G_j) (j <= i, exact pairwise exponents:
//     G falls by up to 5 per token, so factored forms e^G_i * e^-G_j overflow in f32),
//     T = (I - A)^-1 by forward substitution (right-looking: one barrier per row), then
//     w = T (b k e^G) (stored negated), u = T (b v), q e^G, k e^(G_last - G) and
//     e^G_last, written to scratch in a fixed 128-wide layout (channels >= Dk /
//     columns >= Dv and rows past the end are zero).
//  2. state (grid: head x 32 value columns, chunks in order; by default split in two,
//     cuda_kda_state_split.cuh: the chain carries S and v_new only and the outputs come
//     from a parallel kernel; the single kernel below with TF_KDA_STATE_SPLIT=0): with S [128 x 32] in
//     shared memory, per chunk v_new = u - w S, out = (q e^G) S + P v_new,
//     S = e^G_last * S + (k e^(G_last - G))^T v_new: tensor-core GEMMs (wmma TF32,
//     f32 accumulate; k-loops unrolled by 8 so that the fragment loads from the scratch
//     overlap). Each operand is split into a TF32 high part and a TF32 low
//     part and three products are summed ("3xTF32"), which keeps f32 accuracy: the
//     state is carried over thousands of tokens and the model tests compare logits
//     with the f32 CPU backend at 1e-4.
// Value columns of S are independent, so blocks split Dv and never talk.
// Supports Dk <= 128 and Dv <= 128 (kda_chunked_supported); callers fall back to the
// token-by-token kernel otherwise.
#include <mma.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "core/status.h"
#include "kernels/cuda/cuda_kda_chunked.h"
#include "kernels/cuda/cuda_kda_intra_mma.cuh"
#include "kernels/cuda/cuda_kda_scratch.cuh"
#include "kernels/cuda/cuda_kda_state_split.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/device_limits.h"

namespace tf::cuda {
namespace {

namespace wmma = nvcuda::wmma;

using kda::kC;
using kda::kD;
using kda::kOffDecay;
using kda::kOffKd;
using kda::kOffP;
using kda::kOffQg;
using kda::kOffU;
using kda::kOffW;
using kda::kPer;
constexpr int kLd = kD + 1;  // smem row stride of the scalar intra kernel (lanes = rows: no bank conflicts)
constexpr int kCols = 32;    // value columns per state block
constexpr int kSLd = kCols + 8;  // smem row stride of the state kernel (32-byte aligned rows)

constexpr int kIntraThreads = 256;
constexpr size_t kIntraSmem = (3 * kC * kLd + kC * (kC + 1) + kC) * sizeof(float);

__global__ void __launch_bounds__(kIntraThreads)
    kda_intra_kernel(float* __restrict__ scratch, const float* __restrict__ q, const float* __restrict__ k,
                     const float* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                     int64_t t_len, int64_t chunk0, int heads, int dk, int dv, float qscale) {
  extern __shared__ float sh[];
  float* qn = sh;                  // [C][kLd] normalised q (later b v)
  float* kn = qn + kC * kLd;       // [C][kLd] normalised k (later b k e^G)
  float* gc = kn + kC * kLd;       // [C][kLd] cumulative gates
  float* a = gc + kC * kLd;        // [C][C+1] A, then T
  float* bet = a + kC * (kC + 1);  // [C]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int h = blockIdx.y;
  const int64_t c0 = (chunk0 + blockIdx.x) * kC;
  const int n = static_cast<int>(t_len - c0 < kC ? t_len - c0 : kC);
  float* out = scratch + (static_cast<int64_t>(blockIdx.x) * heads + h) * kPer;

  // 1. l2-normalised q (times Dk^-1/2) and k, a warp per row; b; cumulative gates.
  for (int i = warp; i < kC; i += kIntraThreads / 32) {
    const int64_t row = (c0 + i) * heads + h;
    float qv[kD / 32], kv[kD / 32];
    float qs = 0, ks = 0;
#pragma unroll
    for (int m = 0; m < kD / 32; ++m) {
      const int x = lane + 32 * m;
      const bool ok = i < n && x < dk;
      qv[m] = ok ? q[row * dk + x] : 0.0f;
      kv[m] = ok ? k[row * dk + x] : 0.0f;
      qs += qv[m] * qv[m];
      ks += kv[m] * kv[m];
    }
    qs = warp_reduce(qs, SumOp{});
    ks = warp_reduce(ks, SumOp{});
    const float qinv = qscale / sqrtf(qs + 1e-6f), kinv = 1.0f / sqrtf(ks + 1e-6f);
#pragma unroll
    for (int m = 0; m < kD / 32; ++m) {
      qn[i * kLd + lane + 32 * m] = qv[m] * qinv;
      kn[i * kLd + lane + 32 * m] = kv[m] * kinv;
    }
    if (lane == 0) bet[i] = i < n ? beta[row] : 0.0f;
  }
  if (tid < kD) {
    float acc = 0;
    for (int i = 0; i < kC; ++i) {
      if (i < n && tid < dk) acc += g[((c0 + i) * heads + h) * dk + tid];
      gc[i * kLd + tid] = acc;
    }
  }
  __syncthreads();

  // 2. A (strictly lower) and P (lower, diagonal included): thread = rows lane and
  // lane + 32 x columns warp + 8 m; one exponent per (i, j, x) serves both.
  {
    float acc_a[2][8], acc_p[2][8];
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int m = 0; m < 8; ++m) acc_a[r][m] = acc_p[r][m] = 0.0f;
    const int i0 = lane, i1 = lane + 32;
    for (int x = 0; x < dk; ++x) {
      const float ki0 = kn[i0 * kLd + x], ki1 = kn[i1 * kLd + x];
      const float qi0 = qn[i0 * kLd + x], qi1 = qn[i1 * kLd + x];
      const float gi0 = gc[i0 * kLd + x], gi1 = gc[i1 * kLd + x];
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const int j = warp + 8 * m;
        const float kj = kn[j * kLd + x], gj = gc[j * kLd + x];
        // j <= i only (the exponent is <= 0 there; the other half is never used).
        if (j <= i0) {
          const float e = kj * __expf(gi0 - gj);
          acc_a[0][m] += ki0 * e;
          acc_p[0][m] += qi0 * e;
        }
        if (j <= i1) {
          const float e = kj * __expf(gi1 - gj);
          acc_a[1][m] += ki1 * e;
          acc_p[1][m] += qi1 * e;
        }
      }
    }
    float* pout = out + kOffP;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = r ? i1 : i0;
#pragma unroll
      for (int m = 0; m < 8; ++m) {
        const int j = warp + 8 * m;
        a[i * (kC + 1) + j] = j < i ? -bet[i] * acc_a[r][m] : 0.0f;
        pout[i * kC + j] = j <= i ? acc_p[r][m] : 0.0f;
      }
    }
  }
  __syncthreads();

  // 3. T = (I - A_strict)^-1 in place: T[i][j] = A[i][j] + sum_{j<m<i} A[i][m] T[m][j].
  // Right-looking: once row m is final (after step m - 1), every later row i adds its
  // term A[i][m] T[m][j] for all j < m at once (a[i][m] itself is T[i][m]'s first term
  // and stays). Each entry still sums its terms in ascending m, as the row-by-row form
  // did, but a step is one barrier and a few products per thread instead of a serial
  // row of up to 63 (the chunk's former bottleneck).
  for (int m = 1; m < kC - 1; ++m) {
    const int rows = kC - 1 - m;  // i = m + 1 .. kC - 1, j = 0 .. m - 1
    for (int e = tid; e < rows * m; e += kIntraThreads) {
      const int i = m + 1 + e / m, j = e % m;
      a[i * (kC + 1) + j] += a[i * (kC + 1) + m] * a[m * (kC + 1) + j];
    }
    __syncthreads();
  }
  if (tid < kC) a[tid * (kC + 1) + tid] = 1.0f;

  // 4. q e^G, k e^(G_last - G), e^G_last; then b v and b k e^G in place of q and k.
  const int x = tid % kD, half = tid / kD;
  const float glast = gc[(kC - 1) * kLd + x];
  if (half == 0) out[kOffDecay + x] = x < dk ? __expf(glast) : 0.0f;
  for (int i = half; i < kC; i += 2) {
    const float gi = gc[i * kLd + x];
    const float e = __expf(gi);
    out[kOffQg + i * kD + x] = qn[i * kLd + x] * e;
    out[kOffKd + i * kD + x] = kn[i * kLd + x] * __expf(glast - gi);
    kn[i * kLd + x] *= bet[i] * e;
    qn[i * kLd + x] = (i < n && x < dv) ? bet[i] * v[((c0 + i) * heads + h) * dv + x] : 0.0f;
  }
  __syncthreads();

  // 5. -w = -T (b k e^G) and u = T (b v).
  for (int i = half; i < kC; i += 2) {
    float aw = 0, au = 0;
    for (int j = 0; j <= i; ++j) {
      const float tij = a[i * (kC + 1) + j];
      aw += tij * kn[j * kLd + x];
      au += tij * qn[j * kLd + x];
    }
    out[kOffW + i * kD + x] = -aw;
    out[kOffU + i * kD + x] = au;
  }
}

// wmma TF32 fragments and the 3xTF32 split (hi = tf32(v), lo = tf32(v - hi)).
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragAc = wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::col_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;

template <typename Frag>
__device__ __forceinline__ void split_tf32(Frag& hi, Frag& lo) {
#pragma unroll
  for (int t = 0; t < hi.num_elements; ++t) {
    const float v = hi.x[t];
    const float h = wmma::__float_to_tf32(v);
    hi.x[t] = h;
    lo.x[t] = wmma::__float_to_tf32(v - h);
  }
}

// acc += a b with both operands split (the lo*lo term is below f32 rounding).
template <typename FA>
__device__ __forceinline__ void mma3(FragC& acc, FA& a, FragB& b) {
  FA a_lo;
  FragB b_lo;
  split_tf32(a, a_lo);
  split_tf32(b, b_lo);
  wmma::mma_sync(acc, a_lo, b, acc);
  wmma::mma_sync(acc, a, b_lo, acc);
  wmma::mma_sync(acc, a, b, acc);
}

// acc += A B over K = `k` (a multiple of 8) in 16x16x8 steps: A's k-th 8-wide slab at
// a + kk * a_step (row-major FragA: 8; column-major FragAc: 8 * lda), B's at rows kk * 8
// of a [k][kSLd] shared-memory tile. The state kernel's four products all take this form.
template <typename FA, int K>
__device__ __forceinline__ void mma_k(FragC& acc, const float* a, int lda, int a_step, const float* b) {
#pragma unroll 8
  for (int kk = 0; kk < K / 8; ++kk) {
    FA fa;
    FragB fb;
    wmma::load_matrix_sync(fa, a + kk * a_step, lda);
    wmma::load_matrix_sync(fb, b + kk * 8 * kSLd, kSLd);
    mma3(acc, fa, fb);
  }
}

constexpr int kStateThreads = 256;  // 8 warps
constexpr size_t kStateSmem = (kD * kSLd + 2 * kC * kSLd + kD) * sizeof(float);

__global__ void __launch_bounds__(kStateThreads)
    kda_state_kernel(float* __restrict__ out, float* __restrict__ state, const float* __restrict__ scratch,
                     int64_t t_len, int64_t chunk0, int64_t chunks, int heads, int dk, int dv) {
  extern __shared__ __align__(32) float sm[];
  float* s = sm;                  // [D][kSLd] state rows (keys) x this block's columns
  float* vn = s + kD * kSLd;      // [C][kSLd] v_new
  float* ob = vn + kC * kSLd;     // [C][kSLd] output staging
  float* decay = ob + kC * kSLd;  // [D]
  const int tid = threadIdx.x, warp = tid >> 5;
  const int h = blockIdx.x, col0 = blockIdx.y * kCols;
  float* st = state + static_cast<int64_t>(h) * dk * dv;
  for (int e = tid; e < kD * kCols; e += kStateThreads) {
    const int r = e / kCols, c = e % kCols;
    s[r * kSLd + c] = (r < dk && col0 + c < dv) ? st[r * dv + col0 + c] : 0.0f;
  }
  const int mi = warp >> 1, ni = warp & 1;  // this warp's 16x16 tile of v_new / out
  for (int64_t ci = 0; ci < chunks; ++ci) {
    const float* sc = scratch + (ci * heads + h) * kPer;
    const int64_t c0 = (chunk0 + ci) * kC;
    const int n = static_cast<int>(t_len - c0 < kC ? t_len - c0 : kC);
    if (tid < kD) decay[tid] = sc[kOffDecay + tid];
    __syncthreads();  // s (first chunk: its load; later: the update) is complete
    // v_new = u + (-w) S.
    {
      FragC acc;
      wmma::load_matrix_sync(acc, sc + kOffU + mi * 16 * kD + col0 + ni * 16, kD, wmma::mem_row_major);
      mma_k<FragA, kD>(acc, sc + kOffW + mi * 16 * kD, kD, 8, s + ni * 16);
      wmma::store_matrix_sync(vn + mi * 16 * kSLd + ni * 16, acc, kSLd, wmma::mem_row_major);
    }
    __syncthreads();
    // out = (q e^G) S + P v_new.
    {
      FragC acc;
      wmma::fill_fragment(acc, 0.0f);
      mma_k<FragA, kD>(acc, sc + kOffQg + mi * 16 * kD, kD, 8, s + ni * 16);
      mma_k<FragA, kC>(acc, sc + kOffP + mi * 16 * kC, kC, 8, vn + ni * 16);
      wmma::store_matrix_sync(ob + mi * 16 * kSLd + ni * 16, acc, kSLd, wmma::mem_row_major);
    }
    __syncthreads();
    for (int e = tid; e < kC * kCols; e += kStateThreads) {
      const int i = e / kCols, c = e % kCols;
      if (i < n && col0 + c < dv) out[((c0 + i) * heads + h) * dv + col0 + c] = ob[i * kSLd + c];
      // Rows of S decay before the update (every row; padded rows stay 0).
    }
    for (int e = tid; e < kD * kCols; e += kStateThreads) {
      const int r = e / kCols, c = e % kCols;
      s[r * kSLd + c] *= decay[r];
    }
    __syncthreads();
    // S += (k e^(G_last - G))^T v_new: rows ki*16.. of S, both column tiles.
    for (int t = 0; t < 2; ++t) {
      const int ki = warp, nj = t;
      FragC acc;
      wmma::load_matrix_sync(acc, s + ki * 16 * kSLd + nj * 16, kSLd, wmma::mem_row_major);
      // kd^T: element (r, c) = kd[c][r], i.e. column-major with ld D.
      mma_k<FragAc, kC>(acc, sc + kOffKd + ki * 16, kD, 8 * kD, vn + nj * 16);
      wmma::store_matrix_sync(s + ki * 16 * kSLd + nj * 16, acc, kSLd, wmma::mem_row_major);
    }
  }
  __syncthreads();
  for (int e = tid; e < kD * kCols; e += kStateThreads) {
    const int r = e / kCols, c = e % kCols;
    if (r < dk && col0 + c < dv) st[r * dv + col0 + c] = s[r * kSLd + c];
  }
}

}  // namespace

std::atomic<bool>& kda_intra_mma() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TF_KDA_INTRA_MMA");
    return e == nullptr || std::string(e) != "0";
  }()};
  return on;
}

std::atomic<bool>& kda_state_split() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TF_KDA_STATE_SPLIT");
    return e == nullptr || std::string(e) != "0";
  }()};
  return on;
}

std::atomic<bool>& kda_intra_small() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TF_KDA_INTRA_SMALL");
    return e != nullptr && std::string(e) == "1";
  }()};
  return on;
}

KdaForms kda_forms() {
  KdaForms f;
  const bool small = kda_intra_small() || !smem_fits(kda_intra_mma() ? kda::kMmaIntraSmem : kIntraSmem);
  if (!small) f.intra = kda_intra_mma() ? KdaForms::kMma : KdaForms::kScalar;
  else if (smem_fits(kda::kMmaIntraSmallSmem)) f.intra = KdaForms::kMmaSmall;
  else return {};  // token by token
  f.split_state = kda_state_split() && smem_fits(kda::kSplitSmem) && smem_fits(kda::kOutSmem);
  f.chunked = f.split_state || smem_fits(kStateSmem);
  return f;
}

bool kda_chunked_supported(int64_t dk, int64_t dv, int chunk_size) {
  return chunk_size == kC && dk >= 1 && dk <= kD && dv >= 1 && dv <= kD;
}

int64_t kda_chunked_scratch_bytes(int64_t t, int64_t heads) {
  const int64_t chunks = (t + kC - 1) / kC;
  return std::min(chunks, kda_chunks_per_group(heads)) * heads * kPer * static_cast<int64_t>(sizeof(float));
}

int64_t kda_chunks_per_group(int64_t heads) {
  // Scratch of at most ~128 MB (213 KB per chunk and head); at least one chunk.
  constexpr int64_t kBudget = int64_t{128} << 20;
  return std::max<int64_t>(
      1, kBudget / (std::max<int64_t>(1, heads) * kPer * static_cast<int64_t>(sizeof(float))));
}

void kda_chunked(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& g, const Tensor& beta, Tensor& state, int chunk_size) {
  const char* op = "kda_chunked";
  if (chunk_size <= 0) throw StatusError(invalid_argument("kda_chunked: chunk_size must be positive"));
  check_dev(ctx, op, q, DType::kF32);
  check_dev(ctx, op, state, DType::kF32);
  if (state.dim() != 3) throw StatusError(invalid_argument("kda_chunked: state must be [H, Dk, Dv]"));
  const int64_t h = state.size(0), dk = state.size(1), dv = state.size(2);
  if (!kda_chunked_supported(dk, dv, chunk_size)) {
    // Same function, token by token (any Dk up to 256, any Dv).
    kda_recurrent(ctx, out, q, k, v, g, beta, state);
    return;
  }
  const int64_t t = q.numel() / (h * dk);
  check_dev(ctx, op, q, DType::kF32, t * h * dk);
  check_dev(ctx, op, k, DType::kF32, t * h * dk);
  check_dev(ctx, op, g, DType::kF32, t * h * dk);
  check_dev(ctx, op, v, DType::kF32, t * h * dv);
  check_dev(ctx, op, beta, DType::kF32, t * h);
  check_dev(ctx, op, out, DType::kF32, t * h * dv);
  if (t == 0) return;
  // The kernels ask for 41-116 KB of shared memory per block. Where that is more than the
  // GPU has (sm_120 / sm_121: 99 KB), the intra part takes its 80 KB form and the state
  // pass its one-kernel form (41 KB); if those do not fit either, the same function runs
  // token by token.
  const KdaForms f = kda_forms();
  if (!f.chunked) {
    kda_recurrent(ctx, out, q, k, v, g, beta, state);
    return;
  }
  const bool split_state = f.split_state;
  auto raise = [](Status s) {
    if (!s.is_ok()) throw StatusError(s);
  };
  // The three intra kernels take the same arguments and 256 threads.
  static_assert(kIntraThreads == kda::kMmaIntraThreads);
  auto* intra_kernel = f.intra == KdaForms::kMma        ? kda::kda_intra_mma_kernel<true>
                       : f.intra == KdaForms::kMmaSmall ? kda::kda_intra_mma_kernel<false>
                                                        : kda_intra_kernel;
  const size_t intra_smem = f.intra == KdaForms::kMma        ? kda::kMmaIntraSmem
                            : f.intra == KdaForms::kMmaSmall ? kda::kMmaIntraSmallSmem
                                                             : kIntraSmem;
  raise(set_dynamic_smem(intra_kernel, intra_smem, "kda_chunked (intra-chunk)"));
  if (split_state) {
    raise(set_dynamic_smem(kda::kda_state_split_kernel, kda::kSplitSmem, "kda_chunked (state)"));
    raise(set_dynamic_smem(kda::kda_out_kernel, kda::kOutSmem, "kda_chunked (out)"));
  } else {
    raise(set_dynamic_smem(kda_state_kernel, kStateSmem, "kda_chunked (state)"));
  }
  const int64_t chunks = (t + kC - 1) / kC, group = kda_chunks_per_group(h);
  Tensor scratch = ctx.scratch(kda_chunked_scratch_bytes(t, h));
  float* sp = static_cast<float*>(scratch.raw());
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t c = 0; c < chunks; c += group) {
    const int64_t nc = std::min(group, chunks - c);
    const dim3 grid(static_cast<unsigned>(nc), static_cast<unsigned>(h));
    intra_kernel<<<grid, kIntraThreads, intra_smem, ctx.stream>>>(
        sp, q.data<float>(), k.data<float>(), v.data<float>(), g.data<float>(), beta.data<float>(), t, c,
        static_cast<int>(h), static_cast<int>(dk), static_cast<int>(dv), qscale);
    check_launch("kda_chunked (intra-chunk)");
    if (split_state) {
      kda::kda_state_split_kernel<<<dim3(static_cast<unsigned>(h),
                                         static_cast<unsigned>((dv + kda::kSplitCols - 1) / kda::kSplitCols)),
                                    kda::kSplitThreads, kda::kSplitSmem, ctx.stream>>>(
          state.data<float>(), sp, nc, static_cast<int>(h), static_cast<int>(dk), static_cast<int>(dv));
      check_launch("kda_chunked (state)");
      kda::kda_out_kernel<<<grid, kda::kOutThreads, kda::kOutSmem, ctx.stream>>>(
          out.data<float>(), sp, t, c, static_cast<int>(h), static_cast<int>(dv));
    } else {
      kda_state_kernel<<<dim3(static_cast<unsigned>(h), static_cast<unsigned>((dv + kCols - 1) / kCols)),
                         kStateThreads, kStateSmem, ctx.stream>>>(out.data<float>(), state.data<float>(), sp,
                                                                  t, c, nc, static_cast<int>(h),
                                                                  static_cast<int>(dk), static_cast<int>(dv));
    }
    check_launch("kda_chunked (state)");
  }
}

}  // namespace tf::cuda
