"""The dashboard of ``jqueue serve`` in a real headless Chromium, on a file root and on S3 (moto).

A served queue is filled with known jobs through ``jqueue.connect``; the browser signs in,
reads the numbers each page shows, requeues and purges dead letters through confirmations,
pauses an entrypoint (and a client stops getting its jobs), and watches a page update by
itself. Screenshots of each page are checked to be images of the window's size.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.async_api import Page, ViewportSize, expect

from browser import chromium, png_size
from jqueue import BrokerQueue, Job, JobStatus, RemoteQueue, Worker, connect, current_job, sharded
from jqueue.adapters.service.wire.root import root_storage
from servers import LOOPBACK, free_port, jqueue_serve

pytestmark = pytest.mark.slow

TOKEN = "dashboard-test-token"
WINDOW: ViewportSize = {"width": 1280, "height": 900}


async def fill(queue: RemoteQueue | BrokerQueue) -> dict[str, str]:
    """Put known jobs in ``queue``: 12 email jobs and one delayed, 3 sms jobs; 2 email jobs
    acked, 2 dead of an SMTP error, 1 sms job dead of a KeyError. Returns some of their ids."""
    emails = await queue.enqueue_many(
        "email", [json.dumps({"to": f"u{i}@example.com"}).encode() for i in range(12)]
    )
    await queue.enqueue("email", b"later", delay=timedelta(hours=1), dedup_key="weekly-digest")
    await queue.enqueue_many("sms", [b"\x00\x01\x02binary"] * 3)
    claimed = await queue.dequeue("email", batch_size=4)
    assert [job.id for job in claimed] == [job.id for job in emails[:4]]
    for job in claimed[:2]:
        await queue.ack(job)
    for job in claimed[2:]:
        await queue.nack(
            job, error="SMTPError: connection refused\nTraceback (most recent call last): ...", max_attempts=1
        )
    [sms] = await queue.dequeue("sms")
    await queue.nack(sms, error="KeyError: 'phone'", max_attempts=1)
    return {"email": emails[5].id, "dead_email": claimed[2].id, "dead_sms": sms.id}


def row(selector: str, count: str) -> str:
    return f"{selector} td[data-count='{count}']"


async def expect_counts(page: Page, selector: str, **counts: int) -> None:
    for name, value in counts.items():
        await expect(page.locator(row(selector, name))).to_have_text(f"{value:,}")


async def shot(page: Page, path: Path) -> None:
    await page.screenshot(path=str(path))
    assert png_size(path) == (WINDOW["width"], WINDOW["height"])
    assert path.stat().st_size > 10_000  # a rendered page, not a blank one


def unsigned_post(url: str) -> int:
    """POST a form with neither the token nor a session; return the status."""
    return post_form(url, {"action": "pause"}, {})


def forged_post(url: str, fields: dict[str, str]) -> int:
    """POST a form with the token but without the page's CSRF value; return the status."""
    return post_form(url, fields, {"Authorization": f"Bearer {TOKEN}"})


def post_form(url: str, fields: dict[str, str], headers: dict[str, str]) -> int:
    body = urllib.parse.urlencode(fields).encode()
    headers = {**headers, "Content-Type": "application/x-www-form-urlencoded"}
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, body, headers, method="POST"), timeout=10
        ) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


async def test_the_dashboard_in_a_browser(
    served_root: tuple[str, dict[str, str] | None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where, env = served_root
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    direct = BrokerQueue(root_storage(where, "shop"))  # reads the storage itself, beside the broker
    with jqueue_serve(where, tmp_path / "serve.log", env=env, options=["--token", TOKEN]) as url:
        async with connect(url, "shop", token=TOKEN) as queue:
            ids = await fill(queue)
            async with chromium() as browser:
                page = await browser.new_page(viewport=WINDOW)

                # Signing in: the dashboard sends a stranger to the form; a wrong token is refused.
                await page.goto(f"{url}/")
                await expect(page).to_have_url(f"{url}/login?next=%2F")
                await expect(page.get_by_role("button", name="Sign out")).to_have_count(0)
                await page.get_by_label("Token").fill("wrong")
                await page.get_by_role("button", name="Sign in").click()
                await expect(page.get_by_role("alert")).to_contain_text("not the right one")
                await shot(page, tmp_path / "login.png")
                await page.get_by_label("Token").fill(TOKEN)
                await page.get_by_role("button", name="Sign in").click()
                await expect(page).to_have_url(f"{url}/")
                await expect(page.get_by_role("button", name="Sign out")).to_have_count(1)

                # The overview: the queue's counts, the broker, the last hour's finished jobs.
                shop = "#queues tr[data-queue='shop']"
                await expect_counts(
                    page, shop, queued=10, scheduled=1, in_progress=0, dead=3, acked=2, failed=3
                )
                await expect(page.locator("#broker-address")).to_have_text(url)
                await expect(page.locator(f"{shop} td[data-count='workers']")).to_have_text("1")
                await shot(page, tmp_path / "overview.png")

                # The queue page: one row per entrypoint.
                await page.get_by_role("link", name="shop", exact=True).click()
                await expect_counts(page, "tr[data-entrypoint='email']", queued=8, scheduled=1, dead=2)
                await expect_counts(page, "tr[data-entrypoint='sms']", queued=2, scheduled=0, dead=1)
                await shot(page, tmp_path / "queue.png")

                # Jobs: filtered by status and by dedup key; a job's page previews its payload.
                await page.get_by_role("link", name="Jobs", exact=True).click()
                await page.get_by_label("Status").select_option("dead")
                await page.get_by_role("button", name="Filter").click()
                await expect(page.locator("#jobs tbody tr")).to_have_count(3)
                await page.get_by_label("Status").select_option("")
                await page.get_by_label("Dedup key").fill("weekly-digest")
                await page.get_by_role("button", name="Filter").click()
                await expect(page.locator("#jobs tbody tr")).to_have_count(1)
                await page.goto(f"{url}/q/shop/jobs/{ids['email']}")
                await expect(page.locator("#payload")).to_contain_text('"to": "u5@example.com"')
                await expect(page.locator("#job-status")).to_have_text("queued")
                await shot(page, tmp_path / "job.png")
                await page.goto(f"{url}/q/shop/jobs/{ids['dead_email']}")
                await expect(page.locator("#job-error")).to_contain_text("SMTPError: connection refused")

                # Dead letters grouped by error; requeue one group through its confirmation.
                await page.get_by_role("link", name="Dead letters").click()
                await expect(page.locator("#dead-total")).to_have_text("3")
                groups = page.locator("#groups tbody tr")
                await expect(groups).to_have_count(2)
                await expect(groups.nth(0).locator("td[data-count='jobs']")).to_have_text("2")
                await shot(page, tmp_path / "dead.png")
                await groups.filter(has_text="KeyError").get_by_role("button", name="Requeue").click()
                await expect(page.locator("#question")).to_have_text(
                    "Requeue 1 dead job of queue shop that failed with “KeyError: 'phone'”?"
                )
                await page.get_by_role("button", name="Requeue 1").click()
                await expect(page.get_by_role("status")).to_have_text("Requeued 1 dead job.")
                back = await direct.find(ids["dead_sms"])
                assert back is not None
                assert (back.status, back.attempts) == (JobStatus.QUEUED, 0)

                # Purge the rest, after a confirmation that says how many.
                await page.get_by_role("button", name="Purge all").click()
                await expect(page.locator("#question")).to_have_text("Purge 2 dead jobs of queue shop?")
                await page.get_by_role("button", name="Purge 2").click()
                await expect(page.get_by_role("status")).to_have_text("Purged 2 dead jobs.")
                assert await direct.find(ids["dead_email"]) is None

                # Pausing an entrypoint: a client stops getting its jobs, and gets the others.
                await page.goto(f"{url}/q/shop")
                await page.locator("tr[data-entrypoint='email']").get_by_role("button", name="Pause").click()
                await expect(page.locator("tr[data-entrypoint='email'] [data-paused]")).to_be_visible()
                claimed = await queue.dequeue(batch_size=20)
                assert [job.entrypoint for job in claimed] == ["sms"] * 3
                await page.locator("tr[data-entrypoint='email']").get_by_role("button", name="Resume").click()
                assert {job.entrypoint for job in await queue.dequeue(batch_size=1)} == {"email"}

                # A throttle set from the page holds for every client, and is lifted from it.
                await page.get_by_label("Claims").first.fill("2")
                await page.get_by_role("button", name="Throttle").first.click()
                await expect(page.get_by_role("status")).to_have_text(
                    "Throttled the queue to 2 claims per 1 s."
                )
                assert (await direct.stats()).throttles == {None: (2, 1.0)}
                await page.get_by_role("button", name="Lift the queue's throttle").click()
                assert (await direct.stats()).throttles == {}

                # A limit on the jobs of an entrypoint in progress, set and lifted from the page.
                sms = page.locator("tr[data-entrypoint='sms']")
                await sms.get_by_label("At most", exact=True).fill("1")
                await sms.get_by_role("button", name="Limit").click()
                await expect(page.locator("tr[data-entrypoint='sms'] [data-limit]")).to_have_text(
                    "at most 1 running"
                )
                assert (await direct.stats()).limits == {"sms": 1}
                await (
                    page.locator("tr[data-entrypoint='sms']").get_by_role("button", name="Lift limit").click()
                )
                await expect(page.get_by_role("status")).to_have_text("Lifted the limit of entrypoint sms.")
                assert (await direct.stats()).limits == {}

                # Limits and throttles per tenant of the whole queue, set and lifted from the page.
                tenants = page.locator("#per-tenant")
                await tenants.get_by_label("At most, of each tenant").fill("2")
                await tenants.get_by_role("button", name="Limit each tenant").click()
                await expect(page.get_by_role("status")).to_have_text(
                    "Limited each tenant of the queue to 2 jobs in progress at once."
                )
                await tenants.get_by_label("Claims of each tenant").fill("5")
                await tenants.get_by_role("button", name="Throttle each tenant").click()
                await expect(page.locator("#per-tenant")).to_contain_text(
                    "Each tenant is throttled to 5 claims per 1.0 s."
                )
                stats = await direct.stats()
                assert (stats.tenant_limits, stats.tenant_throttles) == ({None: 2}, {None: (5, 1.0)})
                assert (stats.limits, stats.throttles) == ({}, {})  # the queue's own are apart
                await page.get_by_role("button", name="Lift the limit per tenant").click()
                lifted = "Lifted the limit per tenant of the queue."
                await expect(page.get_by_role("status")).to_have_text(lifted)
                await page.get_by_role("button", name="Lift the throttle per tenant").click()
                await expect(page.get_by_role("status")).to_have_text(
                    "Lifted the throttle per tenant of the queue."
                )
                stats = await direct.stats()
                assert (stats.tenant_limits, stats.tenant_throttles) == ({}, {})
                await queue.limit("sms", 1, per_tenant=True)  # set by a client: shown and lifted here
                await page.reload()
                await expect(page.locator("tr[data-entrypoint='sms'] [data-tenant-limit]")).to_have_text(
                    "at most 1 running per tenant"
                )
                await sms.get_by_role("button", name="Lift limit per tenant").click()
                await expect(page.get_by_role("status")).to_have_text(
                    "Lifted the limit per tenant of entrypoint sms."
                )
                assert (await direct.stats()).tenant_limits == {}

                # Live: new jobs show up without a reload.
                await page.goto(f"{url}/")
                before = await page.locator(row(shop, "queued")).inner_text()
                await queue.enqueue_many("email", [b"x"] * 5)
                await expect(page.locator(row(shop, "queued"))).to_have_text(
                    f"{int(before) + 5:,}", timeout=10_000
                )
                assert int(await page.locator("#main").get_attribute("data-version") or "0") >= 1

                # A form without the page's CSRF value changes nothing, even with the token.
                status = await asyncio.to_thread(
                    forged_post, f"{url}/q/shop/act", {"action": "pause", "back": "/"}
                )
                assert status == 403
                assert (await direct.stats()).paused_claims == []


async def test_the_dashboard_refuses_strangers_and_bad_names(tmp_path: Path) -> None:
    (tmp_path / "root").mkdir()
    with jqueue_serve(str(tmp_path / "root"), tmp_path / "serve.log", options=["--token", TOKEN]) as url:
        assert await asyncio.to_thread(unsigned_post, f"{url}/q/shop/act") == 401
        async with chromium() as browser:
            page = await browser.new_page(viewport=WINDOW)
            await page.goto(f"{url}/login")
            await page.get_by_label("Token").fill(TOKEN)
            await page.get_by_role("button", name="Sign in").click()
            answer = await page.goto(f"{url}/q/no-such-queue")
            assert answer is not None
            assert answer.status == 404
            await expect(page.locator("#message")).to_have_text("No queue 'no-such-queue'.")
            answer = await page.goto(f"{url}/q/..%2Fetc")
            assert answer is not None
            assert answer.status in (400, 404)
            await page.goto(f"{url}/")
            await page.get_by_role("button", name="Sign out").click()
            await page.goto(f"{url}/q/shop")
            await expect(page).to_have_url(f"{url}/login?next=%2Fq%2Fshop")


def get(url: str, token: str | None = None) -> tuple[int, str]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:  # not listening yet
        return 0, ""


async def test_a_standby_points_to_the_broker_and_a_lone_queue_has_its_own_dashboard(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    async with BrokerQueue(root_storage(str(root), "mail")) as queue:
        await queue.enqueue_many("send", [b"a", b"b"])
    (root / "notes.json").write_text("not a queue")
    with (
        jqueue_serve(str(root), tmp_path / "active.log", options=["--token", TOKEN, "--standby"]) as active,
        jqueue_serve(str(root), tmp_path / "standby.log", options=["--token", TOKEN, "--standby"]) as standby,
    ):
        status, page = await asyncio.to_thread(get, f"{active}/", TOKEN)
        assert status == 200
        assert '<td data-count="queued">2</td>' in page  # a queue file the catalog never listed
        assert "Queue notes cannot be read" in page  # and a foreign file, reported, left as it is
        assert (root / "notes.json").read_text() == "not a queue"
        status, page = await asyncio.to_thread(get, f"{standby}/", TOKEN)
        assert status == 503
        assert f'<a href="{active}/">' in page

    lone = [sys.executable, "-m", "jqueue", "dashboard", "--storage"]
    typo = await asyncio.create_subprocess_exec(*lone, str(root / "mial.json"), stderr=subprocess.PIPE)
    _, said = await typo.communicate()
    assert typo.returncode == 1
    assert f"no queue at {root / 'mial.json'}" in said.decode()
    async with lone_dashboard(root / "mail.json", "mail") as (url, page):
        assert '<dd id="count-queued">2</dd>' in page
        assert "No broker" in (await asyncio.to_thread(get, f"{url}/"))[1]
        for view, marker in (("workers", 'id="no-broker"'), ("periodic", 'id="no-broker"')):
            status, page = await asyncio.to_thread(get, f"{url}/{view}")
            assert (status, marker in page) == (200, True), view


@contextlib.asynccontextmanager
async def lone_dashboard(location: Path, queue: str) -> AsyncIterator[tuple[str, str]]:
    """Run ``jqueue dashboard --storage LOCATION`` until the page of ``queue`` answers, and yield
    its URL and that page; then Ctrl-C it (it must exit 0)."""
    port = free_port()
    command = [sys.executable, "-m", "jqueue", "dashboard", "--storage", str(location)]
    proc = await asyncio.create_subprocess_exec(
        *command, "--listen", f"{LOOPBACK}:{port}", stderr=subprocess.PIPE
    )
    url = f"http://{LOOPBACK}:{port}"
    try:
        for _ in range(200):
            status, page = await asyncio.to_thread(get, f"{url}/q/{queue}")
            if status == 200:
                break
            await asyncio.sleep(0.1)
        yield url, page
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        assert await asyncio.wait_for(proc.wait(), 20) == 0


@pytest.mark.parametrize("served_root", ["file"], indirect=True)  # the pages read a root alike
async def test_results_progress_and_cancel_in_the_browser(
    served_root: tuple[str, dict[str, str] | None], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where, env = served_root
    for name, value in (env or {}).items():
        monkeypatch.setenv(name, value)
    direct = BrokerQueue(root_storage(where, "shop"))
    with jqueue_serve(where, tmp_path / "serve.log", env=env, options=["--token", TOKEN]) as url:
        async with connect(url, "shop", token=TOKEN) as queue:
            summed = await queue.enqueue("sum", b"[1, 2, 3]")
            report = await queue.enqueue("report", b"monthly")
            waiting = await queue.enqueue("report", b"yearly", delay=timedelta(hours=1))
            # beats every second: progress and a cancel are seen within that; a shorter lease ran
            # out on a loaded machine, and the report job went back to the queue mid-test
            worker = Worker(queue, concurrency=2, visibility_timeout=timedelta(seconds=3))
            interrupted = asyncio.Event()

            @worker.handler("sum")
            async def add(job: Job) -> int:
                return sum(json.loads(job.payload))

            @worker.handler("report")
            async def write_report(job: Job) -> None:
                current_job().progress(0.4, note="page 4 of 10")
                try:
                    await asyncio.sleep(120)
                except asyncio.CancelledError:
                    interrupted.set()
                    raise

            running = asyncio.create_task(worker.run())
            try:
                async with chromium() as browser:
                    page = await browser.new_page(viewport=WINDOW)
                    await page.goto(f"{url}/login")
                    await page.get_by_label("Token").fill(TOKEN)
                    await page.get_by_role("button", name="Sign in").click()

                    # A finished job's page shows what its handler returned.
                    assert await queue.result(summed.id, timeout=timedelta(seconds=20)) == b"6"
                    await page.goto(f"{url}/q/shop/jobs/{summed.id}")
                    await expect(page.locator("#history")).to_contain_text("acked")
                    await expect(page.locator("#result")).to_have_text("6")

                    # A running job's progress, on its page (updating by itself) and in the list.
                    await page.goto(f"{url}/q/shop/jobs/{report.id}")
                    await expect(page.locator("#job-progress")).to_contain_text("40%", timeout=15_000)
                    await expect(page.locator("#job-progress")).to_contain_text("page 4 of 10")
                    await page.goto(f"{url}/q/shop/jobs?status=in_progress")
                    await expect(page.locator(f"#jobs tr[data-job='{report.id}'] .progress")).to_contain_text(
                        "40%"
                    )

                    # Cancel it: confirmed, its worker is asked, the handler is stopped.
                    await page.goto(f"{url}/q/shop/jobs/{report.id}")
                    await page.get_by_role("button", name="Cancel", exact=True).click()
                    await expect(page.locator("#question")).to_have_text("Cancel 1 job of queue shop?")
                    await page.get_by_role("button", name="Cancel 1").click()
                    await expect(page.get_by_role("status")).to_have_text(
                        "Cancelled 0 jobs; asked the workers of 1 job to stop them."
                    )
                    await asyncio.wait_for(interrupted.wait(), 15)
                    await expect(page.locator("#history")).to_contain_text("cancelled", timeout=15_000)
                    finished = await direct.finished(report.id)
                    assert finished is not None
                    assert finished.outcome is JobStatus.CANCELLED

                    # A waiting job is cancelled at once.
                    await page.goto(f"{url}/q/shop/jobs/{waiting.id}")
                    await page.get_by_role("button", name="Cancel", exact=True).click()
                    await page.get_by_role("button", name="Cancel 1").click()
                    await expect(page.get_by_role("status")).to_have_text("Cancelled 1 job.")
                    assert await direct.find(waiting.id) is None
                    await shot(page, tmp_path / "cancelled.png")
            finally:
                worker.stop()
                await running


async def test_a_sharded_queue_is_one_queue_on_the_dashboard(tmp_path: Path) -> None:
    """The shards of a queue served by ``jqueue serve`` add up: one row on the overview, its jobs
    paged across the shards, its dead letters grouped across them and requeued in each."""
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log", options=["--token", TOKEN]) as url:
        async with sharded(url, "wide", 3, broker="require", token=TOKEN) as queue:
            await queue.enqueue_many("mail", [b"%d" % n for n in range(60)])
            claimed = [
                job for _ in range(3) for job in await queue.dequeue(batch_size=2)
            ]  # each shard first once
            for job in claimed[:3]:
                await queue.ack(job)
            for job in claimed[3:]:
                await queue.nack(job, error="SMTPError: refused", max_attempts=1)
            live = {job.id for job in await queue.jobs(limit=None)}
            assert all([await shard.count() for shard in queue.shards])  # every shard holds jobs
            async with chromium() as browser:
                page = await browser.new_page(viewport=WINDOW)
                await page.goto(f"{url}/login")
                await page.get_by_label("Token").fill(TOKEN)
                await page.get_by_role("button", name="Sign in").click()
                await expect(page).to_have_url(f"{url}/")
                await expect(page.locator("#queues tbody tr")).to_have_count(1)
                await expect_counts(page, "#queues tr[data-queue='wide']", queued=54, dead=3, acked=3)
                await expect(page.locator(row("#queues tr[data-queue='wide']", "workers"))).to_have_text("1")

                await page.goto(f"{url}/workers")
                await expect(page.locator("main")).to_contain_text("wide")
                assert "wide.shard-" not in await page.content()  # a worker of a shard is the queue's

                await page.goto(f"{url}/q/wide/jobs")
                seen = await page.locator("tr[data-job]").evaluate_all("rows => rows.map(r => r.dataset.job)")
                assert len(seen) == 50
                await page.locator("#next-page").click()
                await expect(page.locator("tr[data-job]")).to_have_count(len(live) - 50)
                more = await page.locator("tr[data-job]").evaluate_all("rows => rows.map(r => r.dataset.job)")
                assert set(seen) | set(more) == live
                await expect(page.locator("#next-page")).to_have_count(0)

                await page.goto(f"{url}/q/wide/dead")
                await expect(page.locator("#dead-total")).to_have_text("3")
                groups = page.locator("#groups tbody tr")
                await expect(groups).to_have_count(1)
                await expect(groups.nth(0).locator("td[data-count='jobs']")).to_have_text("3")
                await page.get_by_role("button", name="Requeue all").click()
                await page.get_by_role("button", name="Requeue 3").click()
                await expect(page.get_by_role("status")).to_have_text("Requeued 3 dead jobs.")
            assert await queue.count(JobStatus.DEAD) == 0
            assert await queue.count(JobStatus.QUEUED) == 57


async def test_the_dashboard_of_a_sharded_queue_on_its_storage_adds_the_shards_up(tmp_path: Path) -> None:
    async with sharded(str(tmp_path), "wide", 3) as queue:
        await queue.enqueue_many("mail", [b"%d" % n for n in range(30)])
        assert all([await shard.count() for shard in queue.shards])
    async with lone_dashboard(tmp_path / "wide.json", "wide") as (_, page):
        assert '<dd id="count-queued">30</dd>' in page
