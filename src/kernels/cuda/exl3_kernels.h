// Host entry points of the CUDA EXL3 kernels (exl3_gemv.cu, exl3_moe.cu), called by
// CudaOps. Weights must already be on the context's GPU (upload_exl3_experts, or the
// caller's own copies); activations are packed f32 device tensors.
#pragma once

#include "core/tensor.h"
#include "kernels/api/exl3_weight.h"
#include "kernels/cuda/cuda_context.h"

namespace tf::cuda {

// W_hat f16 [k, n] on the device (the decode alone; for tests and prefill).
Tensor exl3_decode_w_hat(CudaContext& ctx, const Exl3Weight& w);

// out [T, n_out] = x [T, k_in] · W (Ops::exl3_matmul's contract). T <= 8 rows per
// GEMV pass; larger T run in passes of 64 rows (same per-row arithmetic).
void exl3_matmul(CudaContext& ctx, Tensor& out, const Tensor& x, const Exl3Weight& w);

// GEMV variants (benchmarks and A/B checks; the default is kExl3GemvAuto, or legacy when
// TF_EXL3_GEMV=legacy): auto = the fused one-launch kernel up to 8 rows on large weights
// (>= 65536 tiles), else the three-launch path; legacy = the three-launch path for every
// row count; fused = the fused kernel up to 8 rows whatever the size; load-only /
// decode-only = the fused kernel with only its trellis streaming / only its decode + MMAs
// (K = 4 mcg only; results are garbage: for timing the parts alone). All but the last two
// give the same bits.
enum Exl3GemvVariant : int {
  kExl3GemvAuto = 0,
  kExl3GemvLegacy = 1,
  kExl3GemvLoadOnly = 2,
  kExl3GemvDecodeOnly = 3,
  kExl3GemvFused = 4
};
void exl3_set_gemv_variant(int variant);
// Programmatic dependent launch: -1 = defaults (off for the fused GEMV, on for the grouped
// MoE; TF_EXL3_PDL=0/1 overrides both at start), 0 = off, 1 = on for both.
void exl3_set_pdl(int mode);
// Fused GEMV launches the device refused so far (each fell back to the three-launch path).
int64_t exl3_fused_gemv_refusals();

// Body of moe_experts_exl3 (benchmarks and A/B checks; default kExl3MoeAuto, or grouped
// when TF_EXL3_MOE=grouped): auto = the flat three-launch body up to 8 tokens
// (exl3_moe_flat.cuh), the grouped six-launch body beyond; grouped = always grouped;
// flat = flat up to 64 pairs (tokens * k); flat load-only / decode-only = the flat body
// with only its trellis streaming / only its decode + MMAs (K = 4 mcg only; results are
// garbage: for timing the parts alone); flat fixed-only = the flat body without any
// trellis streaming (its fixed costs; garbage too); flat old-loop = the flat body on the
// previous streaming loop (same bits, for A/B timing); flat cols1 / cols2 / cols4 = the
// flat body with each warp streaming 1 / 2 / 4 output column tiles back to back (fewer,
// longer blocks; same bits; auto and flat take 4); flat no-reg-cap = the flat kernels compiled without the register cap that
// buys a fourth block per SM (same bits; the default is uncapped since run6s10, so the same kernel). Load-only, decode-only and fixed-only do not give
// the same bits; the others do.
enum Exl3MoeVariant : int {
  kExl3MoeAuto = 0,
  kExl3MoeGrouped = 1,
  kExl3MoeFlat = 2,
  kExl3MoeFlatLoadOnly = 3,
  kExl3MoeFlatDecodeOnly = 4,
  kExl3MoeFlatFixedOnly = 5,
  kExl3MoeFlatOldLoop = 6,
  kExl3MoeFlatCols2 = 7,
  kExl3MoeFlatCols4 = 8,
  kExl3MoeFlatNoRegCap = 9,
  kExl3MoeFlatCols1 = 10,
  // Issue-8 levers (exl3_stream.cuh): fma-pack = the decode's pair pack on the FMA pipe
  // (decode_pair_fma), stage8 = ring stages of 8 tiles, dup = K = 4 states extracted doubled
  // (lane_states_k4_dup); the -decode-only / -load-only probes as above. FmaPack, Stage8,
  // FmaStage8, FmaDup and FmaDupStage8 give the same bits as the others.
  kExl3MoeFlatFmaPack = 11,
  kExl3MoeFlatStage8 = 12,
  kExl3MoeFlatFmaStage8 = 13,
  kExl3MoeFlatFmaDecodeOnly = 14,
  kExl3MoeFlatFmaStage8DecodeOnly = 15,
  kExl3MoeFlatStage8LoadOnly = 16,
  kExl3MoeFlatFmaDup = 17,
  kExl3MoeFlatFmaDupStage8 = 18,
  kExl3MoeFlatFmaDupStage8DecodeOnly = 19,
  // The flat body without the levers the default now uses (exl3_moe.cu kFlatDefaultFlags;
  // TF_EXL3_MOE=flat-prev at start): the session-7 loop, same bits.
  kExl3MoeFlatPrev = 20,
  // Ring stages of 16 tiles x 3 (exl3_stream.cuh kStage16; same bits; the session-8/9 default,
  // TF_EXL3_MOE=flat-stage16 at start) and its decode-only probe.
  kExl3MoeFlatStage16 = 21,
  kExl3MoeFlatStage16DecodeOnly = 22,
  // Session 10 (exl3_stream.cuh, 16-tile stages, same bits): ilp2 / ilp4 = each warp's columns
  // 2 / 4 at a time (kInterleave2 / 4: their k-tiles decoded side by side), wh = K = 4 hashes from
  // the stream words (kWordHash; in the default since run4s10, TF_EXL3_MOE=flat-wordhash = the
  // default with the 64-register cap it had before run6s10), fma = the FMA-pipe pack
  // (kFmaPack); ilp2-cols2 = ilp2 with 2 columns per warp (2x the blocks); the decode-only probe
  // as above; prefetch = the default + the down and combine kernels' finish scales loaded before
  // their programmatic-launch wait (kPrefetchScales), and the fixed-only probe with it.
  kExl3MoeFlatIlp2 = 23,
  kExl3MoeFlatIlp4 = 24,
  kExl3MoeFlatWordHash = 25,
  kExl3MoeFlatIlp2WordHash = 26,
  kExl3MoeFlatIlp2WordHashFma = 27,
  kExl3MoeFlatIlp4WordHashFma = 28,
  kExl3MoeFlatIlp2Cols2 = 29,
  kExl3MoeFlatIlp2WordHashDecodeOnly = 30,
  kExl3MoeFlatWordHashPrefetch = 31,
  kExl3MoeFlatFixedOnlyPrefetch = 32,
  kExl3MoeFlatIlp4WordHash = 33,
  // ilp2 + word hashes without the 64-register cap (kUncapped, which the default has since
  // run6s10; the other session-10 variants keep the cap, flat-wordhash = the default with it).
  kExl3MoeFlatIlp2WordHashUncapped = 34
};
void exl3_set_moe_variant(int variant);

// Path of calls of more than 64 tokens (prefill; TF_EXL3_PREFILL=pieces|cublas|experts at start):
// wide (the default) = pieces of 1,024 tokens through the wide GEMV (exl3_moe_wide.cuh: each
// tile decoded once per 128 of an expert's rows; x precision: exl3_set_wide_x); pieces = the
// decode-sized grouped body in pieces of 512 tokens (a token's bits equal its decode-sized
// result, as the wide path's with TF_EXL3_WIDE_X=split); cublas = W_hat
// decoded once per call for cuBLAS (exl3_moe_prefill.h; the pieces while a graph is captured
// or where cuBLAS refuses; a token's sums then depend on its expert's rows in the call);
// experts = Ops' per-expert default (exl3_moe_experts returns false).
enum Exl3PrefillPath : int {
  kExl3PrefillPieces = 0,
  kExl3PrefillCublas = 1,
  kExl3PrefillExperts = 2,
  kExl3PrefillWide = 3
};
void exl3_set_prefill_path(int path);

// x of the wide GEMV's rows (TF_EXL3_WIDE_X=half|split at start): half (the default) = x
// rounded to fp16, one MMA per tile and row tile (a row's sums depend on its x alone, as
// every prefill row's: the dense projections take bf16 x past exact_rows); split = the
// hi/lo fp16 pair of the decode-sized kernels, so a token's bits equal its decode-sized
// result whatever call it is in. -1: back to the environment's choice.
enum Exl3WideX : int { kExl3WideXHalf = 0, kExl3WideXSplit = 1 };
void exl3_set_wide_x(int precision);

// The routed EXL3 experts of a MoE layer (Ops::moe_experts_exl3's contract): up to 64
// tokens grouped on the device without a host sync (graph-capturable); more (prefill)
// by the prefill path above. False (nothing done) only for the experts path.
bool exl3_moe_experts(CudaContext& ctx, Tensor& out, const Tensor& x, const Tensor& ids, const Tensor& weights,
                      const Exl3ExpertTable& experts, float swiglu_limit);

// Copies every expert tensor of `experts` to the GPU and builds the device pointer
// table the grouped kernels index (kept in experts.backend_state).
Status exl3_upload_experts(CudaContext& ctx, Exl3ExpertTable& experts);

}  // namespace tf::cuda
