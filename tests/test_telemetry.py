"""OpenTelemetry (ADR 0020): one trace from an enqueue in one process to the run and the ack in
another, the worker's measures through the metrics API, and nothing at all without the API; a
span processor, meter or exporter that raises or is slow never fails or stalls the queue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from otel_faults import SLOW_EXPORT
from servers import jqueue_serve
from tool_runs import run_tool

SCRIPT = Path(__file__).with_name("otel_process.py")
JOBS = 30  # otel_process.FAULTY_JOBS
PROMPTLY = 15.0
"""Seconds 30 jobs may take to enqueue and drain under a slow exporter: plenty on a loaded
machine, and well under what one span an export would cost (about 90 spans of 0.5 s)."""
FAILED = {"tracing": "OpenTelemetry tracing failed", "metrics": "OpenTelemetry metrics failed"}


def run(mode: str, path: Path | str, out: Path, *extra: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), mode, str(path), str(out), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(out.read_text())
    return found


def test_one_trace_from_an_enqueue_to_its_ack_across_two_processes(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    produced = run("produce", path, tmp_path / "produced.json")
    worked = run("work", path, tmp_path / "worked.json")
    assert (worked["acked"], worked["dead"]) == (1, 1)

    producer = {span["name"]: span for span in produced["spans"]}
    request, enqueue = producer["request"], producer["jqueue enqueue"]
    assert enqueue["parent"] == request["span"]
    assert enqueue["attributes"]["messaging.destination.name"] == "fails,work"
    assert enqueue["attributes"]["messaging.batch.message_count"] == 2
    assert produced["traceparent"].startswith(f"00-{enqueue['trace']}-{enqueue['span']}-")

    worker = {span["name"]: span for span in worked["spans"]}
    run_span, settle, inside = (
        worker["jqueue run work"],
        worker["jqueue settle"],
        worker["inside the handler"],
    )
    assert run_span["trace"] == request["trace"]  # the producer's trace, in another process
    assert run_span["parent"] == enqueue["span"]
    assert run_span["attributes"]["jqueue.job.outcome"] == "acked"
    assert (inside["parent"], settle["parent"]) == (run_span["span"], run_span["span"])
    assert settle["trace"] == request["trace"]
    claims = [span for span in worked["spans"] if span["name"] == "jqueue claim"]
    assert sum(claim["attributes"]["messaging.batch.message_count"] for claim in claims) == 2
    assert all(claim["links"] == [enqueue["span"]] for claim in claims)  # to the jobs' trace
    failed = worker["jqueue run fails"]
    assert (failed["status"], failed["events"]) == ("ERROR", ["exception"])
    assert failed["attributes"]["jqueue.job.outcome"] == "dead"
    assert (run_span["status"], run_span["events"]) == ("UNSET", [])

    measured = worked["metrics"]
    runs = sorted(
        measured["jqueue.worker.job.run.duration"], key=lambda point: point["attributes"]["entrypoint"]
    )
    assert runs == [
        {"attributes": {"entrypoint": "fails", "outcome": "dead"}, "count": 1, "value": None},
        {"attributes": {"entrypoint": "work", "outcome": "acked"}, "count": 1, "value": None},
    ]
    assert measured["jqueue.worker.job.wait.duration"][0]["count"] == 1
    assert {point["value"] for point in measured["jqueue.worker.jobs.running"]} == {0}  # each ended


def test_without_the_api_nothing_is_traced_and_everything_works(tmp_path: Path) -> None:
    found = run("none", tmp_path / "jobs.json", tmp_path / "plain.json")
    assert found == {"traceparent": None, "acked": 1, "dead": 0}


def test_the_services_measures_are_recorded_in_both_systems(tmp_path: Path) -> None:
    found = run("service", tmp_path / "unused.json", tmp_path / "service.json")
    assert found["prometheus"] == 2
    jobs = {point["attributes"]["entrypoint"]: point for point in found["metrics"]["jqueue.jobs"]}
    assert set(jobs) == {"mail", "sms"}
    assert jobs["mail"]["attributes"] == {"queue": "shop", "entrypoint": "mail", "action": "enqueued"}
    assert jobs["mail"]["value"] == 2
    assert found["metrics"]["jqueue.request.duration"][0]["count"] == 1


def test_the_cost_tool_measures_each_setting() -> None:
    done = run_tool("telemetry_cost.py", "--calls", "200")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[1:]}
    assert set(rows) == {"none", "api", "sdk"}
    assert all(float(figure) > 0 for figures in rows.values() for figure in figures)


def logged(messages: list[str] | str, kind: str) -> int:
    lines = messages.splitlines() if isinstance(messages, str) else messages
    return sum(line.startswith(FAILED[kind]) for line in lines)


@pytest.mark.parametrize(
    ("fault", "kind", "met"),
    [
        ("start", "tracing", "on_start"),
        ("end", "tracing", "on_end"),
        ("meter", "metrics", "add"),
        ("instruments", "metrics", "create"),
    ],
)
def test_a_broken_span_processor_or_meter_is_logged_once_and_loses_no_job(
    tmp_path: Path, fault: str, kind: str, met: str
) -> None:
    found = run("faults", tmp_path / "jobs.json", tmp_path / "found.json", fault)
    assert (found["enqueued"], found["errors"], found["acked"]) == (JOBS, [], JOBS)
    assert found["refused"] == "PayloadTooLargeError"  # the enqueue's own error, not telemetry's
    assert found["calls"][met] >= 1  # the fault was met, not skipped
    assert logged(found["logged"], kind) == 1, found["logged"]
    assert len(found["logged"]) == 1, found["logged"]


def test_a_broken_exporter_loses_no_job(tmp_path: Path) -> None:
    found = run("faults", tmp_path / "jobs.json", tmp_path / "found.json", "exporter")
    assert (found["enqueued"], found["errors"], found["acked"]) == (JOBS, [], JOBS)
    assert found["calls"]["span export"] >= JOBS


@pytest.mark.parametrize(("fault", "kind"), [("end", "tracing"), ("meter", "metrics")])
def test_a_broken_span_processor_or_meter_loses_no_job_through_jqueue_serve(
    tmp_path: Path, fault: str, kind: str
) -> None:
    """Broken in both processes: the producer and worker of a ``RemoteQueue``, and ``jqueue
    serve`` (set up by a ``sitecustomize`` of its own)."""
    site = tmp_path / "site"
    site.mkdir()
    tests = str(Path(__file__).parent)
    (site / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {tests!r})\nimport otel_faults\notel_faults.install({fault!r})\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    log, root = tmp_path / "serve.log", tmp_path / "queues"
    root.mkdir()
    with jqueue_serve(str(root), log, env=env) as url:
        found = run("faults", url, tmp_path / "found.json", fault)
    assert (found["enqueued"], found["errors"], found["acked"]) == (JOBS, [], JOBS)
    assert found["refused"] == "PayloadTooLargeError"
    assert logged(found["logged"], kind) == 1, found["logged"]
    if kind == "metrics":  # the service's counters and histograms met it too, each request
        assert logged(log.read_text(), kind) == 1, log.read_text()


def test_a_batching_processor_keeps_a_slow_exporter_off_the_queue(tmp_path: Path) -> None:
    found = run("faults", tmp_path / "jobs.json", tmp_path / "found.json", "slow")
    assert (found["enqueued"], found["errors"], found["acked"]) == (JOBS, [], JOBS)
    assert found["seconds"] < PROMPTLY, found
    assert found["calls"]["span export"] >= 1  # its spans were exported, SLOW_EXPORT s each time
    assert SLOW_EXPORT * 3 * JOBS > PROMPTLY  # an export a span would have missed the bound
