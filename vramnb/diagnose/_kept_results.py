"""Names a loop keeps on purpose, read from a cell's syntax tree: a value bound only under a
condition inside the loop body (``if score < best: best_state = deepcopy(...)``) is the loop's
kept result (a pass where the condition fails leaves the earlier value in place), never a pass's
leftover: deleting it at the end of the loop body would destroy what the loop exists to keep.
Only the syntax tree is read: no user code runs."""

from __future__ import annotations

import ast

__all__ = ["conditionally_bound"]

_LOOPS = (ast.For, ast.While, ast.AsyncFor)


def _bound(node: ast.AST) -> list[str]:
    """The plain names an assignment statement binds (tuple targets unpacked)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    else:
        return []
    out: list[str] = []
    for t in targets:
        for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
            if isinstance(e, ast.Name):
                out.append(e.id)
    return out


def conditionally_bound(tree: ast.AST) -> set[str]:
    """Names bound inside a loop's body only under an ``if`` (or a ``try``'s handler, or a
    ``match`` case) between the binding and its nearest enclosing loop: each binding of them is
    conditional. A name also bound unconditionally in a loop's body is not in it."""
    conditional: set[str] = set()
    plain: set[str] = set()

    def visit(stmts: list[ast.stmt], under: bool) -> None:
        for stmt in stmts:
            for name in _bound(stmt):
                (conditional if under else plain).add(name)
            if isinstance(stmt, _LOOPS):
                visit(stmt.body, False)  # relative to this loop now
                visit(stmt.orelse, under)
            elif isinstance(stmt, ast.If):
                visit(stmt.body, True)
                visit(stmt.orelse, True)
            elif isinstance(stmt, ast.Try) or type(stmt).__name__ == "TryStar":
                visit(stmt.body, under)  # type: ignore[attr-defined]
                for h in stmt.handlers:  # type: ignore[attr-defined]
                    visit(h.body, True)
                visit(stmt.orelse, True)  # type: ignore[attr-defined]
                visit(stmt.finalbody, under)  # type: ignore[attr-defined]
            elif isinstance(stmt, ast.Match):
                for case in stmt.cases:
                    visit(case.body, True)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                visit(stmt.body, under)
            # function and class bodies are their own scopes: not the loop's names

    def outside(stmts: list[ast.stmt]) -> None:
        """Statements outside any loop: find the loops."""
        for stmt in stmts:
            if isinstance(stmt, _LOOPS):
                visit(stmt.body, False)
                outside(stmt.orelse)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            else:
                for field in ("body", "orelse", "finalbody"):
                    sub = getattr(stmt, field, None)
                    if isinstance(sub, list):
                        outside(sub)
                for h in getattr(stmt, "handlers", []) or []:
                    outside(h.body)
                for case in getattr(stmt, "cases", []) or []:
                    outside(case.body)

    outside(getattr(tree, "body", []))
    return conditional - plain
