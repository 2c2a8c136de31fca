"""User code vramnb may run by the way it builds and restores things: PyTorch's process-wide registration
hooks (`register_module_module_registration_hook`, `..._parameter_registration_hook`,
`..._buffer_registration_hook`) and a module's / optimizer's state-dict and load-state-dict hooks
(`register_state_dict_pre_hook`, `_register_state_dict_hook`, `register_state_dict_post_hook`,
`register_load_state_dict_pre_hook`, `register_load_state_dict_post_hook`,
optimizer `register_state_dict_pre_hook`/`post`, `register_load_state_dict_pre_hook`/`post`).
Each hook appends to a user log; the log must be the same after each entry point (and the hooks'
dicts). The compare toggles include LoRA, freezing and checkpointing (techniques that add or wrap
modules). Prints PASS/FAIL per case and entry point."""
import sys

import torch
import torch.nn as nn
from torch.nn.modules import module as M

import vramnb
from _common import fingerprint, global_fp, diff

LOG: list = []


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return x + self.fc(self.norm(x)).relu()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(32, 16)
        self.blocks = nn.ModuleList([Block() for _ in range(4)])
        self.bn = nn.BatchNorm1d(16)
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        h = self.embed(x)
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.bn(h.mean(1)))


def model():
    torch.manual_seed(0)
    m = Net()
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    loss = lambda mm, b: mm(b).pow(2).mean()  # noqa: E731
    b = torch.randint(0, 32, (4, 6))
    loss(m, b).backward(); opt.step(); opt.zero_grad()
    return m, b, loss, opt


def hooks(m, opt):
    hs = []
    hs.append(M.register_module_module_registration_hook(lambda mod, name, sub: LOG.append(("module_reg", name))))
    hs.append(M.register_module_parameter_registration_hook(lambda mod, name, p: LOG.append(("param_reg", name))))
    hs.append(M.register_module_buffer_registration_hook(lambda mod, name, b: LOG.append(("buffer_reg", name))))
    hs.append(m.register_state_dict_pre_hook(lambda mod, prefix, keep_vars: LOG.append(("sd_pre", prefix))))
    hs.append(m._register_state_dict_hook(lambda mod, sd, prefix, local: LOG.append(("sd_hook", prefix))))
    hs.append(m.register_load_state_dict_pre_hook(lambda mod, sd, prefix, *a: LOG.append(("load_pre", prefix))))
    hs.append(m.register_load_state_dict_post_hook(lambda mod, keys: LOG.append(("load_post",))))
    hs.append(opt.register_state_dict_pre_hook(lambda o: LOG.append(("opt_sd_pre",))))
    hs.append(opt.register_state_dict_post_hook(lambda o, sd: LOG.append(("opt_sd_post",))))
    hs.append(opt.register_load_state_dict_pre_hook(lambda o, sd: LOG.append(("opt_load_pre",))))
    hs.append(opt.register_load_state_dict_post_hook(lambda o: LOG.append(("opt_load_post",))))
    return hs


def hook_dicts(m, opt):
    out = {"global_mod_reg": list(M._global_module_registration_hooks), "global_param_reg": list(M._global_parameter_registration_hooks),
           "global_buf_reg": list(M._global_buffer_registration_hooks)}
    for name, sub in m.named_modules():
        for attr in ("_state_dict_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks"):
            out[f"{name}.{attr}"] = list(getattr(sub, attr))
    for attr in ("_optimizer_state_dict_pre_hooks", "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks", "_optimizer_load_state_dict_post_hooks"):
        out[attr] = list(getattr(opt, attr))
    return out


ENTRIES = {
    "profile_step": lambda m, b, l, o: vramnb.profile_step(m, b, l, o),
    "compare": lambda m, b, l, o: vramnb.compare(m, b, l, o, toggles={"precision": ["fp32", "bf16"], "checkpointing": ["off", "every block"], "lora": ["off", "r=8"]}, progress=False),
    "compare_freeze_opt": lambda m, b, l, o: vramnb.compare(m, b, l, o, toggles={"freeze": ["none", "embeddings", "first half of blocks"], "optimizer": ["yours", "SGD", "AdamW fused", "Adafactor"], "activation_offload": ["off", "CPU"]}, progress=False),
    "estimate": lambda m, b, l, o: vramnb.estimate(m, b, l, o, target="8GiB"),
    "estimate_lora": lambda m, b, l, o: vramnb.estimate(m, b, l, o, target="8GiB", recipe=vramnb.Recipe(lora="r=8", checkpointing="every block", freeze="embeddings")),
    "max_batch_size": lambda m, b, l, o: vramnb.max_batch_size(m, b, l, o, target="8GiB", progress=False, limit=64),
    "fit": lambda m, b, l, o: vramnb.fit(m, b, l, o, target="8GiB", progress=False),
}


def main(only=None):
    ok = True
    for name, run in ENTRIES.items():
        if only and name != only:
            continue
        m, b, l, o = model()
        LOG.clear()
        hs = hooks(m, o)
        before = {**fingerprint({"m": m, "o": o}), **{f"g.{k}": v for k, v in global_fp().items()}, **{f"h.{k}": repr(v) for k, v in hook_dicts(m, o).items()}}
        err = None
        try:
            run(m, b, l, o)
        except Exception as e:  # noqa: BLE001
            err = f"{type(e).__name__}: {str(e)[:300]}"
        log = list(LOG)
        after = {**fingerprint({"m": m, "o": o}), **{f"g.{k}": v for k, v in global_fp().items()}, **{f"h.{k}": repr(v) for k, v in hook_dicts(m, o).items()}}
        for h in hs:
            h.remove()
        d = diff(before, after)
        if log:
            d.insert(0, f"the user's hooks ran {len(log)} times: {sorted(set(map(str, log)))[:8]}")
        if d:
            ok = False
            print(f"FAIL registration/state-dict hooks / {name}: {'(raised ' + err[:200] + ') ' if err else ''}")
            for line in d:
                print("    ", line)
        else:
            print(f"PASS registration/state-dict hooks / {name}" + (f" (raised, nothing changed: {err[:240]})" if err else ""))
    print("PASS" if ok else "FAIL")


if __name__ == "__main__":
    main(*sys.argv[1:])
