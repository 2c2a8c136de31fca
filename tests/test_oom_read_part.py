"""Only part of the failing line's result is read (validation-8: the LM head over every prompt position
where the next token needs the last; log-probabilities of every position where the loss reads the
completion's): the part, its shape and share, from meta shapes; code where the index moves onto the
input of a position-wise operation, and it runs as printed with the later lines unchanged."""

from __future__ import annotations

import dataclasses

import torch

from tests.conftest import measured_oom, run
from vramnb.diagnose import verdict


def _fixes(oom):  # type: ignore[no-untyped-def]
    return verdict(dataclasses.replace(oom.state, cap=2**60, cap_room=0, cap_name="RLIMIT_AS",
                                       available=8 << 30)).fixes


def test_the_last_positions_logits_of_a_linear_head_move_onto_its_input(ip):
    run(ip, "torch.manual_seed(0)\nphead = torch.nn.Linear(8, 1000, bias=False)\n"
            "phidden = torch.zeros(1, 1, 8).expand(1, 2**36, 8)")
    oom, _ = measured_oom(ip, "with torch.no_grad():\n    plogits = phead(phidden)\n"
                              "    pnext = plogits[:, -1, :].argmax(-1)")
    fix = [f for f in _fixes(oom) if f.what.startswith("only `plogits[:, -1, :]`")]
    assert len(fix) == 1, [f.what for f in _fixes(oom)]
    assert fix[0].what.startswith("only `plogits[:, -1, :]` (1, 1000) of plogits (1, 68719476736, 1000) is read after "
                                  "this line (1/68,719,476,736 of it: 3.9 KiB of 250.0 TiB)")
    assert fix[0].code == "plogits = phead(phidden[:, -1:])  # later reads of `plogits[:, -1, :]` stay as they are"
    # as printed, on a small hidden state: the later line reads the same next token
    head, hidden = torch.nn.Linear(8, 50, bias=False), torch.randn(2, 7, 8)
    ns = {"phead": head, "phidden": hidden}
    exec(fix[0].code, ns)  # noqa: S102 - the printed code
    assert torch.equal(ns["plogits"][:, -1, :], head(hidden)[:, -1, :])


def test_a_slice_of_the_completion_names_the_models_logits_to_keep_and_gives_no_code(ip):
    run(ip, "class PLM(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            "        self.head = torch.nn.Linear(4, 4)\n"
            "    def forward(self, ids, logits_to_keep=0):\n        return self.head(ids)\n"
            "pmodel = PLM()\npids = torch.zeros(4, 8, 4)\nplen = 6")
    oom, _ = measured_oom(ip, "plog = pmodel(pids)\n"
                              "plp = plog.sum(-1, keepdim=True).expand(4, 8, 2**42).log_softmax(-1)\n"
                              "ploss = -plp[:, plen - 1:].mean()")
    fix = [f for f in _fixes(oom) if f.what.startswith("only `plp[:, plen - 1:]`")]
    assert len(fix) == 1, [f.what for f in _fixes(oom)]
    assert "(4, 3, 4398046511104) of plp (4, 8, 4398046511104) is read after this line (37.5 % of it" in fix[0].what
    assert fix[0].what.endswith("; pmodel's forward takes logits_to_keep: pmodel(..., logits_to_keep=N) makes the "
                                "logits of the last N positions only")
    assert fix[0].code == ""  # a slice from the start of the completion: taking it twice is not the same


def test_a_result_read_whole_somewhere_gets_no_such_line(ip):
    run(ip, "phead2 = torch.nn.Linear(8, 1000, bias=False)\nphid2 = torch.zeros(1, 1, 8).expand(1, 2**36, 8)")
    oom, _ = measured_oom(ip, "with torch.no_grad():\n    pl2 = phead2(phid2)\n    pa = pl2[:, -1, :]\n"
                              "    pb = pl2.mean()")
    assert not any(f.what.startswith("only `") for f in _fixes(oom))
