"""Smoke test of tools/benchmark_peers.py on jqueue and the raw writes only (no peers: offline)."""

from __future__ import annotations

import json
from pathlib import Path

from tool_runs import run_tool

TOOL = "benchmark_peers.py"


def test_every_scenario_of_jqueue_and_the_raw_limit(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    arguments = [
        "--systems",
        "jqueue-file-broker,jqueue-file-direct,raw",
        "--jobs",
        "200",
        "--latency-jobs",
        "20",
    ]
    arguments += [
        "--rate",
        "50",
        "--workers",
        "2",
        "--rounds",
        "1",
        "--dir",
        str(tmp_path),
        "--json",
        str(out),
    ]
    done = run_tool(TOOL, *arguments)
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())["results"]
    assert not [row for row in results if "error" in row]
    by_key = {(row["system"], row["scenario"]): row for row in results}
    for system in ("jqueue-file-broker", "jqueue-file-direct"):
        for scenario in ("sequential", "batch", "drain"):
            assert by_key[system, scenario]["jobs_per_s"] > 0
        assert by_key[system, "sequential"]["cpu_ms_per_job"] > 0
        latency = by_key[system, "latency"]
        assert 0 < latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    patterns = by_key["raw", "raw"]["patterns"]
    assert set(patterns) == {"file-per-write", "append+fdatasync"}
    assert all(pattern["ops_per_s"] > 0 for pattern in patterns.values())
    assert "sequential" in done.stdout
    assert "wall time" in done.stdout
    assert list(tmp_path.iterdir()) == [out]  # the queues it made are gone
