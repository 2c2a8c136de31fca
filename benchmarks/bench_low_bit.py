"""8-bit AdamW and fp8 training, measured on a CUDA GPU (run on the GPU machine).

The claims checked:
- "8-bit optimizers cut optimizer state by 4x" (Dettmers et al., "8-bit Optimizers via
  Block-wise Quantization", ICLR 2022; repeated in most memory guides): AdamW keeps two
  fp32 moments (8 bytes per parameter); an 8-bit AdamW keeps two uint8 moments plus one
  fp32 scale per block (bitsandbytes: 256-element blocks; small tensors stay 32-bit).
- "fp8 training halves activation memory against bf16" (commonly said of fp8 GEMMs,
  e.g. NVIDIA Transformer Engine and torchao.float8 material).

Each number is read from the CUDA caching allocator (``torch.cuda.memory_allocated`` /
``max_memory_allocated``) and from the tensors themselves (state bytes by storage), and,
where vramnb runs the technique, from ``vramnb.compare`` on the same model.

Usage: python benchmarks/bench_low_bit.py OUT.json
"""

from __future__ import annotations

import json
import sys
import time

import torch
from torch import nn


def state_bytes(opt: torch.optim.Optimizer) -> int:
    seen: dict[int, int] = {}
    for st in opt.state.values():
        for v in st.values():
            if not isinstance(v, torch.Tensor):
                continue
            # torchao's OptimState8bit is a wrapper subclass: its bytes are in its inner tensors
            inner = [getattr(v, n) for n in v.__tensor_flatten__()[0]] if hasattr(v, "__tensor_flatten__") else [v]
            for t in inner:
                s = t.untyped_storage()
                seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def gpt2(n_layer: int = 12, n_embd: int = 768) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(n_layer=n_layer, n_embd=n_embd, n_head=n_embd // 64, vocab_size=50257, n_positions=1024)
    return GPT2LMHeadModel(cfg)


def mlp(width: int = 4096, depth: int = 8) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)]
    return nn.Sequential(*layers)


def optimizer_state(out: dict) -> None:
    import importlib.util

    makers = [("torch.optim.AdamW", lambda ps: torch.optim.AdamW(ps, lr=1e-4))]
    if importlib.util.find_spec("bitsandbytes") is not None:  # each library only where it was carried
        import bitsandbytes as bnb

        makers.append(("bitsandbytes.optim.AdamW8bit", lambda ps: bnb.optim.AdamW8bit(ps, lr=1e-4)))
    if importlib.util.find_spec("torchao") is not None:
        from torchao.optim import AdamW8bit as AoAdamW8bit

        makers.append(("torchao.optim.AdamW8bit", lambda ps: AoAdamW8bit(ps, lr=1e-4)))
    dev = torch.device("cuda")
    rows = []
    for name, build in (("gpt2-124M", lambda: gpt2()), ("mlp-8x4096", lambda: mlp())):
        for opt_name, make in makers:
            torch.manual_seed(0)
            model = build().to(dev)
            n_params = sum(p.numel() for p in model.parameters())
            opt = make(list(model.parameters()))
            for p in model.parameters():
                p.grad = torch.randn_like(p) * 1e-3
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            opt.step()
            torch.cuda.synchronize()
            after = torch.cuda.memory_allocated()
            sb = state_bytes(opt)
            rows.append({"model": name, "optimizer": opt_name, "params": n_params,
                         "state_bytes": sb, "allocated_by_first_step": after - before,
                         "bytes_per_param": sb / n_params})
            print(rows[-1], flush=True)
            del model, opt
            torch.cuda.empty_cache()
    for r in rows:
        base = next(b for b in rows if b["model"] == r["model"] and b["optimizer"] == "torch.optim.AdamW")
        r["saving_vs_adamw"] = base["state_bytes"] / r["state_bytes"]
    out["optimizer_state"] = rows


def fp8_step(out: dict) -> None:
    from torchao.float8 import convert_to_float8_training

    dev = torch.device("cuda")
    rows = []
    for width, depth, tokens in ((4096, 4, 8192), (2048, 8, 16384)):
        for mode in ("bf16 autocast", "fp8 (torchao Float8Linear) + bf16 autocast"):
            torch.manual_seed(0)
            model = mlp(width, depth).to(dev)
            if mode.startswith("fp8"):
                convert_to_float8_training(model)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
            x = torch.randn(tokens, width, device=dev)
            times = []
            for i in range(3):
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                start = torch.cuda.memory_allocated()
                t0 = time.perf_counter()
                with torch.autocast("cuda", torch.bfloat16):
                    y = model(x)
                after_fwd = torch.cuda.memory_allocated()
                loss = y.float().pow(2).mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                del y, loss
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
                peak = torch.cuda.max_memory_allocated()
            rows.append({"width": width, "depth": depth, "tokens": tokens, "mode": mode,
                         "steady_peak_allocated": peak, "saved_by_forward": after_fwd - start,
                         "step_s": min(times[1:])})
            print(rows[-1], flush=True)
            del model, opt, x
            torch.cuda.empty_cache()
    out["fp8"] = rows


def vramnb_compare(out: dict) -> None:
    import vramnb

    dev = torch.device("cuda")
    torch.manual_seed(0)
    model = mlp(2048, 4).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(8192, 2048, device=dev)
    cmp = vramnb.compare(model, x, lambda m, b: m(b).float().pow(2).mean(), opt, progress=False,
                         recipes=[{"optimizer": "AdamW 8-bit"}, {"precision": "bf16"}, {"precision": "fp8"}])
    print(cmp, flush=True)
    out["vramnb_compare"] = cmp.to_records()
    out["vramnb_compare_text"] = str(cmp)


def main() -> None:
    out: dict = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0)}
    path = sys.argv[1]
    for part in (optimizer_state, fp8_step, vramnb_compare):
        try:
            part(out)
        except Exception as e:  # noqa: BLE001 - record and go on to the next part
            import traceback

            out[part.__name__ + "_error"] = traceback.format_exc()
            print(f"{part.__name__} failed: {e}", flush=True)
        with open(path, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
