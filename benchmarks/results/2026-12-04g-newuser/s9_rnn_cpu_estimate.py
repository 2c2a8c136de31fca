"""Finding 1 narrowed: estimate(device='cpu') vs measured, for bare RNN layers."""
import sys; sys.path.insert(0, '.')
import torch, torch.nn as nn, vramnb
for name, mod in [("LSTM 1 layer", nn.LSTM(256, 256, batch_first=True)), ("LSTM 2 layers", nn.LSTM(256, 256, 2, batch_first=True)),
                  ("GRU 1 layer", nn.GRU(256, 256, batch_first=True)), ("RNN tanh 1 layer", nn.RNN(256, 256, batch_first=True))]:
    torch.manual_seed(0); x = torch.randn(8, 64, 256)
    lf = lambda m, b: m(b)[0].square().mean(); opt = torch.optim.SGD(mod.parameters(), lr=0.1)
    a = vramnb.profile_step(mod, x, lf, opt).steady.peak; e = vramnb.estimate(mod, x, lf, opt, device="cpu").steady.peak
    print("   differing sources (measured, estimated):", {k: (a.sources[k], e.sources.get(k)) for k in a.sources if a.sources[k] != e.sources.get(k)})
    print(f"{name}: measured {a.allocated} B (activations {a.sources['activations']}), estimated {e.allocated} B "
          f"(activations {e.sources['activations']}), error {100*(e.allocated-a.allocated)/a.allocated:+.1f} %")
