"""The benchmark's results: one row per combination, as a text table and as JSON with run metadata."""

from __future__ import annotations

import json
import math
import os
import platform
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from jqueue.bench.scenarios import RunCalls
from jqueue.bench.settings import Settings
from jqueue.bench.verify import Verdict
from jqueue.domain.figures import percentiles
from jqueue.version import __version__

COLUMNS = ("backend", "queue", "scenario", "ops", "seconds", "ops/s", "p50 ms", "p95 ms", "p99 ms")


@dataclass(frozen=True)
class RunResult:
    """One run of one (backend, queue, scenario).

    Attributes
    ----------
    seconds : float
        Wall time of the timed phase.
    latencies : list of float
        Seconds per call.
    verdict : Verdict
        The final-state check.
    tally : RunCalls
        What the calls did.
    storage_reads, storage_writes, cas_conflicts : int
        Storage requests made by the benchmarked queue (reads: ``read``, ``get``,
        ``list_names``; writes: ``write``, ``create``, ``delete``), and the writes
        rejected with ``CASConflictError``.
    """

    seconds: float
    latencies: list[float]
    verdict: Verdict
    tally: RunCalls
    storage_reads: int
    storage_writes: int
    cas_conflicts: int

    @property
    def ops_per_s(self) -> float:
        """Calls per second over the timed phase."""
        return len(self.latencies) / self.seconds if self.seconds > 0 else math.inf


@dataclass(frozen=True)
class Row:
    """One line of the results: the median-ops/s run of a (backend, queue, scenario).

    Timing fields are seconds and milliseconds; ``verified`` holds over every repeat,
    the counts (``final_*``, ``enqueued``... ``storage_*``) are of the chosen run.
    """

    backend: str
    queue: str
    scenario: str
    ops: int
    seconds: float
    ops_per_s: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    verified: bool
    verify_detail: str
    final_jobs: int
    final_queued: int
    final_in_progress: int
    errors: int
    error_samples: list[str]
    enqueued: int
    claimed: int
    acked: int
    empty_dequeues: int
    storage_reads: int
    storage_writes: int
    cas_conflicts: int
    runs_ops_per_s: list[float]


def summarise(backend_label: str, queue_kind: str, scenario: str, runs: Sequence[RunResult]) -> Row:
    """Make the row of the run with the median ops/s (the lower median for an even count)."""
    ranked = sorted(runs, key=lambda run: run.ops_per_s)
    chosen = ranked[(len(ranked) - 1) // 2]
    p50, p95, p99 = percentiles(chosen.latencies, (0.5, 0.95, 0.99)) or (math.nan,) * 3
    failed = [run.verdict for run in runs if not run.verdict.ok]
    verdict = failed[0] if failed else chosen.verdict
    return Row(
        backend=backend_label,
        queue=queue_kind,
        scenario=scenario,
        ops=len(chosen.latencies),
        seconds=chosen.seconds,
        ops_per_s=chosen.ops_per_s,
        p50_ms=p50 * 1000,
        p95_ms=p95 * 1000,
        p99_ms=p99 * 1000,
        verified=not failed,
        verify_detail=verdict.detail,
        final_jobs=chosen.verdict.final_jobs,
        final_queued=chosen.verdict.final_queued,
        final_in_progress=chosen.verdict.final_in_progress,
        errors=sum(run.tally.errors for run in runs),
        error_samples=list(dict.fromkeys(s for run in runs for s in run.tally.error_samples)),
        enqueued=len(chosen.tally.enqueued),
        claimed=len(chosen.tally.claimed),
        acked=len(chosen.tally.acked),
        empty_dequeues=chosen.tally.empty_dequeues,
        storage_reads=chosen.storage_reads,
        storage_writes=chosen.storage_writes,
        cas_conflicts=chosen.cas_conflicts,
        runs_ops_per_s=[round(run.ops_per_s, 3) for run in runs],
    )


def format_table(rows: Sequence[Row]) -> str:
    """Return the rows as a plain-text table; text columns left-aligned, numbers right-aligned."""
    cells = [
        [
            row.backend,
            row.queue,
            row.scenario,
            str(row.ops),
            f"{row.seconds:.3f}",
            f"{row.ops_per_s:.1f}",
            f"{row.p50_ms:.2f}",
            f"{row.p95_ms:.2f}",
            f"{row.p99_ms:.2f}",
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [list(COLUMNS), *cells]) for i in range(len(COLUMNS))]

    def render(line: Sequence[str]) -> str:
        parts = [
            value.ljust(width) if i < 3 else value.rjust(width)
            for i, (value, width) in enumerate(zip(line, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([render(COLUMNS), rule, *(render(line) for line in cells)])


def metadata(settings: Settings, argv: Sequence[str], wall_seconds: float) -> dict[str, Any]:
    """Return the run metadata stored next to the rows in the JSON output."""
    return {
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *argv]),
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "jqueue_version": __version__,
        "wall_seconds": round(wall_seconds, 3),
        "settings": {
            "url": settings.url,
            "backends": settings.backends if settings.url is None else None,
            "queues": settings.queues,
            "scenarios": settings.scenarios,
            "ops": settings.ops,
            "payload_bytes": settings.payload_bytes,
            "get_latency_ms": settings.get_latency_ms,
            "put_latency_ms": settings.put_latency_ms,
            "dir": None if settings.directory is None or settings.url else str(settings.directory),
            "repeat": settings.repeat,
            "layout": settings.layout,
        },
    }


def write_json(path: Path, meta: dict[str, Any], rows: Sequence[Row]) -> None:
    """Write ``{"metadata": ..., "rows": [...]}`` to ``path``, creating its parent directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    document = {"metadata": meta, "rows": [asdict(row) for row in rows]}
    path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n", encoding="utf-8")
