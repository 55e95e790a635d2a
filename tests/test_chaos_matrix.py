"""tools/chaos_matrix.py: a quick row (a broker killed on a file root) passes its checks, the
checker reports each violation planted into that row's real histories, and the S3 proxy answers
the storms it is told to."""

from __future__ import annotations

import dataclasses
import sys
import urllib.error
import urllib.request

import pytest

from tool_runs import ROOT, run_tool

sys.path.insert(0, str(ROOT / "tools"))
from chaos_check import Ack, Call, Histories, Window, check
from s3_stack import BUCKET, S3Stack
from soak_failover import Load


@pytest.fixture(scope="module")
def quick_row(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Histories]:
    """The output of a quick ``kill`` row on a file root, and the histories it left."""
    kept = tmp_path_factory.mktemp("chaos")
    arguments = ["--quick", "--backends", "file", "--faults", "kill", "--keep", str(kept)]
    done = run_tool("chaos_matrix.py", *arguments)
    assert done.returncode == 0, done.stdout + done.stderr
    work_dir = kept / "file-kill"
    return done.stdout, Load(str(work_dir / "root"), work_dir, 1).histories()


def _window(histories: Histories) -> Window:
    """A window in which every job of a clean run counts and finished in the bound."""
    start = min(call.start for call in histories.calls)
    last = max(ack.at for ack in histories.acks)
    return Window(fault_end=start, tail=last - start, bound=last - start + 1, resumed=start)


def test_a_quick_row_passes_and_prints_its_counts(quick_row: tuple[str, Histories]) -> None:
    out, histories = quick_row
    row = next(line for line in out.splitlines() if line.startswith("| file | kill |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    enqueued, recovery, lost, acks_lost, twice = int(cells[3].replace(",", "")), *cells[5:9]
    assert enqueued > 0
    assert (recovery, lost, acks_lost, twice) == ("1.0000", "0", "0", "0")
    assert "killed http://127.0.0.1" in out
    verdict = check(histories, _window(histories))
    assert verdict.failures == []
    assert verdict.enqueued == enqueued
    assert verdict.counted == verdict.finished == enqueued


def test_the_checker_reports_a_job_acked_twice(quick_row: tuple[str, Histories]) -> None:
    _, histories = quick_row
    again = dataclasses.replace(histories.acks[0], client="work-9")
    verdict = check(dataclasses.replace(histories, acks=[*histories.acks, again]), _window(histories))
    assert verdict.twice == [again.job_id]
    assert any("acked twice" in failure for failure in verdict.failures)


def test_the_checker_reports_an_ack_missing_from_the_queue_history(quick_row: tuple[str, Histories]) -> None:
    _, histories = quick_row
    job_id = histories.acks[-1].job_id
    queue = {j: outcome for j, outcome in histories.queue.items() if j != job_id}
    verdict = check(dataclasses.replace(histories, queue=queue), _window(histories))
    assert verdict.acks_lost == [job_id]
    assert any("not acked in the queue's history" in failure for failure in verdict.failures)


def test_the_checker_reports_an_enqueue_that_returned_but_never_finished(
    quick_row: tuple[str, Histories],
) -> None:
    _, histories = quick_row
    first = histories.calls[0]
    planted = Call("produce-9", "enqueue", first.start, first.end, ("never-finished",))
    verdict = check(dataclasses.replace(histories, calls=[*histories.calls, planted]), _window(histories))
    assert verdict.lost == ["never-finished"]
    assert verdict.finished == verdict.counted - 1
    assert any("never finished" in failure for failure in verdict.failures)


def test_the_checker_tells_a_job_still_in_the_queue_from_a_lost_one(
    quick_row: tuple[str, Histories],
) -> None:
    _, histories = quick_row
    job_id = histories.acks[-1].job_id
    acks = [ack for ack in histories.acks if ack.job_id != job_id]
    queue = {j: outcome for j, outcome in histories.queue.items() if j != job_id}
    late = dataclasses.replace(histories, acks=acks, queue=queue, live={job_id: "in_progress"})
    verdict = check(late, _window(histories))
    assert (verdict.lost, verdict.unfinished) == ([], [job_id])
    assert any("still in the queue" in failure for failure in verdict.failures)


def test_the_checker_reports_a_job_finished_after_the_bound(quick_row: tuple[str, Histories]) -> None:
    _, histories = quick_row
    window = _window(histories)
    late = histories.acks[0]
    acks = [Ack(late.client, late.job_id, window.fault_end + window.bound + 1), *histories.acks[1:]]
    verdict = check(dataclasses.replace(histories, acks=acks), window)
    assert verdict.recovery < 1
    assert verdict.lost == []
    assert any("not finished within" in failure for failure in verdict.failures)
    unresumed = check(histories, dataclasses.replace(window, resumed=None))
    assert any("no enqueue begun after" in failure for failure in unresumed.failures)


def _answer(request: urllib.request.Request) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_s3_proxy_answers_the_storm_it_is_told_to() -> None:
    stack = S3Stack(0, 0)
    try:
        url = f"{stack.endpoint}/{BUCKET}/chaos-probe"
        stack.faults("slowdown", 1.0)
        status, body = _answer(urllib.request.Request(url, method="GET"))
        assert (status, b"<Code>SlowDown</Code>" in body) == (503, True)
        stack.faults("conflict", 1.0)
        conditional = {"If-None-Match": "*"}
        answers = [_answer(urllib.request.Request(url, b"x", conditional, method="PUT"))[0] for _ in range(2)]
        assert sorted(answers) == [409, 412]  # in turn
        assert sum(stack.counts().values()) == 0  # answered by the proxy, none forwarded
        # a PUT without a condition is no conflict: it reaches the store
        assert _answer(urllib.request.Request(url, b"x", method="PUT"))[0] == 200
        stack.faults("off")
        assert _answer(urllib.request.Request(url, method="GET"))[0] != 503  # moto's answer
        assert sum(stack.counts().values()) == 2
    finally:
        stack.stop()
