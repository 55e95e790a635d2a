"""Charts as SVG text, for the dashboard's pages and the report's files: a stacked bar chart of
finished jobs per bucket, and sparklines. Every value put in is a number or escaped."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

from jqueue.domain.figures import Throughput


def _clock(micros: int) -> str:
    return datetime.fromtimestamp(micros / 1e6, UTC).strftime("%H:%M")


def throughput_chart(found: Throughput, width: int = 720, height: int = 160) -> str:
    """Return a bar chart of ``found``: acked (bottom) and failed (top) jobs per bucket."""
    buckets = len(found.acked)
    busiest = max(a + d for a, d in zip(found.acked, found.dead, strict=True))
    top = max(busiest, 1)
    plot_h, left, bottom = height - 24, 36, height - 18
    step = (width - left) / buckets
    bars = []
    for i, (acked, dead) in enumerate(zip(found.acked, found.dead, strict=True)):
        if not acked + dead:
            continue
        x = left + i * step
        acked_h, dead_h = acked / top * plot_h, dead / top * plot_h
        start = _clock(found.start + i * found.bucket)
        tip = f"{start}: {acked} acked, {dead} failed"
        bars.append(
            f"<g><title>{tip}</title>"
            f'<rect class="acked" x="{x:.1f}" y="{bottom - acked_h:.1f}" width="{max(step - 1, 1):.1f}" '
            f'height="{acked_h:.1f}"/>'
            f'<rect class="dead" x="{x:.1f}" y="{bottom - acked_h - dead_h:.1f}" '
            f'width="{max(step - 1, 1):.1f}" height="{dead_h:.1f}"/></g>'
        )
    labels = []
    for i in range(0, buckets, max(1, buckets // 6)):
        start = _clock(found.start + i * found.bucket)
        labels.append(f'<text x="{left + i * step:.1f}" y="{height - 4}" class="axis">{start}</text>')
    total_acked, total_dead = sum(found.acked), sum(found.dead)
    summary = (
        f"Jobs finished per {found.bucket // 1_000_000} s bucket, last {buckets} buckets: "
        f"{total_acked} acked, {total_dead} failed; at most {busiest} in one."
    )
    return (
        f'<svg class="chart" role="img" aria-label="{escape(summary)}" viewBox="0 0 {width} {height}" '
        f'width="100%" preserveAspectRatio="none">'
        f'<text x="0" y="12" class="axis">{top}</text><text x="0" y="{bottom}" class="axis">0</text>'
        f'<line x1="{left}" y1="{bottom}" x2="{width}" y2="{bottom}" class="base"/>'
        + "".join(bars)
        + "".join(labels)
        + "</svg>"
    )


def sparkline(values: list[int], width: int = 120, height: int = 24) -> str:
    """Return a small line of ``values`` (jobs finished per bucket, oldest first)."""
    if not values:
        return ""
    top = max(max(values), 1)
    step = width / max(len(values) - 1, 1)
    points = " ".join(
        f"{i * step:.1f},{height - 2 - v / top * (height - 4):.1f}" for i, v in enumerate(values)
    )
    label = f"{sum(values)} finished in the last hour, at most {max(values)} in a minute"
    return (
        f'<svg class="spark" role="img" aria-label="{label}" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}"><polyline points="{points}"/></svg>'
    )
