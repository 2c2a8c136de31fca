"""Adversary round 2026-12-04e: reading the notebook must not run the user's code.

``%%vram --breakdown`` sorted the namespace's objects with ``isinstance`` and the out-of-memory
post-mortem (``diagnose._graphs_held``, "is a graph held by the failing frames?") looked for tensors
the same way: ``isinstance`` reads ``obj.__class__``, which a proxy computes in a property (a lazy
model loader builds the model there). Both ran it for each such object of the notebook's.
"""

from __future__ import annotations

from tests.conftest import run

SPY = '''
CLASS_READS = []
class Proxy:
    """A lazy proxy: its __class__ is computed (a real one would build or load the object)."""
    @property
    def __class__(self):
        CLASS_READS.append(1)
        return Proxy
P = Proxy()
HELD = {"proxy": Proxy()}
'''


def test_breakdown_and_postmortem_do_not_read_a_proxys_class(ip) -> None:  # type: ignore[no-untyped-def]
    run(ip, SPY)
    reads = ip.user_ns["CLASS_READS"]
    reads.clear()
    result, _ = run(ip, "%%vram -q --breakdown\nBIG = torch.ones(10000)")
    assert result.error_in_exec is None
    assert reads == []
    result, _ = run(ip, "%%vram -q\nHUGE = torch.empty(2**50)")  # the CPU allocator refuses: the post-mortem runs
    assert result.error_in_exec is not None
    assert reads == []
