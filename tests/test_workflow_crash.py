"""A run of tools/crash_workflow.py: a fan-in of 1,000 jobs across 4 worker processes with
SIGKILLs and a broker failover; its callback runs once, with the 1,000 results in order."""

from __future__ import annotations

import re

import pytest

from tool_runs import run_tool

pytestmark = pytest.mark.slow


def test_a_fan_in_survives_killed_workers_and_a_broker_failover() -> None:
    done = run_tool(
        "crash_workflow.py", "--parts", "1000", "--workers", "4", "--kills", "4", "--within", "240"
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    faults = re.search(r"(\d+) faults: (.*)", done.stdout)
    assert faults is not None, done.stdout
    assert faults[2].count("killed worker") == 4, done.stdout
    assert faults[2].count("killed broker") == 2, done.stdout
    runs = re.search(r"1000 parts, (\d+) part runs, (\d+) callback runs", done.stdout)
    assert runs is not None, done.stdout
    assert int(runs[1]) >= 1000
    assert int(runs[2]) == 1
    print(done.stdout)
