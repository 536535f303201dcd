#!/usr/bin/env python3
"""Generates transformers reference outputs for small glm5_next checkpoints.

Runs on the GPU machine (transformers 5.17 + torch); the outputs are committed
under tests/data/model/ and compared against by tests/model/ and tests/unit/.
See tests/data/model/README.md for how to regenerate them.

For each configuration it writes DIR/<name>/:
  config.json, model.safetensors   -- as written by save_pretrained (weights
                                       rounded to bf16 values, stored fp32)
  reference.safetensors             -- prompt ids, logits of every prompt
                                       position (fp32 forward on CPU), greedy
                                       continuation ids and their step logits,
                                       a 32-token continuation from generate()
                                       with its per-step logits
  reference.json                    -- what the file holds and how it was made

Variants (issue 3 item 6):
  tiny-nested     nested config (+ tiny vision tower), 8 layers, shared indexer,
                  n_group 3, index_kpool 4
  tiny-flat       flat text-only config, 4 layers, index_kpool 4
  tiny-flat-hf    tiny-flat's weights under transformers' in-memory module names
                  (model.state_dict() saved directly: fused experts.gate_up_proj /
                  down_proj, self_attn.conv1d, forget_gate.*, attn_hc.* / ffn_hc.*)
  tiny-kpool8     flat, two DSA layers, index_kpool 8 (index_topk 16)
  tiny-fp8        flat, the official FP8 layout: MLA / dense-MLP / expert matrices
                  as F8_E4M3 with 128x128 `weight_scale_inv` block scales (dims
                  192/200/136/72 give partial edge blocks), the rest BF16 (F32 for
                  the tensors the release stores as F32), two shards with
                  model.safetensors.index.json; the reference runs on the
                  dequantized weights (fp8 value * scale_inv, in fp32).

The RNG stream of the first two variants is unchanged from the first version
of this script, so tiny-nested / tiny-flat keep their weights; the references
are computed under torch.random.fork_rng() so they consume no global randomness.
"""
import json, os, re, argparse
import torch
from safetensors.torch import save_file, load_file
from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration, GenerationConfig

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
                      index_topk=12, index_kpool=4), module_copy="tiny-flat-hf"),
    # another pool size; DSA at layers 0 and 2, so both KDA and DSA follow a DSA layer
    "tiny-kpool8": dict(nested=False, seed=8, text=dict(
        TINY_TEXT, num_hidden_layers=4,
        layer_types=["deepseek_sparse_attention", "linear_attention", "deepseek_sparse_attention",
                     "linear_attention"],
        indexer_types=["full"] * 4, mlp_layer_types=["dense", "sparse", "dense", "sparse"],
        n_group=2, topk_group=1, index_topk=16, index_kpool=8)),
    # official FP8 block-scaled layout; widths not multiples of 128 -> partial edge blocks
    "tiny-fp8": dict(nested=False, seed=88, fp8=True, text=dict(
        TINY_TEXT, num_hidden_layers=4, hidden_size=192, intermediate_size=200,
        moe_intermediate_size=72, q_lora_rank=136,
        layer_types=["linear_attention", "deepseek_sparse_attention", "linear_attention",
                     "deepseek_sparse_attention"],
        indexer_types=["full"] * 4, mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        n_group=2, topk_group=1, index_topk=12, index_kpool=4)),
}

GEN_TOKENS = 32
FP8_BLOCK = 128
FP8_MAX = 448.0
# Tensors the release stores as F32 (glm53-checkpoint-facts.md §4); the rest of
# the non-FP8 tensors are BF16 there.
F32_ON_DISK = re.compile(r"(hc_(attn|ffn)_(base|scale)|self_attn\.A_log|self_attn\.dt_bias|e_score_correction_bias)$")


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


def fp8_quantize(w):
    """2-D fp32 [out, in] -> (e4m3 codes, scale_inv [ceil(out/128), ceil(in/128)], dequantized fp32).
    Same recipe as transformers' Fp8Quantize (scale = 448 / block amax, stored
    inverse), extended to partial edge blocks; dequantized = code * scale_inv."""
    rows, cols = w.shape
    br, bc = -(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK)
    inv = torch.ones(br, bc, dtype=torch.float32)
    q = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    deq = torch.empty(rows, cols, dtype=torch.float32)
    for i in range(br):
        for j in range(bc):
            blk = w[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK].float()
            amax = blk.abs().max()
            scale = (FP8_MAX / amax) if amax > 0 else torch.tensor(1.0)
            scale = scale.to(torch.float32)
            qb = torch.clamp(blk * scale, -FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
            s_inv = (1.0 / scale).to(torch.float32)
            inv[i, j] = s_inv
            q[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = qb
            deq[i * FP8_BLOCK:(i + 1) * FP8_BLOCK, j * FP8_BLOCK:(j + 1) * FP8_BLOCK] = qb.to(torch.float32) * inv[i, j]
    return q, inv, deq


def quantize_model_fp8_(model):
    """Quantizes, in place, the matrices the release stores as FP8 (MLA q_a/q_b/
    kv_a/o_proj, dense MLP, shared experts, routed experts) and returns
    {on-disk name: (codes, scale_inv)}; the model keeps the dequantized values."""
    out = {}
    with torch.no_grad():
        layers = model.model.language_model.layers
        for li, layer in enumerate(layers):
            pre = f"model.language_model.layers.{li}."
            attn, mlp = layer.self_attn, layer.mlp
            mats = []
            if hasattr(attn, "q_a_proj"):  # MLA (DSA) layer; KDA layers stay BF16
                for n in ("q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "o_proj"):
                    mats.append((pre + f"self_attn.{n}.weight", getattr(attn, n).weight))
            if hasattr(mlp, "experts"):
                for n in ("gate_proj", "up_proj", "down_proj"):
                    mats.append((pre + f"mlp.shared_experts.{n}.weight", getattr(mlp.shared_experts, n).weight))
                gu, dn = mlp.experts.gate_up_proj, mlp.experts.down_proj  # [E, 2I, H], [E, H, I]
                inter = gu.shape[1] // 2
                for e in range(gu.shape[0]):
                    mats.append((pre + f"mlp.experts.{e}.gate_proj.weight", gu[e, :inter]))
                    mats.append((pre + f"mlp.experts.{e}.up_proj.weight", gu[e, inter:]))
                    mats.append((pre + f"mlp.experts.{e}.down_proj.weight", dn[e]))
            else:
                for n in ("gate_proj", "up_proj", "down_proj"):
                    mats.append((pre + f"mlp.{n}.weight", getattr(mlp, n).weight))
            for name, w in mats:
                q, inv, deq = fp8_quantize(w.detach().clone())
                w.copy_(deq)  # views into the fused expert tensors write through
                out[name] = (q, inv)
    return out


def write_fp8_checkpoint(d, fp8):
    """Rewrites DIR/model.safetensors (save_pretrained names) in the official
    layout, in two shards with an index."""
    path = os.path.join(d, "model.safetensors")
    sd = load_file(path)
    os.remove(path)
    tensors = {}
    for k, v in sd.items():
        if k in fp8:
            q, inv = fp8[k]
            # the dequantized values must be what was saved
            assert torch.equal(q.to(torch.float32) * inv.repeat_interleave(FP8_BLOCK, 0)[:q.shape[0]]
                               .repeat_interleave(FP8_BLOCK, 1)[:, :q.shape[1]], v), k
            tensors[k] = q.contiguous()
            tensors[k[:-len("weight")] + "weight_scale_inv"] = inv.contiguous()
        elif F32_ON_DISK.search(k):
            tensors[k] = v.to(torch.float32).contiguous()
        else:
            b = v.to(torch.bfloat16)
            assert torch.equal(b.to(torch.float32), v), k  # bf16-representable
            tensors[k] = b.contiguous()
    missing = set(fp8) - set(sd)
    assert not missing, sorted(missing)[:5]
    names = sorted(tensors)
    shards = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map, total = {}, 0
    for i, part in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        save_file({k: tensors[k] for k in part}, os.path.join(d, fname), metadata={"format": "pt"})
        for k in part:
            weight_map[k] = fname
            total += tensors[k].numel() * tensors[k].element_size()
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(d, "model.safetensors.index.json"), "w"), indent=1, sort_keys=True)


def compute_reference(model, cfg, gen, args):
    vocab = cfg.text_config.vocab_size
    prompt = torch.randint(3, vocab, (1, args.prompt_len), generator=gen)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
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
        # generate(): greedy, exactly GEN_TOKENS new tokens (EOS does not stop it)
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = cfg.text_config.pad_token_id
        gcfg = GenerationConfig(do_sample=False, max_new_tokens=GEN_TOKENS, eos_token_id=None, pad_token_id=cfg.text_config.pad_token_id,
                                return_dict_in_generate=True, output_logits=True)
        g = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), generation_config=gcfg)
        gen_ids = g.sequences[0, prompt.shape[1]:].to(torch.int64).clone()
        gen_logits = torch.stack([s[0].float() for s in g.logits]).contiguous()
        assert gen_ids.numel() == GEN_TOKENS, gen_ids.numel()
    ref = {
        "prompt_ids": prompt[0].to(torch.int64).clone(),
        "prompt_logits": logits.contiguous(),
        "greedy_ids": torch.tensor(ids, dtype=torch.int64),
        "greedy_step_logits": torch.stack(steps).contiguous(),
        "short_ids": short[0].to(torch.int64).clone(),
        "short_logits": short_logits.contiguous(),
        "generate_ids": gen_ids,
        "generate_logits": gen_logits,
    }
    return ref, ids, gen_ids.tolist()


def flatten_config(d):
    full = json.load(open(os.path.join(d, "config.json")))
    flat = dict(full["text_config"])
    flat["model_type"] = "glm5_next"
    flat["architectures"] = full.get("architectures")
    return flat


def text_only(sd):
    return {k: v for k, v in sd.items() if ".visual." not in k and not k.startswith("model.visual")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--prompt-len", type=int, default=150)
    ap.add_argument("--gen", type=int, default=12)
    args = ap.parse_args()
    torch.manual_seed(0)
    for name, spec in CONFIGS.items():
        if "seed" in spec:
            torch.manual_seed(spec["seed"])
        gen = torch.Generator().manual_seed(1234 + spec.get("seed", 0))
        if spec["nested"]:
            cfg = Glm5NextConfig(text_config=spec["text"], vision_config=TINY_VISION)
        else:
            cfg = Glm5NextConfig(**spec["text"], vision_config=TINY_VISION)
        model = Glm5NextForConditionalGeneration(cfg).to(torch.float32).eval()
        perturb_(model, gen)
        fp8 = quantize_model_fp8_(model) if spec.get("fp8") else None
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        if not spec["nested"]:
            flat = flatten_config(d)
            if fp8 is not None:
                flat["quantization_config"] = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                               "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
            json.dump(flat, open(os.path.join(d, "config.json"), "w"), indent=1)
            # keep only the text weights, under the names save_pretrained gave them
            path = os.path.join(d, "model.safetensors")
            save_file(text_only(load_file(path)), path, metadata={"format": "pt"})
        if fp8 is not None:
            write_fp8_checkpoint(d, fp8)
        ref, ids, gen_ids = compute_reference(model, cfg, gen, args)
        note = "fp32 forward on CPU; weights are bf16-representable values stored as fp32"
        if fp8 is not None:
            note = ("fp32 forward on CPU on the dequantized weights (e4m3 code * weight_scale_inv); "
                    "other weights bf16 values")
        meta = {"config": name, "prompt_len": args.prompt_len, "generated": args.gen,
                "greedy_ids": ids, "generate_ids": gen_ids, "generate_tokens": GEN_TOKENS,
                "torch": torch.__version__, "transformers": __import__("transformers").__version__,
                "note": note}
        targets = [d]
        if spec.get("module_copy"):
            # the same weights under the in-memory module names, saved without renaming
            md = os.path.join(args.out, spec["module_copy"])
            os.makedirs(md, exist_ok=True)
            sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
            save_file(text_only(sd), os.path.join(md, "model.safetensors"), metadata={"format": "pt"})
            json.dump(json.load(open(os.path.join(d, "config.json"))),
                      open(os.path.join(md, "config.json"), "w"), indent=1)
            targets.append(md)
        for t in targets:
            save_file(ref, os.path.join(t, "reference.safetensors"))
            json.dump(dict(meta, config=os.path.basename(t)), open(os.path.join(t, "reference.json"), "w"), indent=1)
        gc = os.path.join(d, "generation_config.json")
        if os.path.exists(gc):
            os.remove(gc)
        print(name, "ok", tuple(ref["prompt_logits"].shape), ids, gen_ids, flush=True)


if __name__ == "__main__":
    main()
