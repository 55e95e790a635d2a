"""``BulkAdds``: applying effects in order, with long runs of adds applied in bulk (a bulk
write's, or a replayed one): the same state as one ``apply`` an add, in fewer steps a job."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from jqueue.domain.effects import Added, Effect
from jqueue.domain.models import JobStatus
from jqueue.domain.records import JobRecord

if TYPE_CHECKING:
    from jqueue.domain.claim_order import ClaimOrder
    from jqueue.domain.cold import ColdRows
    from jqueue.domain.tally import Tally

BULK_ADDS = 64
"""A run of at least this many adds is applied in bulk."""


class BulkAdds:
    """``apply_all`` of an ``IndexState``."""

    records: dict[str, JobRecord]
    tally: Tally
    order: ClaimOrder
    pending_effects: list[Effect]
    _journal: list[Callable[[], None]] | None
    _dedup: dict[str, str]
    _next_order: int
    _last_stamp: int
    changed: dict[str, JobRecord] | None
    cold: ColdRows | None

    def apply(self, effect: Effect) -> None:
        raise NotImplementedError

    def _stage(self, record: JobRecord) -> None:
        raise NotImplementedError

    def _link(self, record: JobRecord) -> None:
        raise NotImplementedError

    def job(self, job_id: str) -> JobRecord | None:
        raise NotImplementedError

    def _delete(self, record: JobRecord) -> None:
        raise NotImplementedError

    def _record_undo(self, undo: Callable[[], None] | None) -> None:
        raise NotImplementedError

    def apply_all(self, effects: Iterable[Effect], *, ids_looked_up: bool = False) -> None:
        """Apply effects in order (a run of adds in bulk: a bulk write's, or a replayed one).
        With ``ids_looked_up``, the caller found no job holding an added id (``adding``), so a
        run of adds does not look for them among the cold jobs again."""
        run: list[Added] = []
        for effect in effects:
            if isinstance(effect, Added):
                run.append(effect)
                continue
            self._add_run(run, ids_looked_up)
            run = []
            self.apply(effect)
        self._add_run(run, ids_looked_up)
        if self._journal is None:
            self.order.prune()

    def _add_run(self, run: list[Added], ids_looked_up: bool) -> None:
        if len(run) < BULK_ADDS:
            for added in run:
                self.apply(added)
            return
        keys = [a.dedup_key for a in run if a.dedup_key is not None]
        cold = not ids_looked_up and self.cold is not None and any(self.job(a.id) is not None for a in run)
        if cold or self.records.keys() & {a.id for a in run} or len({a.id for a in run}) < len(run):
            raise ValueError("a job is added twice")
        if self._dedup.keys() & set(keys) or len(set(keys)) < len(keys):
            raise ValueError("two jobs share a dedup key")
        first = self._next_order
        records = list(map(JobRecord.from_added, run, range(first, first + len(run))))
        for record in records:
            self.tally.add(record)  # first: it refuses a finished job's status before anything changed
        self._next_order += len(records)
        self.records.update((record.id, record) for record in records)
        if self.changed is not None:
            for record in records:
                self.changed.setdefault(record.id, record)
        self._dedup.update((r.dedup_key, r.id) for r in records if r.dedup_key is not None)
        for record in records:
            if record.status is JobStatus.STAGED:
                self._stage(record)
            if record.awaiting:
                self._link(record)
            self._last_stamp += 1
            record.stamp = self._last_stamp
        self.order.push_many(records)
        if self._journal is not None:
            self.pending_effects.extend(run)

            def undo() -> None:
                for record in reversed(records):
                    self._delete(record)
                self._next_order = first

            self._record_undo(undo)
