"""tools/enqueue_path.py: one warm enqueue enters at most ``LIMITS[mode]`` jqueue modules, on memory,
on a file root and through ``jqueue serve`` (client and server in one process).

The limits are the path's length as docs/architecture.md §2 draws it: 25 modules on a file root
and 36 through ``jqueue serve`` (issue 51's bounds, and the queue names that the metrics label a
shard's calls by since issue 52), 21 on memory. A change that lengthens the path fails here; one
that shortens it lowers the limit.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import pytest

from tool_runs import ROOT, run_tool

sys.path.insert(0, str(ROOT / "tools"))
from enqueue_path import MODES

LIMITS = {"memory": 21, "file": 25, "serve": 36}
"""The most jqueue modules one enqueue may enter."""

SEEN = {
    "memory": ("InMemoryStorage.create",),
    "file": ("LocalFileSystemStorage.create",),
    "serve": ("RemoteQueue._enqueue_specs", "LocalFileSystemStorage.create"),
}
"""Functions (``qualname``, wherever their module moves) each path must show: the storage's write
of the commit, and through the service the client's call too, so that a profiler that saw
nothing, or one side only, cannot pass under the limit."""


@pytest.fixture(scope="module")
def paths() -> dict[str, Any]:
    """The tool's JSON report of every mode, from a process of its own (no test's state in it)."""
    done = run_tool("enqueue_path.py", "--mode", "all", "--json", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


@pytest.mark.parametrize("mode", MODES)
def test_one_enqueue_enters_at_most_the_limit_of_modules(paths: dict[str, Any], mode: str) -> None:
    modules: list[str] = paths[mode]["modules"]
    functions: list[str] = paths[mode]["functions"]
    qualnames = {function.partition(":")[2] for function in functions}
    assert set(SEEN[mode]) <= qualnames, f"{mode}: the profile missed part of the path: {functions}"
    assert {function.partition(":")[0] for function in functions} == set(modules)
    assert len(modules) <= LIMITS[mode], (
        f"one enqueue ({mode}) enters {len(modules)} jqueue modules, over {LIMITS[mode]}:\n"
        + "\n".join(modules)
    )


def test_the_cpu_tool_measures_and_adds_up_the_layers() -> None:
    """``tools/enqueue_cpu.py``: a CPU figure per job, and with ``--layers`` every profiled layer
    with its share, the shares adding up to the whole and the jqueue layers among them."""
    done = run_tool("enqueue_cpu.py", "--jobs", "40", "--layers", timeout=300)
    assert done.returncode == 0, done.stderr
    first, *layers, total = done.stdout.strip().splitlines()
    assert re.fullmatch(
        r"direct, 40 sequential enqueues: CPU [0-9.]+ ms/job \(user [0-9.]+, system [0-9.]+\)", first
    )
    shares = {line[:24].strip(): float(line[24:].split("%")[0]) for line in layers}
    assert {"jqueue.core", "jqueue.domain", "jqueue.adapters", "system calls (disk)"} <= shares.keys()
    assert sum(shares.values()) == pytest.approx(100, abs=0.5)
    assert float(total.split()[1]) > 100  # calls per job: an enqueue is a few hundred calls
