"""The import rules of the layers: each layer imports only itself and the layers inside it.

``domain`` imports nothing of jqueue outside it; ``ports`` only ``domain``; ``core`` nothing of
``adapters`` (nor the package's top level, which re-exports adapters). Every import statement
counts, lazy ones inside functions included, since they load the same modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import jqueue

SRC = Path(jqueue.__file__).resolve().parent
ALLOWED = {
    "domain": {"domain"},
    "ports": {"domain", "ports"},
    "core": {"domain", "ports", "core"},
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports (absolute names), with the line of the import."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                raise AssertionError(f"{path}:{node.lineno}: use absolute imports")
            found.append((node.lineno, node.module or ""))
    return found


def layer_of(module: str) -> str | None:
    """The layer of a jqueue module (``jqueue.core.queue`` is in ``core``), or None for others."""
    parts = module.split(".")
    if parts[0] != "jqueue":
        return None
    return parts[1] if len(parts) > 1 else "jqueue"


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_a_layer_imports_only_the_layers_inside_it(layer: str) -> None:
    files = sorted((SRC / layer).rglob("*.py"))
    assert files, f"no modules found in {SRC / layer}"
    wrong = [
        f"{path.relative_to(SRC)}:{line} imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if (target := layer_of(module)) is not None and target not in ALLOWED[layer]
    ]
    assert wrong == []


def test_the_rule_sees_a_wrong_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from jqueue.adapters.storage.memory import InMemoryStorage\n")
    assert [layer_of(name) for _, name in imported_modules(module)] == ["adapters"]


ADAPTER_ARROWS = {
    "web": set(),
    "dashboard": {"charts", "web"},
}
"""The adapter packages each of these adapter packages may import (the service composes the
dashboard; the dashboard never imports the service: both share ``web``)."""


@pytest.mark.parametrize("package", sorted(ADAPTER_ARROWS))
def test_an_adapter_imports_only_the_adapters_it_may(package: str) -> None:
    files = sorted((SRC / "adapters" / package).rglob("*.py"))
    assert files, f"no modules found in adapters/{package}"
    wrong = [
        f"{path.relative_to(SRC)}:{line} imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if module.startswith("jqueue.adapters.")
        and (target := module.split(".")[2]) != package
        and target not in ADAPTER_ARROWS[package]
    ]
    assert wrong == []
