"""What a long-running process keeps does not grow with what it has seen: history's indexes
hold only the records it holds, and a local queue's index of named objects adds nothing the
cyclic collector visits at each full collection (a broker holds an hour of commits)."""

from __future__ import annotations

import gc
from pathlib import Path

from jqueue.adapters.storage.segments import SegmentLog
from jqueue.domain.history import History
from jqueue.domain.models import JobStatus
from jqueue.domain.records import HistoryRecord


def test_history_forgets_the_ids_and_keys_of_the_records_it_drops() -> None:
    history = History()
    for number in range(5_000):
        outcome = JobStatus.ACKED if number % 2 else JobStatus.DEAD
        history.add(HistoryRecord(f"job-{number}", "e", 0, (1,), number, 1, outcome, dedup_key=f"k{number}"))
        if len(history) > 100:
            history.drop_oldest(len(history) - 100)
    assert history.finished("job-4999") is not None
    assert history.finished("job-0") is None
    assert history.acked("k4999", 0) is not None
    assert history.acked("k1", 0) is None
    assert len(history._ids) == 100  # not every id it ever held
    assert len(history._acked_keys) == 50


def test_named_objects_add_nothing_the_collector_visits(tmp_path: Path) -> None:
    log = SegmentLog(tmp_path / "segments")
    log.create("log/first", b"x")
    gc.collect()
    before = len(gc.get_objects())
    for number in range(3_000):
        log.create(f"log/{number:020d}", b"entry")
    gc.collect()
    assert len(gc.get_objects()) - before < 300
    assert log.get(f"log/{2999:020d}") == b"entry"
