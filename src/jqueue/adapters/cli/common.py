"""What every command shares: the queue from ``--storage``, one-line errors, JSON output."""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import logging
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from jqueue.adapters.event_loop import run_event_loop
from jqueue.adapters.service.client.caller import ServiceCaller
from jqueue.adapters.service.client.remote_queue import RemoteQueue
from jqueue.adapters.service.wire.bodies import SPAN_ATTRIBUTES, TOKEN_VARIABLE
from jqueue.adapters.service.wire.error_codes import NO_BROKER, QUEUE_NOT_FOUND, UNAUTHORIZED, UNREACHABLE
from jqueue.adapters.service.wire.root import shard_location
from jqueue.adapters.storage.filesystem import LocalFileSystemStorage
from jqueue.adapters.storage.url import storage_from_url
from jqueue.adapters.web.queue_names import shard_name
from jqueue.core.broker import BrokerQueue
from jqueue.core.direct import DirectQueue
from jqueue.core.sharded import ShardedQueue
from jqueue.domain.errors import InvalidURLError, JQueueError, ServiceError
from jqueue.domain.figures import readable_span
from jqueue.domain.models import Job, JobStatus
from jqueue.domain.times import utc_now
from jqueue.ports.storage import ObjectStoragePort

T = TypeVar("T")
console = Console(markup=False)  # user text (ids, entrypoints, errors) is never markup
errors = Console(stderr=True, markup=False)
STORAGE_HELP = "Storage URL of the queue (file://, s3://, gs://); or set JQUEUE_STORAGE."


SERVER_HELP = (
    "A running jqueue serve (http://HOST:PORT, or the storage root it serves) to call instead of"
    " the storage; or set JQUEUE_SERVER. The token comes from JQUEUE_TOKEN."
)
QUEUE_HELP = "With --server: the queue's name under the service's root; or set JQUEUE_QUEUE."


@dataclass
class Options:
    """The global options, kept in typer's context: the queue's storage, or a service and the
    name of a queue it serves."""

    storage: str | None
    server: str | None = None
    queue: str | None = None


def storage_url(ctx: typer.Context, *, storage_only: bool = False) -> str:
    """Return the queue's storage URL, or stop with an error if none was given (naming
    ``--server`` as the other way unless the command reads storage only)."""
    options: Options = ctx.obj
    if not options.storage:
        if options.server or storage_only:
            fail(f"jqueue {ctx.command.name} reads the queue's storage: pass --storage URL (not --server)")
        fail("no queue given: pass --storage URL (or --server URL --queue NAME), or set JQUEUE_STORAGE")
    assert options.storage is not None
    return options.storage


def _served(ctx: typer.Context) -> RemoteQueue | None:
    """The queue of ``--server`` and ``--queue``, if the command is to call a service (not opened)."""
    options: Options = ctx.obj
    if options.server is None:
        return None
    if options.storage is not None:
        fail("give --storage or --server, not both (check JQUEUE_STORAGE and JQUEUE_SERVER)")
    if not options.queue:
        fail(
            "--server needs the queue's name: pass --queue NAME or set JQUEUE_QUEUE"
            " (jqueue queues lists them)"
        )
    assert options.queue is not None
    try:
        return remote_queue(options.server, options.queue)
    except ValueError as exc:
        fail(f"--queue: {exc}")
        raise


def service(ctx: typer.Context) -> str:
    """The ``--server`` of a command about a service's root; stop with an error if none was given."""
    options: Options = ctx.obj
    if options.server is None:
        fail(f"jqueue {ctx.command.name} asks a running jqueue serve: pass --server URL or set JQUEUE_SERVER")
    assert options.server is not None
    return options.server


SERVER_WAIT = timedelta(seconds=10)
"""How long a command looks for a broker that takes its call (one failover takes about 3 s)."""


def remote_queue(server: str, name: str) -> RemoteQueue:
    """Queue ``name`` of ``server`` (not opened), called with the token of ``JQUEUE_TOKEN``."""
    return RemoteQueue(server, name, token=os.environ.get(TOKEN_VARIABLE), failover_timeout=SERVER_WAIT)


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """`` (did you mean NAME?)`` for the name of ``names`` nearest ``name`` (difflib), if one is
    near; else nothing."""
    near = difflib.get_close_matches(name, [other for other in names if other != name], n=1)
    return f" (did you mean {near[0]}?)" if near else ""


def queues_beside(storage: ObjectStoragePort) -> list[str] | None:
    """The file names of the queues in the directory of a file queue's ``storage`` (files with its
    suffix, its own left out); None for a storage whose neighbours cannot be listed."""
    if not isinstance(storage, LocalFileSystemStorage):
        return None
    folder, own = storage.path.parent, storage.path
    if not folder.is_dir():
        return []
    return sorted(
        path.name
        for path in folder.iterdir()
        if path.suffix == own.suffix
        and path != own
        and path.is_file()
        and not path.name.startswith(("_", "."))
    )


async def absent_queue_note(queue: object) -> str | None:
    """What to say of a queue a worker waits on that does not exist (nothing was ever enqueued
    there): which queues exist next to it, and the nearest; None for one that exists (or one
    of another kind)."""
    others: list[str] | None
    if isinstance(queue, RemoteQueue):
        others = await queue.queue_names()
        where, name = queue.location, queue.queue
    elif isinstance(queue, DirectQueue | BrokerQueue):
        if (await queue.storage.read())[1] is not None:
            return None
        others = queues_beside(queue.storage)
        where = str(getattr(queue.storage, "path", None) or getattr(queue.storage, "url", "its storage"))
        name = where.rsplit("/", 1)[-1]
    else:
        return None
    if others is not None and name in others:
        return None
    note = f"no queue at {where} yet: the worker waits for its first job"
    if others is None:
        return f"{note} (is the location right?)"
    beside = f"the queues next to it: {', '.join(others)}" if others else "there is no queue next to it"
    return f"{note}; {beside}{did_you_mean(name, others)}"


@contextlib.asynccontextmanager
async def serving(queue: RemoteQueue) -> AsyncIterator[RemoteQueue]:
    """Call ``queue`` for a command: what a user can mend (no broker, no token, no such queue)
    is one error line; a call that created the queue (an enqueue to a new name) says so on
    standard error, with the nearest name the service had. A command that logs nothing (all
    but worker and exec) still says at once, in one line, that no service answered and that
    it keeps looking (``ServiceCaller`` tells it every few seconds); its error line says how
    it ended."""
    if not logging.getLogger().handlers:
        said = logging.getLogger(ServiceCaller.__module__)
        if not said.handlers:
            notice = logging.StreamHandler(sys.stderr)
            notice.setFormatter(logging.Formatter("%(message)s"))
            said.addHandler(notice)
            said.setLevel(logging.WARNING)
            said.propagate = False
    async with queue:
        try:
            yield queue
            if queue.created_queue:
                hint = did_you_mean(queue.queue, await queue.queue_names())
                errors.print(f"created {queue.location}: it did not exist{hint}", highlight=False)
        except ServiceError as exc:
            if exc.code in (UNREACHABLE.code, NO_BROKER.code):
                fail(f"no jqueue serve took the call within {SERVER_WAIT.seconds} s: {exc}")
            if exc.code == UNAUTHORIZED.code:
                given = "was refused" if os.environ.get(TOKEN_VARIABLE) else "is not set"
                fail(f"{queue.location} needs its token: {TOKEN_VARIABLE} {given}")
            if exc.code != QUEUE_NOT_FOUND.code:
                raise
            fail(
                f"{queue.location} does not exist: nothing was ever enqueued there (jqueue queues lists them)"
            )


def shared_storage(ctx: typer.Context) -> ObjectStoragePort:
    """The storage of a queue that several commands (processes) share: not memory://. A plain
    path (no scheme) is a file."""
    url = storage_url(ctx)
    if url.lower().startswith("memory:"):
        fail(
            "a memory:// queue lives in one process and each command is a new one: use file://, s3:// or gs://"
        )
    try:
        storage = storage_from_url(url)
    except InvalidURLError as exc:
        fail(str(exc))
        raise
    if isinstance(storage, LocalFileSystemStorage) and storage.path.is_dir():
        fail(
            f"{url} is a directory: a queue is one file in it, e.g. {storage.path / 'NAME.json'}"
            f" (jqueue serve --storage {url} serves every queue in it)"
        )
    return storage


def fail(message: str) -> None:
    """Print one error line and exit with status 1."""
    errors.print(Text.assemble(("error:", "red"), f" {message}"), highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def run(coroutine: Coroutine[Any, Any, T], *, handlers: bool = False) -> T:
    """Run a command's coroutine (``handlers``: a worker's, on ``run_event_loop``'s loop); a
    user's mistake or an unreachable storage is one error line."""
    try:
        return run_event_loop(coroutine) if handlers else asyncio.run(coroutine)
    except (JQueueError, ValueError, OSError, ImportError) as exc:  # ImportError: a missing extra
        fail(str(exc) or type(exc).__name__)
    raise AssertionError("unreachable")


AnyQueue = DirectQueue | RemoteQueue | ShardedQueue
"""The queue of a command that commits a few calls: on its storage, or through a service (a
queue of several shards: all of them)."""
ManyCallsQueue = BrokerQueue | RemoteQueue | ShardedQueue
"""The queue of a command that makes many concurrent calls."""
Local = TypeVar("Local", DirectQueue, BrokerQueue)


@contextlib.asynccontextmanager
async def _opened(ctx: typer.Context, kind: type[Local]) -> AsyncIterator[Local | RemoteQueue | ShardedQueue]:
    """The queue of ``--server`` and ``--queue`` if given, else a ``kind`` on ``--storage``; a
    queue made of several shards is opened whole (``ShardedQueue``)."""
    served = _served(ctx)
    if served is not None:
        async with serving(served) as remote:
            sharded = shard_name(remote.queue, 1) in await remote.queue_names()
            shards = await remote.shards() if sharded else 1  # asked only of a queue that exists
            if shards <= 1:
                yield remote
                return
        server, name = service(ctx), served.queue
        async with ShardedQueue(lambda k: remote_queue(server, shard_name(name, k)), shards) as whole:
            yield whole
        return
    async with kind(shared_storage(ctx)) as queue:
        shards = await queue.shards()
        if shards <= 1:
            yield queue
            return
    url = storage_url(ctx)
    async with ShardedQueue(lambda k: kind(storage_from_url(shard_location(url, k))), shards) as whole:
        yield whole


def direct_queue(ctx: typer.Context) -> contextlib.AbstractAsyncContextManager[AnyQueue]:
    """Open the queue for a command that commits a few calls."""
    return _opened(ctx, DirectQueue)


def broker_queue(ctx: typer.Context) -> contextlib.AbstractAsyncContextManager[ManyCallsQueue]:
    """Open the queue for a command that makes many concurrent calls."""
    return _opened(ctx, BrokerQueue)


@contextlib.asynccontextmanager
async def existing_queue(ctx: typer.Context) -> AsyncIterator[AnyQueue]:
    """Open the queue for a command that only makes sense on a queue that exists (reading, redriving,
    purging): one that does not is an error, and nothing is created."""
    async with direct_queue(ctx) as queue:
        if isinstance(queue, DirectQueue) and (await queue.storage.read())[1] is None:
            fail(f"no queue at {storage_url(ctx)}: nothing was ever enqueued there (is the path right?)")
        yield queue


def on_queue(ctx: typer.Context, call: Callable[[AnyQueue], Awaitable[T]], *, create: bool = False) -> T:
    """Run ``call`` on the command's queue: one that exists, or with ``create`` (a control set
    before any job) one that may not yet."""

    async def act() -> T:
        async with direct_queue(ctx) if create else existing_queue(ctx) as queue:
            return await call(queue)

    return run(act())


def seconds(value: float | None) -> timedelta | None:
    """Return a number of seconds as a timedelta (None stays None)."""
    return None if value is None else timedelta(seconds=value)


def print_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (datetimes in ISO 8601)."""
    sys.stdout.write(json.dumps(data, default=_json_default, indent=2) + "\n")


def listed_briefly(rows: list[Any], as_json: bool, nothing: str) -> bool:
    """Print a listing's ``rows`` as JSON (with ``as_json``), or ``nothing`` when it has none;
    return whether that was all, so that the caller prints its table only when not."""
    if as_json:
        print_json(rows)
    elif not rows:
        console.print(nothing)
    return as_json or not rows


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def iso(moment: datetime) -> str:
    """A time as the JSON of a job has it: ISO 8601, ``Z`` for UTC."""
    return moment.isoformat().replace("+00:00", "Z")


def cell(value: object) -> str:
    """A value of a job or a record as a table shows it: times as in JSON, lists comma-separated."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, list | tuple):
        return ", ".join(map(cell, value))
    return str(value)


def job_json(job: Job) -> dict[str, Any]:
    """Return a job as JSON data: payload in base64, and a span as ``<name>_seconds`` (as over
    HTTP, ``SPAN_ATTRIBUTES``)."""
    data = job.model_dump(mode="json")
    for name in SPAN_ATTRIBUTES:
        span = getattr(job, name)
        del data[name]
        data[f"{name}_seconds"] = None if span is None else span.total_seconds()
    return data


def preview(payload: bytes, width: int = 40) -> str:
    """Return the start of a payload as text on one line (or its size, if it is not text)."""
    try:
        text = " ".join(payload.decode().split())
    except UnicodeDecodeError:
        return f"<{len(payload)} bytes>"
    return text if len(text) <= width else text[: width - 1] + "…"


WHOLE_COLUMNS = frozenset({"id", "status", "due", "age", "died", "oldest queued", "ended", "outcome"})
"""Columns never cut or wrapped: ids, states and durations read wrong in part or on two lines."""
NUMBER_COLUMNS = frozenset(
    ("priority", "attempts", "tries", "queued", "scheduled", "in progress", "dead", "waiting", "wait s")
) | {"run s"}
"""Columns of counts, right-aligned (and, like ``WHOLE_COLUMNS``, never cut)."""
SPARE_COLUMNS = ("payload", "after", "reason", "due", "error")
"""Columns left out when every row has them empty, and (in this order, ``error`` last) when the
terminal is too narrow for them: ``show`` and ``--json`` have every value."""
_BETWEEN = {True: 3, False: 2}
"""The characters between two columns, with and without a box (tables have no edges)."""


def table_of(headers: Sequence[str], rows: Sequence[Sequence[str]], **options: Any) -> Table:
    """Return a rich ``Table`` of ``rows`` that fits the console (``options`` as ``Table`` takes
    them): no header is cut, a row takes one line, ``WHOLE_COLUMNS`` and ``NUMBER_COLUMNS`` show
    whole, the other columns share what is left, cut with "…", and ``SPARE_COLUMNS`` empty in
    every row, or that the terminal has no room for, are left out."""
    kept = [n for n, name in enumerate(headers) if name not in SPARE_COLUMNS or any(row[n] for row in rows)]
    spare = [n for header in SPARE_COLUMNS for n in kept if headers[n] == header]
    widths = {n: max([len(headers[n]), *(len(row[n]) for row in rows)]) for n in kept}
    between = _BETWEEN[options.get("box", True) is not None]
    while True:
        fixed = [n for n in kept if headers[n] in WHOLE_COLUMNS | NUMBER_COLUMNS]
        room = console.width - between * (len(kept) - 1) - sum(widths[n] for n in fixed)
        flexible = [n for n in kept if n not in fixed]
        if room >= sum(len(headers[n]) for n in flexible) or not spare:
            break
        kept.remove(spare.pop(0))
    cut = _shares(room, {n: widths[n] for n in flexible}, {n: len(headers[n]) for n in flexible})
    table = Table(*(headers[n] for n in kept), show_edge=False, pad_edge=False, **options)
    for column, n in zip(table.columns, kept, strict=True):
        column.no_wrap, column.min_width = True, len(headers[n])
        if headers[n] in NUMBER_COLUMNS:
            column.justify = "right"
    for row in rows:
        table.add_row(*(_cut(row[n], cut.get(n)) for n in kept))
    return table


def _shares(room: int, wanted: dict[int, int], least: dict[int, int]) -> dict[int, int]:
    """Split ``room`` between columns that want ``wanted`` characters: each gets what it wants,
    or, where the room is short, at least its ``least`` and an equal share of the rest."""
    shares, left = dict(least), max(0, room - sum(least.values()))
    hungry = sorted(wanted, key=lambda n: wanted[n] - least[n])
    for place, n in enumerate(hungry):
        more = min(wanted[n] - least[n], left // (len(hungry) - place))
        shares[n] += more
        left -= more
    return shares


def _cut(text: str, width: int | None) -> Text:
    line = " ".join(text.split()) if width is not None else text
    if width is not None and len(line) > width:
        line = line[: max(1, width - 1)] + "…"
    return Text(line)


def age(moment: datetime | None) -> str:
    """Return how long ago ``moment`` was, as people read it (``readable_span``)."""
    return "-" if moment is None else readable_span(max(0.0, (utc_now() - moment).total_seconds()))


def until(moment: datetime) -> str:
    """Return how long until ``moment``, as people read it (``readable_span``)."""
    return readable_span(max(0.0, (moment - utc_now()).total_seconds()))


JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


class StatusChoice(StrEnum):
    """A job status as the commands take it: a status a job in the queue can have, or any (finished
    jobs are in the history: ``jqueue history``)."""

    QUEUED = JobStatus.QUEUED.value
    IN_PROGRESS = JobStatus.IN_PROGRESS.value
    DEAD = JobStatus.DEAD.value
    STAGED = JobStatus.STAGED.value
    ANY = "any"


EntrypointOption = Annotated[str | None, typer.Option("--entrypoint", "-e", help="Only this entrypoint.")]

OlderOption = Annotated[
    float | None, typer.Option("--older-than", help="Only jobs enqueued at least this many seconds ago.")
]

LimitOption = Annotated[int, typer.Option("--limit", help="At most this many (0: all).")]


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


async def full_ids(queue: AnyQueue, given: list[str], *, finished: bool = False) -> list[str]:
    """Return the ids with each unique prefix of a job's id replaced by that id (as git does):
    of a job in the queue, and with ``finished`` of one in the history too."""
    if all([await queue.find(job_id) is not None for job_id in given]):
        return given
    known = [job.id for job in await queue.jobs(limit=None)]
    if finished:  # a dead job is in both
        known = list(dict.fromkeys([*known, *(record.job_id for record in await queue.history())]))
    full = []
    for job_id in given:
        matches = [candidate for candidate in known if candidate.startswith(job_id)]
        if len(matches) > 1 and job_id not in matches:
            fail(f"{job_id!r} is the start of {len(matches)} job ids; give more of it")
        full.append(matches[0] if len(matches) == 1 else job_id)
    return full
