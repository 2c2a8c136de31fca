"""Device memory outside PyTorch's allocator, by what a process has run.

``nvidia-smi`` shows a process's CUDA context, the libraries' handles and workspaces outside
the caching allocator (cuBLAS, cuDNN), and the kernel images CUDA loads lazily on first use,
beside PyTorch's reserved memory. Each workload runs in a fresh process with the GPU otherwise
idle; the figure is the GPU's used memory (``nvidia-smi``) during the workload, minus the same
before it started, minus ``torch.cuda.memory_reserved()``.

    python benchmarks/context_memory.py --out context.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

WORKLOADS = {
    "init": "torch.zeros(1, device='cuda')",
    "matmul forward": "a = torch.randn(1024, 1024, device='cuda'); (a @ a).sum()",
    "matmul forward+backward": "a = torch.randn(1024, 1024, device='cuda', requires_grad=True); (a @ a).sum().backward()",
    "linear bf16 autocast fwd+bwd": ("l = torch.nn.Linear(1024, 1024).cuda(); x = torch.randn(64, 1024, device='cuda')\n"
                                     "with torch.autocast('cuda', dtype=torch.bfloat16): y = l(x).float().sum()\ny.backward()"),
    "conv2d fwd+bwd (cuDNN)": ("c = torch.nn.Conv2d(3, 64, 3).cuda(); x = torch.randn(8, 3, 64, 64, device='cuda')\n"
                               "c(x).sum().backward()"),
    "conv2d + batchnorm fwd+bwd": ("m = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.BatchNorm2d(64)).cuda()\n"
                                   "m(torch.randn(8, 3, 64, 64, device='cuda')).sum().backward()"),
    "conv3d fwd+bwd": ("c = torch.nn.Conv3d(3, 32, 3).cuda(); x = torch.randn(2, 3, 8, 32, 32, device='cuda')\n"
                       "c(x).sum().backward()"),
    "lstm fwd+bwd (cuDNN RNN)": ("m = torch.nn.LSTM(256, 256, 2, batch_first=True).cuda()\n"
                                 "m(torch.randn(8, 64, 256, device='cuda'))[0].sum().backward()"),
    "sdpa bf16 fwd+bwd": ("q = torch.randn(2, 8, 256, 64, device='cuda', dtype=torch.bfloat16, requires_grad=True)\n"
                          "torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()"),
    "sdpa fp32 fwd+bwd": ("q = torch.randn(2, 8, 256, 64, device='cuda', requires_grad=True)\n"
                          "torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()"),
    "elementwise + softmax + layer_norm only": ("x = torch.randn(64, 1024, device='cuda', requires_grad=True)\n"
                                               "torch.nn.functional.layer_norm(x.softmax(-1), (1024,)).sum().backward()"),
    "AdamW step (foreach)": ("p = [torch.nn.Parameter(torch.randn(1024, device='cuda')) for _ in range(4)]\n"
                             "o = torch.optim.AdamW(p); [q.grad.__class__ for q in p]\n"
                             "for q in p: q.grad = torch.ones_like(q)\no.step()"),
    "gpt2 (transformers) train step": ("import transformers\n"
                                       "m = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2)).cuda()\n"
                                       "x = torch.randint(0, 50257, (2, 128), device='cuda'); "
                                       "o = torch.optim.AdamW(m.parameters())\n"
                                       "m(input_ids=x, labels=x).loss.backward(); o.step()"),
    "resnet18 (torchvision) train step bf16": ("import torchvision\n"
                                               "m = torchvision.models.resnet18().cuda(); o = torch.optim.AdamW(m.parameters())\n"
                                               "x = torch.randn(8, 3, 224, 224, device='cuda')\n"
                                               "with torch.autocast('cuda', dtype=torch.bfloat16): l = m(x).float().sum()\n"
                                               "l.backward(); o.step()"),
}

CHILD = """
import subprocess, torch, time
{code}
torch.cuda.synchronize()
out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                     capture_output=True, text=True).stdout
print("RESULT", int(out.split()[0]) << 20, torch.cuda.memory_reserved(), torch.cuda.memory_allocated())
"""


def used() -> int:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    return int(out.split()[0]) << 20


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    rows = []
    for name, code in WORKLOADS.items():
        for _ in range(a.repeat):
            before = used()
            p = subprocess.run([sys.executable, "-c", CHILD.format(code=code)], capture_output=True, text=True, timeout=120)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
            if not line:
                rows.append({"workload": name, "error": p.stderr[-800:]})
                continue
            total, reserved, allocated = map(int, line[0].split()[1:])
            rows.append({"workload": name, "gpu_used_before": before, "gpu_used": total, "reserved": reserved,
                         "allocated": allocated, "non_pytorch": total - before - reserved})
            print(name, (total - before - reserved) >> 20, "MiB outside PyTorch", flush=True)
            time.sleep(0.5)
    json.dump(rows, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
