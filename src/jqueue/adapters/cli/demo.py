"""``jqueue demo``: producers and workers on one queue, with failures, retries and dead letters."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import signal
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from jqueue.adapters.cli.common import Options, console, print_json, run
from jqueue.adapters.storage.url import storage_from_url
from jqueue.core.broker import BrokerQueue
from jqueue.core.runtime.outcomes import JobResult, Outcome
from jqueue.core.runtime.worker import Worker
from jqueue.domain.models import Job, JobStatus
from jqueue.domain.policy import Backoff, QueuePolicy

DEFAULT_PATH = Path(".jqueue") / "demo.json"
ENTRYPOINT = "demo-square"
POLICY = QueuePolicy(
    max_attempts=3,
    backoff=Backoff(initial=timedelta(milliseconds=20), maximum=timedelta(milliseconds=200)),
)


def _not_job_lines(record: logging.LogRecord) -> bool:
    """Drop the workers' line per job (the demo shows its own counts); keep the rest."""
    return not hasattr(record, "outcome")


def _fails(job: Job, failure_rate: float) -> bool:
    """Whether this attempt of this job fails: random, but the same on every run."""
    return random.Random(f"{job.payload!r}:{job.attempts}").random() < failure_rate


async def run_demo(
    url: str, jobs: int, workers: int, concurrency: int, failure_rate: float, live: bool
) -> dict[str, object]:
    """Enqueue ``jobs`` jobs and drain them with ``workers`` workers; return the summary."""
    squares: dict[int, int] = {}
    outcomes = dict.fromkeys(Outcome, 0)

    async def square(job: Job) -> None:
        await asyncio.sleep(random.uniform(0.0005, 0.003))
        if _fails(job, failure_rate):
            raise RuntimeError("simulated failure")
        n = json.loads(job.payload)["n"]
        squares[n] = n * n

    progress = _progress(live)
    pool: list[Worker] = []
    interrupted = asyncio.Event()

    def on_signal() -> None:  # Ctrl-C: stop enqueueing, let running jobs finish (again: at once)
        for worker in pool:
            worker.stop(immediate=interrupted.is_set())
        interrupted.set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    async with BrokerQueue(storage_from_url(url), policy=POLICY) as queue:
        await queue.purge(status=None, entrypoint=ENTRYPOINT)  # a clean run, also after an interrupted one
        started = time.perf_counter()
        with progress:
            enqueued = await _enqueue_numbers(queue, jobs, progress, interrupted)
            count = _counter(progress, jobs, outcomes)
            if not interrupted.is_set():
                pool += [Worker(queue, {ENTRYPOINT: square}, concurrency=concurrency) for _ in range(workers)]
            logging.getLogger("jqueue.worker").addFilter(_not_job_lines)  # the table counts them
            for worker in pool:
                worker.on("after_job")(count)
            await asyncio.gather(*(worker.run(until_empty=True, install_signals=False) for worker in pool))
        seconds = time.perf_counter() - started
        left = await queue.count(entrypoint=ENTRYPOINT) - await queue.count(JobStatus.DEAD, ENTRYPOINT)
        dead = await queue.count(entrypoint=ENTRYPOINT, status=JobStatus.DEAD)
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(sig)
    return {
        "url": url,
        "interrupted": interrupted.is_set(),
        "enqueued": enqueued,
        "acked": outcomes[Outcome.ACKED],
        "retries": outcomes[Outcome.RETRIED],
        "dead_letters": dead,
        "left_in_queue": left,
        "every_job_accounted_for": len(squares) + dead + left == enqueued,
        "sum_of_squares": sum(squares.values()),
        "seconds": round(seconds, 3),
        "jobs_per_second": round(len(squares) / seconds, 1),
    }


def _progress(live: bool) -> Progress:
    """The demo's progress bars (none unless ``live``)."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not live,
    )


async def _enqueue_numbers(
    queue: BrokerQueue, jobs: int, progress: Progress, interrupted: asyncio.Event
) -> int:
    """Enqueue the jobs numbered 0 to ``jobs - 1``, 500 per commit, until all are in or
    ``interrupted`` is set; return how many were."""
    enqueueing = progress.add_task("enqueue", total=jobs)
    enqueued = 0
    for start in range(0, jobs, 500):
        if interrupted.is_set():
            break
        payloads = [json.dumps({"n": n}).encode() for n in range(start, min(jobs, start + 500))]
        await queue.enqueue_many(ENTRYPOINT, payloads)
        enqueued += len(payloads)
        progress.update(enqueueing, advance=len(payloads))
    return enqueued


def _counter(progress: Progress, jobs: int, outcomes: dict[Outcome, int]) -> Callable[[JobResult], None]:
    """Add the bar of finished jobs to ``progress``; return the workers' ``after_job`` hook,
    which counts each outcome in ``outcomes`` and shows it on the bar."""
    finishing = progress.add_task("process", total=jobs)

    def count(result: JobResult) -> None:
        outcomes[result.outcome] += 1
        if result.outcome in (Outcome.ACKED, Outcome.DEAD):
            progress.update(finishing, advance=1)
        retried, dead = outcomes[Outcome.RETRIED], outcomes[Outcome.DEAD]
        progress.update(finishing, description=f"process (retries {retried}, dead {dead})")

    return count


def demo(
    ctx: typer.Context,
    jobs: Annotated[int, typer.Option(help="Jobs to enqueue.")] = 3000,
    workers: Annotated[int, typer.Option(help="Workers sharing the queue.")] = 4,
    concurrency: Annotated[int, typer.Option(help="Jobs each worker runs at once.")] = 8,
    failure_rate: Annotated[float, typer.Option(help="Chance that an attempt fails.")] = 0.1,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON, no live view.")] = False,
) -> None:
    """Enqueue a few thousand jobs and run workers with failures and retries, showing live progress.

    The queue is --storage if given, else a local file, ./.jqueue/demo.json.
    """
    if jobs < 1 or workers < 1 or concurrency < 1 or not 0 <= failure_rate < 1:
        raise typer.BadParameter("jobs, workers and concurrency must be positive, 0 <= failure-rate < 1")
    options: Options = ctx.obj
    if options.storage:
        url = options.storage
    else:
        DEFAULT_PATH.parent.mkdir(parents=True, exist_ok=True)
        url = DEFAULT_PATH.absolute().as_uri()
    summary = run(run_demo(url, jobs, workers, concurrency, failure_rate, live=not as_json))
    if as_json:
        print_json(summary)
    else:
        table = Table("", "", title="jqueue demo", show_header=False)
        for name, value in summary.items():
            table.add_row(name.replace("_", " "), str(value))
        console.print(table)
    if summary["interrupted"]:
        raise typer.Exit(130)  # as a program stopped by Ctrl-C
