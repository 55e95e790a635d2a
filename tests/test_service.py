"""``jqueue serve`` in a subprocess, called through ``jqueue.connect`` and over raw HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import BUCKET, s3_env
from jqueue import (
    DirectQueue,
    Job,
    JobNotFoundError,
    JobStatus,
    LeaseLostError,
    LocalFileSystemStorage,
    RemoteQueue,
    ServiceError,
    Worker,
    connect,
    sharded,
    storage_from_url,
)
from servers import LOOPBACK, S3Endpoint, free_port, jqueue_serve

pytestmark = pytest.mark.slow


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        yield url, root


def post(url: str, body: bytes, content_type: str = "application/json", **headers: str) -> tuple[int, Any]:
    """POST ``body``; return the status and the decoded JSON answer."""
    request = urllib.request.Request(url, body, {"Content-Type": content_type, **headers}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


async def test_a_served_queue_takes_the_calls_of_a_broker_queue(served: tuple[str, Path]) -> None:
    url, root = served
    async with connect(url, "jobs") as queue:
        assert await queue.dequeue() == []  # as from storage: a queue not made yet has no jobs
        assert await queue.peek() == []
        made = [path for path in root.iterdir() if not path.name.startswith(("_broker", "_member"))]
        assert not made  # no queue: only the broker's records
        with pytest.raises(ServiceError) as missing:
            await queue.ack("no-such-job")
        assert (missing.value.status, missing.value.code) == (404, "queue_not_found")
        added = await queue.enqueue_many("mail", [b"a", b"b", b"\x00\xff"])
        delayed = await queue.enqueue("mail", b"later", priority=-5, delay=timedelta(hours=1), dedup_key="k")
        assert delayed.not_before is not None
        assert (await queue.enqueue("mail", b"other", dedup_key="k")).id == delayed.id
        assert [job.status for job in added] == [JobStatus.QUEUED] * 3
        assert [job.id for job in await queue.peek("mail", 5)] == [job.id for job in added]
        first, second = await queue.dequeue("mail", batch_size=2)
        assert (first.payload, second.payload) == (b"a", b"b")
        assert first.lease is not None
        await queue.heartbeat(first)
        await queue.ack(first)
        await queue.nack(second, error="boom", delay=timedelta(0))
        with pytest.raises(LeaseLostError):
            await queue.ack(first)  # fenced: its lease is gone with it
        with pytest.raises(JobNotFoundError):
            await queue.ack(first.id)
    async with DirectQueue(LocalFileSystemStorage(root / "jobs.json")) as direct:  # the storage is the truth
        state = await direct.read_state()
    by_id = {job.id: job for job in state.jobs}
    assert first.id not in by_id
    assert by_id[second.id].last_error == "boom"
    assert by_id[added[2].id].payload == b"\x00\xff"
    assert len(state.jobs) == 3


@pytest.mark.parametrize("route", ["served", "missing"])
async def test_a_client_acks_and_claims_in_one_request_or_as_two_calls_where_the_route_is_missing(
    served: tuple[str, Path], route: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, root = served
    if route == "missing":  # as a service older than the route answers it: 404 not_found
        monkeypatch.setattr("jqueue.adapters.service.client.remote_queue.ACK_AND_DEQUEUE", "no-such-route")
    async with connect(url, "pairs") as queue:
        await queue.enqueue_many("work", [b"a", b"b", b"c"])
        a, b = await queue.dequeue("work", batch_size=2)
        await queue.nack(b.id)
        async with DirectQueue(LocalFileSystemStorage(root / "pairs.json")) as direct:
            before = (await direct.read_state()).version
        for attempt in range(2):  # the second call takes the path the first one learnt
            outcomes, claimed = await queue.ack_and_dequeue(
                [(a, b"done"), (b, None)] if attempt == 0 else [], "work", batch_size=5
            )
            if attempt == 0:
                assert [type(outcome) for outcome in outcomes] == [type(None), LeaseLostError]
                assert sorted(job.payload for job in claimed) == [b"b", b"c"]
            else:
                assert (outcomes, claimed) == ([], [])
        async with DirectQueue(LocalFileSystemStorage(root / "pairs.json")) as direct:
            state = await direct.read_state()
        assert state.version == before + (1 if route == "served" else 2)
        assert {job.status for job in state.jobs} == {JobStatus.IN_PROGRESS}
        assert await queue.result(a.id) == b"done"


async def test_a_worker_runs_jobs_through_the_service(served: tuple[str, Path]) -> None:
    url, root = served
    ran: list[bytes] = []
    async with connect(url, "work") as queue:
        await queue.enqueue_many("task", [b"%d" % n for n in range(40)])
        worker = Worker(queue, concurrency=8)

        @worker.handler("task")
        async def handle(job: Job) -> None:
            if job.payload == b"7" and job.attempts == 1:
                raise RuntimeError("the first attempt fails")
            ran.append(job.payload)

        stats = await worker.run(until_empty=True, install_signals=False)
    assert sorted(ran) == sorted(b"%d" % n for n in range(40))
    assert stats.failed == 1
    async with DirectQueue(LocalFileSystemStorage(root / "work.json")) as direct:
        assert (await direct.read_state()).jobs == ()


def jobs_body(**options: Any) -> bytes:
    """An enqueue body of one job with these options (``count`` copies of it)."""
    count = options.pop("count", 1)
    return json.dumps({"jobs": [{"entrypoint": "e", "payload": "aGk=", **options}] * count}).encode()


BAD_REQUESTS: list[tuple[str, bytes, int, str | None]] = [
    ("q/enqueue", b"{not json", 400, "bad_body"),
    ("q/enqueue", b'{"jobs": [{"entrypoint": "e"}]}', 400, "bad_body"),
    ("q/enqueue", jobs_body(payload="%%"), 400, "bad_body"),
    ("q/enqueue", b'{"jobs": [], "extra": 1}', 400, "bad_body"),
    ("q/enqueue", jobs_body(priority=2**70), 400, "bad_body"),
    ("q/enqueue", jobs_body(delay_seconds=1, not_before="2030-01-01T00:00:00Z"), 400, "invalid_argument"),
    ("q/enqueue", jobs_body(count=100), 413, "body_too_large"),
    ("q/dequeue", b'{"batch_size": 0}', 400, "bad_body"),
    ("nope/ack", b'{"jobs": [{"id": "x"}]}', 404, "queue_not_found"),
    ("nope/dequeue", b"{}", 200, None),  # nothing to claim, and nothing made
    ("a.b/dequeue", b"{}", 400, "bad_queue_name"),
    ("q/frobnicate", b"{}", 404, "not_found"),
]


def test_bad_requests_are_answered_with_their_status_and_change_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log", options=["--max-body-bytes", "2000"]) as url:
        base = f"{url}/v1/queues"
        assert post(f"{base}/q/enqueue", jobs_body())[0] == 200
        segments = root / "q.json.segments"
        before = segments.stat().st_mtime_ns, sorted(p.name for p in root.iterdir())
        for path, body, status, code in BAD_REQUESTS:
            answer = post(f"{base}/{path}", body)
            assert (answer[0], answer[1].get("error", {}).get("code")) == (status, code), (path, answer)
        form = post(f"{base}/q/enqueue", b"jobs=1", "application/x-www-form-urlencoded")
        assert (form[0], form[1]["error"]["code"]) == (415, "unsupported_media_type")
        assert (segments.stat().st_mtime_ns, sorted(p.name for p in root.iterdir())) == before
        status, answer = post(f"{base}/q/ack", b'{"jobs": [{"id": "missing"}, {"id": "x", "lease": "y"}]}')
        assert status == 200
        assert [r["error"]["code"] for r in answer["results"]] == ["job_not_found", "lease_lost"]


def test_a_token_is_required_when_set_and_off_the_loopback(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log", options=["--token", "s3cret"]) as url:
        body = json.dumps({"jobs": [{"entrypoint": "e", "payload": ""}]}).encode()
        assert post(f"{url}/v1/queues/q/enqueue", body)[0] == 401
        assert post(f"{url}/v1/queues/q/enqueue", body, Authorization="Bearer wrong")[0] == 401
        assert not (root / "q.json").exists()
        assert post(f"{url}/v1/queues/q/enqueue", body, Authorization="Bearer s3cret")[0] == 200
        with pytest.raises(urllib.error.HTTPError) as refused_scrape:
            scrape(url)
        assert refused_scrape.value.code == 401
        assert scrape(url, Authorization="Bearer s3cret")
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "jqueue",
            "serve",
            "--storage",
            str(root),
            "--listen",
            f"0.0.0.0:{free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1
    assert "needs a token" in refused.stderr
    missing = subprocess.run(
        [
            sys.executable,
            "-m",
            "jqueue",
            "serve",
            "--storage",
            str(root / "typo"),
            "--listen",
            f"{LOOPBACK}:1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode == 1
    assert "is not a directory" in missing.stderr


def test_answers_in_messagepack_and_json_agree(served: tuple[str, Path]) -> None:
    url, _ = served
    status, answer = post(f"{url}/v1/queues/mp/enqueue", jobs_body(payload="AQI=", priority=3))
    assert status == 200
    job_id = answer["jobs"][0]["id"]
    status, answer = post(f"{url}/v1/queues/mp/peek", b'{"limit": 5}')
    assert status == 200
    [wire] = answer["jobs"]
    assert (wire["id"], wire["payload"], wire["priority"], wire["status"]) == (job_id, "AQI=", 3, "queued")
    request = urllib.request.Request(
        f"{url}/v1/queues/mp/peek",
        msgspec.msgpack.encode({"limit": 5}),
        {"Content-Type": "application/msgpack", "Accept": "application/msgpack"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.headers["Content-Type"].startswith("application/msgpack")
        [packed] = msgspec.msgpack.decode(response.read())["jobs"]
    assert (packed["id"], packed["payload"]) == (job_id, b"\x01\x02")


async def test_a_served_s3_root(tmp_path: Path, moto: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    env = s3_env(moto)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, env[name])
    prefix = f"served-{uuid.uuid4().hex}"
    root = f"s3://{BUCKET}/{prefix}?endpoint_url={moto.url}&region={moto.region}"
    with jqueue_serve(root, tmp_path / "serve.log", env=env) as url:
        async with RemoteQueue(url, "jobs") as queue:
            await queue.enqueue_many("e", [b"1", b"2"])
            [claimed] = await queue.dequeue()
            await queue.ack(claimed)
    storage = storage_from_url(
        f"s3://{BUCKET}/{prefix}/jobs.json?endpoint_url={moto.url}&region={moto.region}"
    )
    async with DirectQueue(storage) as direct:
        assert [job.payload for job in (await direct.read_state()).jobs] == [b"2"]


async def test_an_idle_client_learns_of_a_new_job_by_a_long_poll(served: tuple[str, Path]) -> None:
    url, _ = served
    async with connect(url, "poll") as producer, connect(url, "poll") as consumer:
        await producer.enqueue("e", b"creates the queue")
        seen = await consumer.changes.wait(-1, 0)  # the service's count, at once
        assert await consumer.changes.wait(seen, 0.2) == seen  # nothing happened: it timed out
        waiting = asyncio.create_task(consumer.changes.wait(seen, 20))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        started = time.monotonic()
        await producer.enqueue("e", b"new")
        assert await asyncio.wait_for(waiting, 10) != seen
        assert time.monotonic() - started < 5  # woken by the commit, not by the 20 s limit


def scrape(url: str, **headers: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of ``GET /metrics``, by name and labels."""
    request = urllib.request.Request(f"{url}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=30) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_metrics_count_what_the_service_did(served: tuple[str, Path]) -> None:
    url, _ = served
    async with connect(url, "m") as queue:
        await queue.enqueue_many("mail", [b"1", b"2", b"3"])
        first, second = await queue.dequeue(batch_size=2)
        await queue.ack(first)
        with pytest.raises(JobNotFoundError):
            await queue.ack(first.id)
        assert len(await queue.dequeue("nothing-here")) == 0
        await queue.nack(second, max_attempts=1)  # its last attempt: dead
        assert len(await queue.dequeue(visibility_timeout=timedelta(milliseconds=100))) == 1
        await asyncio.sleep(0.3)
        await queue.enqueue("mail", b"4")  # this commit finds the third's lease run out
    with pytest.raises(ServiceError):
        async with connect(url, "no-such-queue") as missing:
            await missing.ack("no-such-job")
    samples = scrape(url)
    mail = (("entrypoint", "mail"), ("queue", "m"))
    assert samples[("jqueue_jobs_total", (("action", "enqueued"), *mail))] == 4
    assert samples[("jqueue_jobs_total", (("action", "claimed"), *mail))] == 3
    queue_m = (("queue", "m"),)
    assert samples[("jqueue_dead_jobs_total", queue_m)] == 1
    assert samples[("jqueue_expired_leases_total", queue_m)] == 1
    assert samples[("jqueue_conflicts_total", queue_m)] == 0
    assert samples[("jqueue_commit_seconds_count", queue_m)] >= 6
    assert (
        samples[("jqueue_commit_conflicts_bucket", (("le", "0"), ("queue", "m")))]
        == samples[("jqueue_commit_conflicts_count", queue_m)]
    )
    assert samples[("jqueue_settled_total", (("action", "ack"), ("queue", "m")))] == 1
    error = (("code", "job_not_found"), ("queue", "m"), ("route", "ack"))
    assert samples[("jqueue_settle_errors_total", error)] == 1
    assert samples[("jqueue_empty_polls_total", (("queue", "m"),))] == 1
    backlog = {
        status: samples[("jqueue_backlog", (("entrypoint", "mail"), ("queue", "m"), ("status", status)))]
        for status in ("queued", "in_progress", "dead")
    }
    assert backlog == {"queued": 2, "in_progress": 0, "dead": 1}
    assert samples[("jqueue_requests_total", (("queue", ""), ("route", "ack"), ("status", "404")))] == 1
    assert samples[("jqueue_request_seconds_count", (("route", "enqueue"),))] == 2


async def test_the_metrics_of_a_sharded_queue_add_its_shards_up(served: tuple[str, Path]) -> None:
    url, _ = served
    async with sharded(url, "wide", 3, broker="require") as queue:
        await queue.enqueue_many("mail", [b"%d" % n for n in range(30)])
        for job in await queue.dequeue(batch_size=4):
            await queue.ack(job)
        spread = [len(await shard.jobs(limit=None)) for shard in queue.shards]
    assert min(spread) > 0  # the jobs went to every shard
    samples = scrape(url)
    assert not [labels for _, labels in samples if ("queue", "wide.shard-1") in labels]
    mail = (("entrypoint", "mail"), ("queue", "wide"))
    assert samples[("jqueue_jobs_total", (("action", "enqueued"), *mail))] == 30
    assert samples[("jqueue_backlog", (*mail, ("status", "queued")))] == 26
    assert samples[("jqueue_commit_seconds_count", (("queue", "wide"),))] >= 4


def test_a_repeated_enqueue_request_adds_its_jobs_once(served: tuple[str, Path]) -> None:
    url, _ = served
    body = jobs_body(id="client-chosen-1")
    first, again = post(f"{url}/v1/queues/ids/enqueue", body), post(f"{url}/v1/queues/ids/enqueue", body)
    assert first[0] == again[0] == 200
    assert first[1]["jobs"][0]["id"] == again[1]["jobs"][0]["id"] == "client-chosen-1"
    _, peeked = post(f"{url}/v1/queues/ids/peek", b'{"limit": 10}')
    assert [job["id"] for job in peeked["jobs"]] == ["client-chosen-1"]


async def test_concurrent_enqueues_share_a_request_and_a_refused_one_fails_alone(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log", options=["--max-body-bytes", "30000"]) as url:
        async with connect(url, "shared") as queue:
            await queue.enqueue("warm", b"")
            small = await asyncio.gather(*(queue.enqueue("e", f"{n}".encode()) for n in range(20)))
            assert [job.payload for job in small] == [f"{n}".encode() for n in range(20)]
            samples = scrape(url)
            requests = samples[("jqueue_request_jobs_count", (("route", "enqueue"),))]
            assert requests <= 3, f"20 concurrent enqueues took {requests - 1:g} requests"
            big = [queue.enqueue("e", b"x" * 8_000) for _ in range(4)]  # together over the limit
            huge = queue.enqueue("e", b"y" * 40_000)  # alone over it
            *fine, refused = await asyncio.gather(*big, huge, return_exceptions=True)
            assert all(isinstance(job, Job) for job in fine), fine
            assert isinstance(refused, ServiceError)
            assert (refused.status, refused.code) == (413, "body_too_large")
            assert len(await queue.peek(limit=100)) == 1 + 20 + 4
