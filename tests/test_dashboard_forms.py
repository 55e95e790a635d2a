"""The dashboard's forms over HTTP against a real ``jqueue serve``: a POST whose ``Origin`` is
hidden (``null``) or another site changes nothing on any route that takes one, a throttle's
span is held to the native API's limit, and a finished job's page shows what its history
record keeps."""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path
from urllib.parse import quote, unquote, urlencode, urlsplit

import pytest
from starlette.routing import Route

from jqueue import BrokerQueue, JobStatus
from jqueue.adapters.dashboard.actions import RUNS
from jqueue.adapters.service.app import create_app
from jqueue.adapters.service.wire.root import root_storage
from jqueue.domain.spec import LONGEST_SPAN
from servers import jqueue_serve

pytestmark = pytest.mark.slow

TOKEN = "forms-token"
FORM = "application/x-www-form-urlencoded"


class Browser:
    """Requests as a signed-in browser session would send them."""

    def __init__(self, url: str) -> None:
        where = urlsplit(url)
        self.host, self.port, self.netloc = where.hostname or "127.0.0.1", where.port, where.netloc
        self.cookie = ""
        status, headers, _ = self.send("POST", "/login", {"token": TOKEN})
        assert status == 303
        found = re.search(r"jqueue_session=([^;]+)", headers.get("set-cookie", ""))
        assert found is not None
        self.cookie = found.group(1)
        status, _, page = self.send("GET", "/q/shop")
        assert status == 200, page
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        self.csrf = csrf.group(1)

    def send(
        self, method: str, path: str, fields: dict[str, str] | None = None, origin: str | None = None
    ) -> tuple[int, http.client.HTTPMessage, str]:
        """Send a request (a form POST when ``fields`` are given) in the session; the status, the
        headers and the page."""
        headers = {"Content-Type": FORM} if fields is not None else {}
        if self.cookie:
            headers["Cookie"] = f"jqueue_session={self.cookie}"
        if origin is not None:
            headers["Origin"] = origin
        connection = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            body = None if fields is None else urlencode(fields).encode()
            connection.request(method, path, body, headers)
            answer = connection.getresponse()
            return answer.status, answer.headers, answer.read().decode()
        finally:
            connection.close()

    def act(self, origin: str | None = None, **fields: str) -> tuple[int, str]:
        """Post an action's form on queue ``shop``; the status and the message shown once back."""
        form = {"csrf": self.csrf, "back": "/q/shop", **fields}
        status, headers, _ = self.send("POST", "/q/shop/act", form, origin)
        flash = re.search(r"jqueue_flash=([^;]+)", headers.get("set-cookie", ""))
        return status, unquote(flash.group(1).strip('"')) if flash else ""


async def _shop(tmp_path: Path) -> tuple[Path, BrokerQueue]:
    root = tmp_path / "root"
    root.mkdir()
    async with BrokerQueue(root_storage(str(root), "shop")) as queue:
        first = await queue.enqueue("email", b"x", tenant="acme", id="first")
        await queue.enqueue("email", b"y", tenant="acme", id="second", after=[first.id])
        await queue.enqueue("sms", b"z", id="third")
    return root, BrokerQueue(root_storage(str(root), "shop"))


async def test_a_hidden_or_foreign_origin_is_refused_on_every_route_that_changes_anything(
    tmp_path: Path,
) -> None:
    root, direct = await _shop(tmp_path)
    with jqueue_serve(str(root), tmp_path / "serve.log", options=["--token", TOKEN]) as url:
        browser = Browser(url)
        routes = [route for route in create_app(str(root), address=url).routes if isinstance(route, Route)]
        posts = [r.path for r in routes if not r.include_in_schema and "POST" in (r.methods or set())]
        assert {"/login", "/logout", "/q/{queue}/act"} <= set(posts)
        before = await direct.stats()
        fields = {"csrf": browser.csrf, "token": TOKEN, "back": "/q/shop", "ids": "first", "confirmed": "yes"}
        fields |= {"entrypoint": "email", "per_tenant": "yes", "limit": "1", "per": "60", "most": "1"}
        for path in posts:
            for action in sorted(RUNS):
                for origin in ("null", "http://evil.example", f"http://{browser.netloc}.evil.example"):
                    target = path.replace("{queue}", "shop")
                    status, headers, page = browser.send("POST", target, fields | {"action": action}, origin)
                    assert status == 403, (path, action, origin, status)
                    assert "did not come from this dashboard" in page
                    assert "jqueue_session" not in headers.get("set-cookie", ""), (
                        "no session started or ended"
                    )
        assert await direct.stats() == before, "nothing changed"
        assert [job.status for job in await direct.workflow("first")] == [JobStatus.QUEUED, JobStatus.WAITING]

        # The same forms from the dashboard's own origin, or with none (no browser), are taken.
        own = f"http://{browser.netloc}"
        assert browser.act(own, **(fields | {"action": "throttle"})) == (
            303,
            "Throttled each tenant of entrypoint email to 1 claims per 60 s.",
        )
        assert (await direct.stats()).tenant_throttles == {"email": (1, 60.0)}
        status, message = browser.act(None, action="cancel_workflow", ids="first", confirmed="yes")
        assert (status, message) == (303, "Cancelled the workflow of job first: 2 jobs cancelled.")
        assert browser.send("POST", "/logout", {}, own)[0] == 303


async def test_a_throttle_span_past_the_apis_limit_is_refused_and_stores_nothing(tmp_path: Path) -> None:
    root, direct = await _shop(tmp_path)
    longest = int(LONGEST_SPAN.total_seconds())
    with jqueue_serve(str(root), tmp_path / "serve.log", options=["--token", TOKEN]) as url:
        browser = Browser(url)
        for per_tenant in ("", "yes"):
            for entrypoint in ("", "email"):
                scope = {"entrypoint": entrypoint, "per_tenant": per_tenant, "limit": "5"}
                for per in (str(longest + 1), str(100_000_000_000), "99999999999999999999"):
                    status, message = browser.act(action="throttle", per=per, **scope)
                    assert status == 303
                    assert message == f"Not done: per must be at most 365,000 days, got {int(per):,} s"
                status, message = browser.act(action="throttle", per="0", **scope)
                assert (status, message) == (303, "Not done: per must be positive, got 0 s")
                for per in ("-1", "1.5", "1e3", "²", ""):
                    status, message = browser.act(action="throttle", per=per, **scope)
                    assert (status, message) == (303, f"Not done: per must be a whole number, not {per!r}")
        stats = await direct.stats()
        assert (stats.throttles, stats.tenant_throttles) == ({}, {}), "nothing stored"
        status, message = browser.act(action="throttle", per=str(longest), limit="5", per_tenant="yes")
        assert (status, message) == (
            303,
            f"Throttled each tenant of the queue to 5 claims per {longest:g} s.",
        )
        assert (await direct.stats()).tenant_throttles == {None: (5, LONGEST_SPAN.total_seconds())}

        # The native API holds the same limit.
        connection = http.client.HTTPConnection(browser.host, browser.port, timeout=30)
        body = json.dumps({"limit": 5, "per_seconds": longest + 1, "per_tenant": True})
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
        connection.request("POST", "/v1/queues/shop/throttle", body, headers)
        answer = connection.getresponse()
        assert (answer.status, json.loads(answer.read())["error"]["code"]) == (400, "bad_body")
        connection.close()


async def test_a_finished_jobs_page_shows_what_its_history_record_keeps(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    error = (
        "ValidationError: 1 validation error for Order\nquantity\n"
        "  Input should be greater than 0 [type=greater_than, input_value=-1, input_type=int]"
    )
    async with BrokerQueue(root_storage(str(root), "shop")) as queue:
        parent = await queue.enqueue("prepare", b"p")
        [claimed] = await queue.dequeue("prepare")
        await queue.ack(claimed)
        job = await queue.enqueue(
            "order", b'{"quantity": -1}', tenant="acme <b>", dedup_key="order-7", after=[parent.id]
        )
        [claimed] = await queue.dequeue("order")
        await queue.nack(claimed, error=error, max_attempts=1)
        assert await queue.purge(JobStatus.DEAD, ids=[job.id]) == 1  # only its history record is left
        assert await queue.find(job.id) is None
    with jqueue_serve(str(root), tmp_path / "serve.log") as url:
        where = urlsplit(url)
        connection = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
        connection.request("GET", f"/q/shop/jobs/{quote(job.id)}")
        answer = connection.getresponse()
        page = answer.read().decode()
        connection.request("GET", "/q/shop/finished")
        listing = connection.getresponse().read().decode()
        connection.close()
    assert answer.status == 200
    history = page[page.index('id="history"') :]
    facts = dict(re.findall(r"<dt>([^<]+)</dt><dd[^>]*>(.*?)</dd>", history, re.S))
    assert facts["Entrypoint"] == "order"
    assert facts["Tenant"] == "acme &lt;b&gt;", "escaped"
    assert facts["Dedup key"] == "order-7"
    assert parent.id in facts["After"]
    assert "not kept" in facts["Arguments"], facts["Arguments"]
    assert facts["Outcome"] == "dead"
    shown = re.search(r'<pre class="error" id="history-error">(.*?)</pre>', page, re.S)
    assert shown is not None
    assert shown.group(1) == error.replace("<", "&lt;").replace(">", "&gt;"), (
        "the whole error, to its last field"
    )
    row = listing[listing.index(f'data-job="{job.id}"') :]
    assert 'title="ValidationError: 1 validation error for Order\nquantity\n' in row, (
        "the whole error on hover"
    )
