"""compare of techniques on live models, plots rendered to PNG, state checked after."""
import sys, time, random, numpy as np, torch, warnings
warnings.filterwarnings("ignore", message="The module hierarchy")
sys.path.insert(0, '.')
import matplotlib; matplotlib.use("Agg")
import vramnb
from common import snap, diff
from models import qwen2, lstm_tied, cnn, t5
random.seed(3); np.random.seed(3)
name, m, b, lf, opt = qwen2()
# warm the optimizer like a real loop (one real step)
l = m(**b).loss; l.backward(); opt.step(); opt.zero_grad(); del l
s0 = snap(m, opt)
t = time.perf_counter()
cmp = vramnb.compare(m, b, lf, opt, toggles={"precision": ["fp32", "bf16"], "checkpointing": ["off", "every block"],
                                             "optimizer": ["yours", "SGD momentum", "Adafactor"]}, progress=False)
print("compare took", round(time.perf_counter()-t, 1), "s"); print(cmp)
print("restored after compare:", diff(s0, snap(m, opt)))
fig = cmp.plot(); fig.savefig("p_qwen_compare.png", dpi=80, bbox_inches="tight")
rep = vramnb.profile_step(m, b, lf, opt)
for kind in [None, "timeline", "sources"]:
    f = rep.plot() if kind is None else rep.plot(kind)
    f.savefig(f"p_qwen_profile_{kind or 'phases'}.png", dpi=80, bbox_inches="tight")
print("restored after profile+plots:", diff(s0, snap(m, opt)))
# bad toggle values: are errors clear?
for bad in [{"precision": ["fp32", "bf17"]}, {"checkpointing": ["off", "every 3rd block"]}, {"optimzer": ["yours"]},
            {"precision": ["fp32", "fp16"]}, {"optimizer": ["yours", "AdamW 8-bit"]}, {"lora": ["off", "r=8"]}]:
    try:
        c = vramnb.compare(m, b, lf, opt, toggles=bad, progress=False); print("OK", bad); print(c)
    except Exception as e:
        print("ERR", bad, "->", type(e).__name__, ":", e)
print("restored after the bad toggles:", diff(s0, snap(m, opt)))
# LSTM tied: checkpointing / micro-batches / offload, eval-mode check
name, m2, b2, lf2, opt2 = lstm_tied()
s2 = snap(m2, opt2)
c2 = vramnb.compare(m2, b2, lf2, opt2, toggles={"micro_batches": [1, 4], "activation_offload": ["off", "CPU"], "checkpointing": ["off", "every block"]}, progress=False)
print(c2); print("lstm restored:", diff(s2, snap(m2, opt2)))
c2.plot().savefig("p_lstm_compare.png", dpi=80, bbox_inches="tight")
# T5 encoder-decoder: blocks auto, freeze, lora
name, m3, b3, lf3, opt3 = t5()
s3 = snap(m3, opt3)
c3 = vramnb.compare(m3, b3, lf3, opt3, toggles={"checkpointing": ["off", "every block"], "freeze": ["none", "embeddings", "all but the last block"], "lora": ["off", "r=8"]}, progress=False)
print(c3); print("t5 restored:", diff(s3, snap(m3, opt3)))
