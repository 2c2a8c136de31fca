# profile_step / compare run the user's module, tensor and global hooks, and what those hooks update outside
# the model stays updated: a forward hook that logs activation statistics, a gradient hook that logs grad
# norms, a global forward hook that counts calls. vramnb refuses optimizer step hooks for exactly this reason
# ("they run in the profiled step and change objects outside the model"), but not these.
import torch, vramnb
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
act_log, grad_log, calls = [], [], [0]
model[0].register_forward_hook(lambda m, i, o: act_log.append(o.detach().abs().mean().item()))
model[0].weight.register_hook(lambda g: grad_log.append(g.norm().item()))
h = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: calls.__setitem__(0, calls[0] + 1))
vramnb.profile_step(model, torch.randn(4, 8), lambda m, b: m(b).sum(), opt)
h.remove()
print("entries added to the user's logs by profile_step: activations", len(act_log), "| grad norms", len(grad_log), "| global hook calls", calls[0])
print("PASS" if not act_log and not grad_log and not calls[0] else "FAIL: the user's hook-fed logs hold entries from vramnb's profiled steps")
