"""Trust through ``jqueue serve`` (issue 27): a 2xx never drops a message, a bad value or a client
that hangs up is never an untyped 500, and one binary message never blocks JSON pollers.

Each test runs a real ``jqueue serve`` process on a file root and calls it over HTTP.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servers import jqueue_serve
from test_queued_api import Client

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
