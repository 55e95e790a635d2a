"""Benchmark jqueue on a local file against the durable job queues a user would pick instead.

Systems: jqueue (``BrokerQueue`` and ``DirectQueue`` on a file root, and ``jqueue.connect`` to a
``jqueue serve`` that the tool starts on a file root, all from the source tree this tool sits in;
``jqueue-file-members-shards`` and ``-queues``, drain only: two ``jqueue serve --member`` of one
file root serving one queue of two shards, or two queues, each worker calling one member in turn;
``jqueue-s3-serve``: the same on S3, moto behind the latency proxy of ``s3_stack.py``,
``--get-latency-ms`` and ``--put-latency-ms``, batch and drain only, with what its requests
cost per million jobs enqueued, claimed and acked, at S3's and GCS's list prices, next to SQS),
Huey on SQLite (WAL, ``synchronous=FULL``), persist-queue's ``SQLiteAckQueue`` (WAL,
``synchronous=FULL``; producer scenarios only), pgqueuer on a PostgreSQL cluster that the
tool starts on 127.0.0.1 with ``fsync`` and ``synchronous_commit`` on (skipped when ``initdb`` is
not on the PATH), SAQ and arq on a ``redis-server`` that the tool starts on 127.0.0.1 for each
scenario, with the append-only file synced before every answer (``appendfsync always``, no
snapshots; when ``redis-server`` is not on the PATH the tool installs it with ``apt-get`` if it
runs as root, and skips them with a message otherwise), and ``raw``: loops of bare durable writes
on the same disk. The peers are installed into their own virtual environment,
``.bench/peers-venv``, from ``tools/peers/requirements.txt`` (never into the project's ``.venv``);
without network they are skipped with a message.

Scenarios, each run in fresh processes, rounds interleaved across systems (``--warmup-rounds``
first, left out of the results: a server's first rounds warm its caches):

- ``sequential``: one producer enqueues ``--jobs`` jobs of 1 KB one at a time, each durable;
  jobs/s and the producer's CPU per job (all its threads; the CPU of PostgreSQL, Redis or
  ``jqueue serve`` apart, as ``server``);
- ``batch``: the same jobs in batches of 100 (one by one where a system has no batch API);
- ``drain``: ``--workers`` worker processes (concurrency 10 each) drain ``--jobs`` jobs
  enqueued beforehand; timed from the moment the started workers are told to go until the
  last job is done;
- ``latency``: one producer at ``--rate`` jobs/s for ``--latency-jobs`` jobs and one worker
  process of concurrency 10 with the system's default polling (Huey polls, growing to 10 s when
  idle; arq polls every 0.5 s; pgqueuer listens; SAQ blocks on Redis); enqueue-to-finished
  p50/p95/p99;
- ``raw``: the physical limit, ``--jobs`` durable writes of 1.2 KB in the patterns of
  ``RAW_PATTERNS``.

Example (about fifteen minutes)::

    .venv/bin/python tools/benchmark_peers.py --json bench-results/peers.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "tools" / "peers"
sys.path.insert(0, str(PEERS))

from common import percentiles, read_latencies, stop, wait_until_done  # noqa: E402
from peer_report import SCENARIOS, report, short  # noqa: E402
from peer_servers import JqueueServer, Postgres, Redis, redis_server, start_postgres  # noqa: E402

sys.path.insert(0, str(ROOT / "tools"))
from raw_writes import RAW_PATTERNS  # noqa: E402

from request_costs import cost_per_million_jobs  # noqa: E402
from s3_stack import CREDENTIALS, S3Stack  # noqa: E402

RUN_TIMEOUT = 900.0
MEMBERS = 2
"""The brokers of the ``jqueue-file-members-*`` systems' root."""


@dataclass(frozen=True)
class System:
    """A queue under test: its runner script, the Python that runs it and what it supports."""

    name: str
    runner: str
    arguments: tuple[str, ...]
    scenarios: tuple[str, ...]
    peer: bool = False
    postgres: bool = False
    redis: bool = False
    s3: bool = False
    served: bool = False
    members: int = 1
    """Brokers of the root (2+: ``jqueue serve --member``), each worker calling one in turn."""


SYSTEMS = {
    system.name: system
    for system in [
        System("jqueue-file-broker", "run_jqueue.py", ("broker",), SCENARIOS[:4]),
        System("jqueue-file-direct", "run_jqueue.py", ("direct",), SCENARIOS[:4]),
        System("jqueue-file-serve", "run_jqueue.py", ("serve",), SCENARIOS[:4], served=True),
        System("huey-sqlite", "run_huey.py", (), SCENARIOS[:4], peer=True),
        System("persistqueue-sqlite", "run_persistqueue.py", (), ("sequential", "batch"), peer=True),
        System("pgqueuer-postgres", "run_pgqueuer.py", (), SCENARIOS[:4], peer=True, postgres=True),
        *(
            System(
                f"jqueue-file-members-{kind}",
                "run_jqueue.py",
                (kind,),
                ("drain",),
                served=True,
                members=MEMBERS,
            )
            for kind in ("shards", "queues")
        ),
        System("jqueue-s3-serve", "run_jqueue.py", ("serve",), ("batch", "drain"), served=True, s3=True),
        System("saq-redis", "run_saq.py", (), SCENARIOS[:4], peer=True, redis=True),
        System("arq-redis", "run_arq.py", (), SCENARIOS[:4], peer=True, redis=True),
        System("raw", "", (), ("raw",)),
    ]
}


class Bench:
    """One benchmark run: its options, the environments and servers it made, and its results."""

    def __init__(self, options: argparse.Namespace, scratch: Path) -> None:
        self.options = options
        self.scratch = scratch
        self.peer_python: Path | None = None
        self.postgres: Postgres | None = None
        self.redis_server: str | None = None
        self.redis: Redis | None = None
        self.results: list[dict[str, Any]] = []
        self._databases = 0
        self.servers: list[JqueueServer] = []
        self.s3: S3Stack | None = None

    def python_for(self, system: System) -> tuple[Path, dict[str, str]]:
        """The interpreter and environment of a system's runner."""
        if system.peer:
            assert self.peer_python is not None
            return self.peer_python, dict(os.environ)
        return Path(sys.executable), {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def runner(self, system: System, workdir: Path, *arguments: str) -> list[str]:
        """The command line of a runner call (without the interpreter)."""
        return [str(PEERS / system.runner), *system.arguments, *arguments[:1], str(workdir), *arguments[1:]]

    def environment(self, system: System, workdir: Path) -> dict[str, str]:
        """The runner's environment: where its files go, and a fresh database (PostgreSQL, Redis) or
        ``jqueue serve`` for the systems that use one."""
        _, env = self.python_for(system)
        env["BENCH_WORKDIR"] = str(workdir)
        if system.postgres:
            assert self.postgres is not None
            self._databases += 1
            env["PGQ_DSN"] = self.postgres.new_database(f"bench{self._databases}")
            self.call(system, workdir, env, "install")
        if system.redis:
            assert self.redis_server is not None
            self.redis = Redis(self.redis_server, workdir)
            env["REDIS_URL"] = self.redis.url
        if system.served:
            root = workdir / "root" if self.s3 is None or not system.s3 else self.s3.new_root()
            options = ["--member"] if system.members > 1 else []
            for _ in range(system.members):
                self.servers.append(JqueueServer(root, sys.executable, {**env, **CREDENTIALS}, options))
            wait_for_members(self.servers)
            env["JQUEUE_URL"] = ",".join(server.url for server in self.servers)
        return env

    def server_cpu(self, system: System) -> float | None:
        """CPU seconds of the system's server so far (None without one)."""
        if system.postgres and self.postgres is not None:
            return self.postgres.cpu_seconds()
        if system.redis and self.redis is not None:
            return self.redis.cpu_seconds()
        if system.served and self.servers:
            return sum(server.cpu_seconds() for server in self.servers)
        return None

    def call(self, system: System, workdir: Path, env: dict[str, str], *arguments: str) -> dict[str, Any]:
        """Run a runner to its end and return the JSON it printed."""
        python, _ = self.python_for(system)
        done = subprocess.run(
            [str(python), *self.runner(system, workdir, *arguments)],
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{system.name} {arguments[0]} failed: {done.stderr.strip()[-2000:]}")
        lines = done.stdout.strip().splitlines()
        return json.loads(lines[-1]) if lines else {}

    @contextmanager
    def workers(
        self, system: System, workdir: Path, env: dict[str, str], kind: str, count: int
    ) -> Iterator[list[subprocess.Popen[bytes]]]:
        """Start ``count`` worker processes, wait until each is ready, then tell them to go."""
        python, _ = self.python_for(system)
        children = [
            subprocess.Popen(
                [str(python), *self.runner(system, workdir, kind, "--index", str(n))],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for n in range(count)
        ]
        try:
            deadline = time.monotonic() + 120
            while len(list(workdir.glob("ready-*"))) < count:
                if time.monotonic() > deadline or any(child.poll() is not None for child in children):
                    raise RuntimeError(f"{system.name}: the workers did not start")
                time.sleep(0.01)
            (workdir / "go").touch()
            yield children
        finally:
            stop(children)

    def scenario(self, system: System, scenario: str) -> dict[str, Any]:
        """Run one scenario of one system in a fresh directory."""
        workdir = Path(tempfile.mkdtemp(prefix=f"{system.name}-{scenario}-", dir=self.scratch))
        jobs, options = self.options.jobs, self.options
        try:
            if scenario == "raw":
                return {"patterns": {name: write(workdir, jobs) for name, write in RAW_PATTERNS.items()}}
            env = self.environment(system, workdir)
            server_cpu = self.server_cpu(system)
            counted = self.s3.counts() if system.s3 and self.s3 is not None else None
            if scenario in ("sequential", "batch"):
                result = self.call(system, workdir, env, scenario, "--jobs", str(jobs))
            elif scenario == "drain":
                self.call(system, workdir, env, "fill", "--jobs", str(jobs))
                with self.workers(system, workdir, env, "drain-worker", options.workers) as children:
                    started = time.monotonic()
                    ended = wait_until_done(workdir, jobs, RUN_TIMEOUT, children)
                result = {
                    "seconds": round(ended - started, 3),
                    "jobs_per_s": round(jobs / (ended - started), 1),
                }
            else:
                count = options.latency_jobs
                self.call(system, workdir, env, "fill", "--jobs", "0")  # the queue exists, as in use
                with self.workers(system, workdir, env, "latency-worker", 1):
                    self.call(
                        system, workdir, env, "paced", "--jobs", str(count), "--rate", str(options.rate)
                    )
                    wait_until_done(workdir, count, 120, [])
                result = percentiles(read_latencies(workdir))
            if server_cpu is not None and "jobs_per_s" in result:
                spent = (self.server_cpu(system) or 0.0) - server_cpu
                result["server_cpu_ms_per_job"] = round(spent * 1000 / jobs, 4)
            if counted is not None and self.s3 is not None:  # enqueued, claimed and acked
                requests = {kind: n - counted[kind] for kind, n in self.s3.counts().items()}
                result |= {
                    "requests": requests,
                    "dollars_per_million_jobs": cost_per_million_jobs(requests, jobs),
                }
            return result
        finally:
            self.stop_servers()
            shutil.rmtree(workdir, ignore_errors=True)

    def stop_servers(self) -> None:
        """Stop the servers of a scenario (``jqueue serve``, Redis), if running."""
        for server in self.servers:
            server.stop()
        self.servers = []
        if self.redis is not None:
            self.redis.stop()
            self.redis = None


def wait_for_members(servers: list[JqueueServer], timeout: float = 60.0) -> None:
    """Wait until each of several members of one root lists them all (none for one broker)."""
    deadline = time.monotonic() + timeout
    while len(servers) > 1:
        healths = [json.loads(urllib.request.urlopen(f"{s.url}/healthz", timeout=10).read()) for s in servers]
        if all(len(health["members"]) == len(servers) for health in healths):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {len(servers)} members did not see each other within {timeout:.0f} s")
        time.sleep(0.1)


def prepare_peers(bench: Bench, wanted: list[System]) -> dict[str, str]:
    """Make the peers' venv, PostgreSQL and ``redis-server`` ready as needed; return the systems
    skipped, with why."""
    skipped: dict[str, str] = {}
    if any(system.peer for system in wanted):
        try:
            bench.peer_python = peer_venv()
        except (OSError, subprocess.CalledProcessError) as exc:
            for system in wanted:
                if system.peer:
                    skipped[system.name] = f"could not install the peers ({exc})"
    if any(system.postgres and system.name not in skipped for system in wanted):
        if shutil.which("initdb") is None or shutil.which("pg_ctl") is None:
            skipped["pgqueuer-postgres"] = "initdb/pg_ctl not on the PATH"
        else:
            try:
                bench.postgres = start_postgres()
            except (OSError, subprocess.SubprocessError) as exc:
                detail = getattr(exc, "stderr", b"") or b""
                skipped["pgqueuer-postgres"] = (
                    f"PostgreSQL did not start: {exc} {detail.decode(errors='replace')[-300:]}"
                )
    if any(system.s3 for system in wanted):
        try:
            bench.s3 = S3Stack(bench.options.get_latency_ms, bench.options.put_latency_ms)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            skipped.update({system.name: f"moto did not start: {exc}" for system in wanted if system.s3})
    redis = [system.name for system in wanted if system.redis and system.name not in skipped]
    if redis:
        try:
            bench.redis_server = redis_server()
            Redis(bench.redis_server, bench.scratch).stop()  # it starts; each scenario starts its own
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            skipped.update({name: str(exc) for name in redis})
    return skipped


def peer_venv() -> Path:
    """Create (or reuse) ``.bench/peers-venv`` with the pinned peers; return its python."""
    venv = ROOT / ".bench" / "peers-venv"
    requirements = PEERS / "requirements.txt"
    stamp = venv / ".installed"
    wanted = hashlib.sha256(requirements.read_bytes()).hexdigest()
    python = venv / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        return python
    print(f"installing the peers into {venv} (once)...", file=sys.stderr)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    pip = [
        str(python),
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "-r",
        str(requirements),
    ]
    subprocess.run(pip, check=True, timeout=900)
    stamp.write_text(wanted)
    return python


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated systems")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated scenarios")
    parser.add_argument(
        "--jobs", type=int, default=10_000, help="jobs per throughput scenario (default 10,000)"
    )
    parser.add_argument("--latency-jobs", type=int, default=1_000, help="jobs of the latency scenario")
    parser.add_argument("--rate", type=float, default=100.0, help="jobs/s of the latency producer")
    parser.add_argument("--workers", type=int, default=10, help="worker processes of the drain scenario")
    parser.add_argument(
        "--get-latency-ms", type=float, default=60.0, help="of the S3 proxy (jqueue-s3-serve)"
    )
    parser.add_argument(
        "--put-latency-ms", type=float, default=100.0, help="of the S3 proxy (jqueue-s3-serve)"
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds, interleaved across systems")
    parser.add_argument(
        "--warmup-rounds", type=int, default=0, help="rounds run first and left out of the results"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where the queues go (default: a temp dir)")
    parser.add_argument("--json", type=Path, default=None, help="write every result to this file")
    options = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as on Ctrl-C: the servers too
    names, scenarios = options.systems.split(","), options.scenarios.split(",")
    unknown = [n for n in names if n not in SYSTEMS] + [s for s in scenarios if s not in SCENARIOS]
    if unknown:
        parser.error(f"unknown systems or scenarios: {', '.join(unknown)}")
    if options.rounds < 1 or options.warmup_rounds < 0:
        parser.error("--rounds must be at least 1 and --warmup-rounds at least 0")
    print("$ " + " ".join([Path(sys.executable).name, *sys.argv]), flush=True)
    skipped: dict[str, str] = {}
    wanted = [SYSTEMS[n] for n in names]
    scratch = Path(tempfile.mkdtemp(prefix="jqueue-peers-", dir=options.dir))
    bench = Bench(options, scratch)
    started = time.monotonic()
    try:
        skipped.update(prepare_peers(bench, wanted))
        for round_number in range(1 - options.warmup_rounds, options.rounds + 1):
            for scenario in scenarios:
                for system in wanted:
                    if system.name in skipped or scenario not in system.scenarios:
                        continue
                    row: dict[str, Any] = {"system": system.name, "scenario": scenario, "round": round_number}
                    try:
                        row |= bench.scenario(system, scenario)
                    except (RuntimeError, TimeoutError, subprocess.TimeoutExpired, OSError) as exc:
                        row["error"] = str(exc).splitlines()[-1][:300] if str(exc) else type(exc).__name__
                    counted = round_number >= 1
                    if counted:
                        bench.results.append(row)
                    label = f"round {round_number}" if counted else "warm-up, not counted"
                    print(f"[{label}] {system.name} {scenario}: {short(row)}", flush=True)
    except KeyboardInterrupt:
        print("interrupted: the results so far follow", file=sys.stderr)
    finally:
        bench.stop_servers()
        if bench.postgres is not None:
            bench.postgres.stop()
        if bench.s3 is not None:
            bench.s3.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    print(report(bench.results, skipped))
    print(f"\nwall time {time.monotonic() - started:.0f} s")
    if options.json is not None:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        document = {"command": sys.argv, "options": {k: str(v) for k, v in vars(options).items()}}
        options.json.write_text(
            json.dumps({**document, "skipped": skipped, "results": bench.results}, indent=1)
        )
    return 0


if __name__ == "__main__":
    with suppress(BrokenPipeError):
        raise SystemExit(main())
