"""Smoke tests of tools/benchmark_storage.py, run as a subprocess (no timing assertions)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tool_runs import run_tool

TOOL = "benchmark_storage.py"
SCENARIOS = ["enqueue-seq", "enqueue-c10", "enqueue-c50", "dequeue-seq", "mixed-c50"]


def load_rows(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return the metadata and rows of a JSON results file."""
    document = json.loads(path.read_text(encoding="utf-8"))
    return document["metadata"], document["rows"]


def test_memory_and_file_every_queue_and_scenario(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "results.json"
    state_dir = tmp_path / "state"
    result = run_tool(
        TOOL, "--ops", "20", "--backends", "memory,file", "--dir", str(state_dir), "--json", str(out)
    )
    assert result.returncode == 0, result.stderr

    meta, rows = load_rows(out)
    assert meta["settings"]["ops"] == 20
    assert meta["cpu_count"] >= 1
    assert "--backends memory,file" in meta["command"]
    assert meta["python_version"]
    assert meta["platform"]
    assert meta["timestamp"]

    expected = set(itertools.product(["memory", "file"], ["direct", "broker"], SCENARIOS))
    assert len(rows) == len(expected) == 20
    assert {(r["backend"], r["queue"], r["scenario"]) for r in rows} == expected
    for row in rows:
        where = f"{row['backend']}/{row['queue']}/{row['scenario']}"
        assert row["ops"] == 20, where
        assert row["ops_per_s"] > 0, where
        assert 0 <= row["p50_ms"] <= row["p95_ms"] <= row["p99_ms"], where
        assert row["errors"] == 0, (where, row["error_samples"])
        assert row["verified"] is True, (where, row["verify_detail"])
        assert row["final_jobs"] == row["final_queued"] + row["final_in_progress"], where
        if row["scenario"].startswith("enqueue-"):
            assert (row["final_queued"], row["final_in_progress"]) == (20, 0), where
        elif row["scenario"] == "dequeue-seq":
            assert (row["final_queued"], row["final_in_progress"]) == (0, 20), where
            assert row["claimed"] == 20, where
        else:
            calls = row["enqueued"] + row["claimed"] + row["empty_dequeues"] + row["acked"]
            assert calls == 20, where
            assert row["final_jobs"] == row["enqueued"] - row["acked"], where

    lines = result.stdout.strip().splitlines()
    header = "backend queue scenario ops seconds ops/s p50 ms p95 ms p99 ms"
    assert lines[0].split() == header.split()
    assert len(lines) == 2 + 20
    # The state files the tool made in --dir are gone again.
    assert list(state_dir.iterdir()) == []


def test_mixed_counts_every_call_and_stays_consistent(tmp_path: Path) -> None:
    out = tmp_path / "mixed.json"
    result = run_tool(
        TOOL,
        "--ops",
        "130",
        "--backends",
        "memory",
        "--scenarios",
        "mixed-c50",
        "--repeat",
        "2",
        "--json",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    _, rows = load_rows(out)
    assert [(r["queue"], r["scenario"]) for r in rows] == [("direct", "mixed-c50"), ("broker", "mixed-c50")]
    for row in rows:
        assert row["verified"] is True, row["verify_detail"]
        assert len(row["runs_ops_per_s"]) == 2
        # 50 callers, 130 calls: 50 enqueues, 50 dequeues, then 30 more calls (acks or enqueues).
        assert row["enqueued"] + row["claimed"] + row["empty_dequeues"] + row["acked"] == 130
        assert row["acked"] > 0
        assert row["final_in_progress"] == row["claimed"] - row["acked"]
        assert row["final_queued"] == row["enqueued"] - row["claimed"]


@pytest.mark.parametrize(("layout", "writes"), [("single", 5), ("log", 7)])
def test_latency_wrapper_names_the_backend(tmp_path: Path, layout: str, writes: int) -> None:
    # Five enqueues are five commits; a new log queue also creates its genesis and marker once.
    out = tmp_path / "lat.json"
    result = run_tool(
        TOOL,
        "--layout",
        layout,
        "--ops",
        "5",
        "--backends",
        "memory",
        "--queues",
        "direct",
        "--scenarios",
        "enqueue-seq",
        "--get-latency-ms",
        "2",
        "--put-latency-ms",
        "3",
        "--json",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    _, rows = load_rows(out)
    assert [r["backend"] for r in rows] == ["memory+lat(2/3)"]
    assert rows[0]["verified"] is True
    assert rows[0]["storage_writes"] == writes
    assert "memory+lat(2/3)" in result.stdout


def test_unknown_backend_is_rejected(tmp_path: Path) -> None:
    result = run_tool(TOOL, "--backends", "nosuch", "--json", str(tmp_path / "x.json"))
    assert result.returncode != 0
    assert "unknown backend 'nosuch'" in result.stderr
    assert not (tmp_path / "x.json").exists()


def test_help_lists_every_flag() -> None:
    result = run_tool(TOOL, "--help")
    assert result.returncode == 0
    for flag in [
        "--backends",
        "--queues",
        "--scenarios",
        "--ops",
        "--payload-bytes",
        "--get-latency-ms",
        "--put-latency-ms",
        "--dir",
        "--json",
        "--repeat",
    ]:
        assert flag in result.stdout
