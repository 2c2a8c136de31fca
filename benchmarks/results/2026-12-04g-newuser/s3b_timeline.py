import sys, torch; sys.path.insert(0, '.')
import matplotlib; matplotlib.use("Agg")
import vramnb
from models import cnn
name, m, b, lf, opt = cnn()   # optimizer NOT warmed: first step differs from steady
rep = vramnb.profile_step(m, b, lf, opt)
rep.plot("timeline").savefig("p_cnn_timeline_cold.png", dpi=80, bbox_inches="tight")
vramnb.set_theme("dark"); rep.plot().savefig("p_cnn_phases_dark.png", dpi=80, bbox_inches="tight"); vramnb.set_theme("light")
print(rep.first.peak_allocated if hasattr(rep.first, 'peak_allocated') else rep.first)
try: vramnb.set_theme("blue")
except Exception as e: print("set_theme bad:", type(e).__name__, e)
try: rep.plot("pie")
except Exception as e: print("plot bad kind:", type(e).__name__, e)
