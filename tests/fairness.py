"""The fair share's rule, checked claim by claim (ADR 0021): shared by the lifecycle machine and
tests/test_fair_share.py."""

from __future__ import annotations

from typing import Any

Line = tuple[str, str | None]


class Turns:
    """Checks that claims serve the lines (an entrypoint's jobs of one tenant) in turn."""

    def __init__(self) -> None:
        self.waits: dict[Line, list[Line]] = {}
        """The lines served while a line had a job at their priority, by line."""

    def forget(self) -> None:
        """Start afresh (a new process: it serves the lines in turn from its own opening)."""
        self.waits.clear()

    def check(self, claimable: list[tuple[Any, ...]], claimed: list[str]) -> None:
        """Check that each job claimed (of ``claimable``: priority, created, insertion, id,
        entrypoint, tenant; in claim order) is at the best priority left and first in its line,
        and that while a line has a job at that priority, no other line of its entrypoint is
        served twice before it."""
        left = list(claimable)
        for job_id in claimed:
            job = next(row for row in left if row[3] == job_id)
            line = (job[4], job[5])
            assert job[0] == min(row[0] for row in left), f"{job_id} was claimed before a better priority"
            first = min(row[:3] for row in left if (row[4], row[5]) == line)
            assert job[:3] == first, f"{job_id} jumped its line"
            for empty in self.waits.keys() - {(row[4], row[5]) for row in left}:
                del self.waits[empty]  # it may leave the round, and come back last
            for waiting in {(row[4], row[5]) for row in left if row[:1] == job[:1] and row[4] == job[4]} - {
                line
            }:
                served = self.waits.setdefault(waiting, [])
                assert line not in served, f"{line} was served twice while {waiting} waited"
                served.append(line)
            self.waits[line] = []
            left.remove(job)
