"""tools/simulate_scaleout.py: the model of many brokers prints its tables, names the next limit,
and fails when a measured run is more than 20% from its prediction."""

from __future__ import annotations

import json
from pathlib import Path

from tool_runs import run_tool

TOOL = "simulate_scaleout.py"


def test_the_model_prints_both_storages_and_names_the_next_limit(tmp_path: Path) -> None:
    done = run_tool(TOOL, "--json", str(tmp_path / "model.json"))
    assert done.returncode == 0, done.stderr
    assert "S3 Standard" in done.stdout
    assert "S3 Express One Zone" in done.stdout
    assert "next limit: CPU" in done.stdout
    assert "OVER" not in done.stdout  # the ring watch as built keeps every prefix under its limit
    predictions = json.loads((tmp_path / "model.json").read_text())
    standard = {p["brokers"]: p for p in predictions if p["storage"] == "S3 Standard"}
    assert standard[256]["ops_per_s"] >= 1_000_000
    assert standard[256]["dollars_per_million_ops"] <= 0.02
    assert standard[2]["ops_per_s"] == 2 * standard[1]["ops_per_s"]


def test_every_member_watching_every_other_is_the_limit_the_model_names() -> None:
    done = run_tool(TOOL, "--storage", "s3-standard", "--watch", "255")
    assert done.returncode == 0, done.stderr
    assert "OVER" in done.stdout
    assert "members' reads of each other's beats" in done.stdout


def test_a_measured_run_far_from_the_prediction_fails_the_check() -> None:
    measured = ["--measured", "1=34000", "--measured", "2=66000"]
    close = run_tool(
        TOOL, "--machines", "1", "--cores", "2", "--brokers", "1,2,4", *measured, "--measured", "4=64000"
    )
    assert close.returncode == 0, close.stdout
    far = run_tool(TOOL, "--machines", "1", "--cores", "2", "--brokers", "1,2", "--measured", "1=20000")
    assert far.returncode == 1, far.stdout
    assert "predicted" in far.stdout
