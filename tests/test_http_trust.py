"""Trust through ``jqueue serve`` (issue 27): a 2xx never drops a message, a bad value or a client
that hangs up is never an untyped 500, and one binary message never blocks JSON pollers.

Each test runs a real ``jqueue serve`` process on a file root and calls it over HTTP.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from unittest.mock import ANY
from urllib.parse import urlsplit

import msgspec
import pytest

from servers import jqueue_serve
from test_queued_api import MSGPACK, Client

pytestmark = pytest.mark.slow


def _root(tmp_path: Path) -> Path:
    where = tmp_path / "root"
    where.mkdir()
    return where


def _poll_all(client: Client, queue: str) -> list[int]:
    """Claim every visible message of ``queue``; return their ids."""
    ids: list[int] = []
    while batch := client.poll(queue, count=500, visibility=600):
        ids += [message["id"] for message in batch]
    return ids


def test_a_push_after_the_broker_record_is_lost_stores_every_message(tmp_path: Path) -> None:
    where = _root(tmp_path)
    pushed: list[int] = []
    with jqueue_serve(str(where), tmp_path / "first.log") as url:
        client = Client(url)
        assert client.call("PUT", "/queue/q") == (200, None)
        for round_ in range(5):
            pushed += client.push("q", *(f"first {round_}.{n}" for n in range(20)))
    (where / "_broker.json").unlink()  # the next broker starts again at epoch 1
    with jqueue_serve(str(where), tmp_path / "second.log") as url:
        client = Client(url)
        for round_ in range(5):
            pushed += client.push("q", *(f"second {round_}.{n}" for n in range(20)))
        assert len(set(pushed)) == len(pushed) == 200, "no id repeats"
        assert all(0 < i < 2**53 for i in pushed), "JavaScript reads every id exactly"
        assert client.counts("q")["message_counter"] == 200
        assert sorted(_poll_all(client, "q")) == sorted(pushed), "every id a push answered with is stored"


def test_a_native_enqueue_of_a_future_id_does_not_make_a_push_drop_a_message(tmp_path: Path) -> None:
    with jqueue_serve(str(_root(tmp_path)), tmp_path / "serve.log") as url:
        client = Client(url)
        client.call("PUT", "/queue/q")
        pushed = client.push("q", "first")
        future = [str(pushed[-1] + step) for step in range(1, 100)]  # the ids the next pushes would take
        jobs = [{"entrypoint": "other", "payload": "eA==", "id": job_id} for job_id in future]
        status, answer = client.call("POST", "/v1/queues/q/enqueue", {"jobs": jobs})
        assert status == 200, answer
        for round_ in range(3):
            pushed += client.push("q", *(f"later {round_}.{n}" for n in range(20)))
        assert len(set(pushed)) == len(pushed) == 61
        assert not set(future) & {str(i) for i in pushed}, "a push never answers with a taken id"
        assert sorted(_poll_all(client, "q")) == sorted(pushed), "every id a push answered with is stored"


def _statuses(url: str) -> dict[tuple[str, str], float]:
    """The service's request counts by (route, status), from ``/metrics``."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    found: dict[tuple[str, str], float] = {}
    pattern = r'jqueue_requests_total\{[^}]*route="([^"]+)",status="(\d+)"\} (\S+)'
    for route, status, count in re.findall(pattern, text):
        found[route, status] = found.get((route, status), 0) + float(count)
    return found


def test_every_value_past_its_python_bound_is_a_typed_400(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with jqueue_serve(str(_root(tmp_path)), log) as url:
        client = Client(url)
        client.call("PUT", "/queue/q")
        for seconds in (1e12, 1e15, 1e300):
            status, error = client.call(
                "POST", "/v1/queues/q/dequeue", {"visibility_timeout_seconds": seconds}
            )
            assert (status, error["error"]["code"]) == (400, "bad_body"), error
        job = {"entrypoint": "e", "payload": "eA=="}
        refused = [
            ("/v1/queues/q/enqueue", {"jobs": [job | {"max_attempts": 2**63}]}),
            ("/v1/queues/q/enqueue", {"jobs": [job | {"ttl_seconds": 0}]}),
            ("/v1/queues/q/enqueue", {"jobs": [job | {"delay_seconds": 4e10}]}),
            ("/v1/queues/q/enqueue", {"jobs": [job | {"id": "x" * 257}]}),
            ("/v1/queues/q/changes", {"seen": 2**70, "wait_seconds": 0}),
            ("/v1/queues/q/result", {"id": "x" * 257, "wait_seconds": 0}),
            ("/v1/queues/q/nack", {"jobs": [{"id": "a"}], "max_attempts": 2**64}),
            ("/queue/q/messages/poll", {"visibility_timeout_secs": 10**12}),
            ("/queue/q/messages/poll", {"visibility_timeout_secs": 1, "count": 10_001}),
        ]
        for path, body in refused:
            status, error = client.call("POST", path, body)
            assert status == 400, (path, body, error)
        for wide in (2**70, 2**63):  # once stored, a number past 64 bits would break the catalog
            throttle = {"throttle": {"max_polls_per_time_window": wide, "time_window_sec": 1}}
            assert client.call("POST", "/queue/q/throttle", throttle) == (400, ANY)
        assert client.call("GET", "/queue/q/throttle") == (200, {"throttle": None})
        wide_attempts = {"jobs": [job | {"max_attempts": 2**40}]}
        assert client.call("POST", "/v1/queues/q/enqueue", wide_attempts)[0] == 200, "64 bits, as JobSpec"
        assert not any(code == "500" for _, code in _statuses(url))
    assert "Traceback" not in log.read_text()


def test_a_push_of_contents_neither_text_nor_bytes_is_a_typed_400_and_pushes_nothing(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with jqueue_serve(str(_root(tmp_path)), log) as url:
        client = Client(url)
        client.call("PUT", "/queue/q")
        for msgpack in (False, True):
            for contents in (None, 7, 2**63, 1.5, True, [], ["x"], {}, {"a": "b"}):
                messages = [{"contents": "first, fine"}, {"contents": contents}]
                status, error = client.call(
                    "POST", "/queue/q/messages/push", {"messages": messages}, msgpack=msgpack
                )
                assert status == 400, (contents, error)
                assert error["error"] == "BadBody", error
                assert "contents must be text or binary" in error["error_details"]["message"], error
                assert "$.messages[1]" in error["error_details"]["message"], "it names the message"
        for raw in (b'{"messages": [{"contents": "\xff"}]}', b'{"messages": [{"contents": "\\ud800"}]}'):
            request = urllib.request.Request(
                f"{url}/queue/q/messages/push", raw, {"Content-Type": "application/json"}, method="POST"
            )
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=30)
            assert refused.value.code == 400
            assert json.loads(refused.value.read())["error"] == "BadBody", "text that is not UTF-8"
        assert client.counts("q")["message_counter"] == 0, "the message before the bad one is not pushed"
        assert client.push("q", "text")
        assert client.push("q", b"\xffbinary", msgpack=True)
        assert client.counts("q")["message_counter"] == 2
        assert not any(code == "500" for _, code in _statuses(url))
    assert "Traceback" not in log.read_text()


def _hang_up(url: str, path: str, content_type: str) -> None:
    """Send the headers of a 1,000-byte body, then half of it, and close the connection."""
    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {where.netloc}\r\nContent-Type: {content_type}\r\n"
            "Content-Length: 1000\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"messages": [' + b" " * 486)


def test_a_client_that_hangs_up_mid_body_is_no_server_error(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with jqueue_serve(str(_root(tmp_path)), log) as url:
        client = Client(url)
        client.call("PUT", "/queue/q")
        _hang_up(url, "/v1/queues/q/enqueue", "application/json")
        _hang_up(url, "/queue/q/messages/push", MSGPACK)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            counted = _statuses(url)
            if ("enqueue", "499") in counted and ("queued_push", "499") in counted:
                break
            time.sleep(0.05)
        assert counted.get(("enqueue", "499")) == 1, counted
        assert counted.get(("queued_push", "499")) == 1, counted
        assert not any(code == "500" for _, code in counted), counted
        assert client.push("q", "after")
        assert client.counts("q")["message_counter"] == 1
    assert "Traceback" not in log.read_text()
    assert "unexpected" not in log.read_text()


def _send(url: str, path: str, body: object, content_type: str) -> tuple[int, str, bytes]:
    """POST ``body`` encoded as ``content_type`` with no ``Accept``; the status, answer type, bytes."""
    data = msgspec.msgpack.encode(body) if content_type == MSGPACK else json.dumps(body).encode()
    request = urllib.request.Request(f"{url}{path}", data, {"Content-Type": content_type}, method="POST")
    assert not request.has_header("Accept")
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.status, answer.headers["Content-Type"], answer.read()


def test_a_binary_message_never_blocks_json_pollers(tmp_path: Path) -> None:
    with jqueue_serve(str(_root(tmp_path)), tmp_path / "serve.log") as url:
        client = Client(url)
        client.call("PUT", "/queue/q")
        [first_binary] = client.push("q", b"\xff\x00head", msgpack=True)
        a, b = client.push("q", "a", "b")
        [second_binary] = client.push("q", b"\xfe", msgpack=True)
        [c] = client.push("q", "c")
        for expected_id, expected in ((a, "a"), (b, "b"), (c, "c")):  # one at a time, as a worker polls
            [message] = client.poll("q", count=1)
            assert (message["id"], message["contents"]) == (expected_id, expected)
        assert client.poll("q", count=5) == [], "binary contents are left for MessagePack pollers"
        assert client.counts("q")["message_counter"] == 5
        status, kind, raw = _send(
            url, "/queue/q/messages/poll", {"count": 5, "visibility_timeout_secs": 30}, MSGPACK
        )
        assert (status, kind) == (200, MSGPACK), "no Accept: the answer is in the request's own type"
        polled = msgspec.msgpack.decode(raw)["messages"]
        assert [(m["id"], m["contents"]) for m in polled] == [
            (first_binary, b"\xff\x00head"),
            (second_binary, b"\xfe"),
        ]

        # jobs of the text entrypoint that are binary (added by the native API): held, not in the way
        jobs = [
            {"entrypoint": "queued", "payload": base64.b64encode(payload).decode(), "id": job_id}
            for job_id, payload in (("900", b"\xff1"), ("901", b"\xff2"), ("902", b"text"), ("903", b"\xff3"))
        ]
        assert client.call("POST", "/v1/queues/q/enqueue", {"jobs": jobs})[0] == 200
        [message] = client.poll("q", count=1)
        assert (message["id"], message["contents"]) == (902, "text")
        assert client.poll("q", count=1) == []
        left = client.poll("q", count=10, msgpack=True)
        assert [m["id"] for m in left] == [900, 901, 903], "released, in order, for a MessagePack poller"


def test_every_route_answers_in_the_request_type_when_it_has_no_accept(tmp_path: Path) -> None:
    with jqueue_serve(str(_root(tmp_path)), tmp_path / "serve.log") as url:
        Client(url).call("PUT", "/queue/q")
        for path, body in (
            ("/v1/queues/q/peek", {"limit": 1}),
            ("/v1/queues/q/enqueue", {"jobs": [{"entrypoint": "e", "payload": b"x"}]}),
            ("/queue/q/messages/push", {"messages": [{"contents": b"x"}]}),
        ):
            assert _send(url, path, body, MSGPACK)[:2] == (200, MSGPACK), path
            json_body = json.loads(json.dumps(body, default=lambda raw: base64.b64encode(raw).decode()))
            assert _send(url, path, json_body, "application/json")[:2] == (200, "application/json"), path
        with pytest.raises(urllib.error.HTTPError) as refused:
            _send(url, "/v1/queues/nope/ack", {"jobs": [{"id": "x"}]}, MSGPACK)
        assert (refused.value.code, refused.value.headers["Content-Type"]) == (404, MSGPACK), "errors too"
        assert msgspec.msgpack.decode(refused.value.read())["error"]["code"] == "queue_not_found"
