"""Which broker of a root serves each queue: rendezvous hashing with a bound on load.

Every broker computes the same placement from the same members, with no coordination: each
queue ranks the members by a hash of the pair, and goes to the first of its ranking that has
room (no member takes more than ``ceil(queues / members)``). A member that joins or leaves
moves about its share of the queues, not all of them (ADR 0022).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable


def _weight(unit: str, member: str) -> int:
    digest = hashlib.blake2b(f"{unit}\0{member}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def capacity(units: int, members: int) -> int:
    """The most units one member takes: ``ceil(units / members)``."""
    return math.ceil(units / members) if members else 0


def placement(units: Iterable[str], members: Iterable[str]) -> dict[str, str]:
    """Return the member that serves each unit (a queue's name), the same for any order of
    ``units`` and ``members``; empty without members.

    Units are placed in the order of their own hash, each on the member of its highest weight
    that has room, so that the first units placed are not always the same members' by name.
    """
    ranked = sorted(set(members))
    if not ranked:
        return {}
    names = sorted(set(units), key=lambda unit: (_weight(unit, ""), unit))
    room = dict.fromkeys(ranked, capacity(len(names), len(ranked)))
    placed: dict[str, str] = {}
    for unit in names:
        for member in sorted(ranked, key=lambda member: (-_weight(unit, member), member)):
            if room[member]:
                room[member] -= 1
                placed[unit] = member
                break
    return placed
