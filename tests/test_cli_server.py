"""The command line through a running ``jqueue serve`` (``--server``/``JQUEUE_SERVER`` and
``--queue``/``JQUEUE_QUEUE``): every queue command says through the service what it says on
the queue's storage."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import jqueue
from servers import jqueue_serve

pytestmark = pytest.mark.slow

_RUNS = re.compile(r"([ ─━])\1+")
_VOLATILE = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"  # a job id
    r"|\b[0-9a-f]{32}\b"  # a lease (a finished job's history record names its last)
    r"|\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)?"  # a time
    r"|\b\d+(\.\d)? (µs|ms|s)\b|\b\d+ [mhd] \d+ [smh]\b"  # an age (readable_span)
)
_TIMINGS = {"version", "wait_s", "run_s", "seconds", "age_s", "finished_s"}


def _steady(value: Any) -> Any:
    """``value`` without what differs between two runs: ids, times, durations, commit counts."""
    if isinstance(value, dict):
        return {key: _steady(item) for key, item in value.items() if key not in _TIMINGS}
    if isinstance(value, list):
        return [_steady(item) for item in value]
    if isinstance(value, str):  # a table's columns are as wide as its widest value: runs count once
        return _RUNS.sub(r"\1", _VOLATILE.sub("~", value))
    return value


def _run(
    env: dict[str, str], cwd: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jqueue", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env | {"COLUMNS": "200"},
        cwd=cwd,
        timeout=120,
    )


def _session(env: dict[str, str], cwd: Path) -> list[Any]:
    """A first week in one list: what each command printed (JSON where it prints it)."""
    said: list[Any] = []

    def say(*args: str, stdin: str | None = None) -> Any:
        done = _run(env, cwd, *args, stdin=stdin)
        assert done.returncode == 0, (args, done.stderr)
        said.append(json.loads(done.stdout) if "--json" in args else done.stdout)
        return said[-1]

    [hello] = say("enqueue", "mail", "hello", "--json")
    say("enqueue", "mail", "later", "--delay", "3600")
    say("enqueue", "sms", "--stdin", stdin="a\nb\n\n")
    say(
        "exec",
        "sms",
        "--burst",
        "--concurrency",
        "1",
        "--max-attempts",
        "1",
        "--json",
        "--",
        "sh",
        "-c",
        'read x; [ "$x" = a ]',
    )
    say("stats", "--json")
    say("ls", "--json")
    say("history", "--json")
    [dead] = say("dead", "ls", "--json")
    say("show", dead["id"][:8], "--json")
    say("pause", "mail", "--enqueues")
    say("throttle", "3", "--per", "2", "-e", "sms")
    say("stats")
    say("dead", "requeue", "--all")
    say("cancel", hello["id"])
    say("purge", "--status", "any", "--yes")
    say("ls")
    return said


def test_every_queue_command_says_the_same_through_the_service(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    on_storage = os.environ | {"JQUEUE_STORAGE": str(tmp_path / "direct.json")}
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        through = {k: v for k, v in os.environ.items() if k != "JQUEUE_STORAGE"}
        through |= {"JQUEUE_SERVER": url, "JQUEUE_QUEUE": "shop"}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            direct = pool.submit(_session, on_storage, tmp_path)
            served = pool.submit(_session, through, tmp_path)
            direct_said, served_said = direct.result(), served.result()
        listed = _run(through, tmp_path, "queues", "--json")
    assert len(served_said) == len(direct_said) == 16
    for number, (mine, theirs) in enumerate(zip(served_said, direct_said, strict=True)):
        assert _steady(mine) == _steady(theirs), number
    assert "claims paused: mail; enqueues paused: mail" in served_said[11]
    counts = {"queued": 0, "scheduled": 0, "in_progress": 0, "dead": 0}
    assert json.loads(listed.stdout) == [{"queue": "shop", **counts}]
    on_disk = json.loads(
        _run(os.environ | {"JQUEUE_STORAGE": str(root / "shop.json")}, tmp_path, "stats", "--json").stdout
    )
    assert on_disk["paused"] == {"claims": ["mail"], "enqueues": ["mail"]}


def test_mistakes_with_a_server_are_one_line(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    bare = {k: v for k, v in os.environ.items() if not k.startswith("JQUEUE_")}
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        cases = [
            (
                ["--server", url, "ls"],
                "error: --server needs the queue's name: pass --queue NAME or set JQUEUE_QUEUE",
            ),
            (
                ["ls", "--server", url, "--queue", "nope"],
                f"error: queue nope through jqueue serve at {url} does not exist",
            ),
            (
                ["--server", url, "--storage", "q.json", "--queue", "q", "ls"],
                "error: give --storage or --server, not both",
            ),
            (
                ["--server", url, "--queue", "q", "report"],
                "error: jqueue report reads the queue's storage: pass --storage URL",
            ),
            (
                ["--server", url, "--queue", "bad/name", "ls"],
                "error: --queue: 'bad/name' is not a queue name",
            ),
            (["queues"], "error: jqueue queues asks a running jqueue serve: pass --server URL"),
        ]
        for args, start in cases:
            done = _run(bare, tmp_path, *args)
            assert done.returncode == 1, (args, done.stdout)
            assert done.stderr.startswith(start), (args, done.stderr)
            assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert not (root / "nope.json").exists()


def test_the_command_line_takes_the_services_token_from_jqueue_token(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    bare = {k: v for k, v in os.environ.items() if not k.startswith("JQUEUE_")}
    with jqueue_serve(str(root), tmp_path / "serve.log", env=bare | {"JQUEUE_TOKEN": "s3cret"}) as url:
        where = bare | {"JQUEUE_SERVER": url, "JQUEUE_QUEUE": "q"}
        refused = _run(where, tmp_path, "enqueue", "e", "x")
        assert (refused.returncode, refused.stderr.strip()) == (
            1,
            f"error: queue q through jqueue serve at {url} needs its token: JQUEUE_TOKEN is not set",
        )
        for command in ("stats", "queues"):
            wrong = _run(where | {"JQUEUE_TOKEN": "nope"}, tmp_path, command)
            assert wrong.stderr.strip().endswith("needs its token: JQUEUE_TOKEN was refused"), command
        allowed = where | {"JQUEUE_TOKEN": "s3cret"}
        assert _run(allowed, tmp_path, "enqueue", "e", "x").returncode == 0
        assert _run(allowed, tmp_path, "enqueue", "e", "later", "--delay", "3600").returncode == 0
        [listed] = json.loads(_run(allowed, tmp_path, "queues", "--json").stdout)
        assert (listed["queued"], listed["scheduled"]) == (1, 1), "jobs due now apart from those not due yet"


def test_a_server_where_nothing_listens_is_said_at_once_while_the_command_keeps_looking(
    tmp_path: Path,
) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    bare = {k: v for k, v in os.environ.items() if not k.startswith("JQUEUE_")}
    server = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "jqueue", "--server", server, "--queue", "q", "stats"]
    started = time.monotonic()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=bare, cwd=tmp_path)
    assert process.stderr is not None
    first = process.stderr.readline()
    said_after = time.monotonic() - started
    rest = process.stderr.read()
    assert process.wait(60) == 1
    ended_after = time.monotonic() - started
    assert first.startswith(f"a call to {server} found no service: nothing answers there")
    assert first.rstrip().endswith("still looking for the broker for up to 10 s")
    assert said_after < ended_after - 5  # said long before the command gave up (10 s of looking)
    assert rest.splitlines()[-1].startswith("error: no jqueue serve took the call within 10 s")


def test_a_sharded_queue_says_what_one_queue_says_on_its_storage_and_through_the_service(
    tmp_path: Path,
) -> None:
    async def make_sharded(root: Path) -> None:
        async with jqueue.sharded(str(root), "shop", 3):
            pass  # records the count in shard 0: every command opens the three

    for root in (tmp_path / "stored", tmp_path / "served"):
        root.mkdir()
        asyncio.run(make_sharded(root))
    plain = os.environ | {"JQUEUE_STORAGE": str(tmp_path / "plain.json")}
    stored = os.environ | {"JQUEUE_STORAGE": str(tmp_path / "stored" / "shop.json")}
    with jqueue_serve(str(tmp_path / "served"), tmp_path / "serve.log") as url:
        through = {k: v for k, v in os.environ.items() if k != "JQUEUE_STORAGE"}
        through |= {"JQUEUE_SERVER": url, "JQUEUE_QUEUE": "shop"}
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            sessions = [pool.submit(_session, env, tmp_path) for env in (plain, stored, through)]
            plain_said, stored_said, served_said = (session.result() for session in sessions)
    spread = [path.name for path in (tmp_path / "stored").glob("shop.shard-*.json")]
    assert sorted(spread) == ["shop.shard-1.json", "shop.shard-2.json"]  # the jobs went to all three
    for number, (one, stored_one, served_one) in enumerate(
        zip(plain_said, stored_said, served_said, strict=True)
    ):
        assert _unordered(stored_one) == _unordered(one), number
        assert _unordered(served_one) == _unordered(one), number


def _unordered(value: Any) -> Any:
    """``_steady(value)``, lists of records in any order: FIFO holds within a shard, so a worker
    finishes the jobs of several shards in another order than one queue's."""
    steady = _steady(value)
    if isinstance(steady, list) and all(isinstance(item, dict) for item in steady):
        return sorted(steady, key=lambda item: json.dumps(item, sort_keys=True))
    return steady
