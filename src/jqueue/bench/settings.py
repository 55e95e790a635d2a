"""The benchmark's command line: its options and the ``Settings`` they parse into."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from jqueue.core.layout import Layout

BACKENDS = ("memory", "file", "s3")
QUEUES = ("direct", "broker")
SCENARIOS = ("enqueue-seq", "enqueue-c10", "enqueue-c50", "dequeue-seq", "mixed-c50")


def _name_list(kind: str, allowed: Sequence[str]) -> Callable[[str], list[str]]:
    """Return an argparse ``type`` that parses a comma list of names from ``allowed``.

    Parameters
    ----------
    kind : str
        What the names are, for error messages ("backend", "queue"...).
    allowed : sequence of str
        The valid names.

    Returns
    -------
    callable
        Converts ``"a,b"`` to ``["a", "b"]`` (order kept, duplicates dropped).
    """

    def parse(text: str) -> list[str]:
        names = [part.strip() for part in text.split(",") if part.strip()]
        if not names:
            raise argparse.ArgumentTypeError(f"no {kind} given")
        unknown = [name for name in names if name not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {kind} {', '.join(map(repr, unknown))} (choose from {', '.join(allowed)})"
            )
        return list(dict.fromkeys(names))

    return parse


def _bounded_int(minimum: int) -> Callable[[str], int]:
    """Return an argparse ``type`` for an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _non_negative_float(text: str) -> float:
    """Parse a finite number of at least zero (an argparse ``type``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        prog="jqueue bench",
        description="Benchmark jqueue's DirectQueue and BrokerQueue on memory, file and S3 (moto) storage.",
        epilog="Each (backend, queue, scenario) starts from a fresh queue object. "
        "See the module docstring for the scenarios. Exit status: 0 if every row verified, "
        "1 if some did not, 2 for bad arguments.",
    )
    lists = (
        ("--backends", "backend", BACKENDS, "storage backends"),
        ("--queues", "queue", QUEUES, "queue kinds"),
        ("--scenarios", "scenario", SCENARIOS, "scenarios"),
    )
    for flag, kind, names, what in lists:
        parser.add_argument(
            flag,
            type=_name_list(kind, names),
            default=",".join(names),  # a string default goes through ``type`` too
            metavar="LIST",
            help=f"comma-separated {what}, from: {', '.join(names)} (default: all)",
        )
    parser.add_argument(
        "--ops",
        type=_bounded_int(1),
        default=1000,
        metavar="N",
        help="operations (queue calls) per scenario (default: %(default)s)",
    )
    parser.add_argument(
        "--payload-bytes",
        type=_bounded_int(0),
        default=1024,
        metavar="N",
        help="payload size of each enqueued job (default: %(default)s)",
    )
    parser.add_argument(
        "--get-latency-ms",
        type=_non_negative_float,
        default=0.0,
        metavar="MS",
        help="fixed delay added before every storage read, on any backend (default: 0)",
    )
    parser.add_argument(
        "--put-latency-ms",
        type=_non_negative_float,
        default=0.0,
        metavar="MS",
        help="fixed delay added before every storage write, on any backend (default: 0)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="directory for the file backend's state files, created if needed; the tool deletes "
        "the files it made there (default: a temporary directory, removed afterwards)",
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write the results as JSON to PATH; parent directories are created",
    )
    parser.add_argument(
        "--layout",
        choices=("single", "log"),
        default="log",
        help="storage layout of every queue (default: %(default)s)",
    )
    parser.add_argument(
        "--url",
        default=None,
        help="benchmark this storage URL instead of --backends: every scenario uses a fresh object "
        "beside it (file:, s3:, gs: or memory:); objects made on S3 or GCS are left in place",
    )
    parser.add_argument(
        "--repeat",
        type=_bounded_int(1),
        default=1,
        metavar="N",
        help="run every combination N times and report the run with the median ops/s "
        "(the lower median for even N) (default: %(default)s)",
    )
    return parser


@dataclass(frozen=True)
class Settings:
    """The parsed command line.

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

    backends: list[str]
    queues: list[str]
    scenarios: list[str]
    ops: int
    payload_bytes: int
    get_latency_ms: float
    put_latency_ms: float
    directory: Path | None
    json_path: Path | None
    repeat: int
    layout: Layout = "log"
    url: str | None = None

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


def parse_settings(argv: Sequence[str] | None = None) -> Settings:
    """Parse ``argv`` (default: ``sys.argv[1:]``) into ``Settings``; exits 2 on bad arguments."""
    ns = build_parser().parse_args(argv)
    return Settings(
        backends=ns.backends,
        queues=ns.queues,
        scenarios=ns.scenarios,
        ops=ns.ops,
        payload_bytes=ns.payload_bytes,
        get_latency_ms=ns.get_latency_ms,
        put_latency_ms=ns.put_latency_ms,
        directory=ns.dir,
        json_path=ns.json,
        repeat=ns.repeat,
        layout=ns.layout,
        url=ns.url,
    )
