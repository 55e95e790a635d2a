"""``jqueue workflow``: a job's workflow, each job with its parents and state."""

from __future__ import annotations

import typer

from jqueue.adapters.cli.common import (
    AnyQueue,
    JsonFlag,
    age,
    console,
    full_ids,
    job_json,
    on_queue,
    print_json,
    short_ids,
    table_of,
)
from jqueue.domain.errors import headline
from jqueue.domain.models import Job
from jqueue.domain.records import HistoryRecord
from jqueue.domain.workflows import LEFT


def workflow(ctx: typer.Context, job_id: str, as_json: JsonFlag = False) -> None:
    """Show a job's workflow: the jobs it waits for, those that wait for it, theirs in turn,
    parents before children, each with its parents; the jobs nothing waits for (a chain's last step, a
    group's callback) are marked as its ends."""

    async def look(queue: AnyQueue) -> tuple[list[Job], dict[str, HistoryRecord]]:
        [full_id] = await full_ids(queue, [job_id], finished=True)
        jobs = await queue.workflow(full_id)
        finished = [await queue.finished(job.id) for job in jobs if job.status in LEFT]
        return jobs, {record.job_id: record for record in finished if record is not None}

    jobs, finished = on_queue(ctx, look)
    if as_json:  # the history keeps no payload of a finished job, but when it finished
        kept = {
            job_id: {"payload": None, "finished_at": record.finished_at}
            for job_id, record in finished.items()
        }
        print_json([job_json(job) | kept.get(job.id, {}) for job in jobs])
        return
    short = short_ids([job.id for job in jobs])
    parents = {parent for job in jobs for parent in job.after}
    rows = []
    for job in jobs:
        after = ", ".join(short.get(parent, parent[:8]) for parent in job.after)
        end = "" if job.id in parents else " (end)"
        row = (short[job.id] + end, job.entrypoint, str(job.status), after, str(job.attempts))
        rows.append((*row, age(job.created_at), headline(job.last_error or "")))
    console.print(table_of(("id", "entrypoint", "status", "after", "attempts", "age", "error"), rows))
