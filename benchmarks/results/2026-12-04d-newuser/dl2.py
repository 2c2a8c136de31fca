import torch, vramnb
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.Adam(model.parameters())
b = (torch.randn(37, 64), torch.randint(0, 10, (37,)))
loss_fn = lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1])
print(vramnb.estimate(model, b, loss_fn, opt, target="1GiB"))
