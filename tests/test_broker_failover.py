"""Two ``jqueue serve`` processes on one root: with ``--standby``, one serves, the other stands by
and takes over; the root's broker record (the front door of clients that know only the root)
is kept by members too."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jqueue import BrokerQueue, DirectQueue, LocalFileSystemStorage, RemoteQueue, ServiceError, connect
from jqueue.adapters.service.client.connection import Broker
from servers import jqueue_serve
from test_service import scrape

pytestmark = pytest.mark.slow

FAST = ["--renew-every", "0.2", "--stale-after", "1"]
STANDBY = [*FAST, "--standby"]
"""A broker of the old kind: one serves the whole root, a second stands by (not the default)."""


def get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=10) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def enqueue(url: str) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"jobs": [{"entrypoint": "e", "payload": ""}]}).encode()
    request = urllib.request.Request(
        f"{url}/v1/queues/q/enqueue", body, {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def broker_gauges(url: str) -> tuple[float, float, float]:
    """The epoch, active and standby gauges of ``GET /metrics``."""
    samples = scrape(url)
    role = "jqueue_broker_role"
    active, standby = samples[(role, (("role", "active"),))], samples[(role, (("role", "standby"),))]
    return samples[("jqueue_broker_epoch", ())], active, standby


def wait_for(condition: Any, seconds: float) -> float:
    """Poll ``condition`` until it holds; return how long that took (fails after ``seconds``)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < seconds, f"not within {seconds} s"
        time.sleep(0.05)
    return time.monotonic() - started


def test_a_standby_refuses_calls_then_takes_over_when_the_broker_dies(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "first.log", options=STANDBY) as first:
        wait_for(lambda: get(f"{first}/healthz")["role"] == "active", 10)
        with jqueue_serve(str(root), tmp_path / "second.log", options=STANDBY) as second:
            time.sleep(1.5)  # longer than stale_after: the first keeps its record fresh
            health = get(f"{second}/healthz")
            assert (health["role"], health["broker"]) == ("standby", first)
            assert broker_gauges(second) == (1, 0, 1)
            assert broker_gauges(first) == (1, 1, 0)
            status, answer = enqueue(second)
            assert (status, answer["error"]["code"], answer["error"]["broker"]) == (503, "not_broker", first)
            assert enqueue(first)[0] == 200
            pid = get(f"{first}/healthz")["pid"]
            os.kill(pid, signal.SIGKILL)
            took = wait_for(lambda: enqueue(second)[0] == 200, 15)
            health = get(f"{second}/healthz")
            assert (health["role"], health["broker"], health["epoch"]) == ("active", second, 2)
            assert broker_gauges(second) == (2, 1, 0)
    assert took < 10  # about 1.5 s with stale-after 1 s; generous for a loaded machine
    record = json.loads((root / "_broker.json").read_text())
    assert (record["address"], record["epoch"]) == (second, 2)


@pytest.mark.parametrize("options", [STANDBY, FAST], ids=["standby", "member"])
def test_a_corrupt_broker_record_is_reported_and_left_alone(tmp_path: Path, options: list[str]) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "_broker.json").write_text("not a record")
    with jqueue_serve(str(root), tmp_path / "serve.log", options=options) as url:
        time.sleep(1.5)
        assert get(f"{url}/healthz")["role"] == "standby"
        # a standby serves nothing; a member serves its queues, which the members record gives it
        assert enqueue(url)[0] == (503 if "--standby" in options else 200)
    assert (root / "_broker.json").read_text() == "not a record"
    assert "not a broker record" in (tmp_path / "serve.log").read_text()


def test_a_member_refuses_calls_while_the_members_record_is_corrupt_and_leaves_it_alone(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "_brokers.json").write_text("not a record")
    with jqueue_serve(str(root), tmp_path / "serve.log", options=FAST) as url:
        status, answer = enqueue(url)
        assert (status, answer["error"]["code"]) == (503, "not_owner")
        assert "not a members record" in answer["error"]["message"]
        assert str(root / "_brokers.json") in answer["error"]["message"]
        health = get(f"{url}/healthz")
        assert (health["serving"], health["members"]) == (False, {})
        (root / "_brokers.json").unlink()  # mended: the member joins at its next look
        wait_for(lambda: enqueue(url)[0] == 200, 10)
        assert get(f"{url}/healthz")["serving"] is True


async def test_a_client_of_the_root_follows_the_broker_to_its_standby(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "first.log", options=STANDBY) as first:
        wait_for(lambda: get(f"{first}/healthz")["role"] == "active", 10)
        with jqueue_serve(str(root), tmp_path / "second.log", options=STANDBY) as second:
            async with connect(str(root), "q") as queue:
                assert isinstance(queue, RemoteQueue)
                added = await queue.enqueue_many("e", [b"1", b"2"])
                os.kill(get(f"{first}/healthz")["pid"], signal.SIGKILL)
                started = time.monotonic()
                added.append(await queue.enqueue("e", b"3"))  # repeated until the standby takes it
                took = time.monotonic() - started
                [claimed] = await queue.dequeue()
                await queue.ack(claimed)
            assert get(f"{second}/healthz")["role"] == "active"
    assert took < 10
    async with DirectQueue(LocalFileSystemStorage(root / "q.json")) as direct:
        left = (await direct.read_state()).jobs
    assert sorted([*(job.id for job in left), claimed.id]) == sorted(job.id for job in added)


async def test_without_a_broker_auto_and_off_commit_directly_and_require_fails(tmp_path: Path) -> None:
    modes: tuple[Broker, ...] = ("auto", "off")
    for mode in modes:
        async with connect(str(tmp_path), "q", broker=mode) as queue:
            assert isinstance(queue, BrokerQueue)
            await queue.enqueue("e", mode.encode())
    async with DirectQueue(LocalFileSystemStorage(tmp_path / "q.json")) as direct:
        assert [job.payload for job in (await direct.read_state()).jobs] == [b"auto", b"off"]
    async with connect(str(tmp_path), "q", failover_timeout=timedelta(seconds=0.5)) as remote:
        with pytest.raises(ServiceError) as raised:
            await remote.enqueue("e", b"nobody takes it")
    assert raised.value.code == "no_broker"
    with pytest.raises(ValueError, match="broker"):
        connect("http://127.0.0.1:1", "q", broker="off")


def test_a_broker_stopped_gracefully_hands_the_root_over_at_once(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "first.log") as first:  # default settings: stale after 3 s
        assert enqueue(first)[0] == 200
    assert json.loads((root / "_broker.json").read_text())["released"] is True
    with jqueue_serve(str(root), tmp_path / "second.log") as second:
        assert enqueue(second)[0] == 200  # no wait for the record to go stale
        assert get(f"{second}/healthz")["epoch"] == 2
