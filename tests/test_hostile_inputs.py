"""Every input of ``jqueue serve`` checked: hostile values in every route's path, query, body
and form fields answer a typed 4xx, never a 500, and log no traceback.

The routes come from the application itself (``create_app``), so a new route is walked as soon
as it exists; a documented route's body type (``openapi.ENDPOINTS``) gives the fields that each
hostile value is put in, one at a time, inside an otherwise valid body. The dashboard's forms
are walked for each of its actions (``RUNS``) and each field its templates name.
Real ``jqueue serve`` process, real sockets.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import msgspec
import msgspec.inspect as mi
import pytest
from starlette.routing import Route

from jqueue.adapters.dashboard.actions import RUNS, SPANS, WHOLE_NUMBERS
from jqueue.adapters.service.app import create_app
from jqueue.adapters.service.openapi import ENDPOINTS
from jqueue.adapters.service.server.catalog import ENDPOINTS as ENDPOINT_NAMES
from servers import jqueue_serve

pytestmark = pytest.mark.slow

QUEUE = "q"
HUGE = 99999999999999999999
HOSTILE_VALUES: list[Any] = [
    None, 0, -1, HUGE, -HUGE, 2**63, 1.5, -1e300, float("inf"), True, "", "x" * 70_000, "\ud800",
    "\x00", [], [None], {}, {"": None}, "!!not base64", "2020-13-45T99:99:99Z",
]  # fmt: skip
"""What each body field gets, in turn (those MessagePack cannot carry are sent as JSON only)."""
HOSTILE_TEXTS = [
    "", "x" * 70_000, "-1", str(HUGE), "1e400", "²", "1.5", "null", "[]", "{}", "\x00", "%FF", "nan", " 7 ",
]  # fmt: skip
"""What each form field, query parameter and path parameter gets, in turn."""
RAW_BODIES = [
    b"", b"{", b'{"a":', b"[", b"null", b"12", b'"\xff"', b'{"jobs": [{"payload": "\xff"}]}', b"\x81\xa1",
    b"\x92\x01", b"\xc1", b"\xff" * 64, b"\x00" * 64, b"a=1&b=%FF&c", b"x" * 70_000,
]  # fmt: skip
"""Whole bodies, sent as they are."""
CONTENT_TYPES = [
    "application/json", "application/msgpack", "application/x-www-form-urlencoded", "text/plain",
    "multipart/form-data; boundary=x", "application/json; charset=latin-1", "???", None,
]  # fmt: skip
QUEUED = "/queue/{queue}"
RESUMED = json.dumps(dict.fromkeys(ENDPOINT_NAMES, False)).encode()
"""The queued routes' body that suspends no endpoint."""
PATH_VALUES = {"queue": QUEUE, "key": "a-key", "name": "dashboard.js"}
"""A path parameter's good value (``job_id``: the job made for the walk)."""


class Caller:
    """One kept-alive connection to the service, opened again when the service closes it."""

    def __init__(self, url: str) -> None:
        self.where = urlsplit(url)
        self.host, self.port = self.where.hostname or "127.0.0.1", self.where.port
        self.connection: http.client.HTTPConnection | None = None
        self.sent = 0

    def send(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> int:
        """Send one request; return its status (the body is read and dropped)."""
        for attempt in range(2):
            if self.connection is None:
                self.connection = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                self.connection.request(method, path, body, headers or {})
                answer = self.connection.getresponse()
                answer.read()
                self.sent += 1
                if answer.will_close:
                    self.close()
                return answer.status
            except (http.client.HTTPException, ConnectionError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def _sample(info: mi.Type) -> Any:
    """A valid value of a body type: the smallest its constraints allow."""
    if isinstance(info, mi.StructType):
        return {field.encode_name: _sample(field.type) for field in info.fields}
    if isinstance(info, mi.IntType | mi.FloatType):
        low = info.ge if info.ge is not None else None if info.gt is None else info.gt + 1
        return 0 if low is None else low
    if isinstance(info, mi.StrType | mi.AnyType):
        return "a"
    if isinstance(info, mi.BytesType):
        return b"a"
    if isinstance(info, mi.BoolType):
        return False
    if isinstance(info, mi.NoneType):
        return None
    if isinstance(info, mi.DateTimeType):
        return datetime(2020, 1, 1, tzinfo=UTC)
    if isinstance(info, mi.ListType | mi.SetType | mi.VarTupleType | mi.FrozenSetType):
        return [_sample(info.item_type)]
    if isinstance(info, mi.TupleType):
        return [_sample(item) for item in info.item_types]
    if isinstance(info, mi.DictType):
        return {"a": _sample(info.value_type)}
    if isinstance(info, mi.UnionType):
        return _sample(next(t for t in info.types if not isinstance(t, mi.NoneType)))
    if isinstance(info, mi.EnumType):
        return next(iter(info.cls)).value
    if isinstance(info, mi.LiteralType):
        return info.values[0]
    raise AssertionError(f"no sample of {info}")


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every place in ``value`` (each container too)."""
    if path:
        yield path
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))


def _put(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    copied = json.loads(json.dumps(value, default=str))  # a deep copy (bytes and times as text)
    target = copied
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = new
    return copied


def _encodings(body: Any) -> Iterator[tuple[str, bytes]]:
    """``body`` as JSON and, when MessagePack can carry it, as MessagePack."""
    encoded = []
    with contextlib.suppress(TypeError, ValueError):
        encoded.append(
            ("application/json", json.dumps(body, default=_json_default).encode("utf-8", "surrogatepass"))
        )
    with contextlib.suppress(TypeError, OverflowError, ValueError):
        encoded.append(("application/msgpack", msgspec.msgpack.encode(body)))
    yield from encoded


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return "YQ=="
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(value)


def _bodies(kind: type[Any] | None) -> Iterator[tuple[str | None, bytes]]:
    """Every body a route of request type ``kind`` is sent: raw ones, hostile whole values, and
    a valid body with each of its places made hostile in turn."""
    for raw in RAW_BODIES:
        for content_type in CONTENT_TYPES:
            yield content_type, raw
    for value in HOSTILE_VALUES:
        yield from _encodings(value)
    if kind is None:
        return
    sample = _sample(mi.type_info(kind))
    yield from _encodings(sample)
    for path in _leaves(sample):
        for value in HOSTILE_VALUES:
            yield from _encodings(_put(sample, path, value))


def _path_params(route: Route, job_id: str) -> Iterator[dict[str, str]]:
    """The path parameters a route is called with: good ones, then each made hostile in turn."""
    names = list(route.param_convertors)
    good = {name: job_id if name == "job_id" else PATH_VALUES[name] for name in names}
    yield good
    for name in names:
        for text in HOSTILE_TEXTS[:8]:
            yield good | {name: text}


def _url(route: Route, params: dict[str, str], query: str = "") -> str:
    path = route.path
    for name, value in params.items():
        path = path.replace(f"{{{name}}}", quote(value, safe="") if value else "%20")
    return path + (f"?{query}" if query else "")


def _template_fields() -> set[str]:
    """The names of every form field and query parameter the dashboard's templates send."""
    names: set[str] = set()
    templates = resources.files("jqueue.adapters.dashboard").joinpath("templates")
    for template in templates.iterdir():
        text = template.read_text()
        names |= set(re.findall(r'name="(\w+)"', text)) | set(re.findall(r'"(\w+)":', text))
    return names | set(WHOLE_NUMBERS) | set(SPANS) | {"confirmed", "cursor", "offset", "next"}


def _walk_apis(caller: Caller, routes: list[Route], job_id: str) -> None:
    documented = {(endpoint.method.upper(), endpoint.path): endpoint.request for endpoint in ENDPOINTS}
    for route in routes:
        for method in sorted((route.methods or set()) - {"HEAD"}):
            kind = documented.get((method, route.path))
            for params in _path_params(route, job_id):
                status = caller.send(method, _url(route, params))
                assert status < 500, (method, route.path, params, status)
            if method == "GET":
                continue
            for content_type, body in _bodies(kind):
                headers = {} if content_type is None else {"Content-Type": content_type}
                status = caller.send(method, _url(route, {**PATH_VALUES, "job_id": job_id}), body, headers)
                assert status < 500, (method, route.path, content_type, body[:300], status)
                if route.path in (f"{QUEUED}", f"{QUEUED}/suspend"):
                    _restore(caller)


def _restore(caller: Caller) -> None:
    """Undo what a call may have done that makes the next ones answer otherwise: drop the queue
    (they would answer 404), suspend its routes (503)."""
    caller.send("PUT", f"/queue/{QUEUE}")
    caller.send("POST", f"/queue/{QUEUE}/suspend", RESUMED)


def _walk_forms(caller: Caller, routes: list[Route], job_id: str) -> None:
    status = caller.send("GET", f"/q/{QUEUE}")
    assert status == 200
    cookie, csrf = _session(caller)
    fields = sorted(_template_fields())
    pause = urlencode({"csrf": csrf, "action": "pause", "back": f"/q/{QUEUE}"}).encode()
    form = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie}
    assert caller.send("POST", f"/q/{QUEUE}/act", pause, form) == 303, "the session's forms are taken"
    posts = [route for route in routes if "POST" in (route.methods or set())]
    for route in posts:
        url = _url(route, {**PATH_VALUES, "job_id": job_id})
        for action in sorted(RUNS):
            good = {"csrf": csrf, "action": action, "back": f"/q/{QUEUE}", "ids": job_id, "limit": "5"}
            good |= {"per": "1", "most": "3", "entrypoint": "e", "confirmed": "yes"}
            for field in fields:
                for text in HOSTILE_TEXTS:
                    body = urlencode(good | {field: text}).encode()
                    if text == "%FF":
                        body += b"&" + field.encode() + b"=\xff%FF"
                    headers = {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie}
                    status = caller.send("POST", url, body, headers)
                    assert status < 500, (route.path, action, field, text, status)
    for route in routes:
        if "GET" not in (route.methods or set()):
            continue
        for text in HOSTILE_TEXTS:
            query = urlencode(dict.fromkeys(fields, text))
            status = caller.send("GET", _url(route, {**PATH_VALUES, "job_id": job_id}, query))
            assert status < 500, (route.path, text, status)


def _session(caller: Caller) -> tuple[str, str]:
    """A dashboard session's cookie header and its CSRF value."""
    connection = http.client.HTTPConnection(caller.host, caller.port, timeout=60)
    try:
        connection.request("GET", f"/q/{QUEUE}")
        answer = connection.getresponse()
        page = answer.read().decode()
        cookie = re.search(r"jqueue_session=([^;]+)", answer.headers["set-cookie"])
        found = re.search(r'name="csrf" value="([^"]+)"', page)
        assert cookie is not None
        assert found is not None
        return f"jqueue_session={cookie.group(1)}", found.group(1)
    finally:
        connection.close()


def test_no_input_of_any_route_answers_500(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    log = tmp_path / "serve.log"
    with jqueue_serve(str(root), log) as url:
        caller = Caller(url)
        assert caller.send("PUT", f"/queue/{QUEUE}") == 200
        job = json.dumps({"jobs": [{"entrypoint": "e", "payload": "eA==", "id": "job-1", "tenant": "t"}]})
        assert caller.send("POST", f"/v1/queues/{QUEUE}/enqueue", job.encode()) == 200
        routes = [route for route in create_app(str(root), address=url).routes if isinstance(route, Route)]
        assert len(routes) > 40, "every route of both APIs and the dashboard"
        dashboard = [route for route in routes if route.include_in_schema is False]
        _walk_apis(caller, [route for route in routes if route not in dashboard], "job-1")
        _walk_forms(caller, dashboard, "job-1")
        metrics = http.client.HTTPConnection(caller.host, caller.port, timeout=60)
        metrics.request("GET", "/metrics")
        counted = metrics.getresponse().read().decode()
        assert not re.search(r'jqueue_requests_total\{[^}]*status="5\d\d"\} [1-9]', counted)
        caller.close()

    text = log.read_text()
    assert "Traceback" not in text, text[-5000:]
    assert "unexpected" not in text, text[-5000:]
