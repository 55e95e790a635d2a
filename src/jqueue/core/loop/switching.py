"""``quick_switches``: a short interpreter switch interval while a thread computes beside the loop.

The event loop's thread gives the interpreter lock up at each system call of a commit (a
write, a sync, a read) and, while another thread computes, waits the switch interval (5 ms
by default) to get it back, so a call that makes ten system calls waits 50 ms. While a
checkpoint is planned in a thread, the interval is 0.5 ms.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

QUICK_SWITCH_SECONDS = 0.0005
"""The switch interval while a thread of ours computes beside the event loop."""


class _Switching:
    """How many callers want quick switches, and the interval to restore after the last."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.saved = 0.0


_state = _Switching()


def _after_fork_in_child() -> None:
    """A child forked while a plan ran has no plan thread: it starts with the interval it had."""
    if _state.holders:
        sys.setswitchinterval(_state.saved)
    _state.lock, _state.holders = threading.Lock(), 0


os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def quick_switches() -> Iterator[None]:
    """Shorten the switch interval to ``QUICK_SWITCH_SECONDS`` (if it is longer) until the last
    caller leaves; the interval is then restored unless someone else changed it meanwhile."""
    with _state.lock:
        if _state.holders == 0:
            _state.saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_state.saved, QUICK_SWITCH_SECONDS))
        _state.holders += 1
    try:
        yield
    finally:
        with _state.lock:
            _state.holders -= 1
            if _state.holders == 0 and sys.getswitchinterval() == min(_state.saved, QUICK_SWITCH_SECONDS):
                sys.setswitchinterval(_state.saved)
