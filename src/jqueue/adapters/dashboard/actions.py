"""The dashboard's actions: each form POST runs one queue operation, committed like any other.

Purges, and requeues of many dead letters at once, first answer a page that says how many
jobs they touch and asks to confirm; the confirmed form repeats the request with
``confirmed=yes``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from jqueue.adapters.dashboard.guard import FormTooLargeError, local_target, read_form
from jqueue.adapters.dashboard.source import ShownQueue
from jqueue.domain.errors import JQueueError
from jqueue.domain.models import JobStatus
from jqueue.domain.spec import POSITIVE_SPAN
from jqueue.domain.workflows import LEFT

if TYPE_CHECKING:
    from jqueue.adapters.dashboard.pages import Dashboard

CONFIRMED = ("purge", "requeue_dead", "purge_dead", "cancel", "cancel_workflow")


def _plural(n: int, what: str = "job") -> str:
    return f"{n:,} {what}" + ("" if n == 1 else "s")


class Actions:
    """The POST handler of ``/q/{queue}/act`` for ``dashboard``."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard

    async def act(self, request: Request) -> Response:
        """Run (or ask to confirm) the action a form posted."""
        dashboard = self.dashboard
        name = request.path_params["queue"]
        try:
            form = await read_form(request)
        except FormTooLargeError as exc:
            return dashboard.render(request, "message.html", 413, title="Too large", text=str(exc))
        if not dashboard.guard.form_allowed(request, str(form.get("csrf", ""))):
            text = "This form did not come from this dashboard (reload the page and try again)."
            return dashboard.render(request, "message.html", 403, title="Refused", text=text)
        queue = await dashboard.source.get(name)
        back = local_target(str(form.get("back", "")), f"/q/{name}")
        action = str(form.get("action", ""))
        try:
            if action in CONFIRMED and form.get("confirmed") != "yes":
                return await self._confirm(request, queue, name, action, form, back)
            message = await self._run(queue, action, form)
        except (ValueError, JQueueError) as exc:
            return dashboard.back(back, f"Not done: {exc}")
        return dashboard.back(back, message)

    async def _confirm(
        self, request: Request, queue: ShownQueue, name: str, action: str, form: FormData, back: str
    ) -> Response:
        chosen = await _chosen(queue, form)
        dead = (await queue.stats()).total(JobStatus.DEAD)
        count = dead if chosen is None else len(chosen)
        group = str(form.get("group", ""))
        verb = {"purge": "Purge", "purge_dead": "Purge", "cancel": "Cancel"}.get(action, "Requeue")
        what = "dead " if action.endswith("_dead") else ""
        question = f"{verb} {_plural(count, what + 'job')} of queue {name}"
        question += f" that failed with “{group}”?" if group else "?"
        if action == "cancel_workflow":
            verb, [job_id] = "Cancel", chosen or [""]
            count = sum(job.status not in LEFT for job in await queue.workflow(job_id))
            question = f"Cancel the {_plural(count, 'unfinished job')} of job {job_id}'s workflow?"
        fields = [(key, str(value)) for key, value in form.multi_items() if key not in ("csrf", "confirmed")]
        return self.dashboard.render(
            request,
            "confirm.html",
            queue=name,
            question=question,
            verb=verb,
            destructive=verb != "Requeue",
            count=count,
            fields=fields,
            back=back,
        )

    async def _run(self, queue: ShownQueue, action: str, form: FormData) -> str:
        run = RUNS.get(action)
        if run is None:
            raise ValueError(f"unknown action {action!r}")
        return await run(queue, form)


async def _chosen(queue: ShownQueue, form: FormData) -> list[str] | None:
    """The jobs an action names: ``ids``, or the dead letters of error group ``group``
    (None: every dead letter)."""
    ids = [str(v) for v in form.getlist("ids") if str(v)]
    if ids:
        return ids
    group = form.get("group")
    if group is None or group == "":
        return None
    for found in await queue.insight.dead_groups():
        if found.error == group:
            return found.ids
    return []


def _ids(form: FormData) -> list[str]:
    return [str(v) for v in form.getlist("ids")]


def _scope(form: FormData) -> tuple[str | None, str]:
    """The entrypoint a form names (None: the whole queue), and how a message says it."""
    scope = str(form.get("entrypoint", "")) or None
    return scope, f"entrypoint {scope}" if scope else "the queue"


def _tenants(form: FormData) -> tuple[bool, str, str]:
    """Whether a form's throttle or limit is per tenant; what it holds for and of, in words."""
    per_tenant = form.get("per_tenant") == "yes"
    where = _scope(form)[1]
    each = f"each tenant of {where}" if per_tenant else where
    return per_tenant, each, f"per tenant of {where}" if per_tenant else f"of {where}"


async def _requeue(queue: ShownQueue, form: FormData) -> str:
    return f"Requeued {_plural(await queue.requeue(_ids(form)))}."


async def _purge(queue: ShownQueue, form: FormData) -> str:
    return f"Purged {_plural(await queue.purge(status=None, ids=_ids(form)))}."


async def _cancel(queue: ShownQueue, form: FormData) -> str:
    outcomes = [await queue.cancel(job_id) for job_id in _ids(form)]
    asked = outcomes.count(False)
    stops = f"; asked the workers of {_plural(asked)} to stop them" if asked else ""
    return f"Cancelled {_plural(outcomes.count(True))}{stops}."


async def _cancel_workflow(queue: ShownQueue, form: FormData) -> str:
    ids = _ids(form)
    if len(ids) != 1:
        raise ValueError(f"cancel a workflow by one of its jobs, not {len(ids)}")
    now = Counter(job.status for job in await queue.cancel_workflow(ids[0]))
    stopping = now[JobStatus.IN_PROGRESS]
    stops = f"; {_plural(stopping)} still running, asked to stop" if stopping else ""
    return f"Cancelled the workflow of job {ids[0]}: {_plural(now[JobStatus.CANCELLED])} cancelled{stops}."


async def _requeue_dead(queue: ShownQueue, form: FormData) -> str:
    return f"Requeued {_plural(await queue.requeue_dead(await _chosen(queue, form)), 'dead job')}."


async def _purge_dead(queue: ShownQueue, form: FormData) -> str:
    chosen = await _chosen(queue, form)
    return f"Purged {_plural(await queue.purge(JobStatus.DEAD, ids=chosen), 'dead job')}."


async def _pause(queue: ShownQueue, form: FormData) -> str:
    scope, where = _scope(form)
    await queue.pause(scope)
    return f"Paused claims of {where}."


async def _resume(queue: ShownQueue, form: FormData) -> str:
    scope, where = _scope(form)
    await queue.resume(scope)
    return f"Resumed {where}."


async def _throttle(queue: ShownQueue, form: FormData) -> str:
    (per_tenant, each, _), limit = _tenants(form), _number(form, "limit")
    per = _span(form, "per")
    await queue.throttle(limit, per, _scope(form)[0], per_tenant=per_tenant)
    return f"Throttled {each} to {limit} claims per {per.total_seconds():g} s."


async def _limit(queue: ShownQueue, form: FormData) -> str:
    (per_tenant, each, _), most = _tenants(form), _number(form, "most")
    await queue.limit(_scope(form)[0], most, per_tenant=per_tenant)
    return f"Limited {each} to {most} jobs in progress at once."


async def _unlimit(queue: ShownQueue, form: FormData) -> str:
    per_tenant, _, of = _tenants(form)
    await queue.limit(_scope(form)[0], None, per_tenant=per_tenant)
    return f"Lifted the limit {of}."


async def _unthrottle(queue: ShownQueue, form: FormData) -> str:
    per_tenant, _, of = _tenants(form)
    await queue.throttle(None, timedelta(seconds=1), _scope(form)[0], per_tenant=per_tenant)
    return f"Lifted the throttle {of}."


RUNS: dict[str, Callable[[ShownQueue, FormData], Awaitable[str]]] = {
    "requeue": _requeue,
    "purge": _purge,
    "cancel": _cancel,
    "cancel_workflow": _cancel_workflow,
    "requeue_dead": _requeue_dead,
    "purge_dead": _purge_dead,
    "pause": _pause,
    "resume": _resume,
    "throttle": _throttle,
    "limit": _limit,
    "unlimit": _unlimit,
    "unthrottle": _unthrottle,
}
"""Each action a form may post, and what runs it (the message it answers is shown once back)."""
WHOLE_NUMBERS = ("limit", "most")
"""The form fields of whole numbers (the queue call checks their range, as the native API's)."""
SPANS = {"per": POSITIVE_SPAN}
"""The form fields of spans, in whole seconds, and their limits: those of the native API's
fields of the same calls (``per_seconds``), so that neither stores what the other refuses."""


def _number(form: FormData, key: str) -> int:
    text = str(form.get(key, "")).strip()
    if not (text.isascii() and text.isdigit()):
        raise ValueError(f"{key} must be a whole number, not {text[:40]!r}")
    return int(text)


def _span(form: FormData, key: str) -> timedelta:
    """Form field ``key``, whole seconds, as a span within its limit (``SPANS``)."""
    seconds, limit = _number(form, key), SPANS[key]
    longest: timedelta = limit.le
    if seconds > longest.total_seconds():  # checked as a number: a timedelta may not hold it
        raise ValueError(f"{key} must be at most {longest.days:,} days, got {seconds:,} s")
    span = timedelta(seconds=seconds)
    limit.check(key, span)
    return span
