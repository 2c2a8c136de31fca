"""Model structure and modes: tied weights (embedding/decoder), a Linear shared with a second model
(and that model's optimizer and state), a model in eval mode with a submodule in train mode,
frozen parts (requires_grad False, grads kept from before), a buffer with requires_grad, sparse
Embedding gradients (sparse=True, SparseAdam). Prints PASS/FAIL per entry point."""
import torch

from _common import main


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 8)
        self.body = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5), torch.nn.BatchNorm1d(8))
        self.out = torch.nn.Linear(8, 16, bias=False)
        self.out.weight = self.emb.weight
        self.register_buffer("scale", torch.ones(8).requires_grad_())

    def forward(self, idx):
        return self.out(self.body(self.emb(idx)) * self.scale)


def s_tied_shared():
    torch.manual_seed(0)
    m = Tied()
    other = torch.nn.Sequential(m.body[0], torch.nn.Linear(8, 2))  # shares a Linear
    oopt = torch.optim.Adam(other.parameters(), lr=1e-2)
    other(torch.randn(4, 8)).sum().backward()
    oopt.step()
    m.eval()
    m.body.train()  # eval model, one submodule in train mode
    m.emb.weight.requires_grad_(True)
    m.body[0].bias.requires_grad_(False)
    m.body[0].bias.grad = torch.ones(8)  # a frozen param with an old grad
    opt = torch.optim.Adam([p for p in m.parameters() if p.requires_grad], lr=1e-2)
    x = torch.randint(0, 16, (4,))
    return m, x, (lambda mm, b: mm(b).logsumexp(-1).sum()), opt, {"m": m, "other": other, "oopt": oopt, "opt": opt}


def s_sparse():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Embedding(32, 8, sparse=True), torch.nn.Linear(8, 2))
    sp = torch.optim.SparseAdam(list(m[0].parameters()), lr=1e-2)
    x = torch.randint(0, 32, (6,))
    m(x).sum().backward()
    sp.step()
    return m, x, (lambda mm, b: mm(b).sum()), sp, {"m": m, "sp": sp}


def extra(w):
    m = w["m"]
    return {"modes": [x.training for x in m.modules()], "tied": getattr(m, "out", None) is None or m.out.weight is m.emb.weight}


if __name__ == "__main__":
    ok = main("tied + shared + modes + frozen + buffer requires_grad", s_tied_shared, extra=extra)
    ok &= main("sparse embedding grads + SparseAdam", s_sparse, extra=extra)
    print("ALL PASS" if ok else "SOME FAIL")
