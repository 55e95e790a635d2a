"""Flow control kept in the queue state: pauses, claim throttles and limits on the jobs in
progress, obeyed by every process.

A scope is an entrypoint, or None for the whole queue. A throttle allows ``limit``
claims per fixed window of ``window`` microseconds (windows are counted from the
epoch); the claims of the current window are counted as claims are applied, so
replaying the log gives every reader the same counts. A limit allows at most so many jobs of
its scope in progress at once (counted by the index's tally when a claim is decided).
"""

from __future__ import annotations

from collections.abc import Callable
from copy import deepcopy
from typing import Any

from jqueue.domain.effects import LimitSet, PauseSet, SinkMarked, ThrottleSet

Scope = str | None


class Controls:
    """Pauses, throttles and the throttles' current usage."""

    def __init__(self) -> None:
        self.paused_claims: set[Scope] = set()
        self.paused_enqueues: set[Scope] = set()
        self.throttles: dict[Scope, tuple[int, int]] = {}
        self.usage: dict[Scope, tuple[int, int]] = {}
        self.limits: dict[Scope, int] = {}
        self.marks: dict[str, int] = {}
        """The newest batch id each streaming sink committed (see ``SinkMarked``)."""

    def to_dict(self) -> dict[str, Any]:
        """Return the controls as plain lists (for the wire formats and snapshots)."""
        return {
            "paused_claims": sorted(self.paused_claims, key=str),
            "paused_enqueues": sorted(self.paused_enqueues, key=str),
            "throttles": [[scope, limit, window] for scope, (limit, window) in self.throttles.items()],
            "usage": [[scope, window, count] for scope, (window, count) in self.usage.items()],
            "limits": [[scope, limit] for scope, limit in self.limits.items()],
            "marks": [[sink, batch_id] for sink, batch_id in self.marks.items()],
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
        return controls

    def as_effects(self) -> list[PauseSet | ThrottleSet | LimitSet | SinkMarked]:
        """Return the effects that set these pauses, throttles, limits and marks on an empty queue."""
        scopes = sorted(self.paused_claims | self.paused_enqueues, key=str)
        pauses = [PauseSet(s, s in self.paused_claims, s in self.paused_enqueues) for s in scopes]
        throttles = [ThrottleSet(scope, limit, window) for scope, (limit, window) in self.throttles.items()]
        limits = [LimitSet(scope, limit) for scope, limit in self.limits.items()]
        marks = [SinkMarked(sink, batch_id) for sink, batch_id in self.marks.items()]
        return [*pauses, *throttles, *limits, *marks]

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
        self.usage.pop(effect.scope, None)
        if effect.limit is None:
            self.throttles.pop(effect.scope, None)
        else:
            self.throttles[effect.scope] = (effect.limit, effect.window)
        return undo

    def set_limit(self, effect: LimitSet) -> Callable[[], None]:
        """Apply a limit on the jobs in progress, or lift one; returns its undo."""
        undo = self._restorer()
        if effect.limit is None:
            self.limits.pop(effect.scope, None)
        else:
            self.limits[effect.scope] = effect.limit
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

    def count_claim(self, entrypoint: str, at: int) -> Callable[[], None] | None:
        """Count a claim at ``at`` against the throttles it falls under; returns the undo, if any."""
        scopes = [scope for scope in (None, entrypoint) if scope in self.throttles]
        if not scopes:
            return None
        undo = self._restorer()
        for scope in scopes:
            window = at // self.throttles[scope][1]
            used = self.usage.get(scope)
            if used is not None and used[0] >= window:
                self.usage[scope] = (used[0], used[1] + 1)
            else:
                self.usage[scope] = (window, 1)
        return undo

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
