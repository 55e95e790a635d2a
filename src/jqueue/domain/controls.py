"""Flow control kept in the queue state: pauses, claim throttles and limits on the jobs in
progress, obeyed by every process.

A scope is an entrypoint, or None for the whole queue. A throttle allows ``limit``
claims per fixed window of ``window`` microseconds (windows are counted from the
epoch); the claims of the current window are counted as claims are applied, so
replaying the log gives every reader the same counts. A limit allows at most so many jobs of
its scope in progress at once (counted by the index's tally when a claim is decided). A
throttle or a limit per tenant holds for each tenant's jobs of its scope apart (ADR 0021).
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any

from jqueue.domain.effects import LimitSet, Owned, PauseSet, Resharded, SinkMarked, ThrottleSet
from jqueue.domain.errors import NotOwnerError
from jqueue.domain.lines import Tenant
from jqueue.domain.values import INT64_MAX, Bounds

JOBS_ALLOWED = Bounds(ge=0, le=INT64_MAX)
"""The bounds of a throttle's or a limit's number of jobs (0 stops them all)."""

Scope = str | None


class Controls:
    """Pauses, throttles and the throttles' current usage, limits; per tenant too."""

    def __init__(self) -> None:
        self.paused_claims: set[Scope] = set()
        self.paused_enqueues: set[Scope] = set()
        self.throttles: dict[Scope, tuple[int, int]] = {}
        self.usage: dict[Scope, tuple[int, int]] = {}
        self.limits: dict[Scope, int] = {}
        self.tenant_throttles: dict[Scope, tuple[int, int]] = {}
        self.tenant_usage: dict[Scope, tuple[int, dict[Tenant, int]]] = {}
        """Per scope, the current window and each tenant's claims in it (no older window)."""
        self.tenant_limits: dict[Scope, int] = {}
        self.marks: dict[str, int] = {}
        """The newest batch id each streaming sink committed (see ``SinkMarked``)."""
        self.owner: Owned | None = None
        """The broker that took the queue over last, in which epoch (see ``Owned``); None if none did."""
        self.shards: int | None = None
        """How many shards the queue is made of, if it was ever sharded (see ``Resharded``)."""

    def to_dict(self) -> dict[str, Any]:
        """Return the controls as plain lists (for the wire formats and snapshots)."""
        return {
            "paused_claims": sorted(self.paused_claims, key=str),
            "paused_enqueues": sorted(self.paused_enqueues, key=str),
            "throttles": [[scope, limit, window] for scope, (limit, window) in self.throttles.items()],
            "usage": [[scope, window, count] for scope, (window, count) in self.usage.items()],
            "limits": [[scope, limit] for scope, limit in self.limits.items()],
            "marks": [[sink, batch_id] for sink, batch_id in self.marks.items()],
            "tenant_throttles": [[s, limit, window] for s, (limit, window) in self.tenant_throttles.items()],
            "tenant_usage": [
                [scope, window, tenant, count]
                for scope, (window, counts) in self.tenant_usage.items()
                for tenant, count in counts.items()
            ],
            "tenant_limits": [[scope, limit] for scope, limit in self.tenant_limits.items()],
            "owner": None if self.owner is None else [self.owner.owner, self.owner.epoch],
            "shards": self.shards,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Controls:
        """Return the controls of ``to_dict``'s output."""
        controls = cls()
        controls.paused_claims = set(data.get("paused_claims", ()))
        controls.paused_enqueues = set(data.get("paused_enqueues", ()))
        controls.throttles = {scope: (limit, window) for scope, limit, window in data.get("throttles", ())}
        controls.usage = {scope: (window, count) for scope, window, count in data.get("usage", ())}
        controls.limits = {scope: limit for scope, limit in data.get("limits", ())}
        controls.marks = {sink: batch_id for sink, batch_id in data.get("marks", ())}
        throttles = data.get("tenant_throttles", ())
        controls.tenant_throttles = {scope: (limit, window) for scope, limit, window in throttles}
        for scope, window, tenant, count in data.get("tenant_usage", ()):
            controls.tenant_usage.setdefault(scope, (window, {}))[1][tenant] = count
        controls.tenant_limits = {scope: limit for scope, limit in data.get("tenant_limits", ())}
        owner = data.get("owner")
        controls.owner = None if owner is None else Owned(*owner)
        controls.shards = data.get("shards")
        return controls

    def as_effects(self) -> list[PauseSet | ThrottleSet | LimitSet | SinkMarked | Owned | Resharded]:
        """Return the effects that set these pauses, throttles, limits, marks, owner and shard
        count on an empty queue."""
        scopes = sorted(self.paused_claims | self.paused_enqueues, key=str)
        pauses = [PauseSet(s, s in self.paused_claims, s in self.paused_enqueues) for s in scopes]
        throttles = [ThrottleSet(scope, limit, window) for scope, (limit, window) in self.throttles.items()]
        limits = [LimitSet(scope, limit) for scope, limit in self.limits.items()]
        marks = [SinkMarked(sink, batch_id) for sink, batch_id in self.marks.items()]
        throttles += [ThrottleSet(s, n, window, True) for s, (n, window) in self.tenant_throttles.items()]
        limits += [LimitSet(scope, limit, True) for scope, limit in self.tenant_limits.items()]
        owned = [] if self.owner is None else [self.owner]
        sharded = [] if self.shards is None else [Resharded(self.shards)]
        return [*pauses, *throttles, *limits, *marks, *owned, *sharded]

    def _restorer(self) -> Callable[[], None]:
        saved = deepcopy(self.__dict__)

        def restore() -> None:
            self.__dict__.update(saved)

        return restore

    def set_pause(self, effect: PauseSet) -> Callable[[], None]:
        """Apply a pause or resume; returns its undo."""
        undo = self._restorer()
        for paused, on in ((self.paused_claims, effect.claims), (self.paused_enqueues, effect.enqueues)):
            if on:
                paused.add(effect.scope)
            else:
                paused.discard(effect.scope)
        return undo

    def set_throttle(self, effect: ThrottleSet) -> Callable[[], None]:
        """Apply a throttle or lift one; returns its undo."""
        undo = self._restorer()
        throttles, usage = (
            (self.tenant_throttles, self.tenant_usage) if effect.per_tenant else (self.throttles, self.usage)
        )
        usage.pop(effect.scope, None)
        if effect.limit is None:
            throttles.pop(effect.scope, None)
        else:
            throttles[effect.scope] = (effect.limit, effect.window)
        return undo

    def set_limit(self, effect: LimitSet) -> Callable[[], None]:
        """Apply a limit on the jobs in progress, or lift one; returns its undo."""
        undo = self._restorer()
        limits = self.tenant_limits if effect.per_tenant else self.limits
        if effect.limit is None:
            limits.pop(effect.scope, None)
        else:
            limits[effect.scope] = effect.limit
        return undo

    def set_mark(self, effect: SinkMarked) -> Callable[[], None]:
        """Record a sink's newest committed batch; returns its undo.

        Raises
        ------
        ValueError
            If the sink committed that batch, or a later one, already.
        """
        if self.is_replay(effect.sink, effect.batch_id):
            raise ValueError(f"{effect} comes after batch {self.marks[effect.sink]} of the same sink")
        undo = self._restorer()
        self.marks[effect.sink] = effect.batch_id
        return undo

    def set_owner(self, effect: Owned) -> Callable[[], None]:
        """Record the queue's new owner; returns its undo.

        Raises
        ------
        ValueError
            If its epoch is not later than the owner's before it.
        """
        if self.owner is not None and effect.epoch <= self.owner.epoch:
            raise ValueError(f"{effect} does not come after {self.owner}")
        undo = self._restorer()
        self.owner = effect
        return undo

    def set_shards(self, effect: Resharded) -> Callable[[], None]:
        """Record the queue's shard count; returns its undo.

        Raises
        ------
        ValueError
            If it is lower than the count before it.
        """
        if self.shards is not None and effect.shards < self.shards:
            raise ValueError(f"{effect} lowers the count of {self.shards} shards")
        undo = self._restorer()
        self.shards = effect.shards
        return undo

    def check_owner(self, broker: str) -> None:
        """Refuse a commit made as ``broker`` unless it took the queue over last.

        Raises
        ------
        NotOwnerError
            If no broker, or another one, owns the queue.
        """
        owner = self.owner
        if owner is None or owner.owner != broker:
            raise NotOwnerError(None if owner is None else owner.owner)

    def is_replay(self, sink: str, batch_id: int) -> bool:
        """Whether streaming sink ``sink`` committed batch ``batch_id`` (or a later one) already."""
        newest = self.marks.get(sink)
        return newest is not None and batch_id <= newest

    def at_limit(self, entrypoint: str, running: Callable[[Scope], int]) -> bool:
        """Whether the limits let no more job of ``entrypoint`` start, given the jobs ``running``
        (in progress) per scope."""
        limits = self.limits
        return bool(limits) and any(
            scope in limits and running(scope) >= limits[scope] for scope in (None, entrypoint)
        )

    def count_claim(self, entrypoint: str, at: int, tenant: Tenant = None) -> Callable[[], None] | None:
        """Count a claim at ``at`` of a job of ``tenant`` against the throttles it falls under;
        returns the undo, if any (which restores only what the claim changed: a window's
        counts per tenant may be many)."""
        scopes = [scope for scope in (None, entrypoint) if scope in self.throttles]
        tenant_scopes = [scope for scope in (None, entrypoint) if scope in self.tenant_throttles]
        if not scopes and not tenant_scopes:
            return None
        usage = {scope: self.usage.get(scope) for scope in scopes}
        tenant_usage = {scope: self.tenant_usage.get(scope) for scope in tenant_scopes}
        counted: dict[Scope, int | None] = {}  # the tenant's count before, where its window went on
        for scope in scopes:
            window = at // self.throttles[scope][1]
            used = usage[scope]
            if used is not None and used[0] >= window:
                self.usage[scope] = (used[0], used[1] + 1)
            else:
                self.usage[scope] = (window, 1)
        for scope in tenant_scopes:
            window = at // self.tenant_throttles[scope][1]
            current = tenant_usage[scope]
            if current is None or current[0] < window:  # a new window: the old counts go
                self.tenant_usage[scope] = (window, {tenant: 1})
            else:
                counted[scope] = current[1].get(tenant)
                current[1][tenant] = (counted[scope] or 0) + 1

        def undo() -> None:  # looks the entries up again: a restorer may have replaced them since
            for scope, used in usage.items():
                _restore(self.usage, scope, used)
            for scope, current in tenant_usage.items():
                if scope not in counted:
                    _restore(self.tenant_usage, scope, current)
                elif (now := self.tenant_usage.get(scope)) is not None:
                    _restore(now[1], tenant, counted[scope])

        return undo

    @property
    def per_tenant(self) -> bool:
        """Whether a limit or a throttle counts per tenant."""
        return bool(self.tenant_limits or self.tenant_throttles)

    def tenant_blocked(
        self, entrypoint: str, tenant: Tenant, now: int, running: Callable[[Scope, Tenant], int]
    ) -> int | None:
        """Return None if the limits and throttles per tenant let a job of ``tenant`` of
        ``entrypoint`` start at ``now``, given the jobs ``running`` per scope and tenant; else
        the time before which a throttle keeps it blocked (``INT64_MAX`` for a limit: until
        a job of the tenant stops running)."""
        for scope in (None, entrypoint):
            limit = self.tenant_limits.get(scope)
            if limit is not None and running(scope, tenant) >= limit:
                return INT64_MAX
            throttle = self.tenant_throttles.get(scope)
            if throttle is not None:
                window, count = now // throttle[1], 0
                used = self.tenant_usage.get(scope)
                if used is not None and used[0] >= window:
                    window, count = used[0], used[1].get(tenant, 0)
                if count >= throttle[0]:
                    return (window + 1) * throttle[1]
        return None

    def claims_paused(self, entrypoint: str) -> bool:
        """Whether claims of ``entrypoint`` are paused (by itself or the whole queue)."""
        return bool(self.paused_claims) and (None in self.paused_claims or entrypoint in self.paused_claims)

    def enqueues_paused(self, entrypoint: str) -> bool:
        """Whether enqueues of ``entrypoint`` are paused (by itself or the whole queue)."""
        paused = self.paused_enqueues
        return bool(paused) and (None in paused or entrypoint in paused)

    def remaining(self, entrypoint: str, now: int) -> int | None:
        """How many more claims of ``entrypoint`` the throttles allow at ``now``; None for no limit."""
        allowed: int | None = None
        for scope in (None, entrypoint):
            throttle = self.throttles.get(scope)
            if throttle is None:
                continue
            limit, window = throttle
            used = self.usage.get(scope)
            count = used[1] if used is not None and used[0] >= now // window else 0
            left = max(0, limit - count)
            allowed = left if allowed is None else min(allowed, left)
        return allowed


def _restore(mapping: dict[Any, Any], key: Any, value: Any) -> None:
    """Set ``mapping[key]`` back to ``value`` (None: remove it)."""
    if value is None:
        mapping.pop(key, None)
    else:
        mapping[key] = value
