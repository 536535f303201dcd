#!/usr/bin/env bash
# Run ON the GPU machine from the repo root, after scripts/device/pack.sh here and a
# device call with carry: [".gpurun"]. Runs the GPU tests; logs and gtest JSON go to $OUT.
# TF_GPU_ONLY="kernels parity kdarows kdachain decoderows quant ring sampling model graphs nccl bench prefill prefillk roofline serve moe" (any subset) runs only those parts;
# "smallsmem" (the test binaries again with a DGX Spark's 99 KB of shared memory per block), "benchgpu" (scripts/device/bench_gpu.sh, minutes), "profmodel", "trace", "decodelayers", "exl3model", "prefillmoe", "spec", "reuse" and "tp" (scripts/device/tp_gpu.sh, 2+ GPUs) run only when named.
set -uo pipefail
: "${OUT:?run this on the device machine, where OUT is set}"
export LD_LIBRARY_PATH="$PWD/.gpurun/lib:${LD_LIBRARY_PATH:-}"
# cuBLAS is not carried: take the GPU machine's (its CUDA toolkit, else the pip wheel).
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
         $(python3 -c 'import nvidia, os; [print(os.path.join(p, s, "lib")) for p in nvidia.__path__ for s in os.listdir(p)]' 2>/dev/null); do
  ls "$d"/libcublasLt.so.* >/dev/null 2>&1 && { export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"; break; }
done
export TF_TEST_DATA_DIR="$PWD/tests/data"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
rc=0
want() { [[ -z "${TF_GPU_ONLY:-}" || " $TF_GPU_ONLY " == *" $1 "* ]]; }
if want kernels; then
  .gpurun/cuda_kernel_tests --gtest_output="json:$OUT/cuda_kernel_tests.json" 2>&1 | tee "$OUT/cuda_kernel_tests.log" | tail -n 20
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
# Every op on CPU and CUDA (kernels/cuda vs kernels/cpu); "[parity]" lines give each op's error.
if want parity; then
  .gpurun/cuda_ops_parity_tests --gtest_output="json:$OUT/cuda_ops_parity_tests.json" > "$OUT/cuda_ops_parity_tests.log" 2>&1
  [[ $? -eq 0 ]] || rc=1
  grep -E '^\[  (FAILED|PASSED) |^\[==========\]' "$OUT/cuda_ops_parity_tests.log" | tail -n 30
fi
# KDA decode rows over state addresses (capture-safe; the graph step's KDA core): bit-equal to the
# one-sequence ops, padded rows inert, and the recurrence's time at 1/16/64 rows ("[kda-rows]" lines).
if want kdarows && [[ -x .gpurun/cuda_ops_parity_tests ]]; then
  timeout 120 .gpurun/cuda_ops_parity_tests --gtest_filter='CudaKdaRows.*:CudaRowsOps.*' > "$OUT/kda_rows_tests.log" 2>&1 || rc=1
  grep -E '^\[kda-rows\]|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure' "$OUT/kda_rows_tests.log" | head -n 30
fi
# The model on CUDA vs the CPU backend and the transformers fixtures; "[cuda-parity]" lines give the deviations
# (log only: $OUT brings back at most 8 files).
if want model && [[ -x .gpurun/glm5_cuda_tests ]]; then
  timeout 300 .gpurun/glm5_cuda_tests > "$OUT/glm5_cuda_tests.log" 2>&1
  [[ $? -eq 0 ]] || rc=1
  grep -E '^\[cuda-(parity|timing)\]|^\[  FAILED |^\[==========\]|^\[  PASSED ' "$OUT/glm5_cuda_tests.log" | tail -n 60
fi
# Sampling on the device (Ops::sample_rows) vs the CPU op and the host sampler, and device vs
# download+host timings at B=1/64 ("[sampling]" / "[sampling-bench]" lines).
if want sampling; then
  timeout 120 .gpurun/cuda_ops_parity_tests --gtest_filter='CudaSampleRows.*' > "$OUT/cuda_sample_rows_tests.log" 2>&1
  [[ $? -eq 0 ]] || rc=1
  grep -E '^\[sampling|^\[  FAILED |^\[==========\]|^\[  PASSED ' "$OUT/cuda_sample_rows_tests.log" | tail -n 30
  # The engine on CUDA: device vs host sampling give the same replies (tensorfold serve, demo checkpoint).
  if [[ -x .gpurun/tensorfold ]]; then
    timeout 150 scripts/device/sampling_serve_check.sh > "$OUT/sampling_serve_check.log" 2>&1 || rc=1
    grep -E '^\[sampling' "$OUT/sampling_serve_check.log" | tail -n 12
  fi
fi
# Batched decode-row MLA + DSA indexer ops (issue #6): CUDA vs CPU and vs the one-sequence ops
# ("[parity] ..._rows" lines), then the model on CUDA (decode now goes through them).
if want decoderows; then
  timeout 120 .gpurun/cuda_ops_parity_tests --gtest_filter='CudaDecodeRows.*' > "$OUT/cuda_decode_rows_tests.log" 2>&1
  [[ $? -eq 0 ]] || rc=1
  grep -E '^\[parity\]|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure|Expected|Which is' "$OUT/cuda_decode_rows_tests.log" | head -n 80
fi
# Split-token MLA decode attention + DSA indexer rows (issue #6): the decode-rows parity tests, then
# cuda_mla_decode_bench ("mla-decode ..." / "indexer-rows ..." lines: us per call, GB/s, TFLOP/s).
if want mladecode; then
  timeout 150 .gpurun/cuda_ops_parity_tests --gtest_filter='CudaDecodeRows.*' > "$OUT/mla_decode_tests.log" 2>&1
  [[ $? -eq 0 ]] || rc=1
  grep -E '^\[parity\]|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure|Expected|Which is' "$OUT/mla_decode_tests.log" | head -n 60
  if [[ -x .gpurun/cuda_mla_decode_bench ]]; then
    timeout 120 .gpurun/cuda_mla_decode_bench > "$OUT/mla_decode_bench.log" 2>&1 || rc=1
    grep -E '^(mla-decode|indexer-rows|head-matmul)' "$OUT/mla_decode_bench.log" | head -n 40
  fi
  # The tensor-core split kernel is the default (session 9): the same tests and bench on the scalar one.
  echo "== TF_MLA_DECODE_MMA=0"
  TF_MLA_DECODE_MMA=0 timeout 150 .gpurun/cuda_ops_parity_tests --gtest_filter='CudaDecodeRows.*' \
    > "$OUT/mla_decode_mma_tests.log" 2>&1 || rc=1
  grep -E '^\[parity\]|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure|Expected|Which is' "$OUT/mla_decode_mma_tests.log" | head -n 40
  if [[ -x .gpurun/cuda_mla_decode_bench ]]; then
    TF_MLA_DECODE_MMA=0 timeout 120 .gpurun/cuda_mla_decode_bench > "$OUT/mla_decode_mma_bench.log" 2>&1 || rc=1
    grep -E '^mla-decode' "$OUT/mla_decode_mma_bench.log" | head -n 20
  fi
  # Per-kernel times of the three split launches (prep / split / combine) at 1 row.
  ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  if [[ -n "$ncu_bin" && -x .gpurun/cuda_mla_decode_bench ]]; then
    timeout 150 "$ncu_bin" --kernel-name regex:'prep|split|combine' --launch-count 12 --metrics gpu__time_duration.sum \
      .gpurun/cuda_mla_decode_bench > "$OUT/mla_decode_ncu.log" 2>&1
    grep -E 'prep_kernel|split|combine|gpu__time_duration' "$OUT/mla_decode_ncu.log" | head -n 30
  fi
fi
# Quantized dense matrices (fp8 block-scaled, q4): CUDA vs CPU parity, row independence, the
# FP8 tensor-core prefill (cuBLASLt block scales) per scale layout, and "[quant-bench]" lines:
# tensor-core GEMV us/call and % of HBM on the model's shapes at m=1/2/4/8/64, prefill TFLOP/s.
if want quant && [[ -x .gpurun/cuda_quant_tests ]]; then
  timeout 150 .gpurun/cuda_quant_tests > "$OUT/cuda_quant_tests.log" 2>&1
  [[ $? -eq 0 ]] || rc=1
  grep -E '^\[quant|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure|Which is' "$OUT/cuda_quant_tests.log" | tail -n 200
fi
# The q4 ring GEMV (the q4 decode default, quant_gemv_ring.h): CPU parity, bits independent of m / of the
# other segments / of the copy path and operand layout, then the "[quant-bench] ring" lines (graph-replayed,
# weights rotated through > 400 MB: the B-operand kernel, the session-9 ring and today's side by side).
if want ring && [[ -x .gpurun/cuda_quant_ring_tests ]]; then
  timeout 240 .gpurun/cuda_quant_ring_tests --gtest_filter='-*Bench:*ProfileOnce' > "$OUT/ring_tests.log" 2>&1 || rc=1
  grep -E '^\[quant\]|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure' "$OUT/ring_tests.log" | tail -n 30
  timeout 200 .gpurun/cuda_quant_ring_tests --gtest_filter='*Bench' > "$OUT/ring_bench.log" 2>&1 || rc=1
  grep -E '^\[quant-bench\]' "$OUT/ring_bench.log" | head -n 60
fi
# The KDA decode chain (q/k/v conv, then the recurrence launched behind it with PDL): same bits both ways and
# "[kda-chain]" us per call at 1 and 8 rows.
if want kdachain && [[ -x .gpurun/cuda_kda_chain_bench ]]; then
  timeout 60 .gpurun/cuda_kda_chain_bench > "$OUT/kda_chain_bench.log" 2>&1 || rc=1
  grep -E '^\[kda-chain\]|error' "$OUT/kda_chain_bench.log" | head -n 20
fi
# Our FP8 block-scaled tensor-core GEMM for prefill (fp8_block_gemm.h): exact-operand and CPU /
# dequant-path parity, and "[fp8gemm-bench]" TFLOP/s next to the bf16 dequant + cuBLAS path (< 60 s).
if want fp8gemm && [[ -x .gpurun/cuda_fp8_gemm_tests ]]; then
  timeout 90 .gpurun/cuda_fp8_gemm_tests > "$OUT/cuda_fp8_gemm_tests.log" 2>&1
  [[ $? -eq 0 ]] || rc=1
  grep -E '^\[fp8gemm|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure|Which is|Expected' "$OUT/cuda_fp8_gemm_tests.log" | tail -n 60
fi
# DENSE=q4 / fp8 vs bf16 on a synthetic checkpoint (full widths, 4 layers, 8 experts; ~2 min):
# KL divergence and top-1 agreement over a 256-token prefill. Only when named (TF_GPU_ONLY="quantreport").
if [[ " ${TF_GPU_ONLY:-} " == *" quantreport "* && -x .gpurun/tensorfold ]]; then
  synth="$(mktemp -d)/synth"
  timeout 120 .gpurun/tensorfold synth-checkpoint --out "$synth" --layers 4 --experts 8 > "$OUT/quant_report.log" 2>&1 || rc=1
  for d in q4 fp8; do
    timeout 150 .gpurun/tensorfold quant-report --model "$synth" --device cuda --dense "$d" --tokens 256 >> "$OUT/quant_report.log" 2>&1 || rc=1
  done
  grep -E '^quant-report|^  |error' "$OUT/quant_report.log" | tail -n 20
  rm -rf "$synth"
fi
# EXL3 on CUDA (issue #8): decode bit-exact vs CPU/exllamav3, GEMV + grouped MoE parity, then the
# GEMV bandwidth table and grouped-MoE timings beside the measured copy bandwidth.
if want exl3 && [[ -x .gpurun/exl3_cuda_tests ]]; then
  timeout 60 .gpurun/exl3_cuda_tests > "$OUT/exl3_cuda_tests.log" 2>&1 || rc=1
  grep -E '^\[exl3\]|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure|error' "$OUT/exl3_cuda_tests.log" | head -n 40
  if [[ -x .gpurun/exl3_cuda_bench ]]; then
    timeout 90 .gpurun/exl3_cuda_bench > "$OUT/exl3_cuda_bench.log" 2>&1 || rc=1
    grep -E '^(measured|exl3|device|\[exl3-bench\])' "$OUT/exl3_cuda_bench.log" | head -n 130
    # Instruction budget of the streaming loop per tile and the ALU bound it gives (cuobjdump).
    timeout 60 python3 scripts/device/exl3_sass_count.py .gpurun/exl3_cuda_bench 2>&1 | head -n 30
  fi
  # The K = 4 decode's own ceiling (tiles in shared memory) against 70% of HBM, and the codebook table.
  if [[ -x .gpurun/exl3_decode_rate_bench ]]; then
    timeout 60 .gpurun/exl3_decode_rate_bench > "$OUT/exl3_decode_rate_bench.log" 2>&1 || rc=1
    cat "$OUT/exl3_decode_rate_bench.log"
  fi
fi
# exllamav3's own K=4 GEMV beside ours on the same shapes (issue #8); needs carry [".gpurun", ".exl3ref"]
# (.exl3ref: exllamav3 headers, git-ignored). Only when named: TF_GPU_ONLY="exl3sbs".
if [[ " ${TF_GPU_ONLY:-} " == *" exl3sbs "* ]]; then
  timeout 330 scripts/device/exl3_side_by_side.sh || rc=1
fi
# Batch-1 decode of a synthetic full-geometry checkpoint with EXL3 experts (K4 mcg, $EXL3_EXPERTS = 8
# routed experts, in /dev/shm; ~25 GB); only when named: TF_GPU_ONLY="exl3model".
if [[ " ${TF_GPU_ONLY:-} " == *" exl3model "* && -x .gpurun/tensorfold ]]; then
  ck=/dev/shm/tf-exl3-full; rm -rf "$ck"
  { timeout 240 .gpurun/tensorfold synth-checkpoint --out "$ck" --preset full --experts "${EXL3_EXPERTS:-8}" --exl3 --bits 4 --codebook mcg &&
    TF_CACHE_DIR="$(mktemp -d)" timeout 240 .gpurun/tensorfold bench --offline --device cuda --model-dir "$ck" --probe \
      --scenario decode-1 --output-tokens 32 --timeout 200; } > "$OUT/exl3_model_bench.log" 2>&1 || rc=1
  grep -E '^(wrote|== scenario|bench: (probe|roofline)|  figure|  decode|error|scenario .* FAILED)' "$OUT/exl3_model_bench.log" | head -n 30
  tail -n 5 "$OUT/exl3_model_bench.log"
  rm -rf "$ck"
fi
# Where an EXL3 prompt's prefill goes (scripts/device/prefill_moe.sh; PF_RUNS picks the A/B runs).
# Only when named: TF_GPU_ONLY="prefillmoe".
if [[ " ${TF_GPU_ONLY:-} " == *" prefillmoe "* && -x .gpurun/tensorfold ]]; then
  timeout 560 scripts/device/prefill_moe.sh || rc=1
fi
# Speculative decoding on the exl3model configuration (bench/spec_decode_bench.cc): serial decoding
# vs verify steps of right and wrong drafts (k = 1, 3, 7), side by side; every reply must equal the
# serial one. Only when named: TF_GPU_ONLY="spec".
if [[ " ${TF_GPU_ONLY:-} " == *" spec "* && -x .gpurun/spec_decode_bench ]]; then
  ck=/dev/shm/tf-exl3-spec; rm -rf "$ck"
  { timeout 240 .gpurun/tensorfold synth-checkpoint --out "$ck" --preset full --experts "${EXL3_EXPERTS:-8}" --exl3 --bits 4 --codebook mcg &&
    TF_CACHE_DIR="$(mktemp -d)" timeout 300 .gpurun/spec_decode_bench --model "$ck" --device cuda \
      --tokens "${SPEC_TOKENS:-128}" --prompt-tokens 256; } > "$OUT/spec_bench.log" 2>&1 || rc=1
  grep -E '^(\[spec\]|spec_decode_bench|error)' "$OUT/spec_bench.log"
  tail -n 3 "$OUT/spec_bench.log"
  rm -rf "$ck"
fi
# Prompt reuse on the synthetic full geometry (EXL3 experts + DENSE=q4): one prompt of REUSE_TOKENS
# (64k) sent three times; the first TTFT runs it all, the others resume from its kept state.
# Only when named: TF_GPU_ONLY="reuse".
if [[ " ${TF_GPU_ONLY:-} " == *" reuse "* && -x .gpurun/tensorfold ]]; then
  ck=/dev/shm/tf-exl3-reuse; rm -rf "$ck"
  { timeout 240 .gpurun/tensorfold synth-checkpoint --out "$ck" --preset full --experts "${EXL3_EXPERTS:-8}" --exl3 --bits 4 --codebook mcg &&
    TF_CACHE_DIR="$(mktemp -d)" timeout 330 .gpurun/tensorfold bench --offline --device cuda --model-dir "$ck" --probe \
      --scenario "reuse-${REUSE_TOKENS:-64k}" --timeout 300 --json "$OUT/reuse_bench.json"; } > "$OUT/reuse_bench.log" 2>&1 || rc=1
  grep -E '^(== scenario|bench: (probe|roofline)|  TTFT|  prefill|error|scenario .* FAILED)' "$OUT/reuse_bench.log" | head -n 30
  tail -n 25 "$OUT/reuse_bench.log"
  rm -rf "$ck"
fi
# What programmatic dependent launch saves per kernel boundary in a graph (chains of small kernels).
if want pdl && [[ -x .gpurun/cuda_pdl_bench ]]; then
  timeout 60 .gpurun/cuda_pdl_bench > "$OUT/cuda_pdl_bench.log" 2>&1 || rc=1
  grep -E '^\[pdl\]' "$OUT/cuda_pdl_bench.log"
fi
# Where a batch-1 decode token goes on the exl3model configuration (EXL3 experts + DENSE=q4, full
# geometry): the op profiler (TF_PROFILE_OPS=1) eager, then with graphs (the GPU has no Nsight Systems,
# so per-kernel in-graph times come from the eager run). Only when named: TF_GPU_ONLY="profmodel".
if [[ " ${TF_GPU_ONLY:-} " == *" profmodel "* && -x .gpurun/tensorfold ]]; then
  ck=/dev/shm/tf-exl3-prof; rm -rf "$ck"
  if timeout 240 .gpurun/tensorfold synth-checkpoint --out "$ck" --preset full --layers "${PROF_LAYERS:-12}" \
      --experts "${EXL3_EXPERTS:-8}" --exl3 --bits 4 --codebook mcg --mtp-layers 0 > "$OUT/prof_synth.log" 2>&1; then
    for g in 0 1; do
      echo "== op profile, exl3 + q4 synthetic (${PROF_LAYERS:-12} layers), decode-1, TF_GRAPHS=$g"
      TF_GRAPHS=$g TF_PROFILE_OPS=1 TF_PROFILE_OPS_EVERY=40 TF_CACHE_DIR="$(mktemp -d)" timeout 200 \
        .gpurun/tensorfold bench --offline --device cuda --model-dir "$ck" --scenario decode-1 --output-tokens 48 \
        --timeout 150 > "$OUT/prof_model_$g.log" 2>&1 || rc=1
      grep -E '^\[op-profile\]|tok/s|error' "$OUT/prof_model_$g.log" | tail -n 45
    done
  else
    echo "profmodel: synth-checkpoint failed (see prof_synth.log)"; rc=1
  fi
  rm -rf "$ck"
fi
# Where a decode step's GPU time goes, kernel by kernel, graph-replayed kernels included (session 11): batch-1
# decode on the exl3model configuration (45 layers) under the CUPTI tracer (bench/cupti_kernel_trace.cc),
# summed per step by scripts/device/kernel_timeline.py (busy vs idle, each kernel's own time and the gap
# before it). Only when named: TF_GPU_ONLY="trace" (TRACE_LAYERS, TRACE_SCENARIO override).
if [[ " ${TF_GPU_ONLY:-} " == *" trace "* && -x .gpurun/tensorfold && -f .gpurun/libtf_cupti_trace.so ]]; then
  ck=/dev/shm/tf-exl3-trace; rm -rf "$ck"
  if timeout 240 .gpurun/tensorfold synth-checkpoint --out "$ck" --preset full --layers "${TRACE_LAYERS:-45}" \
      --experts "${EXL3_EXPERTS:-8}" --exl3 --bits 4 --codebook mcg --mtp-layers 0 > "$OUT/trace_synth.log" 2>&1; then
    LD_LIBRARY_PATH="$PWD/.gpurun/cupti:$LD_LIBRARY_PATH" CUDA_INJECTION64_PATH="$PWD/.gpurun/libtf_cupti_trace.so" \
      TF_KERNEL_TRACE="$OUT/kernel_trace.csv" TF_CACHE_DIR="$(mktemp -d)" timeout 200 .gpurun/tensorfold bench --offline \
      --device cuda --model-dir "$ck" --scenario "${TRACE_SCENARIO:-decode-1}" --output-tokens 48 --timeout 150 \
      > "$OUT/trace_bench.log" 2>&1 || rc=1
    python3 scripts/device/kernel_timeline.py "$OUT/kernel_trace.csv" | tee "$OUT/kernel_timeline.txt" | head -n 30
    xz -T0 "$OUT/kernel_trace.csv" 2>/dev/null || true
  else
    echo "trace: synth-checkpoint failed (see trace_synth.log)"; rc=1
  fi
  rm -rf "$ck"
fi
# Where decode time scales (session 10): decode-1 tok/s on the exl3model configuration at 4, 12, 24 and 45
# layers (no MTP layer), graphs and eager; the slope is the per-layer cost, the intercept the per-token one
# (lm_head, sampling, host). Only when named: TF_GPU_ONLY="decodelayers" (DECODE_LAYERS overrides the list).
if [[ " ${TF_GPU_ONLY:-} " == *" decodelayers "* && -x .gpurun/tensorfold ]]; then
  for L in ${DECODE_LAYERS:-4 12 24 45}; do
    ck=/dev/shm/tf-exl3-layers; rm -rf "$ck"
    if timeout 300 .gpurun/tensorfold synth-checkpoint --out "$ck" --preset full --layers "$L" --experts "${EXL3_EXPERTS:-8}" \
        --exl3 --bits 4 --codebook mcg --mtp-layers 0 >> "$OUT/decode_layers.log" 2>&1; then
      for g in 1 0; do
        printf 'layers %s graphs %s: ' "$L" "$g"
        TF_GRAPHS=$g TF_CACHE_DIR="$(mktemp -d)" timeout 200 .gpurun/tensorfold bench --offline --device cuda --model-dir "$ck" \
          --scenario decode-1 --output-tokens 48 --timeout 150 2>&1 | tee -a "$OUT/decode_layers.log" |
          grep -E 'decode tok/s per request' || { echo "bench failed"; rc=1; }
      done
    else
      echo "decodelayers: synth-checkpoint --layers $L failed"; rc=1
    fi
    rm -rf "$ck"
  done
fi
# Weight load speed (s6_load): full-geometry synthetic checkpoints (8 experts) in /dev/shm, loaded by
# `bench --offline --device cuda` (decode-1, 8 tokens): BF16 with --dense bf16 and the default (q4,
# re-quantized at load), then EXL3 experts (K4 mcg); the "loaded ... GB/s" lines are the figures (3+ GB/s
# wanted). A failed bench does not stop the next load. Only when named: TF_GPU_ONLY="load".
if [[ " ${TF_GPU_ONLY:-} " == *" load "* && -x .gpurun/tensorfold ]]; then
  ck=/dev/shm/tf-load-full; rm -rf "$ck"
  ( fail=0
    load_bench() {
      echo "== load $*"
      TF_CACHE_DIR="$(mktemp -d)" timeout 150 .gpurun/tensorfold bench --offline --device cuda --model-dir "$ck" \
        --scenario decode-1 --output-tokens 8 --timeout 100 "$@" || fail=1
    }
    timeout 150 .gpurun/tensorfold synth-checkpoint --out "$ck" --preset full --experts 8 || exit 1
    load_bench --dense bf16
    load_bench --dense q4
    rm -rf "$ck"
    timeout 150 .gpurun/tensorfold synth-checkpoint --out "$ck" --preset full --experts 8 --exl3 --bits 4 \
      --codebook mcg || exit 1
    load_bench
    exit $fail ) > "$OUT/load.log" 2>&1 || rc=1
  grep -E '^(wrote|== |error)|loaded .* tensors|decode tok/s per request|FAILED' "$OUT/load.log" | head -n 30
  rm -rf "$ck"
fi
# moe_experts (issue #6): both device paths vs the CPU, capture-safety, row independence ("[moe]" lines; the
# per-shape errors stay in the log), then the bench: decode 1-64 rows (graph-timed, % of HBM), the f32 path's
# launch plans, prefill 1024/8192 rows (TFLOP/s) ("[moe-bench]" lines).
if want moe && [[ -x .gpurun/cuda_moe_tests ]]; then
  timeout 120 .gpurun/cuda_moe_tests > "$OUT/cuda_moe_tests.log" 2>&1 || rc=1
  grep -E '^\[moe\] (prefill|tensor-core|captured)|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure' "$OUT/cuda_moe_tests.log" | head -n 40
  if [[ -x .gpurun/cuda_moe_experts_bench ]]; then
    timeout 150 .gpurun/cuda_moe_experts_bench > "$OUT/cuda_moe_experts_bench.log" 2>&1 || rc=1
    grep -E '^\[moe-bench\]' "$OUT/cuda_moe_experts_bench.log" | head -n 120
  fi
fi
# NCCL communicator checks at one rank (more ranks need a multi-GPU machine).
if want nccl; then
  timeout 120 .gpurun/comm_nccl_check --world 1 2>&1 | tee "$OUT/comm_nccl_check.log" | tail -n 5
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
# Tensor parallelism on CUDA ranks (issue #7; needs 2+ GPUs): NCCL across processes, TP=N vs TP=1 greedy
# equality, a killed follower, bench --tp. Only when named (TF_GPU_ONLY="tp"): it takes ~5 min.
# Logs: $OUT/tp_gpu.log (rank logs included), $OUT/tp_gpu.json; "tp:" lines here.
if [[ " ${TF_GPU_ONLY:-} " == *" tp "* ]]; then
  timeout 590 scripts/device/tp_gpu.sh || rc=1
fi
# CUDA op timings at model shapes beside the HBM roofline (informative; does not change rc).
# Its "measured ..." lines (HBM copy bandwidth, cuBLAS bf16 peak) are echoed; tables and JSON lines stay in the log.
if want bench && [[ -x .gpurun/cuda_ops_bench ]]; then
  timeout 300 .gpurun/cuda_ops_bench > "$OUT/cuda_ops_bench.log" 2>&1
  grep -E '^measured' "$OUT/cuda_ops_bench.log"
fi
# The small decode ops (narrow matmuls, norms, mHC, router, elementwise) at 1 and 8 rows, graph-timed,
# before/after the lean kernels, self-checking (issue #8; bench/cuda_smallops_bench.cc).
# The KDA low-rank ups in one launch (Ops::kda_lowrank_gates, issue #8): parity (bits vs the 4-op
# sequence, CPU tolerance, graphs, PDL), then the 4-op sequence vs the fused op at 1/8/64 rows,
# graph-timed ("[kda-lowrank]" lines; bench/cuda_kda_lowrank_bench.cc).
if want kdalowrank && [[ -x .gpurun/cuda_kda_lowrank_bench ]]; then
  timeout 90 .gpurun/cuda_ops_parity_tests --gtest_filter='CudaKdaLowrank.*' > "$OUT/kda_lowrank_tests.log" 2>&1 || rc=1
  grep -E '^\[kda-lowrank\]|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure' "$OUT/kda_lowrank_tests.log" | head -n 30
  timeout 60 .gpurun/cuda_kda_lowrank_bench > "$OUT/cuda_kda_lowrank_bench.log" 2>&1 || rc=1
  grep -E '^\[kda-lowrank\]' "$OUT/cuda_kda_lowrank_bench.log"
fi
if want smallops && [[ -x .gpurun/cuda_smallops_bench ]]; then
  timeout 120 .gpurun/cuda_smallops_bench > "$OUT/cuda_smallops_bench.log" 2>&1 || rc=1
  grep -E '^\[smallops\]' "$OUT/cuda_smallops_bench.log"
fi
# The fused mHC pre-step (Ops::mhc_pre, cuda_mhc_pre.cu) vs the five-op sequence and the CPU,
# row independence, graph replay, fallbacks; with the lean small-op tests it builds on.
if want mhcpre && [[ -x .gpurun/cuda_ops_parity_tests ]]; then
  timeout 120 .gpurun/cuda_ops_parity_tests --gtest_filter='MhcPre.*:SmallOps.*' > "$OUT/mhc_pre_tests.log" 2>&1 || rc=1
  grep -E '^\[  FAILED |^\[==========\]|^\[  PASSED |Failure|rel|differ|^\[mhc-sinkhorn\]' "$OUT/mhc_pre_tests.log" | head -n 40
fi
# Ops::matmul_many (issue #8): one launch per format equals separate matmul calls bit for bit, then one
# layer's projections (KDA, MLA, indexer) at m = 1/8 graph-replayed, separate vs matmul_many ("[matmul-many]").
if want matmulmany && [[ -x .gpurun/cuda_matmul_many_tests ]]; then
  timeout 90 .gpurun/cuda_matmul_many_tests > "$OUT/cuda_matmul_many_tests.log" 2>&1 || rc=1
  grep -E '^\[matmul-many\]|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure' "$OUT/cuda_matmul_many_tests.log" | head -n 30
  timeout 90 .gpurun/cuda_ops_bench --matmul-many > "$OUT/cuda_matmul_many_bench.log" 2>&1 || rc=1
  grep -E '^\[matmul-many\]|^measured|cuda_ops_bench' "$OUT/cuda_matmul_many_bench.log" | head -n 20
fi
# Prefill-side ops at T = 2048/8192 rows beside their FLOP roofline (KDA chunked vs the
# recurrence, MoE, MLA sparse attention, indexer, GEMMs); fails when the KDA check fails.
if want prefill && [[ -x .gpurun/cuda_prefill_bench ]]; then
  timeout 240 .gpurun/cuda_prefill_bench > "$OUT/cuda_prefill_bench.log" 2>&1 || rc=1
  grep -E '^(measured|==|  [a-z]|cuda_prefill_bench)' "$OUT/cuda_prefill_bench.log"
fi
# Prefill attention kernels only (~1 min): the tensor-core indexer scores, MLA prefill and KDA chunked
# vs the CPU ("[parity]" lines), then their bench at T = 2048/8192 and the last chunk of a 128K prompt.
# Only when named (a full run has them in "parity" and "prefill").
if [[ " ${TF_GPU_ONLY:-} " == *" prefillk "* && -x .gpurun/cuda_prefill_bench ]]; then
  timeout 150 .gpurun/cuda_ops_parity_tests --gtest_filter='CudaIndexerPrefill.*:CudaMlaPrefill.*:CudaKdaChunked.*:CudaParity.IndexerPoolKeysAndScores:CudaParity.LatentStoreAndSparseAttention:CudaParity.KdaRecurrentAndChunked' \
    > "$OUT/prefill_kernels_tests.log" 2>&1 || rc=1
  grep -E '^\[parity\]|^\[  FAILED |^\[==========\]|^\[  PASSED |Failure' "$OUT/prefill_kernels_tests.log" | head -n 60
  timeout 150 .gpurun/cuda_prefill_bench --ops kda,mla,indexer,long > "$OUT/prefill_kernels_bench.log" 2>&1 || rc=1
  grep -E '^(measured|==|  [a-z]|cuda_prefill_bench)' "$OUT/prefill_kernels_bench.log"
fi
# `tensorfold bench --offline --device cuda` on the demo checkpoint: --probe (HBM copy, cuBLAS BF16),
# scenarios and the roofline columns end to end (tiny model: launch-bound, far below its roofline).
if want roofline && [[ -x .gpurun/tensorfold ]]; then
  echo "== bench --offline --device cuda --probe (demo checkpoint)"
  TF_CACHE_DIR="$(mktemp -d)" timeout 300 .gpurun/tensorfold bench --offline --device cuda --probe \
    --scenario decode-1,decode-4,prefill-1k --output-tokens 16 --kv f32 --memory-reserve-gib 0 2>&1 |
    grep -E '^(== scenario|bench: (probe|roofline)|  figure|  (decode|aggregate|prefill) tok/s|  decode,|  prefill of|concurrency|error|scenario .* FAILED)'
  [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
# CUDA graphs of the decode step: replay == eager bit for bit on the fixtures ("[graphs]" lines), then
# the op profiler (TF_PROFILE_OPS=1) on a 4-layer full-width synthetic checkpoint, decode-1 with
# graphs off and on ("[op-profile]" lines: GPU time per op, step wall vs GPU busy).
if want graphs && [[ -x .gpurun/glm5_graphs_cuda_tests ]]; then
  timeout 120 .gpurun/glm5_graphs_cuda_tests > "$OUT/glm5_graphs_cuda_tests.log" 2>&1
  [[ $? -eq 0 ]] || rc=1
  grep -E '^\[graphs\]|^\[cuda-spec\]|step graphs|^\[  FAILED |^\[==========\]|^\[  PASSED ' "$OUT/glm5_graphs_cuda_tests.log" | tail -n 40
  if [[ -x .gpurun/tensorfold ]]; then
    ck="$(mktemp -d /dev/shm/tf-graphs.XXXXXX 2>/dev/null || mktemp -d)"
    if timeout 120 .gpurun/tensorfold synth-checkpoint --out "$ck" --preset full --layers 4 --experts 8 --mtp-layers 0 \
        > "$OUT/graphs_synth.log" 2>&1; then
      for g in 0 1; do
        echo "== op profile, 4-layer synthetic, decode-1, TF_GRAPHS=$g"
        TF_GRAPHS=$g TF_PROFILE_OPS=1 TF_PROFILE_OPS_EVERY=40 TF_CACHE_DIR="$(mktemp -d)" timeout 150 \
          .gpurun/tensorfold bench --offline --device cuda --model-dir "$ck" --scenario decode-1 --output-tokens 48 \
          --timeout 120 > "$OUT/graphs_profile_$g.log" 2>&1 || rc=1
        grep -E '^\[op-profile\]|step graphs|tok/s|error' "$OUT/graphs_profile_$g.log" | head -n 60
      done
    else
      echo "graphs: synth-checkpoint failed (see graphs_synth.log)"; rc=1
    fi
    rm -rf "$ck"
  fi
fi
# The synthetic full-geometry benchmark (minutes; only when named: TF_GPU_ONLY="benchgpu").
if [[ " ${TF_GPU_ONLY:-} " == *" benchgpu "* ]]; then
  scripts/device/bench_gpu.sh || rc=1
fi
# A GPU with 99 KB of shared memory per block (sm_120 / sm_121: RTX PRO 6000, DGX Spark), on this
# one: every test binary present again with TF_SMEM_PER_BLOCK=101376, so each launcher takes the
# kernels and ring depths such a GPU gets (kernels/cuda/device_limits.h). Only when named.
if [[ " ${TF_GPU_ONLY:-} " == *" smallsmem "* ]]; then
  for t in cuda_kernel_tests cuda_ops_parity_tests cuda_fp8_gemm_tests cuda_quant_tests cuda_quant_ring_tests \
           cuda_matmul_many_tests cuda_moe_tests exl3_cuda_tests glm5_cuda_tests glm5_graphs_cuda_tests; do
    [[ -x .gpurun/$t ]] || continue
    log=$(mktemp)
    TF_SMEM_PER_BLOCK=101376 timeout 400 .gpurun/$t --gtest_filter='-*Bench*' > "$log" 2>&1
    r=$?
    [[ $r -eq 0 ]] || rc=1
    echo "== smallsmem $t: rc=$r $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]+ test' "$log" | tr '\n' ' ')"
    grep -E '^\[  FAILED  \] [A-Z]' "$log" | head -n 20
    { echo "===== $t (rc=$r)"; cat "$log"; } >> "$OUT/smallsmem.log"
    rm -f "$log"
  done
fi
# The real server on the demo checkpoint: --device cuda vs cpu, then `tensorfold bench` over HTTP.
if want serve && [[ -x .gpurun/tensorfold ]]; then
  timeout 400 scripts/device/serve_check.sh > "$OUT/serve_check.log" 2>&1 || rc=1
  tail -n 60 "$OUT/serve_check.log"
fi
exit $rc
