# `%vram free` empties IPython's output dict in place (oh.clear()); a notebook variable bound to it
# (`results = Out`, a user's own name for the outputs) is emptied with it, though _free.py says
# "Only IPython's own references are released: a _oh/Out the user rebound ... stay as they are".
from IPython.testing.globalipapp import start_ipython
ip = start_ipython(); ip.run_line_magic("load_ext", "vramnb")
ip.run_cell("import torch", store_history=True)
ip.run_cell("torch.ones(3).sum()", store_history=True)
ip.run_cell("results = Out   # keep every output under my own name", store_history=True)
n0 = len(ip.user_ns["results"])
ip.run_line_magic("vram", "free")
n1 = len(ip.user_ns["results"])
print("entries in the user's `results`:", n0, "->", n1)
print("PASS" if n1 >= n0 else "FAIL: %vram free emptied a dict the user keeps under their own name")
