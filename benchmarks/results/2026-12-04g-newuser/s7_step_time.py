"""Is the 'step time' in profile_step's report the step's time? UNet and CNN, plain steps vs profile_step, same process."""
import sys, time; sys.path.insert(0, '.')
import torch, vramnb
from models import unet, cnn, qwen2
for build in [unet, cnn, qwen2]:
    name, m, b, lf, opt = build()
    def plain():
        t = time.perf_counter(); l = lf(m, b) if lf else m(**b).loss; l.backward(); opt.step(); opt.zero_grad(); return time.perf_counter() - t
    p1 = [plain() for _ in range(3)]
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    reps = []
    for _ in range(2):
        t = time.perf_counter(); r = vramnb.profile_step(m, b, lf, opt); reps.append((time.perf_counter() - t, r.first.step_time, r.steady.step_time))
    p2 = [plain() for _ in range(2)]
    print(f"{name}: plain steps {[round(x,3) for x in p1]} / after {[round(x,3) for x in p2]} | profile_step calls (total, reported first, reported steady): {[tuple(round(x,3) for x in y) for y in reps]}")
