import sys; sys.path.insert(0, '.')
import torch, vramnb
from models import lstm_tied
name, m, b, lf, opt = lstm_tied()
e = vramnb.estimate(m, b, lf, opt, target="T4")
print("\n".join(l for l in str(e).splitlines() if any(k in l for k in ("activations", "expected error", "measured by", "kernels", "T4"))))
