"""Smoke test of tools/benchmark_http.py: a short run against a real ``jqueue serve``."""

from __future__ import annotations

import json
from pathlib import Path

from tool_runs import run_tool

TOOL = "benchmark_http.py"


def test_a_short_run_measures_and_balances(tmp_path: Path) -> None:
    out = tmp_path / "http.json"
    arguments = ["--batch", "8,1", "--clients", "4", "--client-processes", "2", "--seconds", "1"]
    arguments += ["--warmup", "0.3", "--json", str(out)]
    done = run_tool(TOOL, *arguments, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())["results"]
    assert [r["batch"] for r in results] == [8, 1]
    for result in results:
        assert result["messages_per_s"] > 0
        assert result["pushed_per_s"] * 3 >= result["messages_per_s"] * 0.9
