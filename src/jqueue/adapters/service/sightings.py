"""``Sightings``: which workers called each queue lately, and what they said of themselves, for
the dashboard."""

from __future__ import annotations

import functools
import time

import msgspec
from starlette.requests import Request

from jqueue.adapters.dashboard.source import FORGET_AFTER, Sighting
from jqueue.adapters.service.wire import CLIENT_HEADER, MAX_WORKER_HEADER, WORKER_HEADER
from jqueue.ports.queue import WorkerReport

MOST_CLIENTS = 1_000
"""The most clients remembered per queue; the longest unseen go first."""


class Sightings:
    """When each worker last called each queue, and its last report."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, Sighting]] = {}

    def saw(self, queue: str, route: str, request: Request) -> None:
        """Note a call of ``route`` on ``queue``, if a worker made it: a claim, or a call that
        carries a ``WORKER_HEADER``. The client is named by ``CLIENT_HEADER``, or by its address."""
        header = request.headers.get(WORKER_HEADER)
        if header is None and route != "dequeue":
            return
        client = request.headers.get(CLIENT_HEADER) or (request.client.host if request.client else "?")
        seen = self._seen.setdefault(queue, {})
        before = seen.pop(client, None)  # re-inserted last: the dict stays ordered by last sighting
        report = _report(header) if header is not None else before.report if before else None
        if report is not None and report.stopped:
            return  # its last word: it is gone
        seen[client] = Sighting(queue, client, time.time(), report)
        if len(seen) > MOST_CLIENTS:
            del seen[next(iter(seen))]

    def of(self, queue: str) -> list[Sighting]:
        """Return the workers seen calling ``queue`` within ``FORGET_AFTER`` seconds, the latest first."""
        seen = self._seen.get(queue, {})
        cutoff = time.time() - FORGET_AFTER
        while seen and next(iter(seen.values())).seen < cutoff:
            del seen[next(iter(seen))]
        return list(reversed(seen.values()))

    def everyone(self) -> list[Sighting]:
        """Return the workers seen calling any queue (one that does not exist yet included)."""
        return [seen for queue in sorted(self._seen) for seen in self.of(queue)]


@functools.lru_cache(maxsize=MOST_CLIENTS)
def _report(header: str) -> WorkerReport | None:
    """The report a header carries (None if it cannot be read); a worker sends the same one
    for a second, with every call, so each is decoded once."""
    if len(header) > MAX_WORKER_HEADER:
        return None
    try:
        return msgspec.json.decode(header, type=WorkerReport)
    except msgspec.DecodeError:
        return None
