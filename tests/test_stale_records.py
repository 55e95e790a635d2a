"""A root's broker record that outlived its broker never sends a call to another root: the
address it names may now be a ``jqueue serve`` of another root (the same port, reused), and
a client that follows the record must not commit there."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest

from jqueue import ServiceError, connect
from jqueue.testing import serve
from servers import free_port, jqueue_serve

pytestmark = pytest.mark.slow

SHORT = timedelta(seconds=2)


def _wait_gone(pid: int) -> None:
    """Wait (at most 30 s) until process ``pid`` is gone (or a zombie no one reaped yet)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            if "zombie" in Path(f"/proc/{pid}/status").read_text().lower():
                return
        except OSError:  # gone
            return
        assert time.monotonic() < deadline, f"process {pid} outlived SIGKILL"
        time.sleep(0.05)


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
        with serve(first, port=port) as served:
            os.killpg(served.pid, signal.SIGKILL)
            await asyncio.to_thread(_wait_gone, served.pid)
    with jqueue_serve(str(second), tmp_path / "second.log", port=port) as url:
        async with connect(str(first), "shop", failover_timeout=SHORT) as lost:
            with pytest.raises(ServiceError) as refused:
                await lost.enqueue("e", b"meant for the first root")
        assert refused.value.code in ("no_broker", "not_broker")
        async with connect(url, "shop") as there:  # the service by its URL: its own root
            await there.enqueue("e", b"for the second root")
            assert [job.payload for job in await there.jobs()] == [b"for the second root"]
    assert _jobs(first) == []
