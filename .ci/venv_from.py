"""Make a venv whose packages are hard links to another venv's installed files (as uv installs).

    SRC/bin/python .ci/venv_from.py DEST --only torch pip      # those distributions and what they require
    SRC/bin/python .ci/venv_from.py DEST --except vramnb       # every distribution but those
    SRC/bin/python .ci/venv_from.py DEST --add nbclient        # into DEST as it is: those not there yet

Run it with the source venv's python. DEST is a new venv (``--without-pip``; with ``--add``, an
existing one, where distributions it already has are left as they are) whose site-packages
gets, for each chosen distribution, every file its RECORD lists there (its ``.dist-info``
included), hard-linked: the same files pip extracted from the same wheels, so pip in DEST sees
them installed and downloads nothing for them, in about a second instead of the 37 s that
``pip install torch`` took into a fresh venv on the 2-core CI machine (on another filesystem,
where no hard link can be made, the files are copied). Console scripts (outside
site-packages) are left out. Nothing in SRC changes: pip removes a file before it writes one
(``ZipBackedFile.save``), and Python replaces a stale ``.pyc`` rather than writing into it.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requires(dist: md.Distribution) -> list[str]:
    """The names ``dist`` requires here (no extras; markers evaluated where ``packaging`` is installed)."""
    try:
        from packaging.requirements import Requirement
    except ImportError:  # then only unconditional requirements
        Requirement = None  # type: ignore[assignment,misc]
    names = []
    for line in dist.requires or []:
        if Requirement is not None:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                names.append(req.name)
        elif ";" not in line:
            names.append(re.match(r"[A-Za-z0-9_.-]+", line).group(0))  # type: ignore[union-attr]
    return names


def chosen(only: list[str], exclude: list[str], present: set[str] = frozenset()) -> list[md.Distribution]:
    """The installed distributions to link: ``only`` and their requirements, or all but ``exclude``;
    none of ``present`` (nor what only they require)."""
    installed = {_key(d.metadata["Name"]): d for d in md.distributions()}
    if not only:
        return [d for k, d in installed.items() if k not in {_key(n) for n in exclude}]
    todo, seen = [_key(n) for n in only], {}
    while todo:
        k = todo.pop()
        if k in seen or k in present:
            continue
        if k not in installed:
            sys.exit(f"venv_from: {k} is not installed in {sys.prefix}")
        seen[k] = installed[k]
        todo.extend(_key(n) for n in _requires(installed[k]))
    return list(seen.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=pathlib.Path)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--only", nargs="+", default=[])
    group.add_argument("--except", dest="exclude", nargs="+", default=[])
    group.add_argument("--add", nargs="+", default=[])
    args = ap.parse_args()
    present: set[str] = set()
    if args.add:
        listed = subprocess.run([str(args.dest / "bin" / "python"), "-c",
                                 "import importlib.metadata as m; print(*(d.metadata['Name'] for d in m.distributions()))"],
                                capture_output=True, text=True, check=True).stdout.split()
        present = {_key(n) for n in listed}
    elif args.dest.exists():
        sys.exit(f"venv_from: {args.dest} exists; give a new path (or --add to it)")
    else:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(args.dest)], check=True)
    src_site = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
    dest_site = pathlib.Path(subprocess.run(
        [str(args.dest / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip())
    n, how = 0, "linked"
    for dist in chosen(args.only or args.add, args.exclude, present):
        for f in dist.files or []:
            src = pathlib.Path(str(dist.locate_file(f))).resolve()
            if src_site not in src.parents or not src.is_file():
                continue  # a console script, or a file RECORD lists that is gone
            dest = dest_site / src.relative_to(src_site)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if dest.exists():
                continue
            if how == "linked":
                try:
                    os.link(src, dest)
                except OSError as e:  # DEST on another filesystem (EXDEV), or links refused: copy instead
                    print(f"venv_from: no hard link ({e.strerror}); copying instead", file=sys.stderr)
                    how = "copied"
            if how == "copied":
                shutil.copy2(src, dest)
            n += 1
    print(f"venv_from: {args.dest}: {n} files {how} from {src_site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
