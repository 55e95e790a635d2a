"""``give_back_memory``: the C allocator's free pages in the middle of its heap go back to the
system (what a merge of slabs frees would otherwise stay resident)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from jqueue.core.loop import memory
from jqueue.core.loop.memory import give_back_memory

FREED_HEAP = """
import sys
from pathlib import Path
from jqueue.core.loop import memory
from jqueue.core.loop.memory import give_back_memory

def anon_mib():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) // 1024

blocks, pins = [], []
for n in range(2000):  # 200 MB of blocks, each followed by a small block that stays
    blocks.append(bytes(100_000) + bytes([n % 256]))
    pins.append(bytes(600) + bytes([n % 256]))
del blocks
before = anon_mib()
given = give_back_memory()
print(before, anon_mib(), given)
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_the_free_middle_of_the_heap_goes_back_to_the_system() -> None:
    done = subprocess.run([sys.executable, "-c", FREED_HEAP], capture_output=True, text=True, check=True)
    before, after, given = done.stdout.split()
    assert given == "True"
    assert int(before) - int(after) > 100, done.stdout  # of the 200 MB freed, pinned in place


def test_it_says_whether_it_could() -> None:
    assert give_back_memory() is (platform.libc_ver()[0] == "glibc")


def test_trims_come_at_most_once_every_trim_every(monkeypatch: pytest.MonkeyPatch) -> None:
    trims: list[int] = []
    monkeypatch.setattr(memory, "_trim", lambda: trims.append)
    monkeypatch.setattr(memory, "_last_trim", -memory.TRIM_EVERY)
    assert give_back_memory()
    assert give_back_memory()  # asked again at once: the heaps were walked a moment ago
    assert trims == [0]
