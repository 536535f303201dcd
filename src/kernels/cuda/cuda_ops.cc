// CudaOps: the Ops interface dispatched to the kernels of cuda_kernels.h, plus
// the context (stream, cuBLAS handle, caching allocator), transfers and the
// argument checks shared by the op files.
#include "kernels/cuda/cuda_ops.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_copy.h"
#include "kernels/cuda/cuda_graph.h"
#include "kernels/cuda/cuda_indexer_prefill.h"
#include "kernels/cuda/cuda_kda_chunked.h"
#include "kernels/cuda/cuda_kda_lowrank.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cuda_matmul_many.h"
#include "kernels/cuda/cuda_moe_fp8.h"
#include "kernels/cuda/cuda_mla_prefill.h"
#include "kernels/cuda/cuda_mhc_pre.h"
#include "kernels/cuda/cuda_sampling.h"
#include "kernels/cuda/cuda_vision.h"
#include "kernels/cuda/device_limits.h"
#include "kernels/cuda/device_memory.h"
#include "kernels/cuda/op_profiler.h"
#include "kernels/cuda/pinned_upload.h"
#include "kernels/cuda/side_stream.h"
#include "kernels/cuda/exl3_cuda.h"
#include "kernels/cuda/exl3_kernels.h"
#include "kernels/cuda/staging_ring.h"

namespace tf {
namespace cuda {

Tensor CudaContext::scratch(int64_t bytes) {
  auto storage = alloc->allocate(static_cast<size_t>(bytes));
  if (!storage) throw StatusError(storage.status());
  return Tensor::on_storage(*storage, 0, {bytes}, DType::kU8);
}

Tensor CudaContext::upload(const void* host, int64_t bytes) {
  // A captured copy would read the staging slot again at every replay.
  if (capturing) throw StatusError(internal_error("upload of host data inside a graph capture"));
  Tensor t = scratch(bytes);
  if (bytes == 0) return t;
  auto slot = staging->reserve(static_cast<size_t>(bytes));
  if (!slot) throw StatusError(slot.status());
  std::memcpy(*slot, host, static_cast<size_t>(bytes));
  Status s = cuda_status(cudaMemcpyAsync(t.raw(), *slot, static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream),
                         "upload");
  if (s.is_ok()) s = staging->commit(stream);
  if (!s.is_ok()) throw StatusError(s);
  return t;
}

void check_dev(const CudaContext& ctx, const char* op, const Tensor& t, DType dtype, int64_t numel) {
  const bool on_dev = t.device().kind == DeviceKind::kCuda && t.device().index == ctx.device;
  if (t.dtype() != dtype || !on_dev || !t.is_contiguous() || (numel >= 0 && t.numel() != numel)) {
    throw StatusError(invalid_argument(std::string(op) + ": expected packed " + dtype_name(dtype) + " on cuda:" +
                                       std::to_string(ctx.device) +
                                       (numel >= 0 ? " of " + std::to_string(numel) + " elements" : "") +
                                       ", got " + t.describe()));
  }
}

void check_weight(const CudaContext& ctx, const char* op, const Tensor& t) {
  check_dev(ctx, op, t, t.dtype() == DType::kBF16 ? DType::kBF16 : DType::kF32);
}

void check_launch(const char* op) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    throw StatusError(internal_error(std::string(op) + ": kernel launch failed: " + cudaGetErrorName(err) + " (" +
                                     cudaGetErrorString(err) + ")"));
}

}  // namespace cuda

namespace {

void throw_if(const Status& s) {
  if (!s.is_ok()) throw StatusError(s);
}

// An environment switch that is on unless set to "0".
bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string(v) != "0";
}

// A tensor as `rows` rows of `width` packed elements, `pitch` elements apart: true
// for packed tensors and for views whose leading dimensions collapse into one.
bool as_rows(const Tensor& t, int64_t& rows, int64_t& width, int64_t& pitch) {
  const int n = t.dim();
  if (n == 0) {
    rows = width = pitch = 1;
    return true;
  }
  width = t.size(-1);
  rows = width == 0 ? 0 : t.numel() / width;
  if (t.is_contiguous()) {
    pitch = width;
    return true;
  }
  if (t.stride(-1) != 1) return false;
  for (int d = 0; d + 2 < n; ++d)
    if (t.shape()[d] > 1 && t.strides()[d] != t.strides()[d + 1] * t.shape()[d + 1]) return false;
  pitch = n >= 2 ? t.strides()[n - 2] : width;
  return true;
}

class CudaOps final : public Ops {
 public:
  static Expected<std::unique_ptr<Ops>> create(int device, int64_t exact_rows) {
    auto ops = std::unique_ptr<CudaOps>(new CudaOps());
    cuda::CudaContext& c = ops->ctx_;
    c.device = device;
    c.exact_rows = exact_rows;
    TF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    // A blocking stream: it also orders against legacy default-stream copies
    // (device_memory.h's to_device/to_host).
    TF_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&c.stream));
    if (cublasCreate(&c.cublas) != CUBLAS_STATUS_SUCCESS) return internal_error("cublasCreate failed on cuda:" +
                                                                                std::to_string(device));
    if (cublasSetStream(c.cublas, c.stream) != CUBLAS_STATUS_SUCCESS) return internal_error("cublasSetStream failed");
    // Full fp32 math for f32 GEMMs (no TF32), so they stay close to the CPU reference.
    cublasSetMathMode(c.cublas, CUBLAS_DEFAULT_MATH);
    c.alloc = cuda::DeviceAllocator::create(device);
    auto ring = cuda::StagingRing::create(kStagingBytes);
    if (!ring) return ring.status().with_context("pinned staging memory on cuda:" + std::to_string(device));
    ops->staging_ = std::move(*ring);
    c.staging = ops->staging_.get();
    // A cuBLAS workspace of our own: captured GEMMs must not allocate one.
    TF_CUDA_RETURN_IF_ERROR(cudaMalloc(&ops->cublas_ws_, kCublasWorkspaceBytes));
    if (cublasSetWorkspace(c.cublas, ops->cublas_ws_, kCublasWorkspaceBytes) != CUBLAS_STATUS_SUCCESS)
      return internal_error("cublasSetWorkspace failed on cuda:" + std::to_string(device));
    ops->prof_ = cuda::OpProfiler::from_env(c.stream);
    // Side branches on a second stream (Ops::branch_begin; TF_BRANCHES=0: none, ops in order).
    if (env_on("TF_BRANCHES")) {
      auto side = cuda::SideStream::create(device, env_on("TF_BRANCH_PRIORITY"));
      if (!side) return side.status().with_context("side stream on cuda:" + std::to_string(device));
      ops->side_ = std::move(*side);
    }
    TF_CUDA_RETURN_IF_ERROR(cudaMalloc(&c.error_word, sizeof(unsigned)));
    TF_CUDA_RETURN_IF_ERROR(cudaMemset(c.error_word, 0, sizeof(unsigned)));
    return std::unique_ptr<Ops>(std::move(ops));
  }

  ~CudaOps() override {
    if (side_ && side_->open()) (void)side_->close(ctx_);  // ctx_ back on the main stream
    prof_.reset();  // prints what it has not reported yet
    if (ctx_.stream) cudaStreamSynchronize(ctx_.stream);
    if (cublas_ws_) cudaFree(cublas_ws_);
    if (ctx_.cublas) cublasDestroy(ctx_.cublas);
    if (ctx_.error_word) cudaFree(ctx_.error_word);
    if (ctx_.stream) cudaStreamDestroy(ctx_.stream);
  }

  const char* name() const override { return "cuda"; }

  bool supports_graphs() const override { return true; }
  Expected<std::unique_ptr<Graph>> capture(std::function<void()> fn) override {
    return graphs_.capture(ctx_, prof_.get(), side_.get(), fn);
  }
  // Side branches (side_stream.h), worth it where ops are latency-bound: up to exact_rows
  // rows (there an accumulating matmul rounds out + sum once, as a separate add would).
  // While the profiler times eager ops (events on the main stream) a branch runs
  // inline; captured ones still fork.
  bool concurrent_branches(int64_t rows) const override { return side_ != nullptr && rows <= ctx_.exact_rows; }
  void branch_begin() override {
    if (side_) side_->begin(ctx_, /*concurrent=*/!prof_ || ctx_.capturing);
  }
  void branch_end() override {
    if (side_) side_->end(ctx_);
  }
  void branch_join() override {
    if (side_) side_->join(ctx_);
  }
  Status replay(Graph& graph) override {
    cuda::OpScope prof(prof_.get(), "graph replay");
    return graphs_.replay(ctx_, graph);
  }
  void begin_step() override {
    if (prof_) prof_->begin_step();
  }
  void end_step() override {
    if (prof_) prof_->end_step();
  }
  cudaStream_t stream() const { return ctx_.stream; }

  MemoryUse memory_use() const override {
    MemoryUse m;
    m.in_use_bytes = static_cast<int64_t>(ctx_.alloc->in_use_bytes());
    m.peak_in_use_bytes = static_cast<int64_t>(ctx_.alloc->peak_in_use_bytes());
    m.held_bytes = static_cast<int64_t>(ctx_.alloc->driver_bytes() + graphs_.arena_bytes());
    return m;
  }
  void reset_memory_peak() override { ctx_.alloc->reset_peak(); }

  Tensor empty(const Shape& shape, DType dtype) override {
    const int64_t n = shape_numel(shape);
    if (n < 0) throw StatusError(invalid_argument("empty: negative shape " + shape_to_string(shape)));
    auto storage = ctx_.alloc->allocate(static_cast<size_t>(n) * dtype_size(dtype));
    if (!storage) throw StatusError(storage.status());
    return Tensor::on_storage(*storage, 0, shape, dtype);
  }
  Tensor zeros(const Shape& shape, DType dtype) override { cuda::OpScope prof_scope(prof_.get(), "zeros");
    Tensor t = empty(shape, dtype);
    if (t.nbytes() > 0) throw_if(cuda::cuda_status(cudaMemsetAsync(t.raw(), 0, t.nbytes(), ctx_.stream), "zeros"));
    return t;
  }

  Tensor to_device(const Tensor& host) override { cuda::OpScope prof_scope(prof_.get(), "to_device");
    if (!host.device().is_cpu()) throw StatusError(invalid_argument("to_device: " + host.describe() + " is not on the host"));
    Tensor out = empty(host.shape(), host.dtype());
    copy(out, host);
    return out;
  }
  Tensor to_host(const Tensor& t) override { cuda::OpScope prof_scope(prof_.get(), "to_host");
    Tensor out = Tensor::empty(t.shape(), t.dtype());
    copy(out, t);
    return out;
  }
  void copy(Tensor& dst, const Tensor& src) override { cuda::OpScope prof_scope(prof_.get(), "copy");
    cuda::CopyRowsJob job;
    if (copy_or_job(dst, src, job)) cuda::copy_rows(ctx_, &job, 1);
  }
  // The device-to-device pairs as one kernel (cuda_copy.cu), the others one by one.
  void copy_many(const std::vector<Tensor*>& dsts, const std::vector<const Tensor*>& srcs) override {
    cuda::OpScope prof_scope(prof_.get(), "copy_many");
    if (dsts.size() != srcs.size())
      throw StatusError(invalid_argument("copy_many: " + std::to_string(dsts.size()) + " destinations for " +
                                         std::to_string(srcs.size()) + " sources"));
    std::vector<cuda::CopyRowsJob> jobs;
    for (size_t i = 0; i < dsts.size(); ++i) {
      cuda::CopyRowsJob job;
      if (copy_or_job(*dsts[i], *srcs[i], job)) jobs.push_back(job);
    }
    if (!jobs.empty()) cuda::copy_rows(ctx_, jobs.data(), static_cast<int>(jobs.size()));
  }

  void matmul(Tensor& out, const Tensor& x, const Tensor& w, bool accumulate) override { cuda::OpScope prof_scope(prof_.get(), "matmul");
    cuda::matmul(ctx_, out, x, w, accumulate);
  }
  void quant_matmul(Tensor& out, const Tensor& x, const Matrix& w, bool accumulate) override { cuda::OpScope prof_scope(prof_.get(), "quant_matmul");
    cuda::quant_matmul(ctx_, out, x, w, accumulate);
  }
  void matmul_many(const std::vector<Tensor*>& outs, const Tensor& x,
                   const std::vector<const Matrix*>& ws) override {
    cuda::OpScope prof_scope(prof_.get(), "matmul_many");
    // Its launches side by side on the side stream (TF_MATMUL_MANY_BRANCH=0: one after the other).
    cuda::matmul_many(ctx_, outs, x, ws, many_branch_ ? side_.get() : nullptr, !prof_ || ctx_.capturing);
  }
  void head_matmul(Tensor& out, const Tensor& x, const Tensor& w) override { cuda::OpScope prof_scope(prof_.get(), "head_matmul"); cuda::head_matmul(ctx_, out, x, w); }
  void embedding(Tensor& out, const Tensor& table, const Tensor& ids) override { cuda::OpScope prof_scope(prof_.get(), "embedding");
    cuda::embedding(ctx_, out, table, ids);
  }
  void gather_rows(Tensor& out, const Tensor& x, const Tensor& idx) override { cuda::OpScope prof_scope(prof_.get(), "gather_rows"); cuda::gather_rows(ctx_, out, x, idx); }
  void scatter_add_rows(Tensor& out, const Tensor& x, const Tensor& idx, const Tensor& s) override { cuda::OpScope prof_scope(prof_.get(), "scatter_add_rows");
    cuda::scatter_add_rows(ctx_, out, x, idx, s);
  }
  void rms_norm(Tensor& out, const Tensor& x, const Tensor& weight, float eps) override { cuda::OpScope prof_scope(prof_.get(), "rms_norm");
    cuda::rms_norm(ctx_, out, x, weight, eps);
  }
  void layer_norm(Tensor& out, const Tensor& x, const Tensor& weight, const Tensor& bias, float eps) override { cuda::OpScope prof_scope(prof_.get(), "layer_norm");
    cuda::layer_norm(ctx_, out, x, weight, bias, eps);
  }
  void gated_rms_norm(Tensor& out, const Tensor& x, const Tensor& gate, const Tensor& weight, float eps) override { cuda::OpScope prof_scope(prof_.get(), "gated_rms_norm");
    cuda::gated_rms_norm(ctx_, out, x, gate, weight, eps);
  }
  void swiglu(Tensor& out, const Tensor& gate_up, float limit) override { cuda::OpScope prof_scope(prof_.get(), "swiglu"); cuda::swiglu(ctx_, out, gate_up, limit); }
  void add(Tensor& out, const Tensor& a, const Tensor& b) override { cuda::OpScope prof_scope(prof_.get(), "add"); cuda::add(ctx_, out, a, b); }
  void scale(Tensor& out, const Tensor& x, float s) override { cuda::OpScope prof_scope(prof_.get(), "scale"); cuda::scale(ctx_, out, x, s); }
  void sigmoid(Tensor& out, const Tensor& x) override { cuda::OpScope prof_scope(prof_.get(), "sigmoid"); cuda::sigmoid(ctx_, out, x); }
  void softmax(Tensor& out, const Tensor& x) override { cuda::OpScope prof_scope(prof_.get(), "softmax"); cuda::softmax(ctx_, out, x); }
  void topk(Tensor& values, Tensor& indices, const Tensor& x, int k, TopkTies ties) override { cuda::OpScope prof_scope(prof_.get(), "topk");
    cuda::topk(ctx_, values, indices, x, k, ties);
  }
  void add_bias(Tensor& out, const Tensor& x, const Tensor& bias) override { cuda::OpScope prof_scope(prof_.get(), "add_bias");
    cuda::add_bias(ctx_, out, x, bias);
  }
  void gelu(Tensor& out, const Tensor& x) override { cuda::OpScope prof_scope(prof_.get(), "gelu"); cuda::gelu(ctx_, out, x); }
  void rotary(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin) override { cuda::OpScope prof_scope(prof_.get(), "rotary");
    cuda::rotary(ctx_, out, x, cos, sin);
  }
  void segment_attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& offsets,
                         float scale) override { cuda::OpScope prof_scope(prof_.get(), "segment_attention");
    cuda::segment_attention(ctx_, out, q, k, v, offsets, scale);
  }
  void mhc_coefficients(Tensor& pre, Tensor& post, Tensor& comb, const Tensor& mix, const Tensor& base,
                        const Tensor& scale, float hc_eps, int iters) override { cuda::OpScope prof_scope(prof_.get(), "mhc_coefficients");
    cuda::mhc_coefficients(ctx_, pre, post, comb, mix, base, scale, hc_eps, iters);
  }
  void mhc_collapse(Tensor& out, const Tensor& streams, const Tensor& pre) override { cuda::OpScope prof_scope(prof_.get(), "mhc_collapse");
    cuda::mhc_collapse(ctx_, out, streams, pre);
  }
  void mhc_expand(Tensor& out, const Tensor& y, const Tensor& post, const Tensor& comb,
                  const Tensor& residual) override { cuda::OpScope prof_scope(prof_.get(), "mhc_expand");
    cuda::mhc_expand(ctx_, out, y, post, comb, residual);
  }
  // Fused at decode rows (cuda_mhc_pre.cu); otherwise the default sequence of ops.
  void mhc_pre(Tensor& post, Tensor& comb, Tensor& out, const Tensor& streams, const Tensor& fn, const Tensor& base,
               const Tensor& scale, const Tensor& norm_weight, float norm_eps, float hc_eps, int iters) override {
    cuda::OpScope prof_scope(prof_.get(), "mhc_pre");
    if (!cuda::mhc_pre_fused(ctx_, post, comb, out, streams, fn, base, scale, norm_weight, norm_eps, hc_eps, iters))
      Ops::mhc_pre(post, comb, out, streams, fn, base, scale, norm_weight, norm_eps, hc_eps, iters);
  }
  void mhc_expand_pre(Tensor& streams_out, Tensor& post, Tensor& comb, Tensor& out, const Tensor& y,
                      const Tensor& prev_post, const Tensor& prev_comb, const Tensor& residual, const Tensor& fn,
                      const Tensor& base, const Tensor& scale, const Tensor& norm_weight, float norm_eps,
                      float hc_eps, int iters) override {
    cuda::OpScope prof_scope(prof_.get(), "mhc_expand_pre");
    if (!cuda::mhc_expand_pre_fused(ctx_, streams_out, post, comb, out, y, prev_post, prev_comb, residual, fn, base,
                                    scale, norm_weight, norm_eps, hc_eps, iters))
      Ops::mhc_expand_pre(streams_out, post, comb, out, y, prev_post, prev_comb, residual, fn, base, scale,
                          norm_weight, norm_eps, hc_eps, iters);
  }
  void causal_conv1d_silu(Tensor& out, const Tensor& x, Tensor& state, const Tensor& weight) override { cuda::OpScope prof_scope(prof_.get(), "causal_conv1d_silu");
    cuda::causal_conv1d_silu(ctx_, out, x, state, weight);
  }
  void kda_gate(Tensor& g, const Tensor& f, const Tensor& dt_bias, const Tensor& a_log, bool has_lb,
                float lb) override { cuda::OpScope prof_scope(prof_.get(), "kda_gate");
    cuda::kda_gate(ctx_, g, f, dt_bias, a_log, has_lb, lb);
  }
  // Fused at decode rows (cuda_kda_lowrank.cu, the same bits); otherwise the default sequence.
  void kda_lowrank_gates(Tensor& g, Tensor& gate, Tensor& beta, const Tensor& fa, const Tensor& ga,
                         const Tensor& beta_logits, const Tensor& f_b, const Tensor& g_b, const Tensor& dt_bias,
                         const Tensor& a_log, bool has_lb, float lb) override {
    cuda::OpScope prof_scope(prof_.get(), "kda_lowrank_gates");
    if (!cuda::kda_lowrank_gates_fused(ctx_, g, gate, beta, fa, ga, beta_logits, f_b, g_b, dt_bias, a_log, has_lb,
                                       lb))
      Ops::kda_lowrank_gates(g, gate, beta, fa, ga, beta_logits, f_b, g_b, dt_bias, a_log, has_lb, lb);
  }
  void causal_conv1d_silu_rows(Tensor& out, const Tensor& x, std::span<Tensor* const> states,
                               const Tensor& weight) override { cuda::OpScope prof_scope(prof_.get(), "causal_conv1d_silu_rows");
    cuda::causal_conv1d_silu_rows(ctx_, out, x, states, weight);
  }
  void kda_recurrent_rows(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                          const Tensor& beta, std::span<Tensor* const> states) override { cuda::OpScope prof_scope(prof_.get(), "kda_recurrent_rows");
    cuda::kda_recurrent_rows(ctx_, out, q, k, v, g, beta, states);
  }
  void kda_recurrent(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                     const Tensor& beta, Tensor& state) override { cuda::OpScope prof_scope(prof_.get(), "kda_recurrent");
    cuda::kda_recurrent(ctx_, out, q, k, v, g, beta, state);
  }
  void kda_conv_qkv_rows(Tensor& out_q, Tensor& out_k, Tensor& out_v, const Tensor& x_q, const Tensor& x_k,
                         const Tensor& x_v, const KdaRowsView& rows, const Tensor& weight) override {
    cuda::OpScope prof_scope(prof_.get(), "kda_conv_qkv_rows");
    cuda::kda_conv_qkv_rows(ctx_, out_q, out_k, out_v, x_q, x_k, x_v, rows, weight);
  }
  void kda_recurrent_state_rows(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                                const Tensor& beta, const KdaRowsView& rows) override {
    cuda::OpScope prof_scope(prof_.get(), "kda_recurrent_state_rows");
    cuda::kda_recurrent_state_rows(ctx_, out, q, k, v, g, beta, rows);
  }
  // The chunked (WY) form on tensor cores (cuda_kda_chunked.cu; the token-by-token
  // kernel for head dims it does not cover).
  void kda_chunked(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                   const Tensor& beta, Tensor& state, int chunk_size) override { cuda::OpScope prof_scope(prof_.get(), "kda_chunked");
    cuda::kda_chunked(ctx_, out, q, k, v, g, beta, state, chunk_size);
  }
  // Prefill rows (16 or more): all heads of a row in one block on tensor cores
  // (cuda_mla_prefill.cu); fewer rows or other shapes: cuda_attention.cu (the split-token decode
  // kernels of cuda_mla_decode.cu, the same as mla_sparse_attention_rows).
  void mla_sparse_attention(Tensor& out, const Tensor& q, const LatentPagesView& cache, const Tensor& indices,
                            float scale) override { cuda::OpScope prof_scope(prof_.get(), "mla_sparse_attention");
    const int64_t w = indices.dim() == 0 ? 0 : indices.size(-1), t = w == 0 ? 0 : indices.numel() / w;
    const int64_t h = t * cache.width == 0 ? 0 : q.numel() / (t * cache.width);
    if (t >= cuda::kMlaPrefillMinRows && h * t * cache.width == q.numel() &&
        cuda::mla_prefill_supported(h, cache.width, w, cache.dtype))
      cuda::mla_sparse_attention_prefill(ctx_, out, q, cache, indices, scale);
    else
      cuda::mla_sparse_attention(ctx_, out, q, cache, indices, scale);
  }
  void latent_store(const LatentPagesView& cache, void* pages, float* scales, const Tensor& latent,
                    int64_t first) override { cuda::OpScope prof_scope(prof_.get(), "latent_store");
    cuda::latent_store(ctx_, cache, pages, scales, latent, first);
  }
  void indexer_token_indices(Tensor& indices, const Tensor& pools, int64_t first_position, int pool_size,
                             bool tail) override { cuda::OpScope prof_scope(prof_.get(), "indexer_token_indices");
    cuda::indexer_token_indices(ctx_, indices, pools, first_position, pool_size, tail);
  }
  void indexer_pool_keys(Tensor& out, const Tensor& keys, const Tensor& gate, const Tensor& ape) override { cuda::OpScope prof_scope(prof_.get(), "indexer_pool_keys");
    cuda::indexer_pool_keys(ctx_, out, keys, gate, ape);
  }
  void indexer_scores(Tensor& out, const Tensor& q, const Tensor& pool_keys, const Tensor& weights,
                      const Tensor& candidates, float scale) override { cuda::OpScope prof_scope(prof_.get(), "indexer_scores");
    // Tensor cores (cuda_indexer_prefill.cu) where they apply; the f32 kernel otherwise.
    if (cuda::indexer_scores_mma_applies(q, pool_keys, weights, candidates))
      cuda::indexer_scores_mma(ctx_, out, q, pool_keys, weights, candidates, scale);
    else
      cuda::indexer_scores(ctx_, out, q, pool_keys, weights, candidates, scale);
  }
  void latent_store_rows(const DecodeRowsView& rows, const Tensor& latent) override { cuda::OpScope prof_scope(prof_.get(), "latent_store_rows");
    cuda::latent_store_rows(ctx_, rows, latent);
  }
  void indexer_update_rows(const DecodeRowsView& rows, const Tensor& key, const Tensor& gate,
                           const Tensor& ape) override { cuda::OpScope prof_scope(prof_.get(), "indexer_update_rows");
    cuda::indexer_update_rows(ctx_, rows, key, gate, ape);
  }
  void indexer_scores_rows(Tensor& out, const DecodeRowsView& rows, const Tensor& q, const Tensor& weights,
                           float scale, int64_t select) override {
    cuda::OpScope prof_scope(prof_.get(), "indexer_scores_rows");
    cuda::indexer_scores_rows(ctx_, out, rows, q, weights, scale, select);
  }
  void indexer_topk_rows(Tensor& selected, const Tensor& scores, const DecodeRowsView& rows,
                         TopkTies ties) override { cuda::OpScope prof_scope(prof_.get(), "indexer_topk_rows");
    cuda::indexer_topk_rows(ctx_, selected, scores, rows, ties);
  }
  void indexer_token_indices_rows(Tensor& indices, const Tensor& selected, const DecodeRowsView& rows,
                                  bool tail) override { cuda::OpScope prof_scope(prof_.get(), "indexer_token_indices_rows");
    cuda::indexer_token_indices_rows(ctx_, indices, selected, rows, tail);
  }
  void mla_sparse_attention_rows(Tensor& out, const Tensor& q, const DecodeRowsView& rows, const Tensor& indices,
                                 float scale) override { cuda::OpScope prof_scope(prof_.get(), "mla_sparse_attention_rows");
    cuda::mla_sparse_attention_rows(ctx_, out, q, rows, indices, scale);
  }
  void moe_route(Tensor& weights, Tensor& ids, const Tensor& logits, const Tensor& bias, int n_group,
                 int topk_group, int k, bool norm, float scaling) override { cuda::OpScope prof_scope(prof_.get(), "moe_route");
    cuda::moe_route(ctx_, weights, ids, logits, bias, n_group, topk_group, k, norm, scaling);
  }
  void moe_experts(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights, const Tensor& gate_up,
                   const Tensor& down, float swiglu_limit) override { cuda::OpScope prof_scope(prof_.get(), "moe_experts");
    cuda::moe_experts(ctx_, out, x, ids, weights, gate_up, down, swiglu_limit);
  }
  void exl3_matmul(Tensor& out, const Tensor& x, const Exl3Weight& w) override { cuda::OpScope prof_scope(prof_.get(), "exl3_matmul"); cuda::exl3_matmul(ctx_, out, x, w); }
  void moe_experts_exl3(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                        const Exl3ExpertTable& experts, float swiglu_limit) override { cuda::OpScope prof_scope(prof_.get(), "moe_experts_exl3");
    // TF_EXL3_PREFILL=experts and a prefill-sized call: the per-expert default.
    if (!cuda::exl3_moe_experts(ctx_, out, x, ids, weights, experts, swiglu_limit))
      Ops::moe_experts_exl3(out, x, ids, weights, experts, swiglu_limit);
  }
  void moe_experts_fp8(Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                       const Fp8ExpertStack& experts, float swiglu_limit) override { cuda::OpScope prof_scope(prof_.get(), "moe_experts_fp8");
    if (x.dim() == 2 && x.size(0) >= cuda::kMoeFp8PrefillTokens)
      Ops::moe_experts_fp8(out, x, ids, weights, experts, swiglu_limit);  // prefill: per expert, cuBLAS
    else
      cuda::moe_experts_fp8(ctx_, out, x, ids, weights, experts, swiglu_limit);
  }
  Status upload_exl3_experts(Exl3ExpertTable& experts) override {
    try {
      return cuda::exl3_upload_experts(ctx_, experts);
    } catch (const StatusError& e) {
      return e.status();
    }
  }
  cuda::CudaContext& context() { return ctx_; }
  void sample_rows(std::span<SampleRowResult> out, std::span<const Tensor> rows,
                   std::span<const SampleRowParams> params) override { cuda::OpScope prof_scope(prof_.get(), "sample_rows");
    cuda::sample_rows(ctx_, out, rows, params);
  }

 private:
  // copy's checks and every transfer that involves the host (done here); a device-to-device
  // pair is returned as `job` (true) for copy_rows.
  bool copy_or_job(Tensor& dst, const Tensor& src, cuda::CopyRowsJob& job) {
    if (dst.shape() != src.shape() || dst.dtype() != src.dtype())
      throw StatusError(invalid_argument("copy: " + src.describe() + " into " + dst.describe() +
                                         " (shape and dtype must match)"));
    for (const Tensor* t : {static_cast<const Tensor*>(&dst), &src})
      if (!t->device().is_cpu() && !(t->device().kind == DeviceKind::kCuda && t->device().index == ctx_.device))
        throw StatusError(invalid_argument(std::string("copy: ") + t->describe() + " is on another device"));
    int64_t rows, width, dpitch, spitch, r2, w2;
    if (!as_rows(dst, rows, width, dpitch) || !as_rows(src, r2, w2, spitch))
      throw StatusError(unimplemented("copy: " + src.describe() + " -> " + dst.describe() +
                                      ": only packed or row-strided tensors (last dimension packed)"));
    const bool to_host_side = dst.device().is_cpu();
    const bool host_involved = to_host_side || src.device().is_cpu();
    if (host_involved && ctx_.capturing)
      throw StatusError(internal_error("copy between host and device inside a graph capture"));
    if (rows > 0 && width > 0) {
      if (dst.device().is_cpu() && src.device().is_cpu()) {
        dst.copy_from(src);
        return false;
      }
      const size_t es = dst.element_size();
      if (src.device().is_cpu() && static_cast<size_t>(rows * width) * es <= kStagedUploadMax) {
        upload_staged(dst.raw(), dpitch * es, src, spitch * es, width * es, rows);
        return false;
      }
      if (src.device().is_cpu() && dpitch == width && spitch == width &&
          static_cast<size_t>(rows * width) * es >= kPinnedUploadMin) {
        upload_pinned(dst.raw(), src.raw(), static_cast<size_t>(rows * width) * es);
        sync_and_check("copy to device");
        return false;
      }
      if (!host_involved && cuda::copy_kernel_enabled()) {
        job = {static_cast<char*>(dst.raw()), static_cast<const char*>(src.raw()), rows,
               static_cast<int64_t>(width * es), static_cast<int64_t>(dpitch * es), static_cast<int64_t>(spitch * es)};
        return true;
      }
      throw_if(cuda::cuda_status(cudaMemcpy2DAsync(dst.raw(), dpitch * es, src.raw(), spitch * es, width * es, rows,
                                                   cudaMemcpyDefault, ctx_.stream),
                                 "copy"));
    }
    if (host_involved) sync_and_check(to_host_side ? "copy to host" : "copy to device");
    return false;
  }

  CudaOps() = default;

  // Small uploads (token ids, indices, page tables) are staged in pinned memory
  // and not waited for (staging_ring.h); bigger ones (weights) are synchronous.
  static constexpr size_t kStagingBytes = size_t{16} << 20;
  static constexpr size_t kStagedUploadMax = size_t{1} << 20;
  // Large packed uploads (weights at load) go through several pinned buffers kept in
  // flight by copy threads (pinned_upload.h), made at the first one.
  static constexpr size_t kPinnedUploadMin = size_t{4} << 20;
  void upload_pinned(void* dst, const void* src, size_t bytes) {
    if (!pinned_) {
      auto up = cuda::PinnedUploader::create(ctx_.device);
      if (!up) throw StatusError(up.status().with_context("pinned upload buffers on cuda:" + std::to_string(ctx_.device)));
      pinned_ = std::move(*up);
    }
    throw_if(pinned_->copy(dst, src, bytes, ctx_.stream));
  }
  void upload_staged(void* dst, size_t dpitch, const Tensor& src, size_t spitch, size_t row_bytes, int64_t rows) {
    auto slot = ctx_.staging->reserve(row_bytes * static_cast<size_t>(rows));
    if (!slot) throw StatusError(slot.status());
    const char* from = static_cast<const char*>(src.raw());
    for (int64_t r = 0; r < rows; ++r) std::memcpy(*slot + r * row_bytes, from + r * spitch, row_bytes);
    throw_if(cuda::cuda_status(cudaMemcpy2DAsync(dst, dpitch, *slot, row_bytes, row_bytes, rows,
                                                 cudaMemcpyHostToDevice, ctx_.stream),
                               "copy to device"));
    throw_if(ctx_.staging->commit(ctx_.stream));
  }

  // Waits for the stream; turns a kernel fault or a flagged bad index into a StatusError.
  void sync_and_check(const char* what) {
    throw_if(cuda::cuda_status(cudaStreamSynchronize(ctx_.stream), what));
    unsigned word = 0;
    throw_if(cuda::cuda_status(cudaMemcpy(&word, ctx_.error_word, sizeof word, cudaMemcpyDeviceToHost), what));
    if (word == 0) return;
    throw_if(cuda::cuda_status(cudaMemset(ctx_.error_word, 0, sizeof word), what));
    std::string msg = "an earlier CUDA op saw bad input (its output rows are zero):";
    if (word & cuda::kErrEmbeddingId) msg += " embedding: token id outside the vocabulary;";
    if (word & cuda::kErrGatherIndex) msg += " gather_rows/scatter_add_rows: row index out of range;";
    if (word & cuda::kErrMoeExpertId) msg += " moe_experts: expert id out of range (its term is dropped);";
    throw StatusError(out_of_range(msg));
  }

  cuda::CudaContext ctx_;
  std::unique_ptr<cuda::StagingRing> staging_;
  std::unique_ptr<cuda::PinnedUploader> pinned_;
  static constexpr size_t kCublasWorkspaceBytes = size_t{32} << 20;
  void* cublas_ws_ = nullptr;
  std::unique_ptr<cuda::OpProfiler> prof_;  // TF_PROFILE_OPS=1 (op_profiler.h)
  std::unique_ptr<cuda::SideStream> side_;  // null with TF_BRANCHES=0
  bool many_branch_ = env_on("TF_MATMUL_MANY_BRANCH");
  cuda::GraphCapturer graphs_;
};

}  // namespace

Expected<std::unique_ptr<Ops>> make_cuda_ops(int device, int64_t exact_rows) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  if (device < 0 || device >= n)
    return unavailable("make_cuda_ops: no CUDA device " + std::to_string(device) + " (" + std::to_string(n) +
                       " found)");
  if (exact_rows < 0 || exact_rows > cuda::kCublasMinRows)
    return invalid_argument("make_cuda_ops: exact_rows " + std::to_string(exact_rows) + " outside 0..64");
  TF_RETURN_IF_ERROR(cuda::check_kernel_image(device));
  return CudaOps::create(device, exact_rows);
}

CUstream_st* cuda_ops_stream(const Ops& ops) {
  const auto* cuda_ops = dynamic_cast<const CudaOps*>(&ops);
  return cuda_ops != nullptr ? cuda_ops->stream() : nullptr;
}

bool cuda_shares_host_memory(int device) {
  int integrated = 0;
  if (cudaDeviceGetAttribute(&integrated, cudaDevAttrIntegrated, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return integrated != 0;
}

Status cuda_device_usable(int device) {
  const int n = cuda::device_count();
  if (device < 0 || device >= n)
    return unavailable("no CUDA device " + std::to_string(device) + " (" + std::to_string(n) + " found)");
  return cuda::check_kernel_image(device);
}

Expected<int64_t> cuda_free_bytes(int device) {
  if (device < 0 || device >= cuda::device_count())
    return unavailable("no CUDA device " + std::to_string(device));
  return cuda::free_bytes(device);
}

}  // namespace tf

namespace tf {

Tensor cuda_exl3_decode_w_hat(Ops& cuda_ops, const Exl3Weight& w) {
  auto* ops = dynamic_cast<CudaOps*>(&cuda_ops);
  if (!ops) throw StatusError(invalid_argument(std::string("cuda_exl3_decode_w_hat: the ") + cuda_ops.name() +
                                               " backend is not the CUDA one"));
  return cuda::exl3_decode_w_hat(ops->context(), w);
}

}  // namespace tf
