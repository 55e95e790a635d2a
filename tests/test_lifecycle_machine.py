"""The job lifecycle as a state machine: invariants under random interleavings and clock jumps.

Workers claim, ack, nack and heartbeat (with progress) under leases, serving the tenants' lines
in turn; producers enqueue with delays, time limits, attempt limits, dedup keys and tenants; an
operator pauses, throttles, revives, purges and cancels; the clock jumps forwards and
backwards; checkpoints are taken, and the machine may go on in a process that opened one, its
claimable jobs cold rows of the checkpoint's slabs (ADR 0015). Every committed change is also
encoded as a log entry, decoded and replayed on a second index, which must agree.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fairness import Turns
from jqueue.core.formats.checkpoint import HistoryEncoder, decode_manifest
from jqueue.core.formats.entry import decode_entry, encode_entry
from jqueue.core.formats.payload_refs import payload_ref
from jqueue.core.log.slab_load import loaded
from jqueue.core.log.slab_plan import plan
from jqueue.core.log.slabs import SlabSet
from jqueue.domain.effects import Added, Cancelled, Died, LimitSet, ParentSettled, PauseSet, ThrottleSet
from jqueue.domain.errors import JobCancelledError, JobNotFoundError, LeaseLostError
from jqueue.domain.index import QueueIndex
from jqueue.domain.models import JobStatus, ParentFailure
from jqueue.domain.records import RECORD_COLUMNS, JobRecord
from jqueue.domain.schema import FIELD_NAMES
from jqueue.domain.stats import stats_of
from jqueue.domain.tally import DEAD
from jqueue.domain.times import to_micros, utc_now
from merging import Merging

SECOND = 1_000_000
T0 = 1_800_000_000 * SECOND
ENTRYPOINTS = ("a", "b")
TENANTS = (None, "t1", "t2")
WORKERS = st.integers(0, 2)
MAX_ATTEMPTS = 3
WINDOW = 10 * SECOND


def view(index: QueueIndex) -> list[tuple[Any, ...]]:
    """Every job's fields except its payload (a replica holds references instead)."""
    fields = [name for name in FIELD_NAMES if name != "payload"]
    return [tuple(getattr(record, name) for name in fields) for record in index.in_order()]


class Lifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.index = QueueIndex()
        self.replica = QueueIndex()
        self.clock = T0
        self.enqueued: set[str] = set()
        self.acked: set[str] = set()
        self.purged: set[str] = set()
        self.cancelled: set[str] = set()
        self.held: list[tuple[int, str, str]] = []  # (worker, job id, lease) of every claim
        self.attempts: dict[str, int] = {}
        self.released: dict[str, int] = {}  # claims given back by release: attempts that failed nothing
        self.finished = 0  # acks and deaths, each leaving a history record
        self.forgotten = 0
        self.throttles: dict[str | None, int] = {}  # claims allowed per window, by scope
        self.throttle_use: dict[str | None, tuple[int, int]] = {}  # (window, claims) by scope
        self.tenant_limits: dict[str | None, int] = {}  # jobs in progress allowed per tenant, by scope
        self.tenant_throttles: dict[str | None, int] = {}  # claims allowed per window per tenant, by scope
        self.tenant_use: dict[str | None, tuple[int, dict[str | None, int]]] = {}
        """By scope: the newest window a claim fell in (a clock behind counts in it), and each
        tenant's claims in it."""
        self.paused: set[str | None] = set()
        self.slabs = SlabSet()
        self.merging = Merging(unit=1)  # slabs of the smallest size class: they merge and retire often
        self.history = HistoryEncoder()  # kept across checkpoints, as a store keeps it
        self.stored: dict[str, bytes] = {}  # the slabs written, by name
        self.failed: set[str] = set()  # jobs that died at least once
        self.settled: set[tuple[str, str]] = set()  # (child, parent) of every ParentSettled
        self.started_with_parents: set[str] = set()  # children claimed at least once
        self.turns = Turns()

    def live(self) -> dict[str, JobRecord]:
        """Every live job of the index by id, records and cold rows alike (in insertion order)."""
        return {record.id: record for record in self.index.in_order()}

    @rule(every_job=st.booleans(), reopen=st.booleans(), merged=st.booleans())
    def a_checkpoint_is_taken_and_a_new_process_opens_it(
        self, every_job: bool, reopen: bool, merged: bool
    ) -> None:
        """Checkpoint the index, naming the slab of the merge begun after an earlier one if it is
        ``merged``; with ``reopen`` go on in a process that opened it, whose claimable jobs are
        cold rows of its slabs."""
        for record in self.live().values():  # as the store does once an entry holds the payload
            self.index.store_payload(record.id, payload_ref(1, 0))
        if merged:  # else the merge is still running: this checkpoint drops rows of the slabs it retires
            self.merging.take(self.slabs, self.stored, self.clock)
        every_job = every_job or self.slabs.checkpoint is None
        taken = self.slabs.taken_now() if every_job else {}
        frozen = self.index.freeze(every_job=every_job)
        tag = uuid.uuid4().hex[:8]
        try:
            made = plan(
                self.slabs,
                frozen,
                self.clock,
                tag,
                every_job=every_job,
                taken=taken,
                history=self.history,
            )
        finally:
            self.index.thaw()
        encoded = made.manifest(self.clock)  # names the new slab, as storing it does
        if made.slab is not None:
            self.stored[made.slab.name] = made.content
        self.slabs.adopt(made, self.index)
        self.merging.begin(self.slabs)
        if reopen:
            manifest = decode_manifest(encoded, "checkpoint")
            names = [entry.name for entry in manifest.slabs]
            back, self.slabs, _ = loaded(manifest, [self.stored[name] for name in names], names, "checkpoint")
            assert view(back) == view(self.index)
            assert list(back.history) == list(self.index.history)
            self.index = back
            self.turns.forget()

    def claims_left(self, entrypoint: str, now: int) -> int | None:
        """The model of the throttles: claims still allowed now (None: unlimited)."""
        left: int | None = None
        for scope in (None, entrypoint):
            if scope in self.throttles:
                window, used = self.throttle_use.get(scope, (now // WINDOW, 0))
                current = used if window >= now // WINDOW else 0
                left = min(left if left is not None else 10**9, self.throttles[scope] - current)
        return left

    def tenant_blocked(self, entrypoint: str, tenant: str | None, now: int) -> bool:
        """The model of the limits and throttles per tenant: whether they let no job of
        ``tenant`` of ``entrypoint`` start now."""
        for scope in (None, entrypoint):
            limit = self.tenant_limits.get(scope)
            if limit is not None and self.running_of(scope, tenant) >= limit:
                return True
            throttle = self.tenant_throttles.get(scope)
            window, counts = self.tenant_use.get(scope, (now // WINDOW, {}))
            if throttle is not None and (counts.get(tenant, 0) if window >= now // WINDOW else 0) >= throttle:
                return True
        return False

    def running_of(self, scope: str | None, tenant: str | None) -> int:
        return sum(
            1
            for r in self.live().values()
            if r.status is JobStatus.IN_PROGRESS and r.tenant == tenant and scope in (None, r.entrypoint)
        )

    def count_claim(self, entrypoint: str, now: int, tenant: str | None = None) -> None:
        for scope in (None, entrypoint):
            if scope in self.tenant_throttles:
                window, counts = self.tenant_use.get(scope, (now // WINDOW, {}))
                if window < now // WINDOW:
                    window, counts = now // WINDOW, {}
                used = counts[tenant] = counts.get(tenant, 0) + 1
                self.tenant_use[scope] = (window, counts)
                assert used <= self.tenant_throttles[scope], (
                    f"tenant {tenant} of {scope} claimed {used} times"
                )
        for scope in (None, entrypoint):
            if scope in self.throttles:
                window, used = self.throttle_use.get(scope, (now // WINDOW, 0))
                self.throttle_use[scope] = (
                    (window, used + 1) if window >= now // WINDOW else (now // WINDOW, 1)
                )

    def commit(self, decide: Callable[[QueueIndex], object]) -> object:
        """Run one decision in a transaction, keep it, and replay it on the replica via the wire."""
        self.index.journal.begin()
        try:
            answer = decide(self.index)
        except Exception:
            self.index.journal.rollback()
            raise
        effects = list(self.index.journal.effects)
        self.index.journal.commit()
        if effects:
            self.index.version += 1
            entry = decode_entry(
                encode_entry(self.index.version, "c", self.clock, effects), self.index.version, "t"
            )
            self.replica.apply_all(entry.effects)
            self.replica.version = self.index.version
        self.finished += sum(
            type(e).__name__ in ("Removed", "Died", "Cancelled") and getattr(e, "at", 0) is not None
            for e in effects
        )
        self.cancelled |= {e.job_id for e in effects if isinstance(e, Cancelled)}
        self.failed |= {e.job_id for e in effects if isinstance(e, Died)}
        for effect in effects:
            if isinstance(effect, ParentSettled):
                pair = (effect.job_id, effect.parent)
                assert pair not in self.settled, f"{pair} settled twice"
                self.settled.add(pair)
        self.forgotten += sum(getattr(e, "count", 0) for e in effects if type(e).__name__ == "Forgotten")
        return answer

    @rule(
        entrypoint=st.sampled_from(ENTRYPOINTS),
        priority=st.integers(0, 2),
        delay=st.sampled_from([None, 0, 2, 10]),
        ttl=st.sampled_from([None, 5, 30]),
        max_attempts=st.sampled_from([None, 1, 2]),
        key=st.sampled_from([None, None, "k1", "k2"]),
        tenant=st.sampled_from(TENANTS),
    )
    def enqueue(
        self,
        entrypoint: str,
        priority: int,
        delay: int | None,
        ttl: int | None,
        max_attempts: int | None,
        key: str | None,
        tenant: str | None,
    ) -> None:
        job_id = str(uuid.uuid4())
        now = self.clock

        def decide(index: QueueIndex) -> bool:
            if key is not None and index.dedup_match(key, now - 60 * SECOND) is not None:
                return False
            not_before = None if delay is None else now + delay * SECOND
            deadline = None if ttl is None else now + ttl * SECOND
            fields = (job_id, entrypoint, priority, now, JobStatus.QUEUED, None, b"p")
            added = Added(*fields, 0, None, None, max_attempts, not_before, deadline, key, tenant=tenant)
            index.apply(added)
            return True

        if self.commit(decide):
            self.enqueued.add(job_id)
            self.attempts[job_id] = 0

    @rule(entrypoint=st.sampled_from(ENTRYPOINTS), tenant=st.sampled_from(TENANTS), count=st.integers(2, 4))
    def a_tenant_enqueues_several(self, entrypoint: str, tenant: str | None, count: int) -> None:
        """Jobs of one tenant at one priority: lines long enough to wait behind each other."""
        ids = [str(uuid.uuid4()) for _ in range(count)]
        now = self.clock
        added = [
            Added(job_id, entrypoint, 1, now, JobStatus.QUEUED, None, b"p", tenant=tenant) for job_id in ids
        ]

        def decide(index: QueueIndex) -> None:
            for effect in added:
                index.apply(effect)

        self.commit(decide)
        self.enqueued.update(ids)
        self.attempts.update(dict.fromkeys(ids, 0))

    @rule(
        data=st.data(),
        parents=st.integers(1, 3),
        runs_anyway=st.booleans(),
        with_parent_in_call=st.booleans(),
    )
    def enqueue_with_parents(
        self, data: st.DataObject, parents: int, runs_anyway: bool, with_parent_in_call: bool
    ) -> None:
        """Enqueue a job that waits for parents drawn from the live jobs, the history and an
        unknown id, and maybe for a new one added first in the same call."""
        finished = [record.job_id for record in self.index.history]
        known = list(dict.fromkeys([*(r.id for r in self.index.in_order()), *finished, "no-such-job"]))
        chosen = data.draw(st.lists(st.sampled_from(known), max_size=parents, unique=True))
        now = self.clock
        policy = ParentFailure.RUN.value if runs_anyway else None
        new: list[Added] = []
        refusal: type[Exception] | None = None  # the first parent that cannot be one decides
        for parent in chosen:
            if parent in self.live() and self.live()[parent].status is JobStatus.STAGED:
                refusal = ValueError
            elif parent not in self.live() and self.index.history.finished(parent) is None:
                refusal = JobNotFoundError
            if refusal is not None:
                break
        if with_parent_in_call or not chosen:
            first = str(uuid.uuid4())
            new.append(Added(first, "a", 0, now, JobStatus.QUEUED, None, b"p"))
            chosen.append(first)
        child = str(uuid.uuid4())
        fields = (child, data.draw(st.sampled_from(ENTRYPOINTS)), 0, now, JobStatus.WAITING, None, b"p")
        new.append(Added(*fields, after=tuple(chosen), on_parent_failure=policy, awaiting=tuple(chosen)))
        if refusal is not None:
            with pytest.raises(refusal):
                self.commit(lambda index: index.add(new, to_micros(utc_now()), 60 * SECOND)[0])
            return
        self.commit(lambda index: index.add(new, to_micros(utc_now()), 60 * SECOND)[0])
        for added in new:
            self.enqueued.add(added.id)
            self.attempts[added.id] = 0
        record = self.live().get(child)
        if record is None:  # a parent had failed already: cancelled at once
            assert child in self.cancelled
            assert not runs_anyway
            return
        for position, parent in enumerate(record.after):
            if parent in self.acked:
                assert record.parent_results[position] == parent.encode()
        waits = [p for p in chosen if p in self.live() and self.live()[p].status is not JobStatus.DEAD]
        assert record.awaiting == tuple(waits)

    def a_child_runs_only_once_its_parents_settled(self, record: JobRecord) -> None:
        for parent in record.after:
            if parent in self.acked:
                continue
            assert record.on_parent_failure == ParentFailure.RUN, f"{record.id} ran before {parent} settled"
            assert parent in self.failed | self.cancelled | self.purged

    @rule(
        worker=WORKERS,
        entrypoints=st.sampled_from([None, ("a",), ("b",), ENTRYPOINTS]),
        batch=st.integers(1, 3),
        lease_seconds=st.integers(1, 20),
        peek=st.booleans(),
    )
    def claim(
        self, worker: int, entrypoints: tuple[str, ...] | None, batch: int, lease_seconds: int, peek: bool
    ) -> None:
        now = self.clock
        # a peek is a claim undone: it also tells whether claims alone keep their lines right
        peeked = [r.id for r in self.index.peek(entrypoints, batch, now)] if peek else None
        due = {r.id: r.not_before for r in self.live().values()}
        candidates = sorted(
            (r.priority, r.created, r.order, r.id, r.entrypoint, r.tenant)
            for r in self.live().values()
            if r.status is JobStatus.QUEUED
            and r.entrypoint in (entrypoints or ENTRYPOINTS)
            and (r.not_before or 0) <= now
            and (r.deadline or now + 1) > now
        )

        def decide(index: QueueIndex) -> list[tuple[str, str | None]]:
            claims = index.claim(
                entrypoints, batch, now, now + lease_seconds * SECOND, lambda: uuid.uuid4().hex
            )
            return [(c.job_id, c.lease) for c in claims]

        claimed = self.commit(decide)
        assert isinstance(claimed, list)
        assert peeked is None or [job_id for job_id, _ in claimed] == peeked[: len(claimed)]
        for job_id, lease in claimed:
            record = self.live()[job_id]
            assert record.status is JobStatus.IN_PROGRESS
            assert record.entrypoint in (entrypoints or ENTRYPOINTS)
            assert record.not_before == due[job_id]  # a claim keeps when the job became due
            assert (due[job_id] or 0) <= now
            assert record.deadline is None or record.deadline > now
            assert lease is not None
            assert record.entrypoint not in self.paused
            assert None not in self.paused
            left = self.claims_left(record.entrypoint, now)
            assert left is None or left > 0
            self.count_claim(record.entrypoint, now, record.tenant)
            self.held.append((worker, job_id, lease))
            if record.after:
                self.started_with_parents.add(job_id)
                self.a_child_runs_only_once_its_parents_settled(record)
        for scope, tenant in {
            (s, self.live()[j].tenant) for j, _ in claimed for s in (None, self.live()[j].entrypoint)
        }:
            if scope in self.tenant_limits:  # a key never exceeds its limit
                assert self.running_of(scope, tenant) <= self.tenant_limits[scope], (scope, tenant)
        released = {job_id for job_id, _ in claimed} - {row[3] for row in candidates}
        for job_id in released:  # a parent past its deadline died in this claim, and it runs anyway
            record = self.live()[job_id]
            assert record.on_parent_failure == ParentFailure.RUN, f"{job_id} was not claimable"
            assert set(record.after) & self.failed, f"{job_id} was not claimable"
        if not (self.throttles or self.paused or self.tenant_limits or self.tenant_throttles or released):
            self.turns.check(candidates, [job_id for job_id, _ in claimed])
        if len(claimed) < batch:  # nothing else was claimable
            for record in self.live().values():
                claimable = record.status is JobStatus.QUEUED and record.entrypoint in (
                    entrypoints or ENTRYPOINTS
                )
                claimable = (
                    claimable and (record.not_before or 0) <= now and (record.deadline or now + 1) > now
                )
                claimable = claimable and not self.tenant_blocked(record.entrypoint, record.tenant, now)
                if claimable and record.entrypoint not in self.paused and None not in self.paused:
                    assert self.claims_left(record.entrypoint, now) == 0

    @precondition(lambda self: bool(self.held))
    @rule(
        data=st.data(),
        action=st.sampled_from(["ack", "nack", "heartbeat", "release", "cancel"]),
        delay=st.sampled_from([None, 3]),
        progress=st.sampled_from([None, 0.0, 0.5, 1.0]),
    )
    def finish(self, data: st.DataObject, action: str, delay: int | None, progress: float | None) -> None:
        _, job_id, lease = data.draw(st.sampled_from(self.held))
        now = self.clock
        holder = self.live().get(job_id)
        holds = holder is not None and holder.status is JobStatus.IN_PROGRESS and holder.lease == lease
        decisions: dict[str, Callable[[QueueIndex], object]] = {
            "ack": lambda index: index.remove(job_id, lease, now, job_id.encode()),
            "nack": lambda index: index.nack(
                job_id, lease, now, None if delay is None else now + delay * SECOND, "err", MAX_ATTEMPTS
            ),
            "heartbeat": lambda index: index.heartbeat(job_id, now, lease, None, progress, "note"),
            "release": lambda index: index.release(job_id, lease, now),
            "cancel": lambda index: index.cancel(job_id, lease, now),
        }
        before = view(self.index)
        if not holds:
            ended = self.index.history.finished(job_id) if holder is None else None
            cancelled = ended is not None and ended.outcome is JobStatus.CANCELLED
            # a heartbeat of a job that ended cancelled tells its worker to stop the handler
            lost = JobCancelledError if action == "heartbeat" and cancelled else LeaseLostError
            with pytest.raises(lost):
                self.commit(decisions[action])
            assert view(self.index) == before
            return
        assert holder is not None
        asked = holder.cancel_requested is not None
        if action == "heartbeat" and asked:
            with pytest.raises(JobCancelledError):  # its worker is to stop it; nothing changes
                self.commit(decisions[action])
            assert view(self.index) == before
            return
        self.commit(decisions[action])
        if action == "ack":
            self.acked.add(job_id)
        elif action == "release" and not asked:
            self.released[job_id] = self.released.get(job_id, 0) + 1
        elif action == "heartbeat" and progress is not None:
            assert (holder.progress, holder.progress_note) == (progress, "note")
        if action == "cancel" or (asked and action in ("nack", "release")):
            assert job_id in self.cancelled
            assert job_id not in self.live()

    @rule(data=st.data())
    def an_operator_cancels(self, data: st.DataObject) -> None:
        live = [r for r in self.live().values() if r.status is not JobStatus.STAGED]
        if not live:
            return
        record = data.draw(st.sampled_from(live))
        running, asked = record.status is JobStatus.IN_PROGRESS, record.cancel_requested is not None
        done = self.commit(lambda index: index.cancel(record.id, None, self.clock))
        assert isinstance(done, list)
        kinds = [type(effect).__name__ for effect in done]
        assert kinds == ([] if asked else ["CancelAsked"] if running else ["Cancelled"])
        if running:
            assert self.live()[record.id].cancel_requested is not None  # asked; it still runs
            assert record.id not in self.cancelled
        else:
            assert record.id in self.cancelled
            assert record.id not in self.live()

    @rule(jump=st.sampled_from([-30, -1, 0, 1, 3, 15, 60]))
    def clock_jumps_and_leases_run_out(self, jump: int) -> None:
        self.clock += jump * SECOND
        now = self.clock
        expired = {
            r.id for r in self.live().values() if r.status is JobStatus.IN_PROGRESS and (r.expires or 0) < now
        }
        asked = {job_id for job_id in expired if self.live()[job_id].cancel_requested is not None}
        swept = self.commit(lambda index: index.requeue_expired(now, MAX_ATTEMPTS))
        assert isinstance(swept, list)
        assert {effect.job_id for effect in swept} == expired
        assert {e.job_id for e in swept if isinstance(e, Cancelled)} == asked  # not retried: cancelled

    @rule(
        batch=st.sampled_from(["w1", "w2"]), entrypoint=st.sampled_from(ENTRYPOINTS), size=st.integers(1, 3)
    )
    def stage(self, batch: str, entrypoint: str, size: int) -> None:
        ids = [str(uuid.uuid4()) for _ in range(size)]
        fields = [(job_id, entrypoint, 0, self.clock, JobStatus.STAGED, None, b"p") for job_id in ids]
        staged = [
            Added(*f, 0, None, None, None, None, None, None, None, None, None, (), batch) for f in fields
        ]
        self.commit(lambda index: index.apply_all(staged))
        self.enqueued.update(ids)
        self.attempts.update(dict.fromkeys(ids, 0))

    @rule(batch=st.sampled_from(["w1", "w2"]), keep=st.booleans())
    def publish_or_discard(self, batch: str, keep: bool) -> None:
        staged = {r.id for r in self.live().values() if r.status is JobStatus.STAGED and r.batch == batch}
        self.commit(lambda index: index.publish(batch) if keep else index.discard(batch))
        for job_id in staged:
            if keep:
                assert self.live()[job_id].status is JobStatus.QUEUED
            else:
                assert job_id not in self.live()
                self.purged.add(job_id)
        assert batch not in self.index.staged_batches()

    @rule(ids=st.booleans())
    def revive_dead(self, ids: bool) -> None:
        dead = [r.id for r in self.live().values() if r.status is JobStatus.DEAD]
        self.commit(lambda index: index.requeue_dead(dead[:1] if ids else None))
        for job_id in dead[:1] if ids else dead:
            self.attempts[job_id] = 0
            self.released.pop(job_id, None)

    @rule()
    def purge_dead(self) -> None:
        dead = [r.id for r in self.live().values() if r.status is JobStatus.DEAD]
        self.commit(lambda index: [index.remove(job_id, now=self.clock) for job_id in dead])
        self.purged.update(dead)

    @rule(
        scope=st.sampled_from([None, "a"]),
        claims=st.booleans(),
        limit=st.sampled_from([None, 0, 1, 2]),
        throttle=st.booleans(),
    )
    def steer(self, scope: str | None, claims: bool, limit: int | None, throttle: bool) -> None:
        effect = ThrottleSet(scope, limit, WINDOW) if throttle else PauseSet(scope, claims, False)
        self.commit(lambda index: index.apply(effect))
        if throttle:
            self.throttle_use.pop(scope, None)
            self.throttles.pop(scope, None)
            if limit is not None:
                self.throttles[scope] = limit
        elif claims:
            self.paused.add(scope)
        else:
            self.paused.discard(scope)

    @rule(
        scope=st.sampled_from([None, "a"]),
        limit=st.sampled_from([None, 0, 1, 2]),
        throttle=st.booleans(),
    )
    def steer_each_tenant(self, scope: str | None, limit: int | None, throttle: bool) -> None:
        effect = ThrottleSet(scope, limit, WINDOW, True) if throttle else LimitSet(scope, limit, True)
        self.commit(lambda index: index.apply(effect))
        kept = self.tenant_throttles if throttle else self.tenant_limits
        kept.pop(scope, None)
        if throttle:
            self.tenant_use.pop(scope, None)
        if limit is not None:
            kept[scope] = limit

    @rule(keep=st.integers(0, 4), age=st.integers(0, 60))
    def forget_history(self, keep: int, age: int) -> None:
        self.commit(lambda index: index.forget(self.clock - age * SECOND, keep))

    @rule(job_id=st.uuids().map(str))
    def unknown_jobs_are_reported(self, job_id: str) -> None:
        with pytest.raises(JobNotFoundError):
            self.commit(lambda index: index.nack(job_id, None, self.clock))

    @rule(data=st.data())
    def a_lost_transaction_changes_nothing(self, data: st.DataObject) -> None:
        before = view(self.index), list(self.index.history), self.index.controls.to_dict()
        self.index.journal.begin()
        now = self.clock + data.draw(st.integers(0, 30)) * SECOND
        self.index.requeue_expired(now, 1)
        self.index.claim(None, data.draw(st.integers(1, 4)), now, now + SECOND, lambda: "lost")
        records = list(self.live().values())
        for record in records[:2]:
            self.index.remove(record.id, None, now)
        for record in records[2:5]:
            if record.status is not JobStatus.WAITING:  # refused: it waits for its parents
                self.index.nack(record.id, None, now, now + SECOND, "lost", 1)
        self.index.requeue_dead()
        self.index.forget(now, 0)
        self.index.apply(ThrottleSet(None, 1, WINDOW))
        retried = str(uuid.uuid4())  # a commit that lost its race is applied again, same job
        self.index.apply(Added(retried, "a", 0, now, JobStatus.QUEUED, None, b"p"))
        self.index.journal.rollback()
        assert (view(self.index), list(self.index.history), self.index.controls.to_dict()) == before
        rival = str(uuid.uuid4())  # committed first by another writer, with the same priority and time
        for job_id in (rival, retried):
            self.commit(
                partial(QueueIndex.apply, effect=Added(job_id, "a", 0, now, JobStatus.QUEUED, None, b"p"))
            )
            self.enqueued.add(job_id)
            self.attempts[job_id] = 0

    @invariant()
    def each_job_is_in_exactly_one_state_and_nothing_is_lost(self) -> None:
        live = set(self.live())
        assert live | self.acked | self.purged | self.cancelled == self.enqueued
        gone = (self.acked, self.purged, self.cancelled)
        assert not any(live & ids for ids in gone)
        assert not (self.acked & self.purged) | (self.acked & self.cancelled) | (self.purged & self.cancelled)
        for record in self.live().values():
            assert record.status in (
                JobStatus.QUEUED,
                JobStatus.IN_PROGRESS,
                JobStatus.DEAD,
                JobStatus.STAGED,
                JobStatus.WAITING,
            )
            assert (record.status is JobStatus.STAGED) == (record.id in self.staged_ids())
            leased = record.status is JobStatus.IN_PROGRESS
            assert (record.lease is not None) == leased
            assert (
                (record.dead_reason is not None)
                == (record.dead_at is not None)
                == (record.status is JobStatus.DEAD)
            )
            assert len(record.claims) == record.attempts
            if record.status in (JobStatus.QUEUED, JobStatus.STAGED):  # a new attempt starts afresh
                assert (record.cancel_requested, record.progress, record.progress_note) == (None, None, None)
            if record.status is not JobStatus.IN_PROGRESS:
                assert record.cancel_requested is None

    @invariant()
    def a_job_waits_exactly_for_its_unsettled_parents(self) -> None:
        live = self.live()
        for record in live.values():
            if record.status is not JobStatus.STAGED:
                assert (record.status is JobStatus.WAITING) == bool(record.awaiting)
            assert set(record.awaiting) <= set(record.after)
            for parent in record.awaiting:  # a parent that ended settled its children then
                assert parent in live
                assert live[parent].status is not JobStatus.DEAD
                assert (record.id, parent) not in self.settled
        assert {r.id for r in live.values() if r.awaiting} == {
            child.id for parent in live for child in self.index.dependencies.children_of(parent)
        }

    def staged_ids(self) -> set[str]:
        staged = self.index.staged_batches()
        return {r.id for r in self.live().values() if r.batch in staged and r.status is JobStatus.STAGED}

    @invariant()
    def a_lease_is_held_by_at_most_one_claimant(self) -> None:
        for record in self.live().values():
            holders = [
                worker for worker, job_id, lease in self.held if job_id == record.id and lease == record.lease
            ]
            assert len(holders) == (1 if record.status is JobStatus.IN_PROGRESS else 0)

    @invariant()
    def attempts_never_decrease_except_when_a_dead_job_is_revived(self) -> None:
        for job_id, record in self.live().items():
            assert record.attempts >= self.attempts[job_id]
            self.attempts[job_id] = record.attempts

    @invariant()
    def no_job_is_claimed_more_often_than_allowed(self) -> None:
        """A failure after the last attempt kills a job; a release gives its claim back unfailed."""
        for record in self.live().values():
            assert record.attempts - self.released.get(record.id, 0) <= (record.max_attempts or MAX_ATTEMPTS)

    @invariant()
    def dead_jobs_used_their_attempts_or_their_time(self) -> None:
        for record in self.live().values():
            if record.dead_reason == "max_attempts":
                limit = record.max_attempts or MAX_ATTEMPTS
                assert record.attempts >= limit
            elif record.dead_reason == "ttl":
                assert record.deadline is not None
                assert record.dead_at is not None
                assert record.deadline <= record.dead_at

    @invariant()
    def history_holds_every_finished_job_not_forgotten(self) -> None:
        assert len(self.index.history) == self.finished - self.forgotten

    @invariant()
    def the_kept_counts_agree_with_the_jobs(self) -> None:
        # stats_of reads counts kept as jobs change; here they are counted afresh, job by job.
        records = list(self.live().values())
        columns = {name: [getattr(r, name) for r in records] for name in RECORD_COLUMNS}
        for index in (self.index, self.replica, QueueIndex.from_columns(1, columns)):
            expected: dict[str, list[int]] = {}
            for record in index.in_order():
                counts = expected.setdefault(record.entrypoint, [0] * 6)
                if record.status is JobStatus.QUEUED:
                    counts[int(record.not_before is not None and record.not_before > self.clock)] += 1
                else:
                    counts[
                        [JobStatus.IN_PROGRESS, JobStatus.DEAD, JobStatus.STAGED, JobStatus.WAITING].index(
                            record.status
                        )
                        + 2
                    ] += 1
            stats = stats_of(index, self.clock)
            found = {
                name: [s.queued, s.scheduled, s.in_progress, s.dead, s.staged, s.waiting]
                for name, s in stats.entrypoints.items()
            }
            assert found == expected
            dead = [r.id for r in index.in_order() if r.status is JobStatus.DEAD]
            assert sorted(index.tally.ids(DEAD)) == sorted(dead)

    @invariant()
    def the_replayed_log_agrees(self) -> None:
        assert view(self.replica) == view(self.index)
        assert list(self.replica.history) == list(self.index.history)
        assert self.replica.controls.to_dict() == self.index.controls.to_dict()


TestLifecycle = Lifecycle.TestCase
TestLifecycle.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
