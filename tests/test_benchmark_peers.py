"""Smoke test of tools/benchmark_peers.py on jqueue and the raw writes only (no peers: offline), and of
the Redis server it starts for SAQ and arq (when ``redis-server`` is on the PATH)."""

from __future__ import annotations

import json
import shutil
import socket
import sys
from pathlib import Path

from tool_runs import ROOT, run_tool

sys.path.append(str(ROOT / "tools" / "peers"))

from peer_servers import Redis

TOOL = "benchmark_peers.py"


def test_every_scenario_of_jqueue_and_the_raw_limit(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    arguments = [
        "--systems",
        "jqueue-file-broker,jqueue-file-direct,jqueue-s3-serve,jqueue-file-members-shards,"
        "jqueue-file-members-queues,raw",
        "--jobs",
        "200",
        "--latency-jobs",
        "20",
    ]
    arguments += [
        "--rate",
        "50",
        "--workers",
        "2",
        "--rounds",
        "1",
        "--dir",
        str(tmp_path),
        "--json",
        str(out),
    ]
    done = run_tool(TOOL, *arguments)
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())["results"]
    assert not [row for row in results if "error" in row]
    by_key = {(row["system"], row["scenario"]): row for row in results}
    for system in ("jqueue-file-broker", "jqueue-file-direct"):
        for scenario in ("sequential", "batch", "drain"):
            assert by_key[system, scenario]["jobs_per_s"] > 0
        assert by_key[system, "sequential"]["cpu_ms_per_job"] > 0
        latency = by_key[system, "latency"]
        assert 0 < latency["p50_ms"] <= latency["p95_ms"] <= latency["p99_ms"] <= latency["max_ms"]
    for kind in ("shards", "queues"):  # through two members of one root
        assert by_key[f"jqueue-file-members-{kind}", "drain"]["jobs_per_s"] > 0
    for scenario in ("batch", "drain"):  # through jqueue serve on S3, with what its requests cost
        on_s3 = by_key["jqueue-s3-serve", scenario]
        assert on_s3["jobs_per_s"] > 0
        assert on_s3["requests"]["class_a"] > 0
        assert (
            0
            < on_s3["dollars_per_million_jobs"]["S3 Standard"]
            < on_s3["dollars_per_million_jobs"]["SQS"] * 100
        )
    patterns = by_key["raw", "raw"]["patterns"]
    assert set(patterns) == {"file-per-write", "append+fdatasync"}
    assert all(pattern["ops_per_s"] > 0 for pattern in patterns.values())
    assert "sequential" in done.stdout
    assert "wall time" in done.stdout
    assert list(tmp_path.iterdir()) == [out]  # the queues it made are gone


def test_warmup_rounds_run_first_and_stay_out_of_the_results(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    arguments = ["--systems", "raw", "--scenarios", "raw", "--jobs", "50", "--rounds", "2"]
    done = run_tool(TOOL, *arguments, "--warmup-rounds", "1", "--dir", str(tmp_path), "--json", str(out))
    assert done.returncode == 0, done.stderr
    assert [row["round"] for row in json.loads(out.read_text())["results"]] == [1, 2]
    said = [line.split("]")[0] for line in done.stdout.splitlines() if line.startswith("[")]
    assert said == ["[warm-up, not counted", "[round 1", "[round 2"]
    refused = run_tool(TOOL, *arguments, "--warmup-rounds", "-1")
    assert refused.returncode == 2
    assert "--warmup-rounds at least 0" in refused.stderr


def test_the_redis_of_saq_and_arq_syncs_every_write_and_goes_away(tmp_path: Path) -> None:
    executable = shutil.which("redis-server")
    assert executable is not None, "no redis-server on the PATH: scripts/setup-system installs it"
    redis = Redis(executable, tmp_path)
    try:
        settings = {key: config_get(redis.port, key) for key in ("appendonly", "appendfsync", "save", "bind")}
        assert redis.cpu_seconds() >= 0
        assert redis.url == f"redis://127.0.0.1:{redis.port}/0"
    finally:
        redis.stop()
    assert settings == {"appendonly": "yes", "appendfsync": "always", "save": "", "bind": "127.0.0.1"}
    assert redis.process is not None
    assert redis.process.returncode is not None
    assert list(tmp_path.iterdir()) == []  # its directory is gone


def config_get(port: int, key: str) -> str:
    """One setting of a running Redis (``CONFIG GET`` over a bare socket)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(f"CONFIG GET {key}\r\n".encode())
        reply = b""
        while reply.count(b"\r\n") < 5:  # *2, $n, the key, $m, the value
            chunk = connection.recv(4096)
            assert chunk, reply
            reply += chunk
    return reply.split(b"\r\n")[4].decode()
