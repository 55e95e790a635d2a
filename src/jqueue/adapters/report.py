"""``jqueue report``: a queue's history as Markdown and an SVG chart.

The figures (``jqueue.domain.figures``) are those of the dashboard: jobs finished per
bucket, and per entrypoint the wait and run time percentiles and the retry and
dead-letter rates. A history of up to ``SPARK_ABOVE`` records is computed in this
process; a larger one with Spark when the ``spark`` extra is installed (``--engine``
chooses). ``tools/queue_report.py`` runs the same.
"""

from __future__ import annotations

import asyncio
import importlib.util
from datetime import UTC, datetime
from pathlib import Path

from jqueue.adapters.charts import throughput_chart
from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.direct import DirectQueue
from jqueue.domain.figures import Report, report_of
from jqueue.domain.records import HistoryRecord

SPARK_ABOVE = 200_000
"""With ``--engine auto``, a history of more records is computed with Spark (if installed)."""
ENGINES = ("auto", "python", "spark")
_SVG_STYLE = (
    "<style>.acked{fill:#2e7d32}.dead{fill:#c62828}.axis{font:10px sans-serif;fill:#555}"
    ".base{stroke:#999}</style>"
)


def _seconds(values: tuple[float, ...]) -> str:
    return " / ".join(f"{v:.3f}" for v in values) if values else "-"


def _minute(micros: int) -> str:
    return datetime.fromtimestamp(micros / 1e6, UTC).strftime("%Y-%m-%d %H:%M")


def markdown(report: Report) -> str:
    """Return the report as Markdown tables."""
    lines = ["# Queue report", "", "## Per entrypoint", ""]
    lines.append(
        "| entrypoint | finished | wait p50 / p95 / p99 (s) | run p50 / p95 / p99 (s) | retried | dead |"
    )
    lines.append("|---|---:|---:|---:|---:|---:|")
    if not report.timings:
        lines[-2:] = ["No job has finished yet (or the history kept none: see `QueuePolicy.history_limit`)."]
    for name, t in report.timings.items():
        lines.append(
            f"| {name} | {t.finished} | {_seconds(t.wait)} | {_seconds(t.run)} "
            f"| {t.retry_rate:.1%} | {t.dead_rate:.1%} |"
        )
    found = report.throughput
    minutes = found.bucket // 60_000_000
    lines += [
        "",
        f"## Finished jobs per {minutes} min",
        "",
        "| from (UTC) | acked | dead |",
        "|---|---:|---:|",
    ]
    for slot, (acked, dead) in enumerate(zip(found.acked, found.dead, strict=True)):
        if acked or dead:
            lines.append(f"| {_minute(found.start + slot * found.bucket)} | {acked} | {dead} |")
    lines += ["", "![throughput](throughput.svg)", ""]
    return "\n".join(lines)


def write(report: Report, directory: Path) -> list[Path]:
    """Write ``report.md`` and ``throughput.svg`` into ``directory``; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    text, chart = directory / "report.md", directory / "throughput.svg"
    text.write_text(markdown(report))
    svg = throughput_chart(report.throughput) if report.throughput.acked else "<svg ></svg>"
    standalone = svg.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)
    chart.write_text(standalone.replace(">", ">" + _SVG_STYLE, 1))
    return [text, chart]


async def _history(url: str) -> list[HistoryRecord]:
    async with DirectQueue(storage_from_url(url)) as queue:
        return await queue.history()


def compute(url: str, engine: str = "auto") -> tuple[Report, str]:
    """Return the report of the queue at ``url`` and the engine that computed it."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    records: list[HistoryRecord] = []
    if engine != "spark":
        records = asyncio.run(_history(url))
        spark_installed = importlib.util.find_spec("pyspark") is not None
        if engine == "python" or len(records) <= SPARK_ABOVE or not spark_installed:
            return report_of(records), "python"
    try:
        from jqueue.adapters.spark.report import compute_at
    except ImportError as exc:
        raise ImportError(f"{exc}; or use --engine python") from exc
    return compute_at(url), "spark"
