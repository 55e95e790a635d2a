"""OpenTelemetry (ADR 0020): one trace from an enqueue in one process to the run and the ack in
another, the worker's measures through the metrics API, and nothing at all without the API."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tool_runs import run_tool

SCRIPT = Path(__file__).with_name("otel_process.py")


def run(mode: str, path: Path, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), mode, str(path), str(out)],
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
