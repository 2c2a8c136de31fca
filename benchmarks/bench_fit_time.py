"""How long ``vramnb.fit`` takes to plan on CPU (issue 28, item 18: a new user's 12.6 M-parameter
diffusers UNet took 865 s).

Models built from configs by libraries nobody here tuned for: diffusers' ``UNet2DModel`` (about
the user's size), a GPT-2 from transformers, torchvision's ResNet-50 where installed. Each is
planned for a named card with the default techniques; the wall time of ``fit`` (its own
``seconds``), how many plans it estimated and which it chose are printed and written as JSON.

    python benchmarks/bench_fit_time.py [--out results.json] [--models unet gpt2 resnet50]

Times depend on the host: quote them with the machine (cores, load) they were taken on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

import vramnb


def unet():
    from diffusers import UNet2DModel

    torch.manual_seed(0)
    m = UNet2DModel(sample_size=64, in_channels=3, out_channels=3, layers_per_block=2,
                    block_out_channels=(64, 128, 128, 256),
                    down_block_types=("DownBlock2D", "DownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
                    up_block_types=("UpBlock2D", "AttnUpBlock2D", "UpBlock2D", "UpBlock2D"))
    x = torch.randn(16, 3, 64, 64)
    t = torch.randint(0, 1000, (16,))

    def loss_fn(model, batch):
        return model(batch[0], batch[1]).sample.square().mean()

    return m, (x, t), loss_fn


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=32000))
    ids = torch.randint(0, 32000, (8, 512))
    return m, {"input_ids": ids, "labels": ids}, None


def resnet50():
    import torchvision

    torch.manual_seed(0)
    m = torchvision.models.resnet50()
    x, y = torch.randn(32, 3, 224, 224), torch.randint(0, 1000, (32,))

    def loss_fn(model, batch):
        return torch.nn.functional.cross_entropy(model(batch[0]), batch[1])

    return m, (x, y), loss_fn


MODELS = {"unet": unet, "gpt2": gpt2, "resnet50": resnet50}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--target", default="RTX 3060")
    args = ap.parse_args()
    rows = []
    for name in args.models:
        try:
            model, batch, loss_fn = MODELS[name]()
        except ImportError as e:
            print(f"{name}: skipped ({e})")
            continue
        opt = torch.optim.AdamW(model.parameters())
        n = sum(p.numel() for p in model.parameters())
        t0 = time.perf_counter()
        plan = vramnb.fit(model, batch, loss_fn, opt, target=args.target, progress=False)
        wall = time.perf_counter() - t0
        row = {"model": name, "parameters": n, "wall_s": round(wall, 2), "fit_seconds": round(plan.seconds, 2),
               "plans": len(plan.plans), "best": None if plan.best is None else plan.best.recipe.describe()}
        print(json.dumps(row), flush=True)
        rows.append(row)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "torch": torch.__version__,
            "python": platform.python_version(), "cpus": os.cpu_count(), "load1": os.getloadavg()[0],
            "vramnb": vramnb.__version__, "target": args.target}
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
