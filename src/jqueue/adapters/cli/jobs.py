"""Commands that add, look at and steer jobs: enqueue, stats, ls, show, requeue, dead, purge,
pause, resume, throttle, history."""

from __future__ import annotations

import sys
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress
from rich.table import Table

from jqueue.adapters.cli.common import (
    age,
    broker_queue,
    console,
    direct_queue,
    existing_queue,
    fail,
    job_json,
    preview,
    print_json,
    run,
    seconds,
    until,
)
from jqueue.core.direct import DirectQueue
from jqueue.domain.errors import JQueueError
from jqueue.domain.models import Job, JobStatus, utc_now
from jqueue.domain.records import HistoryRecord
from jqueue.domain.spec import JobSpec
from jqueue.domain.stats import QueueStats

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]
StatusOption = Annotated[JobStatus | None, typer.Option("--status", help="Only jobs in this status.")]
ScopeArgument = Annotated[str | None, typer.Argument(help="The entrypoint (default: the whole queue).")]
EntrypointOption = Annotated[str | None, typer.Option("--entrypoint", "-e", help="Only this entrypoint.")]
OlderOption = Annotated[
    float | None, typer.Option("--older-than", help="Only jobs enqueued this many seconds ago.")
]
LimitOption = Annotated[int, typer.Option("--limit", help="At most this many (0: all).")]


class PurgeStatus(StrEnum):
    """The jobs ``purge`` deletes: those in one status, or any."""

    DEAD = "dead"
    QUEUED = "queued"
    IN_PROGRESS = "in_progress"
    STAGED = "staged"
    ANY = "any"


def _shared(a: str, b: str) -> int:
    """How many leading characters two ids share."""
    return next((n for n, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def short_ids(ids: list[str], least: int = 8) -> dict[str, str]:
    """Return for each id its shortest prefix (``least`` characters at least) that no other id of
    ``ids`` starts with: what tables show, and what ``show`` and ``requeue`` accept."""
    ordered = sorted(set(ids))
    shortest: dict[str, str] = {}
    for position, job_id in enumerate(ordered):
        neighbours = ordered[max(0, position - 1) : position] + ordered[position + 1 : position + 2]
        common = max((_shared(job_id, other) for other in neighbours), default=0)
        shortest[job_id] = job_id[: max(least, common + 1)]
    return shortest


def _status_and_due(job: Job) -> tuple[str, str]:
    """A queued job not due yet shows as scheduled, with when it is due (as ``stats`` counts it)."""
    if job.status is JobStatus.QUEUED and job.not_before is not None and job.not_before > utc_now():
        return "scheduled", f"in {until(job.not_before)}"
    return str(job.status), ""


def _jobs_table(jobs: list[Job]) -> Table:
    table = Table("id", "entrypoint", "status", "due", "priority", "attempts", "age", "payload", "error")
    table.columns[0].no_wrap = True
    short = short_ids([job.id for job in jobs])
    for job in jobs:
        row = (short[job.id], job.entrypoint, *_status_and_due(job), str(job.priority), str(job.attempts))
        table.add_row(*row, age(job.created_at), preview(job.payload), job.last_error or "")
    return table


async def _full_ids(queue: DirectQueue, given: list[str]) -> list[str]:
    """Return the ids with each unique prefix of a job's id replaced by that id (as git does)."""
    if all([await queue.find(job_id) is not None for job_id in given]):
        return given
    known = [job.id for job in await queue.jobs(limit=None)]
    full = []
    for job_id in given:
        matches = [candidate for candidate in known if candidate.startswith(job_id)]
        if len(matches) > 1 and job_id not in matches:
            fail(f"{job_id!r} is the start of {len(matches)} job ids; give more of it")
        full.append(matches[0] if len(matches) == 1 else job_id)
    return full


def enqueue(
    ctx: typer.Context,
    entrypoint: str,
    payload: Annotated[str | None, typer.Argument(help="The payload as text.")] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Read the payload from a file.")] = None,
    stdin: Annotated[
        bool, typer.Option("--stdin", help="Enqueue one job per line of standard input.")
    ] = False,
    priority: Annotated[int, typer.Option(help="Lower runs first.")] = 0,
    delay: Annotated[float | None, typer.Option(help="Seconds before the job can be claimed.")] = None,
    dedup_key: Annotated[
        str | None, typer.Option(help="Enqueue nothing if a job with this key exists.")
    ] = None,
    batch: Annotated[int, typer.Option(help="Jobs per commit with --stdin.")] = 1000,
    atomic: Annotated[
        bool, typer.Option("--atomic", help="With --stdin: all lines in one commit, or none.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Add a job (or, with --stdin, one per line, in batches with a progress bar).

    With --stdin, a line that cannot be a job (too large) stops the command, naming the
    line and how many jobs the batches before it committed; --atomic commits every line
    in one commit or none.
    """
    sources = [payload is not None, file is not None, stdin]
    if sum(sources) != 1:
        fail("give exactly one of PAYLOAD, --file or --stdin")
    if stdin and dedup_key is not None:
        fail("--dedup-key names one job; it does not go with --stdin")
    if batch < 1:
        fail("--batch must be at least 1")

    async def one() -> list[Job]:
        data = file.read_bytes() if file is not None else (payload or "").encode()
        async with direct_queue(ctx) as queue:
            job = await queue.enqueue(entrypoint, data, priority, delay=seconds(delay), dedup_key=dedup_key)
            return [job]

    async def many() -> list[Job]:
        added: list[Job] = []

        def stop(where: str, problem: object) -> None:
            kept = "nothing was committed" if atomic else f"{_jobs(len(added))} committed before it"
            fail(f"{where}: {problem}; {kept}")

        async with broker_queue(ctx) as queue:
            limit = queue.max_payload_bytes
            with Progress(console=console, transient=True, disable=as_json) as progress:
                task = progress.add_task("enqueueing", total=None)
                lines: list[bytes] = []
                first = 1
                for number, line in enumerate(sys.stdin.buffer, start=1):
                    payload = line.rstrip(b"\r\n")
                    if limit is not None and len(payload) > limit:
                        over = f"a payload of {len(payload)} bytes is over the limit of {limit}"
                        stop(f"line {number}", over)
                    lines.append(payload)
                    if len(lines) == batch and not atomic:
                        try:
                            added += await queue.enqueue_many(_specs(entrypoint, lines, priority, delay))
                        except JQueueError as exc:
                            stop(f"lines {first}-{number}", exc)
                        progress.update(task, advance=len(lines))
                        lines, first = [], number + 1
                if lines:
                    try:
                        added += await queue.enqueue_many(_specs(entrypoint, lines, priority, delay))
                    except JQueueError as exc:
                        stop(f"lines {first}-{first + len(lines) - 1}", exc)
        return added

    jobs = run(many() if stdin else one())
    if as_json:
        print_json([job_json(job) for job in jobs])
    elif stdin:
        console.print(f"enqueued {len(jobs)} jobs to {entrypoint!r}")
    else:
        console.print(jobs[0].id)


def _specs(entrypoint: str, payloads: list[bytes], priority: int, delay: float | None) -> list[JobSpec]:
    return [JobSpec(entrypoint, payload, priority, delay=seconds(delay)) for payload in payloads]


def stats(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Counts by entrypoint and status, the oldest waiting job, pauses and throttles."""

    async def look() -> QueueStats:
        async with existing_queue(ctx) as queue:
            return await queue.stats()

    result = run(look())
    if as_json:
        entrypoints = {name: vars(s) for name, s in result.entrypoints.items()}
        paused = {"claims": result.paused_claims, "enqueues": result.paused_enqueues}
        throttles = [
            {"entrypoint": k, "limit": v[0], "per_seconds": v[1]} for k, v in result.throttles.items()
        ]
        summary = {
            "version": result.version,
            "entrypoints": entrypoints,
            "paused": paused,
            "throttles": throttles,
        }
        print_json(summary | {"history_records": result.history_records})
        return
    table = Table("entrypoint", "queued", "scheduled", "in progress", "dead", "oldest waiting", title="jobs")
    for name, s in result.entrypoints.items():
        counts = (s.queued, s.scheduled, s.in_progress, s.dead)
        table.add_row(name, *map(str, counts), age(s.oldest_queued_at))
    console.print(table)

    def scopes(paused: list[str | None]) -> str:
        return ", ".join("(all)" if p is None else p for p in paused) or "none"

    console.print(
        f"claims paused: {scopes(result.paused_claims)}; enqueues paused: {scopes(result.paused_enqueues)}"
    )
    console.print(f"history records: {result.history_records}")
    for scope, (limit, per) in result.throttles.items():
        console.print(f"throttle {'(all)' if scope is None else scope}: {limit} claims per {per:g} s")


def ls(
    ctx: typer.Context,
    status: StatusOption = None,
    entrypoint: EntrypointOption = None,
    older_than: OlderOption = None,
    limit: LimitOption = 50,
    as_json: JsonFlag = False,
) -> None:
    """List jobs without claiming them, oldest first."""

    async def look() -> list[Job]:
        async with existing_queue(ctx) as queue:
            return await queue.jobs(status, entrypoint, seconds(older_than), limit or None)

    jobs = run(look())
    if as_json:
        print_json([job_json(job) for job in jobs])
    else:
        console.print(_jobs_table(jobs) if jobs else "no jobs")


def show(ctx: typer.Context, job_id: str, as_json: JsonFlag = False) -> None:
    """Show one job in full."""

    async def look() -> Job | None:
        async with existing_queue(ctx) as queue:
            [full_id] = await _full_ids(queue, [job_id])
            return await queue.find(full_id)

    job = run(look())
    if job is None:
        fail(f"job {job_id!r} is not in the queue")
    assert job is not None
    if as_json:
        print_json(job_json(job))
        return
    table = Table("field", "value", show_header=False)
    for name, value in job_json(job).items():
        shown = preview(job.payload, 2000) if name == "payload" else value
        table.add_row(name, "" if shown is None else str(shown))
    console.print(table)


def requeue(
    ctx: typer.Context,
    job_ids: Annotated[list[str], typer.Argument(help="Jobs to make claimable now.")],
    as_json: JsonFlag = False,
) -> None:
    """Make jobs claimable now, whatever their state (dead ones get their attempts reset)."""

    async def act() -> int:
        async with existing_queue(ctx) as queue:
            return await queue.requeue(await _full_ids(queue, job_ids))

    _report(run(act()), "requeued", as_json)


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
    if as_json:
        print_json([job_json(job) for job in jobs])
        return
    if not jobs:
        console.print("no dead letters")
        return
    table = Table("id", "entrypoint", "attempts", "reason", "died", "error")
    table.columns[0].no_wrap = True
    short = short_ids([job.id for job in jobs])
    for job in jobs:
        died = age(job.dead_at)
        table.add_row(short[job.id], job.entrypoint, str(job.attempts), job.dead_reason, died, job.last_error)
    console.print(table)


def dead_requeue(
    ctx: typer.Context,
    job_ids: Annotated[list[str] | None, typer.Argument(help="Dead jobs to redrive.")] = None,
    everything: Annotated[bool, typer.Option("--all", help="Redrive every dead letter.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Redrive dead letters (their attempts reset)."""
    if bool(job_ids) == everything:
        fail("give job ids or --all")

    async def act() -> int:
        async with existing_queue(ctx) as queue:
            return await queue.requeue_dead(None if everything else await _full_ids(queue, job_ids or []))

    _report(run(act()), "requeued", as_json)


def purge(
    ctx: typer.Context,
    status: Annotated[PurgeStatus, typer.Option(help="Which jobs: one status, or any.")] = PurgeStatus.DEAD,
    entrypoint: EntrypointOption = None,
    older_than: OlderOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Delete jobs by status, entrypoint and age (dead letters by default)."""
    chosen = None if status is PurgeStatus.ANY else JobStatus(status.value)
    if not yes:

        async def count() -> int:
            async with existing_queue(ctx) as queue:
                return await queue.count(chosen, entrypoint, seconds(older_than))

        found = run(count())
        scope = f" of {entrypoint!r}" if entrypoint else ""
        if not found:
            _report(0, "purged", as_json)
            return
        if not typer.confirm(f"delete {_jobs(found)} ({status.value}{scope})?"):
            raise typer.Exit(1)

    async def act() -> int:
        async with existing_queue(ctx) as queue:
            return await queue.purge(chosen, entrypoint, seconds(older_than))

    _report(run(act()), "purged", as_json)


def pause(
    ctx: typer.Context,
    entrypoint: ScopeArgument = None,
    enqueues: Annotated[bool, typer.Option("--enqueues", help="Refuse new jobs too.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Stop every worker from claiming jobs of an entrypoint or of the whole queue."""

    async def act() -> None:
        async with direct_queue(ctx) as queue:
            await queue.pause(entrypoint, enqueues=enqueues)

    run(act())
    _done({"paused": entrypoint, "enqueues": enqueues}, f"paused {entrypoint or 'the whole queue'}", as_json)


def resume(
    ctx: typer.Context,
    entrypoint: ScopeArgument = None,
    as_json: JsonFlag = False,
) -> None:
    """Undo a pause."""

    async def act() -> None:
        async with direct_queue(ctx) as queue:
            await queue.resume(entrypoint)

    run(act())
    _done({"resumed": entrypoint}, f"resumed {entrypoint or 'the whole queue'}", as_json)


def throttle(
    ctx: typer.Context,
    limit: Annotated[int | None, typer.Argument(help="Claims allowed per window (omit with --off).")] = None,
    per: Annotated[float, typer.Option(help="Window length in seconds.")] = 1.0,
    entrypoint: EntrypointOption = None,
    off: Annotated[bool, typer.Option("--off", help="Lift the throttle.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Limit claims per time window, for all workers."""
    if (limit is None) != off:
        fail("give LIMIT or --off")

    async def act() -> None:
        async with direct_queue(ctx) as queue:
            await queue.throttle(limit, timedelta(seconds=per), entrypoint)

    run(act())
    scope = entrypoint or "the whole queue"
    message = f"lifted the throttle of {scope}" if off else f"{scope}: {limit} claims per {per:g} s"
    if limit == 0:
        message += " (no job will be claimed until the throttle is lifted, as with a pause)"
    _done({"entrypoint": entrypoint, "limit": limit, "per_seconds": per}, message, as_json)


def history(
    ctx: typer.Context,
    entrypoint: EntrypointOption = None,
    outcome: Annotated[str | None, typer.Option(help="acked or dead.")] = None,
    limit: LimitOption = 50,
    as_json: JsonFlag = False,
) -> None:
    """Show records of finished jobs, newest last."""
    if outcome not in (None, "acked", "dead"):
        fail(f"unknown outcome {outcome!r}; one of acked, dead")
    chosen = None if outcome is None else JobStatus(outcome)

    async def look() -> list[HistoryRecord]:
        async with existing_queue(ctx) as queue:
            return await queue.history(entrypoint, chosen, limit=limit or None)

    records = run(look())
    if as_json:
        print_json([_history_json(r) for r in records])
        return
    if not records:
        console.print("no finished jobs")
        return
    table = Table("id", "entrypoint", "outcome", "attempts", "wait s", "run s", "finished", "error")
    table.columns[0].no_wrap = True
    short = short_ids([r.job_id for r in records])
    for r in records:
        wait = (r.claims[0] - r.created) / 1e6 if r.claims else None
        run_time = (r.finished - r.claims[-1]) / 1e6 if r.claims else None
        cells = (short[r.job_id], r.entrypoint, str(r.outcome), str(r.attempts), _num(wait), _num(run_time))
        table.add_row(*cells, age(r.finished_at), r.error or "")
    console.print(table)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _history_json(record: HistoryRecord) -> dict[str, object]:
    return {
        "job_id": record.job_id,
        "entrypoint": record.entrypoint,
        "outcome": str(record.outcome),
        "attempts": record.attempts,
        "created_at": record.created_at,
        "claimed_at": list(record.claimed_at),
        "finished_at": record.finished_at,
        "error": record.error,
        "reason": record.reason,
        "dedup_key": record.dedup_key,
    }


def _done(data: dict[str, object], message: str, as_json: bool) -> None:
    if as_json:
        print_json(data)
    else:
        console.print(message)


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


def _report(count: int, verb: str, as_json: bool) -> None:
    if as_json:
        print_json({verb: count})
    else:
        console.print(f"{verb} {_jobs(count)}")


def register(app: typer.Typer) -> None:
    """Add these commands to ``app``."""
    for command in (enqueue, stats, ls, show, requeue, purge, pause, resume, throttle, history):
        app.command()(command)
    dead = typer.Typer(help="Dead letters: list and redrive them.", no_args_is_help=True)
    dead.command("ls")(dead_ls)
    dead.command("requeue")(dead_requeue)
    app.add_typer(dead, name="dead")
