#!/usr/bin/env python3
"""Generates transformers reference outputs for the vision path of glm5_next.

Runs on the GPU machine (transformers 5.17 + torch + torchvision + PIL; CPU
only). Writes DIR/tiny-vision/:
  config.json, model.safetensors   -- a tiny nested checkpoint with a 2-block
                                      vision tower (save_pretrained names,
                                      bf16-representable values stored fp32);
                                      the image/video token ids are moved into
                                      the tiny vocabulary
  images/*.png, *.jpg              -- the test images (synthetic, seeded)
  reference.safetensors            -- see KEYS below
  reference.json                   -- sizes, ids, versions

KEYS (i = image index in IMAGES order):
  img{i}_rgb [H, W, 3] u8        transformers' load_image (PIL decode,
                                  exif_transpose, convert("RGB"))
  img{i}_pixels [N, 1176] f32    Glm5NextImageProcessor (torchvision backend)
  img{i}_grid [3] i64            its image_grid_thw row
  vision_features [T, D_o] f32   get_image_features of images 0 and 1 together
  prompt_ids [L] i64             text + image 0 span + text + image 1 span + text
  prompt_logits [L, V] f32       one forward with pixel_values / image_grid_thw
  generate_ids [8] i64           greedy generate() continuation (EOS disabled)
  video_frames [F, H, W, 3] u8   the synthetic video's frames (fps VIDEO_FPS)
  video_indices [n] i64          frames the video processor sampled
  video_pixels [M, 1176] f32     Glm5NextVideoProcessor output
  video_grid [3] i64             its video_grid_thw row
  video_features [M/4, D_o] f32  get_video_features
  video_prompt_ids [L2] i64      a prompt with the expanded video structure
  video_prompt_logits [L2, V]    one forward with pixel_values_videos
"""
import json, os, argparse
import numpy as np
import torch
from PIL import Image
from safetensors.torch import save_file
from transformers import Glm5NextConfig, Glm5NextForConditionalGeneration, GenerationConfig
from transformers.image_utils import load_image
from transformers.models.glm5_next import Glm5NextImageProcessor, Glm5NextVideoProcessor
from transformers.video_utils import VideoMetadata

from make_model_fixtures import TINY_TEXT

# The text model: make_model_fixtures.py's tiny one, 4 layers (KDA x3, DSA), 8 experts.
TEXT = dict(
    TINY_TEXT, num_hidden_layers=4, n_routed_experts=8, num_experts_per_tok=2, n_group=1, topk_group=1,
    index_topk=12, layer_types=["linear_attention"] * 3 + ["deepseek_sparse_attention"],
    indexer_types=["full"] * 4, mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
)
VISION = dict(depth=2, hidden_size=64, num_heads=4, intermediate_size=96, out_hidden_size=64,
              projection_intermediate_size=80, patch_size=14, spatial_merge_size=2,
              temporal_patch_size=2, image_size=56)
# Special ids moved into the 384-token vocabulary (the release's are 154830..154855).
IDS = dict(image_start_token_id=376, image_end_token_id=377, video_start_token_id=378,
           video_end_token_id=379, image_token_id=380, video_token_id=381)
# name, height, width, mode, max_image_tokens (None: the processor's default)
IMAGES = [
    ("b_pad_130x90.png", 130, 90, "RGB", None),      # no resize, padded to 140 x 112
    ("a_tiny_20x30.png", 20, 30, "RGB", None),       # upscaled (below the minimum tokens)
    ("c_down_300x400.png", 300, 400, "RGB", 64),     # downscaled to fit 64 tokens
    ("d_rgba_33x47.png", 33, 47, "RGBA", None),      # alpha dropped by convert("RGB")
    ("e_gray_64x48.png", 64, 48, "L", None),          # grayscale replicated
    ("f_photo_100x75.jpg", 100, 75, "RGB", None),    # baseline JPEG decode
]
VIDEO_FPS = 5.0
VIDEO_FRAMES = 10
VIDEO_HW = (40, 56)


def perturb_(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.1 if (p.ndim == 1 or "bias" in name or "A_log" in name or "ape" in name) else 0.02
            p.add_(torch.randn(p.shape, generator=gen) * scale)
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def synth_image(rng, h, w, channels):
    """Smooth gradients plus noise, so that resampling matters."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.empty((h, w, channels), dtype=np.float64)
    for c in range(channels):
        fy, fx, ph = rng.uniform(0.02, 0.3), rng.uniform(0.02, 0.3), rng.uniform(0, 6.28)
        out[..., c] = 127.5 + 90 * np.sin(fy * yy + fx * xx + ph) + rng.normal(0, 25, (h, w))
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def write_images(d, rng):
    os.makedirs(os.path.join(d, "images"), exist_ok=True)
    paths = []
    for name, h, w, mode, _ in IMAGES:
        ch = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
        arr = synth_image(rng, h, w, ch)
        img = Image.fromarray(arr[..., 0] if ch == 1 else arr, mode)
        path = os.path.join(d, "images", name)
        if name.endswith(".jpg"):
            img.save(path, quality=90)
        else:
            img.save(path)
        paths.append(path)
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    args = ap.parse_args()
    torch.manual_seed(5)
    gen = torch.Generator().manual_seed(4321)
    rng = np.random.default_rng(77)
    d = os.path.join(args.out, "tiny-vision")
    os.makedirs(d, exist_ok=True)

    cfg = Glm5NextConfig(text_config=TEXT, vision_config=VISION, **IDS)
    model = Glm5NextForConditionalGeneration(cfg).to(torch.float32).eval()
    perturb_(model, gen)
    model.save_pretrained(d, safe_serialization=True)
    gc = os.path.join(d, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)

    ref, meta = {}, {"images": [], "torch": torch.__version__,
                     "transformers": __import__("transformers").__version__,
                     "note": "fp32 forward on CPU; weights bf16-representable values stored fp32"}
    improc = Glm5NextImageProcessor()
    pixels, grids = [], []
    for i, (path, (name, h, w, mode, max_tok)) in enumerate(zip(write_images(d, rng), IMAGES)):
        img = load_image(path)
        ref[f"img{i}_rgb"] = torch.from_numpy(np.asarray(img).copy())
        kw = {} if max_tok is None else {"max_image_tokens": max_tok}
        out = improc(images=img, return_tensors="pt", **kw)
        ref[f"img{i}_pixels"] = out["pixel_values"].float().contiguous()
        ref[f"img{i}_grid"] = out["image_grid_thw"][0].to(torch.int64).clone()
        pixels.append(out["pixel_values"].float())
        grids.append(out["image_grid_thw"])
        meta["images"].append({"file": "images/" + name, "height": h, "width": w, "mode": mode,
                               "max_image_tokens": max_tok, "grid": out["image_grid_thw"][0].tolist()})
        print(name, tuple(out["pixel_values"].shape), out["image_grid_thw"][0].tolist(), flush=True)

    vocab = TEXT["vocab_size"]
    merge = VISION["spatial_merge_size"] ** 2
    with torch.no_grad():
        pv = torch.cat(pixels[:2])
        thw = torch.cat(grids[:2])
        feats = model.model.get_image_features(pv, thw).pooler_output
        ref["vision_features"] = torch.cat(feats).float().contiguous()
        n0, n1 = (int(g.prod()) // merge for g in thw)
        text = lambda n: torch.randint(3, 370, (n,), generator=gen)
        span = lambda n: torch.tensor([IDS["image_start_token_id"]] + [IDS["image_token_id"]] * n
                                      + [IDS["image_end_token_id"]])
        ids = torch.cat([text(9), span(n0), text(5), span(n1), text(7)]).unsqueeze(0)
        out = model(input_ids=ids, pixel_values=pv, image_grid_thw=thw, use_cache=False)
        ref["prompt_ids"] = ids[0].to(torch.int64).clone()
        ref["prompt_logits"] = out.logits[0].float().contiguous()
        model.generation_config.eos_token_id = None
        gcfg = GenerationConfig(do_sample=False, max_new_tokens=8, eos_token_id=None, pad_token_id=0)
        g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), pixel_values=pv,
                           image_grid_thw=thw, generation_config=gcfg)
        ref["generate_ids"] = g[0, ids.shape[1]:].to(torch.int64).clone()
        meta["prompt_image_tokens"] = [n0, n1]
        meta["generate_ids"] = ref["generate_ids"].tolist()
        print("image prompt", tuple(ids.shape), meta["generate_ids"], flush=True)

        # Video: frames as an array with metadata (the processor samples them).
        frames = np.stack([synth_image(rng, *VIDEO_HW, 3) for _ in range(VIDEO_FRAMES)])
        vmeta = VideoMetadata(total_num_frames=VIDEO_FRAMES, fps=VIDEO_FPS, width=VIDEO_HW[1],
                              height=VIDEO_HW[0], duration=VIDEO_FRAMES / VIDEO_FPS)
        vproc = Glm5NextVideoProcessor()
        vo = vproc(videos=[frames], video_metadata=[vmeta], return_metadata=True, return_tensors="pt")
        vthw = vo["video_grid_thw"]
        used = vo["video_metadata"][0]
        ref["video_frames"] = torch.from_numpy(frames.copy())
        ref["video_indices"] = torch.tensor(list(used.frames_indices), dtype=torch.int64)
        ref["video_pixels"] = vo["pixel_values_videos"].float().contiguous()
        ref["video_grid"] = vthw[0].to(torch.int64).clone()
        vfeats = model.model.get_video_features(vo["pixel_values_videos"], vthw).pooler_output
        ref["video_features"] = torch.cat(vfeats).float().contiguous()
        t, hh, ww = vthw[0].tolist()
        per_group = hh * ww // merge
        stamps = [i / VIDEO_FPS for i in list(used.frames_indices)][::2]
        vid = [IDS["video_start_token_id"]]
        for gi in range(t):
            vid += [IDS["image_start_token_id"]] + [IDS["image_token_id"]] * per_group + [IDS["image_end_token_id"]]
            vid += text(3).tolist()  # stands in for the "{t:.1f} seconds" text
        vid += [IDS["video_end_token_id"]]
        # an image before the video, so that both kinds of placeholder appear
        vids = torch.cat([text(4), span(n1), text(3), torch.tensor(vid), text(6)]).unsqueeze(0)
        vout = model(input_ids=vids, pixel_values=pixels[1], image_grid_thw=grids[1],
                     pixel_values_videos=vo["pixel_values_videos"], video_grid_thw=vthw, use_cache=False)
        ref["video_prompt_ids"] = vids[0].to(torch.int64).clone()
        ref["video_prompt_logits"] = vout.logits[0].float().contiguous()
        meta["video"] = {"frames": VIDEO_FRAMES, "fps": VIDEO_FPS, "height": VIDEO_HW[0], "width": VIDEO_HW[1],
                         "indices": ref["video_indices"].tolist(), "grid": vthw[0].tolist(),
                         "timestamps": stamps,
                         "prompt_text_of_group": [f"{s:.1f} seconds" for s in stamps[:t]]}
        print("video", meta["video"], flush=True)

    save_file(ref, os.path.join(d, "reference.safetensors"))
    json.dump(meta, open(os.path.join(d, "reference.json"), "w"), indent=1)
    print("ok", {k: tuple(v.shape) for k, v in ref.items()}, flush=True)


if __name__ == "__main__":
    main()
