// Kimi Delta Attention on the GPU: the causal depthwise conv with its state, the
// forget gate, and the delta-rule recurrence.
//
// The recurrence: the state of a head is Dk x Dv and its value columns are
// independent (each column j only needs its own S[:, j], k, q, g and v[j]). A
// block owns 32 columns of one head; thread (x, y) keeps rows y, y+8, ... of
// column x in registers, and the row sums are combined over y in a fixed order.
// Tokens are walked one by one, so decode and prefill run the same kernel.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/status.h"
#include "kernels/cuda/cuda_kda_rows_pdl.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_util.cuh"
#include "kernels/cuda/pdl.cuh"

namespace tf::cuda {
namespace {

constexpr int kCols = 32;     // value columns per block (threadIdx.x)
constexpr int kGroups = 8;    // key-row groups (threadIdx.y)
constexpr int kMaxRows = 32;  // rows per thread: Dk <= kGroups * kMaxRows
static_assert(kGroups * kMaxRows <= kCols * kGroups, "a thread loads at most one key row of q, k and g");

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

__global__ void conv_kernel(float* __restrict__ out, const float* __restrict__ x, const float* __restrict__ state,
                            const float* __restrict__ w, int64_t t, int64_t c, int64_t kw) {
  const int64_t total = t * c;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ti = e / c, ch = e % c;
    float acc = 0;
    for (int64_t j = 0; j < kw; ++j) {
      const int64_t r = ti + j;  // row of the virtual sequence [state; x]
      const float v = r < kw - 1 ? state[r * c + ch] : x[(r - (kw - 1)) * c + ch];
      acc += w[ch * kw + j] * v;
    }
    out[e] = silu(acc);
  }
}

// One token for each of B sequences: thread (b, ch) convolves its channel with
// the row's state and shifts the state by one row (kw <= kMaxConv).
constexpr int kMaxConv = 16;
__global__ void conv_rows_kernel(float* __restrict__ out, const float* __restrict__ x, float* const* __restrict__ states,
                                 const float* __restrict__ w, int64_t b, int64_t c, int64_t kw) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < b * c; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t bi = e / c, ch = e % c;
    float* state = states[bi];
    float win[kMaxConv];
    for (int64_t j = 0; j < kw - 1; ++j) win[j] = state[j * c + ch];
    win[kw - 1] = x[e];
    float acc = 0;
    for (int64_t j = 0; j < kw; ++j) acc += w[ch * kw + j] * win[j];
    out[e] = silu(acc);
    for (int64_t j = 0; j < kw - 1; ++j) state[j * c + ch] = win[j + 1];
  }
}

// New state = the last kw-1 rows of [state; x]. Row r takes old row t+r > r, so one
// thread per channel walking r upwards never reads a row it already overwrote.
__global__ void conv_state_kernel(float* __restrict__ state, const float* __restrict__ x, int64_t t, int64_t c,
                                  int64_t kw) {
  for (int64_t ch = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; ch < c; ch += int64_t(gridDim.x) * blockDim.x)
    for (int64_t r = 0; r < kw - 1; ++r) {
      const int64_t src = t + r;
      state[r * c + ch] = src < kw - 1 ? state[src * c + ch] : x[(src - (kw - 1)) * c + ch];
    }
}

__global__ void kda_gate_kernel(float* __restrict__ g, const float* __restrict__ f, const float* __restrict__ dt_bias,
                                const float* __restrict__ a_log, int64_t rows, int64_t width, int64_t dk, bool has_lb,
                                float lb) {
  const int64_t total = rows * width;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e % width;
    const float x = f[e] + dt_bias[i];
    const float a = expf(a_log[i / dk]);
    g[e] = has_lb ? lb * (1.0f / (1.0f + expf(-(a * x)))) : -a * (x > 20.0f ? x : logf(1.0f + expf(x)));
  }
}

// ROWS: key rows per thread (Dk <= kGroups * ROWS); a smaller ROWS only drops
// iterations that a larger one skips (i >= dk), so every instance computes the same
// bits, and fewer registers let more blocks share an SM (many decode rows).
// state_addrs (one per blockIdx.z): a row with address 0 is a padded row (zeros out).
// Launched with PDL (kda_recurrent_rows_pdl), the state is loaded before the wait: only the
// previous step's recurrence writes it, long finished; everything else is read after it.
template <int ROWS>
__global__ void __launch_bounds__(kCols* kGroups, ROWS <= 16 ? 5 : 1)
    kda_recurrent_kernel(float* __restrict__ out, const float* __restrict__ q, const float* __restrict__ k,
                         const float* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                         float* __restrict__ state, const int64_t* __restrict__ state_addrs, int64_t t_len,
                         int64_t heads, int dk, int dv, float qscale) {
  extern __shared__ float sh[];
  float* qn = sh;            // [dk]
  float* kn = qn + dk;       // [dk]
  float* decay = kn + dk;    // [dk]
  float* red = decay + dk;   // [kGroups][kCols]
  float* scratch = red + kGroups * kCols;  // [32]
  const int x = threadIdx.x, y = threadIdx.y, tid = y * kCols + x;
  const int64_t h = blockIdx.x;
  const int j = blockIdx.y * kCols + x;
  const bool col_ok = j < dv;
  // One sequence (state), or one per blockIdx.z (state_addrs; t_len rows each).
  const int64_t row_base = static_cast<int64_t>(blockIdx.z) * t_len;
  float* base = state_addrs ? reinterpret_cast<float*>(state_addrs[blockIdx.z]) : state;
  if (base == nullptr) {  // a padded row (uniform over the block)
    pdl_wait();
    if (y == 0 && col_ok)
      for (int64_t t = 0; t < t_len; ++t) out[((row_base + t) * heads + h) * dv + j] = 0.0f;
    return;
  }
  float* st = base + h * dk * dv;
  float s[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = y + r * kGroups;
    s[r] = (i < dk && col_ok) ? st[i * dv + j] : 0.0f;
  }
  pdl_wait();
  for (int64_t t = 0; t < t_len; ++t) {
    const int64_t row = (row_base + t) * heads + h;
    const float* qt = q + row * dk;
    const float* kt = k + row * dk;
    // Everything the token reads from global memory, issued at once (one latency, not
    // three): thread tid owns key row tid (dk <= kGroups * kMaxRows == threads).
    const bool has_i = tid < dk;
    const float qv = has_i ? qt[tid] : 0.0f, kv = has_i ? kt[tid] : 0.0f;
    const float gv = has_i ? g[row * dk + tid] : 0.0f;
    const float vj = col_ok ? v[row * dv + j] : 0.0f;
    const float bt = beta[row];
    // l2 norms of q and k (eps inside the root, as FLA does).
    float qs = 0, ks = 0;
    if (has_i) {
      qs += qv * qv;
      ks += kv * kv;
    }
    // Reduce over the whole (x, y) block: warps are rows y of 32 lanes.
    qs = warp_reduce(qs, SumOp{});
    ks = warp_reduce(ks, SumOp{});
    __syncthreads();
    if (x == 0) {
      scratch[y] = qs;
      scratch[16 + y] = ks;
    }
    __syncthreads();
    qs = scratch[0];
    ks = scratch[16];
    for (int w = 1; w < kGroups; ++w) {
      qs += scratch[w];
      ks += scratch[16 + w];
    }
    const float qinv = 1.0f / sqrtf(qs + 1e-6f), kinv = 1.0f / sqrtf(ks + 1e-6f);
    if (has_i) {
      qn[tid] = qv * qinv * qscale;
      kn[tid] = kv * kinv;
      decay[tid] = expf(gv);
    }
    __syncthreads();
    float part = 0;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int i = y + r * kGroups;
      if (i < dk) {
        s[r] *= decay[i];
        part += s[r] * kn[i];
      }
    }
    red[y * kCols + x] = part;
    __syncthreads();
    float mem = 0;
    for (int w = 0; w < kGroups; ++w) mem += red[w * kCols + x];
    const float delta = col_ok ? (vj - mem) * bt : 0.0f;
    __syncthreads();
    part = 0;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
      const int i = y + r * kGroups;
      if (i < dk) {
        s[r] += kn[i] * delta;
        part += s[r] * qn[i];
      }
    }
    red[y * kCols + x] = part;
    __syncthreads();
    if (y == 0 && col_ok) {
      float o = 0;
      for (int w = 0; w < kGroups; ++w) o += red[w * kCols + x];
      out[row * dv + j] = o;
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    const int i = y + r * kGroups;
    if (i < dk && col_ok) st[i * dv + j] = s[r];
  }
}


// One launch of the recurrence: grid (heads, column blocks, sequences); `pdl`: programmatic
// dependent launch on the kernel before (see kda_recurrent_kernel).
void launch_recurrent(CudaContext& ctx, float* out, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, float* state, const int64_t* state_addrs, int64_t t_len, int64_t seqs,
                      int64_t h, int64_t dk, int64_t dv, bool pdl = false) {
  const float qscale = 1.0f / std::sqrt(static_cast<float>(dk));
  const size_t smem = (3 * dk + kGroups * kCols + 32) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(h), static_cast<unsigned>((dv + kCols - 1) / kCols),
                  static_cast<unsigned>(seqs));
  const dim3 block(kCols, kGroups);
  const int idk = static_cast<int>(dk), idv = static_cast<int>(dv);
  auto kernel = dk <= kGroups * 8    ? kda_recurrent_kernel<8>
                : dk <= kGroups * 16 ? kda_recurrent_kernel<16>
                                     : kda_recurrent_kernel<kMaxRows>;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = ctx.stream;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at;
  cfg.numAttrs = pdl ? 1 : 0;
  const cudaError_t e =
      cudaLaunchKernelEx(&cfg, kernel, out, q, k, v, g, beta, state, state_addrs, t_len, h, idk, idv, qscale);
  if (e != cudaSuccess) throw StatusError(internal_error(std::string("kda recurrence launch: ") + cudaGetErrorString(e)));
}

// The q, k and v short convolutions of B decode rows: thread (part, b, ch); row b's
// conv state [3, K-1, C] at states[b] (0: a padded row, zeros out). The same
// arithmetic as conv_rows_kernel / conv_kernel for one row.
struct QkvPtrs {
  float* out[3];
  const float* x[3];
};

__global__ void conv_qkv_rows_kernel(QkvPtrs p, const int64_t* __restrict__ states, const float* __restrict__ w,
                                     int64_t b, int64_t c, int64_t kw) {
  pdl_launch_dependents();  // the recurrence may launch and load its states (it waits for our outputs)
  const int64_t total = 3 * b * c;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int part = static_cast<int>(e / (b * c));
    const int64_t rem = e % (b * c), bi = rem / c, ch = rem % c;
    float* base = reinterpret_cast<float*>(states[bi]);
    if (base == nullptr && kw > 1) {  // K = 1 has no state: every row is computed
      p.out[part][rem] = 0.0f;
      continue;
    }
    float* state = base + part * (kw - 1) * c;
    const float* wp = w + (part * c + ch) * kw;
    float win[kMaxConv];
    for (int64_t j = 0; j < kw - 1; ++j) win[j] = state[j * c + ch];
    win[kw - 1] = p.x[part][rem];
    float acc = 0;
    for (int64_t j = 0; j < kw; ++j) acc += wp[j] * win[j];
    p.out[part][rem] = silu(acc);
    for (int64_t j = 0; j < kw - 1; ++j) state[j * c + ch] = win[j + 1];
  }
}
}  // namespace

void causal_conv1d_silu(CudaContext& ctx, Tensor& out, const Tensor& x, Tensor& state, const Tensor& weight) {
  check_dev(ctx, "causal_conv1d x", x, DType::kF32);
  check_dev(ctx, "causal_conv1d weight", weight, DType::kF32);
  if (weight.dim() != 2 || weight.size(1) < 1)
    throw StatusError(invalid_argument("causal_conv1d: weight must be [C, K], got " + weight.describe()));
  const int64_t c = weight.size(0), kw = weight.size(1), t = c == 0 ? 0 : x.numel() / c;
  check_dev(ctx, "causal_conv1d state", state, DType::kF32, (kw - 1) * c);
  check_dev(ctx, "causal_conv1d out", out, DType::kF32, t * c);
  if (t * c == 0) return;
  conv_kernel<<<grid_1d(t * c), 256, 0, ctx.stream>>>(out.data<float>(), x.data<float>(), state.data<float>(),
                                                       weight.data<float>(), t, c, kw);
  check_launch("causal_conv1d_silu");
  if (kw > 1) {
    conv_state_kernel<<<grid_1d(c), 256, 0, ctx.stream>>>(state.data<float>(), x.data<float>(), t, c, kw);
    check_launch("causal_conv1d_silu state");
  }
}

void kda_gate(CudaContext& ctx, Tensor& g, const Tensor& f, const Tensor& dt_bias, const Tensor& a_log,
              bool has_lower_bound, float lower_bound) {
  check_dev(ctx, "kda_gate f", f, DType::kF32);
  check_dev(ctx, "kda_gate dt_bias", dt_bias, DType::kF32);
  check_dev(ctx, "kda_gate a_log", a_log, DType::kF32);
  const int64_t width = dt_bias.numel(), h = a_log.numel();
  if (h == 0 || width % h != 0 || f.numel() % width != 0)
    throw StatusError(invalid_argument("kda_gate: f " + f.describe() + ", dt_bias " + dt_bias.describe() +
                                       " and a_log " + a_log.describe() + " do not agree"));
  const int64_t dk = width / h, rows = f.numel() / width;
  check_dev(ctx, "kda_gate g", g, DType::kF32, f.numel());
  if (f.numel() == 0) return;
  kda_gate_kernel<<<grid_1d(f.numel()), 256, 0, ctx.stream>>>(g.data<float>(), f.data<float>(),
                                                               dt_bias.data<float>(), a_log.data<float>(), rows,
                                                               width, dk, has_lower_bound, lower_bound);
  check_launch("kda_gate");
}

void kda_recurrent(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& g, const Tensor& beta, Tensor& state) {
  const char* op = "kda_recurrent";
  check_dev(ctx, op, q, DType::kF32);
  check_dev(ctx, op, state, DType::kF32);
  if (state.dim() != 3) throw StatusError(invalid_argument("kda_recurrent: state must be [H, Dk, Dv]"));
  const int64_t h = state.size(0), dk = state.size(1), dv = state.size(2);
  if (h * dk == 0) return;
  const int64_t t = q.numel() / (h * dk);
  check_dev(ctx, op, k, DType::kF32, t * h * dk);
  check_dev(ctx, op, g, DType::kF32, t * h * dk);
  check_dev(ctx, op, v, DType::kF32, t * h * dv);
  check_dev(ctx, op, beta, DType::kF32, t * h);
  check_dev(ctx, op, out, DType::kF32, t * h * dv);
  if (dk > kGroups * kMaxRows)
    throw StatusError(unimplemented("kda_recurrent: key head dim " + std::to_string(dk) + " above " +
                                    std::to_string(kGroups * kMaxRows)));
  if (t == 0 || dv == 0) return;
  launch_recurrent(ctx, out.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(), g.data<float>(),
                   beta.data<float>(), state.data<float>(), nullptr, t, 1, h, dk, dv);
  check_launch(op);
}

namespace {

// The device addresses of the states, as a device array (staged, not waited for).
Tensor state_pointers(CudaContext& ctx, const char* op, std::span<Tensor* const> states, int64_t numel) {
  std::vector<float*> ptrs(states.size());
  for (size_t b = 0; b < states.size(); ++b) {
    check_dev(ctx, op, *states[b], DType::kF32, numel);
    ptrs[b] = states[b]->data<float>();
  }
  return ctx.upload(ptrs.data(), static_cast<int64_t>(ptrs.size() * sizeof(float*)));
}

}  // namespace

void causal_conv1d_silu_rows(CudaContext& ctx, Tensor& out, const Tensor& x, std::span<Tensor* const> states,
                             const Tensor& weight) {
  const char* op = "causal_conv1d_silu_rows";
  check_dev(ctx, op, weight, DType::kF32);
  if (weight.dim() != 2 || weight.size(1) < 1 || weight.size(1) > kMaxConv)
    throw StatusError(invalid_argument(std::string(op) + ": weight must be [C, K] with K <= " +
                                       std::to_string(kMaxConv) + ", got " + weight.describe()));
  const int64_t c = weight.size(0), kw = weight.size(1), b = static_cast<int64_t>(states.size());
  check_dev(ctx, op, x, DType::kF32, b * c);
  check_dev(ctx, op, out, DType::kF32, b * c);
  if (b * c == 0) return;
  const Tensor ptrs = state_pointers(ctx, op, states, (kw - 1) * c);
  conv_rows_kernel<<<grid_1d(b * c), 256, 0, ctx.stream>>>(out.data<float>(), x.data<float>(),
                                                            reinterpret_cast<float* const*>(ptrs.raw()),
                                                            weight.data<float>(), b, c, kw);
  check_launch(op);
}

void kda_recurrent_rows(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& g, const Tensor& beta, std::span<Tensor* const> states) {
  const char* op = "kda_recurrent_rows";
  const int64_t b = static_cast<int64_t>(states.size());
  if (b == 0) return;
  const Tensor& s0 = *states[0];
  if (s0.dim() != 3) throw StatusError(invalid_argument(std::string(op) + ": states must be [H, Dk, Dv]"));
  const int64_t h = s0.size(0), dk = s0.size(1), dv = s0.size(2);
  check_dev(ctx, op, q, DType::kF32, b * h * dk);
  check_dev(ctx, op, k, DType::kF32, b * h * dk);
  check_dev(ctx, op, g, DType::kF32, b * h * dk);
  check_dev(ctx, op, v, DType::kF32, b * h * dv);
  check_dev(ctx, op, beta, DType::kF32, b * h);
  check_dev(ctx, op, out, DType::kF32, b * h * dv);
  if (dk > kGroups * kMaxRows)
    throw StatusError(unimplemented(std::string(op) + ": key head dim " + std::to_string(dk) + " above " +
                                    std::to_string(kGroups * kMaxRows)));
  if (h * dk * dv == 0) return;
  const Tensor ptrs = state_pointers(ctx, op, states, h * dk * dv);
  launch_recurrent(ctx, out.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(), g.data<float>(),
                   beta.data<float>(), nullptr, reinterpret_cast<const int64_t*>(ptrs.raw()), 1, b, h, dk, dv);
  check_launch(op);
}

namespace {

void check_rows_2d(const CudaContext& ctx, const char* op, const char* what, const Tensor& t, int64_t rows,
                   int64_t width) {
  check_dev(ctx, op, t, DType::kF32, rows * width);
  if (t.dim() != 2 || t.size(0) != rows || t.size(1) != width)
    throw StatusError(invalid_argument(std::string(op) + ": " + what + " " + t.describe() + " is not [" +
                                       std::to_string(rows) + ", " + std::to_string(width) + "]"));
}

}  // namespace

void kda_conv_qkv_rows(CudaContext& ctx, Tensor& out_q, Tensor& out_k, Tensor& out_v, const Tensor& x_q,
                       const Tensor& x_k, const Tensor& x_v, const KdaRowsView& rows, const Tensor& weight) {
  const char* op = "kda_conv_qkv_rows";
  check_dev(ctx, op, weight, DType::kF32);
  if (weight.dim() != 3 || weight.size(0) != 3 || weight.size(2) < 1 || weight.size(2) > kMaxConv)
    throw StatusError(invalid_argument(std::string(op) + ": weight must be [3, C, K] with K <= " +
                                       std::to_string(kMaxConv) + ", got " + weight.describe()));
  const int64_t b = rows.rows, c = weight.size(1), kw = weight.size(2);
  QkvPtrs p;
  Tensor* outs[3] = {&out_q, &out_k, &out_v};
  const Tensor* xs[3] = {&x_q, &x_k, &x_v};
  for (int i = 0; i < 3; ++i) {
    check_rows_2d(ctx, op, "out", *outs[i], b, c);
    check_rows_2d(ctx, op, "x", *xs[i], b, c);
    p.out[i] = outs[i]->data<float>();
    p.x[i] = xs[i]->data<float>();
  }
  if (b * c == 0) return;
  if (rows.conv_states == nullptr) throw StatusError(invalid_argument(std::string(op) + ": no conv states"));
  conv_qkv_rows_kernel<<<grid_1d(3 * b * c), 256, 0, ctx.stream>>>(p, rows.conv_states, weight.data<float>(), b, c,
                                                                    kw);
  check_launch(op);
}

void kda_recurrent_state_rows(CudaContext& ctx, Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& g, const Tensor& beta, const KdaRowsView& rows) {
  const char* op = "kda_recurrent_state_rows";
  const int64_t b = rows.rows, h = rows.heads, dk = rows.key_dim, dv = rows.value_dim;
  if (h <= 0 || dk <= 0 || dv <= 0)
    throw StatusError(invalid_argument(std::string(op) + ": the view's heads and head dims must be positive"));
  if (dk > kGroups * kMaxRows)
    throw StatusError(unimplemented(std::string(op) + ": key head dim " + std::to_string(dk) + " above " +
                                    std::to_string(kGroups * kMaxRows)));
  check_rows_2d(ctx, op, "q", q, b, h * dk);
  check_rows_2d(ctx, op, "k", k, b, h * dk);
  check_rows_2d(ctx, op, "g", g, b, h * dk);
  check_rows_2d(ctx, op, "v", v, b, h * dv);
  check_rows_2d(ctx, op, "out", out, b, h * dv);
  check_rows_2d(ctx, op, "beta", beta, b, h);
  if (b == 0) return;
  if (rows.recurrent_states == nullptr)
    throw StatusError(invalid_argument(std::string(op) + ": no recurrent states"));
  launch_recurrent(ctx, out.data<float>(), q.data<float>(), k.data<float>(), v.data<float>(), g.data<float>(),
                   beta.data<float>(), nullptr, rows.recurrent_states, 1, b, h, dk, dv, kda_recurrent_rows_pdl());
  check_launch(op);
}

std::atomic<bool>& kda_recurrent_rows_pdl() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("TF_KDA_REC_PDL");
    return e == nullptr || std::string(e) != "0";
  }()};
  return on;
}

}  // namespace tf::cuda
