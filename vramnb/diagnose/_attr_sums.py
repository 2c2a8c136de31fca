"""Autograd graphs chained onto an attribute of an object the cell names, by a method of its
class (``self.sum += val`` in a ``Metric.update`` the cell calls with its loss): which
``object.attribute`` keeps them, the statement and where it is (``Class.method``, file:line),
and the ``.detach()`` / ``.item()`` to add there. Read from the object's attributes (its
``__dict__`` and slots, no property or ``__getattr__`` runs) and from its class's methods'
source (:mod:`inspect`, :mod:`ast`): no user code runs."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Mapping
from typing import Any

import torch

from .._graph import container_items, is_tooling, object_attributes

__all__ = ["attribute_sums", "AttrSum"]

_PLAIN = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer, list, tuple, dict, set, frozenset, str, bytes, int,
          float, bool, type(None))


class AttrSum:
    """One attribute that a method adds graphs to: ``path`` (``train_loss.sum``), ``stmt``
    (``self.sum += val``), ``expr`` (``val``), ``append`` (a list the method appends to, or a dict
    whose entries it adds to: ``self.totals[k] += v``),
    ``where`` (``Metric.update, file:line`` or ``Metric.update``), ``tensors`` (what the
    attribute holds, for the bytes of their graphs)."""

    def __init__(self, path: str, stmt: str, expr: str, append: bool, where: str, tensors: list[torch.Tensor]) -> None:
        self.path, self.stmt, self.expr, self.append, self.where, self.tensors = path, stmt, expr, append, where, tensors

    def fix(self) -> str:
        """The sentence: the statement, where it is, what it chains, what to add there."""
        e = _call(self.expr, "detach")
        if self.append and "+=" in self.stmt:  # self.totals[k] += v
            return (f"`{self.stmt}` in {self.where} chains each graph onto {self.path}'s entries: add `{e}` there "
                    f"(or `{_call(self.expr, 'item')}`, a number)")
        if self.append:
            return (f"`{self.stmt}` in {self.where} keeps each graph in {self.path}: append `{e}` there "
                    f"(or `{_call(self.expr, 'item')}` for a number)")
        return (f"`{self.stmt}` in {self.where} chains each graph onto {self.path}: add `{e}` there "
                f"(or `{_call(self.expr, 'item')}`, a number)")


def _call(expr: str, method: str) -> str:
    try:
        simple = isinstance(ast.parse(expr, mode="eval").body, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
    except SyntaxError:
        simple = False
    return f"{expr}.{method}()" if simple else f"({expr}).{method}()"


def _self_attr(node: Any, self_name: str) -> str | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == self_name:
        return node.attr
    return None


def _method_adds(cls: type) -> dict[str, tuple[str, str, bool, str]]:
    """``{attribute: (statement, added expression, whether appended, where)}`` of the methods
    defined in ``cls`` and its bases (not ``object``'s, nor those of classes from compiled or
    library code with no source): ``self.a += e``, ``self.a = self.a + e``, ``self.a.append(e)``,
    ``self.a[k] += e``."""
    out: dict[str, tuple[str, str, bool, str]] = {}
    for klass in cls.__mro__:
        if klass is object or (getattr(klass, "__module__", "") or "").split(".")[0] in ("torch", "builtins"):
            continue
        for fname, fn in list(vars(klass).items()):
            if not inspect.isfunction(fn):
                continue
            try:
                lines, start = inspect.getsourcelines(fn)
                tree = ast.parse(textwrap.dedent("".join(lines)))
            except (OSError, TypeError, SyntaxError, ValueError, IndentationError):
                continue
            func = tree.body[0] if tree.body and isinstance(tree.body[0], (ast.FunctionDef, ast.AsyncFunctionDef)) \
                else None
            if func is None or not func.args.args:
                continue
            me = func.args.args[0].arg
            for node in ast.walk(func):
                attr = expr = None
                append = False
                if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
                    attr, expr = _self_attr(node.target, me), node.value
                elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.BinOp)
                      and isinstance(node.value.op, ast.Add)):
                    a = _self_attr(node.targets[0], me)
                    if a is not None and _self_attr(node.value.left, me) == a:
                        attr, expr = a, node.value.right
                    elif a is not None and _self_attr(node.value.right, me) == a:
                        attr, expr = a, node.value.left
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
                      and len(node.args) == 1):
                    attr, expr, append = _self_attr(node.func.value, me), node.args[0], True
                if (attr is None and isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add)
                        and isinstance(node.target, ast.Subscript)):  # self.totals[k] += v: a dict of running sums
                    attr, expr, append = _self_attr(node.target.value, me), node.value, True
                if attr is None or expr is None or attr in out:
                    continue
                line = start + getattr(node, "lineno", 1) - 1
                file = fn.__code__.co_filename
                out[attr] = (ast.unparse(node), ast.unparse(expr), append,
                             f"{klass.__name__}.{fname} ({file}:{line})" if file else f"{klass.__name__}.{fname}")
    return out


def _graphs(v: Any, append: bool) -> list[torch.Tensor]:
    """The tensors with an autograd graph that the attribute value ``v`` is (a running sum) or holds (a list)."""
    if issubclass(type(v), torch.Tensor):
        return [v] if v.grad_fn is not None and not append else []
    if append and issubclass(type(v), (list, dict)):
        items = list(dict.values(v)) if issubclass(type(v), dict) else container_items(v)
        return [t for t in items if issubclass(type(t), torch.Tensor) and t.grad_fn is not None]
    return []


def _objects(name: str, obj: Any) -> list[tuple[str, Any]]:
    """``[(path, object)]``: ``obj`` itself where it is a plain object of a user's class, else the
    plain objects a dict or list holds one level down (``metrics['loss']``)."""
    def plain(o: Any) -> bool:
        return not issubclass(type(o), _PLAIN) and not is_tooling(o) and not inspect.isclass(o) \
            and not inspect.isroutine(o) and not inspect.ismodule(o)

    if plain(obj):
        return [(name, obj)]
    if issubclass(type(obj), dict):
        return [(f"{name}[{k!r}]", v) for k, v in list(dict.items(obj))[:64] if plain(v)]
    if issubclass(type(obj), list):
        return [(f"{name}[{i}]", v) for i, v in enumerate(container_items(obj)[:64]) if plain(v)]
    return []


def attribute_sums(names: Mapping[str, Any], source: str) -> list[AttrSum]:
    """The attributes of objects the cell ``source`` names (directly, or one level into a dict or
    list it names) that hold an autograd graph a method of their class adds to: each with the
    statement that adds, where it is and the tensors it holds. An unparsable cell has none."""
    try:
        read = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    except (SyntaxError, ValueError):
        return []
    out: list[AttrSum] = []
    for name in sorted(read):
        if name.startswith("_") or name not in names:
            continue
        for path, obj in _objects(name, names[name]):
            graphs = {a: _graphs(v, True) + _graphs(v, False) for a, v in object_attributes(obj)}
            graphs = {a: ts for a, ts in graphs.items() if ts}
            if not graphs:
                continue
            adds = _method_adds(type(obj))
            for attr, ts in graphs.items():
                if attr in adds:
                    stmt, expr, append, where = adds[attr]
                    out.append(AttrSum(f"{path}.{attr}", stmt, expr, append, where, ts))
    return out
