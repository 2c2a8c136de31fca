"""With the garbage collector off (validation-9: dinov3's gc.disable() and batches in reference cycles), the
growth line says what keeps what no name reaches (objects in reference cycles, which nothing collects while gc is
off) and the loop-variable line does not promise that `del` frees them by itself."""

from __future__ import annotations

import gc

import vramnb
from tests.conftest import run

SETUP = ("class GSample(dict):\n    pass\n"
         "def gmake():\n    s = GSample(image=torch.ones(2**19))\n    s['parent'] = s\n    return s")
CELL = "%%vram -d cpu --breakdown\nfor it in range(4):\n    gbatch = gmake()\n    gv = gbatch['image'].sum()"


def test_a_cycle_growth_with_gc_off_says_nothing_collects_it(ip):
    run(ip, SETUP)
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            run(ip, CELL)
        notes = vramnb.history()[-1].notes
    finally:
        gc.enable()
        gc.collect()
    line = next(n for n in notes if n.startswith("each run of this cell leaves"))
    assert "the garbage collector is off (gc.disable()), so reference cycles are never freed: gc.enable(), or " \
           "gc.collect() after each step" in line, line
    loop = next(n for n in notes if n.startswith("bound in a loop and still alive after it"))
    assert "which only an explicit gc.collect() runs: the garbage collector is off (gc.disable())" in loop, loop


def test_with_gc_on_the_loop_line_says_the_next_collection(ip):
    run(ip, SETUP)
    run(ip, CELL)
    loop = next(n for n in vramnb.history()[-1].notes if n.startswith("bound in a loop and still alive after it"))
    assert "(an object in a reference cycle at the next gc.collect()), as does" in loop, loop
