"""Commands that add and steer jobs: enqueue, requeue, dead requeue, purge; and the
registration of every job command."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import Progress

from jqueue.adapters.cli.browse import dead_ls, history, ls, queues, result, show, stats
from jqueue.adapters.cli.common import (
    AnyQueue,
    EntrypointOption,
    JsonFlag,
    OlderOption,
    StatusChoice,
    broker_queue,
    console,
    direct_queue,
    fail,
    full_ids,
    job_json,
    on_queue,
    print_json,
    run,
    seconds,
)
from jqueue.adapters.cli.flow import limit, pause, resume, throttle
from jqueue.adapters.cli.workflows import workflow
from jqueue.core.broker import BrokerQueue
from jqueue.domain.errors import JQueueError
from jqueue.domain.models import Job, JobStatus, ParentFailure
from jqueue.domain.spec import SPEC_FIELDS, EnqueueOptions, JobSpec
from jqueue.domain.values import Bounds
from jqueue.domain.workflows import LEFT

LINES_PER_COMMIT = Bounds(ge=1)
"""The bounds of ``jqueue enqueue --stdin --batch``: jobs per commit."""


def enqueue(
    ctx: typer.Context,
    entrypoint: str,
    payload: Annotated[
        str | None, typer.Argument(help="The payload as text (none: an empty payload).")
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", help="Read the payload from a file.", exists=True, dir_okay=False, readable=True
        ),
    ] = None,
    stdin: Annotated[
        bool, typer.Option("--stdin", help="Enqueue one job per line of standard input.")
    ] = False,
    priority: Annotated[int, typer.Option(help="Lower runs first.")] = 0,
    delay: Annotated[float | None, typer.Option(help="Seconds before the job can be claimed.")] = None,
    not_before: Annotated[
        str | None,
        typer.Option(help="Not claimable before this ISO 8601 time (local time without an offset)."),
    ] = None,
    dedup_key: Annotated[
        str | None, typer.Option(help="Enqueue nothing if a job with this key exists.")
    ] = None,
    max_attempts: Annotated[
        int | None, typer.Option(help="Claims allowed before a failure makes the job dead.")
    ] = None,
    ttl: Annotated[float | None, typer.Option(help="Seconds after which the job dies unclaimed.")] = None,
    job_id: Annotated[
        str | None, typer.Option("--id", help="The job's id: enqueueing an id twice adds it once.")
    ] = None,
    after: Annotated[
        list[str] | None,
        typer.Option(help="A parent's id (repeat it for more): the job waits until each is acked."),
    ] = None,
    on_parent_failure: Annotated[
        ParentFailure | None,
        typer.Option(help="What a failed parent does to the job (default: cancel it)."),
    ] = None,
    traceparent: Annotated[str | None, typer.Option(help="A W3C trace context to run the job in.")] = None,
    tenant: Annotated[
        str | None, typer.Option(help="Whose job it is: claims serve the tenants in turn.")
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds one attempt may run before its worker stops it.")
    ] = None,
    batch: Annotated[int, typer.Option(help="Jobs per commit with --stdin.")] = 1000,
    atomic: Annotated[
        bool, typer.Option("--atomic", help="With --stdin: all lines in one commit, or none.")
    ] = False,
    allow_empty: Annotated[
        bool, typer.Option("--allow-empty", help="With --stdin: a blank line is a job with no payload.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Add a job (or, with --stdin, one per line, in batches with a progress bar); its payload
    is PAYLOAD, the contents of --file, or empty.

    With --stdin, blank lines are skipped (--allow-empty makes each an empty job); a line
    that cannot be a job (too large) stops the command, naming the line and how many jobs
    the batches before it committed; --atomic commits every line in one commit or none.
    """
    if sum([payload is not None, file is not None, stdin]) > 1:
        fail("give at most one of PAYLOAD, --file or --stdin")
    if stdin and (dedup_key, job_id) != (None, None):
        fail("--dedup-key and --id name one job; they do not go with --stdin")
    try:
        LINES_PER_COMMIT.check("--batch", batch)
    except ValueError as exc:
        fail(str(exc))
    options = EnqueueOptions(
        delay=seconds(delay),
        not_before=_time(not_before),
        dedup_key=dedup_key,
        max_attempts=max_attempts,
        ttl=seconds(ttl),
        id=job_id,
        after=tuple(after) if after else None,
        on_parent_failure=on_parent_failure,
        traceparent=traceparent,
        tenant=tenant,
        timeout=seconds(timeout),
    )
    try:
        JobSpec(entrypoint, b"", priority, **options)
    except ValueError as exc:
        fail(_FLAG_NAMES.sub(lambda name: "--" + name[0].replace("_", "-"), str(exc)))

    async def one() -> list[Job]:
        data = file.read_bytes() if file is not None else (payload or "").encode()
        async with direct_queue(ctx) as queue:
            return [await queue.enqueue(entrypoint, data, priority, **options)]

    def specs(lines: list[bytes]) -> list[JobSpec]:
        return [JobSpec(entrypoint, line, priority, **options) for line in lines]

    if stdin:
        jobs, skipped = run(_enqueue_lines(ctx, specs, batch, atomic, allow_empty, quiet=as_json))
    else:
        jobs, skipped = run(one()), 0
    if as_json:
        print_json([job_json(job) for job in jobs])
    elif stdin:
        blank = f" ({skipped} blank line{'s' if skipped != 1 else ''} skipped)" if skipped else ""
        console.print(f"enqueued {_jobs(len(jobs))} to {entrypoint!r}{blank}", highlight=False)
    else:
        console.print(jobs[0].id)


async def _enqueue_lines(
    ctx: typer.Context,
    specs: Callable[[list[bytes]], list[JobSpec]],
    batch: int,
    atomic: bool,
    allow_empty: bool,
    *,
    quiet: bool,
) -> tuple[list[Job], int]:
    """Enqueue the jobs ``specs`` makes of the lines of standard input, ``batch`` lines per
    commit (``atomic``: all in one); return them and the number of blank lines skipped.

    Blank lines are skipped unless ``allow_empty``; ``quiet`` hides the progress bar.
    """
    added: list[Job] = []
    skipped = 0

    def stop(where: str, problem: object) -> None:
        kept = "nothing was committed" if atomic else f"{_jobs(len(added))} committed before it"
        fail(f"{where}: {problem}; {kept}")

    async with broker_queue(ctx) as queue:
        limit = queue.max_payload_bytes if isinstance(queue, BrokerQueue) else None  # else: the service's
        with Progress(console=console, transient=True, disable=quiet) as progress:
            task = progress.add_task("enqueueing", total=None)
            lines: list[bytes] = []
            first = number = 1
            for number, line in enumerate(sys.stdin.buffer, start=1):
                payload = line.rstrip(b"\r\n")
                if not payload.strip() and not allow_empty:
                    skipped += 1
                    continue
                if limit is not None and len(payload) > limit:
                    over = f"a payload of {len(payload)} bytes is over the limit of {limit}"
                    stop(f"line {number}", over)
                lines.append(payload)
                if len(lines) == batch and not atomic:
                    try:
                        added += await queue.enqueue_many(specs(lines))
                    except JQueueError as exc:
                        stop(f"lines {first}-{number}", exc)
                    progress.update(task, advance=len(lines))
                    lines, first = [], number + 1
            if lines:
                try:
                    added += await queue.enqueue_many(specs(lines))
                except JQueueError as exc:
                    stop(f"lines {first}-{number}", exc)
    return added, skipped


_FLAG_NAMES = re.compile(r"\b(" + "|".join(f.name for f in SPEC_FIELDS[2:]) + r")\b")
"""The options of ``JobSpec`` in its messages, which the command names as its flags."""


def _time(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        time = datetime.fromisoformat(text)
    except ValueError:
        fail(f"--not-before wants an ISO 8601 time, as in 2026-01-31T09:00:00+01:00, not {text!r}")
    return time if time.tzinfo is not None else time.astimezone()


def requeue(
    ctx: typer.Context,
    job_ids: Annotated[list[str], typer.Argument(help="Jobs to make claimable now.")],
    as_json: JsonFlag = False,
) -> None:
    """Make jobs claimable now, whatever their state (dead ones get their attempts reset)."""

    async def act(queue: AnyQueue) -> int:
        return await queue.requeue(await full_ids(queue, job_ids))

    _report(on_queue(ctx, act), "requeued", as_json)


def cancel(
    ctx: typer.Context,
    job_ids: Annotated[list[str], typer.Argument(help="Jobs to cancel (ids, or unique starts of ids).")],
    workflow: Annotated[
        bool,
        typer.Option(
            "--workflow", help="Cancel each job's whole workflow (jqueue workflow ID), in one commit each."
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Cancel jobs: a waiting or dead one leaves the queue at once; a running one's worker is
    asked to stop it, which it does at its next heartbeat."""

    async def act(queue: AnyQueue) -> list[bool]:
        found = await full_ids(queue, job_ids, finished=workflow)
        if not workflow:
            return [await queue.cancel(job_id) for job_id in found]
        done: list[bool] = []
        for job_id in found:
            live = {job.id for job in await queue.workflow(job_id) if job.status not in LEFT}
            now = [job for job in await queue.cancel_workflow(job_id) if job.id in live]
            done += [job.status is JobStatus.CANCELLED for job in now if job.status is not JobStatus.ACKED]
        return done

    done = on_queue(ctx, act)
    cancelled, asked = done.count(True), done.count(False)
    if as_json:
        print_json({"cancelled": cancelled, "asked_to_stop": asked})
        return
    if cancelled or not asked:
        console.print(f"cancelled {_jobs(cancelled)}")
    if asked:
        console.print(f"asked the workers of {_jobs(asked)} to stop them (at their next heartbeat)")


def dead_requeue(
    ctx: typer.Context,
    job_ids: Annotated[list[str] | None, typer.Argument(help="Dead jobs to redrive.")] = None,
    everything: Annotated[bool, typer.Option("--all", help="Redrive every dead letter.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Redrive dead letters (their attempts reset)."""
    if bool(job_ids) == everything:
        fail("give job ids or --all")

    async def act(queue: AnyQueue) -> int:
        return await queue.requeue_dead(None if everything else await full_ids(queue, job_ids or []))

    _report(on_queue(ctx, act), "requeued", as_json)


def purge(
    ctx: typer.Context,
    status: Annotated[StatusChoice, typer.Option(help="Which jobs: one status, or any.")] = (
        StatusChoice.DEAD
    ),
    entrypoint: EntrypointOption = None,
    older_than: OlderOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Delete jobs by status, entrypoint and age (dead letters by default)."""
    chosen = None if status is StatusChoice.ANY else JobStatus(status.value)
    which = status.value + (f" of {entrypoint!r}" if entrypoint else "")
    which += f", enqueued over {older_than:g} s ago" if older_than is not None else ""
    if not yes:
        found = on_queue(ctx, lambda queue: queue.count(chosen, entrypoint, seconds(older_than)))
        if not found:
            _report(0, "purged", as_json, which)
            return
        if not typer.confirm(f"delete {_jobs(found)} ({which})?"):
            raise typer.Exit(1)

    purged = on_queue(ctx, lambda queue: queue.purge(chosen, entrypoint, seconds(older_than)))
    _report(purged, "purged", as_json, which)


def _jobs(count: int) -> str:
    return f"{count} job" if count == 1 else f"{count} jobs"


def _report(count: int, verb: str, as_json: bool, which: str = "") -> None:
    if as_json:
        print_json({verb: count})
    else:
        console.print(f"{verb} {_jobs(count)}" + (f" ({which})" if which else ""), highlight=False)


def register(app: typer.Typer) -> None:
    """Add these commands to ``app``."""
    for command in (
        queues,
        enqueue,
        stats,
        ls,
        show,
        result,
        cancel,
        workflow,
        requeue,
        purge,
        pause,
        resume,
        throttle,
        limit,
        history,
    ):
        app.command()(command)
    dead = typer.Typer(help="Dead letters: list and redrive them.", no_args_is_help=True)
    dead.command("ls")(dead_ls)
    dead.command("requeue")(dead_requeue)
    app.add_typer(dead, name="dead")
