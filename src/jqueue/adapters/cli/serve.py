"""``jqueue serve``: one process that commits for every client of the queues under a root."""

from __future__ import annotations

import contextlib
import socket
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from jqueue.adapters.cli.common import errors, fail, run, shared_storage, storage_url
from jqueue.adapters.optional import require
from jqueue.adapters.service.server.tenure import DEFAULT_RENEW_EVERY, DEFAULT_STALE_AFTER
from jqueue.adapters.service.wire.bodies import DEFAULT_MAX_BODY_BYTES, TOKEN_VARIABLE
from jqueue.adapters.storage.url import is_url
from jqueue.adapters.web.host_names import is_loopback
from jqueue.domain.errors import InvalidURLError

ALLOWED_HOST_HELP = (
    "A name (or address) clients call this process by, besides --listen, --advertise and, on the "
    "loopback interface, localhost, 127.0.0.1 and ::1: requests with any other Host are refused "
    "with 421 (against DNS rebinding). Repeatable."
)
MEMBER_HELP = (
    "--member (the default): serve the root together with its other brokers (on this machine or "
    "others): each serves the queues placed on it and forwards the calls of the rest; when one "
    "stops or dies, the others take its queues over. --standby: serve the whole root while this "
    "broker holds the root's broker record, and wait otherwise (as versions before many brokers did)."
)
ROOT_HELP = (
    "Where the queues live: a directory, or a URL prefix (s3://bucket/prefix, gs://bucket/prefix); "
    "queue NAME is ROOT/NAME.json. Defaults to the global --storage."
)


def _split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        fail(f"--listen wants HOST:PORT, as in 127.0.0.1:8080, not {listen!r}")
    return host.strip("[]"), int(port)


def _listening(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port``, before anything else starts (the broker record taken, say):
    a port in use or an address this machine does not have is one line, not a server that
    starts and then fails."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}")
    return sock


def _run(uvicorn: Any, app: Any, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until Ctrl-C or SIGTERM, then exit 0 (as ``uvicorn.run`` does:
    the server hands the signal on once it has shut down)."""
    from jqueue.adapters.web.allowed_hosts import http_protocol  # the serve extra is installed

    http = http_protocol()  # keeps the request target, whose authority the host check checks
    config = uvicorn.Config(app, log_level="warning", access_log=False, loop="auto", http=http)
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.Server(config).run(sockets=[sock])


def serve(
    ctx: typer.Context,
    storage: Annotated[str | None, typer.Option("--storage", help=ROOT_HELP)] = None,
    listen: Annotated[str, typer.Option(help="HOST:PORT to listen on.")] = "127.0.0.1:8080",
    token: Annotated[
        str | None,
        typer.Option(envvar=TOKEN_VARIABLE, help="Clients must send 'Authorization: Bearer TOKEN'."),
    ] = None,
    max_body_bytes: Annotated[int, typer.Option(min=1, help="Largest request body accepted.")] = (
        DEFAULT_MAX_BODY_BYTES
    ),
    advertise: Annotated[
        str | None,
        typer.Option(help="HOST:PORT that clients reach this process at (default: --listen)."),
    ] = None,
    renew_every: Annotated[
        float,
        typer.Option(min=0.05, help="Seconds between looks at (and renewals of) the broker record and beat."),
    ] = DEFAULT_RENEW_EVERY.total_seconds(),
    stale_after: Annotated[
        float,
        typer.Option(min=0.1, help="Seconds a record or beat may stay unchanged before its broker is dead."),
    ] = DEFAULT_STALE_AFTER.total_seconds(),
    allowed_host: Annotated[list[str] | None, typer.Option(help=ALLOWED_HOST_HELP)] = None,
    member: Annotated[bool, typer.Option("--member/--standby", help=MEMBER_HELP)] = True,
) -> None:
    """Serve every queue under a storage root over HTTP, committing for all clients (Ctrl-C stops).

    A call is answered only after its commit is durable. Off the loopback interface a
    token is required. Every jqueue serve of a root serves a share of its queues and
    forwards the calls of the others (ROOT/_brokers.json lists them); when one dies, the
    others take its queues over. With --standby, one process at a time serves the whole
    root, keeping ROOT/_broker.json fresh, and the others wait.
    """
    root = storage or ctx.obj.storage
    if not root:
        fail("no root given: pass --storage DIRECTORY or URL (or the global --storage)")
    host, port = _split_listen(listen)
    if not is_loopback(host) and not token:
        fail(f"listening on {host} needs a token: pass --token or set {TOKEN_VARIABLE}")
    if stale_after <= renew_every * (2 if member else 1):
        times = "twice " if member else ""
        fail(
            f"--stale-after ({stale_after:g} s) must be longer than {times}--renew-every ({renew_every:g} s)"
        )
    shown_host, shown_port = _split_listen(advertise) if advertise else (host, port)
    if advertise is None and host in ("0.0.0.0", "::"):
        fail(f"listening on {host}: pass --advertise HOST:PORT, the address clients reach this process at")
    address = (
        f"http://[{shown_host}]:{shown_port}" if ":" in shown_host else f"http://{shown_host}:{shown_port}"
    )
    try:
        uvicorn = require("uvicorn", extra="serve")
        require("starlette", extra="serve")
        require("prometheus_client", extra="serve")
        require("jinja2", extra="serve")
    except ImportError as exc:
        fail(str(exc))
    from jqueue.adapters.service.app import create_app
    from jqueue.adapters.web.allowed_hosts import BadHostNameError

    sock = _listening(host, port)
    try:
        app = create_app(
            root,
            address=address,
            token=token,
            max_body_bytes=max_body_bytes,
            renew_every=timedelta(seconds=renew_every),
            stale_after=timedelta(seconds=stale_after),
            listen=host,
            allowed_hosts=allowed_host or (),
            member=member,
        )
    except InvalidURLError as exc:
        fail(str(exc))
    except BadHostNameError as exc:
        fail(f"--allowed-host: {exc}")
    shown = root if is_url(root) else str(Path(root).absolute())
    errors.print(
        f"jqueue serve: the queues under {shown} at {address} (Ctrl-C stops)\ndashboard: {address}/",
        highlight=False,
        soft_wrap=True,
    )
    _run(uvicorn, app, sock)


def dashboard(
    ctx: typer.Context,
    listen: Annotated[str, typer.Option(help="HOST:PORT to listen on.")] = "127.0.0.1:8080",
    token: Annotated[
        str | None, typer.Option(envvar=TOKEN_VARIABLE, help="The token to sign in to the dashboard with.")
    ] = None,
    allowed_host: Annotated[list[str] | None, typer.Option(help=ALLOWED_HOST_HELP)] = None,
) -> None:
    """Serve the web dashboard of one queue (--storage URL), opened directly without a broker
    (Ctrl-C stops). Off the loopback interface a token is required."""
    url = storage_url(ctx, storage_only=True)
    host, port = _split_listen(listen)
    if not is_loopback(host) and not token:
        fail(f"listening on {host} needs a token: pass --token or set {TOKEN_VARIABLE}")
    try:
        uvicorn = require("uvicorn", extra="serve")
        require("starlette", extra="serve")
        require("jinja2", extra="serve")
    except ImportError as exc:
        fail(str(exc))
    from jqueue.adapters.dashboard.app import create_dashboard_app, queue_name
    from jqueue.adapters.service.wire.root import shard_location
    from jqueue.adapters.storage.url import storage_from_url
    from jqueue.adapters.web.allowed_hosts import BadHostNameError

    storage = shared_storage(ctx)
    if run(storage.read())[1] is None:
        fail(f"no queue at {url}: nothing was ever enqueued there (is the path right?)")
    sock = _listening(host, port)
    try:
        app = create_dashboard_app(
            lambda k: storage if k == 0 else storage_from_url(shard_location(url, k)),
            queue_name(url),
            token,
            listen=host,
            allowed_hosts=allowed_host or (),
        )
    except BadHostNameError as exc:
        fail(f"--allowed-host: {exc}")
    shown = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    errors.print(f"jqueue dashboard: {url} at {shown}/ (Ctrl-C stops)", highlight=False, soft_wrap=True)
    _run(uvicorn, app, sock)


def register(app: typer.Typer) -> None:
    """Add ``serve`` and ``dashboard`` to the ``jqueue`` command."""
    app.command()(serve)
    app.command()(dashboard)
