"""tools/benchmark_s3_processes.py: a short paced run through the broker and directly, on moto
behind the tool's latency proxy, with the requests it counts and what they cost."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tool_runs import ROOT, run_tool

sys.path.insert(0, str(ROOT / "tools"))
from request_costs import PRICE_LISTS, cost_per_million_jobs, request_class


def test_request_classes_follow_s3_pricing() -> None:
    assert request_class("PUT", "/bucket/prefix/q.json.d/log/1", "") == "class_a"
    assert request_class("GET", "/bucket/prefix/q.json", "") == "class_b"
    assert request_class("HEAD", "/bucket/prefix/q.json", "") == "class_b"
    assert request_class("GET", "/bucket", "list-type=2&prefix=p") == "class_a"
    assert request_class("DELETE", "/bucket/prefix/q.json.d/log/1", "") == "free"
    costs = cost_per_million_jobs({"class_a": 1000, "class_b": 10_000}, jobs=1000)
    assert costs[PRICE_LISTS[0].name] == 5.0 + 4.0  # $0.005 and $0.0004 per 1,000 requests
    assert costs["SQS"] == 1.2


def test_a_paced_run_counts_its_requests_and_prices_them(tmp_path: Path) -> None:
    out = tmp_path / "s3.json"
    arguments = ["--processes", "1", "--modes", "broker,direct", "--callers", "4", "--rate", "20"]
    arguments += ["--seconds", "3", "--warmup", "1", "--get-latency-ms", "5", "--put-latency-ms", "5"]
    done = run_tool("benchmark_s3_processes.py", *arguments, "--json", str(out), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = {row["mode"]: row for row in json.loads(out.read_text())["results"]}
    for mode in ("broker", "direct"):
        row = results[mode]
        assert 0 < row["jobs_per_s"] <= 40  # paced at 20 jobs/s
        assert row["requests"]["class_a"] > 0
        assert any(name.startswith("PUT q.json.d/log/") for name in row["request_detail"])
        assert row["dollars_per_million_jobs"]["SQS"] == 1.2
        assert row["dollars_per_million_jobs"][PRICE_LISTS[0].name] > 0
        assert 5 <= row["enqueue_p50_ms"] <= row["enqueue_p99_ms"]  # at least one 5 ms PUT each
    assert "per million jobs" in done.stdout
    assert "an enqueue p50" in done.stdout
