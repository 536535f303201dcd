#!/usr/bin/env python3
"""Generates transformers reference outputs for small glm5_next checkpoints.

Runs on the GPU machine (transformers 5.17 + torch); the outputs are committed
under tests/data/model/ and compared against by tests/model/.

For each configuration it writes DIR/<name>/:
  config.json, model.safetensors   -- as written by save_pretrained (weights
                                       rounded to bf16 values, stored fp32)
  reference.safetensors             -- prompt ids, logits of every prompt
                                       position (fp32 forward on CPU), greedy
                                       continuation ids and their step logits
  reference.json                    -- what the file holds and how it was made
"""
import json, os, sys, argparse
import torch
from safetensors.torch import save_file
from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration

TINY_TEXT = dict(
    vocab_size=384, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
    num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=4,
    n_shared_experts=1, n_routed_experts=12, num_experts_per_tok=4,
    n_group=3, topk_group=2, routed_scaling_factor=2.5,
    kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=0, qk_nope_head_dim=16, v_head_dim=16,
    index_topk=8, index_head_dim=16, index_n_heads=4, index_kpool=4,
    linear_head_dim=16, linear_num_heads=4, linear_conv_kernel_dim=4, linear_lower_bound=-5.0,
    hc_mult=4, hc_sinkhorn_iters=20, swiglu_limit=10.0, pad_token_id=0,
    eos_token_id=[1, 2], rms_norm_eps=1e-5,
)
TINY_VISION = dict(depth=1, hidden_size=32, num_heads=2, intermediate_size=64, out_hidden_size=64,
                   projection_intermediate_size=64, patch_size=14, spatial_merge_size=2,
                   temporal_patch_size=2, image_size=56)

CONFIGS = {
    # nested text_config/vision_config; layer 4 reuses layer 3's top-k (a shared
    # indexer must directly follow a DSA layer in transformers)
    "tiny-nested": dict(nested=True, text=dict(
        TINY_TEXT,
        layer_types=["linear_attention"] * 3 + ["deepseek_sparse_attention"] * 2
        + ["linear_attention"] * 2 + ["deepseek_sparse_attention"],
        indexer_types=["full"] * 4 + ["shared"] + ["full"] * 3)),
    # flat text-only form, all indexers full, first layer sparse (mlp_layer_types given)
    "tiny-flat": dict(nested=False, text=dict(TINY_TEXT, num_hidden_layers=4,
                      mlp_layer_types=["dense", "sparse", "sparse", "sparse"], n_group=1, topk_group=1,
                      index_topk=12, index_kpool=4)),
}


def perturb_(model, gen):
    """Random init leaves many vectors at 0 or 1; push every parameter off
    those values so that each one matters, then round to bf16 values."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 or "bias" in name or "A_log" in name or "dt_bias" in name or "ape" in name:
                p.add_(torch.randn(p.shape, generator=gen) * 0.1)
            else:
                p.add_(torch.randn(p.shape, generator=gen) * 0.01)
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--prompt-len", type=int, default=150)
    ap.add_argument("--gen", type=int, default=12)
    args = ap.parse_args()
    torch.manual_seed(0)
    for name, spec in CONFIGS.items():
        gen = torch.Generator().manual_seed(1234)
        if spec["nested"]:
            cfg = Glm5NextConfig(text_config=spec["text"], vision_config=TINY_VISION)
        else:
            cfg = Glm5NextConfig(**spec["text"], vision_config=TINY_VISION)
        model = Glm5NextForConditionalGeneration(cfg).to(torch.float32).eval()
        perturb_(model, gen)
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        if not spec["nested"]:
            # rewrite config.json in the flat text-only form
            full = json.load(open(os.path.join(d, "config.json")))
            flat = dict(full["text_config"])
            flat["model_type"] = "glm5_next"
            flat["architectures"] = full.get("architectures")
            json.dump(flat, open(os.path.join(d, "config.json"), "w"), indent=1)
            # and keep only the text weights, under the names save_pretrained gave them
            from safetensors.torch import load_file
            path = os.path.join(d, "model.safetensors")
            sd = {k: v for k, v in load_file(path).items() if ".visual." not in k and not k.startswith("model.visual")}
            save_file(sd, path, metadata={"format": "pt"})
        vocab = cfg.text_config.vocab_size
        prompt = torch.randint(3, vocab, (1, args.prompt_len), generator=gen)
        with torch.no_grad():
            out = model(input_ids=prompt, use_cache=True)
            logits = out.logits[0].float().clone()
            pkv = out.past_key_values
            ids, steps = [], []
            nxt = int(logits[-1].argmax())
            for _ in range(args.gen):
                ids.append(nxt)
                o = model(input_ids=torch.tensor([[nxt]]), past_key_values=pkv, use_cache=True)
                pkv = o.past_key_values
                steps.append(o.logits[0, -1].float().clone())
                nxt = int(steps[-1].argmax())
            # a second, short prompt (shorter than one index pool set) in one shot
            short = prompt[:, :7]
            short_logits = model(input_ids=short).logits[0].float().clone()
        save_file({
            "prompt_ids": prompt[0].to(torch.int64).clone(),
            "prompt_logits": logits.contiguous(),
            "greedy_ids": torch.tensor(ids, dtype=torch.int64),
            "greedy_step_logits": torch.stack(steps).contiguous(),
            "short_ids": short[0].to(torch.int64).clone(),
            "short_logits": short_logits.contiguous(),
        }, os.path.join(d, "reference.safetensors"))
        json.dump({"config": name, "prompt_len": args.prompt_len, "generated": args.gen,
                   "greedy_ids": ids, "torch": torch.__version__,
                   "transformers": __import__("transformers").__version__,
                   "note": "fp32 forward on CPU; weights are bf16-representable values stored as fp32"},
                  open(os.path.join(d, "reference.json"), "w"), indent=1)
        gc = os.path.join(d, "generation_config.json")
        if os.path.exists(gc):
            os.remove(gc)
        print(name, "ok", logits.shape, ids)


if __name__ == "__main__":
    main()
