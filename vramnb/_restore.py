"""Snapshot a live model and optimizer, and put them back exactly.

Profiling a step runs a real forward, backward and optimizer step on the user's
model; afterwards everything is restored bit for bit: parameter and buffer
bytes (in the same tensor objects, so references the user holds stay valid),
``.grad`` (the same object, or ``None``), ``requires_grad`` flags, the
training flag of every module, forward hooks dictionaries, the optimizer's
state (same dicts and tensor objects, bytes restored; state created by the
profile removed), its ``param_groups`` values and attributes, every module's
attributes and parameter/buffer entries (a forward that rebinds a buffer or
adds an attribute is undone), the batch's bytes and ``.grad``, and the RNG
states (PyTorch CPU and CUDA when initialised, Python's ``random``, NumPy's).
Not restored: tensors or lists mutated in place that are not parameters,
buffers, gradients or optimizer state, and user-made ``torch.Generator`` objects. Copies are kept in host memory as ``bytearray`` so they are
not counted as tensor storages by the CPU tracker.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["Snapshot"]


def _save_bytes(t: torch.Tensor) -> bytearray:
    st = t.untyped_storage()
    buf = bytearray(st.nbytes())
    if len(buf):
        dst = torch.frombuffer(buf, dtype=torch.uint8)
        src = torch.empty(0, dtype=torch.uint8, device=st.device).set_(st)
        dst.copy_(src)
    return buf


def _load_bytes(t: torch.Tensor, buf: bytearray) -> None:
    st = t.untyped_storage()
    if st.nbytes() != len(buf):
        st.resize_(len(buf))
    if len(buf):
        dst = torch.empty(0, dtype=torch.uint8, device=st.device).set_(st)
        with torch.no_grad():
            dst.copy_(torch.frombuffer(buf, dtype=torch.uint8))


@dataclass
class Snapshot:
    """What :meth:`restore` puts back. Build with :meth:`take`."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer | None
    tensors: list[tuple[torch.Tensor, bytearray]] = field(default_factory=list)
    grads: list[tuple[torch.Tensor, torch.Tensor | None, bytearray | None]] = field(default_factory=list)
    flags: list[tuple[torch.Tensor, bool]] = field(default_factory=list)
    training: list[tuple[torch.nn.Module, bool]] = field(default_factory=list)
    hooks: list[tuple[torch.nn.Module, str, dict[Any, Any]]] = field(default_factory=list)
    opt_state: dict[Any, dict[str, Any]] = field(default_factory=dict)
    opt_bytes: list[tuple[torch.Tensor, bytearray]] = field(default_factory=list)
    opt_groups: list[dict[str, Any]] = field(default_factory=list)
    rng_cpu: torch.Tensor | None = None
    rng_cuda: list[torch.Tensor] | None = None
    rng_python: Any = None
    rng_numpy: Any = None
    module_dicts: list[tuple[torch.nn.Module, dict[str, Any], dict[str, Any], dict[str, Any]]] = field(default_factory=list)
    opt_dict: dict[str, Any] | None = None

    @classmethod
    def take(cls, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None,
             batch_tensors: list[torch.Tensor] | None = None) -> Snapshot:
        """Record what :meth:`restore` puts back (``batch_tensors``: the batch's
        tensors, whose bytes and ``.grad`` are restored too)."""
        s = cls(model, optimizer)
        seen: set[int] = set()
        params = list(model.parameters())
        if optimizer is not None:
            params += [p for g in optimizer.param_groups for p in g["params"]]
        for m in model.modules():
            # attributes, and the parameter/buffer entries (a forward may rebind a buffer, add a parameter)
            s.module_dicts.append((m, dict(m.__dict__), dict(m._parameters), dict(m._buffers)))
        for t in params + list(model.buffers()) + list(batch_tensors or []):
            if id(t) in seen:
                continue
            seen.add(id(t))
            s.tensors.append((t, _save_bytes(t)))
            s.flags.append((t, t.requires_grad))
            g = t.grad if t.is_leaf else None
            s.grads.append((t, g, _save_bytes(g) if g is not None else None))
        for m in model.modules():
            s.training.append((m, m.training))
            for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
                d = getattr(m, name, None)
                if d is not None:
                    s.hooks.append((m, name, dict(d)))
        if optimizer is not None:
            for p, st in optimizer.state.items():
                s.opt_state[p] = dict(st)
                for v in st.values():
                    if isinstance(v, torch.Tensor):
                        s.opt_bytes.append((v, _save_bytes(v)))
            s.opt_groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
            for g in optimizer.param_groups:  # tensor hyper-parameters (lr as a tensor) are restored in place
                for k, v in g.items():
                    if k != "params" and isinstance(v, torch.Tensor):
                        s.opt_bytes.append((v, _save_bytes(v)))
            s.opt_dict = dict(optimizer.__dict__)
        s.rng_cpu = torch.random.get_rng_state()
        s.rng_python = random.getstate()
        np = sys.modules.get("numpy")
        if np is not None:
            s.rng_numpy = np.random.get_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            s.rng_cuda = torch.cuda.get_rng_state_all()
        return s

    def restore(self) -> None:
        """Put everything back (idempotent)."""
        for m, attrs, params, buffers in self.module_dicts:
            m.__dict__.clear()
            m.__dict__.update(attrs)
            m._parameters.clear()
            m._parameters.update(params)
            m._buffers.clear()
            m._buffers.update(buffers)
        with torch.no_grad():
            for t, buf in self.tensors:
                _load_bytes(t, buf)
            for t, flag in self.flags:
                t.requires_grad_(flag)
            for t, g, buf in self.grads:
                if g is not None and buf is not None:
                    _load_bytes(g, buf)
                t.grad = g
        for m, mode in self.training:
            m.training = mode
        for m, name, d in self.hooks:
            live = getattr(m, name)
            if dict(live) != d:
                live.clear()
                live.update(d)
        opt = self.optimizer
        if opt is not None:
            if self.opt_dict is not None:  # e.g. an LR scheduler's _opt_called flag set by step()
                opt.__dict__.clear()
                opt.__dict__.update(self.opt_dict)
            for p in list(opt.state.keys()):
                if p not in self.opt_state:
                    del opt.state[p]
            for p, st in self.opt_state.items():
                live = opt.state[p]  # the same dict object, its entries put back
                live.clear()
                live.update(st)
            with torch.no_grad():
                for v, buf in self.opt_bytes:
                    _load_bytes(v, buf)
            for g, saved in zip(opt.param_groups, self.opt_groups):
                for k in list(g):
                    if k != "params" and k not in saved:
                        del g[k]
                g.update(saved)
        if self.rng_cpu is not None:
            torch.random.set_rng_state(self.rng_cpu)
        if self.rng_python is not None:
            random.setstate(self.rng_python)
        if self.rng_numpy is not None:
            sys.modules["numpy"].random.set_state(self.rng_numpy)
        if self.rng_cuda is not None:
            torch.cuda.set_rng_state_all(self.rng_cuda)
