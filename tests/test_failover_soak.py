"""A short run of tools/soak_failover.py: brokers killed and frozen in turn under producers and
``Worker`` processes through ``connect``; nothing lost, nothing acked twice, no client exits.

It runs on an S3 root (moto). On a local-file root a broker frozen while it holds the file's
write lock (an append and its sync) holds up the other processes' writes until it resumes,
as docs/serve.md ("Clients") says, so there a freeze can cost its whole length; on object
storage no lock exists and a frozen broker costs a client what a killed one does.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from conftest import BUCKET, s3_env
from jqueue import JobStatus
from jqueue.core.formats.entry import Entry
from jqueue.domain import effects as fx
from servers import S3Endpoint
from tool_runs import ROOT, run_tool

sys.path.insert(0, str(ROOT / "tools"))
from soak_failover import log_faults

TOOL = "soak_failover.py"

pytestmark = pytest.mark.slow


def test_killed_and_frozen_brokers_lose_double_and_stop_nothing(moto: S3Endpoint) -> None:
    root = f"s3://{BUCKET}/soak-{uuid.uuid4().hex}?endpoint_url={moto.url}&region={moto.region}"
    # a kill, then a freeze longer than the stall allowed below
    arguments = ["--root", root, "--faults", "2", "--every", "4", "--freeze", "12", "--clients", "2"]
    done = run_tool(TOOL, *arguments, env=s3_env(moto))
    assert done.returncode == 0, done.stdout + done.stderr
    faults = re.search(r"(\d+) broker faults: (.*)", done.stdout)
    assert faults is not None, done.stdout
    assert int(faults[1]) == 2
    assert "killed" in faults[2]
    assert "froze" in faults[2]
    counts = re.search(r"(\d+) jobs enqueued, (\d+) acks returned, (\d+) in the history", done.stdout)
    assert counts is not None, done.stdout
    assert int(counts[1]) > 0
    assert int(counts[1]) == int(counts[2])
    stall = re.search(r"longest client stall: ([\d.]+) s", done.stdout)
    assert stall is not None, done.stdout
    # a frozen broker costs no more than a killed one, not the length of the freeze
    assert float(stall[1]) < 9, done.stdout
    print(done.stdout)


@pytest.mark.parametrize("spread", [["--queues", "6"], ["--shards", "6"]], ids=["queues", "shards"])
def test_members_killed_and_frozen_in_turn_lose_double_and_stop_nothing(
    tmp_path: Path, spread: list[str]
) -> None:
    """Three members of one root serving six queues, or one queue of six shards (``jqueue
    serve``): each fault takes the next member; no job lost or acked twice, and no log entry
    written by a broker after another took its queue over (read from every queue's log)."""
    root = tmp_path / "root"
    root.mkdir()
    arguments = ["--root", str(root), "--faults", "4", "--every", "3", "--freeze", "4"]
    done = run_tool(TOOL, *arguments, "--members", "3", *spread, "--clients", "6")
    assert done.returncode == 0, done.stdout + done.stderr
    faults = re.search(r"(\d+) broker faults: (.*)", done.stdout)
    assert faults is not None, done.stdout
    assert (int(faults[1]), faults[2].count("killed"), faults[2].count("froze")) == (4, 2, 2)
    assert "0 log entries by a deposed owner" in done.stdout
    assert "0 breaches of a tenant's limit or a fan-in's order in the logs" in done.stdout
    counts = re.search(r"(\d+) jobs enqueued, (\d+) acks returned, (\d+) in the history", done.stdout)
    assert counts is not None, done.stdout
    assert int(counts[1]) > 0
    assert int(counts[1]) == int(counts[2])
    print(done.stdout)


def test_the_log_checks_find_a_tenant_over_its_limit_and_a_callback_claimed_early() -> None:
    """``log_faults`` on made-up logs: what it must find, and a log it must pass."""
    at = 1_800_000_000_000_000

    def add(job_id: str, tenant: str | None = None, after: tuple[str, ...] = ()) -> fx.Added:
        return fx.Added(job_id, "work", 0, at, JobStatus.QUEUED, None, b"p", tenant=tenant, after=after)

    def log(*entries: Sequence[fx.Effect]) -> list[Entry]:
        return [Entry(seq, f"b/{seq}", at, list(effects), []) for seq, effects in enumerate(entries, 1)]

    parents = [add(f"p{n}", "t0") for n in range(3)]
    fan_in = add("cb", after=("p0", "p1", "p2"))
    claims = [fx.Claimed(f"p{n}", at + 1, f"l{n}", at + 10**7) for n in range(3)]
    acks = [fx.Removed(f"p{n}", at + 2) for n in range(3)]
    callback = fx.Claimed("cb", at + 3, "lc", at + 10**7)
    assert log_faults(log([*parents, fan_in], claims[:2], acks[:2], [claims[2], acks[2], callback])) == []
    over = log_faults(log([*parents, fan_in], claims))
    assert over == ["entry 2: 3 jobs of t0 in progress"]
    early = log_faults(log([*parents, fan_in], claims[:2], [*acks[:2], callback]))
    assert early == ["entry 3 claims cb before its parents left"]
    assert log_faults(log([*parents, fan_in], claims)[1:]) == []  # a log that does not start at 1
