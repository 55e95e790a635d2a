"""Running the benchmark: fresh storage per run, every combination, the table and the exit status."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from jqueue.adapters.storage.filesystem import LocalFileSystemStorage
from jqueue.adapters.storage.url import storage_from_url
from jqueue.bench.report import Row, RunResult, format_table, metadata, summarise, write_json
from jqueue.bench.scenarios import RunCalls, open_queue, prefill, run_scenario
from jqueue.bench.settings import Settings
from jqueue.bench.verify import verify
from jqueue.core.direct import DirectQueue
from jqueue.ports.storage import ObjectStoragePort
from jqueue.testing import Faults, instrumented


class Backend(Protocol):
    """Where the runs of one backend keep their queues: a fresh storage object per run.

    Attributes
    ----------
    name : str
        The backend's name in the output (before any latency suffix).
    """

    name: str

    def fresh(self, tag: str) -> ObjectStoragePort:
        """Return a storage for a queue object that does not exist yet, named after ``tag``."""
        ...

    def discard(self, storage: ObjectStoragePort) -> None:
        """Remove what ``fresh`` made for ``storage``, where the backend can."""
        ...


OpenBackends = Callable[[Settings, contextlib.ExitStack], list[Backend]]
"""Makes the backends to run for ``Settings``; what must be shut down goes on the exit stack."""


def unique_name(tag: str) -> str:
    """Return ``tag`` with a random suffix, for a fresh object."""
    return f"{tag}-{uuid.uuid4().hex[:12]}"


def discard_local_files(storage: ObjectStoragePort) -> None:
    """Delete a ``LocalFileSystemStorage``'s files (its object, lock and namespace); others stay."""
    if isinstance(storage, LocalFileSystemStorage):
        for path in (storage.path, storage.path.with_name(storage.path.name + ".lock")):
            path.unlink(missing_ok=True)
        shutil.rmtree(storage.namespace, ignore_errors=True)


def sibling_url(url: str, name: str) -> str:
    """Return ``url`` with the last segment of its path (or its host, for ``memory:``) set to ``name``."""
    parts = urlsplit(url)
    if parts.scheme == "memory":
        return urlunsplit(parts._replace(netloc=name.removesuffix(".json"), path=""))
    folder, _, _ = parts.path.rpartition("/")
    return urlunsplit(parts._replace(path=f"{folder}/{name}"))


class UrlBackend:
    """Fresh objects beside a storage URL; local files are deleted afterwards, S3 and GCS objects stay.

    Parameters
    ----------
    url : str
        A storage URL (``file:``, ``s3:``, ``gs:`` or ``memory:``); its scheme names the backend.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.name = urlsplit(url).scheme

    def fresh(self, tag: str) -> ObjectStoragePort:
        """Return the storage of a new object in the URL's folder."""
        return storage_from_url(sibling_url(self.url, f"{unique_name(tag)}.json"))

    def discard(self, storage: ObjectStoragePort) -> None:
        """Delete the object's files if it is local."""
        discard_local_files(storage)


def url_backends(settings: Settings, stack: contextlib.ExitStack) -> list[Backend]:
    """Return the backend of ``settings.url`` (``jqueue bench``'s only backend)."""
    if settings.url is None:
        raise ValueError("no --url given")
    return [UrlBackend(settings.url)]


def latency(settings: Settings) -> Faults:
    """Return the faults that add ``--get-latency-ms`` / ``--put-latency-ms`` to every storage call."""
    return Faults(
        read_latency=timedelta(milliseconds=settings.get_latency_ms),
        write_latency=timedelta(milliseconds=settings.put_latency_ms),
    )


async def run_once(settings: Settings, backend: Backend, queue_kind: str, scenario: str) -> RunResult:
    """Run one scenario on a fresh queue object and check the state it leaves."""
    payload = bytes(i % 251 for i in range(settings.payload_bytes))
    base = backend.fresh(f"{queue_kind}-{scenario}")
    try:
        prefilled: list[str] = []
        if scenario == "dequeue-seq":
            prefilled = await prefill(base, settings.ops, payload, settings.layout)
        storage = instrumented(base, latency(settings))
        tally = RunCalls()
        async with open_queue(queue_kind, storage, settings.layout) as queue:
            start = time.perf_counter()
            await run_scenario(scenario, queue, tally, settings.ops, payload)
            seconds = time.perf_counter() - start
        async with DirectQueue(base, layout=settings.layout) as reader:
            state = await reader.read_state()
    finally:
        backend.discard(base)
    verdict = verify(scenario, settings.ops, tally, state, prefilled)
    return RunResult(
        seconds, tally.latencies, verdict, tally, storage.reads, storage.writes, storage.conflicts
    )


async def run_all(settings: Settings, backends: Sequence[Backend]) -> list[Row]:
    """Run every selected combination ``settings.repeat`` times; one row per combination."""
    rows: list[Row] = []
    total = len(backends) * len(settings.queues) * len(settings.scenarios)
    index = 0
    for backend in backends:
        label = settings.backend_label(backend.name)
        for queue_kind in settings.queues:
            for scenario in settings.scenarios:
                index += 1
                runs: list[RunResult] = []
                for _ in range(settings.repeat):
                    runs.append(await run_once(settings, backend, queue_kind, scenario))
                row = summarise(label, queue_kind, scenario, runs)
                status = "ok" if row.verified else f"NOT VERIFIED: {row.verify_detail}"
                print(
                    f"[{index}/{total}] {label} {queue_kind} {scenario}: "
                    f"{row.ops_per_s:.1f} ops/s, {row.seconds:.2f}s, {status}",
                    file=sys.stderr,
                    flush=True,
                )
                rows.append(row)
    return rows


def run(settings: Settings, open_backends: OpenBackends | None = None, command: Sequence[str] = ()) -> int:
    """Run the benchmark and print its table; returns the process exit status.

    Parameters
    ----------
    settings : Settings
        What to run.
    open_backends : callable or None
        Makes the backends for the settings. None runs only ``settings.url``, which is then
        required (``tools/benchmark_storage.py`` adds memory, file and S3 on moto).
    command : sequence of str
        The command line that asked for the run, for the JSON's metadata.

    Returns
    -------
    int
        0 when every row verified, 1 when some did not.
    """
    if open_backends is None:
        if settings.url is None:
            raise ValueError("settings.url is required without open_backends")
        open_backends = url_backends
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    started = time.perf_counter()
    with contextlib.ExitStack() as stack:
        rows = asyncio.run(run_all(settings, open_backends(settings, stack)))
    wall = time.perf_counter() - started
    print(format_table(rows))
    if settings.json_path is not None:
        write_json(settings.json_path, metadata(settings, list(command), wall), rows)
        print(f"results written to {settings.json_path} (wall time {wall:.1f}s)", file=sys.stderr)
    failed = [row for row in rows if not row.verified]
    for row in failed:
        print(
            f"NOT VERIFIED: {row.backend} {row.queue} {row.scenario}: {row.verify_detail}"
            + (f" (errors: {' | '.join(row.error_samples)})" if row.error_samples else ""),
            file=sys.stderr,
        )
    return 1 if failed else 0
