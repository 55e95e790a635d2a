"""The dashboard's views of what ran, against Flower and saq-board: finished jobs (filtered by
outcome, entrypoint and time, with results and errors), workers (host, pid, queue, handlers,
concurrency, jobs in progress, last beat; stale ones marked) and periodic jobs (schedule, last
and next run), in a real headless Chromium over a real ``jqueue serve`` and a worker process."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import urllib.request
from pathlib import Path

import pytest
from playwright.async_api import expect

from browser import chromium
from jqueue import Job, JobStatus, Worker, connect
from jqueue.adapters.service.wire.bodies import CLIENT_HEADER, MAX_WORKER_HEADER, WORKER_HEADER
from servers import jqueue_serve
from test_dashboard import WINDOW, shot

pytestmark = pytest.mark.slow

WORKER = """
import asyncio, sys
from datetime import timedelta
from jqueue import Worker, connect

async def resize(job):
    await asyncio.Event().wait()  # runs until the process is killed

async def main():
    async with connect(sys.argv[1], "shop") as queue:
        worker = Worker(queue, concurrency=2)
        worker.register("resize", resize)
        worker.cron(None, "report", b"weekly", every=timedelta(hours=1))
        await worker.run()

asyncio.run(main())
"""


async def _nothing(job: Job) -> None:
    return None


async def test_finished_jobs_workers_and_periodic_jobs_in_the_browser(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        async with connect(url, "shop") as queue:
            await queue.enqueue_many("mail", [b"ok", b"fails", b"dropped"])
            await queue.enqueue("resize", b"big.png")
            [ok] = await queue.dequeue("mail")
            await queue.ack(ok, result=b'{"sent": true}')
            [fails] = await queue.dequeue("mail")
            error = 'Traceback (most recent call last):\n  File "x.py"\nValueError: bad address'
            await queue.nack(fails, error=error, dead=True)
            [dropped] = await queue.peek("mail")
            assert await queue.cancel(dropped.id)
            worker = await asyncio.create_subprocess_exec(sys.executable, str(script), url)
            try:
                async with chromium() as browser:
                    page = await browser.new_page(viewport=WINDOW)

                    # Workers: the worker process, what it runs and that it is alive.
                    await page.goto(f"{url}/workers")
                    me = page.locator(f"#workers tr[data-worker$=':{worker.pid}']")
                    await expect(me.locator("td[data-field='handlers']")).to_have_text(
                        "resize", timeout=30_000
                    )
                    await expect(me.locator("td[data-field='concurrency']")).to_have_text("2")
                    await expect(me.locator("td[data-field='running']")).to_have_text("1")
                    await expect(me.locator("td[data-field='state']")).to_have_text("live")
                    await expect(me).to_have_attribute("data-queue", "shop")
                    await shot(page, tmp_path / "workers.png")

                    # Periodic jobs: the schedule, its last tick's job (no worker handles it yet), the next.
                    await page.get_by_role("link", name="Periodic jobs").click()
                    report = page.locator("#periodic tr[data-entrypoint='report']")
                    await expect(report.locator("td[data-field='schedule']")).to_have_text("every 3600 s")
                    await expect(report.locator("td[data-field='last-job']")).to_have_text("queued")
                    await expect(report.locator("td[data-field='next']")).to_contain_text("in ")
                    await shot(page, tmp_path / "periodic.png")

                    # Finished jobs: newest first, filtered; a result and an error's last line.
                    await page.goto(f"{url}/q/shop/finished")
                    rows = page.locator("#finished tbody tr")
                    await expect(rows).to_have_count(3)
                    await expect(page.locator("#finished-total")).to_have_text("3")
                    await expect(rows.nth(0).locator("td[data-outcome]")).to_have_text("cancelled")
                    await page.get_by_label("Outcome").select_option("dead")
                    await page.get_by_role("button", name="Filter").click()
                    await expect(rows).to_have_count(1)
                    await expect(rows.locator("td.error")).to_have_text("ValueError: bad address")
                    await page.get_by_label("Outcome").select_option("acked")
                    await page.get_by_label("Finished within").select_option("1h")
                    await page.get_by_role("button", name="Filter").click()
                    await expect(rows.locator("td.result")).to_have_text('{ "sent": true }')
                    await shot(page, tmp_path / "finished.png")
                    await page.get_by_label("Entrypoint").select_option("resize")
                    await page.get_by_role("button", name="Filter").click()
                    await expect(page.locator("#no-finished")).to_be_visible()
                    await rows.first.wait_for(state="detached")

                    # A worker that ends its run says so, and is no longer listed.
                    async with connect(url, "shop") as own:
                        burst = Worker(own)
                        burst.register("nothing", _nothing)
                        assert (await burst.run(until_empty=True, install_signals=False)).claimed == 0
                    await page.goto(f"{url}/workers")
                    await expect(me).to_have_count(1)
                    await expect(page.locator(f"#workers tr[data-worker$=':{os.getpid()}']")).to_have_count(0)

                    # A worker that stops calling is marked stale.
                    worker.send_signal(signal.SIGKILL)
                    await asyncio.wait_for(worker.wait(), 30)
                    await page.goto(f"{url}/workers")
                    await expect(me.locator("td[data-field='state']")).to_have_text("stale", timeout=40_000)
                    await expect(
                        page.locator(f"#workers tr.stale[data-worker$=':{worker.pid}']")
                    ).to_have_count(1)
            finally:
                if worker.returncode is None:
                    worker.kill()
                    await asyncio.wait_for(worker.wait(), 30)
            assert (await queue.finished(ok.id)).outcome is JobStatus.ACKED  # type: ignore[union-attr]


def _call(url: str, path: str, headers: dict[str, str] | None = None) -> str:
    """POST an empty JSON body to ``path`` (GET without ``headers``); the answer's text."""
    body, method = (b"{}", "POST") if headers is not None else (None, "GET")
    request = urllib.request.Request(url + path, body, headers or {}, method=method)
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.read().decode())


async def test_a_worker_of_a_queue_not_made_yet_is_listed_and_a_bad_report_is_ignored(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    reports = {"a:1": "{not json", "b:2": "x" * (MAX_WORKER_HEADER + 1), "c:3": '{"handlers": 5}'}
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        for client, report in reports.items():
            headers = {CLIENT_HEADER: client, WORKER_HEADER: report, "Content-Type": "application/json"}
            assert await asyncio.to_thread(_call, url, "/v1/queues/later/dequeue", headers) == '{"jobs":[]}'
        page = await asyncio.to_thread(_call, url, "/workers")
    for client in reports:
        assert f'<tr data-worker="{client}" data-queue="later" >' in page
    assert page.count("not reported") == 3
