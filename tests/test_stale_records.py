"""A root's broker record that outlived its broker never sends a call to another root: the
address it names may now be a ``jqueue serve`` of another root (the same port, reused), and
a client that follows the record must not commit there."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from jqueue import ServiceError, connect
from servers import LOOPBACK, free_port, jqueue_serve

pytestmark = pytest.mark.slow

SHORT = timedelta(seconds=2)


def _jobs(root: Path) -> list[str]:
    """The queues under ``root`` that hold a job."""
    return sorted(p.stem for p in root.glob("*.json") if not p.name.startswith("_") and p.stat().st_size)


@pytest.mark.parametrize("ended", ["stopped", "killed"])
async def test_a_call_by_a_stale_record_is_refused_by_the_process_now_at_its_address(
    tmp_path: Path, ended: str
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    port = free_port()
    if ended == "stopped":  # Ctrl-C: the record says its broker released it
        with jqueue_serve(str(first), tmp_path / "first.log", port=port):
            pass
    else:  # SIGKILL: the record still names it, unreleased
        command = [
            sys.executable,
            "-m",
            "jqueue",
            "serve",
            "--storage",
            str(first),
            "--listen",
            f"{LOOPBACK}:{port}",
        ]
        with (tmp_path / "first.log").open("wb") as log:
            proc = await asyncio.create_subprocess_exec(*command, stderr=log, start_new_session=True)
        try:
            while not (first / "_broker.json").exists():
                assert proc.returncode is None, (tmp_path / "first.log").read_text()
                await asyncio.sleep(0.05)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.wait_for(proc.wait(), 30)
    with jqueue_serve(str(second), tmp_path / "second.log", port=port) as url:
        async with connect(str(first), "shop", failover_timeout=SHORT) as lost:
            with pytest.raises(ServiceError) as refused:
                await lost.enqueue("e", b"meant for the first root")
        assert refused.value.code in ("no_broker", "not_broker")
        async with connect(url, "shop") as there:  # the service by its URL: its own root
            await there.enqueue("e", b"for the second root")
            assert [job.payload for job in await there.jobs()] == [b"for the second root"]
    assert _jobs(first) == []
