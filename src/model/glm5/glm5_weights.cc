// Loading GLM-5.3-Flash weights through a WeightSource and cutting this rank's
// tensor-parallel shard (see glm5_weights.h for the split of every tensor).
//
// Speed (a 66 GiB checkpoint must not take minutes): the projection matrices are
// read with WeightSource::get_native, so a BF16 matrix kept in bf16 is a view of
// the mapped file (no f32 round trip, no copy when this rank takes it whole) and
// a fused or cut one is assembled once, straight in its final dtype (the routed
// experts directly in their stacked slot). Conversions go through f32 exactly as
// before (bf16 <-> f32 is exact), so every value is what the f32 route produced.
// The layers load on several threads (each layer is independent; the result does
// not depend on the thread count); DENSE=q4/fp8 re-quantization splits each
// matrix over ThreadPool::global() (dense_quant.h).
#include "model/glm5/glm5_weights.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>

#include "core/logging.h"
#include "model/dense_quant.h"

namespace tf {

ShardRange shard_range(int64_t n, int rank, int world) {
  const int64_t base = n / world, extra = n % world;
  ShardRange r;
  r.begin = rank * base + std::min<int64_t>(rank, extra);
  r.end = r.begin + base + (rank < extra ? 1 : 0);
  return r;
}

namespace {

// Rows [b, e) of a 2-D (or more) tensor, packed: `t` itself when that is all of it.
Tensor rows(const Tensor& t, int64_t b, int64_t e) {
  if (b == 0 && e == t.size(0) && t.is_contiguous()) return t;
  return t.slice(0, b, e).contiguous();
}

// Writes `src` (packed, any float dtype) into `dst` (packed, same element count)
// converted to dst's dtype; through f32 as Tensor::to_dtype does, so the values are
// those of the f32 route. Large f16 <-> bf16 conversions go in f32 pieces.
void convert_into(void* dst, DType to, const void* src, DType from, size_t n) {
  if (to == from) {
    std::memcpy(dst, src, n * dtype_size(to));
  } else if (to == DType::kF32) {
    convert_to_f32(src, from, static_cast<float*>(dst), n);
  } else if (from == DType::kF32) {
    convert_from_f32(static_cast<const float*>(src), dst, to, n);
  } else {
    constexpr size_t kPiece = size_t{1} << 16;
    std::vector<float> tmp(std::min(n, kPiece));
    for (size_t i = 0; i < n; i += kPiece) {
      const size_t m = std::min(kPiece, n - i);
      convert_to_f32(static_cast<const char*>(src) + i * dtype_size(from), from, tmp.data(), m);
      convert_from_f32(tmp.data(), static_cast<char*>(dst) + i * dtype_size(to), to, m);
    }
  }
}

// Columns [b, e) of 2-D `src` written (converted) into packed `dst` [rows, e - b]
// row by row (Tensor::copy_from would walk a strided view element by element).
void put_cols(Tensor& dst, const Tensor& src, int64_t b, int64_t e) {
  const Tensor p = src.is_contiguous() ? src : src.contiguous();
  const int64_t n = p.size(0), k = p.size(1), w = e - b;
  if (b == 0 && e == k) {
    convert_into(dst.raw(), dst.dtype(), p.raw(), p.dtype(), static_cast<size_t>(n * k));
    return;
  }
  const size_t si = p.element_size(), so = dst.element_size();
  for (int64_t r = 0; r < n; ++r)
    convert_into(static_cast<char*>(dst.raw()) + r * w * so, dst.dtype(),
                 static_cast<const char*>(p.raw()) + (r * k + b) * si, p.dtype(), static_cast<size_t>(w));
}

// `t` in `dtype`: itself when it is already that (packed), else a converted copy.
Tensor to_dtype(const Tensor& t, DType dtype) {
  if (t.dtype() == dtype && t.is_contiguous()) return t;
  const Tensor p = t.is_contiguous() ? t : t.contiguous();
  Tensor out = Tensor::empty(p.shape(), dtype);
  convert_into(out.raw(), dtype, p.raw(), p.dtype(), static_cast<size_t>(p.numel()));
  return out;
}

// Columns [b, e) of 2-D `t`, packed in `dtype` (`t` itself when that is all of it already).
Tensor cut_cols(const Tensor& t, int64_t b, int64_t e, DType dtype) {
  if (b == 0 && e == t.size(1)) return to_dtype(t, dtype);
  Tensor out = Tensor::empty({t.size(0), e - b}, dtype);
  put_cols(out, t, b, e);
  return out;
}

// Rows [b, e) of `src` written (converted) into the packed rows of `dst` starting at row `at`.
void put_rows(Tensor& dst, int64_t at, const Tensor& src, int64_t b, int64_t e) {
  const Tensor s = src.is_contiguous() ? src : src.contiguous();
  const int64_t row = s.numel() / std::max<int64_t>(s.size(0), 1);
  convert_into(static_cast<char*>(dst.raw()) + at * row * dst.element_size(), dst.dtype(),
               static_cast<const char*>(s.raw()) + b * row * s.element_size(), s.dtype(),
               static_cast<size_t>((e - b) * row));
}

// How many threads load layers: TF_LOAD_THREADS, else the hardware's (at most 16).
int load_threads(int layers) {
  int n = static_cast<int>(std::min(16u, std::max(1u, std::thread::hardware_concurrency())));
  if (const char* env = std::getenv("TF_LOAD_THREADS"); env && std::atoi(env) > 0) n = std::atoi(env);
  return std::max(1, std::min(n, layers));
}

class Loader {
 public:
  Loader(const WeightSource& src, const Glm5TextConfig& cfg, int rank, int world, DType matrix_dtype,
         MatrixFormat quant)
      : src_(src), cfg_(cfg), rank_(rank), world_(world), matrix_dtype_(matrix_dtype), quant_(quant) {}

  Expected<Tensor> get(const std::string& name, const Shape& shape) const { return src_.get_f32(name, shape); }
  // A matrix's stored values (a view of the checkpoint when f32/bf16/f16; see get_native).
  Expected<Tensor> native(const std::string& name, const Shape& shape) const { return src_.get_native(name, shape); }
  // A projection matrix (an operand of Ops::matmul / head_matmul / embedding) in the
  // dtype asked for. BF16 checkpoints convert to BF16 exactly, so keeping them BF16
  // halves memory and the bytes a decode step streams without changing a weight.
  Tensor mat(const Tensor& t) const { return to_dtype(t, matrix_dtype_); }
  // A large dense matrix: re-quantized when DENSE asks for it (load_glm5_weights' comment
  // lists which), else as mat(). q4/fp8 see the checkpoint's own values (bf16 and f32
  // are read exactly; other dtypes go through f32).
  Expected<Matrix> qmat(const Tensor& t, const std::string& name) const { return qmat_as(t, quant_, name); }
  // The same in an explicit format (lm_head's is LM_HEAD's, not DENSE's).
  Expected<Matrix> qmat_as(const Tensor& t, MatrixFormat format, const std::string& name) const {
    if (format == MatrixFormat::kDense) return Matrix(mat(t));
    if (t.dtype() != DType::kF32 && t.dtype() != DType::kBF16) return quantize_matrix(to_dtype(t, DType::kF32), format, name);
    return quantize_matrix(t, format, name);
  }
  // The dtype a matrix built from `parts` is assembled in: its final one when it stays
  // dense, else one that holds every part's values exactly (for quantize_matrix).
  DType build_dtype(bool quantize, std::initializer_list<const Tensor*> parts) const {
    if (!quantize || quant_ == MatrixFormat::kDense) return matrix_dtype_;
    for (const Tensor* t : parts)
      if (t->dtype() != DType::kBF16) return DType::kF32;
    return DType::kBF16;
  }
  bool has(const std::string& name) const { return src_.has(name); }

  // An MLP's three matrices as stored (views when they can be).
  struct MlpParts {
    Tensor gate, up, down;
  };
  Expected<MlpParts> mlp_parts(const std::string& p, int64_t inter) const {
    const int64_t h = cfg_.hidden_size;
    MlpParts m;
    TF_ASSIGN_OR_RETURN(m.gate, native(p + "gate_proj.weight", {inter, h}));
    TF_ASSIGN_OR_RETURN(m.up, native(p + "up_proj.weight", {inter, h}));
    TF_ASSIGN_OR_RETURN(m.down, native(p + "down_proj.weight", {h, inter}));
    return m;
  }
  // This rank's gate rows, then its up rows, written into packed `gate_up` [2*I_l, H].
  static void put_gate_up(Tensor& gate_up, const MlpParts& m, const ShardRange& s) {
    put_rows(gate_up, 0, m.gate, s.begin, s.end);
    put_rows(gate_up, s.size(), m.up, s.begin, s.end);
  }

  // A dense MLP or shared expert (`quantize`), or a routed expert (never re-quantized:
  // the experts are stacked dense for Ops::moe_experts).
  Expected<MlpWeights> mlp(const std::string& p, int64_t inter, bool quantize = true) const {
    const ShardRange s = shard_range(inter, rank_, world_);
    TF_ASSIGN_OR_RETURN(MlpParts m, mlp_parts(p, inter));
    Tensor gate_up = Tensor::empty({2 * s.size(), cfg_.hidden_size}, build_dtype(quantize, {&m.gate, &m.up}));
    put_gate_up(gate_up, m, s);
    Tensor down = cut_cols(m.down, s.begin, s.end, build_dtype(quantize, {&m.down}));
    MlpWeights w;
    if (!quantize) {
      w.gate_up = std::move(gate_up);
      w.down = std::move(down);
      return w;
    }
    TF_ASSIGN_OR_RETURN(w.gate_up, qmat(gate_up, p + "gate_proj/up_proj"));
    TF_ASSIGN_OR_RETURN(w.down, qmat(down, p + "down_proj.weight"));
    return w;
  }

  // A routed expert stored EXL3, or nullopt when the checkpoint stores it unquantized.
  Expected<std::optional<MlpWeights>> exl3_expert(const std::string& p) const {
    const int64_t h = cfg_.hidden_size, inter = cfg_.moe_intermediate_size;
    TF_ASSIGN_OR_RETURN(std::optional<Exl3Weight> gate, src_.get_exl3(p + "gate_proj.weight", h, inter));
    if (!gate) return std::optional<MlpWeights>();
    TF_ASSIGN_OR_RETURN(std::optional<Exl3Weight> up, src_.get_exl3(p + "up_proj.weight", h, inter));
    TF_ASSIGN_OR_RETURN(std::optional<Exl3Weight> down, src_.get_exl3(p + "down_proj.weight", inter, h));
    if (!up || !down) return invalid_argument(p + "gate_proj is stored EXL3 but up_proj / down_proj are not");
    auto e = std::make_shared<Exl3Expert>();
    const ShardRange s = shard_range(inter, rank_, world_);
    if (world_ == 1) {
      e->gate = std::move(*gate);
      e->up = std::move(*up);
      e->down = std::move(*down);
    } else {
      // The last rank also takes the padding channels (end = the padded size).
      const int64_t end = s.end == inter ? gate->out_features() : s.end;
      const std::string why = " (EXL3 experts with " + std::to_string(world_) + " tensor-parallel ranks)";
      auto cut = [&](Expected<Exl3Weight> r, Exl3Weight* dst) {
        if (!r.has_value()) return r.status().with_context(p.substr(0, p.size() - 1) + why);
        *dst = std::move(*r);
        return Status::ok();
      };
      TF_RETURN_IF_ERROR(cut(exl3_output_slice(*gate, s.begin, end, p + "gate_proj"), &e->gate));
      TF_RETURN_IF_ERROR(cut(exl3_output_slice(*up, s.begin, end, p + "up_proj"), &e->up));
      TF_RETURN_IF_ERROR(cut(exl3_input_slice(*down, s.begin, end, p + "down_proj"), &e->down));
    }
    MlpWeights w;
    w.exl3 = std::move(e);
    w.exl3_intermediate = s.size();
    return std::optional<MlpWeights>(std::move(w));
  }

  Expected<HyperConnectionWeights> hc(const std::string& p) const {
    const int64_t m = cfg_.hc_mult, mix = (2 + m) * m;
    HyperConnectionWeights w;
    TF_ASSIGN_OR_RETURN(w.fn, get(p + "_fn", {mix, m * cfg_.hidden_size}));
    // With BF16 matrices (a device backend) fn is kept in BF16 when that holds its values
    // exactly, as a BF16 checkpoint's do: the CUDA mhc_pre reads it with the same bits
    // as f32 and half the bytes (90 reads per token). The decision looks at the values,
    // not at the stored dtype, so every route to the same values gives the same
    // tensor; the CPU backend (f32 matrices) keeps f32, which its ops take.
    if (matrix_dtype_ == DType::kBF16) {
      const Tensor& f = w.fn;  // packed f32 from get()
      const auto* bits = static_cast<const uint32_t*>(f.raw());
      bool exact = f.dtype() == DType::kF32 && f.is_contiguous();
      for (int64_t i = 0; exact && i < f.numel(); ++i) exact = (bits[i] & 0xffffu) == 0;
      if (exact) w.fn = to_dtype(f, DType::kBF16);
    }
    TF_ASSIGN_OR_RETURN(w.base, get(p + "_base", {mix}));
    TF_ASSIGN_OR_RETURN(w.scale, get(p + "_scale", {3}));
    return w;
  }

  Expected<KdaWeights> kda(const std::string& p) const {
    const int64_t h = cfg_.hidden_size, nh = cfg_.linear_num_heads, dk = cfg_.linear_head_dim;
    const int64_t kw = cfg_.linear_conv_kernel_dim, c = nh * dk;
    const ShardRange hs = shard_range(nh, rank_, world_);
    const int64_t c0 = hs.begin * dk, c1 = hs.end * dk;
    KdaWeights w;
    w.heads = hs.size();
    TF_ASSIGN_OR_RETURN(Tensor q, native(p + "q_proj.weight", {c, h}));
    TF_ASSIGN_OR_RETURN(Tensor k, native(p + "k_proj.weight", {c, h}));
    TF_ASSIGN_OR_RETURN(Tensor v, native(p + "v_proj.weight", {c, h}));
    TF_ASSIGN_OR_RETURN(w.q_proj, qmat(rows(q, c0, c1), p + "q_proj.weight"));
    TF_ASSIGN_OR_RETURN(w.k_proj, qmat(rows(k, c0, c1), p + "k_proj.weight"));
    TF_ASSIGN_OR_RETURN(w.v_proj, qmat(rows(v, c0, c1), p + "v_proj.weight"));
    TF_ASSIGN_OR_RETURN(Tensor qc, get(p + "q_conv1d.weight", {c, 1, kw}));
    TF_ASSIGN_OR_RETURN(Tensor kc, get(p + "k_conv1d.weight", {c, 1, kw}));
    TF_ASSIGN_OR_RETURN(Tensor vc, get(p + "v_conv1d.weight", {c, 1, kw}));
    w.q_conv = rows(qc.reshape({c, kw}), c0, c1);
    w.k_conv = rows(kc.reshape({c, kw}), c0, c1);
    w.v_conv = rows(vc.reshape({c, kw}), c0, c1);
    TF_ASSIGN_OR_RETURN(Tensor fa, native(p + "f_a_proj.weight", {dk, h}));
    w.f_a = mat(fa);
    TF_ASSIGN_OR_RETURN(Tensor fb, native(p + "f_b_proj.weight", {c, dk}));
    w.f_b = mat(rows(fb, c0, c1));
    TF_ASSIGN_OR_RETURN(Tensor dt, get(p + "dt_bias", {c}));
    w.dt_bias = rows(dt, c0, c1);
    TF_ASSIGN_OR_RETURN(Tensor al, get(p + "A_log", {nh}));
    w.a_log = rows(al, hs.begin, hs.end);
    TF_ASSIGN_OR_RETURN(Tensor bp, native(p + "b_proj.weight", {nh, h}));
    w.b_proj = mat(rows(bp, hs.begin, hs.end));
    TF_ASSIGN_OR_RETURN(Tensor ga, native(p + "g_a_proj.weight", {dk, h}));
    w.g_a = mat(ga);
    TF_ASSIGN_OR_RETURN(Tensor gb, native(p + "g_b_proj.weight", {c, dk}));
    w.g_b = mat(rows(gb, c0, c1));
    TF_ASSIGN_OR_RETURN(w.o_norm, get(p + "o_norm.weight", {dk}));
    TF_ASSIGN_OR_RETURN(Tensor op, native(p + "o_proj.weight", {h, c}));
    TF_ASSIGN_OR_RETURN(w.o_proj, qmat(cut_cols(op, c0, c1, build_dtype(true, {&op})), p + "o_proj.weight"));
    return w;
  }

  Expected<IndexerWeights> indexer(const std::string& p) const {
    const int64_t h = cfg_.hidden_size, hi = cfg_.index_n_heads, di = cfg_.index_head_dim;
    IndexerWeights w;
    TF_ASSIGN_OR_RETURN(Tensor wq_b, native(p + "wq_b.weight", {hi * di, cfg_.q_lora_rank}));
    w.wq_b = mat(wq_b);
    TF_ASSIGN_OR_RETURN(Tensor wk, native(p + "wk.weight", {di, h}));
    w.wk = mat(wk);
    TF_ASSIGN_OR_RETURN(w.k_norm_w, get(p + "k_norm.weight", {di}));
    TF_ASSIGN_OR_RETURN(w.k_norm_b, get(p + "k_norm.bias", {di}));
    TF_ASSIGN_OR_RETURN(Tensor wp, native(p + "weights_proj.weight", {hi, h}));
    w.weights_proj = mat(wp);
    TF_ASSIGN_OR_RETURN(w.ape, get(p + "index_kpool_compress_ape", {cfg_.index_kpool, di}));
    TF_ASSIGN_OR_RETURN(Tensor cg, native(p + "index_kpool_compress_gate", {di, h}));
    w.compress_gate = mat(cg);
    return w;
  }

  Expected<MlaWeights> mla(const std::string& p, bool with_indexer) const {
    const int64_t h = cfg_.hidden_size, nh = cfg_.num_attention_heads, r = cfg_.kv_lora_rank;
    const int64_t dqk = cfg_.qk_head_dim, dn = cfg_.qk_nope_head_dim, dv = cfg_.v_head_dim;
    const int64_t ql = cfg_.q_lora_rank, rope = cfg_.qk_rope_head_dim;
    if (rope != 0) return unimplemented("MLA with qk_rope_head_dim " + std::to_string(rope) + " (GLM-5.3 is NoPE)");
    const ShardRange hs = shard_range(nh, rank_, world_);
    MlaWeights w;
    w.heads = hs.size();
    TF_ASSIGN_OR_RETURN(Tensor qa, native(p + "q_a_proj.weight", {ql, h}));
    TF_ASSIGN_OR_RETURN(w.q_a, qmat(qa, p + "q_a_proj.weight"));
    TF_ASSIGN_OR_RETURN(w.q_a_norm, get(p + "q_a_layernorm.weight", {ql}));
    TF_ASSIGN_OR_RETURN(Tensor qb, native(p + "q_b_proj.weight", {nh * dqk, ql}));
    TF_ASSIGN_OR_RETURN(w.q_b, qmat(rows(qb, hs.begin * dqk, hs.end * dqk), p + "q_b_proj.weight"));
    TF_ASSIGN_OR_RETURN(Tensor kva, native(p + "kv_a_proj_with_mqa.weight", {r + rope, h}));
    TF_ASSIGN_OR_RETURN(w.kv_a, qmat(kva, p + "kv_a_proj_with_mqa.weight"));
    TF_ASSIGN_OR_RETURN(w.kv_a_norm, get(p + "kv_a_layernorm.weight", {r}));
    TF_ASSIGN_OR_RETURN(Tensor kvb, get(p + "kv_b_proj.weight", {nh * (dn + dv), r}));
    w.w_uk_t = Tensor::empty({w.heads, r, dn}, DType::kF32);
    w.w_uv = Tensor::empty({w.heads, dv, r}, DType::kF32);
    for (int64_t hh = 0; hh < w.heads; ++hh) {
      const float* base = kvb.data<float>() + (hs.begin + hh) * (dn + dv) * r;
      for (int64_t d = 0; d < dn; ++d)
        for (int64_t x = 0; x < r; ++x) w.w_uk_t.data<float>()[(hh * r + x) * dn + d] = base[d * r + x];
      std::copy_n(base + dn * r, dv * r, w.w_uv.data<float>() + hh * dv * r);
    }
    w.w_uk_t = mat(w.w_uk_t);
    w.w_uv = mat(w.w_uv);
    TF_ASSIGN_OR_RETURN(Tensor op, native(p + "o_proj.weight", {h, nh * dv}));
    TF_ASSIGN_OR_RETURN(w.o_proj, qmat(cut_cols(op, hs.begin * dv, hs.end * dv, build_dtype(true, {&op})), p + "o_proj.weight"));
    if (with_indexer) {
      TF_ASSIGN_OR_RETURN(IndexerWeights iw, indexer(p + "indexer."));
      w.indexer = std::move(iw);
    }
    return w;
  }

  Expected<MoeWeights> moe(const std::string& p) const {
    const int64_t h = cfg_.hidden_size, e = cfg_.n_routed_experts;
    MoeWeights w;
    TF_ASSIGN_OR_RETURN(w.router, get(p + "gate.weight", {e, h}));
    TF_ASSIGN_OR_RETURN(w.bias, get(p + "gate.e_score_correction_bias", {e}));
    TF_RETURN_IF_ERROR(experts(p + "experts.", e, w));
    TF_ASSIGN_OR_RETURN(w.shared,
                        mlp(p + "shared_experts.", int64_t{cfg_.moe_intermediate_size} * cfg_.n_shared_experts));
    return w;
  }

  // The routed experts as one Fp8ExpertStack when every expert's three projections are
  // stored FP8 in 128x128 blocks and this rank's slice of the intermediate dim starts and
  // ends on a block edge (or at its end): the checkpoint's own bytes, never dequantized.
  // nullopt otherwise (experts() then stacks them dense, dequantized).
  Expected<std::optional<Fp8ExpertStack>> fp8_experts(const std::string& p, int64_t e) const {
    const int64_t h = cfg_.hidden_size, inter = cfg_.moe_intermediate_size;
    const ShardRange s = shard_range(inter, rank_, world_);
    if (e == 0 || s.begin % kFp8BlockSize != 0 || (s.end % kFp8BlockSize != 0 && s.end != inter))
      return std::optional<Fp8ExpertStack>();
    const int64_t il = s.size(), b0 = s.begin / kFp8BlockSize;
    const int64_t b1 = (s.end + kFp8BlockSize - 1) / kFp8BlockSize, hb = (h + kFp8BlockSize - 1) / kFp8BlockSize;
    Fp8ExpertStack st;
    for (int64_t i = 0; i < e; ++i) {
      const std::string name = p + std::to_string(i) + ".";
      TF_ASSIGN_OR_RETURN(std::optional<Matrix> g, src_.get_fp8(name + "gate_proj.weight", {inter, h}));
      TF_ASSIGN_OR_RETURN(std::optional<Matrix> u, src_.get_fp8(name + "up_proj.weight", {inter, h}));
      TF_ASSIGN_OR_RETURN(std::optional<Matrix> d, src_.get_fp8(name + "down_proj.weight", {h, inter}));
      if (!g || !u || !d) {
        if (i > 0 || g || u || d)
          TF_LOG_WARN("{}: the routed experts are not all stored FP8 in 128x128 blocks; they load dequantized",
                      p.substr(0, p.size() - 1));
        return std::optional<Fp8ExpertStack>();
      }
      if (i == 0) {
        st.gate = Tensor::empty({e, il, h}, DType::kF8E4M3);
        st.up = Tensor::empty({e, il, h}, DType::kF8E4M3);
        st.down = Tensor::empty({e, h, il}, DType::kF8E4M3);
        st.gate_scales = Tensor::empty({e, b1 - b0, hb}, DType::kF32);
        st.up_scales = Tensor::empty({e, b1 - b0, hb}, DType::kF32);
        st.down_scales = Tensor::empty({e, hb, b1 - b0}, DType::kF32);
      }
      Tensor slot = st.gate.select(0, i);
      put_rows(slot, 0, g->codes(), s.begin, s.end);
      slot = st.gate_scales.select(0, i);
      put_rows(slot, 0, g->scales(), b0, b1);
      slot = st.up.select(0, i);
      put_rows(slot, 0, u->codes(), s.begin, s.end);
      slot = st.up_scales.select(0, i);
      put_rows(slot, 0, u->scales(), b0, b1);
      slot = st.down.select(0, i);
      put_cols(slot, d->codes(), s.begin, s.end);
      slot = st.down_scales.select(0, i);
      put_cols(slot, d->scales(), b0, b1);
    }
    TF_RETURN_IF_ERROR(check_fp8_expert_stack(st, p + "*"));
    return std::optional<Fp8ExpertStack>(std::move(st));
  }

  // The routed experts: FP8 ones as stored (fp8_experts above), else stacked into
  // w.experts_gate_up [E, 2I_l, H] / w.experts_down [E, H, I_l] as they load, each
  // written straight into its slot (so a layer's experts are never held twice). When an
  // EXL3 expert shows up they go to w.experts one by one instead (the experts stacked so
  // far become views of the stack).
  Status experts(const std::string& p, int64_t e, MoeWeights& w) const {
    TF_ASSIGN_OR_RETURN(std::optional<Fp8ExpertStack> fp8, fp8_experts(p, e));
    if (fp8) {
      w.fp8_experts = std::move(*fp8);
      return Status::ok();
    }
    const int64_t h = cfg_.hidden_size, inter = cfg_.moe_intermediate_size;
    const int64_t il = shard_range(inter, rank_, world_).size();
    Tensor gu, dn;
    bool stacked = true;
    for (int64_t i = 0; i < e; ++i) {
      const std::string name = p + std::to_string(i) + ".";
      TF_ASSIGN_OR_RETURN(std::optional<MlpWeights> ex, exl3_expert(name));
      if (stacked && !ex) {
        if (i == 0) {
          gu = Tensor::empty({e, 2 * il, h}, matrix_dtype_);
          dn = Tensor::empty({e, h, il}, matrix_dtype_);
        }
        TF_ASSIGN_OR_RETURN(MlpParts m, mlp_parts(name, inter));
        const ShardRange s = shard_range(inter, rank_, world_);
        Tensor gu_slot = gu.select(0, i), dn_slot = dn.select(0, i);
        put_gate_up(gu_slot, m, s);
        put_cols(dn_slot, m.down, s.begin, s.end);
        continue;
      }
      if (stacked) {
        for (int64_t j = 0; j < i; ++j) {
          MlpWeights v;
          v.gate_up = gu.select(0, j);
          v.down = dn.select(0, j);
          w.experts.push_back(std::move(v));
        }
        stacked = false;
      }
      if (!ex) {
        TF_ASSIGN_OR_RETURN(MlpWeights dense, mlp(name, inter, /*quantize=*/false));
        w.experts.push_back(std::move(dense));
      } else {
        w.experts.push_back(std::move(*ex));
      }
    }
    if (stacked) {
      w.experts_gate_up = std::move(gu);
      w.experts_down = std::move(dn);
    }
    exl3_table(p, w);
    return Status::ok();
  }

  // The EXL3 expert table when every expert is EXL3 with one layout (views of the same
  // tensors, nothing copied); mixed layers keep the per-expert path.
  void exl3_table(const std::string& p, MoeWeights& w) const {
    if (w.experts.empty()) return;
    auto t = std::make_shared<Exl3ExpertTable>();
    t->hidden = cfg_.hidden_size;
    t->intermediate = w.experts[0].exl3_intermediate;
    for (const MlpWeights& m : w.experts) {
      if (!m.exl3 || m.exl3_intermediate != t->intermediate) return;
      t->gate.push_back(m.exl3->gate);
      t->up.push_back(m.exl3->up);
      t->down.push_back(m.exl3->down);
    }
    if (check_exl3_expert_table(*t, p.substr(0, p.size() - 1)).is_ok()) w.exl3_experts = std::move(t);
  }

  // One decoder layer (or the MTP block when `mtp`: MLA with indexer + MoE, no mHC).
  Expected<LayerWeights> layer(int i, bool mtp) const {
    const std::string p = "model.language_model.layers." + std::to_string(i) + ".";
    const int64_t h = cfg_.hidden_size;
    LayerWeights w;
    w.attention = mtp ? AttentionKind::kSparseMla : cfg_.layer_types[i];
    w.mlp = mtp ? MlpKind::kSparse : cfg_.mlp_layer_types[i];
    TF_ASSIGN_OR_RETURN(w.input_norm, get(p + "input_layernorm.weight", {h}));
    TF_ASSIGN_OR_RETURN(w.post_norm, get(p + "post_attention_layernorm.weight", {h}));
    if (!mtp) {
      TF_ASSIGN_OR_RETURN(w.attn_hc, hc(p + "hc_attn"));
      TF_ASSIGN_OR_RETURN(w.ffn_hc, hc(p + "hc_ffn"));
    }
    if (w.attention == AttentionKind::kLinear) {
      TF_ASSIGN_OR_RETURN(w.kda, kda(p + "self_attn."));
    } else {
      const bool full = mtp || cfg_.indexer_types[i] == IndexerKind::kFull;
      TF_ASSIGN_OR_RETURN(w.mla, mla(p + "self_attn.", full));
    }
    if (w.mlp == MlpKind::kDense) {
      TF_ASSIGN_OR_RETURN(w.dense, mlp(p + "mlp.", cfg_.intermediate_size));
    } else {
      TF_ASSIGN_OR_RETURN(w.moe, moe(p + "mlp."));
    }
    return w;
  }

 private:
  const WeightSource& src_;
  const Glm5TextConfig& cfg_;
  int rank_, world_;
  DType matrix_dtype_;
  MatrixFormat quant_;
};

}  // namespace

Expected<Glm5Weights> load_glm5_weights(const WeightSource& source, const Glm5TextConfig& cfg, int rank, int world,
                                        DType matrix_dtype, MatrixFormat dense_quant, MatrixFormat head_quant,
                                        MatrixFormat draft_head_quant) {
  if (matrix_dtype != DType::kF32 && matrix_dtype != DType::kBF16)
    return invalid_argument(std::string("weight matrices in ") + dtype_name(matrix_dtype) + " (expected f32 or bf16)");
  if (world < 1 || rank < 0 || rank >= world)
    return invalid_argument("load_glm5_weights: rank " + std::to_string(rank) + " of " + std::to_string(world));
  if (cfg.linear_num_heads < world || cfg.num_attention_heads < world)
    return invalid_argument("tensor parallelism: more ranks than attention heads");
  const Loader ld(source, cfg, rank, world, matrix_dtype, dense_quant);
  const int64_t h = cfg.hidden_size, v = cfg.vocab_size;
  const bool with_mtp = cfg.num_nextn_predict_layers > 0;
  const int n = cfg.num_hidden_layers + (with_mtp ? 1 : 0);
  // Layers (the MTP block last) on worker threads and this one; each result goes to its
  // slot, so the weights do not depend on which thread built what. An error stops the
  // handing out of layers; every lower layer was handed out before, so the first error
  // in layer order is the one the sequential load would report.
  std::vector<std::optional<LayerWeights>> built(static_cast<size_t>(n));
  std::vector<Status> errors(static_cast<size_t>(n));
  std::atomic<int> next{0};
  std::atomic<bool> failed{false};
  auto guarded = [](const auto& fn) -> Status {
    try {
      return fn();
    } catch (const StatusError& e) {
      return e.status();
    } catch (const std::exception& e) {
      return internal_error(std::string("loading weights: ") + e.what());
    }
  };
  auto work = [&] {
    for (int i = 0; !failed.load() && (i = next.fetch_add(1)) < n;) {
      errors[i] = guarded([&]() -> Status {
        TF_ASSIGN_OR_RETURN(LayerWeights lw, ld.layer(i, i == cfg.num_hidden_layers));
        built[i] = std::move(lw);
        return Status::ok();
      });
      if (!errors[i].is_ok()) failed = true;
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < load_threads(n); ++t) threads.emplace_back(work);
  Glm5Weights w;
  const Status top = guarded([&]() -> Status {
    TF_ASSIGN_OR_RETURN(Tensor embed, ld.native("model.language_model.embed_tokens.weight", {v, h}));
    TF_ASSIGN_OR_RETURN(w.norm, ld.get("model.language_model.norm.weight", {h}));
    w.vocab = shard_range(v, rank, world);
    Tensor head_rows;
    std::string head_name = "lm_head.weight";
    if (ld.has("lm_head.weight") || !cfg.tie_word_embeddings) {
      TF_ASSIGN_OR_RETURN(Tensor head, ld.native("lm_head.weight", {v, h}));
      head_rows = rows(head, w.vocab.begin, w.vocab.end);
    } else {
      head_rows = rows(embed, w.vocab.begin, w.vocab.end);
      head_name = "model.language_model.embed_tokens.weight (the tied lm_head)";
    }
    TF_ASSIGN_OR_RETURN(w.lm_head, ld.qmat_as(head_rows, head_quant, head_name));
    w.embed = ld.mat(embed);
    if (!with_mtp) return Status::ok();
    const std::string p = "model.language_model.layers." + std::to_string(cfg.num_hidden_layers) + ".";
    MtpWeights m;
    TF_ASSIGN_OR_RETURN(m.enorm, ld.get(p + "enorm.weight", {h}));
    TF_ASSIGN_OR_RETURN(m.hnorm, ld.get(p + "hnorm.weight", {h}));
    TF_ASSIGN_OR_RETURN(m.shared_head_norm, ld.get(p + "shared_head.norm.weight", {h}));
    TF_ASSIGN_OR_RETURN(Tensor eh, ld.native(p + "eh_proj.weight", {h, 2 * h}));
    TF_ASSIGN_OR_RETURN(m.eh_proj, ld.qmat(eh, p + "eh_proj.weight"));
    if (draft_head_quant != MatrixFormat::kDense && draft_head_quant != head_quant) {
      TF_ASSIGN_OR_RETURN(m.draft_head, ld.qmat_as(head_rows, draft_head_quant, head_name + " (the MTP drafts' head)"));
    }
    w.mtp = std::move(m);
    return Status::ok();
  });
  if (!top.is_ok()) failed = true;
  work();
  for (std::thread& t : threads) t.join();
  TF_RETURN_IF_ERROR(top);
  for (const Status& st : errors) TF_RETURN_IF_ERROR(st);
  for (int i = 0; i < cfg.num_hidden_layers; ++i) w.layers.push_back(std::move(*built[i]));
  if (with_mtp) w.mtp->block = std::move(*built[cfg.num_hidden_layers]);
  return w;
}

}  // namespace tf
