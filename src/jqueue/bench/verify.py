"""The check after a run: the queue state read back must show exactly what the calls did."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jqueue.bench.scenarios import RunCalls
from jqueue.domain.models import JobStatus, QueueState


@dataclass(frozen=True)
class Verdict:
    """The result of checking a run's final queue state against its calls.

    Attributes
    ----------
    ok : bool
        Whether everything matched.
    detail : str
        What was checked, or what did not match.
    final_jobs, final_queued, final_in_progress : int
        Job counts in the final state.
    """

    ok: bool
    detail: str
    final_jobs: int
    final_queued: int
    final_in_progress: int


def verify(scenario: str, ops: int, tally: RunCalls, state: QueueState, prefilled: Sequence[str]) -> Verdict:
    """Check that the calls of a run really happened, from the state read back afterwards.

    Parameters
    ----------
    scenario : str
        Which scenario ran.
    ops : int
        Calls it was asked to make.
    tally : RunCalls
        What the calls returned.
    state : QueueState
        The queue state read from storage after the run.
    prefilled : sequence of str
        Ids of the jobs put in before the run (``dequeue-seq``).

    Returns
    -------
    Verdict
        ``ok`` is False with the first mismatch in ``detail`` if anything is off.
    """
    queued = {j.id for j in state.jobs if j.status is JobStatus.QUEUED}
    in_progress = {j.id for j in state.jobs if j.status is JobStatus.IN_PROGRESS}
    all_ids = {j.id for j in state.jobs}
    problems: list[str] = []

    def check(condition: bool, message: str) -> None:
        if not condition:
            problems.append(message)

    check(len(tally.latencies) == ops, f"{len(tally.latencies)} calls made, expected {ops}")
    check(tally.errors == 0, f"{tally.errors} calls raised")
    check(len(all_ids) == len(state.jobs), "duplicate job ids in the state")
    check(len(queued) + len(in_progress) == len(state.jobs), "jobs in an unexpected status")
    check(len(set(tally.claimed)) == len(tally.claimed), "a job was claimed twice")
    seen = _Seen(queued, in_progress, all_ids)
    if scenario.startswith("enqueue-"):
        summary = _enqueued(ops, tally, seen, check)
    elif scenario == "dequeue-seq":
        summary = _dequeued(ops, tally, seen, prefilled, check)
    elif scenario == "mixed-c50":
        summary = _mixed(tally, seen, check)
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
    if problems:
        return Verdict(False, "; ".join(problems), len(state.jobs), len(queued), len(in_progress))
    return Verdict(True, summary, len(state.jobs), len(queued), len(in_progress))


@dataclass(frozen=True)
class _Seen:
    """The jobs of the state read back: queued, in progress, and every id."""

    queued: set[str]
    in_progress: set[str]
    all_ids: set[str]


Check = Callable[[bool, str], None]
"""Records a mismatch (the message) when the condition is False."""


def _enqueued(ops: int, tally: RunCalls, seen: _Seen, check: Check) -> str:
    check(len(tally.enqueued) == ops, f"{len(tally.enqueued)} enqueues succeeded, expected {ops}")
    check(seen.queued == set(tally.enqueued), f"{len(seen.queued)} jobs queued, expected the {ops} enqueued")
    check(not seen.in_progress, f"{len(seen.in_progress)} jobs in progress, expected 0")
    return f"{len(seen.queued)} queued"


def _dequeued(ops: int, tally: RunCalls, seen: _Seen, prefilled: Sequence[str], check: Check) -> str:
    check(len(prefilled) == ops, f"prefilled {len(prefilled)} jobs, expected {ops}")
    check(tally.empty_dequeues == 0, f"{tally.empty_dequeues} dequeues came back empty")
    check(set(tally.claimed) == set(prefilled), "the claimed jobs are not the prefilled ones")
    check(not seen.queued, f"{len(seen.queued)} jobs still queued, expected 0")
    check(seen.in_progress == set(tally.claimed), f"{len(seen.in_progress)} jobs in progress, expected {ops}")
    return f"0 queued, {len(seen.in_progress)} in progress"


def _mixed(tally: RunCalls, seen: _Seen, check: Check) -> str:
    enqueued, claimed, acked = set(tally.enqueued), set(tally.claimed), set(tally.acked)
    queued, in_progress = seen.queued, seen.in_progress
    check(claimed <= enqueued, "claimed a job that this run did not enqueue")
    check(acked <= claimed, "acked a job that was not claimed")
    check(
        seen.all_ids == enqueued - acked, f"{len(seen.all_ids)} jobs left, expected {len(enqueued - acked)}"
    )
    check(queued == enqueued - claimed, f"{len(queued)} queued, expected {len(enqueued - claimed)}")
    check(in_progress == claimed - acked, f"{len(in_progress)} in progress, expected {len(claimed - acked)}")
    return (
        f"{len(enqueued)} enqueued, {len(tally.claimed)} claimed "
        f"({tally.empty_dequeues} empty dequeues), {len(acked)} acked; "
        f"{len(queued)} queued, {len(in_progress)} in progress"
    )
