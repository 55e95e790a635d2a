"""What a benchmark run does: ``Settings``, and the names it chooses from."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from jqueue.core.commits import Layout
from jqueue.domain.values import Bounds

BACKENDS = ("memory", "file", "s3")
QUEUES = ("direct", "broker")
SCENARIOS = ("enqueue-seq", "enqueue-c10", "enqueue-c50", "dequeue-seq", "mixed-c50")
OPS = Bounds(ge=1)
"""The bounds of ``Settings.ops``."""
PAYLOAD_BYTES = Bounds(ge=0)
"""The bounds of ``Settings.payload_bytes``."""
REPEAT = Bounds(ge=1)
"""The bounds of ``Settings.repeat``."""


def name_list(kind: str, text: str, allowed: Sequence[str]) -> list[str]:
    """Return the names of a comma list (order kept, duplicates dropped), each one of ``allowed``;
    else raise ``ValueError`` naming the ``kind`` of name ("backend", "queue"...)."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names:
        raise ValueError(f"no {kind} given")
    unknown = [name for name in names if name not in allowed]
    if unknown:
        raise ValueError(f"unknown {kind} {', '.join(map(repr, unknown))} (choose from {', '.join(allowed)})")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Settings:
    """What one benchmark run does (``jqueue bench``'s options, or ``tools/benchmark_storage.py``'s).

    Attributes
    ----------
    backends, queues, scenarios : list of str
        What to run.
    ops : int
        Calls per scenario.
    payload_bytes : int
        Payload size of each job.
    get_latency_ms, put_latency_ms : float
        Delay added before each storage read / write.
    directory : Path or None
        Where the file backend writes; None for a temporary directory.
    json_path : Path or None
        The JSON output file, if any.
    repeat : int
        Runs per combination.
    layout : {"single", "log"}
        Storage layout of every queue.
    url : str or None
        Benchmark this storage (fresh objects beside the URL) instead of ``backends``.
    """

    backends: list[str] = field(default_factory=lambda: list(BACKENDS))
    queues: list[str] = field(default_factory=lambda: list(QUEUES))
    scenarios: list[str] = field(default_factory=lambda: list(SCENARIOS))
    ops: int = 1000
    payload_bytes: int = 1024
    get_latency_ms: float = 0.0
    put_latency_ms: float = 0.0
    directory: Path | None = None
    json_path: Path | None = None
    repeat: int = 1
    layout: Layout = "log"
    url: str | None = None

    def __post_init__(self) -> None:
        OPS.check("ops", self.ops)
        PAYLOAD_BYTES.check("payload_bytes", self.payload_bytes)
        REPEAT.check("repeat", self.repeat)
        if not all(math.isfinite(ms) and ms >= 0 for ms in (self.get_latency_ms, self.put_latency_ms)):
            raise ValueError("a latency must be a finite number of milliseconds, at least 0")

    @property
    def has_latency(self) -> bool:
        """Whether any artificial storage latency is configured."""
        return self.get_latency_ms > 0 or self.put_latency_ms > 0

    def backend_label(self, backend: str) -> str:
        """Return the backend's name as shown in the output, e.g. ``s3+lat(60/100)``."""
        if not self.has_latency:
            return backend
        return f"{backend}+lat({_fmt_ms(self.get_latency_ms)}/{_fmt_ms(self.put_latency_ms)})"


def _fmt_ms(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"
