"""``ServiceCaller``: the HTTP side of ``RemoteQueue``: requests to the broker of a root, and
failover to the next one when it dies, freezes or hands over; ``BrokerFinder``: where a client
sends its calls, and where it goes when the broker moves."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import msgspec

from jqueue.adapters.optional import require
from jqueue.adapters.service.wire.bodies import (
    BROKER_HEADER,
    CLIENT_HEADER,
    CREATED_QUEUE_HEADER,
    OWNER_HEADER,
    WORKER_HEADER,
    ErrorResponse,
    client_name,
    decode,
    encode,
)
from jqueue.adapters.service.wire.error_codes import (
    BAD_ANSWER,
    CLOSING,
    NO_ANSWER,
    NO_BROKER,
    NOT_BROKER,
    NOT_OWNER,
    UNREACHABLE,
    raised,
)
from jqueue.adapters.service.wire.root import RECORD_NAME, BrokerRecord, broker_record, record_storage
from jqueue.adapters.web.media import MSGPACK
from jqueue.core.loop.store import StorageUse
from jqueue.domain.errors import JQueueError, ServiceError
from jqueue.ports.queue import WorkerReport
from jqueue.ports.storage import ObjectStoragePort

logger = logging.getLogger(__name__)

T = TypeVar("T")
SERVICE_SCHEMES = ("http://", "https://")
RECHECK_EVERY = 1.0
"""Seconds between two reads of the broker record while a call waits for its answer."""

DEFAULT_CALL_TIMEOUT = timedelta(seconds=30)
DEFAULT_FAILOVER_TIMEOUT = timedelta(seconds=30)
CONNECT_TIMEOUT = 5.0
"""Seconds to open a connection to a broker before it counts as unreachable."""
LONG_POLLS_IN_FLIGHT = 512
"""The most long polls (``result``, ``changes``) one caller holds open at once, on connections
of their own, so that they never hold up claims, acks and heartbeats."""
REPORT_EVERY = 1.0
"""Seconds a worker's report is sent as it was, before it is made again."""
PROBE_TIMEOUT = 0.25
"""Seconds a slow call's broker has to answer ``/healthz`` before the client reads the record."""
TELL_EVERY = 5.0
"""Seconds between two log lines saying that calls look for a broker."""
_MOVING = frozenset(code.code for code in (UNREACHABLE, NOT_BROKER, NOT_OWNER, NO_BROKER, NO_ANSWER, CLOSING))
"""The codes of a call that another broker may take: it goes to the one the root names (a queue
that its member gives up, or that stops with its service, answers the calls in flight
``closing``)."""
_MAY_HAVE_LANDED = frozenset((NO_ANSWER.code, CLOSING.code))
"""The codes of a call that may have landed: its repeat is said to be one (``call``)."""


def is_service_url(target: str) -> bool:
    """Whether ``target`` names a service (``http(s)://``) rather than a storage root."""
    return target.lower().startswith(SERVICE_SCHEMES)


class BrokerFinder:
    """The broker of a client: a fixed service URL, or the one the root's broker record names.

    Parameters
    ----------
    target : str
        ``http(s)://host:port``, or a storage root (a directory, ``file://``, ``s3://``,
        ``gs://`` prefix) whose ``_broker.json`` names the broker.
    """

    def __init__(self, target: str) -> None:
        self.root = None if is_service_url(target) else target
        self.address: str | None = target.rstrip("/") if self.root is None else None
        self.owner: str | None = None
        """The broker the root's record names for ``address`` (its ``owner``); None for a service URL."""
        self._record: ObjectStoragePort | None = None
        self._held: StorageUse | None = None
        self._users = 0
        self._lock = asyncio.Lock()
        self._checked_at = -RECHECK_EVERY
        self._recorded: str | None = None

    async def open(self) -> None:
        """Hold the root's record storage open (its client, its connections) until ``close``:
        each read would otherwise open a client of its own, tens of milliseconds on S3. Opens
        nest: a finder that queues share (the shards of one sharded queue) is let go by the
        last ``close``."""
        self._users += 1
        if self.root is not None and self._held is None:
            held = StorageUse(self._storage())
            await held.__aenter__()
            self._held = held

    async def close(self) -> None:
        """Let go of what ``open`` held, at the close of its last ``open``."""
        self._users = max(0, self._users - 1)
        held, self._held = (self._held, None) if self._users == 0 else (None, self._held)
        if held is not None:
            await held.__aexit__(None, None, None)

    async def find(self) -> str | None:
        """The broker's URL: the one in use, else the record's (None if there is no record).
        Concurrent calls share one read of the record."""
        if self.address is not None or self.root is None:
            return self.address
        async with self._lock:
            if self.address is None:
                record = await self._read()
                self.address, self.owner = (None, None) if record is None else (record.address, record.owner)
        return self.address

    async def moved_from(self, address: str) -> str | None:
        """The broker the root's record names if it is no longer ``address`` (another process took
        over from it), else None; what a call asks while its answer is slow, so that a frozen
        or unreachable broker costs no more than a killed one. The record is read at most
        once every ``RECHECK_EVERY`` seconds, whoever asks; a service URL never moves."""
        if self.root is None:
            return None
        async with self._lock:
            if time.monotonic() - self._checked_at >= RECHECK_EVERY:
                record = await self._read()
                self._recorded = None if record is None else record.address
                self._checked_at = time.monotonic()
        recorded = self._recorded
        return recorded if recorded is not None and recorded != address else None

    async def _read(self) -> BrokerRecord | None:
        """The root's record, or None if it has none or its broker stopped (released it)."""
        content, etag = await self._storage().read()
        if etag is None:
            return None
        record = broker_record(content, f"{self.root}/{RECORD_NAME}")
        return None if record.released else record

    def _storage(self) -> ObjectStoragePort:
        assert self.root is not None
        if self._record is None:
            self._record = record_storage(self.root)
        return self._record

    def owner_at(self, address: str) -> str | None:
        """The broker a call to ``address`` is meant for (``BROKER_HEADER``), if the record named it."""
        return self.owner if address == self.address else None

    def moved(self, hint: str | None) -> None:
        """The broker in use did not serve: go to ``hint`` for a service URL; for a root, look at
        its record again (a hint comes from whatever answers at the old address, which may
        serve another root now)."""
        if self.root is None:
            self.address = hint or self.address
        else:
            self.address = self.owner = None


class ServiceCaller:
    """Calls the routes of one queue of ``jqueue serve``, in MessagePack, over two pools of
    keep-alive connections (one for long polls).

    Parameters
    ----------
    url : str
        The service (``http://host:port``), or the storage root whose broker record names it.
    queue : str
        The queue's name.
    token : str or None
        The service's token.
    timeout, failover_timeout : timedelta
        As ``RemoteQueue`` takes them.
    """

    def __init__(
        self, url: str, queue: str, token: str | None, timeout: timedelta, failover_timeout: timedelta
    ) -> None:
        self.finder = BrokerFinder(url)
        self.queue = queue
        self._headers = {"Content-Type": MSGPACK, "Accept": MSGPACK, CLIENT_HEADER: client_name()}
        if token is not None:
            self._headers["Authorization"] = f"Bearer {token}"
        self._timeout = timeout
        self._failover_timeout = failover_timeout
        self.report: Callable[[], WorkerReport] | None = None
        """What the worker calling says of itself, sent with every call (``WORKER_HEADER``;
        set with ``set_report``)."""
        self._reported: tuple[float, str | None] = (-REPORT_EVERY, None)
        self._session: Any = None
        self._waits: Any = None
        self._aiohttp: Any = None
        self._told_at = -TELL_EVERY
        self._probe_lock = asyncio.Lock()
        self._probed: tuple[str | None, float, bool] = (None, -RECHECK_EVERY, False)
        self.created_queue = False
        """Whether a call's answer said that it created the queue (``CREATED_QUEUE_HEADER``)."""
        self.owner: str | None = None
        """The broker that serves the queue, when one of a root's many brokers forwarded a call
        to it (``OWNER_HEADER``): the queue's calls go there until it does not take one."""

    async def start(self) -> None:
        """Open the connection pools."""
        aiohttp = self._aiohttp = require("aiohttp", extra="client")
        if self._session is None:
            await self.finder.open()
            try:
                self._session = aiohttp.ClientSession(headers=self._headers)
                waits = aiohttp.TCPConnector(limit=LONG_POLLS_IN_FLIGHT)
                self._waits = aiohttp.ClientSession(headers=self._headers, connector=waits)
            except BaseException:
                await self.finder.close()
                raise

    async def stop(self) -> None:
        """Close the connection pools."""
        if self._session is not None:
            sessions, self._session, self._waits = (self._session, self._waits), None, None
            try:
                for session in sessions:
                    await session.close()
            finally:
                await self.finder.close()

    async def call(self, verb: str, body: object, answer: type[T], wait: float = 0.0) -> tuple[T, bool]:
        """POST ``body`` to the queue's route ``verb`` (or GET the service's path ``verb``, one that
        starts with ``/``, when ``body`` is None); return the answer decoded as ``answer``, and
        whether the call was repeated after an attempt that may have landed.

        A call the broker did not take (no connection, or a standby's ``not_broker``) goes to
        the broker the answer or the root's record names, until ``failover_timeout``; so does
        a call that may have landed: its repeat changes nothing twice (an enqueue carries its
        jobs' ids, a settling call is fenced or finds its job gone, a claim held by a lost
        answer runs out). A call whose answer is slow is given up as soon as the root's record
        names another broker, so that a frozen broker costs no more than a killed one; one
        with no answer within ``timeout`` (a long poll: ``wait`` more) is given up too.

        Raises
        ------
        ServiceError
            For an answer that is not 2xx, or no broker within ``failover_timeout``.
        """
        if self._session is None:
            await self.start()
        deadline = time.monotonic() + self._failover_timeout.total_seconds()
        pause, repeated = 0.05, False
        while True:
            direct = self.owner if not verb.startswith("/") else None
            address = direct or await self.finder.find()
            try:
                if address is None:
                    raise NO_BROKER.error(f"no broker is registered for {self.finder.root}")
                return await self._post(address, verb, body, answer, wait), repeated
            except ServiceError as exc:
                if exc.code not in _MOVING or time.monotonic() + pause > deadline:
                    raise
                repeated = repeated or exc.code in _MAY_HAVE_LANDED
                if direct is not None:  # the queue moved: ask the broker in front again
                    self.owner = None
                    continue
                self._tell(exc)
                self.finder.moved(exc.broker)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _tell(self, exc: ServiceError) -> None:
        """Log, once every few seconds, that calls are looking for a broker, and why."""
        now = time.monotonic()
        if now - self._told_at >= TELL_EVERY:
            self._told_at = now
            where = self.finder.root or self.finder.address
            found = "nothing answers there" if exc.code == UNREACHABLE.code else "no broker took it"
            logger.warning(
                "a call to %s found no service: %s (%s); still looking for the broker for up to %.0f s",
                where, found, exc, self._failover_timeout.total_seconds(),
            )  # fmt: skip

    async def _post(self, address: str, verb: str, body: object, answer: type[T], wait: float) -> T:
        where = f"{address}{verb}" if verb.startswith("/") else f"{address}/v1/queues/{self.queue}/{verb}"
        data = None if body is None else encode(body, True)
        watch = _SlowCallWatch(self, address) if self.finder.root is not None else None
        try:
            status, data = await self._exchange(where, data, wait, self._headers_to(address))
        except asyncio.CancelledError:
            if watch is not None and watch.gave_up():
                moved = watch.moved
                text = f"{where}: the root's broker is now {moved}"
                raise NO_ANSWER.error(text, moved) from None
            raise
        finally:
            if watch is not None:
                watch.stop()
        if status // 100 != 2:
            try:
                error = decode(data, ErrorResponse, True).error
            except Exception:
                said = " ".join(data[:400].decode(errors="replace").split())[:120]
                text = f"{where} answered HTTP {status}, not as a jqueue serve does (is it one?): {said}"
                raise BAD_ANSWER.error(text, status=status) from None
            raise raised(error, status)
        return decode(data, answer, True)

    async def _exchange(
        self, where: str, data: bytes | None, wait: float, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """Send one request (a long poll, ``wait`` > 0, on its own connections): a POST of ``data``,
        or a GET without it, with ``headers`` besides the session's; read its answer."""
        session = self._waits if wait > 0 else self._session
        seconds = self._timeout.total_seconds() + wait
        timeout = self._aiohttp.ClientTimeout(total=seconds, sock_connect=CONNECT_TIMEOUT)
        try:
            method = "GET" if data is None else "POST"
            async with session.request(
                method, where, data=data, timeout=timeout, headers=headers
            ) as response:
                self.created_queue |= CREATED_QUEUE_HEADER in response.headers
                self.owner = response.headers.get(OWNER_HEADER, self.owner)
                return response.status, await response.read()
        except (self._aiohttp.ClientConnectorError, self._aiohttp.ConnectionTimeoutError) as exc:
            raise UNREACHABLE.error(f"{where}: {type(exc).__name__}: {exc}") from exc
        except (self._aiohttp.ClientError, TimeoutError) as exc:
            raise NO_ANSWER.error(f"{where}: {type(exc).__name__}: {exc}") from exc

    def set_report(self, report: Callable[[], WorkerReport]) -> None:
        """Send what ``report`` says from the next call on."""
        self.report, self._reported = report, (-REPORT_EVERY, None)

    def _headers_to(self, address: str) -> dict[str, str]:
        """The headers of a call to ``address`` besides the session's: the broker the root's record
        named there (``BROKER_HEADER``), and the worker's report (``WORKER_HEADER``, made again
        at most every ``REPORT_EVERY``)."""
        headers = {}
        if (owner := self.finder.owner_at(address)) is not None:
            headers[BROKER_HEADER] = owner
        if self.report is not None:
            now = time.monotonic()
            made, report = self._reported
            if now - made >= REPORT_EVERY or report is None:
                report = msgspec.json.encode(self.report()).decode()
                self._reported = (now, report)
            headers[WORKER_HEADER] = report
        return headers

    async def _moved_from(self, address: str) -> str | None:
        """What a slow call asks: the broker the root now names, if not ``address``. A broker that
        answers its health check as the one serving is not asked about in the storage, so that
        idle workers' long polls read nothing there."""
        if self.finder.root is None or await self._still_serves(address):
            return None
        try:
            return await self.finder.moved_from(address)
        except JQueueError as exc:  # the record cannot be read now: keep waiting for the answer
            logger.debug("could not read the broker record: %s", exc)
            return None

    async def _still_serves(self, address: str) -> bool:
        """Whether ``address`` answers ``/healthz`` within ``PROBE_TIMEOUT`` as the broker serving,
        and the one the root's record named there; asked at most once every ``RECHECK_EVERY``,
        whoever asks. A slow answer costs only a read of the record."""
        async with self._probe_lock:
            probed, at, serves = self._probed
            if probed == address and time.monotonic() - at < RECHECK_EVERY:
                return serves
            serves = False
            timeout = self._aiohttp.ClientTimeout(total=PROBE_TIMEOUT)
            with contextlib.suppress(self._aiohttp.ClientError, TimeoutError, msgspec.DecodeError):
                async with self._session.get(f"{address}/healthz", timeout=timeout) as response:
                    health = msgspec.msgpack.decode(await response.read()) if response.status == 200 else {}
                expected = self.finder.owner_at(address)
                serves = bool(health.get("serving")) and expected in (None, health.get("owner"))
            self._probed = (address, time.monotonic(), serves)
            return serves


class _SlowCallWatch:
    """Watches one call in the task that awaits its answer: every ``RECHECK_EVERY`` it asks
    ``ServiceCaller._moved_from``, and when the root names another broker it cancels the call
    (``gave_up`` then tells that cancellation from any other). A timer, not a task per call:
    most calls end before the first check."""

    def __init__(self, caller: ServiceCaller, address: str) -> None:
        self._caller = caller
        self._address = address
        self._task = asyncio.current_task()
        self._base = 0 if self._task is None else self._task.cancelling()
        """The cancels the task was under before the call (code that calls while it is cancelled)."""
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = self._loop.call_later(RECHECK_EVERY, self._check)
        self._look: asyncio.Task[None] | None = None
        self._cancelled = False
        self.moved: str | None = None

    def _check(self) -> None:
        self._timer = None
        self._look = self._loop.create_task(self._ask())

    async def _ask(self) -> None:
        try:
            moved = await self._caller._moved_from(self._address)
        except Exception as exc:  # a look that failed is made again at the next check
            logger.debug("could not tell whether the broker moved: %r", exc)
            moved = None
        if self._task is None or self._cancelled:
            return
        if moved is None:
            self._timer = self._loop.call_later(RECHECK_EVERY, self._check)
            return
        self.moved, self._cancelled = moved, True
        self._task.cancel()

    def gave_up(self) -> bool:
        """Whether the call was cancelled by this watch alone (not by its caller as well)."""
        return self._cancelled and self._task is not None and self._task.uncancel() <= self._base

    def stop(self) -> None:
        """The call ended: check no more."""
        if self._timer is not None:
            self._timer.cancel()
        if self._look is not None and not self._look.done():
            self._look.cancel()
        self._task = None
