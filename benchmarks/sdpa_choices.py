"""Which backend scaled_dot_product_attention picks on this GPU (torch._fused_sdp_choice),
over dtype, causal, dropout, mask, head size and GQA: the table vramnb's estimate models."""
import itertools
import json
import sys

import torch
names = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable", -1: "error"}
rows = []
for dtype, causal, dropout, mask, d, gqa, grad in itertools.product(
        (torch.float32, torch.bfloat16, torch.float16), (False, True), (0.0, 0.1), (False, True), (64, 128, 80, 256),
        (False, True), (True, False)):
    q = torch.randn(2, 8, 128, d, device="cuda", dtype=dtype, requires_grad=grad)
    hk = 2 if gqa else 8
    k = torch.randn(2, hk, 128, d, device="cuda", dtype=dtype, requires_grad=grad)
    v = torch.randn(2, hk, 128, d, device="cuda", dtype=dtype, requires_grad=grad)
    m = torch.ones(128, 128, device="cuda", dtype=torch.bool).tril() if mask else None
    if mask and causal:
        continue
    try:
        c = torch._fused_sdp_choice(q, k, v, attn_mask=m, dropout_p=dropout, is_causal=causal, enable_gqa=gqa)
    except Exception:
        c = -1
    rows.append({"dtype": str(dtype).split(".")[-1], "causal": causal, "dropout": dropout, "mask": mask, "head": d,
                 "gqa": gqa, "grad": grad, "choice": names.get(c, c)})
json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "rows": rows}, open(sys.argv[1], "w"), indent=0)
for r in rows:
    if r["grad"] and r["head"] in (64, 80):
        print(r)
