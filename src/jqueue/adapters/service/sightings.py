"""``Sightings``: which clients claimed jobs from each queue lately, for the dashboard."""

from __future__ import annotations

import time

from starlette.requests import Request

from jqueue.adapters.service.wire import CLIENT_HEADER

LIVE_FOR = 60.0
"""A client that claimed nothing for this many seconds is no longer listed."""
MOST_CLIENTS = 1_000
"""The most clients remembered per queue; the longest unseen go first."""


class Sightings:
    """When each client last claimed (or tried to claim) from each queue, in epoch seconds."""

    def __init__(self) -> None:
        self._seen: dict[str, dict[str, float]] = {}

    def saw(self, queue: str, request: Request) -> None:
        """Note a claim by the client that sent ``request`` (named by ``CLIENT_HEADER``, or by
        its address)."""
        client = request.headers.get(CLIENT_HEADER) or (request.client.host if request.client else "?")
        seen = self._seen.setdefault(queue, {})
        seen.pop(client, None)  # re-inserted last: the dict stays ordered by last sighting
        seen[client] = time.time()
        if len(seen) > MOST_CLIENTS:
            del seen[next(iter(seen))]

    def live(self, queue: str) -> dict[str, float]:
        """Return the clients seen claiming from ``queue`` within ``LIVE_FOR`` seconds, with
        when, the latest first."""
        seen = self._seen.get(queue, {})
        cutoff = time.time() - LIVE_FOR
        while seen and next(iter(seen.values())) < cutoff:
            del seen[next(iter(seen))]
        return dict(reversed(seen.items()))
