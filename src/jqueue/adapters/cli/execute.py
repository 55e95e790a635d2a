"""``jqueue exec``: a worker that runs a command per job, in a process group of its own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from jqueue.adapters.cli.common import broker_queue, fail, run, seconds
from jqueue.adapters.cli.run import (
    BurstFlag,
    ConcurrencyOption,
    LogFormat,
    LogFormatOption,
    LogLevel,
    LogLevelOption,
    MaxAttemptsOption,
    RetryDelayOption,
    backoff_of,
    log_jobs,
    print_summary,
    say_absent,
)
from jqueue.core.runtime.outcomes import WorkerStats
from jqueue.core.runtime.steering import HandlerFailure
from jqueue.core.runtime.worker import DEFAULT_BACKOFF, DEFAULT_MAX_ATTEMPTS, Worker
from jqueue.domain.models import Job

VisibilityOption = Annotated[
    float | None,
    typer.Option(
        min=0.1,
        help="Seconds a claim holds a job without a heartbeat; a running job beats every third of"
        " it, and learns of a cancel at a beat (default: the queue's, 300).",
    ),
]


class CommandFailedError(HandlerFailure):
    """A job's command exited with a non-zero status."""


_TERM_GRACE = 2.0  # seconds a stopped command's process group has between SIGTERM and SIGKILL
_GROUP_EXIT_WAIT = 5.0  # seconds for the rest of the group to exit after the SIGKILL


def _signal_group(group: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def _group_running(group: int) -> bool:
    """Whether a process of ``group`` still runs; zombies do not count where /proc tells."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()  # after the command's name
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            return True
    return False


async def _stop_command(process: asyncio.subprocess.Process) -> None:
    """Stop a command started in a session of its own, with everything it started.

    Its process group gets SIGTERM, then SIGKILL after ``_TERM_GRACE`` seconds (at once if
    this task is cancelled meanwhile); the command is reaped, and then the rest of the
    group is waited for up to ``_GROUP_EXIT_WAIT`` seconds.
    """
    group = process.pid
    _signal_group(group, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), _TERM_GRACE)
    except TimeoutError:
        pass
    finally:
        _signal_group(group, signal.SIGKILL)
    await process.wait()
    deadline = time.monotonic() + _GROUP_EXIT_WAIT
    while _group_running(group) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)


def _check_runnable(program: str) -> None:
    """Fail at start, with one line, if ``program`` cannot be started: no job is claimed for it."""
    if os.sep in program:
        path = Path(program)
        if not path.exists():
            fail(f"cannot run {program!r}: no such file")
        if path.is_dir() or not os.access(path, os.X_OK):
            fail(f"cannot run {program!r}: not an executable file")
    elif shutil.which(program) is None:
        fail(f"cannot run {program!r}: no such command on the PATH")


def _ending(status: int) -> str:
    """How a command ended, from its exit status (negative: the signal that killed it)."""
    if status >= 0:
        return f"exit status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    return f"killed by {name}"


def execute(
    ctx: typer.Context,
    entrypoint: str,
    command: Annotated[list[str], typer.Argument(help="The command and its arguments, after --.")],
    concurrency: ConcurrencyOption = 4,
    timeout: Annotated[float | None, typer.Option(help="Seconds before a command is killed.")] = None,
    visibility_timeout: VisibilityOption = None,
    max_attempts: MaxAttemptsOption = None,
    retry_delay: RetryDelayOption = None,
    burst: BurstFlag = False,
    log_format: LogFormatOption = LogFormat.TEXT,
    log_level: LogLevelOption = LogLevel.INFO,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Run a command per job with the payload on its standard input.

    Exit status 0 acks the job; any other status fails it, with the end of standard
    error recorded as its error (retried with back-off, dead after --max-attempts).
    The job's id, entrypoint and attempt are in JQUEUE_JOB_ID, JQUEUE_ENTRYPOINT and
    JQUEUE_ATTEMPT.

    Each command runs in a session of its own, so Ctrl-C or a SIGTERM to the process
    group stops only the worker, which lets running commands finish within its grace
    period; a command past --timeout, cancelled (jqueue cancel), or still running when the
    worker stops for good, is killed with every process it started.
    """
    if not command:
        fail("give the command after --, e.g. jqueue exec resize -- convert - out.png")
    _check_runnable(command[0])

    async def run_command(job: Job) -> None:
        env = os.environ | {"JQUEUE_JOB_ID": job.id, "JQUEUE_ENTRYPOINT": job.entrypoint}
        env["JQUEUE_ATTEMPT"] = str(job.attempts)
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=sys.stderr if as_json else None,  # the JSON summary alone on standard output
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        try:
            _, stderr = await process.communicate(job.payload)
        except asyncio.CancelledError:
            await _stop_command(process)
            raise
        status = process.returncode  # set: communicate waits for the command's exit
        if status:
            detail = stderr.decode(errors="replace").strip()[-2000:]
            raise CommandFailedError(_ending(status) + (f": {detail}" if detail else ""))

    async def go() -> WorkerStats:
        log_jobs(log_format, log_level)
        async with broker_queue(ctx) as queue:
            runner = Worker(
                queue,
                {entrypoint: run_command},
                concurrency=concurrency,
                timeout=seconds(timeout),
                visibility_timeout=seconds(visibility_timeout),
                max_attempts=max_attempts or DEFAULT_MAX_ATTEMPTS,
                backoff=DEFAULT_BACKOFF if retry_delay is None else backoff_of(retry_delay),
            )
            spec = runner.handlers[entrypoint]
            runner.handlers[entrypoint] = replace(spec, label=f"command: {shlex.join(command)}")
            await say_absent(runner)
            return await runner.run(until_empty=burst)

    print_summary(run(go()), as_json)


def register(app: typer.Typer) -> None:
    """Add ``jqueue exec`` to ``app``."""
    app.command("exec")(execute)
