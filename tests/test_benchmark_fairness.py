"""A short run of tools/benchmark_fairness.py: the small tenant's job is claimed by the first
claim after its enqueue, behind a flood held as records and as cold rows; both throughputs
are measured (their ratio is the benchmark's figure, not a test's)."""

from __future__ import annotations

import re

from tool_runs import run_tool

TOOL = "benchmark_fairness.py"


def test_a_short_run_finds_the_small_tenant_in_the_first_claim() -> None:
    sizes = {"flood": 6000, "jobs": 2000, "tenants": 100, "blocked": 300, "repeats": 1}
    done = run_tool(TOOL, *(f"--{name}={value}" for name, value in sizes.items()))
    assert done.returncode == 0, done.stdout + done.stderr
    for where in ("hot", "cold"):
        found = re.search(rf"{where}: claimed by claim 1, [\d.]+ ms after its enqueue", done.stdout)
        assert found, done.stdout
    assert re.search(r"no tenant: [\d,]+ jobs/s", done.stdout), done.stdout
    assert re.search(r"100 tenants: [\d,]+ jobs/s \([\d.]+ of no tenant\)", done.stdout), done.stdout
    assert re.search(r"300 blocked: [\d,]+ jobs/s \([\d.]+ of none blocked\)", done.stdout), done.stdout


def test_counts_below_one_are_refused() -> None:
    done = run_tool(TOOL, "--flood", "0")
    assert done.returncode == 2
    assert "--flood must be at least 1" in done.stderr
