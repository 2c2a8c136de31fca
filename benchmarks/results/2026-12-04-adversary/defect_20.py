# With `%vram on`, each cell starts with vramnb's scan of live tensors (seconds at 1e6 tensors) inside
# IPython's pre_run_cell callback. A Ctrl-C landing there is caught by IPython's event manager
# ("Error in callback"), and the cell the user tried to stop RUNS ANYWAY (its code executes, the cell
# reports success); post_run_cell then fails too (AttributeError: 'NoneType' object has no attribute 'report').
# The Ctrl-C is simulated by a hook on the scan (raising KeyboardInterrupt as SIGINT would there).
import io, contextlib
from IPython.testing.globalipapp import start_ipython
ip = start_ipython(); ip.run_line_magic("load_ext", "vramnb")
ip.run_cell("import torch; x = torch.ones(10)")
ip.run_line_magic("vram", "on")
import vramnb._tracker as T
orig = T.StorageTracker.scan
armed = [True]
def scan(self, *a, **k):
    if armed[0] and k.get("block_starts"):
        armed[0] = False
        raise KeyboardInterrupt
    return orig(self, *a, **k)
T.StorageTracker.scan = scan
buf = io.StringIO()
with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
    r = ip.run_cell("ran = 'yes: the interrupted cell ran'", store_history=True)
T.StorageTracker.scan = orig
print("ran =", ip.user_ns.get("ran"), "| cell success:", r.success, "| error_in_exec:", repr(r.error_in_exec))
print("AttributeError in post_run_cell printed:", "has no attribute 'report'" in buf.getvalue())
print("PASS" if "ran" not in ip.user_ns else "FAIL: Ctrl-C at a measured cell's start did not stop the cell; it ran")
