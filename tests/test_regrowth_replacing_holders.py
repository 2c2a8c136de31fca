"""A holder that replaces what it kept (validation-8: forward hooks of extractors never removed, each
overwriting its own dict's entries at every forward):

* the growth line's per-run figure is the cell's growth; a holder keeping more of this run's new
  storages than that is said to keep them "of what this run made", not "more each run";
* a name bound in the loop whose tensors the hooks also keep (``feats = dict(self.features)``):
  deleting it frees nothing, so no ``del feats`` is advised; what keeps its tensors is named."""

from __future__ import annotations

import vramnb
from tests.conftest import run

MiB = 2**20

SETUP = '''import torch, torch.nn as nn
torch.manual_seed(0)
rencoder = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()).eval()
class RExtractor:
    def __init__(self, encoder, layers):
        self.encoder, self.features = encoder, {}
        for name in layers:
            encoder.get_submodule(name).register_forward_hook(self._hook(name))
    def _hook(self, name):
        def hook(module, inputs, output):
            self.features[name] = output.detach().clone()
        return hook
    def __call__(self, x):
        with torch.no_grad():
            self.encoder(x)
        return dict(self.features)
'''
CELL = '''%%vram -d cpu --breakdown
for i in range(2):
    rfe = RExtractor(rencoder, ["1", "3"])
    rfeats = rfe(torch.rand(1, 3, 128, 128))
    del rfe
'''
EACH = 8 * 128 * 128 * 4  # one layer's output: 512 KiB


def test_hooks_that_replace_their_entries_are_not_said_to_keep_their_total_more_each_run(ip):
    run(ip, SETUP)
    for _ in range(3):
        run(ip, CELL)
    line = next(x for x in vramnb.history()[-1].notes if "each run of this cell leaves" in x)
    # each run adds two extractors, each keeping two outputs: 2 MiB a run; every extractor's hooks run at each
    # forward, so at the third run all six extractors' entries (6 MiB, less rfeats's 1 MiB) are new storages
    assert "leaves 2.0 MiB more (3 runs in a row)" in line, line
    assert "more each run" not in line.split(": it keeps what each run makes")[0].split("leaves 2.0 MiB more")[1], line
    assert "of what this run made (more than the 2.0 MiB a run grows by: it replaces some of what it kept before)" \
        in line, line


def test_no_del_is_advised_for_a_loop_name_whose_tensors_hooks_keep(ip):
    run(ip, SETUP)
    run(ip, CELL)
    notes = vramnb.history()[-1].notes
    assert not any("`del rfeats`" in x for x in notes), notes
    line = next(x for x in notes if "deleting them frees nothing" in x)
    assert line.strip().startswith("bound in a loop, but deleting them frees nothing: rfeats's tensors are also kept "
                                   "by rencoder["), line
    assert "(a closure of RExtractor._hook.<locals>.hook, its `self`).features[" in line, line
    # true: deleting the name frees nothing on the CPU
    assert run(ip, "%%vram -d cpu -q\ndel rfeats\nimport gc\ngc.collect()")[0].error_in_exec is None
    assert vramnb.history()[-1].delta_allocated == 0
