"""Smoke test of tools/benchmark_engine_depth.py, run as a subprocess (no timing assertions)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tool_runs import run_tool

TOOL = "benchmark_engine_depth.py"


def figures_of(tmp_path: Path, *arguments: str) -> dict[str, Any]:
    """Run the tool with its queues in ``tmp_path``; return the figures it wrote and printed."""
    out = tmp_path / "figures.json"
    done = run_tool(TOOL, *arguments, "--dir", str(tmp_path), "--json", str(out))
    assert done.returncode == 0, done.stderr
    figures: dict[str, Any] = json.loads(out.read_text())
    assert figures == json.loads(done.stdout)
    return figures


def test_the_depth_figures_come_from_real_loads(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    figures = figures_of(tmp_path, "--jobs", "6000", "--batch", "50", "--drain", "300", "--calls", "400")
    own, loaded = figures["load_without_checkpoints"], figures["load"]
    assert own["written_bytes"] > 6000 * 100  # every payload was written at least once
    assert loaded["written_bytes"] > own["written_bytes"]  # checkpoints were written besides
    assert figures["write_amplification"] == round(loaded["written_bytes"] / own["written_bytes"], 2)
    parted, parted_own = figures["parts"], figures["parts_without_checkpoints"]
    assert parted_own["written_bytes"] > 6000 * 100
    assert parted["written_bytes"] > parted_own["written_bytes"]  # the checkpoint's slab
    assert figures["open"]["drained"] == 300
    assert figures["open"]["peak_rss_mib_draining"] >= figures["open"]["peak_rss_mib_at_first_claim"] > 0
    assert figures["tail_deep"]["calls"] == figures["tail_shallow"]["calls"] == 400
    assert 0 < figures["tail_deep"]["p50_ms"] <= figures["tail_deep"]["max_ms"]
    assert figures["tail_deep"]["first_pair_ms"] > 0
    assert figures["tail_shallow"]["checkpoints"] >= 1  # 1,200 changes, one checkpoint each 1,000
    assert list(tmp_path.iterdir()) == [out]  # the queues went with their temporary directory


def test_a_depth_below_the_calls_is_refused() -> None:
    done = run_tool(TOOL, "--jobs", "10", "--calls", "100", timeout=60)
    assert done.returncode == 2
    assert "--jobs must be at least --drain and --calls" in done.stderr


def test_the_open_on_s3_runs_on_a_seaweedfs_server_the_tool_starts(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    figures = figures_of(tmp_path, "--jobs", "6000", "--batch", "2000", "--drain", "300", "--root=seaweedfs")
    assert figures["root"] == "seaweedfs"
    assert figures["open"]["drained"] == 300
    assert figures["load"]["seconds"] > 0
    assert list(tmp_path.iterdir()) == [out]  # the server and its data went with the directory
