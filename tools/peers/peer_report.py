"""The tables of ``benchmark_peers.py``: the median of the rounds per system and scenario."""

from __future__ import annotations

import statistics
from typing import Any

SCENARIOS = ("sequential", "batch", "drain", "latency", "raw")


def report(results: list[dict[str, Any]], skipped: dict[str, str]) -> str:
    """The tables of a run: the median of the rounds per system and scenario, with the spread."""
    lines = []
    for scenario in SCENARIOS:
        rows = [r for r in results if r["scenario"] == scenario]
        if not rows:
            continue
        lines.append(f"\n{scenario}")
        for name in dict.fromkeys(r["system"] for r in rows):
            mine = [r for r in rows if r["system"] == name]
            failed = [r["error"] for r in mine if "error" in r]
            good = [r for r in mine if "error" not in r]
            lines.append(
                f"  {name:27s} {summary(scenario, good)}" + (f"  failed: {failed[0]}" if failed else "")
            )
    for name, why in skipped.items():
        lines.append(f"skipped {name}: {why}")
    return "\n".join(lines)


def summary(scenario: str, rows: list[dict[str, Any]]) -> str:
    """One system's figures for a scenario, over its rounds."""
    if not rows:
        return "-"
    if scenario == "latency":
        keys = ("p50_ms", "p95_ms", "p99_ms", "max_ms")
        return "  ".join(f"{k[:-3]} {statistics.median(r[k] for r in rows):8.1f} ms" for k in keys)
    if scenario == "raw":
        parts = []
        for pattern in rows[0]["patterns"]:
            rates = [r["patterns"][pattern]["ops_per_s"] for r in rows]
            cpu = statistics.median(r["patterns"][pattern]["cpu_ms_per_op"] for r in rows)
            spread = f"({min(rates):.0f}-{max(rates):.0f})"
            parts.append(f"{pattern}: {statistics.median(rates):8.0f} ops/s {spread}, cpu {cpu:.3f} ms")
        return "\n  " + " " * 23 + ("\n  " + " " * 23).join(parts)
    rates = [r["jobs_per_s"] for r in rows]
    text = f"{statistics.median(rates):9.0f} jobs/s ({min(rates):.0f}-{max(rates):.0f})"
    if all("cpu_ms_per_job" in r for r in rows):
        text += f"  cpu {statistics.median(r['cpu_ms_per_job'] for r in rows):.3f} ms/job"
    if all("server_cpu_ms_per_job" in r for r in rows):
        text += f" + server {statistics.median(r['server_cpu_ms_per_job'] for r in rows):.3f}"
    if all("dollars_per_million_jobs" in r for r in rows):
        costs = {
            name: statistics.median(r["dollars_per_million_jobs"][name] for r in rows)
            for name in rows[0]["dollars_per_million_jobs"]
        }
        text += "  per million jobs: " + ", ".join(
            f"{name} ${dollars:.3f}" for name, dollars in costs.items()
        )
    notes = {r["note"] for r in rows if "note" in r}
    return text + (f"  ({', '.join(notes)})" if notes else "")


def short(row: dict[str, Any]) -> str:
    """A progress line's figure."""
    for key in ("error", "jobs_per_s", "p50_ms"):
        if key in row:
            return f"{key} {row[key]}"
    return "done"
