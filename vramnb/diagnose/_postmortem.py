"""The state at an out-of-memory failure, taken before the exception unwinds.

**CUDA.** PyTorch's caching allocator calls its out-of-memory observers
(``torch._C._cuda_attach_out_of_memory_observer``) inside the failed ``malloc``,
after it freed its unused cached segments and retried, with its lock released,
as ``observer(device, bytes asked (rounded to the allocator's block size), the
cap if one is set else the card's total, free device memory)``
(``c10/cuda/CUDACachingAllocator.cpp``). vramnb attaches one observer for the
process the first time a measurement runs on CUDA (observers cannot be
detached); it does nothing unless a measurement on that device is running, and
then reads the allocator's counters and segments (``torch.cuda.memory_stats``,
``torch.cuda.memory._snapshot``: no device memory is allocated), the memory
other processes hold (NVML, where ``pynvml`` is installed), and the tensors the
frames on the stack hold at that moment.

**CPU.** The storage tracker's dispatch mode sees the operator whose allocation
fails (``DefaultCPUAllocator: can't allocate memory``) and calls
:func:`capture_cpu_oom` there, with the live bytes it counts at that moment.

Neither keeps a reference to a tensor or a frame: the state is bytes and names.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch

from .._optim_state import state_tensors
from .._graph import frame_locals
from .._storages import storages_of_tensor

__all__ = ["OOMState", "FailingCode", "failing_code", "install_cuda_observer", "capture_cpu_oom", "frame_holders",
           "largest_free_block", "process_limit", "listening", "oom_device_name", "held_outside"]


@dataclass
class OOMState:
    """What the device held when an allocation failed (bytes; ``None``: not known).

    Attributes:
        device: ``"cuda:0"``, ``"cpu"``.
        at_failure: taken inside the failing allocation (else after the exception unwound).
        requested: bytes the allocation asked for.
        allocated: bytes allocated to tensors.
        reserved: bytes the caching allocator held (CUDA).
        total: the card's memory (CUDA).
        cap: this process's limit set by ``set_per_process_memory_fraction``, if lower than ``total``.
        free_device: free device memory as the driver reported it (CUDA).
        largest_free_block: the largest free block inside the reserved segments (CUDA).
        non_pytorch: this process's device memory outside the allocator (CUDA context, libraries).
        other_processes: device memory other processes held (NVML), else ``None``.
        available: memory the system still offered (CPU: ``MemAvailable``).
        frames: ``(frame, variable, bytes, of which through its autograd graph)`` of tensors on
            the device the failing frames held (:func:`frame_holders`).
        frames_share: whether two of those variables keep one storage (counted for the first).
        frames_graph: bytes all the failing frames' variables hold through autograd graphs (what
            was saved for a backward), each storage counted once; ``None``: not read.
        holders: ``(variable, bytes it keeps, bytes deleting it frees)``, the largest holders in
            the notebook's namespace.
        cap_room: bytes the process's own limit still allowed (CPU: ``RLIMIT_AS``/``RLIMIT_DATA``
            less what it used), where one is set; ``cap_name`` names that limit.
        context: what the failing code was doing (:class:`FailingCode`).
        beside: for a profiled step, bytes held before it outside the model, optimizer and batch.
        hidden: bytes held out of sight (output history, kept exceptions, graphs), ``hidden_by`` by name.
    """

    device: str
    at_failure: bool
    requested: int | None
    allocated: int
    reserved: int | None = None
    total: int | None = None
    cap: int | None = None
    free_device: int | None = None
    largest_free_block: int | None = None
    non_pytorch: int | None = None
    other_processes: int | None = None
    available: int | None = None
    frames: list[tuple[str, str, int, int]] = field(default_factory=list)
    frames_share: bool = False  # two of the frames' variables keep one storage (counted for the first)
    frames_graph: int | None = None
    # what the exception being handled keeps in its finished frames (a retry inside `except`), as frames
    handled: list[tuple[str, str, int, int]] = field(default_factory=list)
    holders: list[tuple[Any, ...]] = field(default_factory=list)
    hidden: int | None = None
    hidden_by: list[tuple[str, int]] = field(default_factory=list)
    cap_room: int | None = None
    cap_name: str | None = None
    context: FailingCode | None = None
    beside: int | None = None


@dataclass
class FailingCode:
    """What the failing code was doing, read from its frames (names only).

    Attributes:
        in_use: global names the failing frames' code refers to (a cell's ``train_step``,
            the ``model`` and ``opt`` inside it): deleting them is not a fix.
        model: the notebook's name of the ``nn.Module`` in use with the most parameters, if any.
        optimizer: the name of an optimizer in use, if any.
        trains: a module ran in the failing frames (a forward, a step), else a plain
            tensor computation, for which training techniques are no fix.
        autocast: an autocast region was open at the failure.
        checkpointing: the failure came inside ``torch.utils.checkpoint``, or a model in use
            has Hugging Face's gradient checkpointing on.
        checkpoint_method: the Hugging Face checkpointing method of that model's class, if any.
        grad: gradients were on at the failure (else inference: recomputing in backward is no fix);
            a failure inside backward counts as on (the engine turns them off while it runs).
        phase: ``"optimizer step"`` (the failure came inside ``torch.optim``: the optimizer's
            state or its step's temporaries), ``"backward"`` (inside ``torch.autograd``'s
            backward), ``"constructor"`` (inside an ``nn.Module``'s ``__init__``: no forward or
            backward ran), else ``""``.
        built: ``(sentence, code)`` for a constructor failure (:mod:`._construct`).
        dense_grad: the request is an embedding table's dense gradient (then ``transient`` says so).
        backward: the failing notebook code (the whole text of each cell the failing frames
            run in, read from :mod:`linecache`) calls a backward (``.backward(``,
            ``autograd.grad(``) or an optimizer's ``.step(``; ``None`` where no cell's text was
            found (nothing is claimed then).
        results: of :attr:`mutated`, the names the failing cells' source also reads whole (``torch.stack(rows)``,
            ``return rows``, ``for r in rows``; not ``len(rows)``): what the code builds, which emptying destroys.
        mutated: global names whose object the failing frames' source changes in place
            (``x.append(…)``/``extend``/``insert``/``add``/``update``/``setdefault``,
            ``x[k] = …``, ``x += …``), read from the source's syntax tree: a container only
            read (iterated, indexed) is not in it, and emptying it is no fix.
        stores: ``{container: sentence}``: what to store instead in each container the failing
            cells add to, as the cell's own statement (:func:`._cell_code.stored_instead`).
        summed: ``(total, statement, part, what to keep)`` where a failing cell sums a loss's parts in a loop
            before one ``total.backward()`` (:func:`._cell_code.summed_before_backward`).
        transient: ``(sentence, code)`` where the failing line's request is a transient copy that
            code of another shape would not make (:func:`._transient.transient_copy`).
        grads: ``(model, bytes)``: the ``.grad`` tensors of the model in use's parameters, alive
            while gradients are off (left from training), counted once per storage.
        optim_is_model: the optimizer steps every parameter of :attr:`model` and no other, in one
            group (:func:`._optim_target.steps_exactly`): an optimizer swap may then take
            ``model.parameters()``; otherwise it takes the optimizer's own ``param_groups``.
        local_grows: ``{variable: (function, flag)}`` for each list or dict a failing function of the user's
            adds to (its own local, :func:`_mutated_names` of its code) whose other reads all lie under one test of
            a name (``tuple(scores) if output_scores else None``): ``flag`` is that name, ``""`` where it is read
            otherwise.
        grows: containers the failing code grows with every step's results
            (:func:`._growing.growing`): their size follows the samples seen, not the batch.
        model_grad: a parameter of :attr:`model` requires grad (``None``: not read); where none
            does, a forward with gradients on saves nothing for backward on the model's account.
        model_fp32: a parameter of :attr:`model` is float32 (``None``: not read); where none is,
            bf16 autocast halves nothing.
        joins: ``{name: (join, bytes, device type)}`` for each name a failing cell's loop rebinds
            to a join of its old value (:func:`._growing.self_joins`: ``preds = torch.cat([preds,
            logits])``), with the bytes of the storage its tensor holds now and that tensor's device
            type (``0, ""`` where it is bound to no plain tensor).
        graphs: with gradients on, a tensor the failing frames hold has a ``grad_fn``
            (:func:`._graphs_held.holds_graph`; ``None``: not read or not known): where none has,
            nothing is kept for a backward and turning gradients off frees nothing.
        joined: names of the sequences the failing line joins into a new tensor where that join is
            the request (``torch.cat(parts)``): the join needs every part, so emptying them is no fix.
        suspended: ``(frame, generator, names its current line assigns)`` for each failing frame that
            is a generator's (``frame`` as :func:`frame_holders` names it, ``batches:5``): its local
            variables stay bound between ``yield`` statements (:func:`generator_frame`).
        forward: ``(model, its input's name, its input's shape, the innermost module's input's shape)``
            where the failure came inside a module's forward (:func:`._failing_op.forward_call`), else ``None``.
        op: the failing operator's record (:class:`._failing_op.FailedOp`; CPU, where the tracker saw it).
        op_name, request_shape, lowered, lowered_how: that operator's name, the shape of its result
            that was the request, and whether bf16 autocast would run it in lower precision on the
            device (``None``: not known), with why (:func:`._failing_op.read_op`).
        given: storage addresses of the tensors the model was given (:func:`._failing_op.given_addresses`).
        reads: names the failing cells read before binding them (read later by the cell, or again
            when it is run again): deleting them is no fix.
        call: what the call running on the failing line asked for, against its inputs
            (:func:`vramnb.diagnose._op_call.call_reading`); its family's cheaper form, where the
            table has one, is :attr:`transient`.
    """

    in_use: set[str] = field(default_factory=set)
    model: str | None = None
    optimizer: str | None = None
    trains: bool = False
    autocast: bool = False
    checkpointing: bool = False
    checkpoint_method: str | None = None
    grad: bool = True
    phase: str = ""
    backward: bool | None = None
    mutated: set[str] = field(default_factory=set)
    results: set[str] = field(default_factory=set)
    stores: dict[str, str] = field(default_factory=dict)
    summed: tuple[str, str, str, str] | None = None
    optim: OptimizerFacts | None = None
    transient: tuple[str, str] | None = None
    built: list[tuple[str, str]] = field(default_factory=list)
    dense_grad: bool = False
    grads: tuple[str, int] | None = None
    optim_is_model: bool = False
    grows: set[str] = field(default_factory=set)
    local_grows: dict[str, tuple[str, str]] = field(default_factory=dict)
    model_grad: bool | None = None
    model_fp32: bool | None = None
    joins: dict[str, tuple[Any, int, str]] = field(default_factory=dict)
    graphs: bool | None = None
    joined: set[str] = field(default_factory=set)
    suspended: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)
    forward: tuple[str, str, tuple[int, ...], tuple[int, ...]] | None = None
    op: Any = None
    op_name: str = ""
    request_shape: tuple[int, ...] | None = None
    lowered: bool | None = None
    lowered_how: str = ""
    reads: set[str] = field(default_factory=set)
    given: frozenset[int] = frozenset()
    call: str | None = None


@dataclass
class OptimizerFacts:
    """What the optimizer in use (:attr:`FailingCode.optimizer`) keeps and how its step runs,
    read from its ``param_groups`` (no user code runs).

    Attributes:
        kind: its class name (``"AdamW"``).
        per_param: state tensors it keeps per trainable parameter, each of the parameter's shape
            and dtype (Adam, AdamW, NAdam, RAdam: 2, ``exp_avg`` and ``exp_avg_sq``; 3 with
            ``amsgrad``); ``None`` for other optimizers (nothing is claimed for them).
        numel: elements of the trainable parameters (``requires_grad``) it steps.
        nbytes: bytes of those parameters (each parameter's ``numel * element_size``).
        foreach: the step runs torch's multi-tensor (``foreach``) kernels: a group sets
            ``foreach=True``, or leaves it and ``fused`` unset on tensors of a device torch's
            default picks them for (``torch.optim.optimizer._default_to_fused_or_foreach``:
            CUDA, not the CPU).
    """

    kind: str
    per_param: int | None
    numel: int
    nbytes: int
    foreach: bool


#: optimizers whose state is, per parameter, ``exp_avg`` and ``exp_avg_sq`` (+ ``max_exp_avg_sq`` with amsgrad)
_TWO_MOMENTS = ("Adam", "AdamW", "NAdam", "RAdam")


def optimizer_facts(opt: Any) -> OptimizerFacts | None:
    """:class:`OptimizerFacts` of a ``torch.optim.Optimizer`` (``None`` if its groups cannot be read)."""
    try:
        groups = object.__getattribute__(opt, "__dict__").get("param_groups") or []
        params = [p for g in groups if type(g) is dict for p in (g.get("params") or [])
                  if isinstance(p, torch.Tensor) and p.requires_grad]
        kind = type(opt).__name__
        per = None
        if any(c.__module__.startswith("torch.optim") and c.__name__ in _TWO_MOMENTS for c in type(opt).__mro__):
            per = 3 if any(type(g) is dict and g.get("amsgrad") for g in groups) else 2
        foreach = False
        from torch.optim.optimizer import _default_to_fused_or_foreach

        for g in groups:
            if type(g) is not dict or g.get("fused"):
                continue
            if g.get("foreach") is None:
                ps = [p for p in (g.get("params") or []) if isinstance(p, torch.Tensor)]
                foreach = foreach or _default_to_fused_or_foreach(ps, bool(g.get("differentiable")), False)[1]
            else:
                foreach = foreach or bool(g.get("foreach"))
        return OptimizerFacts(kind, per, sum(p.numel() for p in params),
                              sum(p.numel() * p.element_size() for p in params), foreach)
    except Exception:  # noqa: BLE001 - the post-mortem must never fail
        return None


#: methods that change a list, dict, set or deque in place (adding to it)
_MUTATORS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "appendleft", "extendleft",
                       "__setitem__", "__iadd__"})


#: calls that run a backward or a training step: ``loss.backward()``, ``torch.autograd.grad(…)``,
#: ``accelerator.backward(loss)``, ``self.manual_backward(loss)``, ``opt.step()``
_TRAINING_CALLS = frozenset({"backward", "manual_backward", "grad", "step"})


def _cell_source(filename: str) -> tuple[str, Any] | None:
    """The text and :mod:`ast` tree of the notebook cell registered in :mod:`linecache` as
    ``filename`` (IPython stores a cell's text there with no modification time; a file on disk,
    a kernel's or a test runner's frame, has one); ``None`` where it is no cell or does not parse."""
    import ast
    import linecache

    entry = linecache.cache.get(filename)
    if not (isinstance(entry, tuple) and len(entry) == 4 and entry[1] is None):
        return None
    text = "".join(linecache.getlines(filename))
    try:
        return text, ast.parse(text)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


def _cell_trains(filename: str) -> tuple[bool | None, set[str]]:
    """Whether the notebook cell registered in :mod:`linecache` as ``filename`` (IPython
    stores a cell's text there with no modification time) calls a backward or a step
    (:data:`_TRAINING_CALLS` as a method, or ``grad`` as ``autograd.grad``), and the names the
    whole cell reads (IPython compiles each top-level statement apart: the failing one alone
    may name no model); ``(None, set())`` where ``filename`` is no cell or does not parse."""
    import ast

    cell = _cell_source(filename)
    if cell is None:
        return None, set()
    tree = cell[1]
    trains = False
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _TRAINING_CALLS:
            if node.func.attr != "grad" or (isinstance(node.func.value, ast.Attribute)
                                            and node.func.value.attr == "autograd") or (
                    isinstance(node.func.value, ast.Name) and node.func.value.id == "autograd"):
                trains = True
    return trains, names


def _cell_reads_from(filename: str, line: int) -> set[str]:
    """Names the notebook cell ``filename`` reads on line ``line`` and after: what the rest of the cell
    still needs (IPython compiles each top-level statement apart, so the failing statement's code names
    only its own); empty where it is no cell."""
    import ast

    cell = _cell_source(filename)
    if cell is None:
        return set()
    return {n.id for n in ast.walk(cell[1]) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and getattr(n, "lineno", 0) >= line}


def _cell_reads(filename: str) -> set[str]:
    """Names the notebook cell ``filename`` reads before (or without) binding them, in source
    order: ``logits`` in ``target = f(labels)`` then ``loss = g(target, logits)``; empty where it is
    no cell. A name the cell binds first (``out = model(x)``) is not among them."""
    import ast

    cell = _cell_source(filename)
    if cell is None:
        return set()
    key: dict[int, tuple[int, int]] = {}  # a target is bound after its statement's value is read: `x = f(x)`
    for node in ast.walk(cell[1]):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            for tg in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for n in ast.walk(tg):
                    key[id(n)] = (node.end_lineno or 0, node.end_col_offset or 0)
    aug = {id(n.target) for n in ast.walk(cell[1]) if isinstance(n, ast.AugAssign)}  # `x += 1` reads x
    first: dict[str, bool] = {}
    nodes = [n for n in ast.walk(cell[1]) if isinstance(n, ast.Name)]
    for n in sorted(nodes, key=lambda n: key.get(id(n), (n.lineno, n.col_offset))):
        first.setdefault(n.id, isinstance(n.ctx, ast.Load) or id(n) in aug)
    return {k for k, v in first.items() if v}


def _code_span(code: Any) -> tuple[Any, int, int] | None:
    """``(the parsed cell, first line, last line)`` of ``code``'s own lines in its notebook cell (a cell's top
    level: the whole cell), ``None`` where the cell's source is not there (see :func:`_mutated_names`)."""
    cell = _cell_source(code.co_filename)
    lines = [ln for _, _, ln in code.co_lines() if ln is not None]
    if cell is None or not cell[0] or not lines:
        return None
    text, tree = cell
    lo, hi = (1, len(text.splitlines())) if code.co_name == "<module>" else (min(lines), max(lines))
    return tree, lo, hi


def _only_under(code: Any, name: str) -> str:
    """The flag under whose test every read of ``name`` in ``code``'s lines other than adding to it lies
    (``tuple(scores) if output_scores else None``, ``if output_scores: ... scores``), else ``""``."""
    import ast

    span = _code_span(code)
    if span is None:
        return ""
    tree, lo, hi = span
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    flags = set()
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)
                and lo <= getattr(n, "lineno", 0) <= hi):
            continue
        p = parents.get(id(n))
        if isinstance(p, ast.Attribute) and p.attr in _MUTATORS:
            continue
        child: Any = n
        flag, up = "", p
        while up is not None and not flag:
            if isinstance(up, (ast.IfExp, ast.If)) and child is not up.test and isinstance(up.test, ast.Name) \
                    and child in (up.body if isinstance(up, ast.If) else [up.body]):
                flag = up.test.id
            child, up = up, parents.get(id(up))
        if not flag:
            return ""
        flags.add(flag)
    return flags.pop() if len(flags) == 1 else ""


def _read_whole(code: Any, names: set[str]) -> set[str]:
    """Of ``names``, those the source of ``code``'s cell (or function) reads whole somewhere: a name
    loaded that is not the receiver of a mutating method (``x.append``), an augmented assignment's or a
    subscript assignment's target, nor the sole argument of ``len``. Empty where the source is not there."""
    import ast

    span = _code_span(code) if names else None
    if span is None:
        return set()
    tree, lo, hi = span
    parents = {id(c): p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    out: set[str] = set()
    for n in ast.walk(tree):
        if not (isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
                and lo <= getattr(n, "lineno", 0) <= hi):
            continue
        p = parents.get(id(n))
        if isinstance(p, ast.Attribute) and p.attr in _MUTATORS:
            continue
        if isinstance(p, ast.Subscript) and isinstance(p.ctx, ast.Store):
            continue
        if isinstance(p, ast.AugAssign) and p.target is n:
            continue
        if isinstance(p, ast.Call) and isinstance(p.func, ast.Name) and p.func.id == "len" and p.args == [n]:
            continue
        out.add(n.id)
    return out


def _mutated_names(code: Any) -> set[str]:
    """Names whose object ``code``'s own source lines change in place (see
    :attr:`FailingCode.mutated`): only the code of a notebook cell (or a function defined in
    one), whose text IPython registers in :mod:`linecache` with no modification time (a file
    on disk, a kernel's or a test runner's frame, has one), parsed with :mod:`ast`, only the
    nodes on ``code``'s lines. Empty where the source is not there or does not parse (nothing
    is claimed)."""
    import ast

    span = _code_span(code)
    if span is None:
        return set()
    tree, lo, hi = span

    def root(node: Any) -> str | None:
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        return node.id if isinstance(node, ast.Name) else None

    out: set[str] = set()
    for node in ast.walk(tree):
        if not lo <= getattr(node, "lineno", 0) <= hi:
            continue
        name = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MUTATORS:
            name = root(node.func.value)
        elif isinstance(node, ast.AugAssign):
            name = root(node.target)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Subscript) and (n := root(t.value)) is not None:
                    out.add(n)
        if name is not None:
            out.add(name)
    return out


def held_outside(now: int, device: torch.device, model: torch.nn.Module, optimizer: Any,
                 batch: list[torch.Tensor]) -> int:
    """Of ``now`` bytes allocated on ``device``, those that are not the model's parameters,
    buffers and gradients, the optimizer's state or the batch (each storage once)."""
    tensors: list[torch.Tensor] = list(model.parameters()) + list(model.buffers()) + list(batch)
    tensors += [p.grad for p in model.parameters() if p.grad is not None]
    if optimizer is not None:
        tensors += state_tensors(optimizer)
    seen: dict[int, int] = {}
    for t in tensors:
        try:
            for _, st in storages_of_tensor(t):
                if st.device.type == device.type:
                    seen[st.data_ptr() or id(st)] = st.nbytes()
        except Exception:  # noqa: BLE001 - meta, fake or odd tensors hold nothing here
            continue
    return max(0, now - sum(seen.values()))


# -- where the state goes ---------------------------------------------------------------
# (device name, callback(state)) of each running capture; the measurements register here
_CAPTURES: list[tuple[str, Callable[[OOMState], None]]] = []
_LOCK = threading.Lock()
_OBSERVED = False


def listening(device: str, callback: Callable[[OOMState], None]) -> Callable[[], None]:
    """Send the state of out-of-memory failures on ``device`` to ``callback`` until the
    returned function is called."""
    entry = (device, callback)
    with _LOCK:
        _CAPTURES.append(entry)

    def stop() -> None:
        with _LOCK:
            if entry in _CAPTURES:
                _CAPTURES.remove(entry)
    return stop


def oom_device_name(device: torch.device) -> str:
    """The name the captures use for ``device``: ``"cpu"``, ``"cuda:N"`` (the current device for a bare
    ``"cuda"``, read only where CUDA is initialised)."""
    if device.type != "cuda":
        return device.type
    if device.index is not None:
        return f"cuda:{device.index}"
    return f"cuda:{torch.cuda.current_device() if torch.cuda.is_initialized() else 0}"


def _deliver(state: OOMState) -> None:
    with _LOCK:
        targets = [cb for dev, cb in _CAPTURES if dev == state.device]
    for cb in targets:
        try:
            cb(state)
        except Exception:  # noqa: BLE001 - a capture must never change the user's error
            pass


def _wanted(device: str) -> bool:
    with _LOCK:
        return any(dev == device for dev, _ in _CAPTURES)


# -- CUDA ---------------------------------------------------------------------------------
def install_cuda_observer() -> bool:
    """Attach vramnb's out-of-memory observer to the caching allocator, once per
    process. Returns whether one is attached (``False`` on builds without the API)."""
    global _OBSERVED
    if _OBSERVED:
        return True
    attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if attach is None or not torch.cuda.is_available():
        return False
    try:
        attach(_cuda_observer)
    except Exception:  # noqa: BLE001
        return False
    _OBSERVED = True
    return True


def _cuda_observer(device: int, requested: int, limit: int, free: int) -> None:
    name = f"cuda:{device}"
    if not _wanted(name):
        return
    try:
        state = cuda_state(device, requested, limit, free)
    except Exception:  # noqa: BLE001 - reading the state must never change the user's error
        return
    _deliver(state)


def cuda_state(device: int, requested: int, limit: int, free: int) -> OOMState:
    """The :class:`OOMState` from the observer's arguments and the allocator's counters."""
    stats = torch.cuda.memory_stats(device)
    allocated = int(stats.get("allocated_bytes.all.current", 0))
    reserved = int(stats.get("reserved_bytes.all.current", 0))
    total = torch.cuda.get_device_properties(device).total_memory
    others = _other_processes(device)
    non_pytorch = max(0, total - free - reserved - (others or 0))
    return OOMState(f"cuda:{device}", True, int(requested), allocated, reserved, total,
                    int(limit) if limit < total else None, int(free), largest_free_block(device), non_pytorch,
                    others, frames=(fr := frame_sharing(torch.device("cuda", device)))[0], frames_share=fr[1],
                    frames_graph=fr[2],
                    handled=_handled(torch.device("cuda", device)),
                    context=failing_code(_stack(sys._getframe(1)), int(requested)))


def _handled(device: torch.device) -> list[tuple[str, str, int, int]]:
    try:
        return handled_sharing(device)
    except Exception:  # noqa: BLE001 - reading the state must never change the user's error
        return []


def largest_free_block(device: int) -> int | None:
    """The largest free (``inactive``) block inside the caching allocator's segments on ``device``."""
    try:
        segments = torch.cuda.memory._snapshot(device)["segments"]
    except Exception:  # noqa: BLE001
        return None
    best = 0
    for seg in segments:
        if seg.get("device", device) != device:
            continue
        for b in seg.get("blocks", ()):
            if b.get("state") == "inactive":
                best = max(best, int(b.get("size", 0)))
    return best


def _other_processes(device: int) -> int | None:
    """Device memory held by other processes (NVML), ``None`` without ``pynvml``."""
    try:
        import pynvml

        pynvml.nvmlInit()
        index = torch.cuda._get_nvml_device_index(device) if hasattr(torch.cuda, "_get_nvml_device_index") else device
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        me = os.getpid()
        return sum(int(p.usedGpuMemory or 0) for p in procs if p.pid != me)
    except Exception:  # noqa: BLE001
        return None


# -- CPU ----------------------------------------------------------------------------------
def capture_cpu_oom(requested: int | None, allocated: int, op: Any = None) -> None:
    """Called by the storage tracker where a CPU allocation failed: deliver the state to
    the running measurements on the CPU (nothing when none runs). ``op``: the failing operator's
    record (:class:`._failing_op.FailedOp`), if known: the call's reading and the autocast gate read it."""
    if not _wanted("cpu"):
        return
    try:
        cap, room, which = process_limit()
        state = OOMState("cpu", True, requested, allocated, cap=cap, available=_mem_available(),
                         frames=(fr := frame_sharing(torch.device("cpu")))[0], frames_share=fr[1],
                         frames_graph=fr[2], cap_room=room, cap_name=which,
                         handled=_handled(torch.device("cpu")),
                         context=failing_code(_stack(sys._getframe(1)), requested, op))
        if state.context is not None:
            state.context.op = op
    except Exception:  # noqa: BLE001
        return
    _deliver(state)


def process_limit() -> tuple[int | None, int | None, str | None]:
    """``(limit, room, name)``: the tightest of this process's address-space and data limits
    (``resource.RLIMIT_AS`` against ``VmSize``, ``RLIMIT_DATA`` against ``VmData`` in
    ``/proc/self/status``), the bytes it still allows, and its name (``"RLIMIT_AS"``);
    ``(None, None, None)`` where none is set."""
    try:
        import resource

        with open("/proc/self/status") as f:
            used = {k: int(v.split()[0]) * 1024 for k, v in (ln.split(":", 1) for ln in f if ":" in ln)
                    if k in ("VmSize", "VmData")}
    except (ImportError, OSError, ValueError):
        return None, None, None
    best: tuple[int | None, int | None, str | None] = (None, None, None)
    for name, key in (("RLIMIT_AS", "VmSize"), ("RLIMIT_DATA", "VmData")):
        soft = resource.getrlimit(getattr(resource, name))[0]
        if soft == resource.RLIM_INFINITY or key not in used:
            continue
        room = max(0, soft - used[key])
        if best[1] is None or room < best[1]:
            best = (soft, room, name)
    return best


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# -- the frames on the stack --------------------------------------------------------------
# the packages' folders, with the separator: torchvision's, torch_geometric's or a user's
# ``vramnb_experiments`` folder beside them are not theirs
_SKIP = tuple(os.path.join(d, "") for d in (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(__file__))))
_TORCH = os.path.join(os.path.dirname(torch.__file__), "")


def _user_frame(frame: Any) -> bool:
    """A frame of the user's code, not a module's top level (whose locals are the namespace the
    holders already cover), torch's, vramnb's or IPython's."""
    f = frame.f_code.co_filename
    return (frame.f_code.co_name != "<module>" and not f.startswith(_SKIP) and "/IPython/" not in f
            and not f.startswith("<frozen"))


_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR


def generator_frame(frame: Any) -> tuple[str, str, tuple[str, ...]] | None:
    """``(frame as frame_holders names it, the generator's name, the names the frame's current line
    assigns)`` where ``frame`` is a generator's (``CO_GENERATOR``, ``CO_ASYNC_GENERATOR``), else
    ``None``. The line is read from :mod:`linecache` (no user code runs); an unreadable line assigns
    nothing."""
    code = frame.f_code
    if not code.co_flags & _GENERATOR_FLAGS:
        return None
    name = getattr(code, "co_qualname", code.co_name)
    assigned: tuple[str, ...] = ()
    try:
        import ast
        import linecache

        line = linecache.getline(code.co_filename, frame.f_lineno).strip()
        tree = ast.parse(line)
        assigned = tuple(dict.fromkeys(n.id for n in ast.walk(tree)
                                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)))
    except (SyntaxError, ValueError):
        pass
    return f"{name}:{frame.f_lineno}", name, assigned


def failing_code(frames: list[Any], requested: int | None = None, op: Any = None) -> FailingCode:
    """:class:`FailingCode` from the frames of a failure, innermost first. Reads code
    objects' names and the frames' globals by name (``dict.get``: no user code runs);
    ``requested``: the bytes the failing allocation asked for (read against the failing line);
    ``op``: the failing operator's record (:class:`._failing_op.FailedOp`), if known."""
    from ._autocast_cache import _nesting
    from ._transient import transient_copy

    ctx = FailingCode()
    only_grad_off = False
    try:
        ctx.autocast = _nesting() > 0
        ctx.grad = torch.is_grad_enabled()
    except Exception:  # noqa: BLE001
        pass
    ckpt_file = os.path.join("torch", "utils", "checkpoint.py")
    optim_dir = os.sep + os.path.join("torch", "optim", "")
    backward_files = (os.path.join("torch", "autograd", "__init__.py"), os.path.join("torch", "_tensor.py"))
    best = -1
    g: Any = None
    model_obj: Any = None
    opt_ns: Any = None
    model_ns: Any = None
    for frame in frames:
        code = frame.f_code
        if code.co_filename.endswith(ckpt_file):
            ctx.checkpointing = True
        if not ctx.phase and optim_dir in code.co_filename:
            ctx.phase = "optimizer step"
        elif not ctx.phase and code.co_name == "backward" and code.co_filename.endswith(backward_files):
            ctx.phase = "backward"
        if not (_user_frame(frame) or code.co_name == "<module>") or code.co_filename.startswith(_SKIP):
            continue
        if "/IPython/" in code.co_filename:
            continue
        gen = generator_frame(frame)
        if gen is not None:
            ctx.suspended.append(gen)
        if ctx.transient is None and not ctx.in_use:  # the innermost frame of the notebook's code
            try:
                ctx.transient = transient_copy(frame, requested)
                if ctx.transient is None:  # the operation of the line that asked, and its non-copying form
                    from ._line_copies import joined_names, line_copy, module_activation

                    found = module_activation(frames, requested, [frame.f_globals]) or line_copy(frame, requested)
                    if found is not None:
                        ctx.transient, only_grad_off = found[:2], found[2]
                        ctx.joined = joined_names(frame)
            except Exception:  # noqa: BLE001 - no advice rather than a broken post-mortem
                pass
            if ctx.call is None and ctx.phase not in ("backward", "optimizer step"):  # the call's own reading
                from ._op_call import call_reading

                try:
                    read = call_reading(frame, requested, op)
                except Exception:  # noqa: BLE001 - no reading rather than a broken post-mortem
                    read = None
                if read is not None:
                    ctx.call = read[0]
                    ctx.transient = read[1] or ctx.transient  # the call's family first (one_hot before its .float())
        names = set(code.co_names)
        ctx.in_use |= names
        if code.co_name == "<module>":  # the rest of the cell still needs what it reads from here on
            ctx.in_use |= _cell_reads_from(code.co_filename, frame.f_lineno)
        changed = _mutated_names(code)  # the cell's source parsed once for both uses
        added = changed & names
        ctx.mutated |= added
        if code.co_name == "<module>":  # IPython compiles each statement apart: the cell's other statements too
            added |= changed & _cell_reads_from(code.co_filename, 0) - added
        ctx.results |= _read_whole(code, added)
        if added:
            from ._growing import growing

            ctx.grows |= growing(added, None, frame.f_globals)
        trains, cell_names = _cell_trains(code.co_filename)
        ctx.reads |= _cell_reads(code.co_filename)
        if trains is not None:
            ctx.backward = bool(ctx.backward) or trains
        g = frame.f_globals
        _read_cell(ctx, code.co_filename, g)
        for name in names | cell_names:
            obj = dict.get(g, name) if type(g) is dict else None
            if obj is None:
                continue
            tp = type(obj)
            if issubclass(tp, torch.nn.Module):
                ctx.trains = True
                n, ckpt = _parameter_count(obj)
                if n > best:
                    from ..techniques.checkpointing import hf_method

                    best, ctx.model, ctx.checkpoint_method = n, name, hf_method(obj)
                    model_obj = obj
                    model_ns = g
                if ckpt:  # Hugging Face's flag on a layer, read from its __dict__
                    ctx.checkpointing = True
            elif issubclass(tp, torch.optim.Optimizer) and ctx.optimizer is None:
                ctx.optimizer = name
                ctx.optim = optimizer_facts(obj)
                opt_ns = g  # the namespace that names it (outer frames: the kernel's, the test runner's)
        if _user_frame(frame) and code.co_name != "<module>":  # a function's own lists it adds to
            try:
                local = set(code.co_varnames) & _mutated_names(code)
                for var in local:
                    ctx.local_grows.setdefault(var, (getattr(code, "co_qualname", code.co_name), _only_under(code, var)))
            except Exception:  # noqa: BLE001 - no such line rather than a broken post-mortem
                pass
        for _, val in frame_locals(frame) if _user_frame(frame) else ():
            if issubclass(type(val), torch.nn.Module):
                ctx.trains = True
        val = None
        if ctx.optimizer is not None and ctx.model is None and type(g) is dict:
            ctx.model = _model_of(dict.get(g, ctx.optimizer), g)
    if ctx.model is not None and ctx.phase != "optimizer step" and type(model_ns) is dict:
        # the module whose forward/backward failed, not the largest the cell names (an idle copy beside it)
        from ..techniques.checkpointing import hf_method
        from ._failing_module import failing_module

        pick = failing_module(frames, model_ns, ctx.in_use, ctx.phase == "backward")
        if pick is not None and pick != ctx.model:
            model_obj = dict.get(model_ns, pick)  # the gradients left are this module's too
            ctx.model, ctx.checkpoint_method = pick, hf_method(model_obj)
    if model_obj is not None and ctx.model is not None:
        from ._failing_module import raw_parameters

        ps = [p for p in raw_parameters(model_obj, _BUDGET) if type(p) is torch.nn.Parameter]
        if ps:
            ctx.model_grad = any(p.requires_grad for p in ps)
            ctx.model_fp32 = any(p.dtype == torch.float32 for p in ps)
    if ctx.optimizer is not None and ctx.model is not None and type(opt_ns) is dict:
        from ._optim_target import steps_exactly

        ctx.optim_is_model = steps_exactly(dict.get(opt_ns, ctx.optimizer), dict.get(opt_ns, ctx.model))
    try:  # the module call the failure came in (its model and input), if any
        from ._failing_op import forward_call

        ctx.forward = forward_call(frames, model_ns if model_ns is not None else g)
        if ctx.forward is not None:
            from ._failing_op import given_addresses

            ctx.given = given_addresses(frames)
    except Exception:  # noqa: BLE001 - no advice rather than a broken post-mortem
        pass
    if ctx.grad:  # read now, after unwinding, a `with torch.no_grad():` around the failing line has exited
        from ._grad_mode import grad_mode_of_frames

        mine = []
        for f in frames:  # up to IPython's (outer ones are the kernel's machinery, not the user's)
            if "/IPython/" in f.f_code.co_filename:
                break
            if not f.f_code.co_filename.startswith(_SKIP):
                mine.append(f)
        if grad_mode_of_frames(mine) is False:
            ctx.grad = False
    if ctx.phase == "backward":  # the autograd engine runs backward with gradients off: the code trains
        ctx.grad = True
    elif ctx.grad:  # on: is anything the failing code holds saved for a backward?
        from ._graphs_held import holds_graph

        ctx.graphs = holds_graph(frames)
    from ._construct import constructing, constructor_fixes, dense_embedding_grad

    if not ctx.phase and constructing(frames) is not None:  # no forward, no backward: parameters and buffers
        ctx.phase = "constructor"
        ctx.built = constructor_fixes(frames, requested)
    if ctx.phase == "backward" and model_obj is not None:
        dense = dense_embedding_grad(model_obj, ctx.model, requested)
        if dense is not None:
            ctx.transient, ctx.dense_grad = dense, True
    if only_grad_off and ctx.grad:  # an in-place form is advice only where no backward needs the input
        ctx.transient = None
    if not ctx.grad and model_obj is not None and ctx.model is not None:
        from ._grads_left import grad_bytes

        held = grad_bytes(model_obj)
        ctx.grads = (ctx.model, held) if held else None
    return ctx


def _read_cell(ctx: FailingCode, filename: str, namespace: Any) -> None:
    """Fill ``ctx.stores`` and ``ctx.summed`` from the notebook cell ``filename`` (nothing where it is no cell)."""
    from ._cell_code import stored_instead, summed_before_backward

    cell = _cell_source(filename)
    if cell is None or type(namespace) is not dict:
        return
    try:
        for k, v in stored_instead(cell[0], namespace).items():
            ctx.stores.setdefault(k, v)
        ctx.summed = ctx.summed or summed_before_backward(cell[0])
        from ._growing import growing, self_joins

        ctx.grows |= growing(set(), cell[0], namespace)
        for name, join in self_joins(cell[1]).items():
            val: Any = dict.get(namespace, name)
            if type(val) in _PLAIN_TENSORS:  # the storage a plain tensor holds now (a subclass's size is its code)
                ctx.joins.setdefault(name, (join, int(val.untyped_storage().nbytes()), val.device.type))
            else:
                ctx.joins.setdefault(name, (join, 0, ""))
    except Exception:  # noqa: BLE001 - no advice rather than a broken post-mortem
        pass


def _model_of(opt: Any, namespace: dict[str, Any]) -> str | None:
    """The name in ``namespace`` of the module whose parameters ``opt`` steps (the largest
    share), read from ``param_groups`` and the modules' ``_parameters``/``_modules`` dicts."""
    try:
        groups = object.__getattribute__(opt, "__dict__").get("param_groups") or []
        ids = {id(p) for g in groups if type(g) is dict for p in (g.get("params") or [])}
    except Exception:  # noqa: BLE001
        return None
    from ._failing_module import raw_parameters

    best, name = 0, None
    for n, obj in list(namespace.items())[:_ITEMS]:
        if not issubclass(type(obj), torch.nn.Module) or n.startswith("_"):
            continue
        hits = sum(1 for p in raw_parameters(obj, _BUDGET) if id(p) in ids)
        if hits > best:
            best, name = hits, n
    return name


def _parameter_count(module: Any, depth: int = 0, visited: set[int] | None = None) -> tuple[int, bool]:
    """Elements of a module's parameters and whether any of its modules has Hugging Face's
    ``gradient_checkpointing`` flag set, read from the ``_parameters``/``_modules`` dicts and
    the instance ``__dict__`` (no overridden ``parameters()``, ``named_modules()`` or
    ``__getattr__``: the user's code); each module once."""
    visited = set() if visited is None else visited
    if depth >= 32 or id(module) in visited or len(visited) > _BUDGET:
        return 0, False
    visited.add(id(module))
    d = object.__getattribute__(module, "__dict__")
    n = 0
    ckpt = dict.get(d, "gradient_checkpointing") is True
    params = dict.get(d, "_parameters")
    if type(params) is dict:
        n += sum(p.numel() for p in dict.values(params) if type(p) is torch.nn.Parameter)
    mods = dict.get(d, "_modules")
    if type(mods) is dict:
        for m in dict.values(mods):
            if issubclass(type(m), torch.nn.Module):
                k, c = _parameter_count(m, depth + 1, visited)
                n, ckpt = n + k, ckpt or c
    return n, ckpt


def _stack(start: Any) -> list[Any]:
    out: list[Any] = []
    while start is not None and len(out) < 64:
        out.append(start)
        start = start.f_back
    return out


def frame_holders(device: torch.device, limit: int = 8) -> list[tuple[str, str, int, int]]:
    """The frames' holders of :func:`frame_sharing`."""
    return frame_sharing(device, limit)[0]


def frame_sharing(device: torch.device, limit: int = 8) -> tuple[list[tuple[str, str, int, int]], bool, int | None]:
    """``(frame, variable, bytes, of which through its autograd graph)``: tensors on ``device`` held by the local variables of
    the user's frames on this thread's stack (not torch's, vramnb's or IPython's),
    innermost first, each storage counted once (a sparse tensor or a wrapper subclass by
    the storages of its parts); the ``limit`` largest. No user code runs (no
    ``__torch_function__``, no overridden ``values``/``__getitem__``) and no reference is
    kept (see :func:`vramnb._graph.frame_locals`). The flag: whether a storage one variable
    keeps was already counted for another (two of them share it). The int: the bytes all the
    variables (not only the ``limit`` largest) and the failing cells' namespaces hold through
    autograd graphs, each storage once: what was saved for a backward, all that recomputing
    activations could free (``None`` where the walk reached its bounds: then only a lower bound)."""
    walk = _Walk(device)  # storages counted once; containers, modules and graph nodes visited once, bounded
    out: list[tuple[str, str, int, int]] = []
    cells: dict[int, Any] = {}  # the namespaces the failing cells' own code runs in (a cell's top level)
    inner: list[list[tuple[str, Any]]] = []  # torch's frames' variables
    frame: FrameType | None = sys._getframe(1)
    depth = 0
    while frame is not None and depth < 64:
        depth += 1
        code = frame.f_code
        if code.co_name == "<module>" and not code.co_filename.startswith(_SKIP) \
                and "/IPython/" not in code.co_filename and not code.co_filename.startswith("<frozen"):
            cells.setdefault(id(frame.f_globals), frame.f_globals)
        elif code.co_name != "<module>" and code.co_filename.startswith(_TORCH):
            # torch's own frames (a module's forward, F.multi_head_attention_forward): their variables keep
            # graphs too; not listed as holders
            inner.append(frame_locals(frame))
        if _user_frame(frame):
            where = f"{getattr(frame.f_code, 'co_qualname', frame.f_code.co_name)}:{frame.f_lineno}"
            var = val = None
            for var, val in frame_locals(frame):
                walk.var += 1
                g0 = walk.graph
                try:
                    n = _tensor_bytes(val, walk)
                except Exception:  # noqa: BLE001 - a strange object holds nothing we can see
                    n = 0
                if n:
                    out.append((where, var, n, walk.graph - g0))
            del var, val
        frame = frame.f_back
    del frame
    shared = walk.shared  # what the frames' variables share; the namespaces' names are the holders' listing
    others = [v for loc in inner for _, v in loc]
    inner.clear()
    for names in [*cells.values(), others]:  # after the frames: a storage a variable holds is its, not a graph's
        val = None
        for val in list(dict.values(names)) if type(names) is dict else names:
            try:
                _tensor_bytes(val, walk)
            except Exception:  # noqa: BLE001 - a strange object holds nothing we can see
                pass
        del val
    cells.clear()
    graph = walk.graph if walk.budget >= 0 and len(walk.nodes) < _NODES else None
    walk.nodes.clear()
    walk.visited.clear()
    out.sort(key=lambda t: -t[2])
    return out[:limit], shared, graph


_ITEMS = 10_000  # items of a local list, tuple or dict looked at
_BUDGET = 200_000  # objects looked at in all, per post-mortem
_NODES = 20_000  # autograd nodes walked in all, per post-mortem


class _Walk:
    """One post-mortem's walk: storages counted, containers and modules visited (each once:
    lists aliased at every level, a module used twice at every level), what is left of the
    budget, and the autograd nodes walked (kept alive while walking, cleared at the end)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seen: set[int] = set()
        self.visited: set[int] = set()
        self.budget = _BUDGET
        self.nodes: dict[int, Any] = {}
        self.graph = 0  # bytes counted through autograd graphs (saved for backward), so far
        self.var = 0  # which variable is being walked (frame_sharing)
        self.first: dict[int, int] = {}  # storage key -> the variable it was counted for
        self.shared = False  # a storage counted for one variable is kept by another too
        # count the leaves a graph reaches (AccumulateGrad keeps them) too: where what the names keep is
        # already in ``seen``, what is left is what the graph alone keeps (a leaf made in the failing code)
        self.leaves = False


def _tensor_bytes(val: Any, walk: _Walk, depth: int = 0) -> int:
    """Bytes on ``walk.device`` of the storages ``val`` keeps that ``walk.seen`` does not hold yet: a
    tensor's own (and, for one computed with autograd, what its graph saved for backward:
    activations of a forward cut short, leaves excluded), a module's parameters, gradients
    and buffers, and the items of lists, tuples and dicts up to three levels down. Each
    container and module is visited once and the walk is bounded (:class:`_Walk`)."""
    device = walk.device
    walk.budget -= 1
    if walk.budget < 0:
        return 0
    # type(), not isinstance: isinstance reads ``__class__`` (a mock, a proxy, a lazy object answer it)
    tp = type(val)
    if issubclass(tp, torch.Tensor):
        n = _storages_bytes(val, device, walk.seen, walk)
        fn = val.grad_fn if tp in _PLAIN_TENSORS else None
        if fn is not None and len(walk.nodes) < _NODES:
            from .._graph import graph_tensors

            for t in graph_tensors(fn, walk.nodes, grads=False):
                if type(t) in _PLAIN_TENSORS and (walk.leaves or not (t.is_leaf and t.requires_grad)):
                    g = _storages_bytes(t, device, walk.seen, walk)
                    n += g
                    walk.graph += g
                if len(walk.nodes) >= _NODES:
                    break
        return n
    if id(val) in walk.visited:
        return 0
    if issubclass(tp, torch.nn.Module):
        if depth >= 32:
            return 0
        walk.visited.add(id(val))
        d = object.__getattribute__(val, "__dict__")
        n = 0
        for attr in ("_parameters", "_buffers"):
            tensors = dict.get(d, attr)
            if type(tensors) is dict:
                for t in dict.values(tensors):
                    if t is not None and issubclass(type(t), torch.Tensor):
                        n += _storages_bytes(t, device, walk.seen, walk)
                        grad = t.grad if type(t) in _PLAIN_TENSORS else None
                        if grad is not None:
                            n += _storages_bytes(grad, device, walk.seen, walk)
        mods = dict.get(d, "_modules")
        if type(mods) is dict:
            n += sum(_tensor_bytes(m, walk, depth + 1) for m in dict.values(mods)
                     if issubclass(type(m), torch.nn.Module))
        return n
    if depth >= 3:
        return 0
    # the containers' own items, never a subclass's overridden accessors (the user's code)
    if issubclass(tp, list):
        items: Any = list.__getitem__(val, slice(0, _ITEMS))
    elif issubclass(tp, tuple):
        items = tuple.__getitem__(val, slice(0, _ITEMS))
    elif issubclass(tp, dict):
        items = itertools.islice(dict.values(val), _ITEMS)
    else:
        return 0
    walk.visited.add(id(val))
    total = 0
    for v in items:
        if walk.budget < 0:
            break
        total += _tensor_bytes(v, walk, depth + 1)
    return total


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)


def _storages_bytes(t: Any, device: torch.device, seen: set[int], walk: _Walk | None = None) -> int:
    n = 0
    with torch._C.DisableTorchFunctionSubclass():  # a subclass's __torch_function__ is the user's code
        parts = storages_of_tensor(t)
    for key, st in parts:
        d = st.device
        if d.type != device.type or (device.index is not None and d.index != device.index):
            continue
        if key in seen:
            if walk is not None and walk.first.get(key, walk.var) != walk.var:
                walk.shared = True
            continue
        seen.add(key)
        if walk is not None:
            walk.first[key] = walk.var
        n += int(st.nbytes())
    return n


# What the exception being handled keeps (a retry inside `except`), here beside the walk it uses
# (a module of its own imported this one back: an import cycle).
_CHAIN = 8


#: the name given to what the frames of torch's operator call keep (its arguments) in a handled traceback
_OPERANDS = "the failed operator's operands"


def _dispatch_frame(frame: Any) -> bool:
    """A frame of torch's (or vramnb's) code that an operator call runs through (an ``OpOverload``'s
    ``__call__``, a dispatch mode's ``__torch_dispatch__`` and its wrappers): its locals are the
    operator's arguments, which a traceback through it keeps alive."""
    f = frame.f_code.co_filename
    return frame.f_code.co_name != "<module>" and f.startswith(_SKIP)


def handled_sharing(device: torch.device, limit: int = 8) -> list[tuple[str, str, int, int]]:
    """``(frame, variable, bytes, of which through its autograd graph)`` of tensors on ``device``
    that the finished frames of the exception being handled on this thread (and the exceptions
    it chains to) keep in their locals, the ``limit`` largest; each storage counted once, and
    not where a frame still running or a name of the running cell's namespace keeps it. What the
    frames of torch's operator call keep (an operator that failed under a dispatch mode, the
    tracker's: its arguments) is one entry, :data:`_OPERANDS`, at the user's frame that called
    it. ``[]`` where no exception is being handled."""
    from .._graph import frame_locals

    handled = sys.exc_info()[1]
    if handled is None:
        return []
    walk = _Walk(device)
    running: set[int] = set()
    frame: Any = sys._getframe(1)
    depth = 0
    spaces: set[int] = set()
    while frame is not None and depth < 64:  # what running frames keep is theirs, and the notebook's names'
        depth += 1
        running.add(id(frame))
        if _user_frame(frame):
            for _, val in frame_locals(frame):
                try:
                    _tensor_bytes(val, walk)
                except Exception:  # noqa: BLE001
                    pass
            val = None
        elif (frame.f_code.co_name == "<module>" and not frame.f_code.co_filename.startswith(_SKIP)
              and "/IPython/" not in frame.f_code.co_filename and type(frame.f_globals) is dict
              and id(frame.f_globals) not in spaces):  # a cell's namespace: leaving the except block frees none of it
            spaces.add(id(frame.f_globals))
            for name, val in list(dict.items(frame.f_globals))[:_ITEMS]:
                if not name.startswith("_"):
                    try:
                        _tensor_bytes(val, walk)
                    except Exception:  # noqa: BLE001
                        pass
            val = None
        frame = frame.f_back
    out: list[tuple[str, str, int, int]] = []
    seen: set[int] = set()
    todo: list[Any] = [handled]
    while todo and len(seen) < _CHAIN:
        exc = todo.pop(0)
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        tb = getattr(exc, "__traceback__", None)
        where = ""  # the innermost user frame so far: where the operator below it was called
        inner = [0, 0]  # what torch's (and the tracker's) frames below it keep: the failed operator's operands
        while tb is not None:
            f = tb.tb_frame
            user = _user_frame(f)
            if id(f) not in running and (user or _dispatch_frame(f)):
                if user:
                    where = f"{getattr(f.f_code, 'co_qualname', f.f_code.co_name)}:{tb.tb_lineno}"
                for var, val in frame_locals(f):
                    g0 = walk.graph
                    try:
                        n = _tensor_bytes(val, walk)
                    except Exception:  # noqa: BLE001
                        n = 0
                    if n and user:
                        out.append((where, var, n, walk.graph - g0))
                    elif n:
                        inner[0] += n
                        inner[1] += walk.graph - g0
                val = None
            tb = tb.tb_next
        if inner[0] and where:
            out.append((where, _OPERANDS, inner[0], inner[1]))
        todo += [getattr(exc, "__cause__", None), getattr(exc, "__context__", None)]
    frame = f = tb = None
    walk.nodes.clear()
    walk.visited.clear()
    out.sort(key=lambda t: -t[2])
    return out[:limit]
