import torch, vramnb
m = torch.nn.Linear(4, 2)
class M(torch.nn.Module):
    def __init__(s): super().__init__(); s.l = torch.nn.Linear(4,2)
    def forward(s, x, scale=1.0): return (s.l(x)*scale).sum()
model = M(); opt = torch.optim.SGD(model.parameters(), lr=0.1)
b = {"x": torch.randn(3,4), "scale": 2.0}
for name, f in [("profile_step", lambda: vramnb.profile_step(model, b, optimizer=opt)), ("estimate", lambda: vramnb.estimate(model, b, optimizer=opt, target="T4")), ("compare", lambda: vramnb.compare(model, b, optimizer=opt, toggles={"precision": ["fp32","bf16"]}))]:
    try: f(); print(name, "OK")
    except Exception as e: print(name, type(e).__name__, e)
