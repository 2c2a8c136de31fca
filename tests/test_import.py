"""`import vramnb` and `%load_ext vramnb` have no side effects."""

import subprocess
import sys
import textwrap


def test_import_and_load_have_no_side_effects():
    code = textwrap.dedent(
        """
        import sys, torch
        import vramnb
        from IPython.core.interactiveshell import InteractiveShell
        ip = InteractiveShell.instance()
        ip.run_cell("%load_ext vramnb")
        bad = [m for m in ("ipywidgets", "matplotlib", "pandas") if m in sys.modules]
        assert not bad, bad
        assert not torch.cuda.is_initialized()
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("ok")


def test_import_vramnb_does_not_import_torch():
    out = subprocess.run(
        [sys.executable, "-c", "import sys, vramnb; vramnb.format_bytes(1); print('torch' in sys.modules)"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.stdout.strip() == "False", out.stderr
