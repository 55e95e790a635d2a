"""``Checkpoints``: reading a checkpoint and its slabs into an index, and writing the next one
from what changed since (ADR 0015).

A checkpoint builds on the slabs of the last one this process wrote or loaded (its base).
Compaction deletes a slab only once no checkpoint names it, after deleting the checkpoints
it dooms (``Compactor``), so a new checkpoint whose base still exists once it is written
names only slabs that stay. A first checkpoint, or one after a failed write, writes every
live job into one new slab.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jqueue.core.formats.checkpoint import HistoryEncoder, decode_manifest
from jqueue.core.formats.collections_paused import collections_paused
from jqueue.core.log.compaction import Compactor
from jqueue.core.log.slab_load import loaded
from jqueue.core.log.slab_plan import Plan, plan
from jqueue.core.log.slabs import SlabSet
from jqueue.core.loop.retry import RetryPolicy
from jqueue.core.loop.store import describe_named
from jqueue.core.loop.switching import quick_switches
from jqueue.domain.errors import CorruptStateError
from jqueue.domain.index import QueueIndex
from jqueue.domain.records import Frozen
from jqueue.domain.times import span_micros, to_micros, utc_now
from jqueue.ports.storage import KeyedStoragePort, MappedStoragePort

if TYPE_CHECKING:
    from jqueue.core.log.store import LogSettings

_READ_CONCURRENCY = 8


class SlabsLostError(CorruptStateError):
    """A checkpoint just written may name slabs that compaction deleted meanwhile."""


@dataclass(frozen=True)
class Pending:
    """A checkpoint begun: the frozen index, when, the slabs it builds on, and whether it
    writes every job (then with each slab's rows taken at the freeze)."""

    index: QueueIndex
    jobs: Frozen
    at: int
    slabs: SlabSet
    every_job: bool
    taken: dict[int, bytes]


class Checkpoints:
    """The checkpoints of one log-structured queue, as one process reads and writes them.

    Parameters
    ----------
    keyed : KeyedStoragePort
        The queue's storage.
    retry : RetryPolicy
        How often to retry a failed read.
    settings : LogSettings
        The retention (and the part lifetime, for compaction).
    """

    def __init__(
        self,
        keyed: KeyedStoragePort,
        retry: RetryPolicy,
        settings: LogSettings,
    ) -> None:
        self.keyed = keyed
        self.retry = retry
        self.compactor = Compactor(keyed, settings.part_lifetime + settings.retention)
        self.slabs = SlabSet()
        self.history = HistoryEncoder()
        """Encodes the history of this queue's checkpoints (in the plan's thread)."""
        self._retention = span_micros(settings.retention)

    async def read(self, name: str) -> QueueIndex | str:
        """Return the index a checkpoint holds, or the name of the object that is gone if it or
        one of its slabs is (compacted since it was listed); the next checkpoint builds on it.

        Raises
        ------
        CorruptStateError
            If it or a slab is damaged, or they do not fit together.
        """
        data = await self.retry.get(self.keyed, name)
        if data is None:
            return name
        manifest = decode_manifest(data, describe_named(self.keyed, name))
        gate = asyncio.Semaphore(_READ_CONCURRENCY)

        async def fetch(slab: str) -> bytes | memoryview | None:
            async with gate:
                return await self.retry.mapped(self.keyed, slab)

        contents = await asyncio.gather(*(fetch(entry.name) for entry in manifest.slabs))
        present = [content for content in contents if content is not None]
        for entry, content in zip(manifest.slabs, contents, strict=True):
            if content is None:
                return entry.name
        locations = [describe_named(self.keyed, entry.name) for entry in manifest.slabs]
        with collections_paused():
            index, self.slabs, segments = loaded(
                manifest, present, locations, describe_named(self.keyed, name)
            )
        self.compactor.remember(name, segments, {entry.name for entry in manifest.slabs})
        return index

    def _late(self, written_at: int) -> bool:
        return to_micros(utc_now()) - written_at > self._retention // 2

    async def _withdraw(self, plan: Plan) -> None:
        """Delete a checkpoint just created that may name a lost slab, while it is younger than
        half the retention: no compaction can have kept it as the one it compacts up to (it
        stays otherwise, and the checkpoint of every job that follows replaces it)."""
        if not self._late(plan.at):
            await self.keyed.delete(plan.checkpoint)

    def forget(self) -> None:
        """The index was replaced by one no checkpoint holds: the next checkpoint writes every job."""
        self.slabs = SlabSet()

    def freeze(self, index: QueueIndex) -> Pending:
        """Freeze ``index`` for the next checkpoint (on the event loop, O(1) unless it writes every job)."""
        slabs = self.slabs
        every_job = slabs.checkpoint is None
        taken = slabs.taken_now() if every_job else {}
        return Pending(
            index, index.freeze(every_job=every_job), to_micros(utc_now()), slabs, every_job, taken
        )

    async def write(self, pending: Pending) -> None:
        """Make the checkpoint of a frozen index in a thread (commits go on meanwhile) and store
        its new slab, then itself; a checkpoint that fails makes the next one write every job.

        Raises
        ------
        SlabsLostError
            If compaction may have deleted a slab it names (its base went meanwhile, or its
            slab took half the retention): it is deleted again, and the next checkpoint,
            which writes every job, should follow at once.
        """
        base = None if pending.every_job else pending.slabs.checkpoint
        try:
            plan = await self._plan(pending)
            await self._store(plan, base)
        except BaseException:
            pending.slabs.forget()
            raise
        pending.slabs.adopt(plan, pending.index)
        if plan.slab is not None and isinstance(self.keyed, MappedStoragePort):
            await self._map(pending.slabs, plan.slab.number, plan.slab.name)

    async def _map(self, slabs: SlabSet, number: int, name: str) -> None:
        """Read slab number ``number`` of ``slabs``, just stored as ``name``, from a mapping of
        its object from now on (it stays in memory if that fails: a map is only a saving)."""
        assert isinstance(self.keyed, MappedStoragePort)
        with contextlib.suppress(Exception):
            mapped = await self.keyed.mapped(name)
            slab = next((slab for slab in slabs.slabs if slab.number == number), None)
            if mapped is not None and slab is not None:
                slab.opened = slab.opened.moved_to(mapped)

    async def _plan(self, pending: Pending) -> Plan:
        """Run the plan in a thread, and thaw the index once the thread is done with it (even if
        this call is cancelled meanwhile)."""
        tag = uuid.uuid4().hex[:8]
        # Commits go on meanwhile: their waits for the interpreter lock stay short, and neither
        # thread sets off collections over the rows the plan makes and drops.
        with quick_switches(), collections_paused():
            planning = asyncio.ensure_future(
                asyncio.to_thread(
                    plan,
                    pending.slabs,
                    pending.jobs,
                    pending.at,
                    tag,
                    every_job=pending.every_job,
                    taken=pending.taken,
                    history=self.history,
                )
            )
            try:
                return await asyncio.shield(planning)
            finally:
                try:
                    if not planning.done():
                        await asyncio.wait({planning})
                finally:
                    pending.index.thaw()

    async def _store(self, plan: Plan, base: str | None) -> None:
        """Create the new slab, then the checkpoint, then make sure that the slabs it names
        outlive it (§6 of architecture.md, rule 5): its base still exists, and its new slab
        was named no more than half the retention before the checkpoint was created."""
        name = plan.checkpoint
        where, written_at = describe_named(self.keyed, name), to_micros(utc_now())
        manifest = plan.manifest(written_at)
        if plan.slab is not None:
            await self.keyed.create(plan.slab.name, plan.content)
        if self._late(written_at):
            raise TimeoutError(f"{where}: its slab took over half the retention to write")
        try:
            await self.keyed.create(name, manifest)
        except BaseException:  # it may have landed: it must not stay unchecked
            with contextlib.suppress(Exception):
                await self._withdraw(plan)
            raise
        named = {slab.name for slab in plan.slabs}
        if self._late(written_at) or (base is not None and base not in await self.keyed.list_names(base)):
            await self._withdraw(plan)
            raise SlabsLostError(where, "a slab it names may have been compacted while it was written")
        self.compactor.remember(name, plan.segments, named)
