"""The servers of ``benchmark_peers.py``: a throwaway PostgreSQL cluster on 127.0.0.1 (``initdb`` and
``pg_ctl`` from the PATH; ``fsync`` and ``synchronous_commit`` on, as by default), a throwaway Redis
(``redis-server`` from the PATH, installed with ``apt-get`` when missing and allowed; the append-only
file synced on every write), and ``jqueue serve``."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import suppress
from pathlib import Path

from jqueue.testing import free_port


def _as_owner() -> list[str]:
    """PostgreSQL refuses to run as root: then it runs as ``nobody`` (through ``runuser``)."""
    return ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []


class Postgres:
    """A running cluster: its directory (removed by ``stop``), data directory and port."""

    def __init__(self, base: Path, port: int) -> None:
        self.base = base
        self.data = base / "data"
        self.port = port

    def dsn(self, database: str = "postgres") -> str:
        """The connection string of a database."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self, name: str) -> str:
        """Create an empty database and return its connection string."""
        self.sql(f"CREATE DATABASE {name}")
        return self.dsn(name)

    def sql(self, statement: str) -> None:
        """Run one SQL statement as the superuser."""
        psql = ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-q", "-c", statement]
        subprocess.run(psql, check=True, capture_output=True, timeout=60)

    def cpu_seconds(self) -> float:
        """CPU time of the server and all its processes so far (reaped ones included)."""
        ticks = os.sysconf("SC_CLK_TCK")
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        total = 0
        for pid in [postmaster, *_children(postmaster)]:
            with suppress(OSError):  # it just ended
                total += _cpu_ticks(pid, reaped=pid == postmaster)
        return total / ticks

    def stop(self) -> None:
        """Stop the cluster (fast shutdown) and remove its files."""
        stop = [*_as_owner(), "pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop"]
        subprocess.run(stop, capture_output=True, timeout=60, check=False)
        shutil.rmtree(self.base, ignore_errors=True)


def _cpu_ticks(pid: int, *, reaped: bool) -> int:
    """A process's CPU time so far in clock ticks (utime, stime; with ``reaped``, its reaped
    children's too: cutime, cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11 : 15 if reaped else 13])


def _stopped(process: subprocess.Popen[bytes]) -> None:
    """Stop a server process: SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                found.append(int(entry.name))
    return found


def start_postgres() -> Postgres:
    """Initialise a cluster in a new temporary directory and start it on a free port of 127.0.0.1."""
    base = Path(tempfile.mkdtemp(prefix="jqueue-bench-pg-"))
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(base, nobody.pw_uid, nobody.pw_gid)
    data = base / "data"
    try:
        subprocess.run(
            [*_as_owner(), "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
            check=True,
            capture_output=True,
            timeout=300,
        )
        port = free_port()
        options = f"-p {port} -c listen_addresses=127.0.0.1 -k {data} -c fsync=on -c synchronous_commit=on"
        subprocess.run(
            [
                *_as_owner(),
                "pg_ctl",
                "-D",
                str(data),
                "-o",
                options,
                "-l",
                str(base / "server.log"),
                "-w",
                "start",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    except BaseException:
        shutil.rmtree(base, ignore_errors=True)
        raise
    return Postgres(base, port)


class JqueueServer:
    """``jqueue serve`` on a directory (or a storage URL), on a free port of 127.0.0.1 (from the
    source tree)."""

    def __init__(
        self, root: Path | str, python: str, env: dict[str, str], options: Sequence[str] = ()
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        if isinstance(root, Path):
            root.mkdir(parents=True, exist_ok=True)
        command = [
            python,
            "-m",
            "jqueue",
            "serve",
            "--storage",
            str(root),
            "--listen",
            f"127.0.0.1:{self.port}",
            *options,
        ]
        self.process = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"jqueue serve exited with {self.process.returncode}")
            with suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=1):
                break
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("jqueue serve did not listen within 60 s")
            time.sleep(0.02)

    def cpu_seconds(self) -> float:
        """CPU time of the server so far."""
        return _cpu_ticks(self.process.pid, reaped=False) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        _stopped(self.process)


class Redis:
    """``redis-server`` on a free port of 127.0.0.1 in a new temporary directory (under ``parent`` if
    given; removed by ``stop``), as durable as the other peers: every write is in the append-only file
    and fsynced before Redis answers it (``appendfsync always``), and there are no snapshots."""

    def __init__(self, executable: str, parent: Path | None = None, timeout: float = 30.0) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="jqueue-bench-redis-", dir=parent))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.log = self.base / "server.log"
        command = [
            executable,
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.base),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
            "--daemonize",
            "no",
        ]
        self.process: subprocess.Popen[bytes] | None = None
        try:
            with self.log.open("wb") as log:  # its log goes to its standard output
                self.process = subprocess.Popen(
                    command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
                )
            self._wait_until_it_answers(self.process, timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_until_it_answers(self, process: subprocess.Popen[bytes], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self._pong():
            if process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {process.returncode}: {self._tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not answer PING within {timeout:g} s: {self._tail()}")
            time.sleep(0.02)

    def _pong(self) -> bool:
        """Whether the server answers PING (it does not while it loads its file)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as connection:
                connection.sendall(b"*1\r\n$4\r\nPING\r\n")
                return connection.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def _tail(self) -> str:
        """The end of the server's log."""
        try:
            text = self.log.read_text(errors="replace").strip()
        except OSError:
            text = ""
        return text[-500:] or "no output"

    def cpu_seconds(self) -> float:
        """CPU time of the server so far: all its threads, and its reaped children (rewrites of its file)."""
        assert self.process is not None
        return _cpu_ticks(self.process.pid, reaped=True) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        """Stop the server (SIGTERM: it syncs its file and exits; SIGKILL after 10 s); remove its files."""
        if self.process is not None:
            _stopped(self.process)
        shutil.rmtree(self.base, ignore_errors=True)


def redis_server() -> str:
    """The path of ``redis-server``; when it is not on the PATH and this runs as root with ``apt-get``,
    install it first. Raises ``RuntimeError`` (saying why) when there is none."""
    found = shutil.which("redis-server")
    if found is not None:
        return found
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError("redis-server is not on the PATH (install it, e.g. apt-get install redis-server)")
    print("redis-server is not on the PATH: installing it with apt-get (once)...", file=sys.stderr)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (["apt-get", "update"], ["apt-get", "install", "-y", "redis-server"]):
        try:
            subprocess.run(
                step, env=env, stdin=subprocess.DEVNULL, check=True, capture_output=True, timeout=600
            )
        except (OSError, subprocess.SubprocessError) as exc:
            detail = (getattr(exc, "stderr", b"") or b"").decode(errors="replace").strip()[-300:]
            why = f"redis-server is not on the PATH and {' '.join(step)} failed: {exc} {detail}"
            raise RuntimeError(why) from exc
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError("apt-get installed redis-server, but it is not on the PATH")
    return found
