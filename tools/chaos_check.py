"""The checker of ``soak_failover.py`` and ``chaos_matrix.py``: from every client's history (each
call's start, end and answer) and the queue's own history, whether a job was lost (enqueued, never
finished, gone from the queue), an ack lost or a job completed twice, and how many jobs finished
within a bound after a fault ended.

Times are ``time.monotonic()`` readings: one clock for every process of the machine, which a
skewed wall clock (``faketime``) does not move.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from jqueue import JobStatus


@dataclass(frozen=True)
class Call:
    """One client call: ``enqueue``, ``dequeue``, ``ack_and_dequeue`` or ``ack``; the jobs its answer
    named (enqueued or claimed), or the error it raised."""

    client: str
    call: str
    start: float
    end: float
    ids: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Ack:
    """An ack that returned to a worker (its ``after_job`` hook saw ``acked``), at ``at``."""

    client: str
    job_id: str
    at: float


@dataclass(frozen=True)
class Histories:
    """What the clients saw, and the queue's history: each job's outcome, the jobs still in the
    queue (with their state), and whether the history is full (keeps only its newest records)."""

    calls: list[Call]
    acks: list[Ack]
    queue: dict[str, JobStatus]
    live: dict[str, str]
    full: bool = False


@dataclass(frozen=True)
class Window:
    """When the fault ended; jobs enqueued until ``tail`` seconds later count for recovery, which
    they must reach (acked) within ``bound`` seconds of the end; ``resumed``: when the first
    enqueue begun after the end returned (``None``: none within the bound)."""

    fault_end: float
    tail: float
    bound: float
    resumed: float | None


@dataclass
class Verdict:
    """The counts of one run and the checks that failed (none if it passed)."""

    operations: int
    enqueued: int
    counted: int
    finished: int
    lost: list[str]
    acks_lost: list[str]
    twice: list[str]
    strangers: list[str]
    stall: float
    errors: int = 0
    unfinished: list[str] = field(default_factory=list)
    """Jobs enqueued, not finished, and still in the queue (late, not lost)."""
    failures: list[str] = field(default_factory=list)

    @property
    def recovery(self) -> float:
        """Jobs finished within the bound over jobs counted for recovery."""
        return self.finished / self.counted if self.counted else 1.0


def check(histories: Histories, window: Window | None = None) -> Verdict:
    """Check the histories of one run; ``window`` (if given) is the fault whose recovery counts."""
    enqueued = {job_id for c in histories.calls if c.call == "enqueue" for job_id in c.ids}
    acks = Counter(ack.job_id for ack in histories.acks)
    first_ack: dict[str, float] = {}
    for ack in histories.acks:
        first_ack[ack.job_id] = min(ack.at, first_ack.get(ack.job_id, ack.at))
    done_in_queue = {j for j, outcome in histories.queue.items() if outcome is JobStatus.ACKED}
    unfinished = sorted(enqueued - set(acks) - done_in_queue)
    # a full history keeps the newest records: an acked job missing from it was acked before its
    # oldest record, unless the job is still in the queue
    acks_lost = sorted(
        job_id
        for job_id in acks
        if (
            histories.queue[job_id] is not JobStatus.ACKED
            if job_id in histories.queue
            else not histories.full or job_id in histories.live
        )
    )
    counted, finished = _recovery(histories, window, first_ack)
    verdict = Verdict(
        operations=sum(max(1, len(c.ids)) for c in histories.calls) + len(histories.acks),
        enqueued=len(enqueued),
        counted=counted,
        finished=finished,
        lost=[j for j in unfinished if j not in histories.live],
        acks_lost=acks_lost,
        twice=sorted(job_id for job_id, count in acks.items() if count > 1),
        strangers=sorted(set(acks) - enqueued),
        stall=max((c.end - c.start for c in histories.calls), default=0.0),
        errors=sum(1 for c in histories.calls if c.error is not None),
        unfinished=[j for j in unfinished if j in histories.live],
    )
    _report(verdict, histories, window)
    return verdict


def _report(verdict: Verdict, histories: Histories, window: Window | None) -> None:
    """Add to ``verdict.failures`` each check it fails."""
    where = [f"{j}: {histories.queue.get(j) or histories.live.get(j, 'nowhere')}" for j in verdict.unfinished]
    for name, found in (
        ("enqueued, never finished and gone from the queue (lost)", verdict.lost),
        ("enqueued and never finished, still in the queue", where),
        ("acked but not acked in the queue's history", verdict.acks_lost),
        ("acked twice", verdict.twice),
        ("acked but never enqueued", verdict.strangers),
    ):
        if found:
            verdict.failures.append(f"{len(found)} jobs {name}, e.g. {found[:3]}")
    if window is not None and window.resumed is None:
        verdict.failures.append(f"no enqueue begun after the fault's end returned within {window.bound:g} s")
    if window is not None and verdict.counted == 0:
        verdict.failures.append("no job was enqueued by the end of the window: nothing to recover")
    if verdict.finished < verdict.counted:
        verdict.failures.append(
            f"recovery {verdict.recovery:.4f}: {verdict.counted - verdict.finished} of {verdict.counted} "
            f"jobs not finished within {window.bound if window else 0:g} s of the fault's end"
        )


def _recovery(histories: Histories, window: Window | None, first_ack: dict[str, float]) -> tuple[int, int]:
    """Jobs counted for recovery (enqueued by the end of the tail) and those finished in the bound."""
    if window is None:
        return 0, 0
    counted = {
        job_id
        for c in histories.calls
        if c.call == "enqueue" and c.end <= window.fault_end + window.tail
        for job_id in c.ids
    }
    limit = window.fault_end + window.bound
    return len(counted), sum(1 for job_id in counted if first_ack.get(job_id, limit + 1) <= limit)


def call_line(call: str, start: float, end: float, ids: list[str], error: str | None = None) -> str:
    """One line of a client's history file."""
    line: dict[str, object] = {"call": call, "start": start, "end": end, "ids": ids}
    if error is not None:
        line["error"] = error
    return json.dumps(line) + "\n"


def ack_line(job_id: str, at: float) -> str:
    """One line of a worker's history file: an ack that returned."""
    return json.dumps({"acked": job_id, "at": at}) + "\n"


def read_client(path: Path) -> tuple[list[Call], list[Ack]]:
    """The calls and acks a client wrote to ``path`` (a file of ``call_line`` and ``ack_line``)."""
    calls: list[Call] = []
    acks: list[Ack] = []
    if not path.exists():
        return calls, acks
    for text in path.read_text().splitlines():
        try:
            row = json.loads(text)
        except json.JSONDecodeError:  # the last line of a client killed while it wrote
            continue
        if "acked" in row:
            acks.append(Ack(path.stem, row["acked"], row["at"]))
        else:
            ids = tuple(row["ids"])
            calls.append(Call(path.stem, row["call"], row["start"], row["end"], ids, row.get("error")))
    return calls, acks
