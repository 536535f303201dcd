#!/usr/bin/env python3
"""Turns scripts/device/bench_gpu.sh's results JSON into a section for bench/RESULTS.md.

    python3 scripts/device/bench_results_md.py /work/.device/.../bench_gpu.json >> bench/RESULTS.md

The section names the date, the GPU, the exact command, the measured ceilings (probe) and the
engine settings; one table row per scenario with each figure beside its roofline, then the
transformers comparison and any failures. Runs anywhere (standard library only).
"""
import json
import sys


def pct(measured, bound):
    return f"{100.0 * measured / bound:.1f}%" if measured is not None and bound else "-"


def num(v, digits=1):
    return f"{v:,.{digits}f}" if isinstance(v, (int, float)) else "-"


def run_row(r):
    spec, s, rl = r.get("spec", {}), r.get("summary"), r.get("roofline") or {}
    name = r.get("scenario", "?")
    if not s:
        return f"| {name} | FAILED: {r.get('error', 'no result')} | | | | | | | |"
    decode = s["decode_tok_s"]["median"] if s["decode_tok_s"]["count"] else None
    prefill = s["prefill_tok_s"]["median"] if s["prefill_tok_s"]["count"] else None
    ttft = s["ttft_s"]["median"] * 1e3 if s["ttft_s"]["count"] else None
    agg = s["aggregate_tok_s"] if s["output_tokens"] else None
    failed = f" ({s['failed']} failed)" if s.get("failed") else ""
    if name.startswith("prefill"):
        return (f"| {name}{failed} | 1 | {spec.get('prompt_tokens', '?'):,} | {num(ttft, 0)} ms | - | - | "
                f"**{num(prefill)}** / {num(rl.get('prefill_tok_s'))} | {pct(prefill, rl.get('prefill_tok_s'))} | "
                f"{rl.get('detail', {}).get('bound', '-')} |")
    return (f"| {name}{failed} | {spec.get('concurrency', '?')} | {spec.get('prompt_tokens', '?')} + "
            f"{spec.get('output_tokens', '?')} | {num(ttft, 0)} ms | **{num(decode)}** / {num(rl.get('decode_tok_s'))} "
            f"({pct(decode, rl.get('decode_tok_s'))}) | **{num(agg)}** / {num(rl.get('aggregate_tok_s'))} "
            f"({pct(agg, rl.get('aggregate_tok_s'))}) | - | - | {rl.get('detail', {}).get('bound', '-')} |")


def section(res):
    out = []
    gpu = res.get("gpu", "").split(",")[0].strip() or "GPU"
    full = res.get("full") or {}
    out.append(f"## {res.get('date', '?')} — `tensorfold bench --offline --device cuda`, synthetic GLM-5.3-Flash "
               f"geometry, {gpu}")
    out.append("")
    out.append(f"GPU: {res.get('gpu', '?')}.  ")
    out.append(f"Command (repo root on the GPU machine, after `scripts/device/pack.sh` here, carry `.gpurun`): "
               f"`{res.get('command', '?')}`.")
    hw = full.get("hardware") or (res.get("tensorfold_small") or {}).get("hardware") or {}
    if hw:
        out.append(f"Roofline ceilings ({hw.get('source', '?')}): HBM {num(hw.get('hbm_gbps'), 0)} GB/s (copy, read + "
                   f"write), BF16 tensor cores {num(hw.get('tc_tflops'), 0)} TFLOP/s (cuBLAS 8192³); weights "
                   f"{full.get('weight_dtype', '?')}.")
    eng = full.get("engine")
    if eng:
        out.append(f"Engine: PARALLEL {eng.get('parallel')}, window {eng.get('context'):,} tokens, KV {eng.get('kv')}, "
                   f"prefill chunk {eng.get('prefill_chunk')}.")
    if full.get("runs"):
        summaries = [r.get("roofline", {}).get("summary") for r in full["runs"] if r.get("roofline")]
        out.append("")
        out.append("Each figure is **measured** / roofline (share); decode per stream is the median request, "
                   "aggregate = all tokens / wall time (prefill ramp included).")
        out.append("")
        out.append("| scenario | streams | prompt + output | TTFT | decode tok/s per stream | aggregate tok/s | "
                   "prefill tok/s | % of roofline | bound |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        out.extend(run_row(r) for r in full["runs"])
        if summaries:
            out.append("")
            out.append("Roofline inputs per scenario:")
            out.append("")
            out.extend(f"- {s}" for s in summaries)
    hf, small = res.get("transformers"), res.get("tensorfold_small")
    if hf:
        out.append("")
        out.append(f"Same scaled-down synthetic checkpoint (full widths, fewer layers, 8 experts) in transformers "
                   f"{hf.get('transformers', '?')} ({hf.get('model_class', '?')}, bf16, torch {hf.get('torch', '?')}) "
                   f"and in tensorfold:")
        out.append("")
        out.append("| figure | transformers | tensorfold | tensorfold / transformers |")
        out.append("|---|---|---|---|")
        ratios = res.get("ratio_tensorfold_over_transformers", {})

        def ours(prefix, key):
            for r in (small or {}).get("runs", []):
                s = r.get("summary")
                if r.get("scenario", "").startswith(prefix) and s and s[key]["count"]:
                    return s[key]["median"]
            return None

        out.append(f"| batch-1 decode tok/s (prompt {hf.get('prompt_tokens')}, {hf.get('output_tokens')} tokens) | "
                   f"{num(hf.get('decode_tok_s'))} | {num(ours('decode-1', 'decode_tok_s'))} | "
                   f"{num(ratios.get('decode_batch1'), 2)}× |")
        out.append(f"| prefill tok/s ({hf.get('prefill_tokens')} tokens) | {num(hf.get('prefill_tok_s'))} | "
                   f"{num(ours('prefill-', 'prefill_tok_s'))} | {num(ratios.get('prefill'), 2)}× |")
    if res.get("failures"):
        out.append("")
        out.append("Failed steps: " + "; ".join(res["failures"]) + ".")
    out.append("")
    return "\n".join(out)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        res = json.load(open(sys.argv[1]))
    except (OSError, ValueError) as e:
        print(f"bench_results_md: {sys.argv[1]}: {e}", file=sys.stderr)
        return 1
    print(section(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
