"""%vram free clears the last exception's frames but never closes a generator
or coroutine that is still in use."""

from __future__ import annotations

from tests.conftest import run

GEN = """
import torch
closed = []
class Log:
    pass
log = Log()
def batches():
    i = 0
    try:
        while True:
            try:
                if i == 1:
                    raise ValueError("bad sample 1")
                yield torch.full((2,), float(i))
            except ValueError as e:
                log.error = e  # kept for later, on an object's attribute
            i += 1
    finally:
        closed.append(True)
gen = batches()
next(gen); next(gen)
"""


def test_free_does_not_close_a_suspended_generator(ip):
    run(ip, GEN)
    res = ip.run_cell("raise log.error")
    assert isinstance(res.error_in_exec, ValueError)
    run(ip, "%vram free -d cpu -q")
    assert ip.user_ns["closed"] == []
    run(ip, "nxt = next(gen)")
    assert ip.user_ns["nxt"].tolist() == [3.0, 3.0]
    assert ip.user_ns["closed"] == []
    run(ip, "gen.close()")
    assert ip.user_ns["closed"] == [True]


def test_free_does_not_close_a_suspended_coroutine(ip):
    run(ip, """
closed = []
class Log:
    pass
log = Log()
async def worker():
    try:
        try:
            raise ValueError("inside")
        except ValueError as e:
            log.error = e
        await __import__('asyncio').sleep(0)
    finally:
        closed.append(True)
co = worker()
co.send(None)  # runs to its first await
""")
    res = ip.run_cell("raise log.error")
    assert isinstance(res.error_in_exec, ValueError)
    run(ip, "%vram free -d cpu -q")
    assert ip.user_ns["closed"] == []
    run(ip, "co.close()")
    assert ip.user_ns["closed"] == [True]
