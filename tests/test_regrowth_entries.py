"""The growth line names the entry that grows (validation-8: ``inference grew by 16.0 MiB ... see %vram`` where
``inference._model_bank``, a list the object appends a model copy to every round, is what grew): an entry that
was there before and grew by as much as its name is named, with the advice for its kind; an entry new this run
(``grow[2]`` of a list appended to) is not."""

from __future__ import annotations

import vramnb
from tests.conftest import run


def test_a_list_attribute_appended_to_every_run_is_named_with_its_advice(ip):
    run(ip, "class EBank:\n    def __init__(self):\n        self.net = torch.nn.Linear(64, 64)\n"
            "        self._bank = []\n    def round(self):\n        import copy\n"
            "        self._bank.append(copy.deepcopy(self.net))\nebank = EBank()")
    for _ in range(3):
        run(ip, "%%vram -d cpu\nebank.round()")
    line = next(n for n in vramnb.history()[-1].notes if n.startswith("each run of this cell leaves"))
    each = (64 * 64 + 64) * 4
    assert line == (f"each run of this cell leaves {vramnb.format_bytes(each)} more (3 runs in a row): ebank._bank grew "
                    f"by {vramnb.format_bytes(each)}: it keeps what each run makes (ebank._bank is added to on every run: "
                    "empty it when done (ebank._bank.clear()) or store less in it)"), line


def test_a_deleted_name_is_freed_after_the_growth_check_ran(ip):
    """The check's closure over the notebook's names holds no cycle: `del` frees at once."""
    run(ip, "egrow = []")
    for _ in range(3):
        run(ip, "%%vram -d cpu\negrow.append(torch.ones(2**16))")
    run(ip, "%%vram -d cpu\ndel egrow")
    assert vramnb.history()[-1].delta_allocated == -3 * 2**16 * 4
