"""Merges of slabs in tests that plan checkpoints themselves: begun after a checkpoint and
taken at the next freeze, as ``Checkpoints`` runs them, so that the changes and checkpoints in
between drop rows from the slabs a merge retires."""

from __future__ import annotations

import uuid

from jqueue.core.formats.slab import slab_name
from jqueue.core.log.slab_plan import Merged, merge, merge_due
from jqueue.core.log.slabs import SlabSet


class Merging:
    """At most one merge at a time, of slabs of size classes of ``unit`` rows, two at once (so
    that merges are frequent)."""

    def __init__(self, unit: int) -> None:
        self.unit = unit
        self.done: Merged | None = None
        self.taken = 0

    def begin(self, slabs: SlabSet) -> None:
        """Begin (and run: it reads only what the merge began with) the merge ``slabs`` call for."""
        if self.done is None and (begun := merge_due(slabs, self.unit, fanout=2)) is not None:
            self.done = merge(begun)

    def take(self, slabs: SlabSet, stored: dict[str, bytes], at: int) -> None:
        """Store the merged slab in ``stored`` and put it in place of the slabs it retires."""
        merged, self.done = self.done, None
        if merged is None:
            return
        if merged.slab is not None:
            merged.slab.name = slab_name(0, at, uuid.uuid4().hex[:8])
            stored[merged.slab.name] = merged.content
        self.taken += slabs.take_merge(merged)
        for slab in merged.retired:
            slab.drops_since = None
