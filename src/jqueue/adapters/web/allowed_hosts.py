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

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
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


HOST_VALUE = re.compile(r"(\[[0-9A-Za-z:.%_~-]+\]|[A-Za-z0-9._~!$&'()*+,;=%-]*)(:[0-9]*)?")
"""A well-formed ``Host`` value or target authority (RFC 9110, 7.2: ``uri-host [":" port]``, no
user): a bracketed IPv6 address, or a registered name or IPv4 address; then maybe a port."""
_ABSOLUTE_TARGET = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://([^/?#]*)")
REQUEST_TARGET = "jqueue.request_target"
"""The scope key under which ``http_protocol`` puts each request's target as it was sent."""
MALFORMED_STATUS = 400
"""RFC 9112, 3.2: no ``Host`` (in HTTP/1.1), more than one, or one that is not well formed."""


class BadRequestTargetError(ValueError):
    """A request whose ``Host`` or target is not well formed (answered 400)."""


def request_names(scope: Scope) -> list[str | None]:
    """The names a request is sent to, each of which must be allowed: its ``Host`` (None for an
    HTTP/1.0 request without one), and the authority of an absolute-form target (RFC 9112,
    3.2.2: ``GET http://name/path``).

    Raises
    ------
    BadRequestTargetError
        If the request has more than one ``Host``, none in HTTP/1.1, one that is not well
        formed, or a target that is neither a path nor an absolute URL with a well-formed
        authority.
    """
    hosts = [value for name, value in scope["headers"] if name == b"host"]
    if len(hosts) > 1:
        raise BadRequestTargetError(f"{len(hosts)} Host headers: a request has one")
    if not hosts and scope.get("http_version", "1.1") != "1.0":
        raise BadRequestTargetError("no Host header: an HTTP/1.1 request has one")
    names: list[str | None] = [_well_formed(hosts[0], "Host") if hosts else None]
    target: bytes = scope.get(REQUEST_TARGET) or scope.get("raw_path") or b"/"
    if not target.startswith(b"/") and target != b"*":
        absolute = _ABSOLUTE_TARGET.match(target)
        if absolute is None:
            raise BadRequestTargetError("the request target is neither a path nor an absolute URL")
        names.append(_well_formed(absolute.group(1), "the request target's authority"))
    return names


def _well_formed(value: bytes, what: str) -> str:
    text = value.decode("latin-1")
    if not HOST_VALUE.fullmatch(text):
        raise BadRequestTargetError(f"{what} {text[:100]!r} is not a host name and port")
    return text


def http_protocol() -> type[Any]:
    """uvicorn's HTTP protocol (httptools) that also puts each request's target, as sent, in its
    scope under ``REQUEST_TARGET``: uvicorn's own keeps only the path, and ``HostCheck``
    checks the authority of an absolute-form target. (uvicorn's h11 protocol keeps the whole
    target in ``raw_path``, which ``HostCheck`` reads too.)"""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class TargetKeepingProtocol(HttpToolsProtocol):
        def on_headers_complete(self) -> None:
            scope: dict[str, Any] = self.scope  # type: ignore[assignment]
            scope[REQUEST_TARGET] = self.url
            super().on_headers_complete()

    return TargetKeepingProtocol


class HostCheck:
    """ASGI middleware: a request whose ``Host`` (or absolute-form target's authority) is not
    allowed is answered 421 with the error code ``bad_host``, and one whose ``Host`` or target
    is not well formed (``request_names``) 400 with the same code (an ``ErrorResponse``, in
    MessagePack when the request wants it: ``wants_msgpack``); neither reaches a route.

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
        self._answers: dict[str | None, bool] = {}  # by the name as sent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or refuse it."""
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        try:
            names = request_names(scope)
        except BadRequestTargetError as exc:
            await _refuse(scope, receive, send, MALFORMED_STATUS, f"a malformed request: {exc}")
            return
        refused = [name for name in names if not self._allows(name)]
        if not refused:
            await self.app(scope, receive, send)
            return
        shown = "no Host header" if refused[0] is None else f"the name {host_name(refused[0])!r}"
        message = (
            f"this service does not answer for {shown}: call it by its listen or advertised address, "
            "or start it with --allowed-host NAME"
        )
        await _refuse(scope, receive, send, BAD_HOST_STATUS, message)

    def _allows(self, name: str | None) -> bool:
        allowed = self._answers.get(name)
        if allowed is None:
            allowed = self.allowed.allows(name)
            if len(self._answers) < _REMEMBERED_HOSTS:
                self._answers[name] = allowed
        return allowed


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    """Answer ``status`` with the error code ``bad_host`` and ``message``."""
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    msgpack = wants_msgpack(Headers(scope=scope))
    error = {"error": {"code": "bad_host", "message": message}}  # as the service's ErrorResponse
    body = msgspec.msgpack.encode(error) if msgpack else msgspec.json.encode(error)
    media = MSGPACK if msgpack else "application/json"
    await Response(body, status, media_type=media)(scope, receive, send)
