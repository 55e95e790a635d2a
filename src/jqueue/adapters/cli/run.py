"""Commands that run jobs or measure: worker, bench, report (exec is in ``execute``)."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import json
import logging
import os
import sys
from dataclasses import replace
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from jqueue.adapters.cli.common import (
    absent_queue_note,
    broker_queue,
    console,
    errors,
    existing_queue,
    fail,
    print_json,
    run,
    storage_url,
)
from jqueue.adapters.service.client.remote_queue import RemoteQueue
from jqueue.adapters.storage.url import is_url
from jqueue.bench.settings import QUEUES, SCENARIOS, name_list
from jqueue.core.queue import JobQueue
from jqueue.core.runtime.outcomes import WorkerStats
from jqueue.core.runtime.worker import DEFAULT_BACKOFF, DEFAULT_MAX_ATTEMPTS, Worker
from jqueue.domain.errors import JQueueError
from jqueue.domain.policy import Backoff
from jqueue.domain.spec import POSITIVE_SPAN

BurstFlag = Annotated[bool, typer.Option("--burst", help="Stop when nothing is left to claim.")]
MaxAttemptsOption = Annotated[
    int | None,
    typer.Option(min=1, help=f"Attempts before a failing job is dead ({DEFAULT_MAX_ATTEMPTS} by default)."),
]
RetryDelayOption = Annotated[
    float | None,
    typer.Option(min=0, help="Seconds before the first retry (1 by default), doubling; 0: retry at once."),
]
ConcurrencyOption = Annotated[int, typer.Option(help="Jobs run at once.")]


class LogFormat(StrEnum):
    """How the job log on standard error looks."""

    TEXT = "text"
    JSON = "json"


class LogLevel(StrEnum):
    """The least severe log records shown."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


LogFormatOption = Annotated[LogFormat, typer.Option("--log-format", help="Log lines as text or JSON.")]
LogLevelOption = Annotated[LogLevel, typer.Option("--log-level", help="The least severe records logged.")]
_JOB_FIELDS = ("job_id", "entrypoint", "outcome", "attempts", "error", "wait_s", "run_s")


class JsonLines(logging.Formatter):
    """One JSON object per log record, with the worker's job fields when it has them."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one line of JSON."""
        data: dict[str, object] = {
            "time": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        data |= {name: getattr(record, name) for name in _JOB_FIELDS if hasattr(record, name)}
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def log_jobs(form: LogFormat = LogFormat.TEXT, level: LogLevel = LogLevel.INFO) -> None:
    handler = logging.StreamHandler(sys.stderr)
    text = logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    handler.setFormatter(JsonLines() if form is LogFormat.JSON else text)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.value.upper())


async def _why_idle(chosen: Worker) -> str:
    """Say why a worker that ran until idle claimed nothing."""
    names = list(chosen.handlers)
    reasons: list[str] = []
    waiting = scheduled = 0
    for queue in chosen.queues:
        if not isinstance(queue, JobQueue | RemoteQueue):  # a queue of another kind: nothing to say
            continue
        stats = await queue.stats()
        mine = [stats.entrypoints[name] for name in names if name in stats.entrypoints]
        waiting += sum(s.queued for s in mine)
        scheduled += sum(s.scheduled for s in mine)
        paused = [n for n in names if None in stats.paused_claims or n in stats.paused_claims]
        throttled = [n for n in names if None in stats.throttles or n in stats.throttles]
        reasons += [f"claims of {', '.join(paused)} are paused"] if paused else []
        reasons += [f"{', '.join(throttled)} throttled"] if throttled and not paused else []
    if scheduled:
        reasons.append(f"{scheduled} job{'s' if scheduled != 1 else ''} not due yet")
    if not waiting and not scheduled:
        reasons.append(f"no job of {', '.join(names)} is queued")
    return "; ".join(reasons)


def print_summary(stats: WorkerStats, as_json: bool) -> None:
    counts = {str(outcome): count for outcome, count in stats.outcomes.items()}
    if as_json:
        print_json(
            {"claimed": stats.claimed, **counts, "timed_out": stats.timed_out, "seconds": stats.seconds}
        )
    else:
        done = ", ".join(f"{count} {name}" for name, count in counts.items() if count)
        jobs = "job" if stats.claimed == 1 else "jobs"
        console.print(f"claimed {stats.claimed} {jobs} in {stats.seconds:.1f} s: {done or 'nothing'}")


def _load(target: str) -> Any:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        fail(f"{target!r} is not module:attribute")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        fail(f"cannot import {module_name!r}: {exc}")
    except SyntaxError as exc:
        fail(f"{exc.filename}:{exc.lineno}: {exc.msg}")
    try:
        return getattr(module, attribute)
    except AttributeError:
        fail(f"module {module_name!r} has no attribute {attribute!r}")


def backoff_of(retry_delay: float) -> Backoff | None:
    """The back-off that waits ``retry_delay`` seconds before the first retry (0: none)."""
    if retry_delay == 0:
        return None
    initial = timedelta(seconds=retry_delay)
    return Backoff(initial=initial, maximum=max(initial, DEFAULT_BACKOFF.maximum))


def _configure(
    chosen: Worker,
    concurrency: int | None,
    entrypoints: list[str] | None,
    timeout: float | None,
    max_attempts: int | None,
    retry_delay: float | None,
) -> None:
    """Apply the command line's options to a worker from the user's module."""
    if entrypoints:
        unknown = sorted(set(entrypoints) - set(chosen.handlers))
        if unknown:
            fail(f"the worker has no handler for {', '.join(unknown)}; it has {', '.join(chosen.handlers)}")
        chosen.handlers = {name: chosen.handlers[name] for name in entrypoints}
    if concurrency is not None:
        chosen.concurrency = concurrency
    if timeout is not None:
        limit = timedelta(seconds=timeout)
        try:
            POSITIVE_SPAN.check("--timeout", limit)
        except ValueError as exc:
            fail(str(exc))
        chosen.timeout = limit
        chosen.handlers = {
            name: replace(spec, timeout=spec.timeout or limit) for name, spec in chosen.handlers.items()
        }
    if max_attempts is not None:
        chosen.max_attempts = max_attempts
    if retry_delay is not None:
        chosen.backoff = backoff_of(retry_delay)


def worker(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(help="module:attribute: a Worker, or a function given the queue.")],
    burst: BurstFlag = False,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Jobs run at once.")] = None,
    entrypoints: Annotated[
        list[str] | None,
        typer.Option("--entrypoint", "-e", help="Run only the handlers of this entrypoint (repeatable)."),
    ] = None,
    timeout: Annotated[
        float | None, typer.Option(min=0, help="Seconds a job may run, for handlers without a limit.")
    ] = None,
    max_attempts: MaxAttemptsOption = None,
    retry_delay: RetryDelayOption = None,
    log_format: LogFormatOption = LogFormat.TEXT,
    log_level: LogLevelOption = LogLevel.INFO,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=65535,
            help="Serve the worker's metrics (job run times by entrypoint and outcome) at"
            " http://127.0.0.1:PORT/metrics (needs the serve extra).",
        ),
    ] = None,
) -> None:
    """Run a Worker defined in your module until stopped (SIGTERM/SIGINT), or with --burst until idle.

    The attribute is a Worker (its queues are opened here), or a function that takes
    the queue opened from --storage and returns a Worker. The options replace the
    Worker's own settings (--timeout only for handlers without a limit of their own);
    a job's own attempt limit and the queue's policy still come first. Each job's
    outcome is logged on standard error.
    """
    found = _load(target)

    async def go() -> WorkerStats:
        log_jobs(log_format, log_level)
        async with contextlib.AsyncExitStack() as stack:
            if isinstance(found, Worker):
                chosen = found
                for queue in chosen.queues:
                    await stack.enter_async_context(queue)  # type: ignore[arg-type]
            elif callable(found):
                queue = await stack.enter_async_context(broker_queue(ctx))
                made = found(queue)
                chosen = await made if inspect.isawaitable(made) else made
                if not isinstance(chosen, Worker):
                    fail(f"{target} returned {type(chosen).__name__}, not a Worker")
            else:
                fail(f"{target} is a {type(found).__name__}, not a Worker or a function")
            _configure(chosen, concurrency, entrypoints, timeout, max_attempts, retry_delay)
            await say_absent(chosen)
            if metrics_port is not None:
                from jqueue.adapters.worker_metrics import WorkerMetrics  # here: it needs the serve extra

                metrics = WorkerMetrics(chosen)
                metrics.serve(metrics_port)
                stack.callback(metrics.close)
            stats = await chosen.run(until_empty=burst)
            if burst and stats.claimed == 0:
                errors.print(f"claimed nothing: {await _why_idle(chosen)}", highlight=False)
            return stats

    print_summary(run(go(), handlers=True), as_json)


async def say_absent(chosen: Worker) -> None:
    """Log a warning for each queue of the worker that does not exist (a mistyped location waits
    for ever), naming the queues next to it; a queue that cannot be looked at now is left to
    the worker's own retries."""
    for queue in chosen.queues:
        try:
            note = await absent_queue_note(queue)
        except (JQueueError, OSError) as exc:
            logging.getLogger(__name__).debug("could not tell whether the queue exists: %s", exc)
            continue
        if note is not None:
            logging.getLogger("jqueue.worker").warning(note)


def _as_url(storage: str) -> str:
    """A storage given as a path, as the URL of the same file."""
    return storage if is_url(storage) else Path(storage).resolve().as_uri()


def bench(
    ctx: typer.Context,
    queues: Annotated[str, typer.Option(help=f"Comma list of queue kinds, from {', '.join(QUEUES)}.")] = (
        ",".join(QUEUES)
    ),
    scenarios: Annotated[
        str, typer.Option(help=f"Comma list of scenarios, from {', '.join(SCENARIOS)}.")
    ] = ",".join(SCENARIOS),
    ops: Annotated[int, typer.Option(min=1, help="Queue calls per scenario.")] = 1000,
    payload_bytes: Annotated[int, typer.Option(min=0, help="Payload size of each job.")] = 1024,
    get_latency_ms: Annotated[
        float, typer.Option(min=0, help="Milliseconds added before every storage read.")
    ] = 0.0,
    put_latency_ms: Annotated[
        float, typer.Option(min=0, help="Milliseconds added before every storage write.")
    ] = 0.0,
    layout: Annotated[str, typer.Option(help="Storage layout of every queue: log or single.")] = "log",
    repeat: Annotated[
        int, typer.Option(min=1, help="Runs per combination; the one with the median calls/s is shown.")
    ] = 1,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Also write the results as JSON to this file.")
    ] = None,
) -> None:
    """Run the storage benchmark's scenarios on fresh queues beside --storage (exit status 1 if a
    run's calls did not all land)."""
    from jqueue.bench import Settings, run

    if layout not in ("log", "single"):
        fail(f"--layout must be log or single, not {layout!r}")
    try:
        settings = Settings(
            queues=name_list("queue", queues, QUEUES),
            scenarios=name_list("scenario", scenarios, SCENARIOS),
            ops=ops,
            payload_bytes=payload_bytes,
            get_latency_ms=get_latency_ms,
            put_latency_ms=put_latency_ms,
            json_path=json_path,
            repeat=repeat,
            layout="log" if layout == "log" else "single",
            url=_as_url(storage_url(ctx, storage_only=True)),
        )
    except ValueError as exc:
        fail(str(exc))
        raise
    raise typer.Exit(run(settings, command=sys.argv))


def report(
    ctx: typer.Context,
    out: Annotated[str, typer.Option(help="Directory for report.md and throughput.svg.")] = "queue-report",
    engine: Annotated[
        str, typer.Option(help="python, spark, or auto: Spark for a history over 200,000 records.")
    ] = "auto",
) -> None:
    """Report on the history of --storage: throughput, wait and run times, retries, dead letters."""
    from jqueue.adapters.report import ENGINES, compute, write

    if engine not in ENGINES:
        fail(f"--engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    url = storage_url(ctx, storage_only=True)

    async def exists() -> None:
        async with existing_queue(ctx):
            pass

    run(exists())
    url = _as_url(url)  # Spark's executors need a URL
    try:
        found, used = compute(url, engine)
        written = write(found, Path(out))
    except (JQueueError, ValueError, OSError, ImportError) as exc:
        fail(str(exc) or type(exc).__name__)
        raise
    for path in written:
        console.print(str(path), highlight=False)
    errors.print(f"computed with {used}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add these commands to ``app``."""
    app.command()(worker)
    app.command()(bench)
    app.command()(report)
