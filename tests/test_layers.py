"""The import rules of the package: ``ARROWS`` names each unit and the units it may import.

``domain`` imports nothing of jqueue outside it; ``ports`` only ``domain``; the engine (``core``)
and the worker runtime nothing of the adapters; no arrow makes a cycle. Every import statement
counts, lazy ones inside functions included, since they load the same modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jqueue

SRC = Path(jqueue.__file__).resolve().parent
CORE_PACKAGES = ("formats", "loop", "log", "runtime", "heartbeat")
"""The subpackages of ``core`` that are units of their own (the rest of ``core`` is one), and
``core/heartbeat.py``, the documented path of the runtime's ``HeartbeatManager``."""
SERVICE_PACKAGES = ("wire", "server", "queued", "client")
"""The subpackages of ``adapters/service`` that are units of their own: what both sides read
(``wire``), the server, the queued-compatible API and the client. The package's own modules
(``app``, ``openapi``) are the unit ``adapters.service``, which puts the server together."""
ENGINE = {"core", "core.loop", "core.log", "core.formats"}
"""The commit engine: the queue (``core``), the commit loop, the log layout, the wire formats."""
ARROWS: dict[str, set[str]] = {
    "domain": set(),
    "ports": {"domain"},
    "version": set(),
    "core.formats": {"domain"},
    "core.loop": {"domain", "ports", "core.formats"},
    "core.log": {"domain", "ports", "core.formats", "core.loop"},
    "core": {"domain", "ports", "core.formats", "core.loop", "core.log"},
    "core.runtime": {"domain", "ports", "core"},
    "core.heartbeat": {"core.runtime"},
    "adapters": set(),
    "adapters.optional": {"domain"},
    "adapters.event_loop": set(),
    "adapters.web": set(),
    "adapters.charts": {"domain"},
    "adapters.storage": {"domain", "ports", "adapters.optional"},
    "adapters.dashboard": {"domain", "ports", "core", "adapters.charts", "adapters.web"},
    "adapters.service.wire": {"domain", "ports", "core.formats", "adapters.storage", "adapters.web"},
    "adapters.service.client": {
        "domain", "ports", "core", "core.loop", "adapters.optional", "adapters.web", "adapters.service.wire",
    },
    "adapters.service.server": {
        "domain", "ports", "core", "core.loop", "version", "adapters.optional",
        "adapters.storage", "adapters.web", "adapters.dashboard", "adapters.service.wire",
    },
    "adapters.service.queued": {
        "domain", "core", "adapters.web", "adapters.service.wire", "adapters.service.server",
    },
    "adapters.service": {
        "core.loop", "version", "adapters.web", "adapters.dashboard",
        "adapters.service.wire", "adapters.service.server", "adapters.service.queued",
    },
    "adapters.worker_metrics": {"domain", "core.runtime", "adapters.optional"},
    "sync": {"domain", "ports", "core", "adapters.storage", "adapters.service.client"},
    "adapters.spark": {
        "domain", "ports", *ENGINE, "core.runtime", "sync",
        "adapters.optional", "adapters.storage", "adapters.service.client", "adapters.service.wire",
    },
    "adapters.report": {"domain", "core", "adapters.charts", "adapters.storage", "adapters.spark"},
    "testing": {"domain", "ports", *ENGINE},
    "bench": {"domain", "ports", "core", "version", "testing", "adapters.storage"},
    "adapters.cli": {
        "domain", "ports", "core", "core.runtime", "version", "bench",
        "adapters.optional", "adapters.storage", "adapters.web", "adapters.dashboard",
        "adapters.service", "adapters.service.wire", "adapters.service.server", "adapters.service.client",
        "adapters.report", "adapters.worker_metrics", "adapters.event_loop",
    },
    "jqueue": {
        "domain", "ports", *ENGINE, "core.runtime", "version",
        "adapters.storage", "adapters.service.client", "adapters.worker_metrics",
    },
    "spark": {"adapters.spark"},
    "__main__": {"adapters.cli"},
}  # fmt: skip
"""Every unit of the package (a top-level package or module; ``core`` is the commit engine with
its ``formats`` and ``log``, ``core.runtime`` the worker runtime; each adapter package or
module, and each part of the service: ``wire`` is read by the client and the server, which
never import each other) and the units it may import: the one statement of the layering,
which has no cycle."""


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


def unit_of(module: str) -> str | None:
    """The unit of ``ARROWS`` a jqueue module is in (None for other modules)."""
    parts = module.split(".")
    if parts[0] != "jqueue":
        return None
    if len(parts) == 1:
        return "jqueue"
    if parts[1] == "adapters":
        service_part = parts[2:3] == ["service"] and parts[3:4] and parts[3] in SERVICE_PACKAGES
        return ".".join(parts[1:4] if service_part else parts[1:3])
    if parts[1] == "core":
        return f"core.{parts[2]}" if parts[2:3] and parts[2] in CORE_PACKAGES else "core"
    return parts[1]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(["jqueue", *(parts[:-1] if parts[-1] == "__init__" else parts)])


def test_every_unit_imports_only_the_units_it_may() -> None:
    wrong, units = [], set()
    for path in sorted(SRC.rglob("*.py")):
        unit = unit_of(_module_name(path))
        assert unit in ARROWS, f"{path.relative_to(SRC)} is in no unit of ARROWS ({unit})"
        units.add(unit)
        for line, module in imported_modules(path):
            target = unit_of(module)
            if target is not None and target != unit and target not in ARROWS[unit]:
                wrong.append(f"{path.relative_to(SRC)}:{line} imports {module} ({unit} -> {target})")
    assert wrong == []
    assert units == set(ARROWS), set(ARROWS) - units


def test_the_arrows_have_no_cycle() -> None:
    done: set[str] = set()

    def visit(unit: str, path: tuple[str, ...]) -> None:
        assert unit not in path, f"a cycle: {' -> '.join((*path, unit))}"
        if unit not in done:
            for target in ARROWS[unit]:
                visit(target, (*path, unit))
            done.add(unit)

    for unit in ARROWS:
        visit(unit, ())


def test_the_formats_import_nothing_of_the_engine_around_them() -> None:
    wrong = [
        f"{path.relative_to(SRC)}:{line} imports {module}"
        for path in sorted((SRC / "core" / "formats").rglob("*.py"))
        for line, module in imported_modules(path)
        if module.startswith("jqueue.core.") and not module.startswith("jqueue.core.formats")
    ]
    assert wrong == []


def test_the_rule_sees_a_wrong_import(tmp_path: Path) -> None:
    module = tmp_path / "bad.py"
    module.write_text("def f():\n    from jqueue.adapters.storage.memory import InMemoryStorage\n")
    [(_, name)] = imported_modules(module)
    assert unit_of(name) == "adapters.storage"
    assert "adapters.storage" not in ARROWS["core"]


def test_the_client_and_the_server_of_the_service_never_import_each_other() -> None:
    client, server = "adapters.service.client", "adapters.service.server"
    assert unit_of("jqueue.adapters.service.client.x") == client
    assert unit_of("jqueue.adapters.service.server.x") == server
    assert unit_of("jqueue.adapters.service.app") == unit_of("jqueue.adapters.service") == "adapters.service"
    assert server not in ARROWS[client]
    assert client not in ARROWS[server]
    assert "adapters.service.wire" in ARROWS[client] & ARROWS[server]
    assert (
        not {"adapters.service", client, server, "adapters.service.queued"} & ARROWS["adapters.service.wire"]
    )
