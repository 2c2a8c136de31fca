"""What `%vram` says `%vram free` releases against what it then releases: the last exception's
frames when a name also keeps the error, the output history when a name also keeps the value;
then, the names deleted, the error's frames left in a cycle."""
from harness import MiB, check, done, ip, run


def freed(out: str) -> str:
    return next(ln for ln in out.splitlines() if "total allocated freed" in ln).split()[-2:]


run("def boom():\n    loc = torch.zeros(2*256*1024)\n    raise ValueError('b')")
run("boom()")
run("import sys\nsaved_err = sys.last_value")
run("torch.zeros(3*256*1024)")          # Out keeps it
run("mine = Out[max(Out)]")             # and a name too
rep = ip.run_line_magic("vram", "")
h = {x.name: x for x in rep.holders}
check("out of sight: nothing only hidden rows keep", rep.out_of_sight, 0)
check("saved_err holds the frame's 2 MiB", (h["saved_err"].nbytes, h["saved_err"].unique), (2 * MiB, 2 * MiB))
check("mine 3 MiB shared with Out", (h["mine"].nbytes, h["mine"].unique), (3 * MiB, 0))
_, out = run("%vram free")
check("%vram free releases 0 B", freed(out), ["0", "B"])
check("%vram free says saved_err keeps the error", "kept by your variable saved_err" in out, True)
run("del saved_err, mine")   # mine's 3 MiB goes now (Out was cleared); the error's frames wait for gc
rep = ip.run_line_magic("vram", "")
check("%vram: 2 MiB allocated, held by no name", (rep.allocated, rep.total), (2 * MiB, 0))
_, out = run("%vram free")
check("%vram free releases 2.0 MiB (gc)", freed(out), ["2.0", "MiB"])
done()
