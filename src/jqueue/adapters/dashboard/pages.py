"""``Dashboard``: the pages and forms of the web dashboard, as Starlette routes.

Pages are rendered on the server; a small script re-fetches the page's main part every few
seconds (a request with ``X-Dashboard-Refresh: 1``) and swaps it in. Every action is a form
POST that runs one queue operation and redirects back; destructive ones first answer a
confirmation page that says how many jobs they touch.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from importlib import resources
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from jqueue.adapters.charts import sparkline, throughput_chart
from jqueue.adapters.dashboard import filters
from jqueue.adapters.dashboard.actions import Actions
from jqueue.adapters.dashboard.guard import (
    FLASH_COOKIE,
    SESSION_COOKIE,
    FormTooLargeError,
    Guard,
    local_target,
    read_form,
)
from jqueue.adapters.dashboard.source import FORGET_AFTER, STALE_AFTER, NotServingError, QueueSource
from jqueue.adapters.dashboard.views import (
    entrypoint_rows,
    job_detail,
    periodic_rows,
    queue_summary,
    result_line,
)
from jqueue.adapters.web.queue_names import BadQueueNameError, UnknownQueueError
from jqueue.domain.errors import JobNotFoundError, JQueueError
from jqueue.domain.models import JobStatus
from jqueue.domain.times import utc_now
from jqueue.domain.values import INT64_MAX
from jqueue.domain.workflows import LEFT

REFRESH_SECONDS = 2
PAGE_SIZE = 50
AGES = {"": None, "1m": timedelta(minutes=1), "10m": timedelta(minutes=10), "1h": timedelta(hours=1),
        "1d": timedelta(days=1)}  # fmt: skip
FINISHED = (JobStatus.ACKED, JobStatus.DEAD, JobStatus.CANCELLED)
"""The outcomes of finished jobs."""
MAX_FLASH_CHARS = 300
"""The most characters of a message shown after an action (quoted in a cookie: at most 12 bytes
each, within the 4,096 bytes a browser keeps)."""
STATIC = {"dashboard.css": "text/css", "dashboard.js": "text/javascript"}

Page = Callable[[Request], Awaitable[Response]]


def _query(request: Request, *names: str) -> dict[str, str]:
    """The filters of a listing as the page's form sent them ("" where not given)."""
    return {name: request.query_params.get(name, "") for name in names}


def _page_start(request: Request, name: str) -> int:
    """A listing's place to start from, as its link gave it (0 for anything but a count of 64 bits)."""
    value = request.query_params.get(name, "")
    start = int(value) if value.isascii() and value.isdigit() else 0
    return start if start <= INT64_MAX else 0


def refuse_framing(response: Response) -> Response:
    """Forbid every page to show ``response`` in a frame (``X-Frame-Options: DENY``, and
    ``frame-ancestors 'none'`` in its ``Content-Security-Policy``, kept with the policy's other
    directives); return it."""
    response.headers["X-Frame-Options"] = "DENY"
    policy = response.headers.get("content-security-policy", "")
    kept = [part.strip() for part in policy.split(";") if part.strip()]
    kept = [part for part in kept if part.split()[0].lower() != "frame-ancestors"]
    response.headers["Content-Security-Policy"] = "; ".join([*kept, "frame-ancestors 'none'"])
    return response


class Dashboard:
    """The dashboard over the queues of ``source``, guarded by ``token``.

    Parameters
    ----------
    source : QueueSource
        The queues.
    token : str or None
        The token a browser signs in with (None: no sign-in).
    """

    def __init__(self, source: QueueSource, token: str | None) -> None:
        self.source = source
        self.guard = Guard(token)
        self.templates = Environment(
            loader=PackageLoader("jqueue.adapters.dashboard"), autoescape=select_autoescape(default=True)
        )
        self.templates.filters.update(filters.ALL)
        self.templates.globals.update(
            sparkline=lambda *a: Markup(sparkline(*a)),
            chart=lambda *a: Markup(throughput_chart(*a)),
            statuses=list(JobStatus),
            result_line=result_line,
        )
        self.actions = Actions(self)

    def routes(self) -> list[Route]:
        """The routes, for a Starlette application (pages, not API: outside the OpenAPI document)."""
        pages: dict[str, Page] = {
            "/": self._overview,
            "/workers": self._workers,
            "/periodic": self._periodic,
            "/q/{queue}": self._queue,
            "/q/{queue}/jobs": self._jobs,
            "/q/{queue}/jobs/{job_id}": self._job,
            "/q/{queue}/jobs/{job_id}/workflow": self._workflow,
            "/q/{queue}/finished": self._finished,
            "/q/{queue}/dead": self._dead,
        }
        routes: list[tuple[str, Page, list[str]]] = [
            *((path, self._page(page), ["GET"]) for path, page in pages.items()),
            ("/login", self._login, ["GET", "POST"]),
            ("/logout", self._logout, ["POST"]),
            ("/static/{name}", self._static, ["GET"]),
            ("/q/{queue}/act", self._page(self.actions.act), ["POST"]),
        ]
        return [
            Route(path, self._from_here(page), methods=methods, include_in_schema=False)
            for path, page, methods in routes
        ]

    def _from_here(self, page: Page) -> Page:
        """``page``, but a POST whose ``Origin`` is not this dashboard's is refused (403) before it."""

        async def checked(request: Request) -> Response:
            if request.method not in ("GET", "HEAD") and not self.guard.origin_allowed(request):
                text = "This form did not come from this dashboard (its origin is another, or hidden)."
                return self.render(request, "message.html", 403, title="Refused", text=text)
            return await page(request)

        return checked

    def render(self, request: Request, template: str, status: int = 200, **values: Any) -> Response:
        """Render a page (its main part alone for a refresh)."""
        partial = request.headers.get("x-dashboard-refresh") == "1"
        flash = request.cookies.get(FLASH_COOKIE)
        session = self.guard.session_of(request)
        starts = session is None and self.guard.token is None  # with a token, signing in starts one
        fresh = self.guard.new_session() if starts else None
        page = self.templates.get_template(template).render(
            partial=partial,
            csrf=self.guard.csrf(session or fresh),
            signed=self.guard.token is not None and self.guard.signed_in(request),
            refresh=REFRESH_SECONDS,
            stale_after=STALE_AFTER,
            forget_after=FORGET_AFTER,
            flash=None if partial else flash,
            broker=self.source.broker(),
            path=request.url.path,
            **values,
        )
        response = HTMLResponse(page, status_code=status, headers={"Cache-Control": "no-store"})
        if flash and not partial:
            response.delete_cookie(FLASH_COOKIE, path="/")
        if fresh is not None:
            self._start_session(request, response, fresh)
        return refuse_framing(response)

    def _start_session(self, request: Request, response: Response, session: str) -> None:
        secure = request.url.scheme == "https"
        response.set_cookie(
            SESSION_COOKIE, session, path="/", httponly=True, samesite="strict", secure=secure
        )

    def back(self, to: str, message: str) -> Response:
        """Redirect to ``to`` with ``message`` shown once there (its first ``MAX_FLASH_CHARS``:
        a browser keeps no larger cookie)."""
        response = RedirectResponse(to, status_code=303)
        shown = message if len(message) <= MAX_FLASH_CHARS else f"{message[: MAX_FLASH_CHARS - 1]}…"
        response.set_cookie(FLASH_COOKIE, quote(shown), path="/", httponly=True, samesite="strict")
        return response

    def _page(self, page: Page) -> Page:
        async def guarded(request: Request) -> Response:
            if not self.guard.signed_in(request):
                if request.method == "GET":
                    return RedirectResponse(
                        f"/login?{urlencode({'next': request.url.path})}", status_code=303
                    )
                return self.render(request, "message.html", 401, title="Sign in first", text="Sign in first.")
            try:
                return await page(request)
            except NotServingError as exc:
                return self.render(request, "standby.html", 503, elsewhere=exc.broker)
            except (UnknownQueueError, BadQueueNameError):
                name = request.path_params.get("queue", "")
                return self.render(
                    request, "message.html", 404, title="No such queue", text=f"No queue {name!r}."
                )

        return guarded

    async def _login(self, request: Request) -> Response:
        target = local_target(request.query_params.get("next", "/"), "/")
        if self.guard.token is None:
            return RedirectResponse(target, status_code=303)
        if request.method == "GET":
            return self.render(request, "login.html", next=target, failed=False)
        try:
            form = await read_form(request)
        except FormTooLargeError as exc:
            return self.render(request, "message.html", 413, title="Too large", text=str(exc))
        if not self.guard.token_matches(str(form.get("token", ""))):
            return self.render(request, "login.html", 401, next=target, failed=True)
        response = RedirectResponse(target, status_code=303)
        self._start_session(request, response, self.guard.new_session())
        return response

    async def _logout(self, request: Request) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    async def _static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            return Response("not found", status_code=404)
        body = resources.files("jqueue.adapters.dashboard").joinpath("static", name).read_bytes()
        return Response(body, media_type=STATIC[name], headers={"Cache-Control": "max-age=60"})

    async def _overview(self, request: Request) -> Response:
        summaries, unreadable = [], {}
        for name in await self.source.names():
            try:
                summaries.append(await queue_summary(self.source, name))
            except JQueueError as exc:  # one corrupt or foreign file must not hide the others
                unreadable[name] = str(exc)
        return self.render(request, "overview.html", queues=summaries, unreadable=unreadable)

    async def _queue(self, request: Request) -> Response:
        name = request.path_params["queue"]
        summary = await queue_summary(self.source, name)
        timings = await (await self.source.get(name)).insight.timings()
        rows = entrypoint_rows(summary, timings)
        return self.render(request, "queue.html", queue=name, summary=summary, rows=rows)

    async def _jobs(self, request: Request) -> Response:
        name = request.path_params["queue"]
        queue = await self.source.get(name)
        filters_now = _query(request, "status", "entrypoint", "age", "dedup_key")
        status = JobStatus(filters_now["status"]) if filters_now["status"] in set(JobStatus) else None
        cursor = _page_start(request, "cursor")
        jobs, next_cursor = await queue.browse(
            status,
            filters_now["entrypoint"] or None,
            AGES.get(filters_now["age"]),
            filters_now["dedup_key"] or None,
            cursor=cursor,
            limit=PAGE_SIZE,
        )
        next_url = None
        if next_cursor is not None:
            next_url = f"/q/{name}/jobs?{urlencode({**filters_now, 'cursor': next_cursor})}"
        entrypoints = sorted((await queue.stats()).entrypoints)
        return self.render(
            request, "jobs.html", queue=name, jobs=jobs, filters=filters_now, ages=list(AGES),
            entrypoints=entrypoints, next_url=next_url, first=cursor == 0,
        )  # fmt: skip

    async def _job(self, request: Request) -> Response:
        name, job_id = request.path_params["queue"], request.path_params["job_id"]
        detail = await job_detail(await self.source.get(name), job_id)
        status = 200 if detail.job is not None or detail.finished is not None else 404
        return self.render(request, "job.html", status, queue=name, detail=detail)

    async def _workflow(self, request: Request) -> Response:
        name, job_id = request.path_params["queue"], request.path_params["job_id"]
        try:
            jobs = await (await self.source.get(name)).workflow(job_id)
        except JobNotFoundError:
            return self.render(request, "workflow.html", 404, queue=name, job_id=job_id, jobs=None)
        ends = {job.id for job in jobs} - {parent for job in jobs for parent in job.after}
        unfinished = any(job.status not in LEFT for job in jobs)
        return self.render(
            request, "workflow.html", queue=name, job_id=job_id, jobs=jobs, ends=ends, unfinished=unfinished
        )

    async def _dead(self, request: Request) -> Response:
        name = request.path_params["queue"]
        queue = await self.source.get(name)
        groups = await queue.insight.dead_groups()
        total = (await queue.stats()).total(JobStatus.DEAD)
        return self.render(request, "dead.html", queue=name, groups=groups, total=total)

    async def _finished(self, request: Request) -> Response:
        name = request.path_params["queue"]
        queue = await self.source.get(name)
        filters_now = _query(request, "outcome", "entrypoint", "within")
        outcome = JobStatus(filters_now["outcome"]) if filters_now["outcome"] in FINISHED else None
        entrypoint = filters_now["entrypoint"] or None
        span = AGES.get(filters_now["within"])
        since = None if span is None else utc_now() - span
        offset = _page_start(request, "offset")
        finished = await queue.history(None, outcome, since)  # every entrypoint's, for the filter's choices
        records = [r for r in reversed(finished) if entrypoint is None or r.entrypoint == entrypoint]
        rows = records[offset : offset + PAGE_SIZE]
        older = offset + PAGE_SIZE
        older_url = f"?{urlencode({**filters_now, 'offset': older})}" if older < len(records) else None
        entrypoints = sorted(set((await queue.stats()).entrypoints) | {r.entrypoint for r in finished})
        return self.render(
            request, "finished.html", queue=name, rows=rows, total=len(records), filters=filters_now,
            outcomes=[str(o) for o in FINISHED], entrypoints=entrypoints, ages=list(AGES), offset=offset,
            older_url=older_url,
        )  # fmt: skip

    async def _workers(self, request: Request) -> Response:
        await self.source.names()  # only while this process serves the queues
        found = self.source.all_workers()
        shown = None if found is None else sorted(found, key=lambda w: (w.stale, w.queue, w.client))
        return self.render(request, "workers.html", workers=shown)

    async def _periodic(self, request: Request) -> Response:
        return self.render(request, "periodic.html", periodic=await periodic_rows(self.source))
