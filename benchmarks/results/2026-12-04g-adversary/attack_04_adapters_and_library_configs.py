"""Adapters and library configs a forward or the loss switches: a peft LoRA model with two adapters where the
loss calls `set_adapter` / runs under `disable_adapter()` / `with model.disable_adapter():` left half way
(raising), an adapter added by the loss; a transformers model whose forward call sets `use_cache`,
`output_attentions`, `return_dict`; its `generation_config` changed by the loss; `model.config` attributes
added by the loss; a `torch.func.functional_call` in the loss with replaced parameters (and
`tie_weights=False`, `strict=True`); `register_state_dict_pre_hook` / `register_load_state_dict_post_hook` /
`_register_load_state_dict_pre_hook` on modules logging into a list while the loss calls `state_dict()`.
Prints PASS/FAIL per case and entry point."""
import sys

import torch
import torch.nn as nn

from _common import main


def _tiny_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=32)
    return GPT2LMHeadModel(cfg)


def _ids():
    torch.manual_seed(1)
    return torch.randint(0, 64, (2, 8))


def _hf_loss(mm, b):
    return mm(input_ids=b, labels=b).loss


def _peft(two=True):
    from peft import LoraConfig, get_peft_model
    base = _tiny_gpt2()
    m = get_peft_model(base, LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True), adapter_name="a")
    if two:
        m.add_adapter("b", LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True))
    m.set_adapter("a")
    return m


def _w(m):
    return {"m": m, "cfg": getattr(m, "config", None), "active": getattr(m, "active_adapters", None),
            "peft_cfg": getattr(m, "peft_config", None)}


def peft_set_adapter_in_loss():
    m = _peft()

    def l(mm, b):
        m.set_adapter("b")  # the user's model, by name: a switch the step must not keep
        return _hf_loss(mm, b)
    return m, _ids(), l, torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3), _w(m)


def peft_disable_adapter_context():
    m = _peft()

    def l(mm, b):
        with mm.disable_adapter():
            ref = _hf_loss(mm, b).detach()
        return _hf_loss(mm, b) + 0 * ref
    return m, _ids(), l, torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3), _w(m)


def peft_disable_adapter_left_open():
    m = _peft()
    ctxs = []

    def l(mm, b):
        c = m.disable_adapter()
        c.__enter__()  # never exited: the adapter stays disabled
        ctxs.append(c)
        return _hf_loss(mm, b)
    return m, _ids(), l, torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3), {**_w(m), "ctxs": ctxs}


def peft_add_adapter_in_loss():
    from peft import LoraConfig
    m = _peft(two=False)
    n = [0]

    def l(mm, b):
        n[0] += 1
        m.add_adapter(f"x{n[0]}", LoraConfig(r=2, target_modules=["c_attn"], fan_in_fan_out=True))
        return _hf_loss(mm, b)
    return m, _ids(), l, torch.optim.AdamW([p for p in m.parameters() if p.requires_grad], lr=1e-3), _w(m)


def hf_forward_kwargs_flip_config():
    m = _tiny_gpt2()
    m.config.use_cache = True

    def l(mm, b):
        mm.config.use_cache = False
        mm.config.output_attentions = True
        mm.generation_config.max_new_tokens = 77
        mm.config.my_counter = getattr(mm.config, "my_counter", 0) + 1
        return mm(input_ids=b, labels=b, use_cache=False, return_dict=True).loss
    return m, _ids(), l, torch.optim.AdamW(m.parameters(), lr=1e-3), {"m": m, "cfg": m.config, "gen": m.generation_config}


def hf_user_model_config_by_name():
    m = _tiny_gpt2()

    def l(mm, b):
        m.config.use_cache = not m.config.use_cache  # the notebook's model's config, by name
        m.generation_config.do_sample = True
        return _hf_loss(mm, b)
    return m, _ids(), l, torch.optim.AdamW(m.parameters(), lr=1e-3), {"m": m, "cfg": m.config, "gen": m.generation_config}


def functional_call_in_loss():
    from torch.func import functional_call
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    extra = {"0.weight": torch.randn(16, 8)}

    def l(mm, b):
        params = dict(mm.named_parameters())
        ref = functional_call(mm, {**params, **{k: v.to(params[k]) for k, v in extra.items()}}, (b,), tie_weights=False)
        return mm(b).pow(2).mean() + 0 * ref.sum()
    return m, torch.randn(4, 8), l, torch.optim.SGD(m.parameters(), lr=0.1), {"m": m, "extra": extra}


LOG = []


def state_dict_hooks_in_loss():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    LOG.clear()
    m.register_state_dict_pre_hook(lambda mod, prefix, keep_vars: LOG.append(("sd_pre", prefix)))
    m[0].register_state_dict_post_hook(lambda mod, sd, prefix, local: LOG.append(("sd_post", prefix)))
    m.register_load_state_dict_post_hook(lambda mod, keys: LOG.append("load_post"))
    m[2].register_load_state_dict_pre_hook(lambda mod, sd, prefix, lm, strict, mk, uk, err: LOG.append("load_pre"))
    snap = {k: v.clone() for k, v in m.state_dict().items()}

    def l(mm, b):
        sd = mm.state_dict()
        if len(sd) == 4 and not any(isinstance(v, torch._subclasses.FakeTensor) for v in sd.values()):
            mm.load_state_dict(snap)  # the user reloads a checkpoint in the loss (real step only), before the forward
        return mm(b).pow(2).mean()
    return m, torch.randn(4, 8), l, torch.optim.SGD(m.parameters(), lr=0.1), {"m": m, "LOG": LOG}


CASES = {k: v for k, v in list(globals().items()) if callable(v) and getattr(v, "__module__", "") == __name__
         and not k.startswith("_") and k not in ("main", "l")}

if __name__ == "__main__":
    only = sys.argv[1] if len(sys.argv) > 1 else None
    ok = True
    for name, setup in CASES.items():
        if only and name != only:
            continue
        ok &= main(name, setup)
    print("ALL PASS" if ok else "SOME FAIL")
