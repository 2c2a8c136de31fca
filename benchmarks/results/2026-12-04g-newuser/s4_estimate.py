"""estimate / max_batch_size / fit for cards I do not have; exact bytes; state untouched; timing."""
import sys, time, random, numpy as np, torch, warnings
warnings.filterwarnings("ignore", message="The module hierarchy")
sys.path.insert(0, '.')
import vramnb
from common import snap, diff
from models import qwen2, cnn, lstm_tied, unet
import torch.nn.functional as F
random.seed(5); np.random.seed(5)
def ex(model, opt):
    ps = {id(p): p for p in model.parameters()}
    P = sum(p.numel()*p.element_size() for p in ps.values()); return P
name, m, b, lf, opt = qwen2()
s0 = snap(m, opt); it = iter(range(5)); next(it)
t = time.perf_counter()
est = vramnb.estimate(m, b, lf, opt, target="A100 (40 GB)", recipe={"precision": "bf16", "checkpointing": "every block"})
print("estimate took", round(time.perf_counter()-t, 2), "s"); print(est)
print("fits", est.fits, "peak", est.peak_allocated, "device", est.device_memory)
print("MY COUNT params bytes", ex(m, opt), "= MiB", ex(m, opt)/2**20, "adamw state", 2*ex(m, opt), "+ 4B x", len(list(m.parameters())))
print("qwen restored after estimate:", diff(s0, snap(m, opt)), "iter", next(it))
t = time.perf_counter()
mb = vramnb.max_batch_size(m, b, lf, opt, target="RTX 4090", recipe={"precision": "bf16"}, progress=False)
print("max_batch_size took", round(time.perf_counter()-t, 2), "s"); print(mb)
print("qwen restored after max_batch_size:", diff(s0, snap(m, opt)))
t = time.perf_counter()
e8 = vramnb.estimate(m, b, lf, opt, target="H100", world_size=8, parallel="fsdp")
print("fsdp8 took", round(time.perf_counter()-t, 2), "s"); print(e8)
# bad targets / recipes
for kw in [dict(target="A100 (48 GB)"), dict(target="RTX 5090"), dict(target="24 GB"), dict(target="24"), dict(target=0),
           dict(target="T4", world_size=2, parallel="zero5"), dict(target="T4", recipe={"precision": "bf16", "micro_batches": 3})]:
    try:
        e = vramnb.estimate(m, b, lf, opt, **kw); print("OK", kw, "->", str(e).splitlines()[0])
    except Exception as ex_:
        print("ERR", kw, "->", type(ex_).__name__, ":", ex_)
print("qwen restored after everything:", diff(s0, snap(m, opt)))
# A model too big for this machine, given as a function on meta (Llama ~1.3B)
from transformers import LlamaConfig, LlamaForCausalLM
def build():
    with torch.device("meta"):
        return LlamaForCausalLM(LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5504, num_hidden_layers=22,
                                             num_attention_heads=32, num_key_value_heads=4))
ids = torch.randint(0, 32000, (4, 512))
t = time.perf_counter()
try:
    eb = vramnb.estimate(build, {"input_ids": ids, "labels": ids}, None, lambda ps: torch.optim.AdamW(ps, 1e-4), target="RTX 4090",
                         recipe={"precision": "bf16", "checkpointing": "every block"})
    print("big llama estimate took", round(time.perf_counter()-t, 1), "s"); print(eb)
    n = 32000*2048*2 + 22*(2048*2048*2 + 2048*256*2 + 3*2048*5504 + 2*2048) + 2048
    print("MY COUNT llama params", n, "fp32 bytes", 4*n, "GiB", 4*n/2**30, "; params+grads+adamw =", 16*n/2**30, "GiB")
except Exception as e:
    print("big llama ERR", type(e).__name__, e)
