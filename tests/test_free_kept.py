"""%vram free releases only what IPython alone holds: an exception, traceback, frame or output
dict that anything else refers to, at any depth, stays whole, and the report says who keeps it."""

from __future__ import annotations

import sys

from tests.conftest import run

EXC = "last exception (traceback frames)"
OUT = "output history (Out, _, __, ___)"
MIB4 = 4 * 2**20  # torch.ones(2**20) float32


def _last_frame_locals(exc: BaseException) -> dict:
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return dict(tb.tb_frame.f_locals)


def _free(ip):  # type: ignore[no-untyped-def]
    run(ip, "%vram free -d cpu -q -o fr")
    fr = ip.user_ns.pop("fr")
    return dict(fr.freed), dict(fr.kept), fr._table().to_text()


TRAIN = ("def train(cfg):\n    lr = cfg['lr']; state = torch.ones(2**20)\n"
         "    raise FloatingPointError('loss is nan')\n")


def test_an_exception_kept_in_a_list_of_tuples_keeps_its_frames(ip):
    run(ip, TRAIN + "failures = []\nfor cfg in [{'lr': 1.0}]:\n    try:\n        train(cfg)\n"
                    "    except FloatingPointError as err:\n        failures.append((cfg, err))\n        raise")
    freed, kept, text = _free(ip)
    assert freed[EXC] == 0
    assert sorted(_last_frame_locals(ip.user_ns["failures"][0][1])) == ["cfg", "lr", "state"]
    assert "kept by your variable failures" in kept[EXC] and "not released" in text
    assert not hasattr(sys, "last_value")  # IPython's own reference is gone


def test_an_exception_kept_on_an_attribute_or_deep_in_a_dict_keeps_its_frames(ip):
    run(ip, TRAIN + "class Run:\n    pass\nr = Run()\nlog = {'runs': {'a': [None]}}\n"
                    "try:\n    train({'lr': 1})\nexcept FloatingPointError as e:\n"
                    "    r.error = e\n    log['runs']['a'][0] = e\n    raise")
    freed, kept, _ = _free(ip)
    assert freed[EXC] == 0 and "state" in _last_frame_locals(ip.user_ns["r"].error)
    assert "your variable" in kept[EXC]


def test_an_exception_a_logging_handler_keeps_stays(ip):
    run(ip, TRAIN + "import logging\nclass Keep(logging.Handler):\n    def __init__(self):\n"
                    "        super().__init__(); self.records = []\n    def emit(self, record):\n"
                    "        self.records.append(record)\nh = Keep()\nlg = logging.getLogger('vramnb-test-kept')\n"
                    "lg.addHandler(h); lg.propagate = False\ndel h\n"
                    "try:\n    train({'lr': 1})\nexcept FloatingPointError:\n    lg.exception('failed')\n    raise")
    freed, kept, _ = _free(ip)
    rec = ip.user_ns["lg"].handlers[0].records[0]
    assert freed[EXC] == 0 and "state" in _last_frame_locals(rec.exc_info[1])
    ip.user_ns["lg"].handlers.clear()


def test_only_the_frames_a_kept_inner_exception_reaches_stay(ip):
    """The user keeps the inner exception; IPython alone holds the outer one chained to it: the
    frame only the outer reaches (fail, 4 MiB local) is cleared, the inner's frames stay."""
    run(ip, "kept = []\n"
            "def inner():\n    deep = torch.ones(2**20)\n    raise KeyError('k')\n"
            "def fail():\n    own = torch.ones(2**20)\n    raise ValueError('v')\n"
            "def mid():\n    try:\n        inner()\n    except KeyError as e:\n        kept.append(e)\n        fail()\n")
    run(ip, "mid()")
    freed, kept, _ = _free(ip)
    assert freed[EXC] == MIB4  # fail's `own`
    assert "deep" in _last_frame_locals(ip.user_ns["kept"][0])
    assert "the KeyError kept by your variable kept" in kept[EXC]


def test_a_frame_the_user_kept_keeps_its_locals(ip):
    run(ip, "import inspect\nframes = []\ndef g():\n    big = torch.ones(2**20)\n"
            "    frames.append(inspect.currentframe())\n    raise ValueError('x')")
    run(ip, "g()")
    freed, _, _ = _free(ip)
    assert freed[EXC] == 0 and ip.user_ns["frames"][0].f_locals["big"].numel() == 2**20


def test_a_copy_of_sys_last_value_in_a_list_keeps_its_frames(ip):
    run(ip, "def g():\n    big = torch.ones(2**20)\n    raise ValueError('x')")
    run(ip, "g()")
    run(ip, "import sys\nsaved = {'errs': [(1, sys.last_value)]}")
    freed, kept, _ = _free(ip)
    assert freed[EXC] == 0 and "your variable saved" in kept[EXC]


def test_the_output_dict_bound_to_the_users_name_stays_whole(ip):
    run(ip, "torch.zeros(2**18)")  # displayed: Out, _ and _N hold it
    run(ip, "results = Out")
    n = len(ip.user_ns["results"])
    freed, kept, text = _free(ip)
    assert len(ip.user_ns["results"]) == n == 1 and ip.history_manager.output_hist is ip.user_ns["results"]
    assert freed[OUT] == 0  # the user's `results` still holds the tensor
    assert "kept by your variable results" in kept[OUT] and "output history" in text


def test_the_output_dict_aliased_through_globals_stays_whole(ip):
    run(ip, "torch.zeros(2**18)")
    run(ip, "globals()['mine'] = [Out]")
    freed, kept, _ = _free(ip)
    assert len(ip.user_ns["mine"][0]) == 1 and freed[OUT] == 0
    assert "your variable mine" in kept[OUT]


def test_ipythons_own_output_dict_and_exception_still_go(ip):
    run(ip, "def g():\n    big = torch.ones(2**20)\n    raise ValueError('x')")
    run(ip, "g()")
    run(ip, "torch.zeros(2**18)")
    freed, kept, _ = _free(ip)
    assert freed[EXC] == MIB4 and freed[OUT] == 2**20 and kept == {}
    assert ip.history_manager.output_hist == {}


def test_a_kept_member_of_an_exception_group_keeps_the_frames_it_reaches(ip):
    """The user keeps the KeyError that became a member of IPython's ExceptionGroup: its frames
    (a's and grp's, which caught it, with grp's 4 MiB `own`) stay; nothing is freed."""
    run(ip, "kept = []\ndef a():\n    inner_big = torch.ones(2**20)\n    raise KeyError('k')\n"
            "def grp():\n    errs = []\n    try:\n        a()\n    except KeyError as e:\n"
            "        kept.append(e); errs.append(e)\n    own = torch.ones(2**20)\n    raise ExceptionGroup('g', errs)")
    run(ip, "grp()")
    freed, kept, _ = _free(ip)
    assert freed[EXC] == 0 and "the KeyError kept by your variable kept" in kept[EXC]
    assert "inner_big" in _last_frame_locals(ip.user_ns["kept"][0])


def test_after_debug_the_exception_is_still_ipythons_and_goes(ip, monkeypatch):
    import io

    from IPython.utils.capture import capture_output

    run(ip, "def g():\n    big = torch.ones(2**20)\n    raise ValueError('x')")
    run(ip, "g()")
    monkeypatch.setattr(sys, "stdin", io.StringIO("q\n"))
    with capture_output():
        ip.run_line_magic("debug", "")
    freed, kept, _ = _free(ip)
    assert freed[EXC] == MIB4 and kept == {}


def test_finished_callers_the_traceback_keeps_are_part_of_it_not_holders(ip):  # type: ignore[no-untyped-def]
    """A traceback's frame keeps the frames it was called from (``f_back``), finished or not; on Python
    3.12 IPython's ``run_code``/``run_cell_async`` of the failed cell are such frames and refer to its
    ``ExecutionResult``. What only they (and the exception's own parts) reach is not held by anyone."""
    import types

    from vramnb._referrers import Slots, outside_referrers

    def top():  # type: ignore[no-untyped-def]
        box: list = []

        def mid():  # type: ignore[no-untyped-def]
            try:
                raise ValueError("x")
            except ValueError as e:
                box.append(e)  # box: top's, reached only through top's finished frame and mid's closure
                return e

        return mid()

    err = top()
    tb = err.__traceback__
    frame = tb.tb_frame
    assert type(frame.f_back) is types.FrameType and frame.f_back.f_code.co_name == "top"
    assert outside_referrers([err, tb, frame], Slots(ip)) == {}
    # the same object kept by a notebook name is held
    ip.user_ns["kept_err"] = [err]
    try:
        held = outside_referrers([err, tb, frame], Slots(ip))
        assert id(err) in held
    finally:
        del ip.user_ns["kept_err"]
