#!/usr/bin/env bash
# The package as a user and a packager get it, after the test suites (README's test command calls this;
# it needs the test command's .venv). What it checks, each step failing the run:
#   1. the sdist and the wheel build (python -m build, isolated: setuptools from pyproject's floor up)
#      and pass `twine check --strict`; LICENSE is in both; the sdist holds every tracked file its
#      tests read (tests/, notebooks/, docs/, binder/, tools/, the root conftest.py, benchmarks' code);
#   2. a fresh venv with torch alone (hard links to .venv's files, copies across filesystems: .ci/venv_from.py), where pip installs
#      the wheel and pytest: an IPython session runs %load_ext vramnb, %%vram (exactly +256.0 MiB for
#      torch.ones(2**26)), %vram and %unload_ext; then the core tests run there without any extra
#      (no matplotlib, ipywidgets or pandas: tests/test_extras.py meets them missing for real);
#   3. the same venv with ipykernel, nbclient and transformers added: notebooks/00_quickstart.ipynb
#      executed from outside the checkout, its kernel importing the installed wheel;
#   4. a venv with .venv's packages but vramnb, where `pip install vramnb-*.tar.gz[test]` installs
#      vramnb alone; in the unpacked sdist every test collects and a few run.
# Everything goes to a temporary folder (setuptools leaves build/ and vramnb.egg-info/, both ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PY=$root/.venv/bin/python
t0=$SECONDS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step() { echo "== package-checks [$((SECONDS - t0)) s]: $*"; }
export PIP_DISABLE_PIP_VERSION_CHECK=1

step "1. build, twine check, contents"
"$PY" -m build -q -o "$work/dist" . > "$work/build.log" 2>&1 || { tail -n 30 "$work/build.log"; exit 1; }
"$root/.venv/bin/twine" check --strict "$work"/dist/*
"$PY" - "$work/dist" <<'EOF'
import pathlib, subprocess, sys, tarfile, zipfile
dist = pathlib.Path(sys.argv[1])
(sdist,), (wheel,) = dist.glob("*.tar.gz"), dist.glob("*.whl")
with tarfile.open(sdist) as t:
    top = t.getnames()[0].split("/")[0]
    in_sdist = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
with zipfile.ZipFile(wheel) as z:
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in z.namelist()), "no LICENSE in the wheel"
    assert not any(n.startswith(("tests/", "notebooks/", "benchmarks/")) for n in z.namelist()), "tests in the wheel"
assert "LICENSE" in in_sdist, "no LICENSE in the sdist"
tracked = subprocess.run(["git", "ls-files", "-z", "--", "tests", "notebooks", "docs", "binder", "tools", "conftest.py",
                          "benchmarks", ":!benchmarks/results"], capture_output=True, check=True).stdout.decode().split("\0")
missing = sorted(f for f in tracked if f and f not in in_sdist)
assert not missing, f"tracked files the sdist lacks (MANIFEST.in): {missing}"
print(f"{sdist.name}: {len(in_sdist)} files, every one of the {len(tracked) - 1} tracked files its tests read; "
      f"{wheel.name}: LICENSE, no tests")
EOF

step "2. the wheel in a fresh venv: an IPython session, then the core tests without extras"
"$PY" .ci/venv_from.py "$work/wheel-venv" --only torch pip
W=$work/wheel-venv/bin/python
"$W" -m pip install -q "$work"/dist/*.whl pytest
"$W" -m pip check
cd "$work"  # not the checkout: the session imports the installed wheel
"$W" - <<'EOF'
import importlib.util, sys
from IPython.core.interactiveshell import InteractiveShell
from IPython.utils.capture import capture_output
ip = InteractiveShell.instance()
def cell(code):
    with capture_output() as cap:
        res = ip.run_cell(code, store_history=True)
    assert res.success, (code, res.error_before_exec or res.error_in_exec, cap.stderr)
    return "".join(o.data.get("text/plain", "") for o in cap.outputs) + cap.stdout
cell("%load_ext vramnb")
import vramnb
assert vramnb.__file__.startswith(sys.prefix), vramnb.__file__
out = cell("%%vram -d cpu\nimport torch\nx = torch.ones(2**26)")
assert "+256.0 MiB" in out, out
assert vramnb.history()[-1].delta_allocated == 2**28
out = cell("%vram -d cpu")
assert "x " in out and "256.0 MiB" in out, out
cell("%unload_ext vramnb")
assert "vram" not in ip.magics_manager.magics["cell"]
extras = [m for m in ("matplotlib", "ipywidgets", "pandas") if importlib.util.find_spec(m)]
assert not extras, f"a plain install brought {extras}"
print(f"vramnb {vramnb.__version__} from {vramnb.__file__}: %load_ext, %%vram +256.0 MiB, %vram, %unload_ext; no extras")
EOF
cd "$root"
"$W" -m pytest -q -o addopts="" -p no:cacheprovider -ra --strict-markers --doctest-modules \
    vramnb tests/test_extras.py tests/test_import.py

step "3. the quickstart notebook with the installed wheel"
"$PY" .ci/venv_from.py "$work/wheel-venv" --add ipykernel nbclient nbformat transformers
"$W" -m pip check
mkdir "$work/qs" && cd "$work/qs"
JUPYTER_DATA_DIR=$work/qs/jupyter JUPYTER_PATH='' "$W" - "$root/notebooks/00_quickstart.ipynb" <<'EOF' 2>&1 \
    | grep -v "Kernel is running over TCP"
import sys, time
import nbclient, nbformat
nb = nbformat.read(sys.argv[1], as_version=4)
nb.cells.insert(0, nbformat.v4.new_code_cell(  # where the kernel's vramnb comes from
    f"import sys, vramnb\nassert sys.prefix == {sys.prefix!r}, sys.prefix\n"
    f"assert vramnb.__file__.startswith(sys.prefix), vramnb.__file__"))
t = time.monotonic()
nbclient.NotebookClient(nb, timeout=600, kernel_name="python3").execute()  # raises on an untagged error
code = [c for c in nb.cells if c.cell_type == "code"]
failed = sum(any(o.output_type == "error" for o in c.outputs) for c in code)
tagged = sum("raises-exception" in c.metadata.get("tags", []) for c in code)
assert failed == tagged, (failed, tagged)
print(f"00_quickstart.ipynb: {len(code)} cells ran ({tagged} raising as tagged) in {time.monotonic() - t:.1f} s")
EOF
cd "$root"

step "4. pip install the sdist [test], its tests from the unpacked sdist"
"$PY" .ci/venv_from.py "$work/sdist-venv" --except vramnb
S=$work/sdist-venv/bin/python
sdist=$(ls "$work"/dist/*.tar.gz)
"$S" -m pip install -q "$sdist[test]"
"$S" -m pip check
mkdir "$work/sdist" && tar xzf "$sdist" -C "$work/sdist"
cd "$work"/sdist/vramnb-*/
"$S" -m pytest -q --collect-only > "$work/collect.log" || { tail -n 30 "$work/collect.log"; exit 1; }
tail -n 1 "$work/collect.log"
"$S" -m pytest -q tests/test_package.py tests/test_notebooks.py  # collection above imported every test module
cd "$root"
step "done"
