"""The dashboard's actions: each form POST runs one queue operation, committed like any other.

Purges, and requeues of many dead letters at once, first answer a page that says how many
jobs they touch and asks to confirm; the confirmed form repeats the request with
``confirmed=yes``.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import TYPE_CHECKING

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response

from jqueue.adapters.dashboard.guard import FormTooLargeError, read_form
from jqueue.core.broker import BrokerQueue
from jqueue.domain.errors import JQueueError
from jqueue.domain.models import JobStatus
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
        back = str(form.get("back", ""))
        back = back if back.startswith("/") and not back.startswith("//") else f"/q/{name}"
        action = str(form.get("action", ""))
        try:
            if action in CONFIRMED and form.get("confirmed") != "yes":
                return await self._confirm(request, queue, name, action, form, back)
            message = await self._run(queue, action, form)
        except (ValueError, JQueueError) as exc:
            return dashboard.back(back, f"Not done: {exc}")
        return dashboard.back(back, message)

    async def _chosen(self, queue: BrokerQueue, form: FormData) -> list[str] | None:
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

    async def _confirm(
        self, request: Request, queue: BrokerQueue, name: str, action: str, form: FormData, back: str
    ) -> Response:
        chosen = await self._chosen(queue, form)
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

    async def _run(self, queue: BrokerQueue, action: str, form: FormData) -> str:
        scope = str(form.get("entrypoint", "")) or None
        where = f"entrypoint {scope}" if scope else "the queue"
        if action == "requeue":
            ids = [str(v) for v in form.getlist("ids")]
            return f"Requeued {_plural(await queue.requeue(ids))}."
        if action == "purge":
            ids = [str(v) for v in form.getlist("ids")]
            return f"Purged {_plural(await queue.purge(status=None, ids=ids))}."
        if action == "cancel":
            outcomes = [await queue.cancel(str(v)) for v in form.getlist("ids")]
            asked = outcomes.count(False)
            stops = f"; asked the workers of {_plural(asked)} to stop them" if asked else ""
            return f"Cancelled {_plural(outcomes.count(True))}{stops}."
        if action == "cancel_workflow":
            [job_id] = [str(v) for v in form.getlist("ids")]
            now = Counter(job.status for job in await queue.cancel_workflow(job_id))
            stopping = now[JobStatus.IN_PROGRESS]
            stops = f"; {_plural(stopping)} still running, asked to stop" if stopping else ""
            cancelled = _plural(now[JobStatus.CANCELLED])
            return f"Cancelled the workflow of job {job_id}: {cancelled} cancelled{stops}."
        if action == "requeue_dead":
            done = await queue.requeue_dead(await self._chosen(queue, form))
            return f"Requeued {_plural(done, 'dead job')}."
        if action == "purge_dead":
            chosen = await self._chosen(queue, form)
            return f"Purged {_plural(await queue.purge(JobStatus.DEAD, ids=chosen), 'dead job')}."
        if action == "pause":
            await queue.pause(scope)
            return f"Paused claims of {where}."
        if action == "resume":
            await queue.resume(scope)
            return f"Resumed {where}."
        per_tenant = form.get("per_tenant") == "yes"
        each = f"each tenant of {where}" if per_tenant else where
        of = f"per tenant of {where}" if per_tenant else f"of {where}"
        if action == "throttle":
            limit, per = _number(form, "limit"), _number(form, "per")
            await queue.throttle(limit, timedelta(seconds=per), scope, per_tenant=per_tenant)
            return f"Throttled {each} to {limit} claims per {per:g} s."
        if action == "limit":
            most = _number(form, "most")
            await queue.limit(scope, most, per_tenant=per_tenant)
            return f"Limited {each} to {most} jobs in progress at once."
        if action == "unlimit":
            await queue.limit(scope, None, per_tenant=per_tenant)
            return f"Lifted the limit {of}."
        if action == "unthrottle":
            await queue.throttle(None, timedelta(seconds=1), scope, per_tenant=per_tenant)
            return f"Lifted the throttle {of}."
        raise ValueError(f"unknown action {action!r}")


def _number(form: FormData, key: str) -> int:
    text = str(form.get(key, "")).strip()
    if not text.isdigit():
        raise ValueError(f"{key} must be a whole number, not {text!r}")
    return int(text)
