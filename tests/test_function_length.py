"""Functions stay short: at most ``CAP`` lines each, a few named ones up to ``HARD_CAP``.

A function's length is the lines of its body: its signature (so a CLI command's typer option
list) and its docstring do not count; nested functions count in the one around them and on
their own. ``ALLOWED`` names the few functions that may be longer than ``CAP``, with why; it
may hold only functions still between ``CAP`` and ``HARD_CAP``, so it shrinks as they do.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import jqueue

SRC = Path(jqueue.__file__).resolve().parent
CAP = 60
HARD_CAP = 80
ALLOWED: dict[str, str] = {}
"""``module:qualname`` of each function allowed over ``CAP`` lines (never over ``HARD_CAP``)."""

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Measured:
    """One function and the lines of its body."""

    key: str
    where: str
    lines: int

    def __str__(self) -> str:
        return f"{self.where} ({self.lines} lines)"


def body_lines(function: Function) -> int:
    """The lines from the first statement after the docstring to the function's end."""
    body = function.body[1:] if ast.get_docstring(function) is not None else function.body
    return 0 if not body else (function.end_lineno or function.lineno) - body[0].lineno + 1


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, Function]]:
    """Each function under ``tree`` with its qualified name, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, Function):
            yield prefix + node.name, node
            yield from functions(node, f"{prefix}{node.name}.<locals>.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def measured() -> list[Measured]:
    """Every function of the package (a property's getter and setter are two)."""
    found: list[Measured] = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        shown = path.relative_to(SRC.parent.parent)
        for name, function in functions(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{shown}:{function.lineno}:{name}"
            found.append(Measured(f"{module}:{name}", where, body_lines(function)))
    return found


def test_functions_are_at_most_the_cap() -> None:
    too_long = [f for f in measured() if f.lines > CAP and f.key not in ALLOWED]
    assert not too_long, f"over {CAP} lines:\n" + "\n".join(map(str, too_long))


def test_allowed_functions_are_still_over_the_cap_and_within_the_hard_cap() -> None:
    found = {function.key: function for function in measured() if function.key in ALLOWED}
    missing = [key for key in ALLOWED if key not in found]
    assert not missing, f"ALLOWED names functions that no longer exist: {missing}"
    shrunk = [str(found[key]) for key in ALLOWED if found[key].lines <= CAP]
    assert not shrunk, f"at most {CAP} lines now, remove from ALLOWED:\n" + "\n".join(shrunk)
    over = [str(found[key]) for key in ALLOWED if found[key].lines > HARD_CAP]
    assert not over, f"over {HARD_CAP} lines, which ALLOWED cannot excuse:\n" + "\n".join(over)


def test_the_measure_skips_signature_and_docstring() -> None:
    source = '''
def f(
    a: int,
    b: int,
) -> int:
    """A docstring
    of two lines."""
    c = a + b

    return c


def g() -> None:
    """Only a docstring."""
'''
    lengths = {name: body_lines(node) for name, node in functions(ast.parse(source))}
    assert lengths == {"f": 3, "g": 0}
