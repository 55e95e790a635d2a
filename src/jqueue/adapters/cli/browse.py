"""Commands that look at a queue without changing it: queues, stats, ls, show, dead ls, history."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta
from typing import Annotated

import typer
from rich.padding import Padding
from rich.table import Table

from jqueue.adapters.cli.common import (
    EntrypointOption,
    JsonFlag,
    LimitOption,
    OlderOption,
    StatusChoice,
    age,
    cell,
    console,
    errors,
    existing_queue,
    fail,
    full_ids,
    job_json,
    listed_briefly,
    preview,
    print_json,
    remote_queue,
    run,
    seconds,
    service,
    serving,
    short_ids,
    table_of,
    until,
)
from jqueue.domain.errors import JobCancelledError, JobFailedError, JQueueError, headline
from jqueue.domain.models import Job, JobStatus
from jqueue.domain.records import HistoryRecord
from jqueue.domain.stats import QueueStats
from jqueue.domain.times import utc_now


def _status_and_due(job: Job) -> tuple[str, str]:
    """A queued job not due yet shows as scheduled, with when it is due (as ``stats`` counts it)."""
    if job.status is JobStatus.QUEUED and job.not_before is not None and job.not_before > utc_now():
        return "scheduled", f"in {until(job.not_before)}"
    return str(job.status), ""


def _jobs_table(jobs: list[Job]) -> Table:
    short = short_ids([job.id for job in jobs])
    rows = []
    for job in jobs:
        row = (short[job.id], job.entrypoint, *_status_and_due(job), str(job.priority), str(job.attempts))
        rows.append((*row, age(job.created_at), preview(job.payload), headline(job.last_error or "")))
    headers = ("id", "entrypoint", "status", "due", "priority", "attempts", "age", "payload", "error")
    return table_of(headers, rows)


def queues(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """The queues a running jqueue serve (--server) serves, with their counts."""
    server = service(ctx)

    async def look() -> dict[str, QueueStats]:
        async with serving(remote_queue(server, "default")) as root:  # the root's call names no queue
            names = await root.queue_names()
        found = {}
        for name in names:
            async with serving(remote_queue(server, name)) as queue:
                found[name] = await queue.stats()
        return found

    found = run(look())
    totals = {name: _counts(s) for name, s in found.items()}
    if listed_briefly([{"queue": name, **counts} for name, counts in totals.items()], as_json, "no queues"):
        return
    rows = [(name, *map(str, counts.values())) for name, counts in totals.items()]
    console.print(table_of(("queue", "queued", "scheduled", "in progress", "dead"), rows))


def _counts(stats: QueueStats) -> dict[str, int]:
    """A queue's counts as ``stats`` splits them: jobs due now apart from those not due yet."""
    counts = stats.entrypoints.values()
    return {
        "queued": sum(s.queued for s in counts),
        "scheduled": sum(s.scheduled for s in counts),
        "in_progress": stats.total(JobStatus.IN_PROGRESS),
        "dead": stats.total(JobStatus.DEAD),
    }


def stats(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Counts by entrypoint and status, the oldest queued job, pauses, throttles and limits."""

    async def look() -> QueueStats:
        async with existing_queue(ctx) as queue:
            return await queue.stats()

    result = run(look())
    if as_json:
        entrypoints = {name: vars(s) for name, s in result.entrypoints.items()}
        paused = {"claims": result.paused_claims, "enqueues": result.paused_enqueues}
        throttles = [
            {"entrypoint": k, "limit": v[0], "per_seconds": v[1], "per_tenant": each}
            for each, kept in ((False, result.throttles), (True, result.tenant_throttles))
            for k, v in kept.items()
        ]
        limits = [
            {"entrypoint": k, "limit": v, "per_tenant": each}
            for each, kept in ((False, result.limits), (True, result.tenant_limits))
            for k, v in kept.items()
        ]
        summary = {
            "version": result.version,
            "entrypoints": entrypoints,
            "paused": paused,
            "throttles": throttles,
            "limits": limits,
        }
        print_json(summary | {"history_records": result.history_records})
        return
    rows = [
        (name, *map(str, (s.queued, s.scheduled, s.in_progress, s.dead, s.waiting)), age(s.oldest_queued_at))
        for name, s in result.entrypoints.items()
    ]
    headers = ("entrypoint", "queued", "scheduled", "in progress", "dead", "waiting", "oldest queued")
    console.print(table_of(headers, rows, title="jobs") if rows else "no jobs")

    def scopes(paused: list[str | None]) -> str:
        return ", ".join("(all)" if p is None else p for p in paused) or "none"

    console.print(
        f"claims paused: {scopes(result.paused_claims)}; enqueues paused: {scopes(result.paused_enqueues)}"
    )
    console.print(f"history records: {result.history_records}")
    for each, throttled in (("", result.throttles), (", each tenant", result.tenant_throttles)):
        for scope, (limit, per) in throttled.items():
            named = "(all)" if scope is None else scope
            console.print(f"throttle {named}{each}: {limit} claims per {per:g} s")
    for each, limited in (("", result.limits), (", each tenant", result.tenant_limits)):
        for scope, most in limited.items():
            console.print(f"limit {'(all)' if scope is None else scope}{each}: {most} in progress at once")


def ls(
    ctx: typer.Context,
    status: Annotated[
        StatusChoice, typer.Option(help="Only jobs in this status, or any (finished jobs: jqueue history).")
    ] = (StatusChoice.ANY),
    entrypoint: EntrypointOption = None,
    older_than: OlderOption = None,
    limit: LimitOption = 50,
    as_json: JsonFlag = False,
) -> None:
    """List jobs without claiming them, oldest first."""

    chosen = None if status is StatusChoice.ANY else JobStatus(status.value)

    async def look() -> list[Job]:
        async with existing_queue(ctx) as queue:
            return await queue.jobs(chosen, entrypoint, seconds(older_than), limit or None)

    jobs = run(look())
    if not listed_briefly([job_json(job) for job in jobs], as_json, "no jobs"):
        console.print(_jobs_table(jobs))


def show(ctx: typer.Context, job_id: str, as_json: JsonFlag = False) -> None:
    """Show one job in full: a job in the queue, or the history record (and result) of a
    finished one."""

    async def look() -> Job | HistoryRecord | None:
        async with existing_queue(ctx) as queue:
            [full_id] = await full_ids(queue, [job_id], finished=True)
            return await queue.find(full_id) or await queue.finished(full_id)

    found = run(look())
    if found is None:
        fail(f"job {job_id!r} is neither in the queue nor in its history")
    assert found is not None
    if isinstance(found, HistoryRecord):
        result = None if found.result is None else found.result.decode(errors="replace")
        fields = _history_json(found) | {"result": result}
        shown = fields | {"result": None if found.result is None else preview(found.result, 2000)}
    else:
        fields = job_json(found)
        status, due = _status_and_due(found)
        shown = fields | {
            "status": f"{status} ({due})" if due else status,
            "payload": preview(found.payload, 2000),
        }
    if as_json:
        print_json(fields)
        return
    table = Table("field", "value", show_header=False)
    for name, value in shown.items():
        table.add_row(name, cell(value))
    console.print(table)


def result(
    ctx: typer.Context,
    job_id: str,
    wait: Annotated[
        float | None,
        typer.Option(min=0, help="Seconds to wait for the job to finish (default: do not wait)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Print what a finished job's handler returned; a job that died prints its error and exits
    with status 1, as does a cancelled one."""

    async def look() -> bytes | None:
        async with existing_queue(ctx) as queue:
            [full_id] = await full_ids(queue, [job_id], finished=True)
            return await queue.result(full_id, timeout=timedelta(seconds=wait or 0))

    try:
        found = asyncio.run(look())
    except JobFailedError as exc:
        if as_json:
            print_json({"id": job_id, "outcome": "dead", "reason": exc.reason, "error": exc.error})
        else:
            errors.print(f"job {job_id} died ({exc.reason}):\n{exc.error}", highlight=False, markup=False)
        raise typer.Exit(1) from None
    except JobCancelledError:
        if as_json:
            print_json({"id": job_id, "outcome": "cancelled"})
        else:
            errors.print(f"job {job_id} was cancelled", highlight=False, markup=False)
        raise typer.Exit(1) from None
    except TimeoutError:
        fail(f"job {job_id} has not finished" + (f" within {wait:g} s" if wait else " (--wait S to wait)"))
    except (JQueueError, ValueError, OSError, ImportError) as exc:
        fail(str(exc))
    if as_json:
        text = None if found is None else found.decode(errors="replace")
        print_json({"id": job_id, "outcome": "acked", "result": text})
    elif found is not None:
        sys.stdout.buffer.write(found if found.endswith(b"\n") else found + b"\n")
    else:
        errors.print(f"job {job_id} was acked; its handler returned nothing", highlight=False, markup=False)


def dead_ls(
    ctx: typer.Context,
    entrypoint: EntrypointOption = None,
    limit: LimitOption = 50,
    as_json: JsonFlag = False,
) -> None:
    """List dead letters with their reason and last error."""

    async def look() -> list[Job]:
        async with existing_queue(ctx) as queue:
            return await queue.dead_letters(entrypoint, limit or None)

    jobs = run(look())
    if listed_briefly([job_json(job) for job in jobs], as_json, "no dead letters"):
        return
    short = short_ids([job.id for job in jobs])
    rows = []
    for job in jobs:
        error = headline(job.last_error or "")
        cells = (short[job.id], job.entrypoint, str(job.attempts), job.dead_reason or "", age(job.dead_at))
        rows.append((*cells, error))
    console.print(table_of(("id", "entrypoint", "attempts", "reason", "died", "error"), rows))


def history(
    ctx: typer.Context,
    entrypoint: EntrypointOption = None,
    outcome: Annotated[str | None, typer.Option(help="acked, dead or cancelled.")] = None,
    limit: LimitOption = 50,
    full: Annotated[bool, typer.Option("--full", help="Each error in full, with its traceback.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Show records of finished jobs, newest last: one line each, with the last line of its error
    (--full: the whole error below it)."""
    if outcome not in (None, "acked", "dead", "cancelled"):
        fail(f"unknown outcome {outcome!r}; one of acked, dead, cancelled")
    chosen = None if outcome is None else JobStatus(outcome)

    async def look() -> list[HistoryRecord]:
        async with existing_queue(ctx) as queue:
            return await queue.history(entrypoint, chosen, limit=limit or None)

    records = run(look())
    if listed_briefly([_history_json(r) for r in records], as_json, "no finished jobs"):
        return
    if full:
        for record in records:
            console.print(_history_table([record], header=False))
            if record.error:
                console.print(Padding(record.error, (0, 0, 1, 4)), highlight=False, markup=False)
    else:
        console.print(_history_table(records))


def _history_table(records: list[HistoryRecord], header: bool = True) -> Table:
    """Finished jobs one line each, the error's last line cut to what the terminal has left."""
    names = ("id", "entrypoint", "outcome", "tries", "wait s", "run s", "ended", "error")
    short = short_ids([r.job_id for r in records])
    rows = []
    for r in records:
        times = (_num(r.wait_seconds), _num(r.run_seconds))
        cells = (short[r.job_id], r.entrypoint, str(r.outcome), str(r.attempts), *times)
        rows.append((*cells, age(r.finished_at), r.error_line))
    return table_of(names, rows, box=None, show_header=header)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _history_json(record: HistoryRecord) -> dict[str, object]:
    """A finished job's fields as ``jqueue history --json`` shows them (its result aside)."""
    return {name: value for name, value in record.public().items() if name != "result"}
