"""``RemoteQueue``: a queue served by ``jqueue serve``, called over HTTP (``jqueue.connect``).

It speaks the native API in MessagePack over a pool of keep-alive connections and
satisfies the ``Queue`` protocol, so ``Worker`` and ``HeartbeatManager`` take it. A call
returns once the service answered 2xx, that is, once its commit is durable.

Its claims, settles and enqueues go through a ``Coalescer``: the calls made while a request
is in flight go together in the next request, the client's side of the service's group
commit (a worker of concurrency 10 whose jobs end together sends one ``ack`` request for the
ten, not ten requests). ``RemoteChanges`` learns of the queue's changes by long polls.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Collection, Hashable, Sequence
from dataclasses import replace
from datetime import timedelta
from types import TracebackType
from typing import Any, Generic, TypeVar

from jqueue.adapters.service.client.caller import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_FAILOVER_TIMEOUT,
    BrokerFinder,
    ServiceCaller,
)
from jqueue.adapters.service.client.remote_operator import RemoteOperator, mirrors
from jqueue.adapters.service.wire.bodies import (
    ACK_AND_DEQUEUE,
    MAX_BATCH,
    MAX_WAIT_SECONDS,
    AckAndDequeueRequest,
    AckAndDequeueResponse,
    ChangesRequest,
    ChangesResponse,
    DequeueRequest,
    EnqueueRequest,
    ItemResult,
    JobRef,
    JobsResponse,
    NewJob,
    PeekRequest,
    ResultRequest,
    ResultResponse,
    ResultsResponse,
    SettleRequest,
    job_of,
    new_job,
)
from jqueue.adapters.service.wire.error_codes import NOT_FOUND, raised, status_of
from jqueue.adapters.web.queue_names import QUEUE_NAME
from jqueue.core.queue import DEFAULT_VISIBILITY_TIMEOUT, EnqueueCalls, JobQueue
from jqueue.domain.errors import JobCancelledError, JobFailedError, JQueueError, ServiceError
from jqueue.domain.models import Job, JobStatus, new_job_id
from jqueue.domain.policy import QueuePolicy
from jqueue.domain.spec import BATCH_SIZE, JobSpec
from jqueue.domain.values import Bounds, checked_progress, span
from jqueue.ports.queue import WorkerReport

T = TypeVar("T")
ClaimRequestKey = tuple[tuple[str, ...] | None, float | None]
"""What claims that share a dequeue request have in common: their entrypoints and visibility
timeout (the ``Coalescer`` key of claims)."""
SettleRequestKey = tuple[str, tuple[tuple[str, Any], ...]]
"""What settling calls that share a request have in common: their verb and options."""


def _seconds(span: timedelta | None) -> float | None:
    return None if span is None else span.total_seconds()


def _entrypoints(entrypoint: str | Collection[str] | None) -> list[str] | None:
    if entrypoint is None:
        return None
    return [entrypoint] if isinstance(entrypoint, str) else list(entrypoint)


def _ref(job: Job | str, **extra: Any) -> JobRef:
    return JobRef(job, **extra) if isinstance(job, str) else JobRef(job.id, job.lease, **extra)


class RemoteQueue(EnqueueCalls, RemoteOperator):
    """One queue of a ``jqueue serve`` service.

    Parameters
    ----------
    url : str
        The service, as ``http://host:port``; or the storage root that the services share,
        whose broker record names the one serving it.
    queue : str
        The queue's name under the service's root.
    token : str or None
        The service's token, if it needs one.
    timeout : timedelta
        The longest one request waits for its answer (a long poll: this beyond its wait);
        a request is given up sooner once the root's record names another broker.
    failover_timeout : timedelta
        How long a call keeps looking for a broker that takes it (after a broker died, or
        before one started) before it fails with ``ServiceError``.
    policy : QueuePolicy or None
        The queue's defaults for attempts and back-off, as the service's queue has them
        (by default the library's).
    visibility_timeout : timedelta
        How long a claim holds a job without a heartbeat, as on the service.
    requests_in_flight : int
        The most claiming or settling requests of one kind in flight at once, where requests
        are slow (a root on S3 or GCS); where they are quick, one at a time, and the calls
        made meanwhile go together in the next (``Coalescer``).
    """

    def __init__(
        self,
        url: str,
        queue: str,
        *,
        token: str | None = None,
        timeout: timedelta = DEFAULT_CALL_TIMEOUT,
        failover_timeout: timedelta = DEFAULT_FAILOVER_TIMEOUT,
        policy: QueuePolicy | None = None,
        visibility_timeout: timedelta = DEFAULT_VISIBILITY_TIMEOUT,
        requests_in_flight: int = 8,
    ) -> None:
        if not QUEUE_NAME.fullmatch(queue):
            raise ValueError(f"{queue!r} is not a queue name (letters, digits, '_' and '-', at most 128)")
        self.url = url
        self.queue = queue
        self._caller = ServiceCaller(url, queue, token, timeout, failover_timeout)
        self._policy = policy or QueuePolicy()
        self._visibility_timeout = visibility_timeout
        self._settles: Coalescer[SettleRequestKey, JobRef, bool] = Coalescer(
            self._send_settles, requests_in_flight
        )
        self._claims: Coalescer[ClaimRequestKey, int, list[Job]] = Coalescer(
            self._send_claims, requests_in_flight
        )
        self._enqueues: Coalescer[str, list[NewJob], list[Job]] = Coalescer(
            self._send_enqueues, requests_in_flight
        )
        self.changes = RemoteChanges(self)
        self._acks_with_claims = True  # False once the service answered ack-and-dequeue 404

    def finding_the_broker_with(self, finder: BrokerFinder) -> RemoteQueue:
        """Find the broker with ``finder``, which other queues of the same root share (the shards
        of one sharded queue: one storage client and one read of the broker record for all,
        not one each); returns this queue."""
        self._caller.finder = finder
        return self

    @property
    def visibility_timeout(self) -> timedelta:
        """How long a claim holds a job without a heartbeat."""
        return self._visibility_timeout

    @property
    def policy(self) -> QueuePolicy:
        """The queue's defaults for attempts and back-off."""
        return self._policy

    @property
    def created_queue(self) -> bool:
        """Whether a call of this client created the queue (an enqueue to a name the service
        did not have: a mistyped one, maybe)."""
        return self._caller.created_queue

    @property
    def location(self) -> str:
        """Where the queue is, for messages: its name and the service (or root) it is called at."""
        return f"queue {self.queue} through jqueue serve at {self.url}"

    async def __aenter__(self) -> RemoteQueue:
        await self.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    def report_worker(self, report: Callable[[], WorkerReport]) -> None:
        """Send what ``report`` says of the worker with every call, for the dashboard."""
        self._caller.set_report(report)

    async def say_stopped(self) -> None:
        """Tell the service that the worker stopped (a wait for changes of no time carries it)."""
        report = self._caller.report
        if report is not None:
            last = replace(report(), running=0, stopped=True)
            self._caller.set_report(lambda: last)
            await self.changes.wait(self.changes.generation, 0)

    async def start(self) -> None:
        """Open the connection pools (what entering ``async with`` does)."""
        await self._caller.start()

    async def stop(self) -> None:
        """Close the connection pools."""
        await self._caller.stop()

    async def call(self, verb: str, body: object, answer: type[T], *, wait: float = 0.0) -> T:
        """POST ``body`` to the queue's route ``verb`` (a long poll waits ``wait`` seconds); return
        the answer decoded as ``answer`` (see ``ServiceCaller.call`` for failover).

        Raises
        ------
        JQueueError or ValueError
            For an error of the queue, the exception the queue itself raised (``error_codes``).
        ServiceError
            For another answer that is not 2xx, or no broker within ``failover_timeout``.
        """
        return (await self._caller.call(verb, body, answer, wait))[0]

    async def _enqueue_specs(self, specs: list[JobSpec]) -> list[Job]:
        """Enqueue with the other enqueues in flight meanwhile, in one request (one commit)."""
        # every job gets its id here, so that a repeated request does not add it twice
        jobs = [new_job(spec, spec.id or new_job_id()) for spec in specs]
        return await self._enqueues.call("enqueue", jobs)

    async def _send_enqueues(self, _: str, calls: list[list[NewJob]]) -> list[list[Job] | BaseException]:
        try:
            jobs = await self._enqueue_request([job for call in calls for job in call])
        except (JQueueError, ValueError) as exc:
            if len(calls) == 1 or (status_of(exc) or 0) // 100 != 4:
                raise
            # a job of one call was refused (too large, say): each call on its own, so that
            # the others do not share its error
            return [await _outcome(self._enqueue_request(call)) for call in calls]
        answers: list[list[Job] | BaseException] = []
        for call in calls:
            answers.append(jobs[: len(call)])
            jobs = jobs[len(call) :]
        return answers

    async def _enqueue_request(self, jobs: list[NewJob]) -> list[Job]:
        answer = await self.call("enqueue", EnqueueRequest(jobs), JobsResponse)
        return [job_of(job) for job in answer.jobs]

    @mirrors(JobQueue.dequeue)
    async def dequeue(self, arguments: dict[str, Any]) -> list[Job]:
        """Claim up to ``batch_size`` jobs, best priority first (see ``JobQueue.dequeue``).

        Claims of the same entrypoints made while another claim is in flight go in one
        request, and its jobs are shared out in the order of the calls; one request claims
        at most ``MAX_BATCH`` jobs.
        """
        batch_size: int = arguments["batch_size"]
        BATCH_SIZE.check("batch_size", batch_size)
        if batch_size == 0:  # claims nothing, as a local queue's dequeue
            return []
        entrypoints = _entrypoints(arguments["entrypoint"])
        key = (None if entrypoints is None else tuple(entrypoints), _seconds(arguments["visibility_timeout"]))
        return await self._claims.call(key, batch_size)

    async def _send_claims(self, key: ClaimRequestKey, sizes: list[int]) -> list[list[Job]]:
        entrypoints, seconds = key
        request = DequeueRequest(
            entrypoints=None if entrypoints is None else list(entrypoints),
            batch_size=min(sum(sizes), MAX_BATCH),
            visibility_timeout_seconds=seconds,
        )
        answer = await self.call("dequeue", request, JobsResponse)
        jobs = iter([job_of(job) for job in answer.jobs])
        return [list(itertools.islice(jobs, size)) for size in sizes]

    async def peek(self, entrypoint: str | Collection[str] | None = None, limit: int = 1) -> list[Job]:
        """Return the jobs ``dequeue`` would claim now, claiming none."""
        request = PeekRequest(entrypoints=_entrypoints(entrypoint), limit=limit)
        answer = await self.call("peek", request, JobsResponse)
        return [job_of(job) for job in answer.jobs]

    async def _settle(self, verb: str, ref: JobRef, options: dict[str, Any] | None = None) -> bool:
        """Send a settling call, with the others of the same verb and options in flight meanwhile;
        returns whether a ``cancel`` cancelled the job at once."""
        return await self._settles.call((verb, tuple(sorted((options or {}).items()))), ref)

    async def _send_settles(self, key: SettleRequestKey, refs: list[JobRef]) -> list[BaseException | bool]:
        verb, options = key
        request = SettleRequest(jobs=refs, **dict(options))
        answer, repeated = await self._caller.call(verb, request, ResultsResponse)
        return [
            await self._settled(verb, ref, result, repeated)
            for ref, result in zip(refs, answer.results, strict=True)
        ]

    async def _settled(
        self, verb: str, ref: JobRef, result: ItemResult, repeated: bool
    ) -> BaseException | bool:
        """The outcome of one job's settling call: whether a ``cancel`` cancelled it at once, or the
        error; an ack repeated after an attempt that got no answer (a failover) that finds its
        job gone succeeded if the job ended acked."""
        if result.error is None:
            return result.cancelled
        if repeated and verb == "ack" and await self._acked(ref):
            return False  # the attempt that got no answer landed
        return raised(result.error)

    @mirrors(JobQueue.ack_and_dequeue)
    async def ack_and_dequeue(self, arguments: dict[str, Any]) -> tuple[list[JQueueError | None], list[Job]]:
        """Ack each of ``acks`` and claim up to ``batch_size`` jobs in one request, one commit (see
        ``JobQueue.ack_and_dequeue``). A service older than this call answers it 404; then, and
        from then on, the acks and the claim go as ``ack`` and ``dequeue`` calls."""
        acks, entrypoint, batch_size = arguments["acks"], arguments["entrypoint"], arguments["batch_size"]
        visibility_timeout = arguments["visibility_timeout"]
        BATCH_SIZE.check("batch_size", batch_size)
        if self._acks_with_claims:
            refs = [_ref(job, result=None if result is None else bytes(result)) for job, result in acks]
            request = AckAndDequeueRequest(
                acks=refs,
                entrypoints=_entrypoints(entrypoint),
                batch_size=min(batch_size, MAX_BATCH),
                visibility_timeout_seconds=_seconds(visibility_timeout),
            )
            try:
                answer, repeated = await self._caller.call(ACK_AND_DEQUEUE, request, AckAndDequeueResponse)
            except ServiceError as exc:
                if (exc.status, exc.code) != (NOT_FOUND.status, NOT_FOUND.code):
                    raise
                self._acks_with_claims = False
            else:
                settled = [
                    await self._settled("ack", ref, result, repeated)
                    for ref, result in zip(refs, answer.results, strict=True)
                ]
                return [_ack_error(outcome) for outcome in settled], [job_of(job) for job in answer.jobs]
        answers = await asyncio.gather(
            *(self.ack(job, result=result) for job, result in acks), return_exceptions=True
        )
        outcomes = [_ack_error(answer) for answer in answers]
        try:
            jobs = await self.dequeue(
                entrypoint, batch_size=batch_size, visibility_timeout=visibility_timeout
            )
        except JQueueError:
            jobs = []  # the acks landed: their answers stand, and the claim is asked again
        return outcomes, jobs

    async def _acked(self, ref: JobRef) -> bool:
        """Whether the job ended acked (under the claim of ``ref``'s lease, when it has one): what
        an ack repeated after an attempt that got no answer (a failover) learns when its job is
        gone or its lease lost."""
        try:
            found = await self.call(
                "result", ResultRequest(id=ref.id, wait_seconds=0, lease=ref.lease), ResultResponse
            )
        except JQueueError:
            return False
        return found.outcome == JobStatus.ACKED

    async def ack(self, job_id: Job | str, *, result: bytes | None = None) -> None:
        """Remove a finished job (fenced when given the claimed ``Job``), keeping its handler's
        ``result`` in its history record."""
        await self._settle("ack", _ref(job_id, result=None if result is None else bytes(result)))

    @mirrors(JobQueue.nack)
    async def nack(self, arguments: dict[str, Any]) -> None:
        """Return a claimed job to the queue after a wait, or to the dead letters (at once with
        ``dead``)."""
        ref = _ref(arguments.pop("job_id"))
        await self._settle("nack", ref, {"delay_seconds": _seconds(arguments.pop("delay")), **arguments})

    async def release(self, job_id: Job | str) -> None:
        """Return a claimed job to the queue at once, not as a failure."""
        await self._settle("release", _ref(job_id))

    async def heartbeat(
        self, job_id: Job | str, *, progress: float | None = None, note: str | None = None
    ) -> None:
        """Record that the worker on a job is alive, extending its lease, and with ``progress``
        how far the job got (``JobCancelledError`` if its cancel was asked for)."""
        if progress is None:
            await self._settle("heartbeat", _ref(job_id))
        else:
            fraction, text = checked_progress(progress, note)
            await self._settle("heartbeat", _ref(job_id, progress=fraction, note=text))

    async def cancel_requested(self, job_id: Job | str) -> bool:
        """Whether the job's cancel was asked for: asked by a heartbeat, which the broker folds
        into its next commit with the others."""
        try:
            await self.heartbeat(job_id)
        except JobCancelledError:
            return True
        return False

    async def cancel(self, job_id: Job | str) -> bool:
        """Cancel a job; True if it left the queue at once, False if its worker is asked to stop
        it (see ``JobQueue.cancel``)."""
        return await self._settle("cancel", _ref(job_id))

    async def result(self, job_id: str, timeout: timedelta | None = None) -> bytes | None:  # noqa: ASYNC109
        """Wait until job ``job_id`` is finished and return what its handler returned (see
        ``JobQueue.result``; the service waits for it, in long polls)."""
        deadline = None if timeout is None else time.monotonic() + timeout.total_seconds()
        while True:
            left = MAX_WAIT_SECONDS if deadline is None else max(0.0, deadline - time.monotonic())
            request = ResultRequest(id=job_id, wait_seconds=min(left, MAX_WAIT_SECONDS))
            answer = await self.call("result", request, ResultResponse, wait=request.wait_seconds)
            if answer.outcome == JobStatus.ACKED:
                return answer.result
            if answer.outcome == JobStatus.DEAD:
                raise JobFailedError(job_id, answer.error, answer.reason)
            if answer.outcome == JobStatus.CANCELLED:
                raise JobCancelledError(job_id, answer.error)
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id!r} did not finish within {span(timeout or timedelta(0))}")


class RemoteChanges:
    """The changes of a served queue, learnt by long polls: what ``Worker`` waits on when idle,
    so that a job enqueued anywhere wakes it at once."""

    def __init__(self, queue: RemoteQueue) -> None:
        self._queue = queue
        self.generation = 0

    async def wait(self, seen: int, seconds: float) -> int:
        """Return the service's change count once it is past ``seen``, or after ``seconds``."""
        request = ChangesRequest(seen=seen, wait_seconds=min(max(seconds, 0.0), MAX_WAIT_SECONDS))
        answer = await self._queue.call("changes", request, ChangesResponse, wait=request.wait_seconds)
        self.generation = answer.generation
        return self.generation


def _ack_error(outcome: object) -> JQueueError | None:
    """The error an ack's outcome is (None: acked); another exception is raised."""
    if isinstance(outcome, BaseException) and not isinstance(outcome, JQueueError):
        raise outcome
    return outcome if isinstance(outcome, JQueueError) else None


async def _outcome(call: Awaitable[list[Job]]) -> list[Job] | BaseException:
    try:
        return await call
    except (JQueueError, ValueError) as exc:
        return exc


Key = TypeVar("Key", bound=Hashable)
Item = TypeVar("Item")
Answer = TypeVar("Answer")

SLOW_REQUEST = 0.02
"""Seconds: a request this long makes the next calls of its key go in requests of their own."""
MAX_IN_FLIGHT = Bounds(ge=1)
"""The bounds of ``Coalescer``'s ``max_in_flight``."""

Send = Callable[[Key, list[Item]], Awaitable[Sequence[Answer | BaseException]]]
"""Sends the items of one key in one request; returns an answer (or an error) per item."""


class Coalescer(Generic[Key, Item, Answer]):
    """Folds the calls of one key into shared requests: the calls of one turn of the event
    loop go together, and the calls made while a request of that key is in flight wait and
    go together in the next one. Where requests are slow (the last one of the key took
    ``SLOW_REQUEST`` or more: a commit on S3 or GCS), up to ``max_in_flight`` go at once, so
    that a call does not wait a whole commit for its turn.

    Parameters
    ----------
    send : Send
        Sends one request.
    max_in_flight : int
        The most requests of one key in flight at once when requests are slow.
    """

    def __init__(self, send: Send[Key, Item, Answer], max_in_flight: int = 8) -> None:
        MAX_IN_FLIGHT.check("max_in_flight", max_in_flight)
        self._send = send
        self._max_in_flight = max_in_flight
        self._pending: dict[Key, list[tuple[Item, asyncio.Future[Answer]]]] = {}
        self._senders: dict[Key, set[asyncio.Task[None]]] = {}
        self._slow: dict[Key, bool] = {}

    async def call(self, key: Key, item: Item) -> Answer:
        """Send ``item`` with the other calls of ``key``; return its answer or raise its error."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        pending = self._pending.setdefault(key, [])
        pending.append((item, future))
        senders = self._senders.setdefault(key, set())
        limit = self._max_in_flight if self._slow.get(key) else 1
        if len(pending) == 1 and len(senders) < limit:
            senders.add(asyncio.create_task(self._send_all(key)))
        return await future

    async def _send_all(self, key: Key) -> None:
        try:
            while batch := self._pending.pop(key, []):
                started = time.monotonic()
                try:
                    answers = await self._send(key, [item for item, _ in batch])
                except Exception as exc:  # the request failed: every call in it shares the error
                    answers = [exc] * len(batch)
                self._slow[key] = time.monotonic() - started >= SLOW_REQUEST
                for (_, future), answer in zip(batch, answers, strict=True):
                    if future.done():  # the caller was cancelled
                        continue
                    if isinstance(answer, BaseException):
                        future.set_exception(answer)
                    else:
                        future.set_result(answer)
        finally:
            senders = self._senders[key]
            senders.discard(asyncio.current_task())  # type: ignore[arg-type, unused-ignore]
            if not senders:
                del self._senders[key]
                for _, future in self._pending.pop(key, []):  # cancelled while others waited
                    future.cancel()
