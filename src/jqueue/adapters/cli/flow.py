"""Commands that steer claims for every process: pause, resume, throttle, limit."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from jqueue.adapters.cli.common import EntrypointOption, JsonFlag, console, fail, on_queue, print_json

ScopeArgument = Annotated[str | None, typer.Argument(help="The entrypoint (default: the whole queue).")]
PerTenantFlag = Annotated[
    bool, typer.Option("--per-tenant", help="A separate one that holds for each tenant's jobs apart.")
]


def pause(
    ctx: typer.Context,
    entrypoint: ScopeArgument = None,
    enqueues: Annotated[bool, typer.Option("--enqueues", help="Refuse new jobs too.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Stop every worker from claiming jobs of an entrypoint or of the whole queue."""

    on_queue(ctx, lambda queue: queue.pause(entrypoint, enqueues=enqueues), create=True)
    _done({"paused": entrypoint, "enqueues": enqueues}, f"paused {_scope(entrypoint)}", as_json)


def resume(
    ctx: typer.Context,
    entrypoint: ScopeArgument = None,
    as_json: JsonFlag = False,
) -> None:
    """Undo a pause."""

    on_queue(ctx, lambda queue: queue.resume(entrypoint), create=True)
    _done({"resumed": entrypoint}, f"resumed {_scope(entrypoint)}", as_json)


def throttle(
    ctx: typer.Context,
    limit: Annotated[int | None, typer.Argument(help="Claims allowed per window (omit with --off).")] = None,
    per: Annotated[float, typer.Option(help="Window length in seconds.")] = 1.0,
    entrypoint: EntrypointOption = None,
    off: Annotated[bool, typer.Option("--off", help="Lift the throttle.")] = False,
    per_tenant: PerTenantFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Limit claims per time window, for all workers."""
    _value_or_off(limit, off, "LIMIT")
    window = timedelta(seconds=per)
    on_queue(ctx, lambda queue: queue.throttle(limit, window, entrypoint, per_tenant), create=True)
    scope = _scope(entrypoint, per_tenant)
    message = f"lifted the throttle of {scope}" if off else f"{scope}: {limit} claims per {per:g} s"
    if limit == 0:
        message += " (no job will be claimed until the throttle is lifted, as with a pause)"
    _done(
        {"entrypoint": entrypoint, "limit": limit, "per_seconds": per, "per_tenant": per_tenant},
        message,
        as_json,
    )


def limit(
    ctx: typer.Context,
    most: Annotated[
        int | None, typer.Argument(help="Jobs allowed in progress at once (omit with --off).")
    ] = None,
    entrypoint: EntrypointOption = None,
    off: Annotated[bool, typer.Option("--off", help="Lift the limit.")] = False,
    per_tenant: PerTenantFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Allow at most MOST jobs in progress at once, however many workers run."""
    _value_or_off(most, off, "MOST")
    on_queue(ctx, lambda queue: queue.limit(entrypoint, most, per_tenant), create=True)
    scope = _scope(entrypoint, per_tenant)
    message = f"lifted the limit of {scope}" if off else f"{scope}: at most {most} in progress at once"
    if most == 0:
        message += " (no job will be claimed until the limit is lifted, as with a pause)"
    _done({"entrypoint": entrypoint, "limit": most, "per_tenant": per_tenant}, message, as_json)


def _value_or_off(value: int | None, off: bool, name: str) -> None:
    if (value is None) != off:
        fail(f"give {name} or --off" + ("" if value is None else ", not both"))


def _scope(entrypoint: str | None, per_tenant: bool = False) -> str:
    return (entrypoint or "the whole queue") + (", each tenant" if per_tenant else "")


def _done(data: dict[str, object], message: str, as_json: bool) -> None:
    if as_json:
        print_json(data)
    else:
        console.print(message)
