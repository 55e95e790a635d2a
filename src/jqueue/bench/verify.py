"""The check after a run: the queue state read back must show exactly what the calls did."""

from __future__ import annotations

from collections.abc import Sequence
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
    if scenario.startswith("enqueue-"):
        check(len(tally.enqueued) == ops, f"{len(tally.enqueued)} enqueues succeeded, expected {ops}")
        check(queued == set(tally.enqueued), f"{len(queued)} jobs queued, expected the {ops} enqueued")
        check(not in_progress, f"{len(in_progress)} jobs in progress, expected 0")
        summary = f"{len(queued)} queued"
    elif scenario == "dequeue-seq":
        check(len(prefilled) == ops, f"prefilled {len(prefilled)} jobs, expected {ops}")
        check(tally.empty_dequeues == 0, f"{tally.empty_dequeues} dequeues came back empty")
        check(set(tally.claimed) == set(prefilled), "the claimed jobs are not the prefilled ones")
        check(not queued, f"{len(queued)} jobs still queued, expected 0")
        check(in_progress == set(tally.claimed), f"{len(in_progress)} jobs in progress, expected {ops}")
        summary = f"0 queued, {len(in_progress)} in progress"
    elif scenario == "mixed-c50":
        enqueued, claimed, acked = set(tally.enqueued), set(tally.claimed), set(tally.acked)
        check(claimed <= enqueued, "claimed a job that this run did not enqueue")
        check(acked <= claimed, "acked a job that was not claimed")
        check(all_ids == enqueued - acked, f"{len(all_ids)} jobs left, expected {len(enqueued - acked)}")
        check(queued == enqueued - claimed, f"{len(queued)} queued, expected {len(enqueued - claimed)}")
        check(
            in_progress == claimed - acked, f"{len(in_progress)} in progress, expected {len(claimed - acked)}"
        )
        summary = (
            f"{len(enqueued)} enqueued, {len(tally.claimed)} claimed "
            f"({tally.empty_dequeues} empty dequeues), {len(acked)} acked; "
            f"{len(queued)} queued, {len(in_progress)} in progress"
        )
    else:
        raise ValueError(f"unknown scenario {scenario!r}")
    if problems:
        return Verdict(False, "; ".join(problems), len(state.jobs), len(queued), len(in_progress))
    return Verdict(True, summary, len(state.jobs), len(queued), len(in_progress))
