"""A %%vram cell runs exactly as the same cell without %%vram: await, interactivity,
`;`, Out/_/history, and tracebacks (issue 11, items 17 and 18)."""

import re
import sys
import warnings

import pytest

import vramnb
from tests.conftest import run

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain_and_vram(ip, body):
    """Run ``body`` as a plain cell, then under %%vram with a first line that
    shifts nothing else: return ((result, capture), (result, capture))."""
    plain = run(ip, "\n" * 0 + body)
    measured = run(ip, "%%vram -d cpu\n" + body)
    return plain, measured


def outputs(ip, res, cap):
    """What a user sees of a cell: Out lines (numbers normalised), displayed
    values other than the vram report, and the cell's Out entry."""
    text = ANSI.sub("", cap.stdout)
    text = re.sub(r"Out\[\d+\]", "Out[N]", text)
    shown = [o.data.get("text/plain") for o in cap.outputs if not o.data.get("text/plain", "").startswith("vram [")]
    return text, shown, ip.user_ns["Out"].get(res.execution_count, "<none>"), res.result


BODY = "a = 20\na + 1\nb = a * 2\nprint('p')\nb"


@pytest.mark.parametrize("mode", ["last_expr", "all", "last", "none", "last_expr_or_assign"])
@pytest.mark.parametrize("body", [BODY, BODY + "\nc = b + 1", BODY + ";", "x = 5\nfor i in range(2):\n    i\nx"])
def test_interactivity_matches_plain_cell(ip, mode, body):
    old = ip.ast_node_interactivity
    ip.ast_node_interactivity = mode
    try:
        (pres, pcap), (vres, vcap) = plain_and_vram(ip, body)
    finally:
        ip.ast_node_interactivity = old
    assert pres.success and vres.success
    assert outputs(ip, vres, vcap) == outputs(ip, pres, pcap)
    assert vramnb.history()[-1].cell == vres.execution_count


def test_underscore_and_output_history_as_plain(ip):
    res, cap = run(ip, "%%vram -d cpu\nt = torch.ones(3)\nt.sum().item()")
    n = res.execution_count
    assert ip.user_ns["_"] == 3.0 and ip.user_ns[f"_{n}"] == 3.0 and ip.user_ns["Out"][n] == 3.0
    assert res.result == 3.0
    assert ip.history_manager.input_hist_raw[-1].startswith("%%vram")
    # the report follows the value, once
    assert ANSI.sub("", cap.stdout).count("Out[") == 1
    assert [o.data["text/plain"].startswith("vram [") for o in cap.outputs] == [True]


def test_top_level_await_and_async_comprehension(ip):
    res, cap = run(ip, "%%vram -d cpu\nimport asyncio\nawait asyncio.sleep(0)\nx = torch.ones(256)\n"
                       "[i async for i in aiter_range(3)] if False else x.numel()")
    # aiter_range is not defined: the conditional keeps the async comprehension uncalled
    assert res.success, res.error_in_exec
    assert res.result == 256 and ip.user_ns["Out"][res.execution_count] == 256
    rep = vramnb.history()[-1]
    assert rep.delta_allocated == 256 * 4 and rep.exception is None
    run(ip, "async def agen(n):\n    for i in range(n):\n        yield torch.ones(i + 1)")
    res, cap = run(ip, "%%vram -d cpu\nys = [y async for y in agen(4)]\nlen(ys)")
    assert res.success and res.result == 4
    assert vramnb.history()[-1].delta_allocated == (1 + 2 + 3 + 4) * 4


def test_await_error_is_the_cells(ip):
    res, cap = run(ip, "%%vram -d cpu\nimport asyncio\nawait asyncio.sleep(0)\n1/0")
    assert isinstance(res.error_in_exec, ZeroDivisionError) and not res.success
    assert ip.last_execution_succeeded is False
    assert vramnb.history()[-1].exception == "ZeroDivisionError"


def test_autoawait_off_gives_the_plain_syntax_error(ip):
    run(ip, "%autoawait off")
    try:
        (pres, pcap), (vres, vcap) = plain_and_vram(ip, "import asyncio\nawait asyncio.sleep(0)")
    finally:
        run(ip, "%autoawait on")
    assert type(vres.error_before_exec) is type(pres.error_before_exec) is SyntaxError
    assert vres.error_before_exec.msg == pres.error_before_exec.msg


def traceback_text(cap):
    """The traceback as shown, with cell numbers and line numbers normalised."""
    text = ANSI.sub("", cap.stdout + cap.stderr)
    text = re.sub(r"In\[\d+\]", "In[N]", text)
    text = re.sub(r"line \d+", "line L", text)
    text = re.sub(r"(?m)^(\s*(?:-+>)?\s*)\d+ ", r"\1L ", text)
    return text


def last_frames():
    tb, frames = sys.last_traceback, []
    while tb is not None:
        code = tb.tb_frame.f_code
        frames.append((code.co_name, code.co_filename.startswith("<ipython-input"), tb.tb_lineno))
        tb = tb.tb_next
    return frames


FAILING = {
    "torch op under the tracker": "a = torch.ones(2, 3)\nb = a + 1\nc = b * 2\nd = c - 1\ntorch.mm(a, d)",
    "user function": "def f(x):\n    return torch.mm(x, x)\n\n\nf(torch.ones(2, 3))",
    "chained": "try:\n    torch.ones(2, 3) @ torch.ones(2, 3)\nexcept RuntimeError as e:\n    raise ValueError('shapes') from e",
    "python error": "x = {}\ny = 1\nz = 2\nw = 3\nx['missing']",
    "module forward": "lin = torch.nn.Linear(3, 4)\nx = torch.ones(2, 5)\nq = 1\nr = 2\nlin(x)",
    "in backward": "class F(torch.autograd.Function):\n    @staticmethod\n    def forward(ctx, x):\n        return x * 2\n"
                   "    @staticmethod\n    def backward(ctx, g):\n        return torch.mm(g, g)\n\n\n"
                   "F.apply(torch.ones(3, requires_grad=True)).sum().backward()",
    "resize_": "s = torch.ones(4).untyped_storage()\nq = 1\nr = 2\nt = 3\ns.resize_(-1)",
}


@pytest.mark.parametrize("name", list(FAILING))
def test_traceback_is_the_plain_cells(ip, name):
    body = FAILING[name]
    pres, pcap = run(ip, body)
    plain = traceback_text(pcap), last_frames(), type(pres.error_in_exec)
    vres, vcap = run(ip, "%%vram -d cpu\n" + body)
    measured = traceback_text(vcap), last_frames(), type(vres.error_in_exec)
    assert vres.error_in_exec is sys.last_value and not vres.success
    assert measured[2] is plain[2]
    # same frames; the cell's own lines are one further down (the %%vram line)
    assert [(f, c) for f, c, _ in measured[1]] == [(f, c) for f, c, _ in plain[1]]
    assert [ln - (1 if c else 0) for _, c, ln in measured[1]] == [ln for _, _, ln in plain[1]]
    assert measured[0] == plain[0]
    assert "run_cell_magic" not in measured[0] and "_ops.py" not in measured[0] and "vramnb" not in measured[0]


def test_traceback_clean_under_vram_on(ip):
    body = FAILING["torch op under the tracker"]
    pres, pcap = run(ip, body)
    plain = traceback_text(pcap)
    run(ip, "%vram on -d cpu")
    res, cap = run(ip, body)
    run(ip, "%vram off")
    assert traceback_text(cap) == plain
    assert vramnb.history()[-1].exception == "RuntimeError"
    assert "showtraceback" not in vars(ip)  # the shell's own method is back


@pytest.mark.parametrize("body", ["x = (1", "def f(:\n    pass", "  x = 1\n y = 2", "return 5"])
def test_syntax_error_is_shown_as_plain(ip, body):
    pres, pcap = run(ip, body)
    vres, vcap = run(ip, "%%vram -d cpu\n" + body)
    perr = pres.error_before_exec or pres.error_in_exec
    verr = vres.error_before_exec or vres.error_in_exec
    assert type(verr) is type(perr) and isinstance(verr, SyntaxError)
    assert (vres.error_before_exec is None) == (pres.error_before_exec is None)
    assert verr.lineno == perr.lineno + 1  # the %%vram line is line 1
    assert traceback_text(vcap) == traceback_text(pcap)
    assert "vramnb" not in vcap.stdout + vcap.stderr and "run_cell_magic" not in vcap.stdout + vcap.stderr
    assert ip.last_execution_succeeded is False


def test_keyboard_interrupt_and_system_exit_as_plain(ip):
    for body in ("raise KeyboardInterrupt", "raise SystemExit(3)"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # IPython: "To exit: use 'exit', 'quit', or Ctrl-D."
            pres, pcap = run(ip, body)
            vres, vcap = run(ip, "%%vram -d cpu\n" + body)
        assert type(vres.error_in_exec) is type(pres.error_in_exec)
        assert traceback_text(vcap) == traceback_text(pcap)



def test_displaying_the_value_is_not_measured(ip):
    # formatting the value for Out[n] is IPython's work after the cell's (torch's own tensor
    # repr hides from dispatch modes, but on CUDA its temporaries reach the allocator's peak)
    run(ip, "class Costly:\n    def __repr__(self):\n        scratch = torch.ones(2**20)\n        return 'Costly'")
    res, cap = run(ip, "%%vram -d cpu\nt = torch.ones(1000)\nCostly()")
    rep = vramnb.history()[-1]
    assert "Out[" in cap.stdout and "Costly" in cap.stdout and res.result.__class__.__name__ == "Costly"
    assert rep.delta_allocated == 4000 and rep.peak_delta == 4000
    # a final loop displays as it goes (interleaved with its prints), so in place
    old = ip.ast_node_interactivity
    ip.ast_node_interactivity = "last"
    try:
        res, cap = run(ip, "%%vram -d cpu\nfor i in range(2):\n    print('p', i)\n    i")
    finally:
        ip.ast_node_interactivity = old
    assert re.sub(r"Out\[\d+\]", "Out", ANSI.sub("", cap.stdout)) == "p 0\nOut: 0\np 1\nOut: 1\n"


def test_in_a_real_kernel_await_runs_on_the_kernels_loop(tmp_path, monkeypatch):
    """ipykernel runs cells inside its own running event loop: the body's await must
    run there (a nested loop cannot), and errors must make the reply an error."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    import os
    from pathlib import Path

    root = str(Path(vramnb.__file__).resolve().parent.parent)  # the kernel imports this vramnb
    monkeypatch.setenv("PYTHONPATH", root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cells = ["import torch", "%load_ext vramnb",
             "%%vram -d cpu\nimport asyncio\nawait asyncio.sleep(0.01)\nx = torch.ones(10)\nx.sum().item()",
             "%%vram -d cpu\nawait asyncio.sleep(0)\na = torch.ones(2, 3)\ntorch.mm(a, a)"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=120, allow_errors=True, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    awaited, failed = nb.cells[2].outputs, nb.cells[3].outputs
    assert [o.output_type for o in awaited] == ["execute_result", "display_data"], awaited
    assert awaited[0].data["text/plain"] == "10.0" and awaited[1].data["text/plain"].startswith("vram [")
    assert "40 B" in awaited[1].data["text/plain"]
    errors = [o for o in failed if o.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == "RuntimeError"
    shown = ANSI.sub("", "\n".join(errors[0].traceback))
    assert "run_cell_magic" not in shown and "_ops.py" not in shown and "torch.mm(a, a)" in shown


def test_magic_called_from_code_runs_an_async_body(ip):
    res, cap = run(ip, "r = get_ipython().run_cell_magic('vram', '-d cpu -q', "
                       "'import asyncio\\nawait asyncio.sleep(0)\\nz = torch.ones(5)')\nr is None")
    assert res.success and res.result is True
    assert ip.user_ns["z"].numel() == 5 and vramnb.history()[-1].delta_allocated == 20
