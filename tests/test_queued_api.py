"""The queued-compatible routes of ``jqueue serve``, over raw HTTP, on a file root and on S3 (moto)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import msgspec
import pytest

from jqueue import connect
from jqueue.adapters.service.queued.parts import BINARY_ENTRYPOINT, QUEUED_ENTRYPOINT
from servers import jqueue_serve

pytestmark = pytest.mark.slow

MSGPACK = "application/msgpack"


class Client:
    """Calls one ``jqueue serve`` the way queued's clients do."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url, self.token = url, token

    def call(self, method: str, path: str, body: Any = None, *, msgpack: bool = False) -> tuple[int, Any]:
        """Send ``body`` (JSON, or MessagePack); return the status and the decoded answer."""
        kind = MSGPACK if msgpack else "application/json"
        headers = {"Content-Type": kind, "Accept": kind}
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = msgspec.msgpack.encode(body) if msgpack else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data, headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
                return response.status, msgspec.msgpack.decode(raw) if msgpack else json.loads(raw)
        except urllib.error.HTTPError as error:
            raw = error.read()
            return error.code, msgspec.msgpack.decode(raw) if msgpack else json.loads(raw)

    def push(self, queue: str, *contents: Any, msgpack: bool = False, delay: int = 0) -> list[int]:
        messages = [{"contents": c, "visibility_timeout_secs": delay} for c in contents]
        status, answer = self.call(
            "POST", f"/queue/{queue}/messages/push", {"messages": messages}, msgpack=msgpack
        )
        assert status == 200, answer
        ids: list[int] = answer["ids"]
        return ids

    def poll(self, queue: str, count: int = 1, visibility: int = 30, *, msgpack: bool = False) -> list[Any]:
        body = {"count": count, "visibility_timeout_secs": visibility}
        status, answer = self.call("POST", f"/queue/{queue}/messages/poll", body, msgpack=msgpack)
        assert status == 200, answer
        messages: list[Any] = answer["messages"]
        return messages

    def delete(self, queue: str, *pairs: tuple[int, int]) -> tuple[int, Any]:
        body = {"messages": [{"id": i, "poll_tag": tag} for i, tag in pairs]}
        return self.call("POST", f"/queue/{queue}/messages/delete", body)

    def update(self, queue: str, message_id: int, tag: int, visibility: int) -> tuple[int, Any]:
        body = {"id": message_id, "poll_tag": tag, "visibility_timeout_secs": visibility}
        return self.call("POST", f"/queue/{queue}/messages/update", body)

    def counts(self, queue: str) -> dict[str, int]:
        status, answer = self.call("GET", f"/queue/{queue}/metrics")
        assert status == 200, answer
        return dict(answer)


def test_push_poll_update_and_delete_messages(
    served_root: tuple[str, dict[str, str] | None], tmp_path: Path
) -> None:
    where, env = served_root
    with jqueue_serve(where, tmp_path / "serve.log", env=env) as url:
        client = Client(url)
        status, error = client.call("POST", "/queue/q/messages/push", {"messages": [{"contents": "x"}]})
        assert (status, error["error"]) == (404, "QueueNotFound")
        assert client.call("PUT", "/queue/q") == (200, None)
        assert client.call("PUT", "/queue/q")[1]["error"] == "QueueAlreadyExists"
        assert client.call("GET", "/queues") == (200, {"queues": [{"name": "q"}]})
        first, second = client.push("q", "hello", "world")
        [later] = client.push("q", "later", delay=3600)
        assert len({first, second, later}) == 3
        assert client.counts("q")["message_counter"] == 3

        polled = client.poll("q", count=5)
        assert [(m["id"], m["contents"]) for m in polled] == [(first, "hello"), (second, "world")]
        assert all(set(m) == {"id", "contents", "poll_tag"} for m in polled), "queued 0.9's fields only"
        assert all(0 <= m["poll_tag"] < 2**32 for m in polled)
        assert client.poll("q") == []
        one, two = polled
        wrong = one["poll_tag"] ^ 1
        assert client.update("q", one["id"], wrong, 0) == (
            404,
            {"error": "MessageNotFound", "error_details": ANY},
        )
        assert client.delete("q", (one["id"], wrong)) == (200, {}), "as queued: a stale tag is skipped"
        assert client.poll("q") == [], "a stale tag changed nothing"

        renewed = client.update("q", two["id"], two["poll_tag"], 60)
        assert renewed[0] == 200
        new_tag = renewed[1]["new_poll_tag"]
        assert new_tag != two["poll_tag"], "as queued: a new tag"
        assert 0 <= new_tag < 2**32
        assert client.update("q", two["id"], two["poll_tag"], 60)[0] == 404, "the old tag is stale"
        two["poll_tag"] = new_tag
        assert client.update("q", one["id"], one["poll_tag"], -1)[0] == 200
        [again] = client.poll("q", visibility=30)
        assert again["id"] == first
        assert client.delete("q", (one["id"], one["poll_tag"]), (two["id"], two["poll_tag"])) == (200, {})
        assert client.counts("q")["message_counter"] == 2, "only the message whose tag held is deleted"
        assert client.delete("q", (again["id"], again["poll_tag"])) == (200, {})
        counts = client.counts("q")
        assert counts["message_counter"] == 1
        assert (counts["successful_push_counter"], counts["successful_poll_counter"]) == (3, 3)
        assert (counts["successful_delete_counter"], counts["missing_delete_counter"]) == (2, 2)
        assert (counts["successful_update_counter"], counts["missing_update_counter"]) == (2, 2)
        assert counts["empty_poll_counter"] == 2

        assert client.call("DELETE", "/queue/q") == (200, None)
        assert client.call("DELETE", "/queue/q")[1]["error"] == "NotFound"
        assert client.call("GET", "/queues") == (200, {"queues": []})
        assert client.call("POST", "/queue/q/messages/poll", {"visibility_timeout_secs": 1})[0] == 404
        assert client.call("PUT", "/queue/q")[0] == 200
        assert client.counts("q")["message_counter"] == 0, "a queue made again starts empty"


def test_an_expired_poll_hands_the_message_out_again_and_fences_the_old_tag(tmp_path: Path) -> None:
    where = tmp_path / "root"
    where.mkdir()
    with jqueue_serve(str(where), tmp_path / "serve.log") as url:
        client = Client(url)
        client.call("PUT", "/queue/q")
        [pushed] = client.push("q", "m")
        [first] = client.poll("q", visibility=1)
        time.sleep(1.5)
        [second] = client.poll("q", visibility=30)
        assert second["id"] == pushed
        assert second["poll_tag"] != first["poll_tag"]
        assert client.update("q", pushed, first["poll_tag"], 60)[0] == 404
        assert client.delete("q", (pushed, first["poll_tag"])) == (200, {})
        assert client.counts("q")["message_counter"] == 1, "the old poll's tag deleted nothing"
        assert client.delete("q", (pushed, second["poll_tag"])) == (200, {})
        assert client.counts("q")["message_counter"] == 0


def test_messagepack_as_queued_speaks_it(tmp_path: Path) -> None:
    where = tmp_path / "root"
    where.mkdir()
    with jqueue_serve(str(where), tmp_path / "serve.log") as url:
        client = Client(url)
        assert client.call("PUT", "/queue/q", msgpack=True) == (200, None)
        [pushed] = client.push("q", b"\x00\xffbin", msgpack=True)
        assert client.poll("q") == [], "binary contents cannot be JSON text: left for MessagePack"
        [message] = client.poll("q", msgpack=True)
        assert (message["id"], message["contents"]) == (pushed, b"\x00\xffbin")
        status, error = client.call("POST", "/queue/nope/messages/poll", {"count": 1}, msgpack=True)
        assert (status, error["error"]) == (404, "QueueNotFound")
        assert client.call("GET", "/queue/q/metrics", msgpack=True)[1]["message_counter"] == 1
        status, health = client.call("GET", "/healthz", msgpack=True)
        assert (status, health["role"]) == (200, "active")
        assert isinstance(health["version"], str)


def test_a_job_added_by_other_means_is_filed_dead_by_the_poll_that_claims_it(tmp_path: Path) -> None:
    """A job of the queued entrypoints whose id is not a number (enqueued through the native API)
    is no queued message: the poll that claims it, MessagePack or JSON, leaves it out and files it
    among the dead letters, fenced by the lease it was claimed with."""
    where = tmp_path / "root"
    where.mkdir()
    with jqueue_serve(str(where), tmp_path / "serve.log") as url:
        client = Client(url)
        client.call("PUT", "/queue/q")

        async def add(entrypoint: str, contents: bytes, job_id: str) -> None:
            async with connect(url, "q") as queue:
                await queue.enqueue(entrypoint, contents, id=job_id)

        async def dead() -> dict[str, str | None]:
            async with connect(url, "q") as queue:
                return {job.id: job.last_error for job in await queue.dead_letters()}

        asyncio.run(add(BINARY_ENTRYPOINT, b"\x00\xff", "not-a-number"))
        [pushed] = client.push("q", "m")
        assert [m["id"] for m in client.poll("q", 10, msgpack=True)] == [pushed]
        asyncio.run(add(QUEUED_ENTRYPOINT, b"text", "nor-this"))
        assert client.poll("q", 10) == []
        foreign = "not a queued message: its id is not a number"
        assert asyncio.run(dead()) == {"not-a-number": foreign, "nor-this": foreign}


def test_suspensions_and_throttles_survive_a_new_broker(tmp_path: Path) -> None:
    where = tmp_path / "root"
    where.mkdir()
    with jqueue_serve(str(where), tmp_path / "first.log") as url:
        client = Client(url)
        client.call("PUT", "/queue/q")
        client.push("q", "a", "b", "c")
        suspended = {"push": True, "poll": False, "update": False, "delete": False}
        assert client.call("POST", "/queue/q/suspend", {"push": True}) == (200, suspended)
        status, error = client.call("POST", "/queue/q/messages/push", {"messages": [{"contents": "x"}]})
        assert (status, error["error"]) == (503, "Suspended")
        throttle = {"max_polls_per_time_window": 1, "time_window_sec": 3600}
        assert client.call("POST", "/queue/q/throttle", {"throttle": throttle}) == (
            200,
            {"throttle": throttle},
        )
    with jqueue_serve(str(where), tmp_path / "second.log") as url:
        client = Client(url)
        assert client.call("GET", "/queue/q/suspend") == (200, suspended)
        assert client.call("GET", "/queue/q/throttle") == (200, {"throttle": throttle})
        assert len(client.poll("q")) == 1
        status, error = client.call("POST", "/queue/q/messages/poll", {"visibility_timeout_secs": 30})
        assert (status, error["error"]) == (429, "Throttled")
        counts = client.counts("q")
        assert (
            counts["message_counter"],
            counts["throttled_poll_counter"],
            counts["suspended_push_counter"],
        ) == (
            3,
            1,
            0,
        )
        client.call("POST", "/queue/q/throttle", {"throttle": None})
        client.call("POST", "/queue/q/suspend", {"push": False})
        assert len(client.push("q", "d")) == 1
        assert len(client.poll("q", count=10)) == 3


def test_api_keys_open_the_queues_of_their_prefix(tmp_path: Path) -> None:
    where = tmp_path / "root"
    where.mkdir()
    with jqueue_serve(str(where), tmp_path / "serve.log", options=["--token", "admin"]) as url:
        admin, team, stranger = Client(url, "admin"), Client(url, "team-key"), Client(url, "nope")
        for name in ("team-a", "other"):
            assert admin.call("PUT", f"/queue/{name}")[0] == 200
        assert team.call("PUT", "/api-key/team-key", {"prefix": "team-"})[0] == 401
        assert admin.call("PUT", "/api-key/team-key", {"prefix": "team-"}) == (200, None)
        assert admin.call("GET", "/api-keys") == (200, {"keys": [{"key": "team-key", "prefix": "team-"}]})
        assert team.push("team-a", "x")
        status, error = team.call("POST", "/queue/other/messages/push", {"messages": [{"contents": "x"}]})
        assert (status, error["error"]) == (401, "NotAuthorized")
        assert team.call("GET", "/queues")[0] == 401, "listing queues needs the token"
        assert stranger.call("POST", "/queue/team-a/messages/poll", {"visibility_timeout_secs": 1})[0] == 401
        bare = urllib.request.Request(
            f"{url}/queue/team-a/messages/poll",
            json.dumps({"visibility_timeout_secs": 30}).encode(),
            {"Content-Type": "application/json", "Authorization": "team-key"},  # queued's own form
        )
        with urllib.request.urlopen(bare, timeout=30) as answer:
            assert [m["contents"] for m in json.loads(answer.read())["messages"]] == ["x"]
        assert admin.call("DELETE", "/api-key/team-key") == (200, None)
        assert team.call("POST", "/queue/team-a/messages/poll", {"visibility_timeout_secs": 1})[0] == 401
    with jqueue_serve(str(where), tmp_path / "open.log") as url:
        assert Client(url).call("GET", "/api-keys")[1]["error"] == "NotFound", "no keys without a token"


def test_bad_requests_get_their_status_and_change_nothing(tmp_path: Path) -> None:
    where = tmp_path / "root"
    where.mkdir()
    token = "s3cret"
    options = ["--token", token, "--max-body-bytes", "4096"]
    with jqueue_serve(str(where), tmp_path / "serve.log", options=options) as url:
        client, stranger = Client(url, token), Client(url, "wrong")
        assert stranger.call("PUT", "/queue/q")[0] == 401
        assert client.call("GET", "/queues") == (200, {"queues": []})
        client.call("PUT", "/queue/q")
        client.push("q", "kept")
        for body in ({"messages": [{"contents": "x", "bogus": 1}]}, {"messages": "no"}, {}):
            status, error = client.call("POST", "/queue/q/messages/push", body)
            assert (status, error["error"]) == (400, "BadBody"), error
        huge = {"messages": [{"contents": "x" * 10_000}]}
        assert client.call("POST", "/queue/q/messages/push", huge)[1]["error"] == "BodyTooLarge"
        assert stranger.call("POST", "/queue/q/messages/poll", {"visibility_timeout_secs": 1})[0] == 401
        assert client.call("POST", "/queue/no-such/messages/push", {"messages": []})[0] == 404
        assert client.call("PUT", "/queue/..%2Fescape")[0] in (400, 404)
        assert client.update("q", 1, 1, 1)[0] == 404
        assert client.call("POST", "/queue/q/messages/update", {"id": -1, "poll_tag": 1})[0] == 400
        assert client.update("q", 1, 2**32, 1)[0] == 400, "a poll tag is 32 bits"
        no_polls = {"throttle": {"max_polls_per_time_window": 0, "time_window_sec": 1}}
        assert client.call("POST", "/queue/q/throttle", no_polls)[1]["error"] == "BadBody"
        assert client.call("GET", "/queue/q/throttle") == (200, {"throttle": None})
        counts = client.counts("q")
        assert (counts["message_counter"], counts["successful_push_counter"]) == (1, 1)
        assert [m["contents"] for m in client.poll("q", count=5)] == ["kept"]
    assert sorted(p.name for p in where.iterdir() if not p.name.startswith(("q.json", "_"))) == []


def test_the_openapi_document_describes_every_route(tmp_path: Path) -> None:
    from openapi_spec_validator import validate
    from starlette.routing import Route

    from jqueue.adapters.service.app import create_app

    where = tmp_path / "root"
    where.mkdir()
    with jqueue_serve(str(where), tmp_path / "serve.log") as url:
        status, document = Client(url).call("GET", "/openapi.json")
    assert status == 200
    validate(document)
    documented = {(path, method.upper()) for path, calls in document["paths"].items() for method in calls}
    app = create_app(str(where), address="http://127.0.0.1:1")
    served = {
        (route.path, method)
        for route in app.routes
        if isinstance(route, Route) and route.include_in_schema  # the dashboard's pages are not API
        for method in route.methods or ()
        if method != "HEAD"
    }
    assert documented == served
    push = document["paths"]["/queue/{queue}/messages/push"]["post"]
    assert set(push["requestBody"]["content"]) == {"application/json", "application/msgpack"}


async def test_a_poll_tag_is_the_adapters_mapping_of_the_queues_wide_lease() -> None:
    from jqueue import BrokerQueue, InMemoryStorage
    from jqueue.adapters.service.queued.parts import held, poll_tag
    from jqueue.core.queue import LEASE_BITS
    from jqueue.domain.errors import LeaseLostError
    from jqueue.domain.spec import JobSpec

    async with BrokerQueue(InMemoryStorage()) as queue:
        await queue.enqueue_many([JobSpec("q", b"x", id="7")])
        [job] = await queue.dequeue("q", visibility_timeout=timedelta(0))
        assert job.lease is not None
        assert len(job.lease) == LEASE_BITS // 4 == 32
        first_tag = poll_tag(job)
        assert first_tag is not None
        assert first_tag == int(job.lease[:8], 16)
        fence = await held(queue, 7, first_tag)
        assert fence.lease == job.lease, "the tag stands for the whole lease"
        [again] = await queue.dequeue("q")  # the first claim ran out: a new claim, a new lease
        assert again.lease != job.lease
        tag = poll_tag(again)
        assert tag is not None
        with pytest.raises(LeaseLostError):
            await queue.ack(await held(queue, 7, first_tag))  # the stale holder's tag
        assert (await held(queue, 7, tag ^ 1)).lease != again.lease
        await queue.ack(await held(queue, 7, tag))
        assert await queue.find("7") is None
