import sys
from IPython.testing.globalipapp import start_ipython
ip = start_ipython()
def cell(src):
    print(">>>", src.strip().splitlines()[0])
    r = ip.run_cell(src, store_history=True)
    if r.error_in_exec is not None or r.error_before_exec is not None:
        print("!! ERROR", repr(r.error_in_exec or r.error_before_exec))
    return r
src = open(sys.argv[1]).read()
for c in src.split("\n#---\n"):
    cell(c)
