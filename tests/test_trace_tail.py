"""Smoke test of tools/trace_tail.py, run as a subprocess (no timing assertions)."""

from __future__ import annotations

import json

from tool_runs import run_tool


def test_the_trace_notes_the_collections_and_checkpoints_of_the_pairs() -> None:
    done = run_tool("trace_tail.py", "--jobs", "500", "--calls", "1500", timeout=300)
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)
    assert trace["calls"] == 1500
    assert 0 < trace["p50_ms"] <= trace["p99_ms"] <= trace["max_ms"]
    assert trace["kinds"]["checkpoint"]["count"] >= 1  # the queue checkpoints every 1,000 commits
    assert trace["kinds"]["gc0"]["count"] >= 1
    slowest = trace["slowest"]
    assert [pair["ms"] for pair in slowest] == sorted((pair["ms"] for pair in slowest), reverse=True)
    assert slowest[0]["ms"] == trace["max_ms"]
    assert all(0 <= pair["pair"] < 1500 for pair in slowest)
