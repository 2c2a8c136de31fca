"""A class defined in the notebook keeps a growing dict as a class attribute (`Cache.store`):
the regrowth line must name it, the by-source table give it a row, `%vram` list it.
Symptom: "no name of the notebook grew by it"."""
from harness import check, done, ip, nbytes, rows, run, vram

run("""
class Cache:
    store = {}
    def add(self, k, v):
        type(self).store[k] = v
c = Cache()
""")
for k in range(3):
    rep, out = vram("c.add(len(Cache.store), torch.zeros(256*1024))")
    r = rows(rep)
    store = ip.user_ns["Cache"].store
    check(f"run {k}: a row names Cache/c with the store's bytes at end",
          max((v[1] for n, v in r.items() if n.endswith((" Cache", " c"))), default=0), nbytes(store))

check("regrowth line does not say no name grew", "no name of the notebook grew" in out, False)
check("regrowth line names Cache or c", ("Cache grew by" in out) or ("c grew by" in out), True)
_, out = run("%vram")
check("%vram lists Cache", any(line.split()[:1] == ["Cache"] for line in out.splitlines()), True)
run("%vram", quiet=False)
done()
