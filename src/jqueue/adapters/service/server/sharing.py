"""``SharedRoot``: a root that many ``jqueue serve`` processes serve together (the default).

Every member computes the same placement of the root's queues on the members
(``domain.placement`` over ``Members.addresses``), takes over the queues placed on it (an
``Owned`` entry in each one's log fences the member that served it before) and gives up the
others. A call for a queue that another member serves is forwarded to it, and the answer names
that member (``OWNER_HEADER``), so that a client sends the queue's next calls there itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from jqueue.adapters.optional import require
from jqueue.adapters.service.server.host import QueueHost
from jqueue.adapters.service.server.members import Members
from jqueue.adapters.service.wire.bodies import (
    CLIENT_HEADER,
    CREATED_QUEUE_HEADER,
    FORWARDED_HEADER,
    OWNER_HEADER,
    WORKER_HEADER,
)
from jqueue.domain.errors import NotOwnerError, QueueClosedError
from jqueue.domain.placement import placement

logger = logging.getLogger(__name__)

PASSED_HEADERS = ("content-type", "accept", "authorization", CLIENT_HEADER.lower(), WORKER_HEADER.lower())
"""The request headers a forwarded call carries to the owner."""
TAKEN_AT_ONCE = 16
"""Queues a member opens and takes over at once (a new member takes its whole share in one look)."""
FORWARD_TIMEOUT = 120.0
"""Seconds a forwarded call may take (a long poll included) before it counts as unanswered."""


class UnforwardedError(Exception):
    """A call this member could not hand to the queue's owner at ``address``: it was forwarded
    here already (the members disagree for a moment), or the owner did not answer. The client
    sends it again (``NOT_OWNER``)."""

    def __init__(self, message: str, address: str) -> None:
        super().__init__(message)
        self.address = address


class SharedRoot:
    """This member's share of a root served by many brokers: which queues it serves, and the
    forwarding of the others' calls.

    Parameters
    ----------
    host : QueueHost
        The root's queues, as this process opens them.
    members : Members
        The root's members.
    """

    def __init__(self, host: QueueHost, members: Members) -> None:
        self.host = host
        self.members = members
        self._session: Any = None
        self._placed: dict[str, str] = {}
        self._departures: dict[str, asyncio.Event] = {}
        """Set when the member at an address leaves the record: ends the calls forwarded to it."""
        self._unanswered: tuple[type[BaseException], ...] = (OSError, TimeoutError)
        self.joined = False
        """Whether this broker is one of the root's members: until it is, it serves no call."""
        self.trouble: str | None = None
        """Why the last look failed (None: it did not)."""
        self.looked = asyncio.Event()
        """Set once the first look is over, joined or not."""

    async def run(self) -> None:
        """``look`` every ``renew_every`` until cancelled, and raise this member's beat as often
        in a task of its own (a look that waits on the bucket must not stop the beat)."""
        await self.members.open()
        beating = asyncio.create_task(self._beat())
        try:
            while True:
                await self.look()
                self.looked.set()
                await asyncio.sleep(self.members.renew_every)
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.members.renew_every)
            if self.joined:
                try:
                    await self.members.beat()
                except Exception as exc:  # the bucket away: the looks report it as trouble
                    logger.debug("the beat of %s was not raised: %s", self.members.owner, exc)

    async def look(self) -> None:
        """Join the members if this broker is not one yet, then ``rebalance``. A failed look
        (the storage away, a damaged members record) is logged, kept as ``trouble`` and tried
        again at the next; a damaged record is never written over."""
        try:
            if not self.joined:
                await self.members.join()
                self.joined = True
            await self.rebalance()
        except Exception as exc:
            self.trouble = str(exc)
            logger.warning("a look at the brokers of %s failed: %s", self.host.root, exc)
        else:
            self.trouble = None

    async def rebalance(self) -> None:
        """Look at the members, then serve the queues placed on this member and give up the others."""
        if await self.members.step():
            for name in self.host.owned():
                await self.host.give_up(name)
        self._drop_departed()
        await self.host.catalog.load()
        me = self.members.owner
        self._placed = placed = placement(self.host.found(), self.members.addresses)
        for name in self.host.owned():
            if placed.get(name) != me or (self.members.changed and not await self._still_owned(name)):
                await self.host.give_up(name)  # one taken from here since (it is taken back below)
        taking = [
            name for name, member in sorted(placed.items()) if member == me and not self.host.owns(name)
        ]
        room = asyncio.Semaphore(TAKEN_AT_ONCE)

        async def take(name: str) -> None:
            async with room:
                try:
                    await self.host.own(name, me)
                except NotOwnerError as exc:
                    logger.warning("queue %s was taken by broker %s meanwhile", name, exc.owner)
                except QueueClosedError:
                    pass  # given up meanwhile (a call found it taken): the next look takes it again

        await asyncio.gather(*(take(name) for name in taking))

    async def _still_owned(self, name: str) -> bool:
        """Whether queue ``name``'s log still names this member its owner (a read of the log)."""
        queue = self.host.open_queues().get(name)  # None: given up meanwhile (``Service.failed``)
        owned = None if queue is None else await queue.owner()
        return owned is not None and owned.owner == self.members.owner

    def owner_address(self, name: str) -> str | None:
        """The address of the member that serves queue ``name``, or None if it is this one (a
        queue the last look did not place, a new one, is placed among the others now)."""
        if self.host.owns(name):
            return None
        addresses = self.members.addresses
        member = self._placed.get(name)
        if member is None:
            member = placement({*self._placed, name}, addresses).get(name)
        if member is None or member == self.members.owner or member not in addresses:
            return None
        return addresses[member]

    async def forward(self, request: Request, address: str, body: bytes) -> Response:
        """Send the call to the member at ``address`` and answer what it answers, naming it.

        Raises
        ------
        UnforwardedError
            For a call that was forwarded to this member already (the members disagree for a
            moment), or one the owner did not answer: the client tries again.
        """
        if FORWARDED_HEADER in request.headers:
            raise UnforwardedError(f"queue placed on {address}, not on this broker", address)
        headers = {name: value for name, value in request.headers.items() if name in PASSED_HEADERS}
        headers[FORWARDED_HEADER] = self.members.owner
        query = request.scope.get("query_string", b"").decode()
        target = f"{address}{request.scope['path']}" + (f"?{query}" if query else "")
        sent = asyncio.ensure_future(self._send(request.method, target, body, headers))
        gone = asyncio.ensure_future(self._departures.setdefault(address, asyncio.Event()).wait())
        try:
            await asyncio.wait((sent, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            sent.cancel()  # no-op once it is done; else the member left (or the caller went away)
        if not sent.done() or sent.cancelled():
            raise UnforwardedError(f"the broker of the queue at {address} left the root's brokers", address)
        try:
            response = sent.result()
        except self._unanswered as exc:
            unanswered = f"the broker of the queue at {address} did not answer: {exc}"
            raise UnforwardedError(unanswered, address) from exc
        response.headers[OWNER_HEADER] = address
        return response

    async def _send(self, method: str, target: str, body: bytes, headers: dict[str, str]) -> Response:
        session = await self._opened()
        async with session.request(method, target, data=body, headers=headers) as reply:
            content = await reply.read()
            passed = {key: reply.headers[key] for key in (CREATED_QUEUE_HEADER,) if key in reply.headers}
            return Response(content, reply.status, passed, reply.headers.get("content-type"))

    def _drop_departed(self) -> None:
        """End the forwarded calls in flight to members no longer listed (dead or frozen: a
        call to one would wait out ``FORWARD_TIMEOUT``); their clients send them again."""
        live = set(self.members.addresses.values())
        for address in [address for address in self._departures if address not in live]:
            self._departures.pop(address).set()

    async def _opened(self) -> Any:
        if self._session is None:
            aiohttp = require("aiohttp", extra="serve")
            timeout = aiohttp.ClientTimeout(total=FORWARD_TIMEOUT)
            self._session = aiohttp.ClientSession(timeout=timeout)
            self._unanswered = (aiohttp.ClientError, OSError, TimeoutError)
        return self._session

    async def close(self) -> None:
        """Leave the members (a clean stop) and close the forwarding connections."""
        try:
            if self.joined:
                await self.members.leave()
        finally:
            await self.members.close()
            if self._session is not None:
                session, self._session = self._session, None
                await session.close()
