"""A job's workflow seen and cancelled (ADR 0019, stage 3): ``workflow`` finds every job linked
to a job by ``after``, live or in the history; ``cancel_workflow`` ends the unfinished ones in
one commit; the command line and the dashboard show both."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.async_api import expect

from browser import chromium
from conftest import Backend
from jqueue import DirectQueue, JobNotFoundError, JobSpec, JobStatus, Layout, connect
from queues import log_entries, open_queue
from servers import jqueue_serve
from test_dashboard import WINDOW

DIAMOND = [
    JobSpec("fetch", b"", id="left"),
    JobSpec("fetch", b"", id="right"),
    JobSpec("merge", b"", id="merge", after=["left", "right"], tenant="acme"),
    JobSpec("notify", b"", id="notify", after=["merge"]),
    JobSpec("other", b"", id="alone"),
    JobSpec("other", b"", id="other-child", after=["alone"]),
]


async def test_a_workflow_is_every_job_linked_either_way_live_or_finished(
    file_or_s3: Backend, layout: Layout
) -> None:
    storage, name = file_or_s3.new()  # a view: the same through a broker (cancel_workflow runs both)
    async with DirectQueue(storage, layout=layout) as queue:
        await queue.enqueue_many(DIAMOND)
        [left] = await queue.dequeue("fetch")
        await queue.ack(left, result=b"L")
        shown = await queue.workflow("notify")
        assert [job.id for job in shown] == ["left", "right", "merge", "notify"]  # oldest enqueue first
        assert [job.status for job in shown] == [
            JobStatus.ACKED,
            JobStatus.QUEUED,
            JobStatus.WAITING,
            JobStatus.WAITING,
        ]
        assert shown[2].after == ("left", "right")
        assert [job.id for job in await queue.workflow("left")] == ["left", "right", "merge", "notify"]
        assert [job.id for job in await queue.workflow("alone")] == ["alone", "other-child"]
        with pytest.raises(JobNotFoundError):
            await queue.workflow("nowhere")
        if layout == "log":
            await queue.checkpoint()

    async with DirectQueue(file_or_s3.handle(name), layout=layout) as reopened:  # the history keeps `after`
        [right] = await reopened.dequeue("fetch")
        await reopened.ack(right)
        [merge] = await reopened.dequeue("merge")
        await reopened.ack(merge)
        finished = await reopened.workflow("notify")
        assert [(job.id, job.status) for job in finished] == [
            ("left", JobStatus.ACKED),
            ("right", JobStatus.ACKED),
            ("merge", JobStatus.ACKED),
            ("notify", JobStatus.QUEUED),
        ]
        assert finished[2].after == ("left", "right")  # from merge's history record


async def test_cancel_workflow_ends_every_unfinished_job_in_one_commit(
    file_or_s3: Backend, queue_kind: str
) -> None:
    storage, _ = file_or_s3.new()
    async with open_queue(queue_kind, storage, layout="log") as queue:
        await queue.enqueue_many(DIAMOND)
        [left] = await queue.dequeue("fetch")  # left runs; right is queued; merge and notify wait
        await queue.enqueue("dies", b"", id="dies", after=["right"], max_attempts=1)
        entries = len(await log_entries(storage))
        after = await queue.cancel_workflow("merge")
        if queue_kind == "direct":
            assert len(await log_entries(storage)) == entries + 1
        states = {job.id: job for job in after}
        assert set(states) == {"left", "right", "merge", "notify", "dies"}
        assert states["left"].status is JobStatus.IN_PROGRESS  # its worker is asked to stop it
        assert states["left"].cancel_requested_at is not None
        ended = ("right", "merge", "notify", "dies")
        assert all(states[job_id].status is JobStatus.CANCELLED for job_id in ended)
        for job_id in ended:  # each says why, not "parent ... was cancelled"
            record = await queue.finished(job_id)
            assert record is not None
            assert record.error == "its workflow was cancelled (by job merge)"
        assert await queue.find("alone") is not None  # another workflow: untouched
        await queue.release(left)  # the worker stops: it ends cancelled
        assert {job.status for job in await queue.cancel_workflow("merge")} == {JobStatus.CANCELLED}


async def test_the_command_line_shows_and_cancels_a_workflow(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "jqueue", "--storage", str(path), *args]
        wide = os.environ | {"COLUMNS": "200"}  # rows on one line each, whatever the ages' widths
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False, env=wide)

    for spec in DIAMOND[:4]:
        after = [item for parent in spec.after or () for item in ("--after", parent)]
        added = await asyncio.to_thread(cli, "enqueue", spec.entrypoint, "--id", str(spec.id), *after)
        assert added.returncode == 0, added.stderr
    shown = await asyncio.to_thread(cli, "workflow", "notify")
    assert shown.returncode == 0, shown.stderr
    lines = [
        line for line in shown.stdout.splitlines() if "fetch" in line or "merge" in line or "notify" in line
    ]
    assert len(lines) == 4
    assert "left, right" in next(line for line in lines if "merge" in line)
    assert "(end)" in next(line for line in lines if "notify" in line)
    listed = await asyncio.to_thread(cli, "workflow", "left", "--json")
    assert [job["id"] for job in json.loads(listed.stdout)] == ["left", "right", "merge", "notify"]
    missing = await asyncio.to_thread(cli, "workflow", "nowhere")
    assert missing.returncode != 0
    assert "nowhere" in missing.stderr
    cancelled = await asyncio.to_thread(cli, "cancel", "right", "--workflow", "--json")
    assert cancelled.returncode == 0, cancelled.stderr
    assert json.loads(cancelled.stdout) == {"cancelled": 4, "asked_to_stop": 0}
    again = await asyncio.to_thread(cli, "workflow", "left", "--json")
    finished = json.loads(again.stdout)
    assert {job["status"] for job in finished} == {"cancelled"}
    assert all(job["payload"] is None and job["finished_at"] for job in finished)  # not kept; when


@pytest.mark.slow
async def test_the_dashboard_shows_a_workflow_and_cancels_it(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        async with connect(url, "shop") as queue:
            await queue.enqueue_many(DIAMOND)
            [left] = await queue.dequeue("fetch")
            await queue.ack(left, result=b"L")
            assert [job.id for job in await queue.workflow("merge")] == ["left", "right", "merge", "notify"]
            async with chromium() as browser:
                page = await browser.new_page(viewport=WINDOW)
                await page.goto(f"{url}/q/shop/jobs/merge")
                await expect(page.locator("#job-after")).to_contain_text("right")
                await expect(page.locator("#job-after")).to_contain_text("(awaited)")
                await expect(page.locator("#job-tenant")).to_have_text("acme")
                await page.click("#workflow-link")
                rows = page.locator("#workflow tbody tr")
                await expect(rows).to_have_count(4)
                await expect(page.locator("#workflow tr[data-job='left'] td[data-status]")).to_have_text(
                    "acked"
                )
                await expect(page.locator("#workflow tr[data-job='notify']")).to_contain_text("end")
                await page.click("button:has-text('Cancel the workflow')")
                await expect(page.locator("body")).to_contain_text("Cancel the 3 unfinished jobs")
                await page.click("button.danger")
                await expect(page.locator("body")).to_contain_text("3 jobs cancelled", timeout=10_000)
            finished = await queue.finished("notify")
            assert finished is not None
            assert finished.outcome is JobStatus.CANCELLED
            assert await queue.result("left", timeout=timedelta(seconds=5)) == b"L"
