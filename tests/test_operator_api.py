"""The native API's operator calls, through a real ``jqueue serve``: each ``RemoteQueue`` call
answers what the same ``JobQueue`` call answers on the queue's storage, and each control call
reaches the queue."""

from __future__ import annotations

import inspect
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from jqueue import DirectQueue, JobNotFoundError, LocalFileSystemStorage, ServiceError, connect
from jqueue.adapters.service.client.remote_operator import _binder
from jqueue.adapters.service.client.remote_queue import RemoteQueue
from jqueue.adapters.service.wire.operator_calls import OPERATOR_CALLS, JobsRequest, request_of
from jqueue.core.queue import JobQueue
from jqueue.domain.models import JobStatus
from servers import jqueue_serve

pytestmark = pytest.mark.slow


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[RemoteQueue, DirectQueue, str]]:
    """A queue ``shop`` with queued, scheduled, dead, acked and cancelled jobs, through the
    service and on its storage; and the service's URL."""
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        async with (
            connect(url, "shop") as queue,
            DirectQueue(LocalFileSystemStorage(root / "shop.json")) as direct,
        ):
            assert isinstance(queue, RemoteQueue)
            await queue.enqueue("mail", b"one", dedup_key="k1")
            await queue.enqueue("mail", b"later", delay=timedelta(hours=1))
            await queue.enqueue("sms", b"fails")
            await queue.enqueue("sms", b"done")
            await queue.enqueue("sms", b"drop")
            [failing] = await queue.dequeue("sms")
            await queue.nack(failing, error="ValueError: no", dead=True)
            [done] = await queue.dequeue("sms")
            await queue.ack(done, result=b"42")
            [dropped] = await queue.peek("sms")
            assert await queue.cancel(dropped.id) is True
            yield queue, direct, url


async def test_every_read_answers_what_the_queue_answers(
    served: tuple[RemoteQueue, DirectQueue, str],
) -> None:
    remote, direct, _ = served
    assert await remote.stats() == await direct.stats()
    stats = await remote.stats()
    assert (stats.entrypoints["mail"].queued, stats.entrypoints["mail"].scheduled) == (1, 1)
    assert stats.entrypoints["sms"].dead == 1
    for status in (None, JobStatus.QUEUED, JobStatus.DEAD):
        assert await remote.jobs(status) == await direct.jobs(status)
        assert await remote.count(status) == await direct.count(status)
    assert [job.payload for job in await remote.jobs(entrypoint="mail", limit=1)] == [b"one"]
    assert await remote.dead_letters() == await direct.dead_letters()
    assert [job.last_error for job in await remote.dead_letters("sms")] == ["ValueError: no"]
    history = await remote.history()
    assert history == await direct.history()
    assert [(h.outcome, h.result) for h in history] == [
        (JobStatus.DEAD, None),
        (JobStatus.ACKED, b"42"),
        (JobStatus.CANCELLED, None),
    ]
    assert await remote.history(outcome=JobStatus.ACKED, limit=5) == history[1:2]
    assert await remote.history(entrypoint="mail") == []
    assert await remote.finished(history[1].job_id) == history[1]
    assert await remote.finished("no-such-job") is None
    first = (await direct.jobs())[0]
    assert await remote.find(first.id) == first
    assert await remote.find("no-such-job") is None
    page, cursor = await remote.browse(limit=2)
    assert (page, cursor) == await direct.browse(limit=2)
    rest, end = await remote.browse(cursor=cursor or 0, limit=50)
    assert end is None
    assert [job.id for job in page + rest] == [job.id for job in await direct.jobs()]
    assert await remote.browse(dedup_key="k1") == await direct.browse(dedup_key="k1")
    assert await remote.queue_names() == ["shop"]
    for part in ((0, 2), (1, 2)):
        assert await remote.jobs(part=part) == await direct.jobs(part=part)
    assert len(await remote.jobs(part=(0, 2))) < len(await remote.jobs())
    with pytest.raises(ValueError, match="part"):
        await direct.jobs(part=(2, 2))


def test_every_operator_body_carries_exactly_its_calls_parameters() -> None:
    """A parameter the body lacks would be dropped on the way (the remote call takes the
    method's signature); a field the method lacks is one another call of the body takes."""
    bodies: dict[type[msgspec.Struct], set[str]] = {}
    for call in OPERATOR_CALLS:
        taken = set(inspect.signature(getattr(JobQueue, call.verb)).parameters) - {"self"}
        fields = {name.removesuffix("_seconds") for name in call.request.__struct_fields__}
        assert taken <= fields, (call.verb, taken - fields)
        bodies.setdefault(call.request, set()).update(taken)
    for body, taken in bodies.items():
        fields = {name.removesuffix("_seconds") for name in body.__struct_fields__}
        assert fields == taken, (body.__name__, fields - taken)
    with pytest.raises(TypeError, match="no field for"):
        request_of(JobsRequest, {"status": None, "nonsense": 1})


def _every_kind(
    self: object, a: int, /, b: int = 1, *args: int, c: int, _default_b: int = 2, **kw: int
) -> None:
    """Parameters of every kind, and one named as the binder names its defaults."""


def test_a_remote_call_binds_its_arguments_as_the_queue_method_does() -> None:
    """Each mirrored call's generated binder takes what ``inspect.Signature.bind`` takes and
    gives the same arguments, defaults filled in; a call that does not fit is refused as the
    method refuses it."""
    calls: list[tuple[tuple[object, ...], dict[str, object]]] = [
        ((), {}), (("a",), {}), (("a", "b"), {}), (("a", "b", "c"), {}), ((), {"limit": 3}),
        (("a",), {"batch_size": 2}), ((), {"visibility_timeout": None, "entrypoint": "x"}),
        ((), {"nonsense": 1}), (("a", "b", "c", "d", "e", "f", "g"), {}),
    ]  # fmt: skip
    mirrored = [getattr(RemoteQueue, name) for name in ("dequeue", "nack", "ack_and_dequeue")]
    mirrored += [getattr(RemoteQueue, call.verb) for call in OPERATOR_CALLS]
    locals_ = [getattr(JobQueue, method.__name__) for method in mirrored] + [_every_kind]
    calls += [((1, 2, 3), {"c": 4, "d": 5}), ((1,), {"c": 0, "_default_b": 9}), ((), {"a": 1, "c": 2})]
    for local in locals_:
        signature = inspect.signature(local)
        binder = _binder(local.__name__, signature)
        for args, kwargs in calls:
            try:
                bound = signature.bind("self", *args, **kwargs)
            except TypeError:
                with pytest.raises(TypeError, match=rf"^{local.__name__}\(\)"):
                    binder("self", *args, **kwargs)
                continue
            bound.apply_defaults()
            expected = dict(bound.arguments)
            del expected["self"]
            assert binder("self", *args, **kwargs) == expected, (local.__name__, args, kwargs)


async def test_every_control_reaches_the_queue(served: tuple[RemoteQueue, DirectQueue, str]) -> None:
    remote, direct, _ = served
    await remote.pause("mail", enqueues=True)
    await remote.throttle(5, timedelta(seconds=2), "sms")
    await remote.limit(None, 3)
    stats = await direct.stats()
    assert (stats.paused_claims, stats.paused_enqueues) == (["mail"], ["mail"])
    assert (stats.throttles, stats.limits) == ({"sms": (5, 2.0)}, {None: 3})
    assert await remote.stats() == stats
    await remote.resume("mail")
    await remote.throttle(None, timedelta(seconds=1), "sms")
    await remote.limit(None, None)
    stats = await direct.stats()
    assert (stats.paused_claims, stats.throttles, stats.limits) == ([], {}, {})

    [dead] = await direct.dead_letters()
    assert await remote.requeue_dead() == 1
    assert (await direct.find(dead.id)).status is JobStatus.QUEUED  # type: ignore[union-attr]
    later = next(job for job in await direct.jobs() if job.payload == b"later")
    assert await remote.requeue([later.id]) == 1
    assert [job.id for job in await direct.peek("mail", limit=5)][-1] == later.id
    assert await remote.purge(JobStatus.QUEUED, "sms") == 1
    assert await remote.purge(None, ids=[later.id, "no-such-job"]) == 1
    assert [job.payload for job in await direct.jobs()] == [b"one"]


async def test_errors_keep_their_codes(served: tuple[RemoteQueue, DirectQueue, str]) -> None:
    remote, _, url = served
    async with RemoteQueue(url, "missing") as missing:
        with pytest.raises(ServiceError) as unknown:
            await missing.stats()
        assert (unknown.value.status, unknown.value.code) == (404, "queue_not_found")
        await missing.pause()  # a control may come before the first job: it makes the queue
        assert "missing" in await missing.queue_names()
    with pytest.raises(JobNotFoundError) as not_found:
        await remote.requeue(["no-such-job"])
    assert not_found.value.job_id == "no-such-job"
    with pytest.raises(ServiceError) as bad:
        await remote.call("throttle", {"limit": 1, "per_seconds": 0}, msgspec.Struct)
    assert (bad.value.status, bad.value.code) == (400, "bad_body")
    with pytest.raises(ServiceError) as extra:
        await remote.call("stats", {"surprise": 1}, msgspec.Struct)
    assert extra.value.code == "bad_body"


async def test_the_operator_routes_need_the_token(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    env = os.environ | {"JQUEUE_TOKEN": "s3cret"}
    with jqueue_serve(str(root), tmp_path / "serve.log", env=env) as url:
        async with RemoteQueue(url, "q", token="s3cret") as allowed:
            await allowed.enqueue("e", b"x")
            assert await allowed.queue_names() == ["q"]
        async with RemoteQueue(url, "q", token="wrong") as refused:
            for call in (refused.queue_names(), refused.stats(), refused.pause()):
                with pytest.raises(ServiceError) as caught:
                    await call
                assert caught.value.status == 401
