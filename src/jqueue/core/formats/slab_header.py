"""A slab's header (``slab.py``): what a slab says of itself, and the checks that its claimable
rows' spans (per entrypoint, and per line when a job has a tenant) follow each other."""

from __future__ import annotations

import itertools

import msgspec

from jqueue.core.formats.wire import Count
from jqueue.domain.lines import Line


class SlabHeader(msgspec.Struct, forbid_unknown_fields=True):
    """What a slab says of itself: its rows, how many come before the claimable ones, each
    block's offset and length, each entrypoint's claimable rows (``[start, end)``), the
    largest insertion number of its jobs, its filter's checksum (its checkpoint says which
    log entries hold the payloads of its rows that count), and each block's lowest and
    highest insertion number (None in slabs written before they were: read from the blocks),
    and each line's claimable rows, in row order (None when no claimable row has a tenant:
    then each entrypoint's rows are its one line's)."""

    layout: str
    rows: Count
    held: Count
    blocks: list[tuple[Count, Count]]
    ranges: dict[str, tuple[Count, Count]]
    last_order: int
    filter_crc: Count
    orders: list[tuple[Count, Count]] | None = None
    lines: list[tuple[str, str | None, Count, Count]] | None = None

    def line_spans(self) -> dict[Line, tuple[int, int]]:
        """Return each line's claimable rows (``[start, end)``)."""
        if self.lines is None:
            return {(name, None): span for name, span in self.ranges.items()}
        return {(name, tenant): (start, end) for name, tenant, start, end in self.lines}


def check_spans(header: SlabHeader) -> None:
    """Check that the claimable rows' spans follow the held rows and each other, to the end.

    Raises
    ------
    ValueError
        If they do not.
    """
    _check_ranges(header)
    _check_lines(header)


def _check_lines(header: SlabHeader) -> None:
    if header.lines is None:
        return
    lines: dict[str, list[tuple[str, int, int]]] = {}
    for name, tenant, start, end in header.lines:
        lines.setdefault(name, []).append((tenant or "", start, end))
    if lines.keys() != header.ranges.keys():
        raise ValueError("its lines are not its entrypoints'")
    for name, spans in lines.items():
        bounds_fit = (spans[0][1], spans[-1][2]) == header.ranges[name]
        in_order = all(
            start < end and (start, tenant) == (before_end, max(before, tenant)) and before != tenant
            for (before, _, before_end), (tenant, start, end) in itertools.pairwise(spans)
        )
        if not bounds_fit or not in_order or spans[0][1] >= spans[0][2]:
            raise ValueError(f"the lines of {name[:100]!r} do not follow each other")


def _check_ranges(header: SlabHeader) -> None:
    bounds = sorted(header.ranges.values())
    if any(start >= end for start, end in bounds) or (bounds and bounds[0][0] != header.held):
        raise ValueError("its claimable rows do not follow its held rows")
    if any(end != start for (_, end), (start, _) in itertools.pairwise(bounds)):
        raise ValueError("its entrypoints' rows do not follow each other")
    if (bounds[-1][1] if bounds else header.held) != header.rows:
        raise ValueError("its entrypoints' rows do not end with it")
