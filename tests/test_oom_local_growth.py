"""A list a failing function of the user's adds to at every step (validation-9: a decoding loop kept every step's
logits although it returned them only when output_scores was set): named with its bytes, and where its other reads
all lie under one flag, the fix is to add to it only then."""

from __future__ import annotations

import dataclasses

from tests.conftest import measured_oom, run
from vramnb.diagnose import verdict

CELL = ("def tdecode(n, keep_all=False):\n    kept = []\n    for t in range(n):\n"
        "        kept.append(torch.ones(2**18))\n    big = torch.zeros(1).expand(2**40).clone()\n"
        "    return kept if keep_all else None")


def _whats(oom):  # type: ignore[no-untyped-def]
    return [f.what for f in verdict(dataclasses.replace(oom.state, cap=2**60, cap_room=0, cap_name="RLIMIT_AS",
                                                        available=8 << 30)).fixes]


def test_a_local_list_used_only_under_a_flag_gets_append_only_then(ip):
    run(ip, CELL)
    oom, _ = measured_oom(ip, "tout = tdecode(64)")
    whats = _whats(oom)
    line = [w for w in whats if w.startswith("kept, which tdecode adds to at every step, keeps 64.0 MiB (")]
    assert line and line[0].endswith(" % of what is allocated): it grows with the number of steps, whatever the batch; "
                                     "it is used only where keep_all is set: add to it only then "
                                     "(`if keep_all: kept.append(...)`), and with keep_all off it keeps nothing"), whats


def test_a_local_list_read_otherwise_gets_keep_less(ip):
    run(ip, CELL.replace("    return kept if keep_all else None", "    return torch.stack(kept)").replace("tdecode",
                                                                                                     "tdecode2"))
    oom, _ = measured_oom(ip, "tout2 = tdecode2(64)")
    whats = [w for w in _whats(oom) if w.startswith("kept, which tdecode2 adds to")]
    assert whats and whats[0].endswith("; keep less in it per step (reduced values, or each step's tensor on the "
                                       "CPU), or fewer steps"), whats
