"""The chaos matrix: faults of brokers, storage and clocks under load, on a file root and on S3.

Each row runs the harness of ``soak_failover.py`` on a fresh root: two ``jqueue serve``
processes, producer and ``Worker`` processes through ``connect``, each client writing its
history (each call's start, end and answer). After ``warm`` seconds of load one fault is made;
producers go on for ``tail`` seconds after it ends, then stop, and the workers drain the queue.
``chaos_check.check`` then reads every client's history and the queue's: jobs lost (enqueued,
never finished), acks lost (returned, not in the queue's history), jobs completed twice (two
acks returned), and the recovery ratio (jobs enqueued by the end of the tail and acked within
``--bound`` seconds of the fault's end, over those enqueued). Faults:

- ``kill``: SIGKILL the serving broker (a new one is started in its place);
- ``kills``: four such kills spread over the fault's length;
- ``stop``: SIGSTOP the serving broker for the fault's length, then SIGCONT;
- ``skew``: every process's wall clock moved by +30 s or -30 s (``faketime``: brokers and
  clients alternate), and the serving broker killed twice, so that the queue passes between
  brokers whose clocks disagree by 60 s;
- ``slowdown`` (S3): the proxy of ``s3_stack.py`` answers a share (``--storm-rate``) of all
  requests ``503 SlowDown`` for the fault's length;
- ``conflict`` (S3): the proxy answers that share of conditional PUTs ``409
  ConditionalRequestConflict`` or ``412 PreconditionFailed``;
- ``disk`` (file): the root is on a tmpfs of ``DISK_MB`` (mounting it needs root), filled to
  the last byte for the fault's length, then freed.

After every fault a broker that exited is started again (as a service manager would). Prints a
markdown table; exit status 1 if any check fails.

Example::

    .venv/bin/python tools/chaos_matrix.py --quick
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from chaos_check import Verdict, Window, check
from s3_stack import CREDENTIALS, S3Stack
from soak_failover import Brokers, Load

FAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
"""libfaketime (Debian's ``faketime``): it moves the wall clock of a process (``clock_gettime``
and ``time``), which ``datetime.now`` reads; ``FAKETIME_DONT_FAKE_MONOTONIC`` keeps the
monotonic clock, on which the histories are timed, true."""
SKEW = 30
DISK_MB = 512
"""The tmpfs of the ``disk`` fault: room for a row's data (about 75 MB on a full run)."""


@dataclass(frozen=True)
class Timing:
    """How long each phase of a row lasts, in seconds, and the load."""

    warm: float
    fault: float
    tail: float
    bound: float
    clients: int
    batch: int
    concurrency: int


QUICK = Timing(warm=2, fault=3, tail=1, bound=30, clients=1, batch=5, concurrency=8)
FULL = Timing(warm=20, fault=10, tail=5, bound=30, clients=2, batch=50, concurrency=32)


@dataclass
class Scene:
    """What a fault acts on: the brokers, the S3 stack (on S3) and the tmpfs (``disk``)."""

    brokers: Brokers
    timing: Timing
    storm_rate: float
    s3: S3Stack | None = None
    mount: Path | None = None


def _kill(scene: Scene) -> list[str]:
    return [scene.brokers.kill()]


def _kills(scene: Scene) -> list[str]:
    events = []
    for _ in range(4):
        events.append(scene.brokers.kill())
        time.sleep(scene.timing.fault / 4)
    return events


def _stop(scene: Scene) -> list[str]:
    return [scene.brokers.freeze(scene.timing.fault)]


def _skew(scene: Scene) -> list[str]:
    events = [scene.brokers.kill()]
    time.sleep(scene.timing.fault / 2)
    return [*events, scene.brokers.kill()]


def _storm(mode: str) -> Callable[[Scene], list[str]]:
    def storm(scene: Scene) -> list[str]:
        assert scene.s3 is not None
        scene.s3.faults(mode, scene.storm_rate)
        try:
            time.sleep(scene.timing.fault)
        finally:
            scene.s3.faults("off")
        return [f"{mode} on {scene.storm_rate:.0%} for {scene.timing.fault:g} s"]

    return storm


def _disk(scene: Scene) -> list[str]:
    assert scene.mount is not None
    filler = scene.mount / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        free = os.statvfs(scene.mount)
        with contextlib.suppress(OSError):
            os.posix_fallocate(fd, 0, free.f_bavail * free.f_frsize)
        size = 4096
        while size:  # whatever the allocation left, to the last byte
            try:
                os.write(fd, b"\0" * size)
            except OSError:
                size //= 2
        time.sleep(scene.timing.fault)
    finally:
        os.close(fd)
        filler.unlink()
    return [f"filled the root's {DISK_MB} MB disk for {scene.timing.fault:g} s"]


FAULTS: dict[str, tuple[Callable[[Scene], list[str]], tuple[str, ...]]] = {
    "kill": (_kill, ("file", "s3")),
    "kills": (_kills, ("file", "s3")),
    "stop": (_stop, ("file", "s3")),
    "skew": (_skew, ("file", "s3")),
    "slowdown": (_storm("slowdown"), ("s3",)),
    "conflict": (_storm("conflict"), ("s3",)),
    "disk": (_disk, ("file",)),
}
"""Each fault, and the backends it applies to."""


def _skewed(n: int) -> dict[str, str]:
    return {
        **os.environ,
        "LD_PRELOAD": str(FAKETIME),
        "FAKETIME": f"{'+' if n % 2 == 0 else '-'}{SKEW}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def _client_skew(name: str) -> dict[str, str]:
    mode, n = name.split("-")
    return _skewed(int(n) + (mode == "work"))


@contextlib.contextmanager
def _tmpfs(path: Path) -> Iterator[Path]:
    path.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", f"size={DISK_MB}m", "tmpfs", str(path)]
    if subprocess.run(mount, check=False).returncode != 0:
        raise RuntimeError("the disk fault mounts a tmpfs, which needs root: leave it out (--faults)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@dataclass
class Row:
    """One row of the matrix: what a fault did, and what the checker found."""

    backend: str
    fault: str
    verdict: Verdict
    events: list[str]
    failures: list[str]


def run_row(
    backend: str, fault: str, scratch: Path, timing: Timing, s3: S3Stack | None, storm_rate: float
) -> Row:
    """Run one fault on a fresh root of ``backend``; return its row."""
    work_dir = scratch / f"{backend}-{fault}"
    work_dir.mkdir()
    with contextlib.ExitStack() as stack:
        mount = stack.enter_context(_tmpfs(work_dir / "disk")) if fault == "disk" else None
        if s3 is not None:
            root = s3.new_root()
        else:
            root = str((mount or work_dir) / "root")
            Path(root).mkdir()
        skew = fault == "skew"
        brokers = Brokers(root, work_dir, env=_skewed if skew else lambda n: None)
        load = Load(
            root,
            work_dir,
            timing.clients,
            timing.batch,
            timing.concurrency,
            env=_client_skew if skew else lambda _: None,
        )
        scene = Scene(brokers, timing, storm_rate, s3, mount)
        try:
            events, window = _drive(scene, load, FAULTS[fault][0])
            histories = load.histories()
        finally:
            load.kill()
            brokers.stop()
    verdict = check(histories, window)
    return Row(backend, fault, verdict, events, load.failures() + verdict.failures)


def _drive(scene: Scene, load: Load, fault: Callable[[Scene], list[str]]) -> tuple[list[str], Window]:
    """Start the brokers and the load, make the fault, drain; return the events and the window
    of recovery: the jobs enqueued until ``tail`` seconds after the fault's end, or until the first
    enqueue begun after the end returned if that was later, count."""
    timing = scene.timing
    scene.brokers.start()
    scene.brokers.serving()
    scene.brokers.start()
    load.start()
    if load.resumed(time.monotonic(), 120) is None:
        raise RuntimeError(f"no job was enqueued and acked within 120 s on {scene.brokers.root}")
    time.sleep(timing.warm)
    events = fault(scene)
    fault_end = time.monotonic()
    events += scene.brokers.restart_exited()
    resumed = load.resumed(fault_end, timing.bound)
    tail = max(timing.tail, (resumed or fault_end) - fault_end)
    time.sleep(max(0.0, fault_end + tail - time.monotonic()))
    load.drain(timing.bound + 30)
    return events, Window(fault_end, tail, timing.bound, resumed)


HEADER = (
    "| backend | fault | operations | jobs enqueued | finished in bound | recovery | lost | acks lost "
    "| completed twice | longest stall |\n|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"
)


def table_line(row: Row) -> str:
    """The markdown line of ``row``."""
    v = row.verdict
    return (
        f"| {row.backend} | {row.fault} | {v.operations:,} | {v.enqueued:,} "
        f"| {v.finished:,} of {v.counted:,} | {v.recovery:.4f} | {len(v.lost)} | {len(v.acks_lost)} "
        f"| {len(v.twice)} | {v.stall:.1f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="short phases, one producer and one worker")
    parser.add_argument("--backends", default="file,s3", help="comma-separated: file, s3")
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    parser.add_argument("--bound", type=float, help="seconds after a fault's end by which jobs must finish")
    parser.add_argument("--fault-seconds", type=float, help="how long a fault lasts")
    parser.add_argument("--clients", type=int, help="producer processes, and as many workers")
    parser.add_argument("--batch", type=int, help="jobs per enqueue (a producer rests 50 ms between batches)")
    parser.add_argument("--warm", type=float, help="seconds of load before the fault")
    parser.add_argument("--keep", help="an empty directory to run in and keep (logs, histories)")
    parser.add_argument("--storm-rate", type=float, default=0.5, help="share of requests a storm answers")
    options = parser.parse_args()
    timing = QUICK if options.quick else FULL
    given = {
        "fault": options.fault_seconds,
        "bound": options.bound,
        "clients": options.clients,
        "batch": options.batch,
        "warm": options.warm,
    }
    timing = replace(timing, **{name: value for name, value in given.items() if value is not None})
    backends = options.backends.split(",")
    wanted = [f for f in options.faults.split(",") if f]
    unknown = sorted(set(wanted) - set(FAULTS)) + sorted(set(backends) - {"file", "s3"})
    if unknown:
        parser.error(f"unknown fault or backend: {unknown}")
    rows = run_matrix(backends, wanted, timing, options.storm_rate, options.keep)
    sys.exit(1 if any(row.failures for row in rows) else 0)


def run_matrix(
    backends: list[str], wanted: list[str], timing: Timing, storm_rate: float, keep: str | None = None
) -> list[Row]:
    """Run each fault on each backend it applies to, in ``keep`` (kept) or a temporary directory;
    print the table as rows finish."""
    os.environ.update(CREDENTIALS)
    rows: list[Row] = []
    print(HEADER, flush=True)
    with contextlib.ExitStack() as stack:
        scratch = keep or stack.enter_context(tempfile.TemporaryDirectory(prefix="jqueue-chaos-"))
        s3 = None
        if "s3" in backends:
            s3 = S3Stack(0, 0)
            stack.callback(s3.stop)
        for backend in backends:
            for fault in wanted:
                if backend not in FAULTS[fault][1]:
                    continue
                row = run_row(
                    backend, fault, Path(scratch), timing, s3 if backend == "s3" else None, storm_rate
                )
                rows.append(row)
                print(table_line(row), flush=True)
    print(f"\n{sum(row.verdict.operations for row in rows):,} operations in all")
    for row in rows:
        errors = f"{row.verdict.errors} client calls raised"
        print(f"{row.backend} {row.fault}: {'; '.join(row.events)}; {errors}")
        for failure in row.failures:
            print(f"FAILED {row.backend} {row.fault}: {failure}")
    return rows


if __name__ == "__main__":
    main()
