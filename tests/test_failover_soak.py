"""A short run of tools/soak_failover.py: brokers killed and frozen in turn under producers and
``Worker`` processes through ``connect``; nothing lost, nothing acked twice, no client exits.

It runs on an S3 root (moto). On a local-file root a broker frozen while it holds the file's
write lock (an append and its sync) holds up the other processes' writes until it resumes,
as docs/serve.md ("Clients") says, so there a freeze can cost its whole length; on object
storage no lock exists and a frozen broker costs a client what a killed one does.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from conftest import BUCKET, s3_env
from servers import S3Endpoint
from tool_runs import run_tool

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


def test_members_killed_and_frozen_in_turn_lose_double_and_stop_nothing(tmp_path: Path) -> None:
    """Three members of one root serving six queues (``jqueue serve --member``): each fault takes
    the next member; no job lost or acked twice, and no log entry written by a broker after
    another took its queue over (read from every queue's log)."""
    root = tmp_path / "root"
    root.mkdir()
    arguments = ["--root", str(root), "--faults", "4", "--every", "3", "--freeze", "4"]
    done = run_tool(TOOL, *arguments, "--members", "3", "--queues", "6", "--clients", "6")
    assert done.returncode == 0, done.stdout + done.stderr
    faults = re.search(r"(\d+) broker faults: (.*)", done.stdout)
    assert faults is not None, done.stdout
    assert (int(faults[1]), faults[2].count("killed"), faults[2].count("froze")) == (4, 2, 2)
    assert "0 log entries by a deposed owner" in done.stdout
    counts = re.search(r"(\d+) jobs enqueued, (\d+) acks returned, (\d+) in the history", done.stdout)
    assert counts is not None, done.stdout
    assert int(counts[1]) > 0
    assert int(counts[1]) == int(counts[2])
    print(done.stdout)
