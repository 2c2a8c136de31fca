# compare(toggles={"lora": [...]}) imports peft -> accelerate, whose import adds a process-wide warnings filter
# ignoring every UserWarning from torch.optim.lr_scheduler. vramnb keeps warnings filters for none of its
# entry points: afterwards PyTorch's "use get_last_lr()" warning (misuse of scheduler.get_lr()) no longer shows.
import warnings, torch, vramnb
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
filters0 = list(warnings.filters)
vramnb.compare(model, torch.randn(4, 8), lambda m, b: m(b).sum(), opt, toggles={"lora": ["off", "r=8"]}, progress=False)
added = [f for f in warnings.filters if f not in filters0]
print("filters added:", added)
sched = torch.optim.lr_scheduler.StepLR(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1), 1)
with warnings.catch_warnings(record=True) as w:
    sched.get_lr()   # PyTorch warns: "To get the last learning rate computed by the scheduler, please use get_last_lr()"
print("PyTorch's get_last_lr warning shown:", bool(w))
print("PASS" if not added else "FAIL: the user's warnings filters changed (a PyTorch warning is now silenced)")
