"""Fixed: `%vram` on tensors of `torch.load(mmap=True)`: the file's mapping, which any one tensor keeps
mapped whole, is what the tracker counts; each name keeping a slice keeps it."""
import os
import tempfile

from harness import check, done, ip, run

path = os.path.join(tempfile.mkdtemp(), "sd.pt")
run(f"torch.save({{'a': torch.zeros(1 << 20), 'b': torch.zeros(1 << 18), 'c': torch.zeros(1 << 16)}}, {path!r})")
size = os.path.getsize(path)  # 4 MiB + 1 MiB + 256 KiB of tensors and the archive's headers
run(f"sd = torch.load({path!r}, mmap=True)\nsd_a = sd['a']\ndel sd['b']")
rep = ip.run_line_magic("vram", "")
h = {x.name: x for x in rep.holders}
check("sd keeps the file's mapping, shared with sd_a", (h["sd"].nbytes, h["sd"].unique), (size, 0))
check("sd_a keeps the file's mapping, shared with sd", (h["sd_a"].nbytes, h["sd_a"].unique), (size, 0))
check("named above = allocated", rep.total, rep.allocated)
check("no 'held by no name listed' sentence", "held by no name listed" in rep._repr_mimebundle_()["text/plain"], False)
done()
