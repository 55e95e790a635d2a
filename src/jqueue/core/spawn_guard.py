"""``refuse_while_spawning``: no queue opened and no worker started by a script that a spawned
handler process imports again."""

from __future__ import annotations

import multiprocessing

GUARD_HINT = (
    "a script that runs a Worker with in_process handlers must start it under "
    '`if __name__ == "__main__":`, since each handler process imports the script'
)


def refuse_while_spawning(what: str) -> None:
    """Raise ``RuntimeError`` in a spawned process that is importing its parent's script: code
    there that opens a queue or starts a worker is the script's, run again in every handler
    process (it would enqueue and claim as many times)."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(f"{what} as a handler process imported the script: {GUARD_HINT}")
