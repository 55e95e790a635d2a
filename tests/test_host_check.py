"""DNS rebinding and cross-session forms against ``jqueue serve`` (issue 27).

A page of another site whose name resolves to this machine calls the service with its own name
in ``Host``: every route refuses it (421 ``bad_host``) and changes nothing, while the names the
service listens and is advertised at, the loopback names and ``--allowed-host`` names are
answered. Dashboard pages refuse to be framed, and a form's CSRF value holds only in the browser
session it was given to. Real ``jqueue serve`` processes, real sockets, a real Chromium (whose
resolver maps the test's names to 127.0.0.1, as a rebinding DNS server would).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from email.message import Message
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import msgspec
import pytest
from playwright.async_api import expect

from browser import chromium
from jqueue import BrokerQueue, JobStatus
from jqueue.adapters.service.wire.root import root_storage
from jqueue.adapters.web.allowed_hosts import AllowedHosts
from servers import LOOPBACK, free_port, jqueue_serve

pytestmark = pytest.mark.slow

TOKEN = "host-check-token"
EVIL = "evil.example"
LISTED = "jobs.internal"
FORM = "application/x-www-form-urlencoded"
BAD_HOST = 421
SEND_WITH_CSRF = """value => {
    for (const input of document.querySelectorAll("input[name=csrf]")) input.value = value;
    [...document.querySelectorAll("button")].find(b => b.textContent === "Pause the queue").click();
}"""
"""Put another CSRF value in every form of the page, then press "Pause the queue"."""


def call(
    url: str,
    method: str,
    path: str,
    *,
    host: str | None = None,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
) -> tuple[int, Message, bytes]:
    """Send one request to the service at ``url`` with ``Host: host`` (default: the URL's own);
    return the status, the headers and the body."""
    where = urlsplit(url)
    connection = http.client.HTTPConnection(where.hostname or LOOPBACK, where.port, timeout=30)
    try:
        sent = {"Host": host or where.netloc, **(headers or {})}
        connection.request(method, path, body, sent)
        answer = connection.getresponse()
        return answer.status, answer.headers, answer.read()
    finally:
        connection.close()


def session(url: str, path: str, cookie: str = "") -> tuple[str, str]:
    """Open a dashboard page; return the session cookie it carries (or was given) and the page's
    CSRF value."""
    extra = {"Cookie": f"jqueue_session={cookie}"} if cookie else {}
    status, answer, page = call(url, "GET", path, headers=extra)
    assert status == 200, page
    given = re.search(r"jqueue_session=([^;]+)", answer.get("set-cookie", ""))
    found = re.search(rb'name="csrf" value="([^"]+)"', page)
    assert found is not None, page
    return (given.group(1) if given else cookie), found.group(1).decode()


def act(url: str, cookie: str, csrf: str, *, host: str | None = None, action: str = "pause") -> int:
    """POST a dashboard action on queue ``shop`` in session ``cookie``; return the status."""
    origin = f"http://{host or urlsplit(url).netloc}"
    body = urlencode({"csrf": csrf, "action": action, "back": "/q/shop"}).encode()
    headers = {"Cookie": f"jqueue_session={cookie}", "Content-Type": FORM, "Origin": origin}
    return call(url, "POST", "/q/shop/act", host=host, body=body, headers=headers)[0]


def refused(answer: tuple[int, Message, bytes]) -> bool:
    """Whether an answer is the typed refusal of a Host, with nothing of the page in it."""
    status, headers, body = answer
    if status != BAD_HOST:
        return False
    if headers.get_content_type() == "application/msgpack":
        error = msgspec.msgpack.decode(body)["error"]
    else:
        error = json.loads(body)["error"]
    return error["code"] == "bad_host" and b"csrf" not in body


async def test_a_foreign_host_is_refused_on_every_route_and_changes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    direct = BrokerQueue(root_storage(str(root), "shop"))
    with jqueue_serve(str(root), tmp_path / "serve.log", options=["--allowed-host", LISTED]) as url:
        port = urlsplit(url).port
        evil = f"{EVIL}:{port}"
        job = json.dumps({"jobs": [{"entrypoint": "email", "payload": ""}]}).encode()
        assert (await asyncio.to_thread(call, url, "POST", "/v1/queues/shop/enqueue", body=job))[0] == 200
        cookie, csrf = await asyncio.to_thread(session, url, "/q/shop")

        push = json.dumps({"messages": [{"contents": "x", "visibility_timeout_secs": 0}]}).encode()
        form = urlencode({"csrf": csrf, "action": "pause", "back": "/"}).encode()
        calls = [
            ("GET", "/", None, {}),
            ("GET", "/q/shop", None, {"Cookie": f"jqueue_session={cookie}"}),
            ("POST", "/q/shop/act", form, {"Cookie": f"jqueue_session={cookie}", "Content-Type": FORM}),
            ("GET", "/static/dashboard.js", None, {}),
            ("GET", "/login", None, {}),
            ("POST", "/v1/queues/shop/enqueue", job, {}),
            ("POST", "/v1/queues/shop/dequeue", b"{}", {}),
            ("POST", "/v1/queues/other/enqueue", job, {}),
            ("POST", "/queue/shop/messages/push", push, {}),
            ("POST", "/queue/shop/messages/poll", b'{"count": 5}', {}),
            ("PUT", "/queue/made", None, {}),
            ("GET", "/queues", None, {}),
            ("GET", "/metrics", None, {}),
            ("GET", "/healthz", None, {}),
            ("GET", "/openapi.json", None, {}),
        ]
        for method, path, body, headers in calls:
            for name in (evil, EVIL, f"EVIL.example.:{port}", f"127.0.0.1.{EVIL}:{port}"):
                answer = await asyncio.to_thread(
                    call, url, method, path, host=name, body=body, headers=headers
                )
                assert refused(answer), (method, path, name, answer)
        answer = await asyncio.to_thread(
            call, url, "GET", "/healthz", host=evil, headers={"Accept": "application/msgpack"}
        )
        assert refused(answer)

        # Nothing changed: one job, still queued; no pause; no other queue.
        stats = await direct.stats()
        assert (stats.total(JobStatus.QUEUED), stats.paused_claims) == (1, [])
        assert sorted(p.name for p in root.glob("*.json") if not p.name.startswith("_")) == ["shop.json"]

        # The names it answers to: its own, the loopback ones, and the one listed.
        for name in (url.removeprefix("http://"), f"localhost:{port}", f"[::1]:{port}", f"{LISTED}:{port}"):
            assert (await asyncio.to_thread(call, url, "GET", "/healthz", host=name))[0] == 200, name
            assert (await asyncio.to_thread(call, url, "GET", "/q/shop", host=name))[0] == 200, name
        listed = f"{LISTED.upper()}.:{port}"
        assert (await asyncio.to_thread(call, url, "POST", "/v1/queues/shop/enqueue", host=listed, body=job))[
            0
        ] == 200
        assert (
            await asyncio.to_thread(call, url, "POST", "/queue/shop/messages/push", host=listed, body=push)
        )[0] == 200
        # The same action, sent under a listed name, is done: the CSRF value was a valid one.
        assert await asyncio.to_thread(act, url, cookie, csrf, host=f"{LISTED}:{port}") == 303
        assert (await direct.stats()).paused_claims == [None]


def raw_call(url: str, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send ``head`` (a request line and header lines, without the blank line that ends them) and
    ``body`` over a socket, as they are: HTTP clients write neither two ``Host`` headers nor an
    absolute-form target. Return the status and the answer's body."""
    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        length = f"Content-Length: {len(body)}\r\n" if body else ""
        sock.sendall(f"{head}\r\n{length}Connection: close\r\n\r\n".encode("latin-1") + body)
        answer = b""
        while chunk := sock.recv(65_536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


async def test_exactly_one_well_formed_allowed_host_and_the_target_authority_too(tmp_path: Path) -> None:
    root, direct = await _shop_root(tmp_path)
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        good = urlsplit(url).netloc
        job = json.dumps({"jobs": [{"entrypoint": "email", "payload": ""}]}).encode()
        enqueue = "POST {target} HTTP/1.1\r\nContent-Type: application/json\r\n{hosts}"
        malformed = [  # 400: RFC 9112, 3.2
            f"Host: {good}, {EVIL}\r\n",
            f"Host: {good}\r\nHost: {EVIL}\r\n",
            f"Host: {EVIL}\r\nHost: {good}\r\n",
            f"Host: {good}\r\nHost: {good}\r\n",
            f"Host: {good}:1\r\n",
            f"Host: {good}/x\r\n",
            f"Host: user@{good}\r\n",
            "",
        ]
        for hosts in malformed:
            head = enqueue.format(target="/v1/queues/shop/enqueue", hosts=hosts).removesuffix("\r\n")
            status, answer = await asyncio.to_thread(raw_call, url, head, job)
            assert status == 400, (hosts, answer)
            assert json.loads(answer)["error"]["code"] == "bad_host"
        foreign = [  # 421: well formed, but a name it does not answer for
            (f"http://{EVIL}/v1/queues/shop/enqueue", f"Host: {good}\r\n"),
            (f"HTTP://{EVIL.upper()}:{urlsplit(url).port}/v1/queues/shop/enqueue", f"Host: {good}\r\n"),
            (f"http://{good}/v1/queues/shop/enqueue", f"Host: {EVIL}\r\n"),
        ]
        for target, hosts in foreign:
            head = enqueue.format(target=target, hosts=hosts).removesuffix("\r\n")
            status, answer = await asyncio.to_thread(raw_call, url, head, job)
            assert status == BAD_HOST, (target, hosts, answer)
            assert json.loads(answer)["error"]["code"] == "bad_host"
        assert (await direct.stats()).total(JobStatus.QUEUED) == 1, "no refused request enqueued"
        for target in ("/v1/queues/shop/enqueue", f"http://{good}/v1/queues/shop/enqueue"):
            head = enqueue.format(target=target, hosts=f"Host: {good}\r\n").removesuffix("\r\n")
            assert (await asyncio.to_thread(raw_call, url, head, job))[0] == 200, target
        assert (await direct.stats()).total(JobStatus.QUEUED) == 3


async def _shop_root(tmp_path: Path) -> tuple[Path, BrokerQueue]:
    """A root whose queue ``shop`` holds one job, and a queue that reads it directly (unopened)."""
    root = tmp_path / "root"
    root.mkdir()
    async with BrokerQueue(root_storage(str(root), "shop")) as queue:
        await queue.enqueue("email", b"x")
    return root, BrokerQueue(root_storage(str(root), "shop"))


async def test_a_csrf_value_holds_only_in_its_own_session(tmp_path: Path) -> None:
    root, direct = await _shop_root(tmp_path)
    with jqueue_serve(str(root), tmp_path / "serve.log", options=["--token", TOKEN]) as url:
        signed = []
        for _ in range(2):
            status, answer, _ = await asyncio.to_thread(
                call,
                url,
                "POST",
                "/login",
                body=urlencode({"token": TOKEN}).encode(),
                headers={"Content-Type": FORM},
            )
            assert status == 303
            cookie = re.search(r"jqueue_session=([^;]+)", answer["set-cookie"])
            assert cookie is not None
            signed.append(await asyncio.to_thread(session, url, "/q/shop", cookie.group(1)))
        (first, first_csrf), (second, second_csrf) = signed
        assert first != second
        assert first_csrf != second_csrf
        assert await asyncio.to_thread(act, url, second, first_csrf) == 403
        assert await asyncio.to_thread(act, url, first, second_csrf) == 403
        assert await asyncio.to_thread(act, url, "forged.cookie", first_csrf) == 401  # not signed in
        assert (await direct.stats()).paused_claims == []
        assert await asyncio.to_thread(act, url, first, first_csrf) == 303
        assert (await direct.stats()).paused_claims == [None]


async def test_the_tokenless_dashboard_in_a_browser_under_its_names_only(tmp_path: Path) -> None:
    root, direct = await _shop_root(tmp_path)
    rules = f"--host-resolver-rules=MAP {EVIL} {LOOPBACK}, MAP {LISTED} {LOOPBACK}"
    with jqueue_serve(str(root), tmp_path / "serve.log", options=["--allowed-host", LISTED]) as url:
        async with chromium([rules]) as browser:
            port = urlsplit(url).port
            # A page of another site, its name resolved to this machine: the dashboard is not shown.
            rebound = await browser.new_page()
            answer = await rebound.goto(f"http://{EVIL}:{port}/q/shop")
            assert answer is not None
            assert answer.status == 421
            assert "bad_host" in await rebound.content()
            assert await rebound.locator("input[name=csrf]").count() == 0

            # Under a listed name: the pages, framed by nobody, in a session of their own.
            first = await (await browser.new_context()).new_page()
            answer = await first.goto(f"http://{LISTED}:{port}/q/shop")
            assert answer is not None
            assert answer.status == 200
            headers = await answer.all_headers()
            assert headers["x-frame-options"] == "DENY"
            assert headers["content-security-policy"] == "frame-ancestors 'none'"
            [cookie] = await first.context.cookies()
            assert (cookie["name"], cookie["httpOnly"], cookie["sameSite"]) == (
                "jqueue_session",
                True,
                "Strict",
            )
            first_csrf = await first.locator("input[name=csrf]").first.get_attribute("value")
            assert first_csrf

            # Another browser session's forms carry another value, and the first one's is refused there.
            second = await (await browser.new_context()).new_page()
            await second.goto(f"http://{LISTED}:{port}/q/shop")
            second_csrf = await second.locator("input[name=csrf]").first.get_attribute("value")
            assert second_csrf not in (None, first_csrf)
            async with second.expect_navigation():
                await second.evaluate(
                    SEND_WITH_CSRF,
                    first_csrf,
                )
            await expect(second.locator("#message")).to_contain_text("did not come from this dashboard")
            assert (await direct.stats()).paused_claims == []

            # Each session's own forms work.
            await first.get_by_role("button", name="Pause the queue").click()
            await expect(first.get_by_role("status")).to_have_text("Paused claims of the queue.")
            assert (await direct.stats()).paused_claims == [None]
            await second.goto(f"{url}/q/shop")
            await second.get_by_role("button", name="Resume the queue").click()
            await expect(second.get_by_role("status")).to_have_text("Resumed the queue.")
            assert (await direct.stats()).paused_claims == []

            # A page of another site cannot frame the dashboard.
            framing = await browser.new_page()
            await framing.goto(f"http://{EVIL}:{port}/healthz")  # any page of the other site
            await framing.set_content(f'<iframe src="http://{LISTED}:{port}/q/shop"></iframe>')
            await framing.wait_for_timeout(1000)
            framed = framing.frames[1]
            assert await framed.locator("input[name=csrf]").count() == 0


async def test_the_lone_dashboard_checks_the_host_and_a_bad_name_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    async with BrokerQueue(root_storage(str(root), "mail")) as queue:
        await queue.enqueue("send", b"a")
    port = free_port()
    url = f"http://{LOOPBACK}:{port}"
    command = [sys.executable, "-m", "jqueue", "dashboard", "--storage", str(root / "mail.json")]
    command += ["--listen", f"{LOOPBACK}:{port}", "--allowed-host", LISTED]
    proc = await asyncio.create_subprocess_exec(*command, stderr=subprocess.PIPE)
    try:
        for _ in range(200):
            try:
                if (await asyncio.to_thread(call, url, "GET", "/healthz"))[0]:
                    break
            except OSError:  # not listening yet
                await asyncio.sleep(0.1)
        assert refused(await asyncio.to_thread(call, url, "GET", "/q/mail", host=f"{EVIL}:{port}"))
        assert (await asyncio.to_thread(call, url, "GET", "/q/mail", host=f"{LISTED}:{port}"))[0] == 200
    finally:
        proc.send_signal(signal.SIGINT)
        assert await asyncio.wait_for(proc.wait(), 20) == 0

    serve = [sys.executable, "-m", "jqueue", "serve", "--storage", str(root), "--listen", f"{LOOPBACK}:1"]
    bad = await asyncio.to_thread(
        subprocess.run,
        [*serve, "--allowed-host", "evil.example/x"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 1
    assert "--allowed-host: 'evil.example/x' is not a host name" in bad.stderr


def test_which_names_are_allowed_where_it_listens() -> None:
    loopback = AllowedHosts.of("127.0.0.1", "http://127.0.0.1:8080")
    assert loopback.names == {"127.0.0.1", "localhost", "::1"}
    assert not loopback.allows(None)
    advertised = AllowedHosts.of("10.0.0.5", "http://box.example:80", ["Alias.Example."], token="t")
    assert advertised.names == {"10.0.0.5", "box.example", "alias.example"}
    assert advertised.allows("ALIAS.example:8080")
    assert not advertised.allows("127.0.0.1:8080")
    # On all interfaces: any name with a token (it cannot know them all; the token guards the
    # routes), only the advertised, loopback and listed names without one.
    assert AllowedHosts.of("0.0.0.0", "http://box.example:8080", token="t").allows(f"{EVIL}:8080")
    assert AllowedHosts.of("::", "http://box.example:8080", token="t").allows(None)
    bare = AllowedHosts.of("0.0.0.0", "http://box.example:8080", [LISTED])
    assert bare.names == {"box.example", "127.0.0.1", "localhost", "::1", LISTED}
    assert not bare.allows(f"{EVIL}:8080")


async def test_the_check_answers_each_name_alike_however_many_names_it_has_seen() -> None:
    from starlette.types import Message as Sent
    from starlette.types import Receive, Scope, Send

    from jqueue.adapters.web.allowed_hosts import HostCheck

    reached: list[bytes | None] = []
    statuses: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        reached.append(dict(scope["headers"]).get(b"host"))

    async def send(message: Sent) -> None:
        if message["type"] == "http.response.start":
            statuses.append(message["status"])

    async def receive() -> Sent:
        return {"type": "http.request", "body": b""}

    check = HostCheck(app, AllowedHosts.of("127.0.0.1:8080"))
    names = [b"localhost:8080", *(f"evil-{n}.example".encode() for n in range(100)), b"127.0.0.1:8080"]
    for _ in range(2):  # the second time, answered from what the check remembers
        for headers in [[(b"host", name)] for name in names] + [[]]:
            await check({"type": "http", "method": "GET", "path": "/", "headers": headers}, receive, send)
    assert reached == [b"localhost:8080", b"127.0.0.1:8080"] * 2
    assert statuses == ([BAD_HOST] * 100 + [400]) * 2, "no Host at all is malformed in HTTP/1.1"


def test_the_names_a_request_is_sent_to_whichever_protocol_parsed_it() -> None:
    from jqueue.adapters.web.allowed_hosts import REQUEST_TARGET, BadRequestTargetError, request_names

    def scope(
        *hosts: bytes, version: str = "1.1", raw_path: bytes = b"/", target: bytes | None = None
    ) -> Any:
        headers = [(b"host", host) for host in hosts]
        made = {"type": "http", "http_version": version, "headers": headers, "raw_path": raw_path}
        return made if target is None else made | {REQUEST_TARGET: target}

    assert request_names(scope(b"a.example:80", raw_path=b"/x")) == ["a.example:80"]
    # uvicorn's h11 protocol leaves an absolute-form target in raw_path; http_protocol's keeps it apart
    assert request_names(scope(b"a.example", raw_path=b"http://b.example:8/x?y")) == [
        "a.example",
        "b.example:8",
    ]
    assert request_names(scope(b"a.example", target=b"https://[::1]:8/")) == ["a.example", "[::1]:8"]
    assert request_names(scope(version="1.0")) == [None], "HTTP/1.0 may leave Host out"
    for bad in (
        scope(),
        scope(b"a.example", b"a.example"),
        scope(b"a.example, b.example"),
        scope(b"a.example\xff"),
        scope(b"a.example", target=b"http://u@b.example/"),
        scope(b"a.example", target=b"b.example:80"),
    ):
        with pytest.raises(BadRequestTargetError):
            request_names(bad)
