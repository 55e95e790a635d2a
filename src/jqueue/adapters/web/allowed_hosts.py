"""The names a request's ``Host`` header may carry, and ``HostCheck``, the middleware that
refuses every other name.

Against DNS rebinding: a page of another site whose name is made to resolve to this machine
reaches the service from the browser as the same origin as itself, so without this check it
could read the tokenless service on the loopback interface (the dashboard and its CSRF value,
the queues) and drive it. Its requests carry its own name in ``Host``, which is refused.

The names allowed (compared without the port, case and a trailing dot aside): the host the
service listens on, the host of the address it advertises, ``localhost``, ``127.0.0.1`` and
``::1`` when it listens on the loopback interface or on all interfaces, and any name given
with ``--allowed-host``. On all interfaces (``0.0.0.0`` or ``::``) with a token, every name is
allowed: clients reach such a service by names and addresses it cannot know, and the token,
which another site cannot read, guards every route but ``/healthz`` and ``/openapi.json``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import msgspec
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from jqueue.adapters.web.host_names import host_name, is_loopback
from jqueue.adapters.web.media import MSGPACK, wants_msgpack

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
"""The loopback interface's names, allowed when the service listens on it."""

ALL_INTERFACES = ("0.0.0.0", "::")
_REMEMBERED_HOSTS = 64
"""The most ``Host`` values whose answer ``HostCheck`` remembers (others are checked each time)."""
BAD_HOST_STATUS = 421
"""421 Misdirected Request: this service does not answer for that name."""


class BadHostNameError(ValueError):
    """A name given to allow that is not a host name."""


@dataclass(frozen=True)
class AllowedHosts:
    """The names a ``Host`` header may carry (``any_host``: every name).

    Build one with ``AllowedHosts.of``.
    """

    names: frozenset[str]
    any_host: bool = False

    @classmethod
    def of(
        cls,
        listen: str | None,
        address: str | None = None,
        extra: Iterable[str] = (),
        *,
        token: str | None = None,
    ) -> AllowedHosts:
        """The names allowed for a service that listens on ``listen`` (a host, or ``HOST:PORT``;
        None: the host of ``address``), advertises the URL ``address``, is also reached as each
        name of ``extra``, and has ``token`` (or none).

        Raises
        ------
        BadHostNameError
            If a name of ``extra`` is empty or not a host name (it holds a ``/``, ``@`` or a space).
        """
        advertised = host_name(urlsplit(address).netloc) if address else ""
        listened = advertised if listen is None else host_name(listen)
        everywhere = listened in ("", *ALL_INTERFACES)
        names = {advertised}
        if not everywhere:
            names.add(listened)
        if everywhere or is_loopback(listened):
            names.update(LOOPBACK_NAMES)
        for given in extra:
            name = host_name(given)
            if not name or any(c in name for c in "/@ \t"):
                raise BadHostNameError(f"{given!r} is not a host name")
            names.add(name)
        names.discard("")
        return cls(frozenset(names), any_host=everywhere and token is not None)

    def allows(self, host: str | None) -> bool:
        """Whether a request whose ``Host`` header is ``host`` (None: it sent none) is answered."""
        return self.any_host or (host is not None and host_name(host) in self.names)


class HostCheck:
    """ASGI middleware: a request whose ``Host`` is not allowed is answered 421 with the error
    code ``bad_host`` (an ``ErrorResponse``, in MessagePack when the request wants it:
    ``wants_msgpack``) and reaches no route.

    Parameters
    ----------
    app : ASGIApp
        The application behind the check.
    allowed : AllowedHosts
        The names answered.
    """

    def __init__(self, app: ASGIApp, allowed: AllowedHosts) -> None:
        self.app = app
        self.allowed = allowed
        self._answers: dict[bytes | None, bool] = {}  # by the raw Host header

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or refuse it."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        raw = next((value for name, value in scope["headers"] if name == b"host"), None)
        allowed = self._answers.get(raw)
        if allowed is None:
            allowed = self.allowed.allows(None if raw is None else raw.decode("latin-1"))
            if len(self._answers) < _REMEMBERED_HOSTS:
                self._answers[raw] = allowed
        if allowed:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        shown = "no Host header" if host is None else f"Host {host_name(host)!r}"
        message = (
            f"this service does not answer for {shown}: call it by its listen or advertised address, "
            "or start it with --allowed-host NAME"
        )
        msgpack = wants_msgpack(headers)
        error = {"error": {"code": "bad_host", "message": message}}  # as the service's ErrorResponse
        body = msgspec.msgpack.encode(error) if msgpack else msgspec.json.encode(error)
        media = MSGPACK if msgpack else "application/json"
        await Response(body, BAD_HOST_STATUS, media_type=media)(scope, receive, send)
