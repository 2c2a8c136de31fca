"""profile_distributed's forked ranks run the user's code, which shares the notebook's open files: a rank that
reads or seeks one (a dataset's file handle) must move no offset of the notebook's (adversary round f)."""
from __future__ import annotations

import os

import torch
import torch.nn as nn

from vramnb import profile_distributed

FILE: dict[str, int] = {}


def reads_a_shared_file(rank: int, world: int):
    fd = FILE["fd"]
    os.lseek(fd, 0, os.SEEK_SET)
    os.read(fd, 7)  # the rank's read: in the notebook's process the offset stays at 3
    torch.manual_seed(rank)
    model = torch.nn.parallel.DistributedDataParallel(nn.Linear(8, 2))
    return model, torch.randn(4, 8), (lambda m, b: m(b).pow(2).mean()), torch.optim.SGD(model.parameters(), lr=0.1)


def test_a_ranks_reads_move_no_offset_of_the_notebooks_open_file(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"0123456789")
    fd = os.open(path, os.O_RDONLY)
    try:
        os.lseek(fd, 3, os.SEEK_SET)
        FILE["fd"] = fd
        report = profile_distributed(reads_a_shared_file, 2, backend="gloo", timeout=240)
        assert [r.status for r in report.ranks] == ["ok", "ok"]
        assert os.lseek(fd, 0, os.SEEK_CUR) == 3
        assert os.read(fd, 2) == b"34"
    finally:
        os.close(fd)
