#!/usr/bin/env python3
"""Times transformers on a glm5_next checkpoint (the comparison for tensorfold bench).

Run ON the GPU machine (transformers 5.17, torch, one GPU), from scripts/device/bench_gpu.sh:

    python3 scripts/device/transformers_bench.py --model DIR --prompt-tokens 32 --output-tokens 64 \
        --prefill-tokens 2048 --json out.json

Loads DIR with AutoModelForCausalLM (falling back to Glm5NextForConditionalGeneration when the
auto class does not map glm5_next) in bf16 on cuda, then, after a warm-up:
  decode   greedy generation of exactly --output-tokens tokens after a --prompt-tokens prompt,
           batch 1; decode tok/s = (tokens - 1) / (time of N tokens - time of 1 token), the same
           definition as tensorfold bench (tokens after the first over the time after the first).
  prefill  one forward pass over --prefill-tokens tokens (logits of the last position only);
           prefill tok/s = tokens / time.
Each timing is the median of --repeats runs. Prints one line per figure and writes the JSON.
Exit status 1 with a "FAILED: ..." line when loading or a run fails.
"""
import argparse
import json
import statistics
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompt-tokens", type=int, default=32)
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--prefill-tokens", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    if a.output_tokens < 2 or a.prompt_tokens < 1 or a.prefill_tokens < 1:
        print("FAILED: --output-tokens must be >= 2 and the prompt lengths >= 1")
        return 1

    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        print(f"FAILED: importing torch / transformers: {e}")
        return 1
    if not torch.cuda.is_available():
        print("FAILED: torch sees no CUDA device")
        return 1

    res = {"transformers": transformers.__version__, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "model": a.model,
           "prompt_tokens": a.prompt_tokens, "output_tokens": a.output_tokens, "prefill_tokens": a.prefill_tokens}
    t0 = time.time()
    try:
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.bfloat16, device_map="cuda")
    except Exception as e:  # noqa: BLE001 - report and try the model's own class
        print(f"AutoModelForCausalLM failed ({type(e).__name__}: {str(e)[:300]}); trying Glm5NextForConditionalGeneration")
        try:
            from transformers import Glm5NextForConditionalGeneration
            model = Glm5NextForConditionalGeneration.from_pretrained(a.model, dtype=torch.bfloat16, device_map="cuda")
        except Exception as e2:  # noqa: BLE001
            print(f"FAILED: loading {a.model}: {type(e2).__name__}: {str(e2)[:500]}")
            return 1
    model.eval()
    res["model_class"] = type(model).__name__
    res["load_s"] = time.time() - t0
    res["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
    print(f"loaded {res['model_class']} in {res['load_s']:.1f} s (attention: {res['attn_implementation']})")

    vocab = model.config.get_text_config().vocab_size
    g = torch.Generator().manual_seed(0)
    # Plain token ids well inside the vocabulary (no special tokens: they sit at the top).
    prompt = torch.randint(100, min(vocab - 100, 100000), (1, a.prompt_tokens), generator=g).to("cuda")
    long_prompt = torch.randint(100, min(vocab - 100, 100000), (1, a.prefill_tokens), generator=g).to("cuda")

    def generate(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - t, out

    try:
        with torch.inference_mode():
            generate(4)  # warm-up (kernels, allocator, cache classes)
            t1 = statistics.median(generate(1)[0] for _ in range(a.repeats))
            runs = [generate(a.output_tokens) for _ in range(a.repeats)]
            tn = statistics.median(r[0] for r in runs)
            produced = runs[0][1].shape[1] - a.prompt_tokens
            if produced != a.output_tokens:
                raise RuntimeError(f"generate produced {produced} tokens, not {a.output_tokens}")
            res["ttft_s"] = t1
            res["generate_s"] = tn
            res["decode_tok_s"] = (a.output_tokens - 1) / max(tn - t1, 1e-9)
            res["greedy_ids_head"] = runs[0][1][0, a.prompt_tokens:a.prompt_tokens + 8].tolist()
            print(f"decode (batch 1, prompt {a.prompt_tokens}, {a.output_tokens} tokens): "
                  f"{res['decode_tok_s']:.1f} tok/s (1 token {t1*1e3:.1f} ms, {a.output_tokens} tokens {tn:.3f} s)")

            extra = {"logits_to_keep": 1}  # only the last position's logits, as a server's prefill

            def prefill():
                torch.cuda.synchronize()
                t = time.perf_counter()
                try:
                    model(input_ids=long_prompt, attention_mask=torch.ones_like(long_prompt), use_cache=True, **extra)
                except TypeError:
                    if not extra:
                        raise
                    extra.clear()  # a forward without logits_to_keep: all logits (slightly slower)
                    return prefill()
                torch.cuda.synchronize()
                return time.perf_counter() - t

            prefill()  # warm-up
            tp = statistics.median(prefill() for _ in range(a.repeats))
            res["prefill_s"] = tp
            res["prefill_tok_s"] = a.prefill_tokens / tp
            res["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
            print(f"prefill ({a.prefill_tokens} tokens): {res['prefill_tok_s']:.1f} tok/s ({tp:.3f} s); "
                  f"peak memory {res['peak_memory_gib']:.1f} GiB")
    except Exception as e:  # noqa: BLE001
        print(f"FAILED: timing: {type(e).__name__}: {str(e)[:500]}")
        res["error"] = f"{type(e).__name__}: {e}"
        if a.json:
            json.dump(res, open(a.json, "w"), indent=1)
        return 1
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
