"""A mistyped queue says so: a worker started on a queue that does not exist names the queues
next to it, and an enqueue through ``jqueue serve`` that made a new queue says that it did,
with the nearest name the service had."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from servers import jqueue_serve

WORKER = (
    "from jqueue import Worker\n"
    "def make(queue):\n"
    "    worker = Worker(queue)\n"
    "    @worker.handler('mail')\n"
    "    async def mail(job):\n"
    "        return None\n"
    "    return worker\n"
)


def _jqueue(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    bare = {k: v for k, v in os.environ.items() if not k.startswith("JQUEUE_")}
    done = subprocess.run(
        [sys.executable, "-m", "jqueue", *args],
        capture_output=True,
        text=True,
        env=bare | {"COLUMNS": "200"},
        cwd=cwd,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_a_worker_on_a_mistyped_path_names_the_queues_next_to_it(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(WORKER)
    (tmp_path / "queues").mkdir()
    _jqueue(tmp_path, "--storage", "queues/emails.json", "enqueue", "mail", "hi")
    _jqueue(tmp_path, "--storage", "queues/sms.json", "enqueue", "mail", "hi")
    typo = _jqueue(tmp_path, "--storage", "queues/emials.json", "worker", "tasks:make", "--burst")
    where = tmp_path / "queues" / "emials.json"
    assert (
        f"WARNING jqueue.worker no queue at {where} yet: the worker waits for its first job;"
        " the queues next to it: emails.json, sms.json (did you mean emails.json?)"
    ) in typo.stderr
    assert not where.exists()
    nowhere = _jqueue(tmp_path, "--storage", "elsewhere/emails.json", "worker", "tasks:make", "--burst")
    assert "the worker waits for its first job; there is no queue next to it\n" in nowhere.stderr
    right = _jqueue(tmp_path, "--storage", "queues/emails.json", "worker", "tasks:make", "--burst", "--json")
    assert "no queue at" not in right.stderr
    assert json.loads(right.stdout)["acked"] == 1


def test_an_enqueue_through_a_server_says_it_made_a_queue(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(WORKER)
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        served = ("--server", url, "--queue")
        first = _jqueue(tmp_path, *served, "emails", "enqueue", "mail", "hi")
        assert first.stderr == f"created queue emails through jqueue serve at {url}: it did not exist\n"
        again = _jqueue(tmp_path, *served, "emails", "enqueue", "mail", "hi")
        assert again.stderr == ""
        typo = _jqueue(tmp_path, *served, "emials", "enqueue", "mail", "hi")
        assert typo.stderr == (
            f"created queue emials through jqueue serve at {url}: it did not exist (did you mean emails?)\n"
        )
        said = (
            f"no queue at queue emailz through jqueue serve at {url} yet: the worker waits for its first"
            " job; the queues next to it: emails, emials (did you mean emails?)"
        )
        assert said in _waiting_worker(tmp_path, *served, "emailz", "worker", "tasks:make")


def _waiting_worker(cwd: Path, *args: str) -> str:
    """What a worker that waits (no ``--burst``) logs until it has logged its start; then it is stopped."""
    bare = {k: v for k, v in os.environ.items() if not k.startswith("JQUEUE_")}
    log = cwd / "worker.log"
    with log.open("w") as sink:
        worker = subprocess.Popen([sys.executable, "-m", "jqueue", *args], stderr=sink, env=bare, cwd=cwd)
        try:
            deadline = time.monotonic() + 60
            while "worker started" not in log.read_text() and worker.poll() is None:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
        finally:
            worker.send_signal(signal.SIGINT)
            worker.wait(60)
    return log.read_text()
