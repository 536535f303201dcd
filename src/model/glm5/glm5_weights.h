// GLM-5.3-Flash weights as the model uses them: on the backend's device (f32, projection matrices f32 or bf16),
// already cut to this rank's tensor-parallel shard.
//
// Sharding (rank r of N; uneven splits give the first ranks one more unit):
//   KDA heads, MLA heads, dense and expert intermediate channels, vocab (lm_head);
//   everything per-token and small (mHC, norms, router, indexer, MLA/KDA
//   down-projections) is replicated. Each sublayer ends in one all-reduce.
// Fused layouts built on load: gate_up [2*I_local, H] (this rank's gate rows,
// then its up rows), MLA W_UK^T per head [H_l, R, D] and W_UV [H_l, Dv, R].
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "kernels/api/ops.h"
#include "model/config.h"
#include "model/exl3_weights.h"
#include "model/weight_source.h"

namespace tf {

// [begin, end) of `n` units owned by `rank` of `world`.
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
ShardRange shard_range(int64_t n, int rank, int world);

struct HyperConnectionWeights {
  Tensor fn;     // [(2+M)M, M*H]
  Tensor base;   // [(2+M)M]
  Tensor scale;  // [3]
};

struct MlpWeights {
  Matrix gate_up;  // [2*I_local, H]  (routed experts: always dense)
  Matrix down;     // [H, I_local]
  // A routed expert stored EXL3 (gate_up and down are then null): gate, up and down
  // run by Ops::exl3_matmul; with tensor parallelism gate/up are cut by output and
  // down by input channels at this rank's [begin, end) of the intermediate, which
  // must lie on 128-channel boundaries. exl3_intermediate = end - begin (unpadded).
  std::shared_ptr<const Exl3Expert> exl3;
  int64_t exl3_intermediate = 0;
};

struct MoeWeights {
  Tensor router;  // [E, H]
  Tensor bias;    // [E]
  // Routed experts stacked for Ops::moe_experts: [E, 2*I_local, H] (each expert's
  // gate rows, then its up rows) and [E, H, I_local]. Null when the checkpoint stores
  // experts EXL3: `experts` then holds one MlpWeights per expert instead (empty otherwise).
  Tensor experts_gate_up;
  Tensor experts_down;
  std::vector<MlpWeights> experts;
  // Every routed expert EXL3 (one shape and codebook per projection): the same experts
  // as one table for Ops::moe_experts_exl3 (uploaded by Ops::upload_exl3_experts).
  std::shared_ptr<Exl3ExpertTable> exl3_experts;
  // Every routed expert stored FP8 in 128x128 blocks (the official release): their own
  // bytes as one stack for Ops::moe_experts_fp8 (empty otherwise; the other fields then
  // stay empty too).
  Fp8ExpertStack fp8_experts;
  MlpWeights shared;
};

struct KdaWeights {
  int64_t heads = 0;  // local
  Matrix q_proj, k_proj, v_proj;        // [H_l*Dk, H]
  Tensor q_conv, k_conv, v_conv;        // [H_l*Dk, K]
  Tensor qkv_conv;                      // [3, H_l*Dk, K]: the three stacked (decode rows; made at load)
  Tensor f_a, f_b;                      // [Dk, H], [H_l*Dk, Dk]
  Tensor dt_bias, a_log;                // [H_l*Dk], [H_l]
  Tensor b_proj;                        // [H_l, H]
  Tensor g_a, g_b;                      // [Dk, H], [H_l*Dk, Dk]
  Tensor o_norm;                        // [Dv]
  Matrix o_proj;                        // [H, H_l*Dv]
};

struct IndexerWeights {
  Tensor wq_b;          // [Hi*Di, q_lora]
  Tensor wk;            // [Di, H]
  Tensor k_norm_w, k_norm_b;
  Tensor weights_proj;  // [Hi, H]
  Tensor ape;           // [kp, Di]
  Tensor compress_gate; // [Di, H]
};

struct MlaWeights {
  int64_t heads = 0;  // local
  Matrix q_a, q_b;            // [q_lora, H], [H_l*Dqk, q_lora]
  Tensor q_a_norm;            // [q_lora]
  Matrix kv_a;                // [R, H]
  Tensor kv_a_norm;           // [R]
  Tensor w_uk_t;              // [H_l, R, Dnope]
  Tensor w_uv;                // [H_l, Dv, R]
  Matrix o_proj;              // [H, H_l*Dv]
  std::optional<IndexerWeights> indexer;
};

struct LayerWeights {
  AttentionKind attention = AttentionKind::kLinear;
  MlpKind mlp = MlpKind::kDense;
  Tensor input_norm, post_norm;
  HyperConnectionWeights attn_hc, ffn_hc;  // absent (null) in the MTP layer
  KdaWeights kda;
  MlaWeights mla;
  MlpWeights dense;
  MoeWeights moe;
};

// The MTP (NextN) layer stored after the decoder layers.
struct MtpWeights {
  Tensor enorm, hnorm, shared_head_norm;  // [H]
  Matrix eh_proj;                         // [H, 2H]
  LayerWeights block;                     // MLA + indexer attention and MoE, no mHC
  // The head the drafts read: lm_head re-quantized for them (draft_head_quant), or null
  // (lm_head itself). A draft needs only its greedy token, so a q4 head (~4x fewer bytes
  // than BF16's 1.27 GB) makes each draft pass much cheaper at a small cost in agreement.
  Matrix draft_head;
};

struct Glm5Weights {
  Tensor embed;    // [V, H] replicated
  Tensor norm;     // [H]
  Matrix lm_head;  // [V_local, H]; dense, or re-quantized with LM_HEAD=q4 / fp8
  ShardRange vocab;
  std::vector<LayerWeights> layers;
  std::optional<MtpWeights> mtp;
};

// Loads this rank's shard of every tensor through `source` as host tensors; errors
// name the tensor. Projection matrices (everything Ops::matmul, head_matmul and
// embedding take as the weight, lm_head and the embedding included) come in
// `matrix_dtype` (f32 or bf16); norms, biases, convolutions, the router and mHC stay f32.
// With `dense_quant` (kQ4 / kFp8Block, DENSE=q4 / fp8) the large dense matrices are
// re-quantized as they load (model/dense_quant.h, multithreaded): KDA q/k/v/o, MLA
// q_a/q_b/kv_a/o, the dense MLPs, the shared experts and the MTP eh_proj (the Matrix
// fields above). The small low-rank KDA gates (f_a/f_b, g_a/g_b, b_proj), the indexer,
// W_UK/W_UV (head_matmul), the router and the embedding stay `matrix_dtype`. lm_head
// has its own format, `head_quant` (LM_HEAD=q4 / fp8; kDense keeps `matrix_dtype`): it is
// ~1.27 GB in BF16, the largest matrix a decode step reads, but the reference deployment
// keeps it unquantized (head_bits 16), so quantizing it is the user's choice.
Expected<Glm5Weights> load_glm5_weights(const WeightSource& source, const Glm5TextConfig& cfg, int rank, int world,
                                        DType matrix_dtype = DType::kF32,
                                        MatrixFormat dense_quant = MatrixFormat::kDense,
                                        MatrixFormat head_quant = MatrixFormat::kDense,
                                        MatrixFormat draft_head_quant = MatrixFormat::kDense);

}  // namespace tf
