# `%vram free` clears the frames of the last exception unless "the user holds" it, judged one level deep
# (a notebook variable, or an item of a list/tuple/dict/set there). An exception kept as
# failures.append((cfg, err)) - a list of tuples - is two levels deep: %vram free wipes the locals of its
# frames, which the user kept the exception for (post-mortem inspection of the failed run).
from IPython.testing.globalipapp import start_ipython
ip = start_ipython(); ip.run_line_magic("load_ext", "vramnb")
ip.run_cell('''
import torch
failures = []
def train(cfg):
    lr = cfg["lr"]; state = {"step": 17, "loss": float("nan")}
    raise FloatingPointError("loss is nan")
for cfg in [{"lr": 1.0}]:
    try:
        train(cfg)
    except FloatingPointError as err:
        failures.append((cfg, err))        # keep the failed run to inspect later
        raise
''', store_history=True)
def frame_locals():
    err = ip.user_ns["failures"][0][1]
    tb = err.__traceback__
    while tb.tb_next is not None: tb = tb.tb_next
    return dict(tb.tb_frame.f_locals)
before = frame_locals()
ip.run_line_magic("vram", "free")
after = frame_locals()
print("locals of the kept exception's failing frame before:", sorted(before), "after:", sorted(after))
print("PASS" if before.keys() == after.keys() else "FAIL: %vram free erased the locals of an exception the user keeps")
