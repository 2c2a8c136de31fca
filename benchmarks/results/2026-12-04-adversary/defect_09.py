# %vram (and %%vram --breakdown) call isinstance(obj, torch.nn.Module) on every notebook value
# (diagnose/_kept_graphs.py grad_graph_note / kept_graph_note), which reads __class__: a lazy proxy
# (django SimpleLazyObject / werkzeug LocalProxy pattern) builds its model, and a MagicMock(spec=Module)
# records named_parameters()/parameters() calls. vramnb's own walk avoids exactly this (_graph.py: "type(), not
# isinstance: ... a mock with a spec, a proxy or a lazy object answers by pretending").
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
ip.run_line_magic("load_ext", "vramnb")
ip.run_cell('''
import torch
from unittest import mock
LOADS = []
class Lazy:
    def __init__(self, factory): object.__setattr__(self, "_f", factory); object.__setattr__(self, "_w", None)
    def _load(self):
        if object.__getattribute__(self, "_w") is None:
            object.__setattr__(self, "_w", object.__getattribute__(self, "_f")())
        return object.__getattribute__(self, "_w")
    @property
    def __class__(self): return type(self._load())
    def __getattr__(self, k): return getattr(self._load(), k)
def build():
    LOADS.append("built"); return torch.nn.Linear(1000, 1000)   # a big checkpoint in real life
lazy_model = Lazy(build)
m = mock.MagicMock(spec=torch.nn.Module)
x = torch.ones(10)
''')
ip.run_line_magic("vram", "")
loads, calls = ip.user_ns["LOADS"], ip.user_ns["m"].mock_calls
print("lazy model built by %vram:", loads, "| mock calls recorded:", calls)
print("PASS" if not loads and not calls else "FAIL: %vram ran the user's lazy factory and recorded calls on the user's mock")
