"""The brokers of one root as a state machine (issue 52): brokers join, look, commit, die,
freeze and thaw in any order, on a clock the test moves. The real ``Members`` and
``SharedRoot`` of ``jqueue serve`` run on a memory root, one event loop, no HTTP.

After every step, every queue's log was written by its owner alone: each entry's writer is
the owner that the newest ``Owned`` entry before it names, so a broker that lost a queue
(dead, frozen, or late to look) committed nothing after it. Once the brokers are stable (the
frozen ones let go, every live one looking while the clock passes the staleness bound), each
queue is owned, in its log and in the brokers' own view, by exactly one live broker: the one
the placement gives it."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable
from typing import TypeVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from jqueue.adapters.service.server.catalog import added
from jqueue.adapters.service.server.host import QueueHost
from jqueue.adapters.service.server.members import Members
from jqueue.adapters.service.server.sharing import SharedRoot
from jqueue.adapters.service.wire.root import root_storage
from jqueue.core.formats.entry import ENTRY_PREFIX, decode_entry, entry_seq
from jqueue.domain.effects import Owned
from jqueue.domain.errors import NotOwnerError
from jqueue.domain.placement import placement
from jqueue.ports.storage import KeyedStoragePort

T = TypeVar("T")
QUEUES = [f"q{n}" for n in range(4)]
RENEW_EVERY, STALE_AFTER = 0.2, 1.0


class Clock:
    """The monotonic clock ``Members`` judges beats by, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


class Ownership(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.root = f"memory://ownership-{uuid.uuid4().hex}"
        self.clock = Clock()
        self.brokers: dict[str, SharedRoot] = {}
        self.live: set[str] = set()
        self.frozen: set[str] = set()
        """Brokers that do nothing until thawed, then go on from what they believed."""
        catalog = QueueHost(self.root).catalog
        for name in QUEUES:
            self.run(catalog.change(added(name)))

    def run(self, call: Awaitable[T]) -> T:
        return self.loop.run_until_complete(call)

    def teardown(self) -> None:
        for shared in self.brokers.values():
            self.run(shared.host.close())
            self.run(shared.members.close())
        self.loop.close()

    def _pick(self, data: st.DataObject, among: set[str]) -> str:
        return data.draw(st.sampled_from(sorted(among)))

    async def _look(self, shared: SharedRoot) -> None:
        """What a live broker does every ``renew_every``: raise its beat, and look."""
        await shared.members.beat()
        await shared.look()

    # --- brokers come and go ------------------------------------------------------------

    @precondition(lambda self: len(self.brokers) < 6)
    @rule()
    def start(self) -> None:
        owner = f"b{len(self.brokers) + 1}"
        members = Members(
            self.root,
            owner,
            f"http://{owner}",
            renew_every=RENEW_EVERY,
            stale_after=STALE_AFTER,
            clock=self.clock.monotonic,
        )
        shared = SharedRoot(QueueHost(self.root), members)
        self.run(members.open())
        self.run(self._look(shared))
        self.brokers[owner] = shared
        self.live.add(owner)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def look(self, data: st.DataObject) -> None:
        self.run(self._look(self.brokers[self._pick(data, self.live)]))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        self.live.discard(self._pick(data, self.live))  # it never acts again; its beat stops

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def freeze(self, data: st.DataObject) -> None:
        broker = self._pick(data, self.live)
        self.live.discard(broker)
        self.frozen.add(broker)

    @precondition(lambda self: self.frozen)
    @rule(data=st.data())
    def thaw(self, data: st.DataObject) -> None:
        broker = self._pick(data, self.frozen)
        self.frozen.discard(broker)
        self.live.add(broker)

    @rule(seconds=st.sampled_from([0.1, 0.5, 1.2]))
    def time_passes(self, seconds: float) -> None:
        self.clock.now += seconds

    @precondition(lambda self: self.live)
    @rule(data=st.data(), name=st.sampled_from(QUEUES))
    def commit(self, data: st.DataObject, name: str) -> None:
        """A call the broker serves as the owner it believes it is (a thawed one believes what
        it did before its freeze): it lands only if the queue's log says so."""
        broker = self._pick(data, self.live)
        host = self.brokers[broker].host
        if not host.owns(name):
            return
        queue = host.open_queues()[name]
        try:
            self.run(queue.enqueue("e", broker.encode()))
        except NotOwnerError:
            self.run(host.give_up(name))  # as Service.failed does

    # --- what must hold -------------------------------------------------------------------

    @invariant()
    def each_log_was_written_by_its_owner_alone(self) -> None:
        for name in QUEUES:
            self.run(self._check_writers(name))

    async def _check_writers(self, name: str) -> None:
        storage = root_storage(self.root, name)
        assert isinstance(storage, KeyedStoragePort)
        owner: str | None = None
        for entry_name in sorted(await storage.list_names(ENTRY_PREFIX)):
            seq, data = entry_seq(entry_name), await storage.get(entry_name)
            if seq is None or data is None:
                continue
            entry = decode_entry(data, seq, entry_name)
            owner = next((e.owner for e in entry.effects if isinstance(e, Owned)), owner)
            writer = entry.commit.partition("/")[0] if "/" in entry.commit else ""
            assert owner is None or not writer or writer == owner, (
                f"{name}: entry {seq} written by {writer} while {owner} owned the queue"
            )

    @precondition(lambda self: self.live or self.frozen)
    @rule()
    def once_stable_each_queue_has_one_live_owner(self) -> None:
        """Thaw the frozen brokers, then let every broker look while the clock passes the
        staleness bound a few times: the dead ones are taken out and their queues placed anew."""
        self.live |= self.frozen
        self.frozen.clear()
        for _ in range(4):
            self.clock.now += STALE_AFTER + RENEW_EVERY
            for owner in sorted(self.live):
                self.run(self._look(self.brokers[owner]))
        for owner in sorted(self.live):
            self.run(self._look(self.brokers[owner]))  # each sees the others' last changes
        placed = placement(QUEUES, {owner: f"http://{owner}" for owner in self.live})
        for name in QUEUES:
            believers = [owner for owner in sorted(self.live) if self.brokers[owner].host.owns(name)]
            assert believers == [placed[name]], f"{name}: owned by {believers}, placed on {placed[name]}"
            logged = self.run(self.brokers[placed[name]].host.open_queues()[name].owner())
            assert logged is not None
            assert logged.owner == placed[name]
        for owner in self.live:
            assert sorted(self.brokers[owner].members.addresses) == sorted(self.live)


Ownership.TestCase.settings = settings(max_examples=30, stateful_step_count=25, deadline=None)
TestOwnership = Ownership.TestCase
