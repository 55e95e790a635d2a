"""Take the screenshots of the dashboard in docs/serve.md: a ``jqueue serve`` on a temporary root, two
queues with jobs in every state, and a headless Chromium (the system's) driven by Playwright.

Example::

    .venv/bin/python tools/dashboard_screenshots.py --out docs/screenshots
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from playwright.async_api import async_playwright

from jqueue import BrokerQueue, Job, RemoteQueue, Worker, connect
from served import jqueue_serve

FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
ERRORS = ["SMTPError: 421 try again later", "TimeoutError: upstream took more than 30 s", "KeyError: 'phone'"]


async def work(queue: RemoteQueue | BrokerQueue, entrypoints: list[str], seconds: float) -> None:
    """Claim and finish jobs for ``seconds``, one in ten failing for good."""
    rng = random.Random(7)
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        for job in await queue.dequeue(entrypoints, batch_size=rng.randint(5, 30)):
            if rng.random() < 0.1:
                error = rng.choice(ERRORS)  # as a worker records it: the error, its traceback
                traceback = f'Traceback (most recent call last):\n  File "shop.py", line 12\n{error}'
                await queue.nack(job, error=f"{error}\n{traceback}", max_attempts=1)
            else:
                await queue.ack(
                    job, result=json.dumps({"done": job.entrypoint, "ms": rng.randint(3, 90)}).encode()
                )
        await asyncio.sleep(0.2)


async def fill(url: str) -> str:
    async with connect(url, "orders") as orders, connect(url, "emails") as emails:
        await orders.enqueue_many(
            "charge", [json.dumps({"order": i, "cents": 1999 + i}).encode() for i in range(900)]
        )
        await orders.enqueue_many("ship", [json.dumps({"order": i}).encode() for i in range(400)])
        await orders.enqueue(
            "invoice", b'{"month": "2026-11"}', delay=timedelta(hours=6), dedup_key="invoice-2026-11"
        )
        await emails.enqueue_many(
            "welcome", [json.dumps({"to": f"user{i}@example.com"}).encode() for i in range(300)]
        )
        await asyncio.gather(work(orders, ["charge", "ship"], 12), work(emails, ["welcome"], 12))
        held = await orders.dequeue("ship", batch_size=3, visibility_timeout=timedelta(minutes=5))
        for job, done in zip(held, (0.35, 0.8, 0.1), strict=True):  # as a handler's reports would
            await orders.heartbeat(job, progress=done, note=f"packed {round(done * 20)} of 20 items")
        return held[0].id


async def pack(job: Job) -> None:
    """A handler that takes its time, so the workers view shows jobs in progress."""
    await asyncio.sleep(60)


async def shoot(url: str, job_id: str, out: Path) -> None:
    async with connect(url, "orders") as orders, connect(url, "emails") as emails:
        packing = Worker(orders, concurrency=4)
        packing.register("ship", pack)
        packing.cron(None, "invoice", b"{}", every=timedelta(minutes=15))
        sending = Worker(emails, concurrency=8)
        sending.register("welcome", pack)
        sending.cron(None, "digest", b"{}", every=timedelta(hours=1))
        running = [asyncio.create_task(w.run(install_signals=False)) for w in (packing, sending)]
        await asyncio.sleep(3)  # the workers' first calls carry their reports
        async with async_playwright() as driver:
            browser = await driver.chromium.launch(executable_path="/usr/bin/chromium", args=FLAGS)
            page = await browser.new_page(viewport={"width": 1280, "height": 860})
            pages = {
                "overview": "/",
                "queue": "/q/orders",
                "jobs": "/q/orders/jobs?status=in_progress",
                "job": f"/q/orders/jobs/{job_id}",
                "dead": "/q/orders/dead",
                "finished": "/q/orders/finished",
                "workers": "/workers",
                "periodic": "/periodic",
            }
            for name, path in pages.items():
                await page.goto(url + path)
                await page.screenshot(path=str(out / f"dashboard-{name}.png"))
                print(out / f"dashboard-{name}.png")
            await browser.close()
        for worker in (packing, sending):
            worker.stop(immediate=True)
        await asyncio.gather(*running)


async def take(url: str, out: Path) -> None:
    await shoot(url, await fill(url), out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/screenshots"))
    options = parser.parse_args()
    options.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, jqueue_serve(Path(tmp)) as (url, _):
        asyncio.run(take(url, options.out))


if __name__ == "__main__":
    main()
