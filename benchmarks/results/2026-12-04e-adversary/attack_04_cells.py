"""%%vram / %vram / %vram free on cells and namespaces of new kinds, in a base InteractiveShell.
Each check prints PASS/FAIL:
 - a class and a function defined in a %%vram cell: __module__ is __main__, an instance pickles, the function
   sees globals defined later, `global` at top level binds in the namespace;
 - a %%vram cell raising SystemExit: the namespace keeps what ran before the raise;
 - a nested %%vram (get_ipython().run_cell inside a %%vram cell); %%capture and %%time around %%vram;
 - the last value's repr is called once (display), not by vramnb; `_` and Out hold the value;
 - objects whose dunders record every call (__len__, __bool__, __eq__, __hash__, __repr__, __iter__,
   __getattr__, __class__), as names, dict values and list items: %vram, %%vram --breakdown, %vram free and
   a plain %%vram call none of them;
 - a non-leaf with retain_grad and its .grad, a leaf's .grad and hooks: unchanged by %vram, --breakdown, free."""
import pickle

import torch
import sys

from IPython.core.interactiveshell import InteractiveShell

ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "vramnb")
ok = True


def check(name, cond, detail=""):
    global ok
    ok &= bool(cond)
    print(("PASS " if cond else "FAIL ") + name + (f": {detail}" if detail and not cond else ""))


def run(src):
    r = ip.run_cell(src, store_history=True)
    return r


ip.run_cell("import torch, pickle")
r = run("%%vram -q\nclass Point:\n    def __init__(self, x): self.x = x\ndef later(): return LATER * 2\nglobal G\nG = 5\n")
run("LATER = 21")
ns = ip.user_ns
check("class from %%vram: __module__", ns["Point"].__module__ == "__main__", ns["Point"].__module__)
try:
    p = pickle.loads(pickle.dumps(ns["Point"](3)))
    check("class from %%vram pickles", p.x == 3)
except Exception as e:  # noqa: BLE001
    check("class from %%vram pickles", False, repr(e))
check("function from %%vram sees later globals", ns["later"]() == 42)
check("global at top of %%vram binds", ns.get("G") == 5)
check("function's __globals__ is the namespace", ns["later"].__globals__ is ns)

r = run("%%vram -q\nBEFORE_EXIT = 1\nraise SystemExit(3)\nAFTER = 1")
check("SystemExit in %%vram: prior statements kept", ns.get("BEFORE_EXIT") == 1 and "AFTER" not in ns)

r = run("%%vram -q\nOUTER = torch.ones(100)\nget_ipython().run_cell('%%vram -q\\nINNER = torch.ones(200)')\nOUTER2 = 1")
check("nested %%vram via run_cell", ns.get("OUTER2") == 1 and "INNER" in ns and r.error_in_exec is None, repr(r.error_in_exec))
r = run("%%capture CAP\n%%vram\nCAPT = torch.ones(10)\nprint('hello')")
check("%%capture around %%vram", "CAPT" in ns and "hello" in ns["CAP"].stdout, repr(getattr(ns.get("CAP"), "stdout", None)))
r = run("%%time\n%%vram -q\nTIMED = torch.ones(10)")
check("%%time around %%vram", "TIMED" in ns and r.error_in_exec is None, repr(r.error_in_exec))

run("class Lazy:\n    n = 0\n    def __repr__(self):\n        type(self).n += 1\n        return 'Lazy()'\nLZ = Lazy()")
r = run("%%vram -q\nLZ")
check("last value's repr called by display only (once)", ns["Lazy"].n <= 1, f"repr called {ns['Lazy'].n} times")
check("_ is the last value", ns.get("_") is ns["LZ"])

SPY = r'''
SPYLOG = []
class Spy:
    def __init__(self, name): object.__setattr__(self, "name", name)
    def _log(self, what): SPYLOG.append((object.__getattribute__(self, "name"), what))
    def __len__(self): self._log("len"); return 3
    def __bool__(self): self._log("bool"); return True
    def __eq__(self, o): self._log("eq"); return False
    def __hash__(self): self._log("hash"); return 1
    def __repr__(self): self._log("repr"); return "Spy"
    def __iter__(self): self._log("iter"); return iter([torch.ones(3)])
    def __getattr__(self, k): self._log("getattr " + k); raise AttributeError(k)
    @property
    def __class__(self): self._log("__class__"); return Spy
    def __getitem__(self, k): self._log("getitem"); return torch.ones(3)
    def keys(self): self._log("keys"); return ["a"]
    def values(self): self._log("values"); return [torch.ones(3)]
    def items(self): self._log("items"); return [("a", torch.ones(3))]
S1 = Spy("name")
SD = {"k": Spy("dict value")}
SL = [Spy("list item")]
WITH_T = (torch.zeros(1000), Spy("tuple item"))
'''
run(SPY)
ns["SPYLOG"].clear()
run("%vram")
check("%vram calls no user dunder", ns["SPYLOG"] == [], str(ns["SPYLOG"][:6]))
ns["SPYLOG"].clear()
run("%%vram -q --breakdown\nBIG = torch.ones(10000)")
check("%%vram --breakdown calls no user dunder", ns["SPYLOG"] == [], str(ns["SPYLOG"][:6]))
ns["SPYLOG"].clear()
run("%%vram -q\nBIG2 = torch.ones(10000)")
check("%%vram calls no user dunder", ns["SPYLOG"] == [], str(ns["SPYLOG"][:6]))
ns["SPYLOG"].clear()
run("%vram free")
check("%vram free calls no user dunder", ns["SPYLOG"] == [], str(ns["SPYLOG"][:6]))
ns["SPYLOG"].clear()
run("def oom_in_function():\n    local_spy = Spy('local')\n    return torch.empty(2**50)\n")
run("%%vram -q\nHUGE = torch.empty(2**50)")
run("%%vram -q --breakdown\noom_in_function()")
check("out-of-memory post-mortem calls no user dunder", ns["SPYLOG"] == [], str(sorted(set(ns["SPYLOG"]))[:6]))
ns["SPYLOG"].clear()
run("%vram on")
run("ON_CELL = torch.ones(100)")
run("%vram off")
check("%vram on cells call no user dunder", ns["SPYLOG"] == [], str(ns["SPYLOG"][:6]))

run("LEAF = torch.ones(4, requires_grad=True)\nMID = LEAF * 2\nMID.retain_grad()\nMID.sum().backward()\n"
    "HOOKS = []\nLEAF.register_hook(lambda g: HOOKS.append(1))")
g_leaf, g_mid = ns["LEAF"].grad, ns["MID"].grad
state = (g_leaf.clone(), g_mid.clone(), g_leaf._version, g_mid._version, len(ns["LEAF"]._backward_hooks))
for magic in ("%vram", "%%vram -q --breakdown\nX = 1", "%vram free"):
    run(magic)
    now = (ns["LEAF"].grad, ns["MID"].grad)
    same = now[0] is g_leaf and now[1] is g_mid and torch.equal(g_leaf, state[0]) and torch.equal(g_mid, state[1]) \
        and g_leaf._version == state[2] and g_mid._version == state[3] and len(ns["LEAF"]._backward_hooks) == state[4]
    check(f"grads/retain_grad/hooks kept by {magic.splitlines()[0]}", same)
print("ALL PASS" if ok else "SOME FAIL")
