"""``jqueue serve`` as a team first meets it: the start lines name the dashboard, and clients
and the command line find the token in ``JQUEUE_TOKEN``."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest
from playwright.async_api import expect

from browser import chromium
from jqueue import BrokerQueue, LocalFileSystemStorage, ServiceError, connect
from servers import jqueue_serve

pytestmark = pytest.mark.slow


async def test_the_start_lines_name_the_dashboard(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    log = tmp_path / "serve.log"
    with jqueue_serve(str(root), log) as url:
        lines = log.read_text().splitlines()
    assert lines[:2] == [
        f"jqueue serve: the queues under {root} at {url} (Ctrl-C stops)",
        f"dashboard: {url}/",
    ]


async def test_connect_and_serve_read_the_token_from_jqueue_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    env = os.environ | {"JQUEUE_TOKEN": "s3cret"}
    with jqueue_serve(str(root), tmp_path / "serve.log", env=env) as url:
        monkeypatch.delenv("JQUEUE_TOKEN", raising=False)
        async with connect(url, "q") as refused:
            with pytest.raises(ServiceError) as caught:
                await refused.enqueue("e", b"x")
        assert caught.value.status == 401
        monkeypatch.setenv("JQUEUE_TOKEN", "s3cret")
        async with connect(url, "q") as queue:
            job = await queue.enqueue("e", b"x")
            [claimed] = await queue.dequeue("e")
            assert claimed.id == job.id
        async with connect(url, "q", token="wrong") as given:  # a token passed comes first
            with pytest.raises(ServiceError) as wrong:
                await given.enqueue("e", b"x")
        assert wrong.value.status == 401


async def test_the_dashboard_lists_queues_made_without_the_service_on_a_file_url_root(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    root.mkdir()
    async with BrokerQueue(LocalFileSystemStorage(root / "before.json")) as made:
        await made.enqueue("e", b"x")
    with jqueue_serve(root.as_uri(), tmp_path / "serve.log") as url:
        command = [sys.executable, "-m", "jqueue", "--storage", (root / "by-cli.json").as_uri()]
        made_by_cli = await asyncio.to_thread(
            subprocess.run, [*command, "enqueue", "e", "y"], capture_output=True, text=True, timeout=120
        )
        assert made_by_cli.returncode == 0, made_by_cli.stderr
        async with chromium() as browser:
            page = await browser.new_page()
            await page.goto(f"{url}/")
            for name in ("before", "by-cli"):
                await expect(page.locator(f"#queues tr[data-queue='{name}']")).to_have_count(1)
            await expect(page.get_by_text("No queues yet.")).to_have_count(0)


@pytest.mark.parametrize("command", ["serve", "dashboard"])
def test_a_port_in_use_is_one_line_before_anything_starts(tmp_path: Path, command: str) -> None:
    import socket

    root = tmp_path / "root"
    root.mkdir()
    queue = root / "jobs.json"

    async def fill() -> None:
        async with BrokerQueue(LocalFileSystemStorage(queue)) as q:
            await q.enqueue("e", b"x")

    asyncio.run(fill())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        storage = str(root) if command == "serve" else str(queue)
        done = subprocess.run(
            [sys.executable, "-m", "jqueue", command, "--storage", storage, "--listen", f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}: "), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (root / "_broker.json").exists(), "no broker record taken"
